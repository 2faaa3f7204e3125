//! libFuzzer entry for `bindings_packets`: the body is `tensorlane_fuzz_targets::bindings_packets` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/bindings_packets/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::bindings_packets(data));
