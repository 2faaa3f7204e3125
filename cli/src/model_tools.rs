//! Every file in the `tensorlane` CLI, through one [`Model`]: `inspect` and `verify` for the
//! foreign model formats, `.zt` v2 (with its shards), legacy `.zt` and Tenso packet files
//! (`convert`: [`crate::convert`]).
//!
//! * [`inspect`] describes any file in one JSON schema ([`Report`]: `format`, `file`, `bytes`,
//!   `packets`, `tensors` with `name`, `kind`, `dtype`, `shape`, `nbytes`, `sha256`, where and how
//!   the bytes are stored), with what the formats carry in one place: per tensor its `layout`,
//!   `parts` and `attributes`; per file its `metadata`, the `sources` it reads (shards, external
//!   data), what was `skipped`, and `zt` (the `.zt` shard table and manifest). `sha256` is over the
//!   tensor's C-order little-endian bytes (raw blocks for ggml-quantized tensors; a part's decoded
//!   bytes), as the fixtures' manifest defines it.
//! * [`verify`] checks what the format carries: every checksum ([`Model::verify`]) and, for
//!   `.zt`, the format's own rules ([`crate::zt_tools::verify`]).

use std::fmt::Write as _;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use sha2::Digest as _;
use tensorlane_core::DType;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::ggml::GgmlType;
use tensorlane_core::formats::{ElementType, ErrorKind, FormatError, Meta, Storage, TensorInfo};
use tensorlane_core::zt::layout;

use tensorlane::model::{Model, is_model_format};

use crate::error::CliError;
use crate::output::{Table, advance, finish, progress, render_table, shape_str};

// ---------------------------------------------------------------------------------------------
// Metadata as JSON

/// Serialises a [`Meta`] as JSON: byte strings as `{"bytes": n, "hex": ...}` (cut at 64 bytes),
/// non-finite floats as `"nan"`, `"inf"`, `"-inf"`, maps as objects in file order.
pub struct MetaJson<'a>(pub &'a Meta);

/// Serialises key/value pairs as a JSON object, in order.
pub struct MetaMap<'a>(pub &'a [(String, Meta)]);

impl Serialize for MetaJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Meta::Null => s.serialize_unit(),
            Meta::Bool(b) => s.serialize_bool(*b),
            Meta::Int(i) => s.serialize_i64(*i),
            Meta::UInt(u) => s.serialize_u64(*u),
            Meta::Float(f) if f.is_finite() => s.serialize_f64(*f),
            Meta::Float(f) => s.serialize_str(non_finite(*f)),
            Meta::Str(t) => s.serialize_str(t),
            Meta::Bytes(b) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("bytes", &b.len())?;
                m.serialize_entry("hex", &hex::encode(&b[..b.len().min(64)]))?;
                m.end()
            }
            Meta::List(l) => {
                let mut q = s.serialize_seq(Some(l.len()))?;
                for v in l {
                    q.serialize_element(&MetaJson(v))?;
                }
                q.end()
            }
            Meta::Map(m) => MetaMap(m).serialize(s),
        }
    }
}

impl Serialize for MetaMap<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, &MetaJson(v))?;
        }
        m.end()
    }
}

fn non_finite(f: f64) -> &'static str {
    if f.is_nan() {
        "nan"
    } else if f > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

/// A metadata value as compact JSON text (what a safetensors `__metadata__` string holds).
pub(crate) fn meta_json(m: &Meta) -> String {
    serde_json::to_string(&MetaJson(m)).unwrap_or_default()
}

/// A short one-line rendering for the table: long lists and strings are cut.
fn meta_short(m: &Meta) -> String {
    let mut s = match m {
        Meta::Str(t) => t.clone(),
        Meta::List(l) if l.len() > 8 => {
            let head: Vec<String> = l.iter().take(4).map(meta_short).collect();
            format!("[{}, ... ({} items)]", head.join(", "), l.len())
        }
        other => meta_json(other),
    };
    if s.chars().count() > 100 {
        s = s.chars().take(97).collect::<String>() + "...";
    }
    s
}

/// The NumPy dtype of a ggml type that is not block-quantized (`F32`, `F16`, `BF16`, `F64`,
/// `I8`..`I64`).
pub fn ggml_plain(g: GgmlType) -> Option<DType> {
    Some(match g.name() {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I8" => DType::I8,
        "I16" => DType::I16,
        "I32" => DType::I32,
        "I64" => DType::I64,
        _ => return None,
    })
}

pub(crate) fn dtype_name(ty: ElementType) -> &'static str {
    match ty {
        ElementType::Ggml(g) => ggml_plain(g).map_or(g.name(), DType::name),
        other => other.name(),
    }
}

pub(crate) fn is_quantized(ty: ElementType) -> bool {
    matches!(ty, ElementType::Ggml(g) if ggml_plain(g).is_none())
}

pub(crate) fn nbytes(format: &'static str, t: &TensorInfo) -> Result<u64, FormatError> {
    t.nbytes().ok_or_else(|| {
        FormatError::new(
            format,
            ErrorKind::Overflow,
            format!("{} {:?} has no whole byte size", t.ty.name(), t.shape),
        )
        .tensor(t.name.clone())
    })
}

// ---------------------------------------------------------------------------------------------
// inspect

/// What `inspect` found in a file, in every format: the first five fields, then what the formats
/// carry. What only one format has is in one place: per tensor its `layout` and `parts` (`.zt`,
/// sparse and quantized Tenso packets) and `attributes`; per file the `zt` key (`.zt`: shard
/// table, manifest blob, data shard; legacy `.zt`: manifest and version).
#[derive(Serialize)]
pub struct Report<'m> {
    /// The format name (`"safetensors"`, `"gguf"`, `"zt"`, `"zt-v1"`, `"tenso"`, ...).
    pub format: &'static str,
    /// The file name as given.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Tenso packets in the file (0 for every other format).
    pub packets: u64,
    /// Every tensor, in file order.
    pub tensors: Vec<TensorRow>,
    /// The other files read (shards, splits, external data), in catalog order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceInfo>,
    /// File-level metadata (`.zt`: the file's attributes), in file order.
    #[serde(serialize_with = "ser_meta_map", skip_serializing_if = "<[_]>::is_empty")]
    pub metadata: &'m [(String, Meta)],
    /// Entries that are not tensors, with why they were left out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedInfo>,
    /// Problems that did not stop the inspection (a `.zt` shard not found, a tensor not hashed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What only `.zt` files have at file level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zt: Option<crate::zt_tools::ZtInfo>,
}

fn ser_meta_map<S: Serializer>(m: &&[(String, Meta)], s: S) -> Result<S::Ok, S::Error> {
    MetaMap(m).serialize(s)
}

fn ser_meta_vec<S: Serializer>(m: &[(String, Meta)], s: S) -> Result<S::Ok, S::Error> {
    MetaMap(m).serialize(s)
}

/// A companion file.
#[derive(Clone, Debug, Serialize)]
pub struct SourceInfo {
    /// The name the model gives it (relative to the model's folder).
    pub name: String,
    /// The file it resolved to.
    pub file: String,
    /// Its size.
    pub bytes: u64,
}

/// An entry that is not a tensor.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedInfo {
    /// Its name.
    pub name: String,
    /// Why it was left out.
    pub reason: String,
}

/// One tensor of a [`Report`].
#[derive(Serialize)]
pub struct TensorRow {
    /// The tensor's name (the format's naming rules, see [`TensorInfo::name`]).
    pub name: String,
    /// `"dense"`, `"quantized"` (ggml blocks, group-quantized and MX layouts, quantized packets),
    /// `"sparse"`, `"string"` (Tenso string packets: `uint8` `[count]`, stored as the parts
    /// `offsets` and `payload`) or `"object"` (any other layout).
    pub kind: &'static str,
    /// NumPy-style dtype name, the ggml type name of a block-quantized tensor, or the element
    /// type of the main part of a tensor stored as parts.
    pub dtype: &'static str,
    /// Row-major (logical) shape.
    pub shape: Vec<u64>,
    /// Bytes of the tensor in C order (raw blocks for ggml types; all parts together for a
    /// tensor stored as parts).
    pub nbytes: u64,
    /// SHA-256 of those bytes, when hashing was requested (parts carry their own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// How the bytes are stored: `contiguous` (a byte range of a file), `deflate` (a deflated
    /// zip member), `encoded` (zstd, zstd-seekable or LZ4: see `encoding`), `inline` (decoded
    /// from the header), `chunked` (HDF5 chunks) or `parts` (see `parts`).
    pub storage: &'static str,
    /// The companion file holding the bytes (absent: the opened file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Where the stored bytes start in their file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Stored bytes (compressed length for deflate and encoded storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// The codec of encoded storage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<&'static str>,
    /// The elements are stored big-endian (swapped on read).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub big_endian: bool,
    /// Element strides of a strided view (PyTorch views, Fortran order); absent when the stored
    /// elements are in C order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strides: Option<Vec<u64>>,
    /// Readable without a copy (a contiguous, C-order, little-endian range).
    pub zero_copy: bool,
    /// The format's layout id (`.zt`: `dense`, `zt.sparse_csr/1`, `gguf.q4_k/1`, ...; Tenso:
    /// `tenso.sparse_csr`, `tenso.quantized`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// The parts the format stores the tensor as, in file order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRow>,
    /// The format's other per-tensor details (`.zt`: the object's attributes).
    #[serde(serialize_with = "ser_meta_vec", skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<(String, Meta)>,
}

/// One part of a tensor.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PartRow {
    /// Part name.
    pub name: String,
    /// NumPy name of the storage dtype.
    pub dtype: String,
    /// The part's shape, where the format records one (Tenso: sparse components, string
    /// offsets and payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Logical type as written (`bool`, `f4_e2m1`, ...).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub logical: Option<String>,
    /// Encoding; absent = raw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// Where the stored bytes start (in `shard` when set).
    pub offset: u64,
    /// Stored length.
    pub length: u64,
    /// The `.zt` shard holding the bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Decoded bytes.
    pub nbytes: u64,
    /// The digest the file records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// SHA-256 of the decoded bytes, when hashing was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A part as the `parts` attribute describes it.
fn part_row(name: &str, m: &Meta, storage: &Storage) -> PartRow {
    let Meta::Map(fields) = m else {
        return PartRow {
            name: name.to_string(),
            ..Default::default()
        };
    };
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let text = |k: &str| match get(k) {
        Some(Meta::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let num = |k: &str| match get(k) {
        Some(Meta::UInt(n)) => Some(*n),
        Some(Meta::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    let dtype = text("dtype").unwrap_or_default();
    let dtype = tensorlane_core::zt::format::dtype_from_zt(&dtype)
        .or_else(|| DType::from_name(&dtype))
        .map_or(dtype, |d| d.name().to_string());
    let length = num("length").unwrap_or(0);
    let decoded = match storage {
        Storage::Parts(p) => p.parts.iter().find(|p| p.name == name).map(|p| p.len),
        _ => None,
    };
    PartRow {
        name: name.to_string(),
        dtype,
        shape: match get("shape") {
            Some(Meta::List(l)) => l
                .iter()
                .map(|m| match m {
                    Meta::UInt(n) => Some(*n),
                    _ => None,
                })
                .collect(),
            _ => None,
        },
        logical: text("type"),
        encoding: text("encoding"),
        offset: num("offset").unwrap_or(0),
        length,
        shard: text("shard"),
        nbytes: decoded.or_else(|| num("decoded_length")).unwrap_or(length),
        digest: text("digest"),
        sha256: None,
    }
}

/// `dense`, `sparse`, `quantized`, `string` or `object`, by layout id.
fn kind_of(layout: &str) -> &'static str {
    match layout {
        layout::DENSE => "dense",
        tensorlane_core::formats::tenso::LAYOUT_STRINGS => "string",
        l if l.contains("sparse") => "sparse",
        layout::QUANT_GROUP | layout::MX | "quantized_group" | "tenso.quantized" => "quantized",
        l if l.starts_with("gguf.") => "quantized",
        _ => "object",
    }
}

/// The row of tensor `t` of `model`.
fn tensor_row(model: &Model, t: &TensorInfo) -> Result<TensorRow, CliError> {
    let cat = model.catalog();
    let format = cat.format.name();
    let names: Vec<&str> = cat.sources.iter().map(String::as_str).collect();
    let attr = |k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let (storage, source, offset, length, encoding) = match &t.storage {
        Storage::Range { source, offset, len } => ("contiguous", *source, Some(*offset), Some(*len), None),
        Storage::Deflate {
            source,
            offset,
            compressed,
            ..
        } => ("deflate", *source, Some(*offset), Some(*compressed), None),
        Storage::Encoded {
            source,
            offset,
            len,
            codec,
            ..
        } => ("encoded", *source, Some(*offset), Some(*len), Some(codec.name())),
        Storage::Inline(b) => ("inline", 0, None, Some(b.len() as u64), None),
        Storage::Hdf5Chunked(c) => ("chunked", c.source, None, None, None),
        Storage::Parts(_) => ("parts", 0, None, None, None),
    };
    // The layout and parts of the formats that have them (`.zt`; Tenso's sparse and quantized
    // packets); an HDF5 dataset's `layout` attribute is its own.
    let zt = format.starts_with("zt");
    let has_parts = zt || matches!(t.storage, Storage::Parts(_));
    let layout = match (&t.storage, attr("layout")) {
        (Storage::Parts(p), _) => Some(p.layout.clone()),
        (_, Some(Meta::Str(l))) if zt => Some(l.clone()),
        _ => None,
    };
    let parts: Vec<PartRow> = match attr("parts") {
        Some(Meta::Map(m)) if has_parts => m.iter().map(|(n, v)| part_row(n, v, &t.storage)).collect(),
        _ => Vec::new(),
    };
    // `.zt` objects: their own attributes; every other format: what is not shown above.
    let attributes = match (zt, attr("attributes")) {
        (true, Some(Meta::Map(m))) => m.clone(),
        (true, _) => Vec::new(),
        (false, _) => t
            .attributes
            .iter()
            .filter(|(k, _)| !has_parts || (k != "layout" && k != "parts"))
            .cloned()
            .collect(),
    };
    let nbytes = match &t.storage {
        Storage::Parts(p) => p.parts.iter().map(|p| p.len).sum(),
        _ => nbytes(format, t)?,
    };
    Ok(TensorRow {
        name: t.name.clone(),
        kind: match &layout {
            Some(l) => kind_of(l),
            None if is_quantized(t.ty) => "quantized",
            None => "dense",
        },
        dtype: dtype_name(t.ty),
        shape: t.shape.clone(),
        nbytes,
        sha256: None,
        storage,
        source: (source > 0).then(|| names.get(source).copied().unwrap_or("?").to_string()),
        offset,
        length,
        encoding,
        big_endian: t.arrangement.big_endian,
        strides: t.arrangement.view.as_ref().map(|v| v.strides.clone()),
        zero_copy: t.is_zero_copy(),
        layout,
        parts,
        attributes,
    })
}

/// Hashes tensor `t` into `row`: its bytes (and its one part's, when the format lists it), or
/// each part of a tensor stored as parts. A tensor in a file that is not there (a `.zt` shard)
/// or whose bytes do not match their recorded digest is not hashed: a warning says so.
fn hash_tensor(
    model: &Model,
    t: &TensorInfo,
    row: &mut TensorRow,
    bar: Option<&indicatif::ProgressBar>,
    warnings: &mut Vec<String>,
) -> Result<(), CliError> {
    let r = match &t.storage {
        Storage::Parts(p) => p.parts.iter().try_for_each(|part| {
            let bytes = model.read_part(t, &part.name)?;
            let digest = crate::output::sha256_hex(&bytes, bar);
            if let Some(r) = row.parts.iter_mut().find(|r| r.name == part.name) {
                r.sha256 = Some(digest);
            }
            Ok(())
        }),
        _ => {
            // Streamed in bounded pieces (inflated, decoded, checksums checked on the way):
            // memory does not grow with the tensor.
            let mut h = sha2::Sha256::new();
            model
                .read_chunks(t, 8 << 20, &mut |p| {
                    h.update(p);
                    advance(bar, p.len() as u64);
                    Ok(())
                })
                .map(|()| {
                    let digest = hex::encode(h.finalize());
                    if let [part] = row.parts.as_mut_slice() {
                        part.sha256 = Some(digest.clone());
                    }
                    row.sha256 = Some(digest);
                })
        }
    };
    match r {
        Err(tensorlane::Error::Format(e)) if e.kind == ErrorKind::Companion => {
            warnings.push(format!("{:?} not hashed: {e}", t.name));
        }
        // A `.zt` part digest is the format's metadata: a mismatch is reported, and `verify`
        // rejects the file.
        Err(tensorlane::Error::Format(e)) if e.kind == ErrorKind::Checksum && e.format == "zt" => {
            let part = e
                .message
                .split("part '")
                .nth(1)
                .and_then(|s| s.split('\'').next())
                .or(row.parts.first().map(|p| p.name.as_str()))
                .unwrap_or("data");
            warnings.push(format!(
                "{:?}/{part:?}: the stored digest does not match the bytes ({}); `tensorlane verify` rejects this \
                 file",
                t.name, e.message
            ));
        }
        Err(e) => return Err(e.into()),
        Ok(()) => {}
    }
    Ok(())
}

/// Describes `model` (opened from `file`, any format); with `hash`, reads every tensor (every
/// part) and hashes its bytes, with a progress bar on a terminal.
pub fn inspect<'m>(model: &'m Model, file: &str, hash: bool) -> Result<Report<'m>, CliError> {
    let cat = model.catalog();
    let mut tensors = Vec::with_capacity(cat.tensors.len());
    for t in &cat.tensors {
        tensors.push(tensor_row(model, t)?);
    }
    let mut warnings = model.warnings();
    if hash {
        let total = tensors.iter().map(|t| t.nbytes).sum();
        let bar = progress(total, "hashing");
        for (row, t) in tensors.iter_mut().zip(&cat.tensors) {
            hash_tensor(model, t, row, bar.as_ref(), &mut warnings)?;
        }
        finish(bar);
    }
    let mut sources = model.sources();
    let bytes = sources.next().map_or(0, |(_, n)| n);
    let zt = crate::zt_tools::zt_info(model)?;
    if hash {
        crate::identify::check_unchanged(model)?;
    }
    Ok(Report {
        format: cat.format.name(),
        file: file.to_string(),
        bytes,
        packets: cat
            .metadata
            .iter()
            .find(|(k, _)| k == "packets" && cat.format == Format::Tenso)
            .and_then(|(_, v)| match v {
                Meta::UInt(n) => Some(*n),
                Meta::Int(n) => u64::try_from(*n).ok(),
                _ => None,
            })
            .unwrap_or(0),
        tensors,
        // `.zt` shards are listed in the shard table, with what they resolved to.
        sources: sources
            .zip(cat.sources.iter().skip(1))
            .enumerate()
            .filter(|(k, _)| zt.is_none() && !model.is_missing(k + 1))
            .map(|(_, ((p, n), name))| SourceInfo {
                name: name.clone(),
                file: p.display().to_string(),
                bytes: n,
            })
            .collect(),
        metadata: &cat.metadata,
        skipped: cat
            .skipped
            .iter()
            .map(|(n, r)| SkippedInfo {
                name: n.clone(),
                reason: r.clone(),
            })
            .collect(),
        warnings,
        zt,
    })
}

impl Table for Report<'_> {
    fn to_table(&self) -> String {
        let n = self.tensors.len();
        let noun = if self.zt.is_some() { "object" } else { "tensor" };
        let packets = match self.packets {
            0 => String::new(),
            1 => ", 1 packet".to_string(),
            p => format!(", {p} packets"),
        };
        let mut out = format!(
            "{}: {} file, {}{packets}, {n} {noun}{}\n",
            self.file,
            self.format,
            crate::output::size(self.bytes),
            if n == 1 { "" } else { "s" }
        );
        if let Some(zt) = &self.zt {
            out.push_str(&zt.to_table());
        }
        for s in &self.sources {
            let _ = writeln!(out, "reads {} ({}) -> {}", s.name, crate::output::size(s.bytes), s.file);
        }
        for (k, v) in self.metadata {
            let _ = writeln!(out, "metadata {k} = {}", meta_short(v));
        }
        let hashed = self
            .tensors
            .iter()
            .any(|t| t.sha256.is_some() || t.parts.iter().any(|p| p.sha256.is_some()));
        let mut rows: Vec<Vec<String>> = vec![
            ["NAME", "DTYPE", "SHAPE", "NBYTES", "LAYOUT", "AT"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ];
        if hashed {
            rows[0].push("SHA256".into());
        }
        let at = |source: Option<&str>, o: u64, l: u64| {
            format!("{}{o}+{l}", source.map_or(String::new(), |s| format!("{s}@")))
        };
        for t in &self.tensors {
            let mut layout = t.layout.clone().unwrap_or_else(|| t.storage.to_string());
            if let Some(e) = t.encoding {
                layout.push_str(&format!(",{e}"));
            }
            if t.big_endian {
                layout.push_str(",big-endian");
            }
            if let Some(s) = &t.strides {
                layout.push_str(&format!(",strides={s:?}"));
            }
            let here = match (t.offset, t.length) {
                (Some(o), Some(l)) => at(t.source.as_deref(), o, l),
                _ => "-".into(),
            };
            let mut r = vec![
                t.name.clone(),
                t.dtype.to_string(),
                shape_str(&t.shape),
                t.nbytes.to_string(),
                layout,
                here,
            ];
            if hashed {
                r.push(t.sha256.clone().unwrap_or_default());
            }
            rows.push(r);
            if t.parts.len() > 1 || t.sha256.is_none() {
                for p in &t.parts {
                    let ty = match &p.logical {
                        Some(l) => format!("{} ({l})", p.dtype),
                        None => p.dtype.clone(),
                    };
                    let mut r = vec![
                        format!("  .{}", p.name),
                        ty,
                        String::new(),
                        p.nbytes.to_string(),
                        [p.encoding.as_deref(), p.digest.as_deref()]
                            .into_iter()
                            .flatten()
                            .collect::<Vec<_>>()
                            .join(","),
                        at(p.shard.as_deref(), p.offset, p.length),
                    ];
                    if hashed {
                        r.push(p.sha256.clone().unwrap_or_default());
                    }
                    rows.push(r);
                }
            }
            if !t.attributes.is_empty() {
                // Long lists (a quantized packet's scales) are counted here; the JSON has them.
                let short: Vec<(String, Meta)> = t
                    .attributes
                    .iter()
                    .map(|(k, v)| match v {
                        Meta::List(l) if l.len() > 8 => (k.clone(), Meta::Str(format!("[{} values]", l.len()))),
                        _ => (k.clone(), v.clone()),
                    })
                    .collect();
                rows.push(vec![format!(
                    "  attributes: {}",
                    serde_json::to_string(&MetaMap(&short)).unwrap_or_default()
                )]);
            }
        }
        out.push_str(&render_table(&rows, &[3]));
        if n == 0 {
            out.push_str("(no tensors)\n");
        }
        for s in &self.skipped {
            let _ = writeln!(out, "skipped {}: {}", s.name, s.reason);
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// verify

/// `verify` on any file: opening checked the header, every byte range, size and companion (and a
/// `.zt` file's every rule of spec §13, GGUF's alignment and bounds); then the format's own
/// checks (`.zt`: layout profiles, content rules and digests named by rule, shards with `deep`,
/// canonical form with `canonical`: [`crate::zt_tools::verify`]); then every tensor read in full
/// with every checksum the format carries ([`Model::verify`]: zip CRC-32s, ONNX SHA-1s, `.zt`
/// part digests, Tenso XXH3 footers), with a progress bar on a terminal. The sentence says what
/// was checked.
pub fn verify(model: &Model, canonical: bool, deep: bool) -> Result<String, CliError> {
    let cat = model.catalog();
    let format = cat.format.name();
    let zt = match cat.format {
        Format::Zt => Some(crate::zt_tools::verify(model, deep, canonical)?),
        Format::ZtV1 | Format::ZtV0 if canonical => {
            return Err(CliError::NotCanonical(
                "a legacy .zt file is never in .zt v2 canonical form (convert it first)".into(),
            ));
        }
        Format::Tenso if canonical => {
            return Err(CliError::NotCanonical(
                "canonical form is defined for .zt v2 files only".into(),
            ));
        }
        f if canonical && is_model_format(f) => {
            return Err(CliError::Usage(
                "--canonical checks .zt and Tenso files; a model file has no canonical form here (convert it to .zt \
                 first: tensorlane convert)"
                    .into(),
            ));
        }
        _ => None,
    };
    if let Some(z) = &zt
        && (z.data_shard || z.unresolved)
    {
        // Nothing more to read: a data shard has no tensors; parts in shards not found are
        // listed as not checked.
        return Ok(z.sentence.clone());
    }
    let mut total = 0u64;
    for t in &cat.tensors {
        total = total.saturating_add(match &t.storage {
            Storage::Parts(p) => p.parts.iter().map(|p| p.len).sum(),
            _ => nbytes(format, t)?,
        });
    }
    let bar = progress(total, "verifying");
    let mut last = 0;
    let checked = model.verify(&mut |done, _| {
        advance(bar.as_ref(), done.saturating_sub(last));
        last = done;
    })?;
    finish(bar);
    crate::identify::check_unchanged(model)?;
    if let Some(z) = zt {
        return Ok(z.sentence);
    }
    let n = cat.tensors.len();
    let sums = checked.checks + checked.deflated;
    let plural = |k: u64| if k == 1 { "" } else { "s" };
    let integrity = match (cat.format, sums) {
        (Format::Npz | Format::PyTorch, k) => format!("{k} zip member CRC-32{} match", plural(k)),
        (Format::Onnx, k) if k > 0 => format!("{k} external-data SHA-1 checksum{} match", plural(k)),
        (Format::Tenso, k) => format!("{k} XXH3 footer{} match", plural(k)),
        (Format::ZtV1 | Format::ZtV0, k) => format!("{k} component digest{} match", plural(k)),
        _ => "the format stores no checksums".to_string(),
    };
    Ok(format!(
        "ok: {format} file, {n} tensor{} ({}) read in full: header, byte ranges, sizes{} checked; {integrity}",
        if n == 1 { "" } else { "s" },
        crate::output::human_bytes(total),
        if cat.sources.len() > 1 { ", companion files" } else { "" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_json() {
        let m = vec![
            ("a".to_string(), Meta::Str("x".into())),
            ("b".to_string(), Meta::Float(f64::NAN)),
            ("c".to_string(), Meta::Bytes(vec![1, 2])),
            (
                "d".to_string(),
                Meta::Map(vec![("k".into(), Meta::Int(-3)), ("k".into(), Meta::UInt(4))]),
            ),
            ("e".to_string(), Meta::List((0..20).map(Meta::Int).collect())),
        ];
        let j = serde_json::to_string(&MetaMap(&m)).unwrap();
        assert!(
            j.starts_with(r#"{"a":"x","b":"nan","c":{"bytes":2,"hex":"0102"},"d":{"k":-3,"k":4}"#),
            "{j}"
        );
        assert_eq!(meta_short(&m[4].1), "[0, 1, 2, 3, ... (20 items)]");
        assert_eq!(ggml_plain(GgmlType(30)), Some(DType::BF16));
        assert_eq!(ggml_plain(GgmlType(2)), None);
    }
}
