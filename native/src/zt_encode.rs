//! Encoders for `.zt` part encodings (spec §8). Decoding lives in [`tensorlane_core::zt::seekable`].
//!
//! [`encode_seekable`] writes the standard zstd seekable format with ruzstd (pure Rust): independent
//! frames of `frame_size` decoded bytes (the last one shorter), each with a content checksum, then
//! the seek table (descriptor 0, no checksum column), as the reference writer does. ruzstd
//! implements only its "fastest" level (about zstd level 1), so its output differs from the
//! reference's level-3 bytes; any zstd decoder reads both.

pub use ruzstd::encoding::CompressionLevel;
use tensorlane_core::zt::seekable::{MAX_FRAME_DECODED, SEEKABLE_MAGIC, SKIPPABLE_MAGIC};

use crate::Error;

/// The reference writer's frame size: 1 MiB.
pub const DEFAULT_FRAME_SIZE: usize = 1 << 20;

/// Encodes `bytes` as `zt.zstd-seekable/1`: frames of `frame_size` decoded bytes (1..=16 MiB).
///
/// `level` is ruzstd's; `Default`, `Better` and `Best` are not implemented by ruzstd 0.9 and fall
/// back to `Fastest`. The result decodes with
/// [`tensorlane_core::zt::seekable::decode`] to `bytes` (`decoded_length = bytes.len()`).
pub fn encode_seekable(bytes: &[u8], frame_size: usize, level: CompressionLevel) -> Result<Vec<u8>, Error> {
    let too_large = || Error::EncodeTooLarge { bytes: bytes.len() };
    if frame_size == 0 || frame_size > MAX_FRAME_DECODED as usize {
        return Err(Error::FrameSize { size: frame_size });
    }
    let level = match level {
        CompressionLevel::Uncompressed => CompressionLevel::Uncompressed,
        _ => CompressionLevel::Fastest,
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 + 64);
    let mut entries: Vec<(u32, u32)> = Vec::new();
    for chunk in bytes.chunks(frame_size) {
        let start = out.len();
        ruzstd::encoding::compress(chunk, &mut out, level);
        let c = u32::try_from(out.len() - start).map_err(|_| too_large())?;
        entries.push((c, chunk.len() as u32));
    }
    let n = u32::try_from(entries.len()).map_err(|_| too_large())?;
    let content_len = u32::try_from(entries.len() as u64 * 8 + 9).map_err(|_| too_large())?;
    out.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    out.extend_from_slice(&content_len.to_le_bytes());
    for (c, d) in &entries {
        out.extend_from_slice(&c.to_le_bytes());
        out.extend_from_slice(&d.to_le_bytes());
    }
    out.extend_from_slice(&n.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorlane_core::zt::seekable;

    #[test]
    fn round_trip_small() {
        let data: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        for fs in [1, 7, 4096, 1 << 20] {
            let enc = encode_seekable(&data[..fs.min(5000) * 3 % data.len()], fs, CompressionLevel::Fastest).unwrap();
            let n = fs.min(5000) * 3 % data.len();
            assert_eq!(seekable::decode(&enc, n as u64).unwrap(), &data[..n]);
        }
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;
    use tensorlane_core::zt::seekable::{self, SeekTable};

    #[test]
    fn multi_frame_round_trip_and_range() {
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 29) as u8 ^ (i / 1000) as u8)
            .collect();
        let enc = encode_seekable(&data, DEFAULT_FRAME_SIZE, CompressionLevel::Fastest).unwrap();
        let n = data.len() as u64;
        let t = SeekTable::parse(&enc, n).unwrap();
        assert_eq!(t.frames.len(), 3);
        assert!(t.frames.iter().all(|f| f.checksum.is_none()));
        assert_eq!(seekable::decode(&enc, n).unwrap(), data);
        let r = seekable::read_range(&enc, n, (1 << 20) - 5, 10).unwrap();
        assert_eq!(r, &data[(1 << 20) - 5..(1 << 20) + 5]);
        let unc = encode_seekable(&data[..5000], 1000, CompressionLevel::Uncompressed).unwrap();
        assert_eq!(seekable::decode(&unc, 5000).unwrap(), &data[..5000]);
        assert_eq!(encode_seekable(&[], 1, CompressionLevel::Default).unwrap().len(), 17);
        assert!(matches!(
            encode_seekable(&data, 0, CompressionLevel::Fastest),
            Err(Error::FrameSize { size: 0 })
        ));
        assert!(matches!(
            encode_seekable(&data, (16 << 20) + 1, CompressionLevel::Fastest),
            Err(Error::FrameSize { size }) if size == (16 << 20) + 1
        ));
    }
}
