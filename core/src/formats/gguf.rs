//! GGUF v1–v3 (llama.cpp): metadata key/values, tensor infos, alignment, split files.
//!
//! Layout: `GGUF`, version (u32), tensor count, key/value count, the key/values, the tensor infos
//! (name, dimension count, dimensions fastest-varying first, ggml type, offset), padding to
//! `general.alignment` (default 32), then the data section. Version 1 stores counts, lengths and
//! dimensions as u32, versions 2 and 3 as u64. A file whose version reads as a byte-swapped small
//! number is a big-endian GGUF (as the gguf Python package detects it).
//!
//! Only the header is read, in growing chunks from the start of the file (64 KiB first), never more
//! than [`MAX_HEADER`]: listing a model reads its key/values and tensor infos, not its data.
//!
//! Metadata values become plain [`Meta`] values: unsigned GGUF integers (`UINT8` … `UINT64`) are
//! [`Meta::UInt`], signed ones [`Meta::Int`], `FLOAT32`/`FLOAT64` [`Meta::Float`] (f32 widened),
//! `BOOL` [`Meta::Bool`], `STRING` [`Meta::Str`] ([`Meta::Bytes`] when not UTF-8) and arrays
//! (nested ones too) [`Meta::List`]. The integer width is not kept; signedness is.
//!
//! Tensors: shape is the reversed `ne`; F32, F16, BF16, F64, I8, I16, I32 and I64 are dense
//! dtypes, block-quantized types are [`ElementType::Ggml`] (raw blocks, see
//! [`super::ggml::dequantize`]). Attributes: `ggml_type` (name), `ggml_ne` (dimensions as
//! stored), `data_offset` (absolute byte offset). In a big-endian file, plain tensors are read
//! byte-swapped ([`Arrangement::big_endian`]); quantized blocks, whose inner byte order ggml does
//! not define portably, are left out and listed in [`Catalog::skipped`].

use alloc::collections::BTreeSet;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::ggml::GgmlType;
use super::{
    Arrangement, Catalog, ElementType, ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER, Meta, Storage, TensorInfo,
};
use crate::detect::Format;
use crate::source::ReadAt;

const FORMAT: &str = "gguf";
/// The first read of the header; later reads double the buffered prefix.
const FIRST_READ: u64 = 64 << 10;
/// The alignment of the data section and of each tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The most metadata values (scalars, strings, arrays and array items together) one file may
/// hold. Real tokenizers hold about a million; this bounds the memory a header can make us use.
pub const MAX_META_VALUES: u64 = 1 << 23;
/// The most tensors one file may list.
pub const MAX_TENSORS: u64 = 1 << 20;
/// The most dimensions a tensor may have: ggml's `GGML_MAX_DIMS`. llama.cpp's `gguf.cpp` refuses a
/// file with a tensor info of more dimensions, and so does this reader.
pub const MAX_DIMS: u32 = 4;

// GGUF metadata value types.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

fn err(kind: ErrorKind, msg: impl Into<String>) -> FormatError {
    FormatError::new(FORMAT, kind, msg)
}

/// Reads the header front to back, buffering a growing prefix of the file.
struct Cursor<'a, S: ReadAt + ?Sized> {
    src: &'a S,
    size: u64,
    /// Bytes `[0, buf.len())` of the file.
    buf: Vec<u8>,
    pos: u64,
    /// Version 2 and later: u64 counts and lengths (version 1: u32).
    wide: bool,
    big_endian: bool,
}

impl<'a, S: ReadAt + ?Sized> Cursor<'a, S> {
    /// Makes sure bytes up to `end` are buffered.
    fn ensure(&mut self, end: u64) -> Result<(), FormatError> {
        let have = self.buf.len() as u64;
        if end <= have {
            return Ok(());
        }
        if end > self.size {
            return Err(err(
                ErrorKind::Truncated,
                alloc::format!(
                    "the header needs bytes up to {end} but the file has {} bytes; it is truncated",
                    self.size
                ),
            )
            .at(self.pos));
        }
        if end > MAX_HEADER {
            return Err(err(
                ErrorKind::HeaderTooLarge,
                alloc::format!(
                    "the key/values and tensor infos run past {MAX_HEADER} bytes, more than any real model needs"
                ),
            )
            .at(self.pos));
        }
        let want = end
            .max(have.saturating_mul(2))
            .max(FIRST_READ)
            .min(self.size)
            .min(MAX_HEADER);
        self.buf.resize(want as usize, 0);
        self.src
            .read_at(have, &mut self.buf[have as usize..])
            .map_err(|e| FormatError::source(FORMAT, e))
    }

    fn take(&mut self, n: u64) -> Result<&[u8], FormatError> {
        let end = self.pos.checked_add(n).ok_or_else(|| {
            err(
                ErrorKind::Limit,
                alloc::format!("a length of {n} bytes runs past any file"),
            )
            .at(self.pos)
        })?;
        self.ensure(end)?;
        let start = self.pos as usize;
        self.pos = end;
        Ok(&self.buf[start..end as usize])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64)?);
        if self.big_endian {
            a.reverse();
        }
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        self.array().map(u64::from_le_bytes)
    }

    /// A count or length: u32 in version 1, u64 later.
    fn count(&mut self) -> Result<u64, FormatError> {
        if self.wide {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    fn len_size(&self) -> u64 {
        if self.wide { 8 } else { 4 }
    }

    /// Checks that `n` items of at least `min` bytes each fit in the rest of the file (and of the
    /// header limit) before anything is allocated for them.
    fn check_count(&self, n: u64, min: u64, what: &str) -> Result<(), FormatError> {
        let rest = self.size.saturating_sub(self.pos);
        match n.checked_mul(min) {
            Some(need) if need <= rest => {
                if self.pos.saturating_add(need) > MAX_HEADER {
                    return Err(err(
                        ErrorKind::HeaderTooLarge,
                        alloc::format!(
                            "{n} {what} would take the header past {MAX_HEADER} bytes, more than any real model needs"
                        ),
                    )
                    .at(self.pos));
                }
                Ok(())
            }
            _ => Err(err(
                ErrorKind::Limit,
                alloc::format!(
                    "declares {n} {what} (at least {min} bytes each) but only {rest} bytes follow; the file is \
                     damaged or hostile"
                ),
            )
            .at(self.pos)),
        }
    }

    /// A GGUF string's bytes; `what` names it (`"tensor name"`, `"string value"`) when its length
    /// runs past the file.
    fn string(&mut self, what: &str) -> Result<Vec<u8>, FormatError> {
        let at = self.pos;
        let n = self.count()?;
        let rest = self.size.saturating_sub(self.pos);
        if n > rest {
            return Err(err(
                ErrorKind::Limit,
                alloc::format!(
                    "a {what}'s length is {n} bytes, but only {rest} bytes follow it; the file is damaged or hostile"
                ),
            )
            .at(at));
        }
        self.check_count(n, 1, "string bytes")?;
        Ok(self.take(n)?.to_vec())
    }

    /// A string that must be UTF-8 (a key or a tensor name).
    fn name(&mut self, what: &str) -> Result<String, FormatError> {
        let at = self.pos;
        String::from_utf8(self.string(what)?)
            .map_err(|_| err(ErrorKind::Syntax, alloc::format!("a {what} is not valid UTF-8")).at(at))
    }

    /// The smallest encoding of a value of type `ty` (`None`: not a type).
    fn min_size(&self, ty: u32) -> Option<u64> {
        Some(match ty {
            T_U8 | T_I8 | T_BOOL => 1,
            T_U16 | T_I16 => 2,
            T_U32 | T_I32 | T_F32 => 4,
            T_U64 | T_I64 | T_F64 => 8,
            T_STRING => self.len_size(),
            T_ARRAY => 4 + self.len_size(),
            _ => return None,
        })
    }

    /// One metadata value of type `ty`; `budget` is how many more values the file may hold.
    fn value(&mut self, ty: u32, depth: usize, budget: &mut u64) -> Result<Meta, FormatError> {
        let at = self.pos;
        *budget = budget.checked_sub(1).ok_or_else(|| {
            err(
                ErrorKind::Limit,
                alloc::format!("the metadata holds more than {MAX_META_VALUES} values"),
            )
            .at(at)
        })?;
        Ok(match ty {
            T_U8 => Meta::UInt(self.u8()?.into()),
            T_I8 => Meta::Int((self.u8()? as i8).into()),
            T_U16 => Meta::UInt(self.u16()?.into()),
            T_I16 => Meta::Int((self.u16()? as i16).into()),
            T_U32 => Meta::UInt(self.u32()?.into()),
            T_I32 => Meta::Int((self.u32()? as i32).into()),
            T_F32 => Meta::Float(f32::from_bits(self.u32()?).into()),
            T_BOOL => Meta::Bool(self.u8()? != 0),
            T_STRING => match String::from_utf8(self.string("string value")?) {
                Ok(s) => Meta::Str(s),
                Err(e) => Meta::Bytes(e.into_bytes()),
            },
            T_U64 => Meta::UInt(self.u64()?),
            T_I64 => Meta::Int(self.u64()? as i64),
            T_F64 => Meta::Float(f64::from_bits(self.u64()?)),
            T_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(err(
                        ErrorKind::Limit,
                        alloc::format!("arrays nest more than {MAX_DEPTH} deep"),
                    )
                    .at(at));
                }
                let item = self.u32()?;
                let n = self.count()?;
                let min = self.min_size(item).ok_or_else(|| {
                    err(
                        ErrorKind::Syntax,
                        alloc::format!("an array has item type {item}, which is not a GGUF value type (0-12)"),
                    )
                    .at(at)
                })?;
                self.check_count(n, min, "array items")?;
                if n > *budget {
                    return Err(err(
                        ErrorKind::Limit,
                        alloc::format!("an array of {n} items takes the metadata past {MAX_META_VALUES} values"),
                    )
                    .at(at));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(item, depth + 1, budget)?);
                }
                Meta::List(items)
            }
            other => {
                return Err(err(
                    ErrorKind::Syntax,
                    alloc::format!("value type {other} is not a GGUF value type (0-12)"),
                )
                .at(at));
            }
        })
    }
}

/// A tensor info as stored.
struct RawTensor {
    name: String,
    at: u64,
    ne: Vec<u64>,
    ty: u32,
    offset: u64,
}

/// Opens a GGUF file (v1, v2 or v3, either byte order): its key/values as metadata and its
/// tensors, each checked (known type, whole blocks, no overflow, aligned, inside the file, no
/// overlap, unique names). Split files are joined by [`open_splits`].
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let mut c = Cursor {
        src,
        size: src.size(),
        buf: Vec::new(),
        pos: 0,
        wide: true,
        big_endian: false,
    };
    if c.take(4)? != b"GGUF" {
        return Err(err(ErrorKind::Syntax, "the file does not start with the GGUF magic 'GGUF'").at(0));
    }
    let raw = c.u32()?;
    let version = if raw & 0xFFFF == 0 && raw != 0 {
        c.big_endian = true;
        raw.swap_bytes()
    } else {
        raw
    };
    if !(1..=3).contains(&version) {
        return Err(err(
            ErrorKind::UnsupportedVersion,
            alloc::format!("GGUF version {version} is not supported (versions 1, 2 and 3 are)"),
        )
        .at(4));
    }
    c.wide = version >= 2;
    let n_tensors = c.count()?;
    let n_kv = c.count()?;

    // Key/values.
    let mut cat = Catalog::new(Format::Gguf);
    c.check_count(n_kv, c.len_size() + 4 + 1, "key/values")?;
    let mut budget = MAX_META_VALUES;
    let mut keys = BTreeSet::new();
    for _ in 0..n_kv {
        let at = c.pos;
        let key = c.name("metadata key")?;
        let ty = c.u32()?;
        let value = c.value(ty, 0, &mut budget).map_err(|e| e.key(key.clone()))?;
        if !keys.insert(key.clone()) {
            return Err(err(
                ErrorKind::Duplicate,
                alloc::format!("metadata key '{key}' appears twice"),
            )
            .at(at));
        }
        cat.metadata.push((key, value));
    }

    // Tensor infos.
    if n_tensors > MAX_TENSORS {
        return Err(err(
            ErrorKind::Limit,
            alloc::format!("declares {n_tensors} tensors, more than the {MAX_TENSORS} this reader accepts"),
        )
        .at(8));
    }
    c.check_count(n_tensors, c.len_size() + 4 + 4 + 8, "tensor infos")?;
    let mut raw_tensors = Vec::new();
    for _ in 0..n_tensors {
        let at = c.pos;
        let name = c.name("tensor name")?;
        let dims_at = c.pos;
        let n_dims = c.u32()?;
        if n_dims > MAX_DIMS {
            return Err(err(
                ErrorKind::Limit,
                alloc::format!(
                    "its tensor info declares n_dims = {n_dims}, but ggml tensors have at most {MAX_DIMS} dimensions \
                     (GGML_MAX_DIMS; llama.cpp refuses such a file too): the file is damaged or was not written by a \
                     GGUF writer"
                ),
            )
            .tensor(name)
            .at(dims_at));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(c.count()?);
        }
        let ty = c.u32()?;
        let offset = c.u64()?;
        raw_tensors.push(RawTensor {
            name,
            at,
            ne,
            ty,
            offset,
        });
    }

    let alignment = alignment(&cat.metadata)?;
    let data_start = c
        .pos
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| err(ErrorKind::Overflow, "the data section's start overflows 64 bits"))?;

    let mut names = BTreeSet::new();
    let mut ranges = Vec::new();
    for r in raw_tensors {
        if !names.insert(r.name.clone()) {
            return Err(err(ErrorKind::Duplicate, "the tensor name appears twice")
                .tensor(r.name)
                .at(r.at));
        }
        let t = tensor(&r, data_start, alignment, c.size, c.big_endian)?;
        match t {
            Ok(t) => {
                if let Storage::Range { offset, len, .. } = t.storage
                    && len > 0
                {
                    ranges.push((offset, offset + len, cat.tensors.len()));
                }
                cat.tensors.push(t);
            }
            Err(why) => cat.skipped.push((r.name, why)),
        }
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            let (a, b) = (&cat.tensors[w[0].2].name, &cat.tensors[w[1].2].name);
            return Err(err(
                ErrorKind::Overlap,
                alloc::format!(
                    "its bytes [{}, {}) overlap those of '{a}' [{}, {})",
                    w[1].0,
                    w[1].1,
                    w[0].0,
                    w[0].1
                ),
            )
            .tensor(b.clone())
            .at(w[1].0));
        }
    }
    Ok(cat)
}

/// `general.alignment`: a power of two (default 32).
fn alignment(metadata: &[(String, Meta)]) -> Result<u64, FormatError> {
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match v {
        Meta::UInt(a) if a.is_power_of_two() => Ok(*a),
        Meta::Int(a) if *a > 0 && (*a as u64).is_power_of_two() => Ok(*a as u64),
        other => {
            let is = match other {
                Meta::UInt(a) => alloc::format!("{a}"),
                Meta::Int(a) => alloc::format!("{a}"),
                _ => "not an integer".into(),
            };
            Err(err(
                ErrorKind::Syntax,
                alloc::format!("the alignment is {is}; it must be a power of two (GGUF writers use 32)"),
            )
            .key("general.alignment"))
        }
    }
}

/// The checked catalog entry of a tensor info: `Ok(Err(why))` when it is left out (big-endian
/// blocks).
fn tensor(
    r: &RawTensor,
    data_start: u64,
    alignment: u64,
    size: u64,
    big_endian: bool,
) -> Result<Result<TensorInfo, String>, FormatError> {
    let fail = |kind, msg: String| Err(err(kind, msg).tensor(r.name.clone()).at(r.at));
    let ty = GgmlType(r.ty);
    let (Some(block), Some(_)) = (ty.block_size(), ty.type_size()) else {
        return fail(
            ErrorKind::Unsupported,
            alloc::format!("ggml type id {} is not a known type", r.ty),
        );
    };
    let numel = r.ne.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let Some(numel) = numel.filter(|n| *n <= i64::MAX as u64) else {
        return fail(
            ErrorKind::Overflow,
            alloc::format!("its element count ({}) overflows 64 bits", dims_product(&r.ne)),
        );
    };
    let ne0 = r.ne.first().copied().unwrap_or(1);
    if !ne0.is_multiple_of(block) {
        return fail(
            ErrorKind::SizeMismatch,
            alloc::format!(
                "its first dimension {ne0} is not a multiple of the {} block size {block}",
                ty.name()
            ),
        );
    }
    let Some(len) = ty.nbytes(numel) else {
        return fail(ErrorKind::Overflow, "its byte size overflows 64 bits".to_string());
    };
    if !r.offset.is_multiple_of(alignment) {
        return fail(
            ErrorKind::Syntax,
            alloc::format!("its offset {} is not a multiple of the alignment {alignment}", r.offset),
        );
    }
    let offset = data_start.checked_add(r.offset);
    let Some(offset) = offset.filter(|o| o.checked_add(len).is_some_and(|end| end <= size)) else {
        return fail(
            ErrorKind::OutOfBounds,
            alloc::format!(
                "its {len} bytes at data offset {} (data section at {data_start}) run past the end of the {size}-byte \
                 file",
                r.offset
            ),
        );
    };
    let dense = GgmlType(r.ty).plain_dtype();
    if big_endian && dense.is_none() {
        return Ok(Err(alloc::format!(
            "{} blocks of a big-endian GGUF file are not supported",
            ty.name()
        )));
    }
    Ok(Ok(TensorInfo {
        name: r.name.clone(),
        ty: dense.map_or(ElementType::Ggml(ty), ElementType::Dense),
        shape: r.ne.iter().rev().copied().collect(),
        storage: Storage::Range { source: 0, offset, len },
        arrangement: Arrangement { big_endian, view: None },
        attributes: alloc::vec![
            ("ggml_type".to_string(), Meta::Str(ty.name().to_string())),
            (
                "ggml_ne".to_string(),
                Meta::List(r.ne.iter().map(|&d| Meta::UInt(d)).collect()),
            ),
            ("data_offset".to_string(), Meta::UInt(offset)),
        ],
    }))
}

/// `2**k` with `k` the sum of the dimensions' binary logarithms (rounded down), for a message.
fn dims_product(ne: &[u64]) -> String {
    if ne.contains(&0) {
        return "0".to_string();
    }
    let bits: u32 = ne.iter().map(|d| d.ilog2()).sum();
    alloc::format!("at least 2**{bits}")
}

/// An integer metadata value.
fn meta_uint(cat: &Catalog, key: &str) -> Option<Option<u64>> {
    let (_, v) = cat.metadata.iter().find(|(k, _)| k == key)?;
    Some(match v {
        Meta::UInt(u) => Some(*u),
        Meta::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    })
}

/// Joins a split model (`<prefix>-00001-of-0000M.gguf` … `-0000M-of-0000M.gguf`, as
/// `llama-gguf-split` writes it): when `first` (opened from `file_name`) has `split.count` > 1,
/// each sibling is opened through `open_part` (given its name relative to the same folder) and its
/// tensors are added, reading from that file (a new [`Catalog::sources`] entry). Each part's
/// `split.no` and `split.count` must match its place; `split.tensors.count`, when present, must be
/// the total. A file without `split.count` (or with 1) comes back unchanged.
pub fn open_splits(
    mut first: Catalog,
    file_name: &str,
    open_part: &mut dyn FnMut(&str) -> Result<Catalog, FormatError>,
) -> Result<Catalog, FormatError> {
    let companion = |msg: String| err(ErrorKind::Companion, msg);
    let count = match meta_uint(&first, "split.count") {
        None => return Ok(first),
        Some(Some(n)) => n,
        Some(None) => return Err(companion("split.count is not a non-negative integer".into())),
    };
    if count <= 1 {
        return Ok(first);
    }
    if count > u64::from(u16::MAX) {
        return Err(err(
            ErrorKind::Limit,
            alloc::format!("split.count is {count}; llama.cpp writes at most {}", u16::MAX),
        ));
    }
    let no = meta_uint(&first, "split.no").flatten();
    if no != Some(0) {
        return Err(companion(alloc::format!(
            "'{file_name}' is split {} of {count}, not the first; open the -00001-of-{count:05}.gguf file",
            no.map_or("?".to_string(), |n| (n + 1).to_string())
        )));
    }
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    let suffix = alloc::format!("-{:05}-of-{count:05}.gguf", 1);
    let Some(prefix) = base.strip_suffix(suffix.as_str()) else {
        return Err(companion(alloc::format!(
            "'{base}' declares {count} splits but is not named <prefix>{suffix}, so its siblings cannot be found"
        )));
    };
    for i in 1..count {
        let name = alloc::format!("{prefix}-{:05}-of-{count:05}.gguf", i + 1);
        let part = open_part(&name)?;
        let (pno, pcount) = (
            meta_uint(&part, "split.no").flatten(),
            meta_uint(&part, "split.count").flatten(),
        );
        if pno != Some(i) || pcount != Some(count) {
            return Err(companion(alloc::format!(
                "'{name}' says it is split {:?} of {:?}; expected split {i} (0-based) of {count}",
                pno,
                pcount
            )));
        }
        first.absorb(part, &name)?;
    }
    if let Some(total) = meta_uint(&first, "split.tensors.count").flatten()
        && total != first.tensors.len() as u64
    {
        return Err(companion(alloc::format!(
            "split.tensors.count is {total} but the {count} splits hold {} tensors",
            first.tensors.len()
        )));
    }
    Ok(first)
}
