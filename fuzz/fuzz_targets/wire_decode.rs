//! Any bytes: decode, measure and re-encode must never panic, and a packet that decodes must
//! re-encode to bytes that decode and re-encode to themselves (compared as bytes: scales may be
//! NaN, which no `==` on values would accept).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorlane_core::wire::{self, DecodeOptions, EncodeOptions};

fuzz_target!(|data: &[u8]| {
    let _ = wire::measure(data);
    let opts = DecodeOptions { max_decompressed_bytes: 64 << 20, ..Default::default() };
    if let Ok(d) = wire::decode_with(data, &opts) {
        if let Ok(again) = wire::encode(&d.packet, &EncodeOptions::default()) {
            let back = wire::decode_with(&again, &opts).expect("re-encoded packet must decode");
            let third = wire::encode(&back.packet, &EncodeOptions::default()).expect("decoded packet must encode");
            assert_eq!(third, again);
        }
    }
});
