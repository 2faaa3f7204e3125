//! LZ4 *frame* format, as Tenso uses it for compressed dense bodies.
//!
//! Decoding is hand-written over `lz4_flex`'s block decoder because it must be bounded and
//! `no_std`: the output never grows past the size the shape declares, a declared content size
//! is checked before any work, and linked blocks, block and content checksums (xxh32) and every
//! block size are supported, as any LZ4 frame writer may produce them.
//!
//! Encoding uses `lz4_flex::frame::FrameEncoder` with one `write_all` (tenso's exact bytes) when
//! the `std` feature is on; without it a hand-written writer emits the same frame header and
//! independent blocks from `lz4_flex`'s block compressor (byte-identical for bodies up to one
//! 4 MiB block; larger bodies may differ in bytes but decode identically everywhere).

use alloc::format;
use alloc::vec::Vec;

use xxhash_rust::xxh32::xxh32;

use super::error::{Error, ErrorKind, Result};

const MAGIC: u32 = 0x184D_2204;
const WINDOW: usize = 64 * 1024;

/// A malformed frame: [`ErrorKind::Lz4`] saying how, at `at` (an offset within the frame; the
/// decoder shifts it to the packet).
fn malformed<T>(msg: impl Into<alloc::string::String>, at: usize) -> Result<T> {
    Err(Error::new(ErrorKind::Lz4(msg.into()), at))
}

/// A frame that decodes (or declares that it decodes) to other than the `expected` bytes:
/// [`ErrorKind::DecompressedSize`].
fn size_error<T>(expected: u64, actual: u64, at: usize) -> Result<T> {
    Err(Error::new(ErrorKind::DecompressedSize { expected, actual }, at))
}

/// The block maximum size tenso's encoder (lz4_flex `BlockSize::from_buf_length`) picks for a body.
fn block_size_code(len: usize) -> (u8, usize) {
    if len <= 64 * 1024 {
        (0x40, 64 * 1024)
    } else if len <= 256 * 1024 {
        (0x50, 256 * 1024)
    } else {
        (0x70, 4 * 1024 * 1024)
    }
}

/// What a frame's header (magic and descriptor) declares.
struct FrameHeader {
    /// Blocks do not refer back to earlier blocks.
    independent: bool,
    /// Each block is followed by its xxh32.
    block_checksum: bool,
    /// The EndMark is followed by the xxh32 of the whole content.
    content_checksum: bool,
    /// The largest decoded size of one block.
    block_max: usize,
    /// Where the first block starts.
    body_start: usize,
}

/// Reads and checks a frame's magic and descriptor (version, reserved bits, block size code, a
/// declared content size against `expected`, no dictionary, the header checksum).
fn frame_header(frame: &[u8], expected: usize) -> Result<FrameHeader> {
    if frame.len() < 7 {
        return malformed("frame shorter than its 7-byte header", 0);
    }
    let magic = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if magic != MAGIC {
        return malformed(
            format!(
                "magic {magic:#010x} is not an LZ4 frame (04 22 4d 18); raw LZ4 block bodies are not Tenso packets"
            ),
            0,
        );
    }
    let flg = frame[4];
    let bd = frame[5];
    if flg >> 6 != 1 {
        return malformed(
            format!("frame version {} (FLG {flg:#04x}); only version 01 exists", flg >> 6),
            4,
        );
    }
    if flg & 0x02 != 0 || bd & 0x8F != 0 {
        return malformed("reserved bits set in the frame descriptor", 4);
    }
    let independent = flg & 0x20 != 0;
    let block_checksum = flg & 0x10 != 0;
    let has_content_size = flg & 0x08 != 0;
    let content_checksum = flg & 0x04 != 0;
    let has_dict_id = flg & 0x01 != 0;
    let block_max = match (bd >> 4) & 7 {
        4 => 64 * 1024,
        5 => 256 * 1024,
        6 => 1024 * 1024,
        7 => 4 * 1024 * 1024,
        b => return malformed(format!("block maximum size code {b} is not 4..=7"), 5),
    };
    let mut pos = 6;
    let desc_end = pos + if has_content_size { 8 } else { 0 } + if has_dict_id { 4 } else { 0 };
    if frame.len() < desc_end + 1 {
        return malformed("frame descriptor is truncated", 4);
    }
    if has_content_size {
        let mut a = [0u8; 8];
        a.copy_from_slice(&frame[pos..pos + 8]);
        let cs = u64::from_le_bytes(a);
        if cs != expected as u64 {
            return size_error(expected as u64, cs, pos);
        }
        pos += 8;
    }
    if has_dict_id {
        return malformed("the frame needs a preset dictionary, which Tenso never uses", pos);
    }
    let hc = ((xxh32(&frame[4..desc_end], 0) >> 8) & 0xFF) as u8;
    if hc != frame[desc_end] {
        return malformed(
            format!("header checksum {:#04x} should be {hc:#04x}", frame[desc_end]),
            desc_end,
        );
    }
    Ok(FrameHeader {
        independent,
        block_checksum,
        content_checksum,
        block_max,
        body_start: desc_end + 1,
    })
}

/// Decodes a whole LZ4 frame that must produce exactly `expected` bytes.
///
/// Leniency matches tenso: a frame cut short by up to 3 bytes of its EndMark is accepted, and bytes
/// after the EndMark are ignored. The output grows only with bytes actually produced, and decoding
/// stops as soon as the output would exceed `expected`.
pub fn decompress_frame(frame: &[u8], expected: usize) -> Result<Vec<u8>> {
    let FrameHeader {
        independent,
        block_checksum,
        content_checksum,
        block_max,
        body_start,
    } = frame_header(frame, expected)?;
    let mut pos = body_start;
    let mut out: Vec<u8> = Vec::new();
    loop {
        if frame.len() - pos < 4 {
            // tenso accepts a frame whose EndMark is cut short (or missing).
            break;
        }
        let word = u32::from_le_bytes([frame[pos], frame[pos + 1], frame[pos + 2], frame[pos + 3]]);
        let block_at = pos;
        pos += 4;
        if word == 0 {
            if content_checksum {
                if frame.len() - pos < 4 {
                    return malformed("content checksum is missing after the EndMark", pos);
                }
                let want = u32::from_le_bytes([frame[pos], frame[pos + 1], frame[pos + 2], frame[pos + 3]]);
                if xxh32(&out, 0) != want {
                    return malformed("content checksum mismatch", pos);
                }
            }
            break;
        }
        let stored = word & 0x8000_0000 != 0;
        let len = (word & 0x7FFF_FFFF) as usize;
        if len > block_max {
            return malformed(
                format!("block of {len} bytes exceeds the frame's {block_max}-byte maximum"),
                block_at,
            );
        }
        if frame.len() - pos < len + if block_checksum { 4 } else { 0 } {
            return malformed(format!("block of {len} bytes runs past the end of the frame"), block_at);
        }
        let data = &frame[pos..pos + len];
        pos += len;
        if block_checksum {
            let want = u32::from_le_bytes([frame[pos], frame[pos + 1], frame[pos + 2], frame[pos + 3]]);
            if xxh32(data, 0) != want {
                return malformed("block checksum mismatch", block_at);
            }
            pos += 4;
        }
        let room = expected - out.len();
        if stored {
            if len > room {
                return size_error(expected as u64, (out.len() + len) as u64, block_at);
            }
            out.extend_from_slice(data);
            continue;
        }
        if room == 0 {
            // A block that produces anything would overflow; an empty compressed block is 1 byte.
            if len > 1 {
                return size_error(expected as u64, out.len() as u64 + 1, block_at);
            }
        }
        let start = out.len();
        let cap = room.min(block_max);
        out.resize(start + cap, 0);
        let (prev, dst) = out.split_at_mut(start);
        let dict = if independent {
            &[][..]
        } else {
            &prev[prev.len().saturating_sub(WINDOW)..]
        };
        let r = if dict.is_empty() {
            lz4_flex::block::decompress_into(data, dst)
        } else {
            lz4_flex::block::decompress_into_with_dict(data, dst, dict)
        };
        match r {
            Ok(n) => out.truncate(start + n),
            Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                return size_error(expected as u64, (start + cap + 1) as u64, block_at);
            }
            Err(e) => return malformed(format!("corrupt block: {e}"), block_at),
        }
    }
    if out.len() != expected {
        return size_error(expected as u64, out.len() as u64, pos);
    }
    Ok(out)
}

/// Compresses `body` into a complete LZ4 frame, appending it to `out` (tenso's exact bytes).
#[cfg(feature = "std")]
pub fn compress_frame(body: &[u8], out: &mut Vec<u8>) {
    use std::io::Write;
    let mut enc = lz4_flex::frame::FrameEncoder::new(core::mem::take(out));
    // Writing to a Vec cannot fail, and FrameEncoder only fails when its writer does.
    enc.write_all(body)
        .expect("writing an LZ4 frame into a Vec cannot fail");
    *out = enc.finish().expect("finishing an LZ4 frame into a Vec cannot fail");
}

/// Compresses `body` into a complete LZ4 frame, appending it to `out` (no_std writer).
#[cfg(not(feature = "std"))]
pub fn compress_frame(body: &[u8], out: &mut Vec<u8>) {
    compress_frame_blocks(body, out)
}

/// The `no_std` frame writer: tenso's frame header, independent blocks from the block
/// compressor, EndMark. Matches `FrameEncoder` byte for byte for bodies of one block (up to
/// 4 MiB); a longer body may compress differently (FrameEncoder carries its hash table across
/// blocks), yet decodes identically everywhere.
#[cfg_attr(feature = "std", allow(dead_code))]
pub(crate) fn compress_frame_blocks(body: &[u8], out: &mut Vec<u8>) {
    let (bd, block) = block_size_code(body.len());
    let hc = ((xxh32(&[0x60, bd], 0) >> 8) & 0xFF) as u8;
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[0x60, bd, hc]);
    let mut scratch = Vec::new();
    // FrameEncoder's table type (32-bit entries), so a one-block body gets FrameEncoder's bytes.
    let mut table = lz4_flex::block::CompressTable::large();
    for chunk in body.chunks(block) {
        scratch.clear();
        scratch.resize(lz4_flex::block::get_maximum_output_size(chunk.len()), 0);
        let n = lz4_flex::block::compress_into_with_table(chunk, &mut scratch, &mut table).unwrap_or(usize::MAX);
        if n < chunk.len() {
            out.extend_from_slice(&(n as u32).to_le_bytes());
            out.extend_from_slice(&scratch[..n]);
        } else {
            out.extend_from_slice(&(chunk.len() as u32 | 0x8000_0000).to_le_bytes());
            out.extend_from_slice(chunk);
        }
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn empty_body_frame_is_tensos() {
        let mut out = Vec::new();
        compress_frame(&[], &mut out);
        assert_eq!(out, [0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82, 0, 0, 0, 0]);
        assert_eq!(decompress_frame(&out, 0).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn round_trip_and_bound() {
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut f = Vec::new();
        compress_frame(&body, &mut f);
        assert_eq!(f[5], 0x70);
        assert_eq!(decompress_frame(&f, body.len()).unwrap(), body);
        // One byte less than the frame produces: refused without producing it all.
        assert!(matches!(
            decompress_frame(&f, body.len() - 1),
            Err(e) if matches!(e.kind(), ErrorKind::DecompressedSize { .. })
        ));
        assert!(matches!(
            decompress_frame(&f, body.len() + 1),
            Err(e) if matches!(e.kind(), ErrorKind::DecompressedSize { .. })
        ));
    }

    #[cfg(feature = "std")]
    #[test]
    fn no_std_writer_matches_frame_encoder_for_one_block() {
        let mut seed = 7u32;
        for len in [
            0usize,
            1,
            15,
            60,
            1000,
            65_535,
            65_536,
            65_537,
            100_000,
            262_145,
            1 << 20,
        ] {
            for alphabet in [2u32, 16, 251] {
                let body: Vec<u8> = (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        ((seed >> 16) % alphabet) as u8
                    })
                    .collect();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                compress_frame(&body, &mut a);
                compress_frame_blocks(&body, &mut b);
                assert_eq!(a, b, "len {len}, alphabet {alphabet}");
            }
        }
    }

    #[test]
    fn zeros_bomb_is_bounded() {
        let body = vec![0u8; 1 << 20];
        let mut f = Vec::new();
        compress_frame(&body, &mut f);
        assert!(f.len() < 8192);
        assert!(matches!(
            decompress_frame(&f, 10),
            Err(e) if matches!(e.kind(), ErrorKind::DecompressedSize { expected: 10, .. })
        ));
    }
}
