//! libFuzzer entry for `bindings_stats`: the body is `tensorlane_fuzz_targets::bindings_stats` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/bindings_stats/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::bindings_stats(data));
