//! libFuzzer entry for `formats_tenso`: the body is `tensorlane_fuzz_targets::formats_tenso` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/formats_tenso/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::formats_tenso(data));
