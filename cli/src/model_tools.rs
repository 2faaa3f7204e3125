//! The foreign model formats in the `tensorlane` CLI: `inspect` and `convert` over a [`Model`].
//!
//! * [`inspect_model`] describes a model in the packet report's JSON schema (`format`, `file`,
//!   `bytes`, `packets`, `tensors` with `name`, `kind`, `dtype`, `shape`, `nbytes`, `sha256`),
//!   adding what the formats carry: per tensor its `layout` (where and how the bytes are stored)
//!   and `attributes`; per file its `metadata`, the `sources` it reads (shards, external data) and
//!   what was `skipped`. `sha256` is over the tensor's C-order little-endian bytes, the raw blocks
//!   for ggml-quantized tensors (as the fixtures' manifest defines it).
//! * [`convert_model`] writes a model as canonical `.zt` ([`tensorlane::zt_write::ZtFile`]) or as
//!   `.safetensors` ([`tensorlane::st_write::SafetensorsFile`]), one tensor at a time: a tensor
//!   stored plain is read (with `pread`) and handed to the writer, any other is decoded on its own, so
//!   memory holds at most one tensor. Every tensor is checked against the target before the output
//!   is created, and the output appears atomically or not at all.
//!
//! Element types map as follows. `.zt`: plain dtypes as they are, `bool`, `complex64/128`, float8
//! and float4 with their `.zt` logical types; ggml block types as the spec's lossless
//! `gguf.<type>/1` layout (types it does not list, such as `TQ1_0`, are refused) or, with
//! `dequantize`, as f32. `.safetensors`: every dtype the format has (`BOOL`, `F8_*`, `F4`,
//! `C64`, ...); `complex128` is refused, ggml blocks are refused unless `dequantize`.

use std::fmt::Write as _;
use std::path::Path;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use tensorlane_core::DType;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::ggml::GgmlType;
use tensorlane_core::formats::{ElementType, ErrorKind, FormatError, Meta, Storage, TensorInfo};
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::format::LogicalType;
use tensorlane_core::zt::layout;
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartDecl, PartSpec};

use tensorlane::model::{Model, is_model_format};
use tensorlane::source::Source;
use tensorlane::st_write::{SafetensorsFile, StDtype, StTensor};
use tensorlane::zt_write::ZtFile;

use crate::error::CliError;
use crate::output::{Table, advance, finish, progress, render_table, shape_str};
use crate::zt_tools::{ConvertOptions, Converted, Target};
use sha2::Digest as _;

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
fn meta_json(m: &Meta) -> String {
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

// ---------------------------------------------------------------------------------------------
// inspect

/// What `inspect` found in a model file. The first five fields are those of the packet report
/// ([`crate::inspect::Report`]).
#[derive(Serialize)]
pub struct ModelReport<'m> {
    /// The format name (`"safetensors"`, `"gguf"`, `"pt"`, `"npy"`, `"onnx"`, `"hdf5"`, ...).
    pub format: &'static str,
    /// The file name as given.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Tenso packets in the file: always 0.
    pub packets: usize,
    /// Every tensor, in file order.
    pub tensors: Vec<ModelTensor<'m>>,
    /// The other files read (shards, splits, external data), in catalog order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceInfo>,
    /// File-level metadata, in file order.
    #[serde(serialize_with = "ser_meta_map", skip_serializing_if = "<[_]>::is_empty")]
    pub metadata: &'m [(String, Meta)],
    /// Entries that are not tensors, with why they were left out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedInfo>,
}

fn ser_meta_map<S: Serializer>(m: &&[(String, Meta)], s: S) -> Result<S::Ok, S::Error> {
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

/// One tensor of a [`ModelReport`].
#[derive(Serialize)]
pub struct ModelTensor<'m> {
    /// The tensor's name (the format's naming rules, see [`TensorInfo::name`]).
    pub name: String,
    /// `"dense"`, or `"quantized"` for ggml block types.
    pub kind: &'static str,
    /// NumPy-style dtype name, or the ggml type name of a quantized tensor.
    pub dtype: &'static str,
    /// Row-major shape.
    pub shape: Vec<u64>,
    /// Bytes of the tensor in C order (raw blocks for ggml types).
    pub nbytes: u64,
    /// SHA-256 of those bytes, when hashing was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// How the bytes are stored: `contiguous` (a byte range of a file), `deflate` (a deflated
    /// zip member), `inline` (decoded from the header) or `chunked` (HDF5 chunks).
    pub layout: &'static str,
    /// The companion file holding the bytes (absent: the opened file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Where the stored bytes start in their file (contiguous and deflate layouts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Stored bytes (compressed length for deflate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// The elements are stored big-endian (swapped on read).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub big_endian: bool,
    /// Element strides of a strided view (PyTorch views, Fortran order); absent when the stored
    /// elements are in C order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strides: Option<Vec<u64>>,
    /// Readable without a copy (a contiguous, C-order, little-endian range).
    pub zero_copy: bool,
    /// The format's per-tensor details.
    #[serde(serialize_with = "ser_meta_map", skip_serializing_if = "<[_]>::is_empty")]
    pub attributes: &'m [(String, Meta)],
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

fn dtype_name(ty: ElementType) -> &'static str {
    match ty {
        ElementType::Ggml(g) => ggml_plain(g).map_or(g.name(), DType::name),
        other => other.name(),
    }
}

fn is_quantized(ty: ElementType) -> bool {
    matches!(ty, ElementType::Ggml(g) if ggml_plain(g).is_none())
}

fn nbytes(format: &'static str, t: &TensorInfo) -> Result<u64, FormatError> {
    t.nbytes().ok_or_else(|| {
        FormatError::new(
            format,
            ErrorKind::Overflow,
            format!("{} {:?} has no whole byte size", t.ty.name(), t.shape),
        )
        .tensor(t.name.clone())
    })
}

/// Describes `model` (opened from `file`); with `hash`, reads every tensor and hashes its bytes,
/// with a progress bar on a terminal.
pub fn inspect_model<'m>(model: &'m Model, file: &str, hash: bool) -> Result<ModelReport<'m>, CliError> {
    let cat = model.catalog();
    let format = cat.format.name();
    let names: Vec<&str> = cat.sources.iter().map(String::as_str).collect();
    let mut tensors = Vec::with_capacity(cat.tensors.len());
    for t in &cat.tensors {
        let (layout, source, offset, length) = match &t.storage {
            Storage::Range { source, offset, len } => ("contiguous", *source, Some(*offset), Some(*len)),
            Storage::Deflate {
                source,
                offset,
                compressed,
                ..
            } => ("deflate", *source, Some(*offset), Some(*compressed)),
            Storage::Inline(b) => ("inline", 0, None, Some(b.len() as u64)),
            Storage::Hdf5Chunked(c) => ("chunked", c.source, None, None),
        };
        tensors.push(ModelTensor {
            name: t.name.clone(),
            kind: if is_quantized(t.ty) { "quantized" } else { "dense" },
            dtype: dtype_name(t.ty),
            shape: t.shape.clone(),
            nbytes: nbytes(format, t)?,
            sha256: None,
            layout,
            source: (source > 0).then(|| names.get(source).copied().unwrap_or("?").to_string()),
            offset,
            length,
            big_endian: t.arrangement.big_endian,
            strides: t.arrangement.view.as_ref().map(|v| v.strides.clone()),
            zero_copy: t.is_zero_copy(),
            attributes: &t.attributes,
        });
    }
    if hash {
        let total = tensors.iter().map(|t| t.nbytes).sum();
        let bar = progress(total, "hashing");
        for (info, t) in tensors.iter_mut().zip(&cat.tensors) {
            // Streamed in bounded pieces (inflated, checksums checked on the way): memory does
            // not grow with the tensor.
            let mut h = sha2::Sha256::new();
            model.read_chunks(t, 8 << 20, &mut |p| {
                h.update(p);
                advance(bar.as_ref(), p.len() as u64);
                Ok(())
            })?;
            info.sha256 = Some(hex::encode(h.finalize()));
        }
        finish(bar);
    }
    let mut sources = model.sources();
    let bytes = sources.next().map_or(0, |(_, n)| n);
    Ok(ModelReport {
        format,
        file: file.to_string(),
        bytes,
        packets: 0,
        tensors,
        sources: sources
            .zip(cat.sources.iter().skip(1))
            .map(|((p, n), name)| SourceInfo {
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
    })
}

/// `verify` on the model file `path` (opened as `src`); `--canonical` applies to `.zt` and Tenso
/// only.
pub fn verify_model_file(path: &Path, src: Source, canonical: bool) -> Result<String, CliError> {
    if canonical {
        return Err(CliError::Usage(
            "--canonical checks .zt and Tenso files; a model file has no canonical form here (convert it to .zt \
             first: tensorlane convert)"
                .into(),
        ));
    }
    drop(src);
    verify_model(&crate::limits::open_model(path)?)
}

/// `verify` on a model file: the reader's checks of the header, every byte range, size and
/// companion (done when `model` was opened), then every tensor read in full (compressed members
/// inflated, HDF5 chunks unfiltered), with a progress bar on a terminal. The sentence says what
/// was checked and what integrity data the format carries.
pub fn verify_model(model: &Model) -> Result<String, CliError> {
    let cat = model.catalog();
    let format = cat.format.name();
    let mut total = 0u64;
    for t in &cat.tensors {
        total = total.saturating_add(nbytes(format, t)?);
    }
    let bar = progress(total, "verifying");
    let mut last = 0;
    let checked = model.verify(&mut |done, _| {
        advance(bar.as_ref(), done.saturating_sub(last));
        last = done;
    })?;
    finish(bar);
    let n = cat.tensors.len();
    let sums = checked.checks + checked.deflated;
    let integrity = match (cat.format, sums) {
        (Format::Npz | Format::PyTorch, k) => format!("{k} zip member CRC-32{} match", if k == 1 { "" } else { "s" }),
        (Format::Onnx, k) if k > 0 => format!(
            "{k} external-data SHA-1 checksum{} match",
            if k == 1 { "" } else { "s" }
        ),
        _ => "the format stores no checksums".to_string(),
    };
    Ok(format!(
        "ok: {format} file, {n} tensor{} ({}) read in full: header, byte ranges, sizes{} checked; {integrity}",
        if n == 1 { "" } else { "s" },
        crate::output::human_bytes(total),
        if cat.sources.len() > 1 { ", companion files" } else { "" },
    ))
}

impl Table for ModelReport<'_> {
    fn to_table(&self) -> String {
        let n = self.tensors.len();
        let mut out = format!(
            "{}: {} file, {}, {n} tensor{}\n",
            self.file,
            self.format,
            crate::output::size(self.bytes),
            if n == 1 { "" } else { "s" }
        );
        for s in &self.sources {
            let _ = writeln!(out, "reads {} ({}) -> {}", s.name, crate::output::size(s.bytes), s.file);
        }
        for (k, v) in self.metadata {
            let _ = writeln!(out, "metadata {k} = {}", meta_short(v));
        }
        let hashed = self.tensors.iter().any(|t| t.sha256.is_some());
        let mut rows: Vec<Vec<String>> = vec![
            ["NAME", "DTYPE", "SHAPE", "NBYTES", "LAYOUT", "AT"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ];
        if hashed {
            rows[0].push("SHA256".into());
        }
        for t in &self.tensors {
            let mut layout = t.layout.to_string();
            if t.big_endian {
                layout.push_str(",big-endian");
            }
            if let Some(s) = &t.strides {
                layout.push_str(&format!(",strides={s:?}"));
            }
            let at = match (t.offset, t.length) {
                (Some(o), Some(l)) => format!(
                    "{}{o}+{l}",
                    t.source.as_ref().map_or(String::new(), |s| format!("{s}@"))
                ),
                _ => "-".into(),
            };
            let mut r = vec![
                t.name.clone(),
                t.dtype.to_string(),
                shape_str(&t.shape),
                t.nbytes.to_string(),
                layout,
                at,
            ];
            if hashed {
                r.push(t.sha256.clone().unwrap_or_default());
            }
            rows.push(r);
        }
        out.push_str(&render_table(&rows, &[3]));
        if n == 0 {
            out.push_str("(no tensors)\n");
        }
        for s in &self.skipped {
            let _ = writeln!(out, "skipped {}: {}", s.name, s.reason);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// convert

/// What [`convert_model`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelTarget {
    /// Canonical `.zt` v2.
    Zt,
    /// `.safetensors`.
    Safetensors,
}

/// How one tensor is written.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// Its bytes as they are, as this dtype (with this `.zt` logical type).
    Bytes { dtype: DType, logical: Option<LogicalType> },
    /// Raw ggml blocks as `.zt` `gguf.<type>/1`.
    Blocks(GgmlType),
    /// ggml blocks dequantized to f32.
    Dequantize,
}

fn refuse(t: &TensorInfo, why: String) -> CliError {
    CliError::Refused(format!("tensor {:?}: {why}", t.name))
}

/// The `.zt` `gguf.<type>/1` layout id of a ggml block type, when the spec lists it.
fn gguf_layout(g: GgmlType) -> Option<String> {
    let t = g.name().to_ascii_lowercase();
    layout::GGUF_TYPES.contains(&t.as_str()).then(|| format!("gguf.{t}/1"))
}

fn plan_for(t: &TensorInfo, target: ModelTarget, dequantize: bool) -> Result<Plan, CliError> {
    Ok(match t.ty {
        ElementType::Dense(dtype) => Plan::Bytes { dtype, logical: None },
        ElementType::Logical(l) => Plan::Bytes {
            dtype: l.dtype(),
            logical: Some(l),
        },
        ElementType::Ggml(g) => match ggml_plain(g) {
            Some(dtype) => Plan::Bytes { dtype, logical: None },
            None if dequantize => Plan::Dequantize,
            None if target == ModelTarget::Zt && gguf_layout(g).is_some() => Plan::Blocks(g),
            None => {
                let to = match target {
                    ModelTarget::Zt => "the .zt gguf layouts do not include it",
                    ModelTarget::Safetensors => "safetensors has no block-quantized types",
                };
                return Err(refuse(
                    t,
                    format!(
                        "{} is ggml block-quantized and {to}; pass --dequantize to write it as float32",
                        g.name()
                    ),
                ));
            }
        },
    })
}

/// The safetensors dtype of a planned tensor.
fn st_dtype(t: &TensorInfo, plan: Plan) -> Result<StDtype, CliError> {
    match plan {
        Plan::Bytes { dtype, logical } => st_dtype_of(dtype, logical).map_err(|m| refuse(t, m)),
        Plan::Dequantize => Ok(StDtype::F32),
        Plan::Blocks(g) => Err(refuse(t, format!("{} blocks have no safetensors dtype", g.name()))),
    }
}

/// The safetensors dtype of elements stored as `dtype` with `.zt` logical type `logical`.
pub fn st_dtype_of(dtype: DType, logical: Option<LogicalType>) -> Result<StDtype, String> {
    Ok(match (dtype, logical) {
        (_, Some(LogicalType::Bool)) | (DType::Bool, _) => StDtype::BOOL,
        (_, Some(LogicalType::F8E4M3Fn)) => StDtype::F8_E4M3,
        (_, Some(LogicalType::F8E5M2)) => StDtype::F8_E5M2,
        (_, Some(LogicalType::F8E4M3Fnuz)) => StDtype::F8_E4M3FNUZ,
        (_, Some(LogicalType::F8E5M2Fnuz)) => StDtype::F8_E5M2FNUZ,
        (_, Some(LogicalType::F8E8M0)) => StDtype::F8_E8M0,
        (_, Some(LogicalType::F4E2M1)) => StDtype::F4,
        (_, Some(LogicalType::Complex64)) | (DType::C64, _) => StDtype::C64,
        (_, Some(LogicalType::Complex128)) | (DType::C128, _) => {
            return Err("safetensors has no complex128 dtype".into());
        }
        (DType::F64, None) => StDtype::F64,
        (DType::F32, None) => StDtype::F32,
        (DType::F16, None) => StDtype::F16,
        (DType::BF16, None) => StDtype::BF16,
        (DType::I64, None) => StDtype::I64,
        (DType::I32, None) => StDtype::I32,
        (DType::I16, None) => StDtype::I16,
        (DType::I8, None) => StDtype::I8,
        (DType::U64, None) => StDtype::U64,
        (DType::U32, None) => StDtype::U32,
        (DType::U16, None) => StDtype::U16,
        (DType::U8, None) => StDtype::U8,
        #[allow(unreachable_patterns)]
        (other, _) => return Err(format!("safetensors has no dtype for {other}")),
    })
}

/// Metadata as CBOR for `.zt` attributes (duplicate map keys: the last one wins).
fn meta_cbor(m: &Meta) -> Value<'static> {
    match m {
        Meta::Null => Value::Null,
        Meta::Bool(b) => Value::Bool(*b),
        Meta::Int(i) if *i >= 0 => Value::Uint(*i as u64),
        Meta::Int(i) => Value::Neg((-(i + 1)) as u64),
        Meta::UInt(u) => Value::Uint(*u),
        Meta::Float(f) => Value::Float(*f),
        Meta::Str(s) => Value::text(s.clone()),
        Meta::Bytes(b) => Value::Bytes(b.clone().into()),
        Meta::List(l) => Value::Array(l.iter().map(meta_cbor).collect()),
        Meta::Map(m) => meta_cbor_map(m),
    }
}

fn meta_cbor_map(m: &[(String, Meta)]) -> Value<'static> {
    let mut out: Vec<(Value<'static>, Value<'static>)> = Vec::with_capacity(m.len());
    for (k, v) in m {
        out.retain(|(old, _)| old.as_text() != Some(k));
        out.push((Value::text(k.clone()), meta_cbor(v)));
    }
    Value::Map(out)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Converts `model` to `output` as `target`, one tensor at a time. ggml block-quantized tensors
/// are written as f32 with `dequantize`; otherwise they go to `.zt` as `gguf.<type>/1` and are
/// refused for safetensors. File metadata goes to the `.zt` attributes (`source_format`,
/// `source_metadata`) or the safetensors `__metadata__` (strings as they are, other values as
/// JSON text).
pub fn convert_model(
    model: &Model,
    output: &Path,
    target: ModelTarget,
    opts: &ConvertOptions,
) -> Result<Converted, CliError> {
    let dequantize = opts.dequantize;
    let cat = model.catalog();
    let format = cat.format.name();
    let mut plans = Vec::with_capacity(cat.tensors.len());
    for t in &cat.tensors {
        let plan = plan_for(t, target, dequantize)?;
        nbytes(format, t)?;
        plans.push(plan);
    }
    let mut warnings = Vec::new();
    let bytes = match target {
        ModelTarget::Zt => write_zt(model, &plans, output, opts.zt_options(), &mut warnings)?,
        ModelTarget::Safetensors => write_safetensors(model, &plans, output)?,
    };
    Ok(Converted {
        from: format,
        to: match target {
            ModelTarget::Zt => "zt",
            ModelTarget::Safetensors => "safetensors",
        },
        objects: cat.tensors.len(),
        bytes,
        warnings,
    })
}

/// A tensor's output bytes under its plan.
fn tensor_bytes<'m>(model: &'m Model, t: &TensorInfo, plan: Plan) -> Result<std::borrow::Cow<'m, [u8]>, CliError> {
    Ok(match plan {
        Plan::Dequantize => f32_bytes(&model.dequantize(t)?).into(),
        _ => model.read(t)?,
    })
}

/// The byte count a tensor has once written under its plan.
fn out_nbytes(t: &TensorInfo, plan: Plan) -> u64 {
    match plan {
        Plan::Dequantize => t.numel().unwrap_or(0).saturating_mul(4),
        _ => t.nbytes().unwrap_or(0),
    }
}

fn write_zt(
    model: &Model,
    plans: &[Plan],
    output: &Path,
    options: Options,
    warnings: &mut Vec<String>,
) -> Result<u64, CliError> {
    let cat = model.catalog();
    // Canonical form stores objects in bytewise name order.
    let mut order: Vec<usize> = (0..cat.tensors.len()).collect();
    order.sort_by(|&a, &b| cat.tensors[a].name.as_bytes().cmp(cat.tensors[b].name.as_bytes()));
    if let Some(w) = order
        .windows(2)
        .find(|w| cat.tensors[w[0]].name == cat.tensors[w[1]].name)
    {
        return Err(CliError::Refused(format!(
            "two tensors are named {:?}; .zt object names are unique",
            cat.tensors[w[0]].name
        )));
    }
    let mut w = ZtFile::publish(output, options)?;
    let mut attrs = vec![(Value::text("source_format"), Value::text(cat.format.name()))];
    if !cat.metadata.is_empty() {
        attrs.push((Value::text("source_metadata"), meta_cbor_map(&cat.metadata)));
    }
    if let Err(e) = w.set_attributes(Value::Map(attrs.clone())) {
        warnings.push(format!(
            "the file metadata is not kept: the .zt writer refuses it ({e})"
        ));
        attrs.truncate(1);
        w.set_attributes(Value::Map(attrs))?;
    }
    let total = order.iter().map(|&i| out_nbytes(&cat.tensors[i], plans[i])).sum();
    let bar = progress(total, "converting");
    for &i in &order {
        let (t, plan) = (&cat.tensors[i], plans[i]);
        let refused = |e: tensorlane_core::zt::Error| {
            CliError::Refused(format!("tensor {:?}: the .zt writer refused: {e}", t.name))
        };
        let (spec, decl) = match plan {
            Plan::Dequantize => {
                let bytes = tensor_bytes(model, t, plan)?;
                let part = PartSpec::new("data", DType::F32, &bytes);
                w.add_object(&t.name, &ObjectSpec::dense(&t.shape), &[part])
                    .map_err(refused)?;
                advance(bar.as_ref(), bytes.len() as u64);
                continue;
            }
            Plan::Bytes { dtype, logical } => {
                let d = PartDecl::new("data", dtype, out_nbytes(t, plan));
                let d = match logical {
                    Some(l) => d.logical(l.name()),
                    None => d,
                };
                (ObjectSpec::dense(&t.shape), d)
            }
            Plan::Blocks(g) => {
                let spec = ObjectSpec::new(&t.shape, gguf_layout(g).unwrap_or_default()).attributes(Value::Map(vec![
                    (Value::text("block_bytes"), Value::Uint(g.type_size().unwrap_or(0))),
                    (Value::text("elems_per_block"), Value::Uint(g.block_size().unwrap_or(0))),
                ]));
                (spec, PartDecl::new("data", DType::U8, out_nbytes(t, plan)))
            }
        };
        // Streamed: the tensor passes through bounded pieces (a deflated member inflated on the
        // way, its checksum checked before the object is finished), whatever its size.
        w.begin_object(&t.name, &spec, &[decl]).map_err(refused)?;
        w.begin_part("data").map_err(refused)?;
        let mut failed = None;
        let r = model.read_chunks(t, 8 << 20, &mut |c| {
            w.write_chunk(c).map_err(|e| {
                let msg = e.to_string();
                failed = Some(e);
                FormatError::new("zt", ErrorKind::Io, msg)
            })?;
            advance(bar.as_ref(), c.len() as u64);
            Ok(())
        });
        if let Some(e) = failed {
            return Err(refused(e));
        }
        r?;
        w.end_part().map_err(refused)?;
        w.end_object().map_err(refused)?;
    }
    let size = w.finish()?.size;
    finish(bar);
    Ok(size)
}

fn write_safetensors(model: &Model, plans: &[Plan], output: &Path) -> Result<u64, CliError> {
    let cat = model.catalog();
    let mut tensors = Vec::with_capacity(plans.len());
    for (t, &plan) in cat.tensors.iter().zip(plans) {
        tensors.push(StTensor::new(t.name.clone(), st_dtype(t, plan)?, t.shape.clone()));
    }
    let metadata: Vec<(String, String)> = cat
        .metadata
        .iter()
        .map(|(k, v)| {
            let s = match v {
                Meta::Str(s) => s.clone(),
                other => meta_json(other),
            };
            (k.clone(), s)
        })
        .collect();
    let mut w = SafetensorsFile::publish(output, tensors, &metadata)?;
    let size = w.total_size();
    let bar = progress(size, "converting");
    while let Some(i) = w.next_tensor() {
        let mut written = 0u64;
        if let Plan::Dequantize = plans[i] {
            let bytes = tensor_bytes(model, &cat.tensors[i], plans[i])?;
            for c in bytes.chunks(8 << 20) {
                w.write(c)?;
                advance(bar.as_ref(), c.len() as u64);
            }
            written = bytes.len() as u64;
        } else {
            // Streamed: a tensor of any size (a deflated member included) passes through bounded
            // pieces; a checksum mismatch fails before the file is published.
            let mut failed = None;
            let r = model.read_chunks(&cat.tensors[i], 8 << 20, &mut |c| {
                w.write(c).map_err(|e| {
                    let msg = e.to_string();
                    failed = Some(e);
                    tensorlane::core::formats::FormatError::new("safetensors", ErrorKind::Io, msg)
                })?;
                written += c.len() as u64;
                advance(bar.as_ref(), c.len() as u64);
                Ok(())
            });
            if let Some(e) = failed {
                return Err(e.into());
            }
            r?;
        }
        if written == 0 && w.next_tensor() == Some(i) {
            // Nothing to write and the writer still waits: the sizes disagree.
            return Err(CliError::Invalid(format!(
                "tensor {:?}: no bytes were read",
                cat.tensors[i].name
            )));
        }
    }
    w.finish()?;
    finish(bar);
    Ok(size)
}

/// The target a file name asks for: `.zt`, `.safetensors` or `.tenso`.
pub fn target_from_extension(output: &Path) -> Option<&'static str> {
    match output.extension()?.to_str()? {
        "zt" => Some("zt"),
        "safetensors" => Some("safetensors"),
        "tenso" => Some("tenso"),
        _ => None,
    }
}

/// `tensorlane convert`: the input format comes from its content, the target from `to` (`zt`,
/// `tenso`, `safetensors`), else from the output's extension, else `.zt` (Tenso for `.zt` v2
/// input). Foreign models go through [`convert_model`]; `.zt`, legacy `.zt` and Tenso input
/// through [`crate::zt_tools::convert`], and `.zt` v2 to safetensors through
/// [`zt_to_safetensors`].
pub fn convert(input: &Path, output: &Path, to: Option<&str>, opts: &ConvertOptions) -> Result<Converted, CliError> {
    if crate::remote::is_url(output) {
        return crate::remote::convert_to_url(output, |local| convert(input, local, to, opts));
    }
    let to = to.or_else(|| target_from_extension(output));
    let src = crate::zt_tools::open_source(input)?;
    let input_bytes = tensorlane::core::source::ReadAt::size(&src);
    let mut done = convert_identified(input, src, output, to, opts)
        .map_err(|e| crate::zt_tools::note_if_changed(input, input_bytes, e))?;
    if done.to == "zt"
        && let Some(note) = crate::zt_tools::alignment_note(input_bytes, done.bytes, opts)
    {
        done.warnings.push(note);
    }
    Ok(done)
}

fn convert_identified(
    input: &Path,
    src: Source,
    output: &Path,
    to: Option<&str>,
    opts: &ConvertOptions,
) -> Result<Converted, CliError> {
    match crate::identify::identify(input, &src)? {
        f if !is_model_format(f) => match (f, to) {
            (Format::Zt, Some("safetensors")) => zt_to_safetensors(input, src, output),
            (f, Some("safetensors")) => Err(CliError::Refused(format!(
                "converting {} to safetensors is not supported (convert it to .zt first)",
                f.name()
            ))),
            (f, to) => crate::zt_tools::convert(input, src, f, output, to.and_then(Target::parse), *opts),
        },
        _ => {
            drop(src);
            let model = crate::limits::open_model(input)?;
            let target = match to {
                None | Some("zt") => ModelTarget::Zt,
                Some("safetensors") => ModelTarget::Safetensors,
                Some(other) => {
                    return Err(CliError::Refused(format!(
                        "converting {} to {other} is not supported (targets: zt, safetensors)",
                        model.format().name()
                    )));
                }
            };
            convert_model(&model, output, target, opts)
        }
    }
}

/// The `__metadata__` a `.zt` file's attributes give: the `source_metadata` a conversion kept,
/// else every attribute; text as it is, anything else as JSON text.
fn zt_metadata(attributes: Option<&Value<'_>>) -> Vec<(String, String)> {
    let Some(Value::Map(top)) = attributes else {
        return Vec::new();
    };
    let entries = match top.iter().find(|(k, _)| k.as_text() == Some("source_metadata")) {
        Some((_, Value::Map(m))) => m,
        _ => top,
    };
    entries
        .iter()
        .map(|(k, v)| {
            let key = k
                .as_text()
                .map_or_else(|| crate::zt_tools::cbor_to_json(k).to_string(), str::to_string);
            let val = v
                .as_text()
                .map_or_else(|| crate::zt_tools::cbor_to_json(v).to_string(), str::to_string);
            (key, val)
        })
        .collect()
}

/// Writes the dense objects of a `.zt` v2 file (shards resolved next to it) as `.safetensors`,
/// one object at a time; any other layout is refused.
pub fn zt_to_safetensors(input: &Path, src: Source, output: &Path) -> Result<Converted, CliError> {
    let (reader, _, _) = crate::zt_tools::open_zt(input, src, true)?;
    let m = reader
        .manifest()
        .ok_or_else(|| CliError::Refused("a data shard describes no tensors; there is nothing to convert".into()))?;
    let mut tensors = Vec::with_capacity(m.objects.len());
    let names: Vec<&String> = m.objects.keys().collect();
    for (name, o) in &m.objects {
        let part = o
            .parts
            .get("data")
            .filter(|_| o.layout == layout::DENSE)
            .ok_or_else(|| {
                CliError::Refused(format!(
                    "object {name:?} has layout {:?}; safetensors holds dense tensors only",
                    o.layout
                ))
            })?;
        let logical = match part.logical.as_deref() {
            None => None,
            Some(l) => Some(LogicalType::from_name(l).ok_or_else(|| {
                CliError::Refused(format!(
                    "object {name:?} has logical type {l:?}, which safetensors cannot hold"
                ))
            })?),
        };
        let dtype = st_dtype_of(part.dtype, logical).map_err(|e| CliError::Refused(format!("object {name:?}: {e}")))?;
        tensors.push(StTensor::new(name.clone(), dtype, o.shape.clone()));
    }
    let mut w = SafetensorsFile::publish(output, tensors, &zt_metadata(reader.attributes()))?;
    let size = w.total_size();
    let bar = progress(size, "converting");
    while let Some(i) = w.next_tensor() {
        // Streamed in pieces of at most one frame (16 MiB), read with pread: memory does not
        // grow with the tensor, and a file truncated meanwhile is an error, not SIGBUS.
        let mut write_error = None;
        let mut read = 0u64;
        let mut put = |b: &[u8]| {
            read += b.len() as u64;
            advance(bar.as_ref(), b.len() as u64);
            w.write(b).map_err(|e| {
                write_error = Some(e);
                tensorlane_core::zt::Error::new(
                    tensorlane_core::zt::rule::Rule::Unsupported,
                    "the output could not be written",
                )
            })
        };
        let streamed = reader.read_chunks(names[i], "data", &mut put);
        if let Some(e) = write_error {
            return Err(e.into());
        }
        streamed.map_err(|e| reader.with_location(e))?;
        if read == 0 && w.next_tensor() == Some(i) {
            return Err(CliError::Invalid(format!("object {:?}: no bytes were read", names[i])));
        }
    }
    w.finish()?;
    finish(bar);
    Ok(Converted {
        from: "zt",
        to: "safetensors",
        objects: names.len(),
        bytes: size,
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_json_and_cbor() {
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
        let Value::Map(c) = meta_cbor_map(&m) else { panic!() };
        let Value::Map(d) = &c[3].1 else { panic!() };
        assert_eq!(d.len(), 1, "the last duplicate key wins");
        assert!(tensorlane_core::zt::cbor::encode(&Value::Map(c)).is_ok());
    }

    #[test]
    fn gguf_layouts() {
        assert_eq!(gguf_layout(GgmlType(2)).as_deref(), Some("gguf.q4_0/1"));
        assert_eq!(gguf_layout(GgmlType(16)).as_deref(), Some("gguf.iq2_xxs/1"));
        assert_eq!(gguf_layout(GgmlType(34)), None, "TQ1_0 is not a .zt layout");
        assert_eq!(ggml_plain(GgmlType(30)), Some(DType::BF16));
        assert_eq!(ggml_plain(GgmlType(2)), None);
    }
}
