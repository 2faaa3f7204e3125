//! libFuzzer entry for `zt_open`: the body is `tensorlane_fuzz_targets::zt_open` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/zt_open/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::zt_open(data));
