//! NumPy `.npy` (versions 1.0, 2.0 and 3.0) and `.npz` archives (zips of `.npy` members).
//!
//! An `.npy` file is `\x93NUMPY`, a major and minor version, a little-endian header length (2
//! bytes in 1.0, 4 in 2.0 and 3.0), then a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }` padded with spaces and a newline
//! (latin-1 in 1.0 and 2.0, UTF-8 in 3.0), then the array's bytes. The literal is read by a small
//! strict parser (strings, numbers, booleans, tuples, lists, dicts; nesting bounded by
//! [`MAX_DEPTH`]; duplicate keys refused), never evaluated.
//!
//! Numeric dtypes (`b1`, `i1`–`i8`, `u1`–`u8`, `f2`–`f8`, `c8`, `c16`) in either byte order are
//! read; big-endian data becomes [`Arrangement::big_endian`] and Fortran order a strided
//! [`View`], so [`super::read`] hands out C-order little-endian bytes. Object arrays (`O`, whose
//! bytes are a pickle) are refused and never unpickled; structured, string, void and datetime
//! dtypes are refused by name.
//!
//! In an `.npz`, each `X.npy` member is a tensor named `X`. A stored member's data is a
//! [`Storage::Range`] of the archive; of a deflated member only the `.npy` header is inflated
//! when opening, and the data is a [`Storage::Deflate`] that [`super::read`] inflates.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::zip::{self, Method};
use super::{
    Arrangement, Catalog, ElementType, ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER, Meta, Storage, TensorInfo, View,
    bytes_at,
};
use crate::detect::Format;
use crate::dtype::DType;
use crate::source::ReadAt;

const NPY: &str = "npy";
const NPZ: &str = "npz";

/// The `.npy` magic string.
pub const MAGIC: [u8; 6] = *b"\x93NUMPY";

/// Deflate produces at most about 1032 bytes per input byte; a member that declares more is
/// corrupt or a decompression bomb.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// A parsed `.npy` header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// Format version (major, minor).
    pub version: (u8, u8),
    /// Where the array's bytes start in the `.npy` stream.
    pub data_offset: u64,
    /// The `descr` as written (`<f4`, `>i8`, `|b1`, ...).
    pub descr: String,
    /// The element type.
    pub ty: ElementType,
    /// Multi-byte scalars are stored big-endian.
    pub big_endian: bool,
    /// The elements are stored in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The array's shape (`[]` for 0-d).
    pub shape: Vec<u64>,
    /// Bytes of array data after the header.
    pub nbytes: u64,
}

impl Header {
    /// The arrangement that turns the stored bytes into C-order little-endian ones.
    pub fn arrangement(&self) -> Arrangement {
        let big_endian = self.big_endian && self.ty.lane() > 1;
        // Fortran order differs from C order only when two or more dimensions exceed 1.
        let view =
            (self.fortran_order && self.nbytes > 0 && self.shape.iter().filter(|&&d| d > 1).count() > 1).then(|| {
                // Column-major: the first index moves fastest. The products are at most the
                // element count, which fits 64 bits.
                let mut strides = Vec::with_capacity(self.shape.len());
                let mut step = 1u64;
                for &d in &self.shape {
                    strides.push(step);
                    step = step.saturating_mul(d);
                }
                View { offset: 0, strides }
            });
        Arrangement { big_endian, view }
    }

    fn attributes(&self) -> Vec<(String, Meta)> {
        alloc::vec![
            ("stored_dtype".into(), Meta::Str(self.descr.clone())),
            ("fortran_order".into(), Meta::Bool(self.fortran_order)),
            (
                "header_version".into(),
                Meta::Str(format!("{}.{}", self.version.0, self.version.1))
            ),
            ("data_offset".into(), Meta::UInt(self.data_offset)),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// The header's dict literal.

/// A Python literal as an `.npy` header uses them.
#[derive(Debug, PartialEq)]
enum Lit {
    Str(String),
    Int(u64),
    Bool(bool),
    None,
    /// A tuple (written with a comma, or `()`).
    Tuple(Vec<Lit>),
    List(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
}

impl Lit {
    fn kind(&self) -> &'static str {
        match self {
            Lit::Str(_) => "a string",
            Lit::Int(_) => "an integer",
            Lit::Bool(_) => "a boolean",
            Lit::None => "None",
            Lit::Tuple(_) => "a tuple",
            Lit::List(_) => "a list",
            Lit::Dict(_) => "a dict",
        }
    }
}

struct Parser<'a> {
    format: &'static str,
    b: &'a [u8],
    i: usize,
    /// Version 3.0 headers are UTF-8; earlier ones latin-1.
    utf8: bool,
}

impl Parser<'_> {
    fn err(&self, kind: ErrorKind, msg: String) -> FormatError {
        FormatError::new(self.format, kind, msg).at(self.i as u64)
    }

    fn syntax(&self, what: &str) -> FormatError {
        let near = match self.b.get(self.i) {
            Some(c) => format!("'{}'", char::from(*c).escape_default()),
            None => "the end of the header".into(),
        };
        self.err(
            ErrorKind::Syntax,
            format!("bad header dict: expected {what}, found {near}"),
        )
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Lit, FormatError> {
        self.ws();
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => self.string(q),
            Some(b'0'..=b'9') => self.int(),
            Some(b'-') => Err(self.err(
                ErrorKind::Syntax,
                "bad header dict: a negative number (shapes and sizes are never negative)".into(),
            )),
            Some(open @ (b'(' | b'[' | b'{')) => {
                if depth >= MAX_DEPTH {
                    return Err(self.err(
                        ErrorKind::Limit,
                        format!("the header dict nests deeper than {MAX_DEPTH} levels"),
                    ));
                }
                self.i += 1;
                match open {
                    b'{' => self.dict(depth + 1),
                    b'(' => self.seq(b')', depth + 1, true),
                    _ => self.seq(b']', depth + 1, false),
                }
            }
            _ => {
                for (word, lit) in [
                    ("True", Lit::Bool(true)),
                    ("False", Lit::Bool(false)),
                    ("None", Lit::None),
                ] {
                    if self
                        .b
                        .get(self.i..)
                        .is_some_and(|rest| rest.starts_with(word.as_bytes()))
                    {
                        self.i += word.len();
                        return Ok(lit);
                    }
                }
                Err(self.syntax("a value"))
            }
        }
    }

    fn string(&mut self, quote: u8) -> Result<Lit, FormatError> {
        self.i += 1;
        let mut raw = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.syntax("the end of a string"));
            };
            self.i += 1;
            match c {
                c if c == quote => break,
                b'\n' => return Err(self.syntax("the end of a string before the line ends")),
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.syntax("an escape"));
                    };
                    self.i += 1;
                    match e {
                        b'\\' | b'\'' | b'"' => raw.push(e),
                        b'n' => raw.push(b'\n'),
                        b't' => raw.push(b'\t'),
                        b'r' => raw.push(b'\r'),
                        b'x' => {
                            let hex = self
                                .b
                                .get(self.i..self.i + 2)
                                .and_then(|h| core::str::from_utf8(h).ok());
                            let v = hex
                                .and_then(|h| u8::from_str_radix(h, 16).ok())
                                .ok_or_else(|| self.syntax("two hex digits after \\x"))?;
                            self.i += 2;
                            if self.utf8 {
                                // In a UTF-8 header, \xHH is the code point U+00HH.
                                let mut buf = [0u8; 4];
                                raw.extend_from_slice(char::from(v).encode_utf8(&mut buf).as_bytes());
                            } else {
                                raw.push(v);
                            }
                        }
                        _ => return Err(self.syntax("a known escape (\\\\, \\', \\\", \\n, \\t, \\r, \\x)")),
                    }
                }
                c => raw.push(c),
            }
        }
        let s = if self.utf8 {
            String::from_utf8(raw).map_err(|_| self.err(ErrorKind::Syntax, "a string is not valid UTF-8".into()))?
        } else {
            raw.into_iter().map(char::from).collect()
        };
        Ok(Lit::Str(s))
    }

    fn int(&mut self) -> Result<Lit, FormatError> {
        let mut v = 0u64;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or_else(|| self.err(ErrorKind::Overflow, "a number in the header overflows 64 bits".into()))?;
            self.i += 1;
        }
        // Python 2 wrote long integers with an `L` suffix: `(3L, 4L)`.
        self.eat(b'L');
        Ok(Lit::Int(v))
    }

    /// A tuple (`close` = `)`) or a list (`]`), after the opening bracket.
    fn seq(&mut self, close: u8, depth: usize, tuple: bool) -> Result<Lit, FormatError> {
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            self.ws();
            if self.eat(close) {
                break;
            }
            items.push(self.value(depth)?);
            self.ws();
            if self.eat(b',') {
                comma = true;
            } else if self.eat(close) {
                break;
            } else {
                return Err(self.syntax("',' or a closing bracket"));
            }
        }
        Ok(match (tuple, comma, items.len()) {
            // `(x)` is x in parentheses, not a tuple.
            (true, false, 1) => items.pop().unwrap_or(Lit::None),
            (true, _, _) => Lit::Tuple(items),
            (false, _, _) => Lit::List(items),
        })
    }

    fn dict(&mut self, depth: usize) -> Result<Lit, FormatError> {
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.eat(b'}') {
                break;
            }
            let k = self.value(depth)?;
            self.ws();
            if !self.eat(b':') {
                return Err(self.syntax("':'"));
            }
            let v = self.value(depth)?;
            items.push((k, v));
            self.ws();
            if !self.eat(b',') {
                self.ws();
                if !self.eat(b'}') {
                    return Err(self.syntax("',' or '}'"));
                }
                break;
            }
        }
        Ok(Lit::Dict(items))
    }
}

/// The element type and byte order of a plain `descr`, or why it is refused.
fn parse_descr(format: &'static str, descr: &str) -> Result<(ElementType, bool), FormatError> {
    let err = |kind, msg: String| FormatError::new(format, kind, msg);
    let (order, code) = match descr.as_bytes().first() {
        Some(b'<' | b'|' | b'=') => (false, &descr[1..]),
        Some(b'>') => (true, &descr[1..]),
        _ => (false, descr),
    };
    let dense = |d| Ok((ElementType::Dense(d), order));
    match code {
        "b1" | "?" => dense(DType::Bool),
        "i1" => dense(DType::I8),
        "i2" => dense(DType::I16),
        "i4" => dense(DType::I32),
        "i8" => dense(DType::I64),
        "u1" => dense(DType::U8),
        "u2" => dense(DType::U16),
        "u4" => dense(DType::U32),
        "u8" => dense(DType::U64),
        "f2" => dense(DType::F16),
        "f4" => dense(DType::F32),
        "f8" => dense(DType::F64),
        "c8" => dense(DType::C64),
        "c16" => dense(DType::C128),
        _ => {
            let what = match code.as_bytes().first() {
                Some(b'O') => {
                    return Err(err(
                        ErrorKind::Refused,
                        format!(
                            "dtype '{descr}' is an object array: its data is a Python pickle, which this reader never \
                             unpickles (it can run code); save the data as a numeric array instead"
                        ),
                    ));
                }
                Some(b'S' | b'a') => "a byte-string dtype",
                Some(b'U') => "a unicode-string dtype",
                Some(b'V') => "a void (raw bytes) dtype",
                Some(b'M') => "a datetime64 dtype",
                Some(b'm') => "a timedelta64 dtype",
                Some(b'f') => "an extended-precision float (long double), whose layout depends on the machine",
                Some(b'c') => "an extended-precision complex (long double)",
                _ => "not a numeric dtype this reader knows",
            };
            Err(err(
                ErrorKind::Unsupported,
                format!(
                    "dtype '{descr}' is {what}; only bool, integer, float16/32/64 and complex64/128 arrays are tensors"
                ),
            ))
        }
    }
}

/// The version and header position of an `.npy` stream from its first bytes: `(version,
/// header start, header length)`.
fn preamble(format: &'static str, b: &[u8]) -> Result<((u8, u8), u64, u64), FormatError> {
    let err = |kind, msg: String| FormatError::new(format, kind, msg);
    if b.len() < 8 {
        let n = b.len().min(MAGIC.len());
        return Err(if b[..n] == MAGIC[..n] {
            err(
                ErrorKind::Truncated,
                format!("{} bytes end inside the 10-byte .npy preamble", b.len()),
            )
        } else {
            err(ErrorKind::Syntax, "not an .npy file: no \\x93NUMPY magic".into()).at(0)
        });
    }
    if b[..6] != MAGIC {
        return Err(err(ErrorKind::Syntax, "not an .npy file: no \\x93NUMPY magic".into()).at(0));
    }
    let version = (b[6], b[7]);
    let width = match version {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        (major, minor) => {
            return Err(err(
                ErrorKind::UnsupportedVersion,
                format!(".npy format version {major}.{minor} is not one of 1.0, 2.0, 3.0"),
            )
            .at(6));
        }
    };
    let Some(len) = b.get(8..8 + width) else {
        return Err(err(ErrorKind::Truncated, "the file ends inside the header length".into()).at(8));
    };
    let len = len.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
    Ok((version, 8 + width as u64, len))
}

/// Reads the header of an `.npy` stream of `total` bytes; `prefix(n)` gives its first `n` bytes
/// (or fewer when the stream is shorter). Error offsets are relative to the stream.
fn read_header<'s>(
    format: &'static str,
    total: u64,
    prefix: &mut dyn FnMut(u64) -> Result<Cow<'s, [u8]>, FormatError>,
) -> Result<Header, FormatError> {
    let err = |kind, msg: String| FormatError::new(format, kind, msg);
    let (version, start, hlen) = preamble(format, &prefix(total.min(12))?)?;
    if hlen > MAX_HEADER {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            format!("the header length field claims {hlen} bytes, over the {MAX_HEADER}-byte limit"),
        )
        .at(8));
    }
    let data_offset = start + hlen;
    if data_offset > total {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            format!("the header length field claims {hlen} bytes, but the stream has {total} bytes in all"),
        )
        .at(8));
    }
    let all = prefix(data_offset)?;
    let text = all.get(start as usize..data_offset as usize).ok_or_else(|| {
        err(
            ErrorKind::Truncated,
            format!("the stream ends inside its {hlen}-byte header"),
        )
        .at(start)
    })?;
    let mut p = Parser {
        format,
        b: text,
        i: 0,
        utf8: version.0 >= 3,
    };
    let dict = p.value(0).map_err(|mut e| {
        e.offset = e.offset.map(|o| o + start);
        e
    })?;
    p.ws();
    if p.i != text.len() {
        return Err(err(
            ErrorKind::Syntax,
            "the header has more after its dict than the space padding and newline".into(),
        )
        .at(start + p.i as u64));
    }
    let Lit::Dict(items) = dict else {
        return Err(err(ErrorKind::Syntax, format!("the header is {}, not a dict", dict.kind())).at(start));
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (k, v) in items {
        let Lit::Str(k) = k else {
            return Err(err(ErrorKind::Syntax, format!("a header key is {}, not a string", k.kind())).at(start));
        };
        let slot = match k.as_str() {
            "descr" => &mut descr,
            "fortran_order" => &mut fortran,
            "shape" => &mut shape,
            _ => {
                return Err(err(
                    ErrorKind::Syntax,
                    format!("unexpected header key '{k}'; an .npy header has exactly descr, fortran_order and shape"),
                )
                .at(start));
            }
        };
        if slot.replace(v).is_some() {
            return Err(err(
                ErrorKind::Duplicate,
                format!("header key '{k}' appears twice; readers disagree on which one wins"),
            )
            .at(start));
        }
    }
    let missing = |k: &str| err(ErrorKind::Syntax, format!("the header has no '{k}'")).at(start);
    let descr = match descr.ok_or_else(|| missing("descr"))? {
        Lit::Str(s) => s,
        Lit::List(fields) => {
            let names: Vec<String> = fields
                .iter()
                .map(|f| match f {
                    Lit::Tuple(t) => match t.first() {
                        Some(Lit::Str(n)) => format!("'{n}'"),
                        _ => "?".into(),
                    },
                    _ => "?".into(),
                })
                .collect();
            return Err(err(
                ErrorKind::Unsupported,
                format!(
                    "a structured (record) dtype with fields {}: not a plain tensor; save each field as its own array \
                     (arr['name']) to read it",
                    names.join(", ")
                ),
            ));
        }
        other => {
            return Err(err(
                ErrorKind::Unsupported,
                format!("descr is {}, not a plain dtype string", other.kind()),
            ));
        }
    };
    let (ty, big_endian) = parse_descr(format, &descr)?;
    let Lit::Bool(fortran_order) = fortran.ok_or_else(|| missing("fortran_order"))? else {
        return Err(err(ErrorKind::Syntax, "fortran_order is not True or False".into()).at(start));
    };
    let Lit::Tuple(dims) = shape.ok_or_else(|| missing("shape"))? else {
        return Err(err(ErrorKind::Syntax, "shape is not a tuple".into()).at(start));
    };
    let shape = dims
        .into_iter()
        .map(|d| match d {
            Lit::Int(n) => Ok(n),
            other => Err(err(
                ErrorKind::Syntax,
                format!("a shape dimension is {}, not an integer", other.kind()),
            )
            .at(start)),
        })
        .collect::<Result<Vec<u64>, _>>()?;
    let nbytes = crate::tensor::numel(&shape)
        .and_then(|n| ty.nbytes(n))
        .ok_or_else(|| err(ErrorKind::Overflow, format!("{descr} {shape:?} overflows 64 bits")).at(start))?;
    Ok(Header {
        version,
        data_offset,
        descr,
        ty,
        big_endian,
        fortran_order,
        shape,
        nbytes,
    })
}

/// Opens an `.npy` file: one tensor named `array`, with the attributes `stored_dtype` (the
/// header's descr), `fortran_order`, `header_version` (`"1.0"`, ...) and `data_offset`.
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let size = src.size();
    let h = read_header(NPY, size, &mut |n| bytes_at(NPY, src, 0, n))?;
    let end = h.data_offset.checked_add(h.nbytes).filter(|&e| e <= size);
    if end.is_none() {
        return Err(FormatError::new(
            NPY,
            ErrorKind::Truncated,
            format!(
                "{} {:?} needs {} bytes of data, but only {} follow the header: the file is truncated",
                h.descr,
                h.shape,
                h.nbytes,
                size - h.data_offset
            ),
        )
        .tensor("array")
        .at(h.data_offset));
    }
    let mut cat = Catalog::new(Format::Npy);
    cat.tensors.push(TensorInfo {
        name: "array".into(),
        ty: h.ty,
        storage: Storage::Range {
            source: 0,
            offset: h.data_offset,
            len: h.nbytes,
        },
        arrangement: h.arrangement(),
        attributes: h.attributes(),
        shape: h.shape,
    });
    Ok(cat)
}

/// The first `want` bytes of a deflated member (fewer when it inflates to fewer). Inflates from
/// a window of the compressed bytes and into an output buffer that both grow only as far as the
/// stream really reaches, so a size the member merely claims is never allocated.
fn inflated_prefix<S: ReadAt + ?Sized>(src: &S, m: &zip::Member, want: u64) -> Result<Vec<u8>, FormatError> {
    let bad =
        |msg: String| FormatError::new(NPZ, ErrorKind::Syntax, format!("member '{}': {msg}", m.name)).at(m.data_offset);
    let mut window = m.compressed.min(16 << 10);
    let mut out_max = want.min(4096);
    loop {
        let raw = bytes_at(NPZ, src, m.data_offset, window)?;
        let out = zip::inflate_prefix(&raw, out_max as usize).map_err(bad)?;
        if out.len() as u64 == out_max {
            if out_max == want {
                return Ok(out);
            }
            out_max = want.min(out_max.saturating_mul(4));
        } else if window == m.compressed {
            return Ok(out);
        } else {
            window = m.compressed.min(window.saturating_mul(4));
        }
    }
}

/// Opens an `.npz` archive: each `X.npy` member is a tensor named `X` (attributes `member`,
/// `zip_method` (`stored` or `deflate`) and those of [`open`], `data_offset` counted in the
/// member); other members are listed in [`Catalog::skipped`].
pub fn open_npz<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let archive = zip::open(NPZ, src)?;
    let mut cat = Catalog::new(Format::Npz);
    for m in &archive.members {
        let Some(name) = m.name.strip_suffix(".npy") else {
            let why = if m.name.ends_with('/') {
                "a folder entry"
            } else {
                "not an .npy member"
            };
            cat.skipped.push((m.name.clone(), why.into()));
            continue;
        };
        let in_member = |mut e: FormatError| {
            e.message = format!("member '{}': {}", m.name, e.message);
            e.offset = Some(match (m.method, e.offset) {
                (Method::Stored, Some(o)) => m.data_offset.saturating_add(o),
                _ => m.data_offset,
            });
            e.tensor(name)
        };
        if cat.get(name).is_some() {
            return Err(in_member(FormatError::new(
                NPZ,
                ErrorKind::Duplicate,
                "the archive has two members of this name".to_string(),
            )));
        }
        let h = match m.method {
            Method::Stored => read_header(NPZ, m.size, &mut |n| bytes_at(NPZ, src, m.data_offset, n)),
            Method::Deflate => {
                if m.size > m.compressed.saturating_mul(MAX_DEFLATE_RATIO).saturating_add(64) {
                    return Err(in_member(FormatError::new(
                        NPZ,
                        ErrorKind::Limit,
                        format!(
                            "it declares {} bytes from {} compressed bytes, more than deflate can produce: the \
                             archive is corrupt or a decompression bomb",
                            m.size, m.compressed
                        ),
                    )));
                }
                read_header(NPZ, m.size, &mut |n| inflated_prefix(src, m, n).map(Cow::Owned))
            }
        }
        .map_err(in_member)?;
        if h.data_offset.checked_add(h.nbytes) != Some(m.size) {
            return Err(in_member(FormatError::new(
                NPZ,
                ErrorKind::SizeMismatch,
                format!(
                    "{} {:?} is {} bytes after a {}-byte header, but the member holds {} bytes",
                    h.descr, h.shape, h.nbytes, h.data_offset, m.size
                ),
            )));
        }
        let storage = match m.method {
            Method::Stored => {
                cat.checks.push(super::Check {
                    source: 0,
                    offset: m.data_offset,
                    len: m.size,
                    digest: super::Digest::Crc32(m.crc32),
                    what: format!("zip member '{}'", m.name),
                    decoded: None,
                });
                Storage::Range {
                    source: 0,
                    offset: m.data_offset + h.data_offset,
                    len: h.nbytes,
                }
            }
            Method::Deflate => Storage::Deflate {
                source: 0,
                offset: m.data_offset,
                compressed: m.compressed,
                inflated: m.size,
                skip: h.data_offset,
                len: h.nbytes,
                crc32: Some(m.crc32),
            },
        };
        let mut attributes = alloc::vec![
            ("member".to_string(), Meta::Str(m.name.clone())),
            (
                "zip_method".to_string(),
                Meta::Str(
                    match m.method {
                        Method::Stored => "stored",
                        Method::Deflate => "deflate",
                    }
                    .into()
                )
            ),
        ];
        attributes.extend(h.attributes());
        cat.tensors.push(TensorInfo {
            name: name.into(),
            ty: h.ty,
            arrangement: h.arrangement(),
            shape: h.shape,
            storage,
            attributes,
        });
    }
    Ok(cat)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[version, 0]);
        let mut h = dict.as_bytes().to_vec();
        h.push(b'\n');
        if version == 1 {
            v.extend_from_slice(&(h.len() as u16).to_le_bytes());
        } else {
            v.extend_from_slice(&(h.len() as u32).to_le_bytes());
        }
        v.extend_from_slice(&h);
        v.extend_from_slice(data);
        v
    }

    fn header(dict: &str) -> Result<Header, FormatError> {
        let f = npy(1, dict, &[]);
        read_header(NPY, f.len() as u64, &mut |n| Ok(Cow::Owned(f[..n as usize].to_vec())))
    }

    #[test]
    fn literals() {
        let h = header("{'descr': '>i8', 'fortran_order': True, 'shape': (2L, 3), }").unwrap();
        assert_eq!(
            (h.ty, h.big_endian, h.fortran_order),
            (ElementType::Dense(DType::I64), true, true)
        );
        assert_eq!(h.shape, [2, 3]);
        assert_eq!(
            h.arrangement().view.unwrap().strides,
            [1, 2],
            "Fortran order: the first index moves fastest"
        );
        let h = header("{\"shape\": (), \"descr\": \"<f4\", \"fortran_order\": True}").unwrap();
        assert_eq!((h.shape.len(), h.nbytes), (0, 4));
        assert!(h.arrangement().is_native());
        assert_eq!(
            header("{'descr': '<f4', 'fortran_order': False, 'shape': (5,)}")
                .unwrap()
                .shape,
            [5]
        );
        // `(5)` is not a tuple.
        assert_eq!(
            header("{'descr': '<f4', 'fortran_order': False, 'shape': (5)}")
                .unwrap_err()
                .kind,
            ErrorKind::Syntax
        );
    }

    #[test]
    fn refusals() {
        let k = |d: &str| header(d).unwrap_err().kind;
        assert_eq!(
            k("{'descr': '|O', 'fortran_order': False, 'shape': (2,)}"),
            ErrorKind::Refused
        );
        assert_eq!(
            k("{'descr': [('x', '<f4'), ('y', '<i4')], 'fortran_order': False, 'shape': (3,)}"),
            ErrorKind::Unsupported
        );
        for d in ["<U3", "|S5", "|V8", "<M8[ns]", "<m8[s]", "<f16", "<c32", "<q"] {
            let e = header(&format!("{{'descr': '{d}', 'fortran_order': False, 'shape': (1,)}}")).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Unsupported, "{d}");
        }
        assert_eq!(
            k("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,)}"),
            ErrorKind::Duplicate
        );
        assert_eq!(
            k("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"),
            ErrorKind::Syntax
        );
        assert_eq!(k("{'descr': '<f4', 'fortran_order': False}"), ErrorKind::Syntax);
        assert_eq!(
            k("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),
            ErrorKind::Syntax
        );
        assert_eq!(
            k("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}"),
            ErrorKind::Overflow
        );
        assert_eq!(
            k("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}"),
            ErrorKind::Overflow
        );
        let deep = format!("{{'descr': {}1{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(k(&deep), ErrorKind::Limit);
    }
}
