//! L1 of `.zt` v2: the manifest schema (spec §4, §5) and its walk in file key order (§13 step 11).
//!
//! [`Manifest::from_value`] turns a decoded deterministic-CBOR root into owned, typed records,
//! rejecting with `Schema`, `Name` or `ShardName` in the order the reference does. Unknown keys
//! are ignored at every level. Maps are kept as [`BTreeMap`]s: their order is bytewise by name,
//! the order of §13 steps 12–13.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::cbor::Value;
use super::format::{ElementType, LogicalType, check_name, check_shard_name, dtype_from_zt, parse_digest};
use super::rule::Rule;
use super::{Error, Result};
use crate::dtype::DType;

/// A validated manifest: objects, the optional shard table and the optional file attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Objects by name (bytewise order).
    pub objects: BTreeMap<String, Object>,
    /// The shard table (`None` when the manifest has no `shards` key).
    pub shards: Option<BTreeMap<String, ShardEntry>>,
    /// File attributes (a CBOR map with text keys), if present.
    pub attributes: Option<Value<'static>>,
    /// Where the manifest blob lies in the file: `(offset, length)`.
    pub manifest_blob: Blob,
    /// Size of the containing file.
    pub file_size: u64,
}

/// One object: shape, layout and parts.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    /// Logical shape (empty = scalar).
    pub shape: Vec<u64>,
    /// Layout id (`"dense"`, `"zt.sparse_csr/1"`, ...).
    pub layout: String,
    /// Parts by name (bytewise order; never empty).
    pub parts: BTreeMap<String, Part>,
    /// Object attributes (a CBOR map with text keys), if present.
    pub attributes: Option<Value<'static>>,
}

impl Object {
    /// The element count: product of the shape (1 for a scalar). Validation guarantees it fits u64.
    pub fn elements(&self) -> u64 {
        self.shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Looks up an object attribute by key.
    pub fn attribute(&self, key: &str) -> Option<&Value<'static>> {
        self.attributes.as_ref()?.get(key)
    }
}

/// A blob reference `[offset, length]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Blob {
    /// Absolute offset in the target file.
    pub offset: u64,
    /// Stored length in bytes.
    pub length: u64,
}

/// One part of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Storage dtype.
    pub dtype: DType,
    /// The `type` field (logical type id) as written; `None` = the dtype itself.
    pub logical: Option<String>,
    /// Where the stored bytes are.
    pub blob: Blob,
    /// The shard holding the bytes; `None` = the containing file.
    pub shard: Option<String>,
    /// The encoding profile id; `None` = raw.
    pub encoding: Option<String>,
    /// Decoded byte count (present iff `encoding` is).
    pub decoded_length: Option<u64>,
    /// `"<algo>:<hex>"` over the decoded bytes.
    pub digest: Option<String>,
}

impl Part {
    /// Decoded size: the blob length when raw, `decoded_length` when encoded.
    pub fn decoded_size(&self) -> u64 {
        self.decoded_length.unwrap_or(self.blob.length)
    }

    /// The registered logical type, if the `type` field names one.
    pub fn logical_type(&self) -> Option<LogicalType> {
        self.logical.as_deref().and_then(LogicalType::from_name)
    }

    /// The element type: registered logical type, plain dtype, or unknown (structural).
    pub fn element_type(&self) -> ElementType {
        match &self.logical {
            None => ElementType::Plain(self.dtype),
            Some(t) => match LogicalType::from_name(t) {
                Some(l) => ElementType::Logical(l),
                None => ElementType::Unknown,
            },
        }
    }

    /// True when the part is stored raw (no encoding).
    pub fn is_raw(&self) -> bool {
        self.encoding.is_none()
    }
}

/// A shard table entry: the exact file size and a whole-file digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEntry {
    /// Exact size of the shard file (≥ 48).
    pub size: u64,
    /// Whole-file digest `"<algo>:<hex>"`.
    pub digest: String,
}

fn schema(msg: impl Into<String>) -> Error {
    Error::new(Rule::Schema, msg)
}

fn value_kind(v: &Value<'_>) -> &'static str {
    match v {
        Value::Uint(_) => "an unsigned integer",
        Value::Neg(_) => "a negative integer",
        Value::Bytes(_) => "a byte string",
        Value::Text(_) => "text",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        Value::Bool(_) => "a bool",
        Value::Null => "null",
        Value::Float(_) => "a float",
    }
}

/// Checks an `attributes` value: a map whose keys are text (`Schema`) and valid names (`Name`).
/// Nested keys are not checked.
pub fn check_attributes(v: &Value<'_>, whose: &str) -> Result<()> {
    let m = v
        .as_map()
        .ok_or_else(|| schema(alloc::format!("{whose} attributes are {}, not a map", value_kind(v))))?;
    for (k, _) in m {
        let k = k
            .as_text()
            .ok_or_else(|| schema(alloc::format!("{whose} attribute key is {}, not text", value_kind(k))))?;
        check_name(k, "attribute")?;
    }
    Ok(())
}

fn text<'v>(v: &'v Value<'_>, what: &str) -> Result<&'v str> {
    v.as_text()
        .ok_or_else(|| schema(alloc::format!("{what} is {}, not text", value_kind(v))))
}

fn uint(v: &Value<'_>, what: &str) -> Result<u64> {
    v.as_u64()
        .ok_or_else(|| schema(alloc::format!("{what} is {}, not an unsigned integer", value_kind(v))))
}

fn parse_part(v: &Value<'_>) -> Result<Part> {
    let m = v
        .as_map()
        .ok_or_else(|| schema(alloc::format!("part is {}, not a map", value_kind(v))))?;
    let (mut dtype, mut logical, mut blob, mut shard, mut encoding, mut decoded_length, mut digest) =
        (None, None, None, None, None, None, None);
    for (k, v) in m {
        let Some(k) = k.as_text() else { continue };
        match k {
            "blob" => {
                let a = v
                    .as_array()
                    .ok_or_else(|| schema(alloc::format!("blob is {}, not [offset, length]", value_kind(v))))?;
                match a {
                    [Value::Uint(o), Value::Uint(l)] => blob = Some(Blob { offset: *o, length: *l }),
                    _ => {
                        return Err(schema(alloc::format!(
                            "blob must be exactly two unsigned integers, found {} items",
                            a.len()
                        )));
                    }
                }
            }
            "type" => logical = Some(text(v, "type")?.to_string()),
            "dtype" => {
                let s = text(v, "dtype")?;
                dtype = Some(dtype_from_zt(s).ok_or_else(|| schema(alloc::format!("unknown dtype {s:?}")))?);
            }
            "shard" => {
                let s = text(v, "shard")?;
                check_shard_name(s)?;
                shard = Some(s.to_string());
            }
            "encoding" => encoding = Some(text(v, "encoding")?.to_string()),
            "decoded_length" => decoded_length = Some(uint(v, "decoded_length")?),
            "digest" => {
                let s = text(v, "digest")?;
                parse_digest(s)?;
                digest = Some(s.to_string());
            }
            _ => {}
        }
    }
    let dtype = dtype.ok_or_else(|| schema("part has no dtype"))?;
    let blob = blob.ok_or_else(|| schema("part has no blob"))?;
    match (&encoding, decoded_length) {
        (Some(e), None) => return Err(schema(alloc::format!("encoding {e:?} without decoded_length"))),
        (None, Some(_)) => return Err(schema("decoded_length without encoding")),
        _ => {}
    }
    Ok(Part {
        dtype,
        logical,
        blob,
        shard,
        encoding,
        decoded_length,
        digest,
    })
}

fn parse_object(name: &str, v: &Value<'_>) -> Result<Object> {
    let m = v
        .as_map()
        .ok_or_else(|| schema(alloc::format!("object is {}, not a map", value_kind(v))).object(name))?;
    let (mut parts, mut shape, mut layout, mut attributes) = (None, None, None, None);
    for (k, v) in m {
        let Some(k) = k.as_text() else { continue };
        match k {
            "parts" => {
                let pm = v
                    .as_map()
                    .ok_or_else(|| schema(alloc::format!("parts is {}, not a map", value_kind(v))).object(name))?;
                let mut out = BTreeMap::new();
                for (pk, pv) in pm {
                    let pname = pk.as_text().ok_or_else(|| {
                        schema(alloc::format!("part key is {}, not text", value_kind(pk))).object(name)
                    })?;
                    check_name(pname, "part").map_err(|e| e.part(name, pname))?;
                    let p = parse_part(pv).map_err(|e| e.part(name, pname))?;
                    out.insert(pname.to_string(), p);
                }
                parts = Some(out);
            }
            "shape" => {
                let a = v
                    .as_array()
                    .ok_or_else(|| schema(alloc::format!("shape is {}, not an array", value_kind(v))).object(name))?;
                let mut dims = Vec::with_capacity(a.len());
                for d in a {
                    dims.push(uint(d, "shape dimension").map_err(|e| e.object(name))?);
                }
                shape = Some(dims);
            }
            "layout" => layout = Some(text(v, "layout").map_err(|e| e.object(name))?.to_string()),
            "attributes" => {
                check_attributes(v, "object").map_err(|e| e.object(name))?;
                attributes = Some(v.clone().into_owned());
            }
            _ => {}
        }
    }
    let parts = parts.ok_or_else(|| schema("object has no parts").object(name))?;
    let shape = shape.ok_or_else(|| schema("object has no shape").object(name))?;
    let layout = layout.ok_or_else(|| schema("object has no layout").object(name))?;
    if parts.is_empty() {
        return Err(schema("object has an empty parts map").object(name));
    }
    Ok(Object {
        shape,
        layout,
        parts,
        attributes,
    })
}

fn parse_shards(v: &Value<'_>) -> Result<BTreeMap<String, ShardEntry>> {
    let m = v
        .as_map()
        .ok_or_else(|| schema(alloc::format!("shards is {}, not a map", value_kind(v))))?;
    let mut out = BTreeMap::new();
    for (k, e) in m {
        let name = k
            .as_text()
            .ok_or_else(|| schema(alloc::format!("shard table key is {}, not text", value_kind(k))))?;
        check_shard_name(name)?;
        let em = e
            .as_map()
            .ok_or_else(|| schema(alloc::format!("shard entry is {}, not a map", value_kind(e))).shard(name))?;
        let (mut size, mut digest) = (None, None);
        for (ek, ev) in em {
            match ek.as_text() {
                Some("size") => size = Some(uint(ev, "shard size").map_err(|e| e.shard(name))?),
                Some("digest") => {
                    let s = text(ev, "shard digest").map_err(|e| e.shard(name))?;
                    parse_digest(s).map_err(|e| e.shard(name))?;
                    digest = Some(s.to_string());
                }
                _ => {}
            }
        }
        let size = size.ok_or_else(|| schema("shard entry has no size").shard(name))?;
        let digest = digest.ok_or_else(|| schema("shard entry has no digest").shard(name))?;
        out.insert(name.to_string(), ShardEntry { size, digest });
    }
    Ok(out)
}

impl Manifest {
    /// Walks a decoded manifest root in file key order (§13 steps 11 and 12). `manifest_blob` and
    /// `file_size` are recorded for the later blob checks; nothing here looks at blob placement.
    pub fn from_value(root: &Value<'_>, manifest_blob: Blob, file_size: u64) -> Result<Manifest> {
        let m = root
            .as_map()
            .ok_or_else(|| schema(alloc::format!("the manifest root is {}, not a map", value_kind(root))))?;
        let (mut objects, mut shards, mut attributes) = (None, None, None);
        for (k, v) in m {
            let Some(k) = k.as_text() else { continue };
            match k {
                "attributes" => {
                    check_attributes(v, "file")?;
                    attributes = Some(v.clone().into_owned());
                }
                "shards" => shards = Some(parse_shards(v)?),
                "objects" => {
                    let om = v
                        .as_map()
                        .ok_or_else(|| schema(alloc::format!("objects is {}, not a map", value_kind(v))))?;
                    let mut out = BTreeMap::new();
                    for (ok, ov) in om {
                        let name = ok
                            .as_text()
                            .ok_or_else(|| schema(alloc::format!("object key is {}, not text", value_kind(ok))))?;
                        check_name(name, "object").map_err(|e| e.object(name))?;
                        out.insert(name.to_string(), parse_object(name, ov)?);
                    }
                    objects = Some(out);
                }
                _ => {}
            }
        }
        let objects = objects.ok_or_else(|| schema("the manifest has no objects map"))?;
        // Step 12: shard entries (names were checked during the walk).
        if let Some(t) = &shards {
            for (name, e) in t {
                if e.size < super::format::MIN_FILE_SIZE {
                    return Err(
                        schema(alloc::format!("shard size {} is below the 48-byte minimum", e.size)).shard(name),
                    );
                }
            }
        }
        Ok(Manifest {
            objects,
            shards,
            attributes,
            manifest_blob,
            file_size,
        })
    }

    /// Looks up a file attribute by key.
    pub fn attribute(&self, key: &str) -> Option<&Value<'static>> {
        self.attributes.as_ref()?.get(key)
    }
}
