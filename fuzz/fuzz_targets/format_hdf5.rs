//! libFuzzer entry for `format_hdf5`: the body is `tensorlane_fuzz_targets::format_hdf5` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/format_hdf5/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::format_hdf5(data));
