//! libFuzzer entry for `bindings_formats`: the body is `tensorlane_fuzz_targets::bindings_formats` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/bindings_formats/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::bindings_formats(data));
