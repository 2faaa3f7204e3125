//! One structural parser for every packet kind, shared by the decoder and the stream framer.
//!
//! It reads headers, shapes and length fields only, never bodies, and reports either the full
//! layout or how many bytes it needs at least before it can say more. Every length is checked with
//! overflow-safe arithmetic before it is used, and nothing is allocated for a declared size.

use alloc::vec::Vec;
use core::ops::Range;

use super::error::{Error, ErrorKind};
use super::{MAGIC, MAX_DEPTH, MAX_ELEMENTS, MAX_NDIM, dtype_from_code, flags, pad_to};
use crate::dtype::DType;
use crate::tensor::Dims;

/// The fixed header of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// 3 or 4 (or 2 when legacy packets are allowed).
    pub version: u8,
    /// Flag bits (see [`super::flags`]).
    pub flags: u16,
    /// The dtype code (0 for containers).
    pub dtype_code: u8,
    /// Rank, or the entry count for bundles.
    pub ndim: u8,
    /// The reserved byte (v4 only; 0 for v3).
    pub reserved: u8,
    /// Header length: 10 for v4, 8 for v3.
    pub len: usize,
}

/// The outcome of [`measure`] on a possibly incomplete buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// The buffer holds a complete packet of this many bytes (trailing bytes not included).
    Complete(usize),
    /// At least this many bytes (counted from the packet start) are needed to say more.
    Incomplete(usize),
}

pub(crate) enum Fault {
    Short(u64),
    Bad(Error),
}

impl From<Error> for Fault {
    fn from(e: Error) -> Self {
        Fault::Bad(e)
    }
}

pub(crate) type PResult<T> = core::result::Result<T, Fault>;

fn bad<T>(kind: ErrorKind, at: usize) -> PResult<T> {
    Err(Fault::Bad(Error::new(kind, at)))
}

/// Ensures `bytes[..end]` exists.
fn need(bytes: &[u8], end: u64) -> PResult<()> {
    if (bytes.len() as u64) < end {
        Err(Fault::Short(end))
    } else {
        Ok(())
    }
}

fn u32_at(bytes: &[u8], at: u64) -> PResult<u32> {
    need(bytes, at + 4)?;
    let a = at as usize;
    Ok(u32::from_le_bytes([bytes[a], bytes[a + 1], bytes[a + 2], bytes[a + 3]]))
}

#[inline]
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Parses the fixed header (8 bytes for v3, 10 for v4).
pub fn parse_header(bytes: &[u8]) -> Result<Header, Error> {
    header(bytes, false).map_err(|f| match f {
        Fault::Short(n) => Error::new(
            ErrorKind::TooShort {
                needed: n,
                available: bytes.len() as u64,
            },
            bytes.len(),
        ),
        Fault::Bad(e) => e,
    })
}

#[inline]
pub(crate) fn header(bytes: &[u8], allow_v2: bool) -> PResult<Header> {
    if bytes.len() < 8 {
        // A stream can refuse garbage as soon as it sees four bytes.
        if bytes.len() >= 4 && bytes[..4] != MAGIC {
            return bad(ErrorKind::BadMagic([bytes[0], bytes[1], bytes[2], bytes[3]]), 0);
        }
        return Err(Fault::Short(8));
    }
    if bytes[..4] != MAGIC {
        return bad(ErrorKind::BadMagic([bytes[0], bytes[1], bytes[2], bytes[3]]), 0);
    }
    let version = bytes[4];
    match version {
        4 => {
            need(bytes, 10)?;
            Ok(Header {
                version,
                flags: u16::from_le_bytes([bytes[5], bytes[6]]),
                dtype_code: bytes[7],
                ndim: bytes[8],
                reserved: bytes[9],
                len: 10,
            })
        }
        3 => Ok(Header {
            version,
            flags: bytes[5] as u16,
            dtype_code: bytes[6],
            ndim: bytes[7],
            reserved: 0,
            len: 8,
        }),
        2 if allow_v2 => Ok(Header {
            version,
            flags: bytes[5] as u16,
            dtype_code: bytes[6],
            ndim: bytes[7],
            reserved: 0,
            len: 8,
        }),
        v => bad(ErrorKind::UnsupportedVersion(v), 4),
    }
}

/// Where the pieces of a dense packet lie, relative to its first byte.
#[derive(Clone, Debug)]
pub(crate) struct DenseLayout {
    /// The element dtype (its code already checked).
    pub dtype: DType,
    pub shape: Dims,
    pub body: Range<usize>,
    pub compressed: bool,
    pub footer: Option<usize>,
    pub end: usize,
}

/// Where the pieces of a packet lie, relative to its first byte.
#[derive(Clone, Debug)]
pub(crate) enum Layout {
    Dense(DenseLayout),
    Quantized {
        header: Header,
        shape: Vec<u64>,
        /// scheme byte through the last zero point
        meta: Range<usize>,
        num_scales: usize,
        body: Range<usize>,
        footer: Option<usize>,
        end: usize,
    },
    Strings {
        offsets: Range<usize>,
        payload: Range<usize>,
        footer: Option<usize>,
        end: usize,
    },
    Bundle {
        /// key range, value range
        entries: Vec<(Range<usize>, Range<usize>)>,
        end: usize,
    },
    Sparse {
        header: Header,
        shape: Vec<u64>,
        components: [Range<usize>; 3],
        end: usize,
    },
}

impl Layout {
    pub(crate) fn end(&self) -> usize {
        match self {
            Layout::Dense(DenseLayout { end, .. }) => *end,
            Layout::Quantized { end, .. }
            | Layout::Strings { end, .. }
            | Layout::Bundle { end, .. }
            | Layout::Sparse { end, .. } => *end,
        }
    }
}

/// How the layout parser treats a packet whose length is not self-described.
#[derive(Clone, Copy)]
pub(crate) struct Ctx {
    /// `bytes` is the packet's whole outer bound (a buffer, a bundle entry); a compressed body runs
    /// to its end. `false` in streams, where a compressed top-level packet cannot be framed.
    pub bounded: bool,
    pub allow_v2: bool,
}

fn shape_at(bytes: &[u8], at: usize, ndim: usize) -> PResult<Vec<u64>> {
    need(bytes, (at + 4 * ndim) as u64)?;
    Ok(bytes[at..at + 4 * ndim]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64)
        .collect())
}

fn check_ndim(ndim: usize, at: usize) -> PResult<()> {
    if ndim > MAX_NDIM {
        bad(ErrorKind::TooManyDims(ndim), at)
    } else {
        Ok(())
    }
}

fn check_elements(shape: &[u64], at: usize) -> PResult<u64> {
    match crate::tensor::numel(shape) {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => bad(ErrorKind::TooManyElements, at),
    }
}

/// Reads the alignment (and the exponent byte, if any) at `pos`; returns (alignment, new pos).
fn alignment(bytes: &[u8], h: &Header, pos: usize) -> PResult<(u64, usize)> {
    if h.flags & flags::CUST_ALIGN != 0 {
        need(bytes, pos as u64 + 1)?;
        let e = bytes[pos];
        if e >= 64 {
            return bad(ErrorKind::BadAlignExponent(e), pos);
        }
        Ok((1u64 << e, pos + 1))
    } else if h.flags & flags::ALIGNED != 0 {
        Ok((64, pos))
    } else {
        Ok((1, pos))
    }
}

/// `pos + pad`, as a usize, or "short" when that lies past any buffer this machine can hold.
fn padded(pos: usize, align: u64) -> PResult<usize> {
    let p = pos as u64 + pad_to(pos as u64, align);
    usize::try_from(p).map_err(|_| Fault::Short(p))
}

fn add(a: usize, b: u64) -> PResult<usize> {
    let s = a as u64 as u128 + b as u128;
    if s > usize::MAX as u128 || s > u64::MAX as u128 {
        Err(Fault::Short(u64::MAX))
    } else {
        Ok(s as usize)
    }
}

pub(crate) fn layout(bytes: &[u8], ctx: Ctx, depth: usize) -> PResult<Layout> {
    let h = header(bytes, ctx.allow_v2)?;
    if is_dense(&h) {
        return dense_layout(bytes, h, ctx).map(Layout::Dense);
    }
    layout_after_header(bytes, h, ctx, depth)
}

/// Whether [`layout`] takes a packet with this header for a dense one (no container, string,
/// GPU-reference or RAGGED flag, and no quantized dtype code): the decoder's fast path.
#[inline]
pub(crate) fn is_dense(h: &Header) -> bool {
    const OTHER_KINDS: u16 = flags::GPU_IPC_REF
        | flags::BUNDLE
        | flags::SPARSE_COO
        | flags::SPARSE_CSR
        | flags::SPARSE_CSC
        | flags::STRING
        | flags::RAGGED;
    h.flags & OTHER_KINDS == 0 && super::QDType::from_code(h.dtype_code).is_none()
}

/// [`layout`] once the header is read.
pub(crate) fn layout_after_header(bytes: &[u8], h: Header, ctx: Ctx, depth: usize) -> PResult<Layout> {
    let f = h.flags;
    if f & flags::GPU_IPC_REF != 0 {
        return bad(
            ErrorKind::Unsupported(
                "GPU IPC reference (flag 0x0400); it names device memory in another process and is opened on the device, not decoded".into(),
            ),
            5,
        );
    }
    let sparse = f & (flags::SPARSE_COO | flags::SPARSE_CSR | flags::SPARSE_CSC) != 0;
    if (f & flags::BUNDLE != 0 || sparse) && depth >= MAX_DEPTH {
        return bad(ErrorKind::TooDeep, 0);
    }
    if f & flags::BUNDLE != 0 {
        bundle_layout(bytes, &h)
    } else if sparse {
        sparse_layout(bytes, h)
    } else if f & flags::STRING != 0 || f & flags::RAGGED != 0 {
        strings_layout(bytes, h)
    } else if let Some(q) = super::QDType::from_code(h.dtype_code) {
        quantized_layout(bytes, h, q)
    } else {
        dense_layout(bytes, h, ctx).map(Layout::Dense)
    }
}

/// A bundle: `ndim` entries of (key length, key, value length, value).
fn bundle_layout(bytes: &[u8], h: &Header) -> PResult<Layout> {
    let (base, ndim) = (h.len, h.ndim as usize);
    let mut pos = base;
    let mut entries = Vec::with_capacity(ndim);
    for _ in 0..ndim {
        let kl = u32_at(bytes, pos as u64)? as u64;
        let key = pos + 4..add(pos + 4, kl)?;
        let vl = u32_at(bytes, key.end as u64)? as u64;
        let val = key.end + 4..add(key.end + 4, vl)?;
        need(bytes, val.end as u64)?;
        pos = val.end;
        entries.push((key, val));
    }
    Ok(Layout::Bundle { entries, end: pos })
}

/// A sparse container: its shape, then three length-prefixed component packets.
fn sparse_layout(bytes: &[u8], h: Header) -> PResult<Layout> {
    let (base, ndim) = (h.len, h.ndim as usize);
    check_ndim(ndim, 8)?;
    let shape = shape_at(bytes, base, ndim)?;
    let mut pos = base + 4 * ndim;
    let mut comps = [0..0, 0..0, 0..0];
    for c in &mut comps {
        let l = u32_at(bytes, pos as u64)? as u64;
        *c = pos + 4..add(pos + 4, l)?;
        need(bytes, c.end as u64)?;
        pos = c.end;
    }
    Ok(Layout::Sparse {
        header: h,
        shape,
        components: comps,
        end: pos,
    })
}

/// A strings packet: offsets (count + 1 of them) then the payload.
fn strings_layout(bytes: &[u8], h: Header) -> PResult<Layout> {
    let (base, ndim, integrity) = (h.len, h.ndim as usize, h.flags & flags::INTEGRITY != 0);
    if h.flags & flags::STRING == 0 {
        return bad(
            ErrorKind::Unsupported("RAGGED packet (flag 0x0200); tenso never writes it and refuses to load it".into()),
            5,
        );
    }
    check_ndim(ndim, 8)?;
    let shape = shape_at(bytes, base, ndim)?;
    let count = if ndim == 0 { 0 } else { shape[0] };
    let (align, pos) = alignment(bytes, &h, base + 4 * ndim)?;
    let body = padded(pos, align)?;
    let off_len = count
        .checked_add(1)
        .and_then(|c| c.checked_mul(8))
        .ok_or(Fault::Short(u64::MAX))?;
    let off_end = add(body, off_len)?;
    need(bytes, off_end as u64)?;
    let payload_len = u64_at(bytes, off_end - 8);
    let pay_end = add(off_end, payload_len)?;
    let footer = if integrity { Some(pay_end) } else { None };
    let end = add(pay_end, if integrity { 8 } else { 0 })?;
    need(bytes, end as u64)?;
    Ok(Layout::Strings {
        offsets: body..off_end,
        payload: off_end..pay_end,
        footer,
        end,
    })
}

/// A quantized packet: its shape, the scheme, scales and zero points, then the packed codes.
fn quantized_layout(bytes: &[u8], h: Header, q: super::QDType) -> PResult<Layout> {
    let (base, ndim, integrity) = (h.len, h.ndim as usize, h.flags & flags::INTEGRITY != 0);
    check_ndim(ndim, 8)?;
    let shape = shape_at(bytes, base, ndim)?;
    let n = check_elements(&shape, base)?;
    let meta_start = base + 4 * ndim;
    need(bytes, meta_start as u64 + 10)?;
    let num_scales = u32_at(bytes, meta_start as u64 + 6)? as u64;
    let meta_end = add(meta_start + 10, num_scales * 8)?;
    need(bytes, meta_end as u64)?;
    let (align, pos) = alignment(bytes, &h, meta_end)?;
    let body_start = padded(pos, align)?;
    let body_end = add(body_start, q.packed_len(n))?;
    let footer = if integrity { Some(body_end) } else { None };
    let end = add(body_end, if integrity { 8 } else { 0 })?;
    need(bytes, end as u64)?;
    Ok(Layout::Quantized {
        header: h,
        shape,
        meta: meta_start..meta_end,
        num_scales: num_scales as usize,
        body: body_start..body_end,
        footer,
        end,
    })
}

/// A dense packet: its shape and its body, raw or (only where the buffer bounds it) compressed.
#[inline]
pub(crate) fn dense_layout(bytes: &[u8], h: Header, ctx: Ctx) -> PResult<DenseLayout> {
    let (base, ndim, integrity) = (h.len, h.ndim as usize, h.flags & flags::INTEGRITY != 0);
    let Some(dtype) = dtype_from_code(h.dtype_code) else {
        if h.dtype_code == 21 {
            return bad(
                ErrorKind::Unsupported("BYTES dtype (21); it is reserved and never written".into()),
                base - 3,
            );
        }
        return bad(ErrorKind::UnknownDType(h.dtype_code), base - 3);
    };
    check_ndim(ndim, 8)?;
    need(bytes, (base + 4 * ndim) as u64)?;
    let shape = Dims::from_le_u32s(&bytes[base..], ndim);
    let n = check_elements(shape.as_slice(), base)?;
    let (align, pos) = alignment(bytes, &h, base + 4 * ndim)?;
    let body_start = padded(pos, align)?;
    let raw_len = n * dtype.itemsize() as u64;
    let foot = if integrity { 8 } else { 0 };
    if h.flags & flags::COMPRESSION != 0 {
        if !ctx.bounded {
            return bad(
                ErrorKind::Unsupported(
                    "compressed packet in a stream: its body length is not stored, so it cannot be framed; frame packets in the transport, or send uncompressed".into(),
                ),
                5,
            );
        }
        need(bytes, body_start as u64 + foot)?;
        let body_end = bytes.len() - foot as usize;
        let footer = if integrity { Some(body_end) } else { None };
        return Ok(DenseLayout {
            dtype,
            shape,
            body: body_start..body_end,
            compressed: true,
            footer,
            end: bytes.len(),
        });
    }
    let body_end = add(body_start, raw_len)?;
    let end = add(body_end, foot)?;
    need(bytes, end as u64)?;
    let footer = if integrity { Some(body_end) } else { None };
    Ok(DenseLayout {
        dtype,
        shape,
        body: body_start..body_end,
        compressed: false,
        footer,
        end,
    })
}

/// Frames one packet at the start of `bytes` without decoding it: how long it is, or how many
/// bytes are needed at least before that can be told.
///
/// Used by stream readers: [`Measure::Incomplete`] gives a lower bound on the packet length, so a
/// reader can read exactly that much more and never past the packet. Bundles and sparse
/// containers are framed by their length prefixes (their contents are checked on decode).
/// Compressed top-level packets cannot be framed (their length is not stored) and are refused.
pub fn measure(bytes: &[u8]) -> Result<Measure, Error> {
    match layout(
        bytes,
        Ctx {
            bounded: false,
            allow_v2: false,
        },
        0,
    ) {
        Ok(l) => Ok(Measure::Complete(l.end())),
        Err(Fault::Short(n)) => Ok(Measure::Incomplete(usize::try_from(n).unwrap_or(usize::MAX))),
        Err(Fault::Bad(e)) => Err(e),
    }
}
