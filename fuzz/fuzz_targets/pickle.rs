//! libFuzzer entry for `pickle`: the body is `tensorlane_fuzz_targets::pickle` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/pickle/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::pickle(data));
