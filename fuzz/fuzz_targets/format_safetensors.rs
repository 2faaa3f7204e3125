//! libFuzzer entry for `format_safetensors`: the body is `tensorlane_fuzz_targets::format_safetensors` (see its docs), which
//! `cargo test -p tensorlane-fuzz-targets` also replays over `fuzz/corpus/format_safetensors/`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tensorlane_fuzz_targets::format_safetensors(data));
