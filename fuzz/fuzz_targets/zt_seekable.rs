//! Any bytes as `zt.zstd-seekable/1` stored bytes. The first 16 input bytes choose
//! `decoded_length` (u32), a range offset and length; the rest is the stored stream. Parsing,
//! range reads and (for streams declaring at most 64 MiB) full decoding must never panic, and
//! whatever decodes has exactly the requested length and agrees with the full decode.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorlane_core::zt::seekable::{self, SeekTable};

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let word = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().unwrap());
    let stored = &data[16..];
    // Either take decoded_length from the input, or from the seek table itself (so that valid
    // tables are reached often).
    let decoded_length = if word(0) & 1 == 0 {
        u64::from(word(4))
    } else {
        match SeekTable::parse(stored, 0) {
            Ok(t) => t.decoded_length,
            Err(e) => e.message.rsplit_once("frames add up to ").and_then(|(_, r)| r.split(' ').next()?.parse().ok()).unwrap_or(0),
        }
    };
    let Ok(table) = SeekTable::parse(stored, decoded_length) else { return };
    let offset = u64::from(word(8)) % (decoded_length + 1);
    let len = (u64::from(word(12)) % (1 << 20)).min(decoded_length - offset);
    let range = seekable::read_range(stored, decoded_length, offset, len);
    if let Ok(r) = &range {
        assert_eq!(r.len() as u64, len);
    }
    if decoded_length <= 64 << 20 {
        if let Ok(all) = seekable::decode(stored, decoded_length) {
            assert_eq!(all.len() as u64, decoded_length);
            assert_eq!(table.frames.len(), SeekTable::parse(stored, decoded_length).unwrap().frames.len());
            if let Ok(r) = range {
                assert_eq!(&r[..], &all[offset as usize..(offset + len) as usize]);
            }
        }
    }
});
