//! Legacy `.zt` readers: v1.2 (`ZTEN1000`) and v0.1 (`ZTEN0001`), spec Part B §16.
//!
//! ```text
//! v1.2: "ZTEN1000" | blobs (64-aligned) | CBOR manifest | u64 LE manifest_size | "ZTEN1000"
//! v0.1: "ZTEN0001" | blobs (64-aligned) | CBOR array of entries | u64 LE cbor_size
//! ```
//!
//! [`LegacyReader::open`] reads the footer and the manifest (≤ 1 GiB, plain CBOR decoded leniently
//! with bounds) and checks its structure: the 13 dtypes, logical types against their dtypes, shapes
//! (product must fit u64), the components each format needs (index components `u64`), and every
//! component's bounds (inside the blob region, before the manifest) and 64-byte alignment. The
//! reference checks alignment and bounds only when a component is read and allows a component to
//! run into the manifest; checking them at open is stricter but refuses nothing the reference
//! writer produces.
//!
//! [`LegacyReader::read`] verifies the component's digest (`crc32c:0x%08X` or `sha256:<hex>`, over
//! the **stored** bytes; other algorithms are ignored as the reference does), then hands out the raw
//! bytes without copying when the source is in memory, or decodes a zstd stream bounded by its
//! `uncompressed_length` (v1.2) or `product(shape) × width` (v0.1), never past 32 GiB, requiring the
//! output to be exactly that long.
//!
//! [`LegacyReader::to_v2`] produces, per object, what a v2 writer needs ([`V2Object`]): layout ids
//! mapped per §16.4, `bool` turned into `u8` + logical type `bool`, decoded part bytes.

use alloc::borrow::Cow;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::cbor::{self, Mode, Value};
use super::rule::Rule;
use super::seekable;
use super::{Error, Op};
use crate::dtype::DType;
use crate::source::ReadAt;

/// v1.2 magic (header and trailer).
pub const MAGIC_V1_2: &[u8; 8] = b"ZTEN1000";
/// v0.1 magic (header only).
pub const MAGIC_V0_1: &[u8; 8] = b"ZTEN0001";
/// Largest manifest accepted (1 GiB).
pub const MAX_MANIFEST: u64 = 1 << 30;
/// Largest decoded component accepted (32 GiB, the reference's cap).
pub const MAX_DECODED: u64 = 32 << 30;
/// Component alignment.
pub const ALIGNMENT: u64 = 64;

/// Which legacy format a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegacyVersion {
    /// `ZTEN1000`, manifest `version` "1.x".
    V1_2,
    /// `ZTEN0001`.
    V0_1,
}

fn schema(msg: impl Into<String>) -> Error {
    Error::legacy(Rule::Schema, None, msg)
}

/// A v1 logical type (`type` field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogicalType {
    /// `f8_e4m3fn` over `u8`.
    F8E4M3Fn,
    /// `f8_e5m2` over `u8`.
    F8E5M2,
    /// `f8_e4m3fnuz` over `u8`.
    F8E4M3Fnuz,
    /// `f8_e5m2fnuz` over `u8`.
    F8E5M2Fnuz,
    /// `complex64` over `f32` (two per element).
    Complex64,
    /// `complex128` over `f64` (two per element).
    Complex128,
    /// Any other string: kept, bytes read as raw.
    Unknown(String),
}

impl LogicalType {
    fn parse(s: &str) -> LogicalType {
        match s {
            "f8_e4m3fn" => LogicalType::F8E4M3Fn,
            "f8_e5m2" => LogicalType::F8E5M2,
            "f8_e4m3fnuz" => LogicalType::F8E4M3Fnuz,
            "f8_e5m2fnuz" => LogicalType::F8E5M2Fnuz,
            "complex64" => LogicalType::Complex64,
            "complex128" => LogicalType::Complex128,
            other => LogicalType::Unknown(other.to_string()),
        }
    }

    /// The name as written in the manifest.
    pub fn name(&self) -> &str {
        match self {
            LogicalType::F8E4M3Fn => "f8_e4m3fn",
            LogicalType::F8E5M2 => "f8_e5m2",
            LogicalType::F8E4M3Fnuz => "f8_e4m3fnuz",
            LogicalType::F8E5M2Fnuz => "f8_e5m2fnuz",
            LogicalType::Complex64 => "complex64",
            LogicalType::Complex128 => "complex128",
            LogicalType::Unknown(s) => s,
        }
    }

    /// The storage dtype a known logical type requires (`None` for unknown types).
    pub fn storage(&self) -> Option<DType> {
        match self {
            LogicalType::Complex64 => Some(DType::F32),
            LogicalType::Complex128 => Some(DType::F64),
            LogicalType::Unknown(_) => None,
            _ => Some(DType::U8),
        }
    }

    /// Storage elements per logical element (2 for complex, else 1).
    pub fn lanes(&self) -> u64 {
        match self {
            LogicalType::Complex64 | LogicalType::Complex128 => 2,
            _ => 1,
        }
    }
}

/// How a component's bytes are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// As is (`"raw"` or no field).
    Raw,
    /// One zstd stream.
    Zstd,
    /// An encoding this reader does not know (v1.2 only; reading it is [`Rule::Unsupported`]).
    Other(String),
}

/// A component digest over the stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digest {
    /// `crc32c:0x%08X` (Castagnoli).
    Crc32c(u32),
    /// `sha256:<64 hex>`.
    Sha256([u8; 32]),
    /// Another algorithm: ignored, as the reference does.
    Other(String),
    /// `crc32c:`/`sha256:` with a malformed value; reading the component fails with
    /// [`Rule::Digest`].
    Malformed(String),
}

impl Digest {
    /// Parses a digest string (`crc32c:` takes `0x`/`0X` and either hex case).
    pub fn parse(s: &str) -> Digest {
        let hex = |h: &str| h.len().is_multiple_of(2) && !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit());
        if let Some(v) = s.strip_prefix("crc32c:") {
            match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(h) if h.len() == 8 && hex(h) => match u32::from_str_radix(h, 16) {
                    Ok(n) => Digest::Crc32c(n),
                    Err(_) => Digest::Malformed(s.to_string()),
                },
                _ => Digest::Malformed(s.to_string()),
            }
        } else if let Some(h) = s.strip_prefix("sha256:") {
            if h.len() != 64 || !hex(h) {
                return Digest::Malformed(s.to_string());
            }
            let mut out = [0u8; 32];
            for (i, o) in out.iter_mut().enumerate() {
                *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap_or(0);
            }
            Digest::Sha256(out)
        } else {
            Digest::Other(s.to_string())
        }
    }

    /// Checks `stored` against the digest; `Other` always passes.
    pub fn verify(&self, stored: &[u8]) -> Result<(), String> {
        match self {
            Digest::Crc32c(want) => {
                let got = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(stored);
                if got == *want {
                    Ok(())
                } else {
                    Err(alloc::format!("crc32c is 0x{got:08X}, the manifest says 0x{want:08X}"))
                }
            }
            Digest::Sha256(want) => {
                use sha2::Digest as _;
                let got: [u8; 32] = sha2::Sha256::digest(stored).into();
                if &got == want {
                    Ok(())
                } else {
                    Err(String::from("sha256 does not match the stored bytes"))
                }
            }
            Digest::Other(_) => Ok(()),
            Digest::Malformed(s) => Err(alloc::format!("malformed digest {s:?}")),
        }
    }
}

/// One component (v1.2) or entry (v0.1, role `data`) of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    /// Role (`data`, `values`, `indices`, ...).
    pub role: String,
    /// Storage dtype (one of 13, `Bool` included).
    pub dtype: DType,
    /// Logical type, if any.
    pub logical_type: Option<LogicalType>,
    /// Absolute file offset of the stored bytes.
    pub offset: u64,
    /// Stored length.
    pub length: u64,
    /// How the bytes are stored.
    pub encoding: Encoding,
    /// Decoded length of a zstd component (required for v1.2 zstd; for v0.1 the dense size).
    pub uncompressed_length: Option<u64>,
    /// Digest over the stored bytes.
    pub digest: Option<Digest>,
}

/// A v1 object format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// `dense`: component `data`.
    Dense,
    /// `sparse_csr`: `values`, `indices` (u64), `indptr` (u64).
    SparseCsr,
    /// `sparse_coo`: `values`, `coords` (u64, `ndim × nnz`).
    SparseCoo,
    /// `quantized_group`: `packed_weight`, `scales`, optional `zeros`.
    QuantizedGroup,
    /// Any other format string: structural only.
    Extension(String),
}

impl Format {
    fn parse(s: &str) -> Format {
        match s {
            "dense" => Format::Dense,
            "sparse_csr" => Format::SparseCsr,
            "sparse_coo" => Format::SparseCoo,
            "quantized_group" => Format::QuantizedGroup,
            other => Format::Extension(other.to_string()),
        }
    }

    /// The name as written in the manifest.
    pub fn name(&self) -> &str {
        match self {
            Format::Dense => "dense",
            Format::SparseCsr => "sparse_csr",
            Format::SparseCoo => "sparse_coo",
            Format::QuantizedGroup => "quantized_group",
            Format::Extension(s) => s,
        }
    }

    /// The v2 layout id (§16.4): `dense`, `zt.sparse_csr/1`, `zt.sparse_coo/1`; formats without a
    /// faithful v2 profile (`quantized_group`, whose v1 attributes do not determine every
    /// `zt.quant_group/1` parameter, and extensions) become the opaque vendor id
    /// `ztensor-v1.<format>/1`, which v2 readers expose structurally.
    pub fn v2_layout(&self) -> String {
        match self {
            Format::Dense => String::from("dense"),
            Format::SparseCsr => String::from("zt.sparse_csr/1"),
            Format::SparseCoo => String::from("zt.sparse_coo/1"),
            other => alloc::format!("ztensor-v1.{}/1", other.name()),
        }
    }

    fn required(&self) -> &'static [&'static str] {
        match self {
            Format::Dense => &["data"],
            Format::SparseCsr => &["values", "indices", "indptr"],
            Format::SparseCoo => &["values", "coords"],
            Format::QuantizedGroup => &["packed_weight", "scales"],
            Format::Extension(_) => &[],
        }
    }

    fn index_roles(&self) -> &'static [&'static str] {
        match self {
            Format::SparseCsr => &["indices", "indptr"],
            Format::SparseCoo => &["coords"],
            _ => &[],
        }
    }
}

/// One object of a legacy file.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    /// Name.
    pub name: String,
    /// Shape (`[]` = scalar).
    pub shape: Vec<u64>,
    /// Format.
    pub format: Format,
    /// Object attributes (v1.2), if any.
    pub attributes: Option<Value<'static>>,
    /// Components, sorted by role.
    pub components: Vec<Component>,
}

impl Object {
    /// The component with this role.
    pub fn component(&self, role: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.role == role)
    }

    /// `product(shape)` (checked at open to fit u64).
    pub fn elements(&self) -> u64 {
        self.shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .unwrap_or(u64::MAX)
    }
}

/// One part of a [`V2Object`]: what a v2 writer needs to store it.
#[derive(Clone, Debug, PartialEq)]
pub struct V2Part<'a> {
    /// Part name (the v1 role).
    pub name: String,
    /// v2 storage dtype (never `Bool`: v1 `bool` becomes `U8` with logical type `bool`).
    pub dtype: DType,
    /// v2 logical type (`type`), if any.
    pub logical_type: Option<String>,
    /// Decoded bytes (borrowed from the source when raw and in memory).
    pub bytes: Cow<'a, [u8]>,
}

/// One legacy object converted to what a v2 writer needs.
#[derive(Clone, Debug, PartialEq)]
pub struct V2Object<'a> {
    /// Object name.
    pub name: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// v2 layout id ([`Format::v2_layout`]).
    pub layout: String,
    /// Object attributes carried over verbatim.
    pub attributes: Option<Value<'static>>,
    /// Parts, sorted by name.
    pub parts: Vec<V2Part<'a>>,
}

/// A legacy v1.2 or v0.1 file, opened over a [`ReadAt`].
#[derive(Debug)]
pub struct LegacyReader<R> {
    src: R,
    version: LegacyVersion,
    manifest_version: Option<String>,
    attributes: Option<Value<'static>>,
    objects: Vec<Object>,
    skipped: Vec<String>,
    manifest_offset: u64,
}

fn read<R: ReadAt + ?Sized>(src: &R, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
    src.read_vec(offset, len)
        .map_err(|e| Error::legacy(Rule::Io, Some(offset), e.to_string()))
}

fn le_u64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// Parses a v1.2 dtype name: v2's twelve storage names, plus `bool`.
fn dtype_v1(s: &str) -> Option<DType> {
    if s == "bool" {
        Some(DType::Bool)
    } else {
        super::format::dtype_from_zt(s)
    }
}

/// Parses a v0.1 dtype name (NumPy style).
fn dtype_v0(s: &str) -> Option<DType> {
    match DType::from_name(s) {
        Some(DType::C64 | DType::C128) | None => None,
        d => d,
    }
}

fn get_u64(m: &Value<'_>, key: &str, ctx: &str) -> Result<u64, Error> {
    m.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| schema(alloc::format!("{ctx}: `{key}` missing or not an unsigned integer")))
}

fn get_text<'v>(m: &'v Value<'_>, key: &str, ctx: &str) -> Result<&'v str, Error> {
    m.get(key)
        .and_then(Value::as_text)
        .ok_or_else(|| schema(alloc::format!("{ctx}: `{key}` missing or not text")))
}

fn parse_shape(v: Option<&Value<'_>>, ctx: &str) -> Result<Vec<u64>, Error> {
    let items = v
        .and_then(Value::as_array)
        .ok_or_else(|| schema(alloc::format!("{ctx}: `shape` missing or not an array")))?;
    let shape = items
        .iter()
        .map(|d| {
            d.as_u64()
                .ok_or_else(|| schema(alloc::format!("{ctx}: shape entry is not an unsigned integer")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_none() {
        return Err(schema(alloc::format!(
            "{ctx}: shape {shape:?} has more than 2^64 elements"
        )));
    }
    Ok(shape)
}

impl<R: ReadAt> LegacyReader<R> {
    /// Opens a v1.2 or v0.1 file (detected by the header magic) and checks its manifest.
    pub fn open(src: R) -> Result<Self, Error> {
        let size = src.size();
        if size < 16 {
            return Err(Error::legacy(
                Rule::FileTooSmall,
                None,
                alloc::format!("{size} bytes is too short for a legacy .zt file"),
            ));
        }
        let head = read(&src, 0, 8)?;
        let version = if head == MAGIC_V1_2 {
            LegacyVersion::V1_2
        } else if head == MAGIC_V0_1 {
            LegacyVersion::V0_1
        } else {
            return Err(Error::legacy(
                Rule::HeaderMagic,
                Some(0),
                "header magic is neither ZTEN1000 nor ZTEN0001",
            ));
        };
        let tail_len = if version == LegacyVersion::V1_2 { 16 } else { 8 };
        if size < 8 + tail_len {
            return Err(Error::legacy(
                Rule::FileTooSmall,
                None,
                alloc::format!("{size} bytes is too short for the footer"),
            ));
        }
        let tail = read(&src, size - tail_len, tail_len)?;
        if version == LegacyVersion::V1_2 && &tail[8..16] != MAGIC_V1_2 {
            return Err(Error::legacy(
                Rule::FooterMagic,
                Some(size - 8),
                "trailer magic ZTEN1000 missing",
            ));
        }
        let msize = le_u64(&tail);
        if msize > MAX_MANIFEST {
            return Err(Error::legacy(
                Rule::ManifestTooLarge,
                Some(size - tail_len),
                alloc::format!("manifest size {msize} is over the 1 GiB limit"),
            ));
        }
        let room = size - tail_len - 8;
        if msize > room {
            return Err(Error::legacy(
                Rule::ManifestBounds,
                Some(size - tail_len),
                alloc::format!("manifest size {msize} is larger than the {room} bytes between header and footer"),
            ));
        }
        let moff = size - tail_len - msize;
        let mbytes = read(&src, moff, msize)?;
        let root = cbor::decode(&mbytes, Mode::Lenient).map_err(|e| Error {
            op: Op::ReadLegacy,
            ..Error::from_cbor(e, moff)
        })?;
        let mut r = LegacyReader {
            src,
            version,
            manifest_version: None,
            attributes: None,
            objects: Vec::new(),
            skipped: Vec::new(),
            manifest_offset: moff,
        };
        match version {
            LegacyVersion::V1_2 => r.parse_v1(&root)?,
            LegacyVersion::V0_1 => r.parse_v0(&root)?,
        }
        r.objects.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = r.objects.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(schema(alloc::format!("object {:?} appears twice", w[0].name)));
        }
        for o in &r.objects {
            r.check_object(o)?;
        }
        Ok(r)
    }

    fn parse_v1(&mut self, root: &Value<'_>) -> Result<(), Error> {
        if root.as_map().is_none() {
            return Err(schema("manifest root is not a map"));
        }
        self.manifest_version = root.get("version").and_then(Value::as_text).map(str::to_string);
        self.attributes = root.get("attributes").cloned().map(Value::into_owned);
        let objects = root
            .get("objects")
            .and_then(Value::as_map)
            .ok_or_else(|| schema("`objects` missing or not a map"))?;
        for (k, o) in objects {
            let name = k
                .as_text()
                .ok_or_else(|| schema("an object name is not text"))?
                .to_string();
            let ctx = alloc::format!("object {name:?}");
            if o.as_map().is_none() {
                return Err(schema(alloc::format!("{ctx} is not a map")));
            }
            let shape = parse_shape(o.get("shape"), &ctx)?;
            let format = Format::parse(get_text(o, "format", &ctx)?);
            let comps = o
                .get("components")
                .and_then(Value::as_map)
                .ok_or_else(|| schema(alloc::format!("{ctx}: `components` missing or not a map")))?;
            let mut components = Vec::with_capacity(comps.len());
            for (rk, c) in comps {
                let role = rk
                    .as_text()
                    .ok_or_else(|| schema(alloc::format!("{ctx}: a component role is not text")))?
                    .to_string();
                let cctx = alloc::format!("{ctx} component {role:?}");
                if c.as_map().is_none() {
                    return Err(schema(alloc::format!("{cctx} is not a map")));
                }
                let dname = get_text(c, "dtype", &cctx)?;
                let dtype = dtype_v1(dname).ok_or_else(|| schema(alloc::format!("{cctx}: unknown dtype {dname:?}")))?;
                let logical_type = match c.get("type") {
                    None | Some(Value::Null) => None,
                    Some(t) => Some(LogicalType::parse(
                        t.as_text()
                            .ok_or_else(|| schema(alloc::format!("{cctx}: `type` is not text")))?,
                    )),
                };
                let encoding = match c.get("encoding") {
                    None | Some(Value::Null) => Encoding::Raw,
                    Some(e) => match e
                        .as_text()
                        .ok_or_else(|| schema(alloc::format!("{cctx}: `encoding` is not text")))?
                    {
                        "raw" => Encoding::Raw,
                        "zstd" => Encoding::Zstd,
                        other => Encoding::Other(other.to_string()),
                    },
                };
                let uncompressed_length = match c.get("uncompressed_length") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_u64().ok_or_else(|| {
                        schema(alloc::format!(
                            "{cctx}: `uncompressed_length` is not an unsigned integer"
                        ))
                    })?),
                };
                if encoding == Encoding::Zstd && uncompressed_length.is_none() {
                    return Err(schema(alloc::format!(
                        "{cctx}: zstd component without `uncompressed_length`"
                    )));
                }
                let digest = match c.get("digest") {
                    None | Some(Value::Null) => None,
                    Some(d) => Some(Digest::parse(
                        d.as_text()
                            .ok_or_else(|| schema(alloc::format!("{cctx}: `digest` is not text")))?,
                    )),
                };
                components.push(Component {
                    role,
                    dtype,
                    logical_type,
                    offset: get_u64(c, "offset", &cctx)?,
                    length: get_u64(c, "length", &cctx)?,
                    encoding,
                    uncompressed_length,
                    digest,
                });
            }
            components.sort_by(|a, b| a.role.cmp(&b.role));
            if let Some(w) = components.windows(2).find(|w| w[0].role == w[1].role) {
                return Err(schema(alloc::format!("{ctx}: component {:?} appears twice", w[0].role)));
            }
            let attributes = o.get("attributes").cloned().map(Value::into_owned);
            self.objects.push(Object {
                name,
                shape,
                format,
                attributes,
                components,
            });
        }
        Ok(())
    }

    fn parse_v0(&mut self, root: &Value<'_>) -> Result<(), Error> {
        let entries = root.as_array().ok_or_else(|| schema("v0.1 manifest is not an array"))?;
        for (i, e) in entries.iter().enumerate() {
            let ctx = alloc::format!("entry {i}");
            if e.as_map().is_none() {
                return Err(schema(alloc::format!("{ctx} is not a map")));
            }
            let name = get_text(e, "name", &ctx)?.to_string();
            let ctx = alloc::format!("entry {i} ({name:?})");
            match e.get("layout") {
                None | Some(Value::Null) => {}
                Some(l) => match l.as_text() {
                    Some("" | "dense") => {}
                    _ => {
                        // The reference loads only dense entries; others are skipped.
                        self.skipped.push(name);
                        continue;
                    }
                },
            }
            let shape = parse_shape(e.get("shape"), &ctx)?;
            let dname = get_text(e, "dtype", &ctx)?;
            let dtype = dtype_v0(dname).ok_or_else(|| schema(alloc::format!("{ctx}: unsupported dtype {dname:?}")))?;
            let encoding = match e.get("encoding").and_then(Value::as_text) {
                Some("zstd") => Encoding::Zstd,
                _ => Encoding::Raw,
            };
            let dense = shape
                .iter()
                .try_fold(dtype.itemsize() as u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| {
                    schema(alloc::format!(
                        "{ctx}: shape {shape:?} × {} bytes overflows",
                        dtype.itemsize()
                    ))
                })?;
            let digest = match e.get("checksum") {
                None | Some(Value::Null) => None,
                Some(d) => {
                    Some(Digest::parse(d.as_text().ok_or_else(|| {
                        schema(alloc::format!("{ctx}: `checksum` is not text"))
                    })?))
                }
            };
            let component = Component {
                role: String::from("data"),
                dtype,
                logical_type: None,
                offset: get_u64(e, "offset", &ctx)?,
                length: get_u64(e, "size", &ctx)?,
                uncompressed_length: (encoding == Encoding::Zstd).then_some(dense),
                encoding,
                digest,
            };
            self.objects.push(Object {
                name,
                shape,
                format: Format::Dense,
                attributes: None,
                components: alloc::vec![component],
            });
        }
        Ok(())
    }

    fn check_object(&self, o: &Object) -> Result<(), Error> {
        let ctx = |c: &str| alloc::format!("object {:?} component {c:?}", o.name);
        for role in o.format.required() {
            if o.component(role).is_none() {
                return Err(schema(alloc::format!(
                    "object {:?} ({}) lacks component {role:?}",
                    o.name,
                    o.format.name()
                )));
            }
        }
        for role in o.format.index_roles() {
            if let Some(c) = o.component(role)
                && c.dtype != DType::U64
            {
                return Err(schema(alloc::format!(
                    "{}: index components must be u64, not {}",
                    ctx(role),
                    c.dtype
                )));
            }
        }
        for c in &o.components {
            if let Some(t) = &c.logical_type
                && let Some(want) = t.storage()
                && c.dtype != want
            {
                return Err(schema(alloc::format!(
                    "{}: logical type {} needs dtype {want}, not {}",
                    ctx(&c.role),
                    t.name(),
                    c.dtype
                )));
            }
            if c.offset % ALIGNMENT != 0 {
                return Err(Error::legacy(
                    Rule::BlobAlignment,
                    Some(c.offset),
                    alloc::format!("{}: offset {} is not a multiple of 64", ctx(&c.role), c.offset),
                ));
            }
            let end = c.offset.checked_add(c.length);
            if c.offset < 8 || end.is_none_or(|e| e > self.manifest_offset) {
                return Err(Error::legacy(
                    Rule::BlobBounds,
                    Some(c.offset),
                    alloc::format!(
                        "{}: [{}, {}+{}) is outside the blob region [8, {})",
                        ctx(&c.role),
                        c.offset,
                        c.offset,
                        c.length,
                        self.manifest_offset
                    ),
                ));
            }
            if let Some(u) = c.uncompressed_length
                && c.encoding == Encoding::Zstd
                && u > MAX_DECODED
            {
                return Err(Error::legacy(
                    Rule::Encoding,
                    Some(c.offset),
                    alloc::format!("{}: uncompressed length {u} is over the 32 GiB cap", ctx(&c.role)),
                ));
            }
        }
        Ok(())
    }

    /// The detected format.
    pub fn version(&self) -> LegacyVersion {
        self.version
    }

    /// The manifest's `version` string (v1.2), e.g. `"1.2.0"`.
    pub fn manifest_version(&self) -> Option<&str> {
        self.manifest_version.as_deref()
    }

    /// File attributes (v1.2), if any.
    pub fn attributes(&self) -> Option<&Value<'static>> {
        self.attributes.as_ref()
    }

    /// Objects, sorted by name.
    pub fn objects(&self) -> &[Object] {
        &self.objects
    }

    /// The object with this name.
    pub fn object(&self, name: &str) -> Option<&Object> {
        self.objects
            .binary_search_by(|o| o.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.objects[i])
    }

    /// Names of v0.1 entries skipped because their `layout` is not dense (as the reference does).
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// Offset of the manifest (the end of the blob region).
    pub fn manifest_offset(&self) -> u64 {
        self.manifest_offset
    }

    /// The underlying source.
    pub fn source(&self) -> &R {
        &self.src
    }

    /// Reads a component's decoded bytes, after verifying its digest over the stored bytes. Raw
    /// components of in-memory sources are borrowed; zstd components are decoded (bounded, exact).
    pub fn read(&self, object: &str, component: &str) -> Result<Cow<'_, [u8]>, Error> {
        let o = self
            .object(object)
            .ok_or_else(|| Error::legacy(Rule::NotFound, None, alloc::format!("no object {object:?}")))?;
        let c = o.component(component).ok_or_else(|| {
            Error::legacy(
                Rule::NotFound,
                None,
                alloc::format!("object {object:?} has no component {component:?}"),
            )
        })?;
        self.read_component(o, c)
    }

    /// Reads the stored (not decoded) bytes of a component, without verifying anything.
    pub fn read_stored(&self, c: &Component) -> Result<Cow<'_, [u8]>, Error> {
        match self.src.slice(c.offset, c.length) {
            Some(s) => Ok(Cow::Borrowed(s)),
            None => read(&self.src, c.offset, c.length).map(Cow::Owned),
        }
    }

    /// [`LegacyReader::read`] for a component already looked up.
    pub fn read_component(&self, o: &Object, c: &Component) -> Result<Cow<'_, [u8]>, Error> {
        let ctx = || alloc::format!("object {:?} component {:?}", o.name, c.role);
        if let Encoding::Other(e) = &c.encoding {
            return Err(Error::legacy(
                Rule::Unsupported,
                Some(c.offset),
                alloc::format!("{}: unknown encoding {e:?}", ctx()),
            ));
        }
        let stored = self.read_stored(c)?;
        if let Some(d) = &c.digest {
            d.verify(&stored)
                .map_err(|m| Error::legacy(Rule::Digest, Some(c.offset), alloc::format!("{}: {m}", ctx())))?;
        }
        match c.encoding {
            Encoding::Raw => Ok(stored),
            _ => {
                let want = c.uncompressed_length.unwrap_or(0).min(MAX_DECODED);
                let out = seekable::decode_stream_bounded(&stored, want).map_err(|(at, m)| {
                    Error::legacy(
                        Rule::Encoding,
                        Some(c.offset + at),
                        alloc::format!("{}: zstd: {m}", ctx()),
                    )
                })?;
                if out.len() as u64 != want {
                    return Err(Error::legacy(
                        Rule::Encoding,
                        Some(c.offset),
                        alloc::format!("{}: zstd stream decodes to {} bytes, expected {want}", ctx(), out.len()),
                    ));
                }
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Converts one object to what a v2 writer needs (reads and verifies every component).
    pub fn to_v2_object(&self, o: &Object) -> Result<V2Object<'_>, Error> {
        let mut parts = Vec::with_capacity(o.components.len());
        for c in &o.components {
            let bytes = self.read_component(o, c)?;
            let (dtype, logical_type) = match (&c.logical_type, c.dtype) {
                (None, DType::Bool) => {
                    if let Some(p) = bytes.iter().position(|&b| b > 1) {
                        return Err(Error::legacy(
                            Rule::LayoutData,
                            Some(c.offset),
                            alloc::format!(
                                "object {:?} component {:?}: bool byte {} at element {p}; v2 bool allows 0 and 1",
                                o.name,
                                c.role,
                                bytes[p]
                            ),
                        ));
                    }
                    (DType::U8, Some(String::from("bool")))
                }
                (Some(t), DType::Bool) => (DType::U8, Some(t.name().to_string())),
                (t, d) => (d, t.as_ref().map(|t| t.name().to_string())),
            };
            parts.push(V2Part {
                name: c.role.clone(),
                dtype,
                logical_type,
                bytes,
            });
        }
        Ok(V2Object {
            name: o.name.clone(),
            shape: o.shape.clone(),
            layout: o.format.v2_layout(),
            attributes: o.attributes.clone(),
            parts,
        })
    }

    /// Converts every object ([`LegacyReader::to_v2_object`]), in name order.
    pub fn to_v2(&self) -> Result<Vec<V2Object<'_>>, Error> {
        self.objects.iter().map(|o| self.to_v2_object(o)).collect()
    }
}
