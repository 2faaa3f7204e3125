//! libFuzzer entry for `format_pt`: the body is `tensorlane_fuzz_targets::format_pt` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/format_pt/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::format_pt(data));
