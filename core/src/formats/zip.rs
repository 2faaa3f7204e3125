//! A read-only zip directory (for `.npz` archives and PyTorch zip checkpoints).
//!
//! Hand-written because the `zip` crate needs `std`: this reads the end-of-central-directory
//! record (and its ZIP64 form, which `torch.save` writes for large files), the central directory
//! and, per member, the local header that gives where the data starts. Only stored (0) and
//! deflated (8) members are supported; inflating is done by `miniz_oxide` with the declared size
//! as a hard limit.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use super::{ErrorKind, FormatError, bytes_at};
use crate::source::ReadAt;

/// Compression method of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Method 0: the bytes are stored as they are.
    Stored,
    /// Method 8: raw deflate.
    Deflate,
}

/// One member of the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The member's name as stored.
    pub name: String,
    /// Compression method.
    pub method: Method,
    /// Absolute offset of the member's (possibly compressed) data.
    pub data_offset: u64,
    /// Compressed size.
    pub compressed: u64,
    /// Uncompressed size.
    pub size: u64,
    /// CRC-32 of the uncompressed data, as declared.
    pub crc32: u32,
}

/// The members of a zip archive, in central-directory order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Archive {
    /// Members.
    pub members: Vec<Member>,
}

impl Archive {
    /// The member called `name`.
    pub fn get(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }
}

const EOCD: u32 = 0x0605_4b50;
const EOCD64: u32 = 0x0606_4b50;
const EOCD64_LOCATOR: u32 = 0x0706_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads the central directory of the zip archive in `src`, for error messages as `format`.
///
/// Every size and offset is checked against the file; the member count is bounded by the bytes
/// the central directory actually has (46 per entry), so a claimed count is never allocated.
pub fn open<S: ReadAt + ?Sized>(format: &'static str, src: &S) -> Result<Archive, FormatError> {
    let bad = |kind, msg: String| FormatError::new(format, kind, msg);
    let Directory {
        count,
        cd_size,
        cd_offset,
        eocd_at,
    } = directory(format, src)?;
    if cd_offset.checked_add(cd_size).is_none_or(|end| end > eocd_at) {
        return Err(bad(
            ErrorKind::OutOfBounds,
            alloc::format!("the central directory [{cd_offset}, +{cd_size}) runs past its end record at {eocd_at}"),
        )
        .at(eocd_at));
    }
    if cd_size > super::MAX_HEADER {
        return Err(bad(
            ErrorKind::HeaderTooLarge,
            alloc::format!("a {cd_size}-byte central directory is over the limit"),
        ));
    }
    if count > cd_size / 46 {
        return Err(bad(
            ErrorKind::Limit,
            alloc::format!(
                "{count} members declared, but the {cd_size}-byte central directory holds at most {}",
                cd_size / 46
            ),
        )
        .at(eocd_at));
    }
    let cd = bytes_at(format, src, cd_offset, cd_size)?;
    let mut members = Vec::with_capacity(count as usize);
    let mut p = 0usize;
    for _ in 0..count {
        let (member, end) = central_entry(format, src, &cd, p, cd_offset)?;
        members.push(member);
        p = end;
    }
    Ok(Archive { members })
}

/// Where the central directory is, from the end-of-central-directory record (ZIP64 when the
/// classic fields overflow).
struct Directory {
    /// Members declared.
    count: u64,
    cd_size: u64,
    cd_offset: u64,
    /// Offset of the end-of-central-directory record.
    eocd_at: u64,
}

/// Finds the end-of-central-directory record (and its ZIP64 twin) at the end of `src`.
fn directory<S: ReadAt + ?Sized>(format: &'static str, src: &S) -> Result<Directory, FormatError> {
    let size = src.size();
    let bad = |kind, msg: String| FormatError::new(format, kind, msg);
    // The EOCD record is 22 bytes plus a comment of up to 65535 bytes, at the end of the file.
    let tail_len = size.min(22 + 65535);
    let tail = bytes_at(format, src, size - tail_len, tail_len)?;
    let pos = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| u32_at(&tail, i) == EOCD)
        .ok_or_else(|| {
            bad(
                ErrorKind::Syntax,
                "no zip end-of-central-directory record: not a zip archive, or truncated".into(),
            )
        })?;
    let eocd_at = size - tail_len + pos as u64;
    let e = &tail[pos..];
    let mut count = u64::from(u16_at(e, 10));
    let mut cd_size = u64::from(u32_at(e, 12));
    let mut cd_offset = u64::from(u32_at(e, 16));
    if (count == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff) && eocd_at >= 20 {
        // ZIP64: a locator sits just before the EOCD record and points at the ZIP64 EOCD.
        let loc = bytes_at(format, src, eocd_at - 20, 20)?;
        if u32_at(&loc, 0) == EOCD64_LOCATOR {
            let at = u64_at(&loc, 8);
            let rec = bytes_at(format, src, at, 56)?;
            if u32_at(&rec, 0) != EOCD64 {
                return Err(bad(
                    ErrorKind::Syntax,
                    "the ZIP64 locator does not point at a ZIP64 record".into(),
                )
                .at(at));
            }
            count = u64_at(&rec, 32);
            cd_size = u64_at(&rec, 40);
            cd_offset = u64_at(&rec, 48);
        }
    }
    Ok(Directory {
        count,
        cd_size,
        cd_offset,
        eocd_at,
    })
}

/// The central directory entry at `p` of `cd` (which starts at `cd_offset` in the file), checked
/// against its local header; returns it with the offset of the next entry.
fn central_entry<S: ReadAt + ?Sized>(
    format: &'static str,
    src: &S,
    cd: &[u8],
    p: usize,
    cd_offset: u64,
) -> Result<(Member, usize), FormatError> {
    let size = src.size();
    let bad = |kind, msg: String| FormatError::new(format, kind, msg);
    let here = cd_offset + p as u64;
    if p + 46 > cd.len() || u32_at(cd, p) != CENTRAL {
        return Err(bad(
            ErrorKind::Syntax,
            "a central directory entry is missing or malformed".into(),
        )
        .at(here));
    }
    let method = u16_at(cd, p + 10);
    let crc32 = u32_at(cd, p + 16);
    let mut compressed = u64::from(u32_at(cd, p + 20));
    let mut usize_ = u64::from(u32_at(cd, p + 24));
    let name_len = usize::from(u16_at(cd, p + 28));
    let extra_len = usize::from(u16_at(cd, p + 30));
    let comment_len = usize::from(u16_at(cd, p + 32));
    let mut local = u64::from(u32_at(cd, p + 42));
    let name_end = p + 46 + name_len;
    let end = name_end + extra_len + comment_len;
    if end > cd.len() {
        return Err(bad(
            ErrorKind::Truncated,
            "a central directory entry runs past the directory".into(),
        )
        .at(here));
    }
    let name = core::str::from_utf8(&cd[p + 46..name_end])
        .map_err(|_| bad(ErrorKind::Syntax, "a member name is not UTF-8".into()).at(here))?
        .into();
    // ZIP64 extended information: the 0xffffffff fields, in order, are in extra field 0x0001.
    let mut x = name_end;
    while x + 4 <= name_end + extra_len {
        let id = u16_at(cd, x);
        let len = usize::from(u16_at(cd, x + 2));
        let body = x + 4;
        if body + len > name_end + extra_len {
            break;
        }
        if id == 1 {
            let mut q = body;
            for field in [&mut usize_, &mut compressed, &mut local] {
                if *field == 0xffff_ffff && q + 8 <= body + len {
                    *field = u64_at(cd, q);
                    q += 8;
                }
            }
        }
        x = body + len;
    }
    let method = match method {
        0 => Method::Stored,
        8 => Method::Deflate,
        m => {
            return Err(bad(
                ErrorKind::Unsupported,
                alloc::format!(
                    "member '{name}' uses zip compression method {m}; only stored and deflate are supported"
                ),
            )
            .at(here));
        }
    };
    if method == Method::Stored && compressed != usize_ {
        return Err(bad(
            ErrorKind::SizeMismatch,
            alloc::format!("stored member '{name}' has different sizes"),
        )
        .at(here));
    }
    // The local header repeats the name and has its own extra field: data starts after both.
    let lh = bytes_at(format, src, local, 30)?;
    if u32_at(&lh, 0) != LOCAL {
        return Err(bad(
            ErrorKind::Syntax,
            alloc::format!("member '{name}' has no local header at {local}"),
        )
        .at(local));
    }
    let data_offset = local + 30 + u64::from(u16_at(&lh, 26)) + u64::from(u16_at(&lh, 28));
    if data_offset.checked_add(compressed).is_none_or(|e| e > size) {
        return Err(bad(
            ErrorKind::OutOfBounds,
            alloc::format!("member '{name}' data [{data_offset}, +{compressed}) runs past the {size}-byte file"),
        )
        .at(local));
    }
    Ok((
        Member {
            name,
            method,
            data_offset,
            compressed,
            size: usize_,
            crc32,
        },
        end,
    ))
}

/// Inflates a raw-deflate stream that declares `size` bytes: never produces more, and says so
/// when the stream is shorter or longer than declared. With `crc32`, the inflated bytes must have
/// that CRC-32 (the member's, from the central directory), as Python's `zipfile` checks.
///
/// The caller decides whether `size` bytes may be allocated (see
/// [`super::ReadLimits`]); the output grows as bytes are produced, not by the declared size.
pub fn inflate(raw: &[u8], size: u64, crc32: Option<u32>) -> Result<Vec<u8>, String> {
    usize::try_from(size).map_err(|_| String::from("the declared size does not fit in memory"))?;
    let mut out = Vec::with_capacity(size.min(1 << 20) as usize);
    let mut input =
        |at: u64, n: u64| -> Result<Cow<'_, [u8]>, String> { Ok(Cow::Borrowed(&raw[at as usize..(at + n) as usize])) };
    inflate_with(&mut input, raw.len() as u64, size, crc32, &mut |piece| {
        out.extend_from_slice(piece);
        Ok(())
    })?;
    Ok(out)
}

/// Bytes of inflated output handed to the sink at a time by [`inflate_each`].
pub const INFLATE_CHUNK: usize = 256 << 10;

/// Streams the raw-deflate stream at `[offset, offset + compressed)` of `src`, which declares
/// `size` inflated bytes, to `sink` in pieces of at most [`INFLATE_CHUNK`] bytes: memory stays
/// bounded (one compressed piece, the 32 KiB window, one output piece) whatever `size` claims.
/// Never produces more than `size` bytes; fails when the stream ends early or runs on, and, with
/// `crc32`, when the inflated bytes do not have that CRC-32 (checked once all are produced: the
/// sink has then seen them, so a caller that must not act on bad bytes waits for `Ok`).
pub fn inflate_each<S: ReadAt + ?Sized>(
    format: &'static str,
    src: &S,
    offset: u64,
    compressed: u64,
    size: u64,
    crc32: Option<u32>,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let mut input = |at: u64, n: u64| -> Result<Cow<'_, [u8]>, String> {
        bytes_at(format, src, offset + at, n).map_err(|e| e.message)
    };
    let mut failed = None;
    inflate_with(&mut input, compressed, size, crc32, &mut |piece| {
        sink(piece).map_err(|e| {
            failed = Some(e);
            String::new()
        })
    })
    .map_err(|m| match failed.take() {
        Some(e) => e,
        None if m.starts_with("CRC-32") => FormatError::new(format, ErrorKind::Checksum, m).at(offset),
        None => FormatError::new(format, ErrorKind::Syntax, m).at(offset),
    })
}

/// The one inflate loop: `input(at, n)` gives compressed bytes `[at, at + n)` of `compressed`.
fn inflate_with<'a>(
    input: &mut dyn FnMut(u64, u64) -> Result<Cow<'a, [u8]>, String>,
    compressed: u64,
    size: u64,
    crc32: Option<u32>,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<(), String> {
    use miniz_oxide::inflate::stream::{InflateState, inflate as step};
    use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
    const IN_CHUNK: u64 = 1 << 20;
    let mut state = InflateState::new_boxed(DataFormat::Raw);
    let mut out = alloc::vec![0u8; INFLATE_CHUNK];
    let mut crc = crc32fast::Hasher::new();
    let (mut read, mut produced) = (0u64, 0u64);
    let mut piece: Cow<'a, [u8]> = Cow::Borrowed(&[]);
    let mut used = 0usize;
    loop {
        if used == piece.len() && read < compressed {
            let n = (compressed - read).min(IN_CHUNK);
            piece = input(read, n)?;
            read += n;
            used = 0;
        }
        let last = read == compressed;
        // `Finish` would ask for all output at once; `None` keeps the 32 KiB window inside the state.
        let flush = MZFlush::None;
        // Never ask for more than the declared size: a longer stream stops here with an error.
        let room = (size - produced).min(out.len() as u64) as usize;
        let r = step(&mut state, &piece[used..], &mut out[..room.max(1)], flush);
        used += r.bytes_consumed;
        if r.bytes_written > 0 {
            if room == 0 {
                return Err(alloc::format!("deflate stream inflates past its declared {size} bytes"));
            }
            produced += r.bytes_written as u64;
            crc.update(&out[..r.bytes_written]);
            sink(&out[..r.bytes_written])?;
        }
        match r.status {
            Ok(MZStatus::StreamEnd) => break,
            Ok(_) => {}
            Err(MZError::Buf) if !last || used < piece.len() => {}
            Err(MZError::Buf) => {
                return Err(alloc::format!(
                    "deflate stream ends after {produced} of its declared {size} bytes (truncated member)"
                ));
            }
            Err(e) => {
                return Err(alloc::format!(
                    "deflate stream is invalid after {produced} inflated bytes ({e:?})"
                ));
            }
        }
        if r.bytes_consumed == 0 && r.bytes_written == 0 && last && used == piece.len() {
            return Err(alloc::format!(
                "deflate stream ends after {produced} of its declared {size} bytes (truncated member)"
            ));
        }
    }
    if produced != size {
        return Err(alloc::format!(
            "deflate stream inflates to {produced} bytes, not the declared {size}"
        ));
    }
    if let Some(want) = crc32 {
        let got = crc.finalize();
        if got != want {
            return Err(alloc::format!(
                "CRC-32 mismatch: the member declares 0x{want:08x}, its inflated bytes have 0x{got:08x} (the \
                 archive is corrupt)"
            ));
        }
    }
    Ok(())
}

/// Inflates the first bytes of a raw-deflate stream, at most `max` of them (for reading a
/// member's header without inflating all of it).
pub fn inflate_prefix(raw: &[u8], max: usize) -> Result<Vec<u8>, String> {
    use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
    let mut d = DecompressorOxide::new();
    let mut out = alloc::vec![0u8; max];
    // All input is given at once; "needs more input" just means the stream is longer than `max`
    // bytes of output took, or the member ended early: either way `out` holds what there is.
    let flags = inflate_flags::TINFL_FLAG_HAS_MORE_INPUT | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, _, out_pos) = decompress(&mut d, raw, &mut out, 0, flags);
    if (status as i32) < 0 {
        return Err(alloc::format!("deflate stream is invalid ({status:?})"));
    }
    out.truncate(out_pos);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_zip_and_truncation() {
        assert_eq!(open("t", &b"not a zip at all"[..]).unwrap_err().kind, ErrorKind::Syntax);
        // An EOCD that claims 65535 entries in an empty directory.
        let mut e = alloc::vec![0u8; 22];
        e[..4].copy_from_slice(&EOCD.to_le_bytes());
        e[10..12].copy_from_slice(&100u16.to_le_bytes());
        assert_eq!(open("t", &e[..]).unwrap_err().kind, ErrorKind::Limit);
    }

    #[test]
    fn inflate_is_bounded() {
        let data = alloc::vec![7u8; 10_000];
        let z = miniz_oxide::deflate::compress_to_vec(&data, 6);
        assert_eq!(inflate(&z, 10_000, None).unwrap(), data);
        assert!(inflate(&z, 100, None).is_err());
        assert!(inflate(&z, 20_000, None).is_err());
        let crc = crc32fast::hash(&data);
        assert_eq!(inflate(&z, 10_000, Some(crc)).unwrap(), data);
        let e = inflate(&z, 10_000, Some(crc ^ 1)).unwrap_err();
        assert!(e.contains("CRC-32"), "{e}");
        assert!(inflate(&z[..z.len() - 3], 10_000, None).is_err());
        assert_eq!(inflate_prefix(&z, 16).unwrap(), alloc::vec![7u8; 16]);
    }

    #[test]
    fn inflate_each_streams_in_bounded_pieces() {
        // 5 MiB that compress well: many output pieces from few input bytes.
        let data: Vec<u8> = (0..5u32 << 20).map(|i| (i / 4096) as u8).collect();
        let z = miniz_oxide::deflate::compress_to_vec(&data, 1);
        let crc = crc32fast::hash(&data);
        let mut got = Vec::new();
        let mut biggest = 0;
        inflate_each("t", &z[..], 0, z.len() as u64, data.len() as u64, Some(crc), &mut |p| {
            biggest = biggest.max(p.len());
            got.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
        assert!(got == data);
        assert!(biggest <= INFLATE_CHUNK);
        let short = inflate_each("t", &z[..], 0, z.len() as u64, data.len() as u64 - 1, None, &mut |_| {
            Ok(())
        });
        assert!(short.unwrap_err().message.contains("past its declared"));
        let long = inflate_each("t", &z[..], 0, z.len() as u64, data.len() as u64 + 1, None, &mut |_| {
            Ok(())
        });
        assert!(long.unwrap_err().message.contains("not the declared"));
        let bad = inflate_each(
            "t",
            &z[..],
            0,
            z.len() as u64,
            data.len() as u64,
            Some(!crc),
            &mut |_| Ok(()),
        );
        assert!(bad.unwrap_err().message.contains("CRC-32 mismatch"));
    }
}
