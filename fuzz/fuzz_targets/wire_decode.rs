//! libFuzzer entry for `wire_decode`: the body is `tensorlane_fuzz_targets::wire_decode` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/wire_decode/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::wire_decode(data));
