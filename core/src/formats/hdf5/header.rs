//! Object headers (v1 and v2 with continuation blocks) and the messages the reader decodes:
//! dataspace, datatype, fill value, data layout, filter pipeline, link, link info, attribute,
//! attribute info, symbol table.

use alloc::collections::BTreeSet;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::super::{ErrorKind, FormatError, MAX_HEADER};
use super::io::{Ctx, Cur, err, undef};
use crate::source::ReadAt;

/// Message type numbers.
pub(super) mod ty {
    pub const DATASPACE: u16 = 0x01;
    pub const LINK_INFO: u16 = 0x02;
    pub const DATATYPE: u16 = 0x03;
    pub const FILL_OLD: u16 = 0x04;
    pub const FILL: u16 = 0x05;
    pub const LINK: u16 = 0x06;
    pub const EXTERNAL: u16 = 0x07;
    pub const LAYOUT: u16 = 0x08;
    pub const FILTERS: u16 = 0x0B;
    pub const ATTRIBUTE: u16 = 0x0C;
    pub const CONTINUATION: u16 = 0x10;
    pub const SYMBOL_TABLE: u16 = 0x11;
    pub const ATTRIBUTE_INFO: u16 = 0x15;
}

/// The most messages one object header may hold (all chunks together).
const MAX_MESSAGES: usize = 1 << 16;
/// The most continuation blocks one object header may chain.
const MAX_CONTINUATIONS: usize = 1 << 12;

/// One header message: its type, flags, bytes and where they are.
pub(super) struct Message {
    pub ty: u16,
    pub flags: u8,
    pub data: Vec<u8>,
    pub at: u64,
}

impl Message {
    pub fn cur(&self) -> Cur<'_> {
        Cur::of(&self.data, self.at)
    }

    /// Whether the message is shared (stored in another object or the shared-message heap).
    pub fn shared(&self) -> bool {
        self.flags & 0x02 != 0
    }
}

/// The messages of the object header at `addr`, continuation blocks followed (each address at
/// most once, so a cycle is refused), checksums of v2 headers verified.
pub(super) fn read_object<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, addr: u64) -> Result<Vec<Message>, FormatError> {
    let at = ctx.abs(addr)?;
    let head = ctx.read_upto(addr, 16)?;
    let mut msgs = Vec::new();
    let mut total = 0u64;
    let mut pending: Vec<(u64, u64)> = Vec::new();
    let v2 = head.starts_with(b"OHDR");
    if v2 {
        let mut c = ctx.cur_upto(addr, 64)?;
        c.sig(b"OHDR", "object header")?;
        let version = c.u8()?;
        if version != 2 {
            return Err(err(
                ErrorKind::UnsupportedVersion,
                alloc::format!("object header version {version}"),
            )
            .at(at));
        }
        let flags = c.u8()?;
        if flags & 0x20 != 0 {
            c.skip(16)?;
        }
        if flags & 0x10 != 0 {
            c.skip(4)?;
        }
        let size = c.uv(1 << (flags & 3))?;
        let prefix = c.pos() as u64;
        check_size(size, at)?;
        let len = prefix
            .checked_add(size)
            .and_then(|n| n.checked_add(4))
            .ok_or_else(|| overflow(at))?;
        let mut c = ctx.cur(addr, len)?;
        c.seek(prefix as usize)?;
        v2_messages(&mut c, flags, size as usize, &mut msgs, &mut pending, ctx.so, ctx.sl)?;
        c.checksum("object header")?;
        follow(ctx, &mut msgs, &mut pending, &mut total, Some(flags), addr)?;
    } else {
        let mut c = Cur::new(head, at);
        let version = c.u8()?;
        if version != 1 {
            return Err(err(
                ErrorKind::UnsupportedVersion,
                alloc::format!("object header version {version} (expected 1, or a v2 'OHDR' header); an address is wrong or the file is corrupt"),
            )
            .at(at));
        }
        c.skip(1)?;
        let _nmsgs = c.u16()?;
        let _refs = c.u32()?;
        let size = c.u32()? as u64;
        check_size(size, at)?;
        // Messages start 16 bytes in (the 12-byte prefix padded to 8).
        pending.push((addr.checked_add(16).ok_or_else(|| overflow(at))?, size));
        follow(ctx, &mut msgs, &mut pending, &mut total, None, addr)?;
    }
    Ok(msgs)
}

fn overflow(at: u64) -> FormatError {
    err(ErrorKind::Overflow, "an object header's size overflows 64 bits").at(at)
}

fn check_size(size: u64, at: u64) -> Result<(), FormatError> {
    if size > MAX_HEADER {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            alloc::format!("an object header block claims {size} bytes (the limit is {MAX_HEADER})"),
        )
        .at(at));
    }
    Ok(())
}

/// Reads the pending blocks (continuations): v1 blocks are bare messages, v2 blocks `OCHK`.
fn follow<S: ReadAt + ?Sized>(
    ctx: &Ctx<'_, S>,
    msgs: &mut Vec<Message>,
    pending: &mut Vec<(u64, u64)>,
    total: &mut u64,
    v2: Option<u8>,
    first: u64,
) -> Result<(), FormatError> {
    let mut seen = BTreeSet::new();
    seen.insert(first);
    let mut blocks = 0usize;
    let mut index = 0;
    while index < pending.len() {
        let (addr, len) = pending[index];
        index += 1;
        blocks += 1;
        let at = ctx.abs(addr)?;
        if blocks > MAX_CONTINUATIONS {
            return Err(err(
                ErrorKind::Limit,
                "an object header chains more than 4096 continuation blocks",
            )
            .at(at));
        }
        if !seen.insert(addr) {
            return Err(err(
                ErrorKind::Syntax,
                "an object header's continuation blocks form a cycle; the file is corrupt or hostile",
            )
            .at(at));
        }
        check_size(len, at)?;
        *total = total.saturating_add(len);
        if *total > MAX_HEADER {
            return Err(err(
                ErrorKind::HeaderTooLarge,
                "an object header's blocks total more than the header limit",
            )
            .at(at));
        }
        let mut c = ctx.cur(addr, len)?;
        match v2 {
            None => v1_messages(&mut c, msgs, pending, ctx.so, ctx.sl)?,
            Some(flags) => {
                c.sig(b"OCHK", "object header continuation")?;
                let n = (len as usize).checked_sub(8).ok_or_else(|| {
                    err(
                        ErrorKind::Syntax,
                        "an object header continuation block is shorter than 8 bytes",
                    )
                    .at(at)
                })?;
                v2_messages(&mut c, flags, n, msgs, pending, ctx.so, ctx.sl)?;
                c.checksum("object header continuation")?;
            }
        }
    }
    Ok(())
}

fn push(msgs: &mut Vec<Message>, m: Message, pending: &mut Vec<(u64, u64)>, so: u8, sl: u8) -> Result<(), FormatError> {
    if msgs.len() >= MAX_MESSAGES {
        return Err(err(ErrorKind::Limit, "an object header holds more than 65536 messages").at(m.at));
    }
    if m.ty == ty::CONTINUATION {
        let mut c = m.cur();
        let addr = c.uv(so as usize)?;
        let len = c.uv(sl as usize)?;
        pending.push((addr, len));
    }
    msgs.push(m);
    Ok(())
}

fn v1_messages(
    c: &mut Cur<'_>,
    msgs: &mut Vec<Message>,
    pending: &mut Vec<(u64, u64)>,
    so: u8,
    sl: u8,
) -> Result<(), FormatError> {
    while c.remaining() >= 8 {
        let ty = c.u16()?;
        let size = c.u16()? as usize;
        let flags = c.u8()?;
        c.skip(3)?;
        let at = c.offset();
        let data = c.bytes(size)?.to_vec();
        push(msgs, Message { ty, flags, data, at }, pending, so, sl)?;
    }
    Ok(())
}

fn v2_messages(
    c: &mut Cur<'_>,
    hflags: u8,
    n: usize,
    msgs: &mut Vec<Message>,
    pending: &mut Vec<(u64, u64)>,
    so: u8,
    sl: u8,
) -> Result<(), FormatError> {
    let end =
        c.pos().checked_add(n).filter(|e| *e <= c.len()).ok_or_else(|| {
            err(ErrorKind::Truncated, "an object header's messages run past its block").at(c.offset())
        })?;
    let hlen = if hflags & 0x04 != 0 { 6 } else { 4 };
    while end - c.pos() >= hlen {
        let ty = c.u8()? as u16;
        let size = c.u16()? as usize;
        let flags = c.u8()?;
        if hflags & 0x04 != 0 {
            c.skip(2)?;
        }
        let at = c.offset();
        if size > end - c.pos() {
            return Err(err(ErrorKind::Truncated, "an object header message runs past its block").at(at));
        }
        let data = c.bytes(size)?.to_vec();
        push(msgs, Message { ty, flags, data, at }, pending, so, sl)?;
    }
    c.seek(end)
}

/// A dataspace: how many elements, in what shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Space {
    /// One element, shape `[]`.
    Scalar,
    /// An array; `max` is `u64::MAX` for an unlimited dimension.
    Simple { dims: Vec<u64>, max: Option<Vec<u64>> },
    /// No elements at all (`H5S_NULL`).
    Null,
}

/// The most dimensions a dataspace may have (HDF5's own limit).
pub(super) const MAX_RANK: usize = 32;

/// Decodes a dataspace message.
pub(super) fn dataspace(c: &mut Cur<'_>, sl: u8) -> Result<Space, FormatError> {
    let at = c.offset();
    let version = c.u8()?;
    let rank = c.u8()? as usize;
    let flags = c.u8()?;
    let kind = match version {
        1 => {
            c.skip(5)?;
            if rank == 0 { 0 } else { 1 }
        }
        2 => c.u8()?,
        v => {
            return Err(err(
                ErrorKind::UnsupportedVersion,
                alloc::format!("dataspace message version {v}"),
            )
            .at(at));
        }
    };
    if rank > MAX_RANK {
        return Err(err(
            ErrorKind::Limit,
            alloc::format!("a dataspace has {rank} dimensions (HDF5 allows {MAX_RANK})"),
        )
        .at(at));
    }
    let unlimited = undef(sl);
    let read_dims = |c: &mut Cur<'_>| -> Result<Vec<u64>, FormatError> {
        (0..rank)
            .map(|_| c.uv(sl as usize).map(|d| if d == unlimited { u64::MAX } else { d }))
            .collect()
    };
    match kind {
        0 => Ok(Space::Scalar),
        1 => {
            let dims = read_dims(c)?;
            let max = if flags & 1 != 0 { Some(read_dims(c)?) } else { None };
            if dims.contains(&u64::MAX) {
                return Err(err(ErrorKind::Syntax, "a dataspace's current size is 'unlimited'").at(at));
            }
            Ok(Space::Simple { dims, max })
        }
        2 => Ok(Space::Null),
        k => Err(err(
            ErrorKind::Syntax,
            alloc::format!("dataspace type {k} (expected scalar, simple or null)"),
        )
        .at(at)),
    }
}

/// A floating-point format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FloatKind {
    F16,
    BF16,
    F32,
    F64,
}

/// A datatype, as far as this reader cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Dt {
    /// Two's complement or unsigned integer of 1, 2, 4 or 8 bytes, no padding bits.
    Int { size: usize, signed: bool, be: bool },
    /// An IEEE float.
    Float { kind: FloatKind, be: bool },
    /// h5py's bool: an enum of a 1-byte integer with exactly `FALSE = 0` and `TRUE = 1`.
    Bool,
    /// h5py's complex: a compound of two same floats `r` and `i` (or HDF5 2.0's complex class).
    Complex { part: FloatKind, be: bool },
    /// A fixed-length string of `size` bytes.
    Str { size: usize },
    /// A variable-length string (global heap references).
    VlenStr,
    /// Anything else, with what it is.
    Other { what: String },
}

impl Dt {
    /// NumPy's `dtype.str` for the stored type (`<i4`, `>f8`, `|b1`, `|S5`, ...).
    pub fn stored_name(&self) -> String {
        let order = |be: bool| if be { '>' } else { '<' };
        match self {
            Dt::Int { size, signed, be } => {
                let o = if *size == 1 { '|' } else { order(*be) };
                alloc::format!("{o}{}{size}", if *signed { 'i' } else { 'u' })
            }
            Dt::Float { kind, be } => match kind {
                FloatKind::F16 => alloc::format!("{}f2", order(*be)),
                FloatKind::BF16 => alloc::format!("{}bf16", order(*be)),
                FloatKind::F32 => alloc::format!("{}f4", order(*be)),
                FloatKind::F64 => alloc::format!("{}f8", order(*be)),
            },
            Dt::Bool => "|b1".to_string(),
            Dt::Complex { part, be } => match part {
                FloatKind::F64 => alloc::format!("{}c16", order(*be)),
                _ => alloc::format!("{}c8", order(*be)),
            },
            Dt::Str { size } => alloc::format!("|S{size}"),
            Dt::VlenStr => "vlen-str".to_string(),
            Dt::Other { what } => what.clone(),
        }
    }
}

fn float_kind(size: u32, exp: u8, mant: u8, bias: u32) -> Option<FloatKind> {
    match (size, exp, mant, bias) {
        (2, 5, 10, 15) => Some(FloatKind::F16),
        (2, 8, 7, 127) => Some(FloatKind::BF16),
        (4, 8, 23, 127) => Some(FloatKind::F32),
        (8, 11, 52, 1023) => Some(FloatKind::F64),
        _ => None,
    }
}

/// The deepest nesting of datatypes (compound members, enum and array bases) followed.
const MAX_DT_DEPTH: usize = 16;

/// Decodes a datatype message, consuming exactly its bytes (so nested types can follow).
pub(super) fn datatype(c: &mut Cur<'_>, depth: usize) -> Result<Dt, FormatError> {
    let at = c.offset();
    if depth > MAX_DT_DEPTH {
        return Err(err(ErrorKind::Limit, "datatypes nest more than 16 deep").at(at));
    }
    let b0 = c.u8()?;
    let (class, version) = (b0 & 0x0f, b0 >> 4);
    let bits = c.uv(3)? as u32;
    let size = c.u32()?;
    let other = |what: &str| Dt::Other { what: what.to_string() };
    Ok(match class {
        0 => {
            let offset = c.u16()?;
            let precision = c.u16()?;
            let (be, signed) = (bits & 1 != 0, bits & 8 != 0);
            if offset == 0 && precision as u64 == size as u64 * 8 && matches!(size, 1 | 2 | 4 | 8) {
                Dt::Int {
                    size: size as usize,
                    signed,
                    be,
                }
            } else {
                other("integer with padding bits")
            }
        }
        1 => {
            let offset = c.u16()?;
            let precision = c.u16()?;
            let exp_loc = c.u8()?;
            let exp = c.u8()?;
            let mant_loc = c.u8()?;
            let mant = c.u8()?;
            let bias = c.u32()?;
            let sign = (bits >> 8) & 0xff;
            let ieee = bits & 0x40 == 0
                && offset == 0
                && matches!(size, 2 | 4 | 8)
                && precision as u32 == size * 8
                && mant_loc == 0
                && exp_loc == mant
                && sign == size * 8 - 1;
            match float_kind(size, exp, mant, bias) {
                Some(kind) if ieee => Dt::Float {
                    kind,
                    be: bits & 1 != 0,
                },
                _ => other("non-IEEE float"),
            }
        }
        2 => {
            c.skip(2)?;
            other("time")
        }
        3 => Dt::Str { size: size as usize },
        4 => {
            c.skip(4)?;
            other("bitfield")
        }
        5 => {
            c.skip((bits & 0xff) as usize)?;
            other("opaque")
        }
        6 => compound(c, version, bits, size, depth)?,
        7 => other("reference"),
        8 => {
            let n = (bits & 0xffff) as usize;
            let base = datatype(c, depth + 1)?;
            let mut names = Vec::new();
            for _ in 0..n {
                names.push(name(c, version < 3)?);
            }
            let base_size = match base {
                Dt::Int { size, .. } => size,
                _ => return Ok(other("enum")),
            };
            let values = c.bytes(
                n.checked_mul(base_size)
                    .ok_or_else(|| err(ErrorKind::Overflow, "enum size").at(at))?,
            )?;
            let clean = base_size == 1
                && n == 2
                && names
                    .iter()
                    .zip(values)
                    .all(|(nm, v)| (nm == "FALSE" && *v == 0) || (nm == "TRUE" && *v == 1))
                && names[0] != names[1];
            if clean { Dt::Bool } else { other("enum") }
        }
        9 => {
            let base = datatype(c, depth + 1)?;
            let _ = base;
            if bits & 0x0f == 1 {
                Dt::VlenStr
            } else {
                other("variable-length sequence")
            }
        }
        10 => {
            let nd = c.u8()? as usize;
            if version < 3 {
                c.skip(3)?;
                c.skip(nd * 8)?;
            } else {
                c.skip(nd * 4)?;
            }
            datatype(c, depth + 1)?;
            other("array")
        }
        11 => {
            // HDF5 2.0's complex class: the base float type follows.
            match datatype(c, depth + 1)? {
                Dt::Float {
                    kind: part @ (FloatKind::F32 | FloatKind::F64),
                    be,
                } => Dt::Complex { part, be },
                _ => other("complex of a non-float32/64 base"),
            }
        }
        k => return Err(err(ErrorKind::Syntax, alloc::format!("datatype class {k}")).at(at)),
    })
}

/// A NUL-terminated name, padded to a multiple of 8 bytes when `padded`.
fn name(c: &mut Cur<'_>, padded: bool) -> Result<String, FormatError> {
    let start = c.pos();
    let at = c.offset();
    let rest = &c.all()[start..];
    let n = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| err(ErrorKind::Syntax, "a name in a datatype has no terminating NUL").at(at))?;
    let s = String::from_utf8_lossy(&rest[..n]).into_owned();
    let used = if padded { (n + 1).div_ceil(8) * 8 } else { n + 1 };
    c.skip(used)?;
    Ok(s)
}

fn compound(c: &mut Cur<'_>, version: u8, bits: u32, size: u32, depth: usize) -> Result<Dt, FormatError> {
    let n = (bits & 0xffff) as usize;
    let mut members = Vec::new();
    for _ in 0..n {
        let nm = name(c, version < 3)?;
        let offset = if version < 3 {
            c.u32()? as u64
        } else {
            c.uv(super::io::enc_size(size as u64))?
        };
        if version == 1 {
            c.skip(1 + 3 + 4 + 4 + 16)?;
        }
        members.push((nm, offset, datatype(c, depth + 1)?));
    }
    if let [
        (r, 0, Dt::Float { kind: a, be: ba }),
        (i, off, Dt::Float { kind: b, be: bb }),
    ] = members.as_slice()
    {
        let part_size = match a {
            FloatKind::F32 => 4,
            FloatKind::F64 => 8,
            _ => 0,
        };
        if r == "r"
            && i == "i"
            && a == b
            && ba == bb
            && part_size > 0
            && *off == part_size
            && size as u64 == 2 * part_size
        {
            return Ok(Dt::Complex { part: *a, be: *ba });
        }
    }
    Ok(Dt::Other {
        what: "compound".to_string(),
    })
}

/// A fill value message (new or old): the fill bytes for one element, if defined.
pub(super) fn fill_value(m: &Message) -> Result<Option<Vec<u8>>, FormatError> {
    let mut c = m.cur();
    let at = c.offset();
    let size = if m.ty == ty::FILL_OLD {
        Some(c.u32()?)
    } else {
        let version = c.u8()?;
        match version {
            1 | 2 => {
                c.skip(2)?;
                let defined = c.u8()?;
                if version == 1 || defined != 0 {
                    Some(c.u32()?)
                } else {
                    None
                }
            }
            3 => {
                let flags = c.u8()?;
                if flags & 0x20 != 0 { Some(c.u32()?) } else { None }
            }
            v => {
                return Err(err(
                    ErrorKind::UnsupportedVersion,
                    alloc::format!("fill value message version {v}"),
                )
                .at(at));
            }
        }
    };
    match size {
        Some(n) if n > 0 => Ok(Some(c.bytes(n as usize)?.to_vec())),
        _ => Ok(None),
    }
}

/// How a chunked dataset finds its chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ChunkIndex {
    /// No storage allocated: every element is the fill value.
    Unallocated,
    /// A version-1 B-tree of chunk keys (layout versions 1–3).
    BTreeV1 { addr: u64 },
    /// One chunk at `addr` (filtered: `Some((stored size, filter mask))`).
    Single { addr: u64, filtered: Option<(u64, u32)> },
    /// Chunks back to back at `addr`, in chunk order, never filtered.
    Implicit { addr: u64 },
    /// A fixed array of chunk entries.
    FixedArray { addr: u64 },
    /// An extensible array of chunk entries (one unlimited dimension).
    ExtensibleArray { addr: u64 },
    /// A version-2 B-tree of chunk records (several unlimited dimensions).
    BTreeV2 { addr: u64 },
}

/// A data layout message.
pub(super) enum Layout {
    Compact(Vec<u8>),
    /// `addr` undefined: never written.
    Contiguous {
        addr: u64,
        size: Option<u64>,
    },
    /// `dims` are the chunk dimensions with the element size last.
    Chunked {
        dims: Vec<u64>,
        index: ChunkIndex,
        edge_unfiltered: bool,
    },
    /// Virtual or another class this reader does not read.
    Other(String),
}

/// Decodes a data layout message (versions 1–5).
pub(super) fn layout<S: ReadAt + ?Sized>(ctx: &Ctx<'_, S>, m: &Message) -> Result<Layout, FormatError> {
    let mut c = m.cur();
    let at = c.offset();
    let so = ctx.so as usize;
    let version = c.u8()?;
    let undefined = undef(ctx.so);
    let dims_of = |c: &mut Cur<'_>, n: usize, w: usize| -> Result<Vec<u64>, FormatError> {
        if !(2..=MAX_RANK + 1).contains(&n) {
            return Err(err(
                ErrorKind::Syntax,
                alloc::format!("a chunked layout has {n} dimensions (including the element size)"),
            )
            .at(at));
        }
        let d: Vec<u64> = (0..n).map(|_| c.uv(w)).collect::<Result<_, _>>()?;
        if d.contains(&0) {
            return Err(err(ErrorKind::Syntax, "a chunk dimension is 0").at(at));
        }
        Ok(d)
    };
    match version {
        1 | 2 => {
            let nd = c.u8()? as usize;
            let class = c.u8()?;
            c.skip(5)?;
            match class {
                0 => {
                    c.skip(nd * 4)?;
                    let n = c.u32()? as usize;
                    Ok(Layout::Compact(c.bytes(n)?.to_vec()))
                }
                1 => {
                    let addr = c.uv(so)?;
                    Ok(Layout::Contiguous { addr, size: None })
                }
                2 => {
                    let addr = c.uv(so)?;
                    let dims = dims_of(&mut c, nd, 4)?;
                    Ok(btree_v1_chunked(addr, undefined, dims))
                }
                k => Err(err(ErrorKind::Syntax, alloc::format!("layout class {k}")).at(at)),
            }
        }
        // Version 5 (HDF5 2.0) has version 4's encoding; only filtered chunk sizes in the chunk
        // indexes are always `sizeof_size` wide, which the index readers take from entry sizes.
        3..=5 => {
            let class = c.u8()?;
            match class {
                0 => {
                    let n = c.u16()? as usize;
                    Ok(Layout::Compact(c.bytes(n)?.to_vec()))
                }
                1 => {
                    let addr = c.uv(so)?;
                    let size = c.uv(ctx.sl as usize)?;
                    Ok(Layout::Contiguous { addr, size: Some(size) })
                }
                2 if version == 3 => {
                    let nd = c.u8()? as usize;
                    let addr = c.uv(so)?;
                    let dims = dims_of(&mut c, nd, 4)?;
                    Ok(btree_v1_chunked(addr, undefined, dims))
                }
                2 => {
                    let flags = c.u8()?;
                    let nd = c.u8()? as usize;
                    let w = c.u8()? as usize;
                    if !(1..=8).contains(&w) {
                        return Err(err(ErrorKind::Syntax, alloc::format!("chunk dimension width {w}")).at(at));
                    }
                    let dims = dims_of(&mut c, nd, w)?;
                    let kind = c.u8()?;
                    let mut filtered = None;
                    match kind {
                        1 => {
                            if flags & 2 != 0 {
                                let size = c.uv(ctx.sl as usize)?;
                                let mask = c.u32()?;
                                filtered = Some((size, mask));
                            }
                        }
                        2 => {}
                        3 => c.skip(1)?,
                        4 => c.skip(5)?,
                        5 => c.skip(6)?,
                        k => {
                            return Err(err(
                                ErrorKind::Unsupported,
                                alloc::format!("chunk index type {k} is not one HDF5 defines"),
                            )
                            .at(at));
                        }
                    }
                    let addr = c.uv(so)?;
                    let index = if addr == undefined {
                        ChunkIndex::Unallocated
                    } else {
                        match kind {
                            1 => ChunkIndex::Single { addr, filtered },
                            2 => ChunkIndex::Implicit { addr },
                            3 => ChunkIndex::FixedArray { addr },
                            4 => ChunkIndex::ExtensibleArray { addr },
                            _ => ChunkIndex::BTreeV2 { addr },
                        }
                    };
                    Ok(Layout::Chunked {
                        dims,
                        index,
                        edge_unfiltered: flags & 1 != 0,
                    })
                }
                3 => Ok(Layout::Other(
                    "virtual dataset (data mapped from other files)".to_string(),
                )),
                k => Err(err(ErrorKind::Syntax, alloc::format!("layout class {k}")).at(at)),
            }
        }
        v => Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("data layout message version {v}"),
        )
        .at(at)),
    }
}

/// One filter of a pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Filter {
    pub id: u16,
    pub name: String,
    pub optional: bool,
    pub params: Vec<u32>,
}

/// The most filters a pipeline may have (HDF5's own limit).
const MAX_FILTERS: usize = 32;

/// Decodes a filter pipeline message (versions 1 and 2).
pub(super) fn filters(m: &Message) -> Result<Vec<Filter>, FormatError> {
    let mut c = m.cur();
    let at = c.offset();
    let version = c.u8()?;
    let n = c.u8()? as usize;
    if n > MAX_FILTERS {
        return Err(err(
            ErrorKind::Limit,
            alloc::format!("a filter pipeline lists {n} filters (at most 32)"),
        )
        .at(at));
    }
    if version == 1 {
        c.skip(6)?;
    } else if version != 2 {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("filter pipeline message version {version}"),
        )
        .at(at));
    }
    let mut out = Vec::new();
    for _ in 0..n {
        let id = c.u16()?;
        let name_len = if version == 1 || id >= 256 {
            c.u16()? as usize
        } else {
            0
        };
        let flags = c.u16()?;
        let nvals = c.u16()? as usize;
        let name = if name_len > 0 {
            let b = c.bytes(name_len)?;
            let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
            String::from_utf8_lossy(&b[..end]).into_owned()
        } else {
            String::new()
        };
        let params = (0..nvals).map(|_| c.u32()).collect::<Result<Vec<_>, _>>()?;
        if version == 1 && nvals % 2 == 1 {
            c.skip(4)?;
        }
        out.push(Filter {
            id,
            name,
            optional: flags & 1 != 0,
            params,
        });
    }
    Ok(out)
}

/// Where a link points.
pub(super) enum Target {
    Hard(u64),
    Soft(String),
    External,
    Other(u8),
}

/// A link message: a name in a group and its target.
pub(super) struct Link {
    pub name: Vec<u8>,
    pub target: Target,
}

/// Decodes a link message.
pub(super) fn link(c: &mut Cur<'_>, so: u8) -> Result<Link, FormatError> {
    let at = c.offset();
    let version = c.u8()?;
    if version != 1 {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("link message version {version}"),
        )
        .at(at));
    }
    let flags = c.u8()?;
    let kind = if flags & 0x08 != 0 { c.u8()? } else { 0 };
    if flags & 0x04 != 0 {
        c.skip(8)?;
    }
    if flags & 0x10 != 0 {
        c.skip(1)?;
    }
    let n = c.uv(1 << (flags & 3))? as usize;
    let name = c.bytes(n)?.to_vec();
    let target = match kind {
        0 => Target::Hard(c.uv(so as usize)?),
        1 => {
            let n = c.u16()? as usize;
            Target::Soft(String::from_utf8_lossy(c.bytes(n)?).into_owned())
        }
        64 => Target::External,
        k => Target::Other(k),
    };
    Ok(Link { name, target })
}

/// A link info or attribute info message: the dense storage's fractal heap and name index
/// (either undefined when the storage is compact).
pub(super) struct DenseInfo {
    pub heap: u64,
    pub names: u64,
}

/// Decodes a link info (`corder_bytes` 8) or attribute info (`corder_bytes` 2) message.
pub(super) fn dense_info(m: &Message, so: u8, corder_bytes: usize) -> Result<DenseInfo, FormatError> {
    let mut c = m.cur();
    let at = c.offset();
    let version = c.u8()?;
    if version != 0 {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("link/attribute info message version {version}"),
        )
        .at(at));
    }
    let flags = c.u8()?;
    if flags & 1 != 0 {
        c.skip(corder_bytes)?;
    }
    let heap = c.uv(so as usize)?;
    let names = c.uv(so as usize)?;
    Ok(DenseInfo { heap, names })
}

/// A decoded attribute message.
pub(super) struct Attribute {
    pub name: String,
    pub dt: Result<Dt, String>,
    pub space: Space,
    pub data: Vec<u8>,
}

/// Decodes an attribute message (versions 1–3).
pub(super) fn attribute(c: &mut Cur<'_>, sl: u8) -> Result<Attribute, FormatError> {
    let at = c.offset();
    let version = c.u8()?;
    if !(1..=3).contains(&version) {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("attribute message version {version}"),
        )
        .at(at));
    }
    let flags = c.u8()?;
    let name_len = c.u16()? as usize;
    let dt_len = c.u16()? as usize;
    let ds_len = c.u16()? as usize;
    if version == 3 {
        c.skip(1)?;
    }
    let pad = |n: usize| if version == 1 { n.div_ceil(8) * 8 } else { n };
    let nb = c.bytes(pad(name_len))?;
    let end = nb.iter().position(|&x| x == 0).unwrap_or(name_len.min(nb.len()));
    let name = String::from_utf8_lossy(&nb[..end]).into_owned();
    let dt_at = c.offset();
    let dt_bytes = c.bytes(pad(dt_len))?.to_vec();
    let ds_at = c.offset();
    let ds_bytes = c.bytes(pad(ds_len))?.to_vec();
    let data = c.bytes(c.remaining())?.to_vec();
    if flags & 3 != 0 {
        return Ok(Attribute {
            name,
            dt: Err("a shared datatype or dataspace".to_string()),
            space: Space::Null,
            data,
        });
    }
    let dt = datatype(&mut Cur::of(&dt_bytes, dt_at), 0).map_err(|e| e.message);
    let space = dataspace(&mut Cur::of(&ds_bytes, ds_at), sl)?;
    Ok(Attribute { name, dt, space, data })
}

/// A layout v1–v3 chunked dataset: its chunks are indexed by a version-1 B-tree at `addr`, or
/// none were ever written (`addr` undefined).
fn btree_v1_chunked(addr: u64, undefined: u64, dims: Vec<u64>) -> Layout {
    let index = if addr == undefined {
        ChunkIndex::Unallocated
    } else {
        ChunkIndex::BTreeV1 { addr }
    };
    Layout::Chunked {
        dims,
        index,
        edge_unfiltered: false,
    }
}
