//! The `zt.zstd-seekable/1` encoding (spec §8.1): independent zstd frames followed by a skippable
//! frame holding the seek table.
//!
//! ```text
//! frame_0 .. frame_{N-1}                 independent zstd frames
//! u32 LE 0x184D2A5E                      skippable-frame magic
//! u32 LE N × entry_size + 9              skippable-frame size
//! N × { u32 compressed, u32 decompressed [, u32 checksum if descriptor bit 7] }
//! u32 LE N, u8 descriptor, u32 LE 0x8F92EAB1
//! ```
//!
//! Every violation is reported as rule `Encoding` ([`Error`]) with the offset within the
//! stored bytes. The checks are the reference decoder's: length ≥ 17, both magics, reserved
//! descriptor bits, the skippable-frame size, each frame ≤ 16 MiB decoded, `Σ decompressed =
//! decoded_length`, `Σ compressed` = start of the seek table, equal non-final frames, and every frame
//! decoding to exactly its declared size. In addition (stricter than the reference, never rejecting
//! what a correct writer produces) each frame's own content checksum and, when the seek table has a
//! checksum column, the column's value are verified.
//!
//! Decoding is bounded: output grows as frames decode and never exceeds `decoded_length`, and a
//! declared size is never allocated before the seek table has been checked against the stored bytes.
//! [`read_range`] (and [`read_range_at`] over a [`ReadAt`]) decodes only the frames a byte range
//! touches.

use alloc::string::String;
use alloc::vec::Vec;

use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use super::Error;
use super::rule::Rule;

use crate::source::ReadAt;

/// The encoding id.
pub use super::format::ENCODING_ZSTD_SEEKABLE as ENCODING_ID;
/// Largest decoded size of one frame (16 MiB).
pub const MAX_FRAME_DECODED: u32 = 16 << 20;
/// Shortest valid stored stream (zero frames): the 17-byte seek-table frame.
pub const MIN_STORED_LEN: u64 = 17;
/// Magic of the skippable frame holding the seek table.
pub const SKIPPABLE_MAGIC: u32 = 0x184D_2A5E;
/// Magic ending the seek table.
pub const SEEKABLE_MAGIC: u32 = 0x8F92_EAB1;

/// Largest zstd window accepted by default (8 MiB, what every standard level up to 19 uses);
/// a larger declared window is accepted only when the expected output is itself larger (capped at
/// 128 MiB). The window is allocated when a frame starts, so this bounds memory for hostile input.
const WINDOW_FLOOR: u64 = 8 << 20;
const WINDOW_CAP: u64 = 128 << 20;

/// A violation of the encoding: rule [`Rule::Encoding`] at `offset` within the stored bytes.
fn encoding_error(offset: u64, message: impl Into<String>) -> Error {
    Error::new(Rule::Encoding, message).at(offset)
}

/// One entry of the seek table, with its absolute positions worked out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Offset of the zstd frame within the stored bytes.
    pub stored_offset: u64,
    /// Compressed size of the frame.
    pub stored_size: u32,
    /// Offset of the frame's content within the decoded bytes.
    pub decoded_offset: u64,
    /// Decoded size of the frame.
    pub decoded_size: u32,
    /// The seek table's checksum column (low 32 bits of XXH64 of the decoded frame), if present.
    pub checksum: Option<u32>,
}

/// A parsed and validated seek table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeekTable {
    /// The frames, in order.
    pub frames: Vec<Frame>,
    /// Offset of the seek-table skippable frame within the stored bytes (= Σ compressed sizes).
    pub table_offset: u64,
    /// Total decoded length (= Σ decompressed sizes).
    pub decoded_length: u64,
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn read_src<R: ReadAt + ?Sized>(src: &R, base: u64, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
    let abs = base
        .checked_add(offset)
        .ok_or_else(|| encoding_error(offset, "offset overflows"))?;
    src.read_vec(abs, len)
        .map_err(|e| encoding_error(offset, alloc::format!("cannot read stored bytes: {e}")))
}

impl SeekTable {
    /// Parses and validates the seek table at the end of `stored` against `decoded_length`.
    pub fn parse(stored: &[u8], decoded_length: u64) -> Result<SeekTable, Error> {
        Self::parse_at(stored, 0, stored.len() as u64, decoded_length)
    }

    /// Like [`SeekTable::parse`], for stored bytes at `[base, base + stored_len)` of a source; reads
    /// only the table.
    pub fn parse_at<R: ReadAt + ?Sized>(
        src: &R,
        base: u64,
        stored_len: u64,
        decoded_length: u64,
    ) -> Result<SeekTable, Error> {
        if stored_len < MIN_STORED_LEN {
            return Err(encoding_error(
                0,
                alloc::format!("{stored_len} stored bytes; the seekable format needs at least 17"),
            ));
        }
        let foot_at = stored_len - 9;
        let foot = read_src(src, base, foot_at, 9)?;
        let n = le32(&foot, 0);
        let descriptor = foot[4];
        if le32(&foot, 5) != SEEKABLE_MAGIC {
            return Err(encoding_error(
                foot_at + 5,
                alloc::format!("seekable magic is 0x{:08X}, expected 0x8F92EAB1", le32(&foot, 5)),
            ));
        }
        if descriptor & 0x7F != 0 {
            return Err(encoding_error(
                foot_at + 4,
                alloc::format!("seek-table descriptor 0x{descriptor:02X} sets reserved bits"),
            ));
        }
        let with_checksum = descriptor & 0x80 != 0;
        let entry_size: u64 = if with_checksum { 12 } else { 8 };
        let entries_len = u64::from(n) * entry_size;
        let content_len = entries_len + 9;
        let frame_len = content_len + 8;
        if frame_len > stored_len {
            return Err(encoding_error(
                foot_at,
                alloc::format!("seek table of {n} frames needs {frame_len} bytes; only {stored_len} stored"),
            ));
        }
        let table_offset = stored_len - frame_len;
        let head = read_src(src, base, table_offset, 8)?;
        if le32(&head, 0) != SKIPPABLE_MAGIC {
            return Err(encoding_error(
                table_offset,
                alloc::format!("skippable-frame magic is 0x{:08X}, expected 0x184D2A5E", le32(&head, 0)),
            ));
        }
        if u64::from(le32(&head, 4)) != content_len {
            return Err(encoding_error(
                table_offset + 4,
                alloc::format!(
                    "skippable-frame size is {}, expected {content_len} for {n} frames",
                    le32(&head, 4)
                ),
            ));
        }
        let entries = read_src(src, base, table_offset + 8, entries_len)?;
        let mut frames = Vec::with_capacity(n as usize);
        let (mut stored_pos, mut decoded_pos) = (0u64, 0u64);
        for (i, e) in entries.chunks_exact(entry_size as usize).enumerate() {
            let at = table_offset + 8 + i as u64 * entry_size;
            let (c, d) = (le32(e, 0), le32(e, 4));
            if d > MAX_FRAME_DECODED {
                return Err(encoding_error(
                    at + 4,
                    alloc::format!("frame {i} declares {d} decoded bytes; the limit is 16 MiB"),
                ));
            }
            if let Some(first) = frames.first().map(|f: &Frame| f.decoded_size) {
                // Every frame but the last has the first frame's size; checked on the previous one.
                if i + 1 < n as usize && d != first {
                    return Err(encoding_error(
                        at + 4,
                        alloc::format!("non-final frame {i} decodes to {d} bytes, frame 0 to {first}"),
                    ));
                }
            }
            frames.push(Frame {
                stored_offset: stored_pos,
                stored_size: c,
                decoded_offset: decoded_pos,
                decoded_size: d,
                checksum: with_checksum.then(|| le32(e, 8)),
            });
            stored_pos += u64::from(c);
            decoded_pos += u64::from(d);
        }
        if stored_pos != table_offset {
            return Err(encoding_error(
                table_offset,
                alloc::format!(
                    "frames add up to {stored_pos} compressed bytes but the seek table starts at {table_offset}"
                ),
            ));
        }
        if decoded_pos != decoded_length {
            return Err(encoding_error(
                table_offset,
                alloc::format!("frames add up to {decoded_pos} decoded bytes; decoded_length is {decoded_length}"),
            ));
        }
        Ok(SeekTable {
            frames,
            table_offset,
            decoded_length,
        })
    }

    /// Indices of the frames holding decoded bytes `[offset, offset + len)` (empty for `len == 0`).
    /// The range must lie within `decoded_length`.
    pub fn frames_for(&self, offset: u64, len: u64) -> Result<core::ops::Range<usize>, Error> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.decoded_length)
            .ok_or_else(|| {
                encoding_error(
                    0,
                    alloc::format!(
                        "range [{offset}, {offset}+{len}) runs past decoded_length {}",
                        self.decoded_length
                    ),
                )
            })?;
        if len == 0 || self.frames.is_empty() {
            return Ok(0..0);
        }
        let last = self.frames.len() - 1;
        let size = u64::from(self.frames[0].decoded_size);
        // With one frame (or empty non-final frames) everything lies in the last frame.
        let locate = |pos: u64| -> usize {
            pos.checked_div(size)
                .and_then(|i| usize::try_from(i).ok())
                .map_or(last, |i| i.min(last))
        };
        Ok(locate(offset)..locate(end - 1) + 1)
    }
}

/// Decodes all of `stored` into exactly `decoded_length` bytes.
pub fn decode(stored: &[u8], decoded_length: u64) -> Result<Vec<u8>, Error> {
    read_range(stored, decoded_length, 0, decoded_length)
}

/// Decodes only the frames covering decoded bytes `[offset, offset + len)` and returns those bytes.
pub fn read_range(stored: &[u8], decoded_length: u64, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
    read_range_at(stored, 0, stored.len() as u64, decoded_length, offset, len)
}

/// [`read_range`] over stored bytes at `[base, base + stored_len)` of a source: reads the seek table
/// and the touched frames only.
pub fn read_range_at<R: ReadAt + ?Sized>(
    src: &R,
    base: u64,
    stored_len: u64,
    decoded_length: u64,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Error> {
    let table = SeekTable::parse_at(src, base, stored_len, decoded_length)?;
    let range = table.frames_for(offset, len)?;
    let end = offset + len;
    let mut out = Vec::new();
    for i in range {
        let f = table.frames[i];
        let bytes;
        let frame_stored: &[u8] = match src.slice(base + f.stored_offset, u64::from(f.stored_size)) {
            Some(s) => s,
            None => {
                bytes = read_src(src, base, f.stored_offset, u64::from(f.stored_size))?;
                &bytes
            }
        };
        let decoded = decode_frame(frame_stored, &f, i)?;
        let lo = offset.saturating_sub(f.decoded_offset) as usize;
        let hi = (end - f.decoded_offset).min(u64::from(f.decoded_size)) as usize;
        if out.is_empty() && lo == 0 && hi == decoded.len() && len == u64::from(f.decoded_size) {
            return Ok(decoded);
        }
        out.extend_from_slice(&decoded[lo..hi]);
    }
    Ok(out)
}

/// Decodes every frame of the stored bytes at `[base, base + stored_len)` of a source in order,
/// handing each frame's decoded bytes (at most [`MAX_FRAME_DECODED`]) to `f`: the whole part in
/// memory one frame at a time, so a part that declares gigabytes costs one frame. Errors as
/// [`read_range_at`]; `f`'s error stops the walk and is returned.
pub fn for_each_frame_at<R: ReadAt + ?Sized>(
    src: &R,
    base: u64,
    stored_len: u64,
    decoded_length: u64,
    f: &mut dyn FnMut(&[u8]) -> Result<(), Error>,
) -> Result<(), Error> {
    let table = SeekTable::parse_at(src, base, stored_len, decoded_length)?;
    for (i, frame) in table.frames.iter().enumerate() {
        let bytes;
        let frame_stored: &[u8] = match src.slice(base + frame.stored_offset, u64::from(frame.stored_size)) {
            Some(s) => s,
            None => {
                bytes = read_src(src, base, frame.stored_offset, u64::from(frame.stored_size))?;
                &bytes
            }
        };
        f(&decode_frame(frame_stored, frame, i)?)?;
    }
    Ok(())
}

/// Decodes the one zstd frame described by `frame` (its stored bytes, exactly) and checks its size
/// and checksums.
fn decode_frame(stored: &[u8], frame: &Frame, index: usize) -> Result<Vec<u8>, Error> {
    let expected = u64::from(frame.decoded_size);
    let mut out = Vec::with_capacity(frame.decoded_size.min(1 << 20) as usize);
    let mut input = stored;
    let mut dec = FrameDecoder::new();
    let r = decode_one_frame(&mut dec, &mut input, expected, &mut out);
    let at = frame.stored_offset + (stored.len() - input.len()) as u64;
    match r {
        Ok(FrameOutcome::Data) => {}
        Ok(FrameOutcome::Skippable) => {
            return Err(encoding_error(
                frame.stored_offset,
                alloc::format!("frame {index} is a skippable frame, not a zstd frame"),
            ));
        }
        Err(m) => return Err(encoding_error(at, alloc::format!("frame {index}: {m}"))),
    }
    if !input.is_empty() {
        return Err(encoding_error(
            at,
            alloc::format!(
                "frame {index} ends after {} of its {} stored bytes",
                stored.len() - input.len(),
                stored.len()
            ),
        ));
    }
    if out.len() as u64 != expected {
        return Err(encoding_error(
            frame.stored_offset,
            alloc::format!(
                "frame {index} decodes to {} bytes; the seek table says {expected}",
                out.len()
            ),
        ));
    }
    if let Some(want) = frame.checksum {
        let got = dec.get_calculated_checksum();
        if got != Some(want) {
            return Err(encoding_error(
                frame.stored_offset,
                alloc::format!("frame {index}: seek-table checksum 0x{want:08X} does not match the decoded bytes"),
            ));
        }
    }
    Ok(out)
}

pub(crate) enum FrameOutcome {
    Data,
    Skippable,
}

/// A zstd decoder error as a sentence. ruzstd's own `Display` prints the inner errors with
/// `{:?}` (`DecompressLiteralsError(DecodedLiteralCountMismatch { .. })`); this unwraps them to
/// the innermost error's message.
pub(crate) fn zstd_message(e: &ruzstd::decoding::errors::FrameDecoderError) -> String {
    use ruzstd::decoding::errors::{DecodeBlockContentError as C, DecompressBlockError as B, FrameDecoderError as F};
    let block = |b: &B| match b {
        B::DecompressLiteralsError(e) => alloc::format!("the literals section does not decode: {e}"),
        B::LiteralsSectionParseError(e) => alloc::format!("the literals section header is invalid: {e}"),
        B::SequencesHeaderParseError(e) => alloc::format!("the sequences section header is invalid: {e}"),
        B::DecodeSequenceError(e) => alloc::format!("a sequence does not decode: {e}"),
        B::ExecuteSequencesError(e) => alloc::format!("a sequence does not apply: {e}"),
        other => alloc::format!("{other}"),
    };
    match e {
        F::ReadFrameHeaderError(h) => alloc::format!("{h}"),
        F::FrameHeaderError(h) | F::FailedToInitialize(h) => alloc::format!("{h}"),
        F::DictionaryDecodeError(d) => alloc::format!("the dictionary does not decode: {d}"),
        F::FailedToReadBlockHeader(h) => alloc::format!("a block header is invalid: {h}"),
        F::FailedToReadBlockBody(C::DecompressBlockError(b)) => alloc::format!("a block is corrupt: {}", block(b)),
        F::FailedToReadBlockBody(other) => alloc::format!("a block cannot be read: {other}"),
        other => alloc::format!("{other}"),
    }
}

/// Decodes one frame from the front of `input` (advancing it) into `out`, refusing to produce more
/// than `limit` bytes. Skippable frames are consumed and reported as such. The frame's content
/// checksum is verified when present.
pub(crate) fn decode_one_frame(
    dec: &mut FrameDecoder,
    input: &mut &[u8],
    limit: u64,
    out: &mut Vec<u8>,
) -> Result<FrameOutcome, String> {
    use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
    dec.set_max_window_size(limit.clamp(WINDOW_FLOOR, WINDOW_CAP));
    match dec.init(&mut *input) {
        Ok(()) => {}
        Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame { length, .. })) => {
            *input = input
                .get(length as usize..)
                .ok_or_else(|| String::from("skippable frame runs past the end"))?;
            return Ok(FrameOutcome::Skippable);
        }
        Err(e) => return Err(alloc::format!("bad zstd frame header: {}", zstd_message(&e))),
    }
    let start = out.len();
    loop {
        let finished = dec
            .decode_blocks(&mut *input, BlockDecodingStrategy::UptoBlocks(1))
            .map_err(|e| alloc::format!("zstd: {}", zstd_message(&e)))?;
        if let Some(chunk) = dec.collect() {
            if (out.len() - start + chunk.len()) as u64 > limit {
                return Err(alloc::format!("decodes to more than the {limit} bytes allowed"));
            }
            out.extend_from_slice(&chunk);
        }
        if finished {
            break;
        }
    }
    if let Some(chunk) = dec.collect() {
        if (out.len() - start + chunk.len()) as u64 > limit {
            return Err(alloc::format!("decodes to more than the {limit} bytes allowed"));
        }
        out.extend_from_slice(&chunk);
    }
    if let Some(want) = dec.get_checksum_from_data()
        && dec.get_calculated_checksum() != Some(want)
    {
        return Err(alloc::format!(
            "zstd content checksum 0x{want:08X} does not match the decoded bytes"
        ));
    }
    Ok(FrameOutcome::Data)
}

/// Decodes a plain zstd stream (one or more frames, skippable frames allowed) into at most `limit`
/// bytes. Errors carry the offset within `input`.
pub(crate) fn decode_stream_bounded(input: &[u8], limit: u64) -> Result<Vec<u8>, (u64, String)> {
    let mut out = Vec::with_capacity(limit.min(1 << 20) as usize);
    let mut rest = input;
    let mut dec = FrameDecoder::new();
    if rest.is_empty() {
        return Err((0, String::from("empty zstd stream")));
    }
    while !rest.is_empty() {
        let at = (input.len() - rest.len()) as u64;
        let remaining = limit - out.len() as u64;
        decode_one_frame(&mut dec, &mut rest, remaining, &mut out).map_err(|m| (at, m))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_stream_is_17_bytes() {
        let mut s = Vec::new();
        s.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
        s.extend_from_slice(&9u32.to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes());
        s.push(0);
        s.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
        assert_eq!(decode(&s, 0).unwrap(), Vec::<u8>::new());
        assert!(decode(&s, 1).is_err());
        assert!(decode(&s[1..], 0).is_err());
    }
}
