//! `.zt` v2 and legacy `.zt` v1.2 / v0.1 files as a [`Catalog`], like every other format.
//!
//! The container's own reader ([`crate::zt::reader::Reader`], [`crate::zt::legacy::LegacyReader`])
//! validates the file (every rule of the spec, with its rule name in the error) and this module
//! projects its manifest onto the catalog:
//!
//! * a `dense` object is a tensor of its element type (a plain dtype or a registered logical type),
//!   a `gguf.<type>/1` object one of ggml blocks; a raw part is a [`Storage::Range`] (zero-copy
//!   from a mapped file), a `zt.zstd-seekable/1` part a [`Storage::Encoded`] decoded frame by frame;
//! * objects of other layouts (`zt.sparse_csr/1`, `zt.sparse_coo/1`, `zt.quant_group/1`, `zt.mx/1`,
//!   vendor layouts, a logical type this reader does not know) are tensors of their logical shape
//!   stored as [`Storage::Parts`]: [`super::read_part`] reads each part;
//! * part digests (`xxh3:`, `sha256:`; legacy `crc32c:`, `sha256:` over the stored bytes) are
//!   [`Catalog::checks`], checked on every read and by `verify`;
//! * what only `.zt` has is in the attributes: each tensor's `layout`, its `parts` (dtype, type,
//!   offset, length, shard, encoding, decoded length, digest) and the object's `attributes`; the
//!   file's attributes are the catalog's metadata; shards are [`Catalog::sources`], resolved next to
//!   the root by the host ([`shard_candidates`]).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::{
    Catalog, Check, Codec, Digest, ElementType, ErrorKind, FormatError, Meta, Part, Parts, Storage, TensorInfo,
};
use crate::detect::Format;
use crate::dtype::DType;
use crate::source::ReadAt;
use crate::zt::cbor::Value;
use crate::zt::format::{ENCODING_ZSTD_SEEKABLE, LogicalType};
use crate::zt::layout;
use crate::zt::legacy::{self, LegacyReader};
use crate::zt::manifest::{Manifest, Object};
use crate::zt::reader::Reader;
use crate::zt::rule::Rule;

/// A storage dtype by its `.zt` name (`f32`, `u8`; legacy `bool` by the dtype's own name).
fn zt_dtype(d: DType) -> String {
    crate::zt::format::dtype_zt_name(d).unwrap_or(d.name()).to_string()
}

/// The format name errors carry.
const FORMAT: &str = "zt";

/// A `.zt` reader's error as a [`FormatError`]: the rule's name leads the message (as the `.zt`
/// tools print it), the object is the tensor, the byte offset is kept, the rule's hint ends it.
pub fn error(e: crate::zt::Error) -> FormatError {
    let kind = match e.rule {
        Rule::FileTooSmall => ErrorKind::Truncated,
        Rule::Version => ErrorKind::UnsupportedVersion,
        Rule::ManifestBounds | Rule::BlobBounds => ErrorKind::OutOfBounds,
        Rule::ManifestTooLarge => ErrorKind::HeaderTooLarge,
        Rule::ManifestHash | Rule::Digest => ErrorKind::Checksum,
        Rule::CborDepth => ErrorKind::Limit,
        Rule::BlobOverlap => ErrorKind::Overlap,
        Rule::DenseSize | Rule::LayoutData | Rule::LayoutRule | Rule::BlobAlignment => ErrorKind::SizeMismatch,
        Rule::ShardRef | Rule::ShardName | Rule::ShardIdentity => ErrorKind::Companion,
        Rule::Unsupported => ErrorKind::Unsupported,
        Rule::Io => ErrorKind::Io,
        _ => ErrorKind::Syntax,
    };
    let mut message = format!("{}: {}", e.rule.name(), e.message);
    if let Some(s) = &e.shard {
        message.push_str(&format!(" (shard {s:?})"));
    }
    if let Some(p) = &e.part {
        message.push_str(&format!(" (part {p:?})"));
    }
    message.push_str("; ");
    message.push_str(e.rule.hint());
    let mut f = FormatError::new(FORMAT, kind, message);
    f.offset = e.offset;
    f.tensor = e.object;
    f
}

/// The file names shard `shard` of the root file named `root` may have, in the order they are
/// tried: `<stem>-<shard>.zt` (the reference convention), `<shard>`, `<shard>.zt`.
pub fn shard_candidates(root: &str, shard: &str) -> [String; 3] {
    let stem = root.rsplit_once('.').map_or(root, |(s, _)| s);
    [format!("{stem}-{shard}.zt"), shard.to_string(), format!("{shard}.zt")]
}

/// A CBOR value as catalog metadata.
pub fn meta(v: &Value<'_>) -> Meta {
    match v {
        Value::Uint(n) => i64::try_from(*n).map_or(Meta::UInt(*n), Meta::Int),
        Value::Neg(n) => i64::try_from(*n).map_or(Meta::Float(-1.0 - *n as f64), |n| Meta::Int(-1 - n)),
        Value::Bytes(b) => Meta::Bytes(b.to_vec()),
        Value::Text(s) => Meta::Str(s.to_string()),
        Value::Array(a) => Meta::List(a.iter().map(meta).collect()),
        Value::Map(m) => Meta::Map(
            m.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Value::Text(s) => s.to_string(),
                        other => format!("{:?}", meta(other)),
                    };
                    (key, meta(v))
                })
                .collect(),
        ),
        Value::Bool(b) => Meta::Bool(*b),
        Value::Null => Meta::Null,
        Value::Float(f) => Meta::Float(*f),
    }
}

/// The entries of a CBOR attribute map as metadata (a value that is not a map is one entry,
/// `attributes`).
fn meta_entries(v: Option<&Value<'_>>) -> Vec<(String, Meta)> {
    match v.map(meta) {
        None => Vec::new(),
        Some(Meta::Map(m)) => m,
        Some(other) => vec![("attributes".to_string(), other)],
    }
}

/// A digest string (`xxh3:<hex>`, `sha256:<hex>`) as a [`Digest`]; `None` for an algorithm this
/// crate does not compute (the part then has no check; `verify` says so).
fn digest(s: &str) -> Option<Digest> {
    let (algo, hex) = s.split_once(':')?;
    let bytes = decode_hex(hex)?;
    match algo {
        "xxh3" => Some(Digest::Xxh3(u64::from_be_bytes(bytes.try_into().ok()?))),
        "sha256" => Some(Digest::Sha256(bytes.try_into().ok()?)),
        _ => None,
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The element type of a dense (or `gguf.<type>/1`) object whose data part is `dtype` with
/// logical type `logical`; `None` when the layout or type is not one array of elements this
/// reader interprets.
fn element(layout_id: &str, dtype: DType, logical: Option<&str>) -> Option<ElementType> {
    if layout_id == layout::DENSE {
        return Some(match logical {
            None => ElementType::Dense(dtype),
            Some(l) => ElementType::Logical(LogicalType::from_name(l)?),
        });
    }
    let g = layout::gguf_type(layout_id)?;
    super::ggml::GgmlType::from_name(g).map(ElementType::Ggml)
}

/// The part that carries an object's values, for its element type: `data`, else `values`, else
/// `packed_weight`, else the first.
fn main_part<'a, T>(parts: impl Iterator<Item = (&'a str, T)>) -> Option<T> {
    let mut first = None;
    let mut best: Option<(usize, T)> = None;
    for (name, v) in parts {
        let rank = ["data", "values", "packed_weight"].iter().position(|n| *n == name);
        match rank {
            Some(r) if best.as_ref().is_none_or(|(b, _)| r < *b) => best = Some((r, v)),
            None if first.is_none() => first = Some(v),
            _ => {}
        }
    }
    best.map(|(_, v)| v).or(first)
}

/// One part's bytes: where they are and, when the file declares one, its check.
struct Stored {
    storage: Storage,
    check: Option<Check>,
    /// The part as the `parts` attribute shows it.
    meta: Meta,
}

/// Opens a `.zt` v2 file: validates it (spec §13, shards unresolved) and lists its objects. A
/// data shard (no manifest) opens as an empty catalog whose metadata says `zt.data_shard`.
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let reader = Reader::open(src).map_err(error)?;
    let mut cat = Catalog {
        format: Format::Zt,
        tensors: Vec::new(),
        metadata: Vec::new(),
        skipped: Vec::new(),
        sources: vec![String::new()],
        checks: Vec::new(),
    };
    let Some(m) = reader.manifest() else {
        cat.metadata.push(("zt.data_shard".into(), Meta::Bool(true)));
        return Ok(cat);
    };
    cat.metadata = meta_entries(m.attributes.as_ref());
    if let Some(table) = &m.shards {
        cat.sources.extend(table.keys().cloned());
    }
    for (name, o) in &m.objects {
        object(&mut cat, m, name, o);
    }
    Ok(cat)
}

/// Adds object `name` of manifest `m` to `cat`.
fn object(cat: &mut Catalog, m: &Manifest, name: &str, o: &Object) {
    let mut stored = Vec::with_capacity(o.parts.len());
    for (pn, p) in &o.parts {
        let source = match &p.shard {
            None => 0,
            Some(s) => match m.shards.as_ref().and_then(|t| t.keys().position(|k| k == s)) {
                Some(i) => i + 1,
                None => {
                    cat.skipped.push((
                        name.to_string(),
                        format!("part {pn:?} names shard {s:?}, which the file does not list"),
                    ));
                    return;
                }
            },
        };
        let (offset, len) = (p.blob.offset, p.blob.length);
        let storage = match p.encoding.as_deref() {
            None => Storage::Range { source, offset, len },
            Some(ENCODING_ZSTD_SEEKABLE) => Storage::Encoded {
                source,
                offset,
                len,
                decoded: p.decoded_size(),
                codec: Codec::ZstdSeekable,
            },
            Some(e) => {
                cat.skipped.push((
                    name.to_string(),
                    format!("part {pn:?} is stored under encoding {e:?}, which this reader does not decode"),
                ));
                return;
            }
        };
        let check = p.digest.as_deref().and_then(digest).map(|d| Check {
            source,
            offset,
            len,
            digest: d,
            what: format!("object '{name}' part '{pn}'"),
            decoded: p.encoding.as_ref().map(|_| (Codec::ZstdSeekable, p.decoded_size())),
        });
        let mut pm = vec![
            ("dtype".to_string(), Meta::Str(zt_dtype(p.dtype))),
            ("offset".to_string(), Meta::UInt(offset)),
            ("length".to_string(), Meta::UInt(len)),
        ];
        let opt = |k: &str, v: Option<Meta>| v.map(|v| (k.to_string(), v));
        pm.extend(opt("type", p.logical.clone().map(Meta::Str)));
        pm.extend(opt("shard", p.shard.clone().map(Meta::Str)));
        pm.extend(opt("encoding", p.encoding.clone().map(Meta::Str)));
        pm.extend(opt("decoded_length", p.decoded_length.map(Meta::UInt)));
        pm.extend(opt("digest", p.digest.clone().map(Meta::Str)));
        stored.push((
            pn.as_str(),
            p.dtype,
            p.logical.clone(),
            p.decoded_size(),
            Stored {
                storage,
                check,
                meta: Meta::Map(pm),
            },
        ));
    }
    let mut attributes = vec![("layout".to_string(), Meta::Str(o.layout.clone()))];
    let parts_meta = Meta::Map(stored.iter().map(|s| (s.0.to_string(), s.4.meta.clone())).collect());
    attributes.push(("parts".to_string(), parts_meta));
    if let Some(a) = &o.attributes {
        attributes.push(("attributes".to_string(), meta(a)));
    }
    let one = match stored.as_slice() {
        [(pn, dtype, logical, _, _)] if *pn == "data" || o.layout != layout::DENSE => {
            element(&o.layout, *dtype, logical.as_deref())
        }
        _ => None,
    };
    cat.checks.extend(stored.iter().filter_map(|s| s.4.check.clone()));
    let (ty, storage) = match one {
        Some(ty) => (
            ty,
            stored.pop().map(|s| s.4.storage).unwrap_or(Storage::Inline(Vec::new())),
        ),
        None => {
            let main = main_part(stored.iter().map(|s| (s.0, (s.1, s.2.clone()))));
            let ty = match main {
                Some((d, None)) => ElementType::Dense(d),
                Some((d, Some(l))) => LogicalType::from_name(&l).map_or(ElementType::Dense(d), ElementType::Logical),
                None => ElementType::Dense(DType::U8),
            };
            let parts = stored
                .into_iter()
                .map(|(pn, dtype, logical, len, s)| Part {
                    name: pn.to_string(),
                    ty: match &logical {
                        None => Some(ElementType::Dense(dtype)),
                        Some(l) => LogicalType::from_name(l).map(ElementType::Logical),
                    },
                    type_name: logical.unwrap_or_else(|| zt_dtype(dtype)),
                    len,
                    storage: s.storage,
                })
                .collect();
            (
                ty,
                Storage::Parts(alloc::boxed::Box::new(Parts {
                    layout: o.layout.clone(),
                    parts,
                })),
            )
        }
    };
    cat.tensors.push(TensorInfo {
        name: name.to_string(),
        ty,
        shape: o.shape.clone(),
        storage,
        arrangement: Default::default(),
        attributes,
    });
}

/// Opens a legacy `.zt` v1.2 or v0.1 file (as [`LegacyReader`] validates it) and lists its
/// objects the way [`open`] lists v2 objects, with their v2 layout ids; component digests (over
/// the stored bytes) are checks.
pub fn open_legacy<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let r = LegacyReader::open(src).map_err(error)?;
    let format = match r.version() {
        legacy::LegacyVersion::V1_2 => Format::ZtV1,
        legacy::LegacyVersion::V0_1 => Format::ZtV0,
    };
    let mut cat = Catalog {
        format,
        tensors: Vec::new(),
        metadata: meta_entries(r.attributes()),
        skipped: r
            .skipped()
            .iter()
            .map(|s| (s.clone(), "not an object this reader lists".to_string()))
            .collect(),
        sources: vec![String::new()],
        checks: Vec::new(),
    };
    if let Some(v) = r.manifest_version() {
        cat.metadata.insert(0, ("zt.version".into(), Meta::Str(v.to_string())));
    }
    for o in r.objects() {
        legacy_object(&mut cat, o);
    }
    Ok(cat)
}

/// The v2 logical type id of a legacy logical type (`f8_e4m3fn` ... `complex128`), when the v2
/// registry has it.
fn legacy_logical(t: &legacy::LogicalType) -> Option<LogicalType> {
    LogicalType::from_name(t.name())
}

fn legacy_object(cat: &mut Catalog, o: &legacy::Object) {
    let layout_id = o.format.v2_layout();
    let mut parts = Vec::new();
    let mut pmeta = Vec::new();
    for c in &o.components {
        let storage = match &c.encoding {
            legacy::Encoding::Raw => Storage::Range {
                source: 0,
                offset: c.offset,
                len: c.length,
            },
            legacy::Encoding::Zstd => Storage::Encoded {
                source: 0,
                offset: c.offset,
                len: c.length,
                decoded: c.uncompressed_length.unwrap_or(0),
                codec: Codec::Zstd,
            },
            legacy::Encoding::Other(e) => {
                cat.skipped.push((
                    o.name.clone(),
                    format!(
                        "component {:?} is stored under encoding {e:?}, which this reader does not decode",
                        c.role
                    ),
                ));
                return;
            }
        };
        let d = match &c.digest {
            Some(legacy::Digest::Crc32c(v)) => Some(Digest::Crc32c(*v)),
            Some(legacy::Digest::Sha256(h)) => Some(Digest::Sha256(*h)),
            _ => None,
        };
        if let Some(digest) = d {
            cat.checks.push(Check {
                source: 0,
                offset: c.offset,
                len: c.length,
                digest,
                what: format!("object '{}' component '{}'", o.name, c.role),
                decoded: None,
            });
        }
        let mut m = vec![
            ("dtype".to_string(), Meta::Str(zt_dtype(c.dtype))),
            ("offset".to_string(), Meta::UInt(c.offset)),
            ("length".to_string(), Meta::UInt(c.length)),
        ];
        if let Some(t) = &c.logical_type {
            m.push(("type".into(), Meta::Str(t.name().to_string())));
        }
        if let legacy::Encoding::Zstd = c.encoding {
            m.push(("encoding".into(), Meta::Str("zstd".into())));
            m.push(("decoded_length".into(), Meta::UInt(c.uncompressed_length.unwrap_or(0))));
        }
        if let Some(d) = &c.digest {
            m.push(("digest".into(), Meta::Str(legacy_digest(d))));
        }
        pmeta.push((c.role.clone(), Meta::Map(m)));
        let len = c
            .uncompressed_length
            .filter(|_| c.encoding == legacy::Encoding::Zstd)
            .unwrap_or(c.length);
        let ty = match &c.logical_type {
            None => Some(ElementType::Dense(c.dtype)),
            Some(t) => legacy_logical(t).map(ElementType::Logical),
        };
        parts.push(Part {
            name: c.role.clone(),
            ty,
            type_name: c
                .logical_type
                .as_ref()
                .map_or_else(|| zt_dtype(c.dtype), |t| t.name().to_string()),
            len,
            storage,
        });
    }
    let mut attributes = vec![
        ("layout".to_string(), Meta::Str(layout_id.clone())),
        ("parts".to_string(), Meta::Map(pmeta)),
    ];
    if let Some(a) = &o.attributes {
        attributes.push(("attributes".to_string(), meta(a)));
    }
    let dense = match (&o.format, parts.as_slice()) {
        (legacy::Format::Dense, [p]) => p.ty,
        _ => None,
    };
    let (ty, storage) = match dense {
        Some(ty) => (
            ty,
            parts.pop().map(|p| p.storage).unwrap_or(Storage::Inline(Vec::new())),
        ),
        None => {
            let ty = main_part(parts.iter().map(|p| (p.name.as_str(), p.ty)))
                .flatten()
                .unwrap_or(ElementType::Dense(DType::U8));
            (
                ty,
                Storage::Parts(alloc::boxed::Box::new(Parts {
                    layout: layout_id,
                    parts,
                })),
            )
        }
    };
    cat.tensors.push(TensorInfo {
        name: o.name.clone(),
        ty,
        shape: o.shape.clone(),
        storage,
        arrangement: Default::default(),
        attributes,
    });
}

/// A legacy digest as the manifest writes it.
pub fn legacy_digest(d: &legacy::Digest) -> String {
    match d {
        legacy::Digest::Crc32c(n) => format!("crc32c:0x{n:08X}"),
        legacy::Digest::Sha256(h) => Digest::Sha256(*h).display(),
        legacy::Digest::Other(s) | legacy::Digest::Malformed(s) => s.clone(),
    }
}
