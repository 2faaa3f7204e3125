//! libFuzzer entry for `wire_stream`: the body is `tensorlane_fuzz_targets::wire_stream` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/wire_stream/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::wire_stream(data));
