//! libFuzzer entry for `zt_legacy`: the body is `tensorlane_fuzz_targets::zt_legacy` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/zt_legacy/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::zt_legacy(data));
