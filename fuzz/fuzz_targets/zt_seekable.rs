//! libFuzzer entry for `zt_seekable`: the body is `tensorlane_fuzz_targets::zt_seekable` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/zt_seekable/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::zt_seekable(data));
