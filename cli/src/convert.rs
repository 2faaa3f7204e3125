//! `tensorlane convert`: any file [`Model`] opens (the model formats, `.zt` v2 with its shards,
//! legacy `.zt`, Tenso packets) to canonical `.zt` ([`tensorlane::zt_write::ZtFile`]),
//! `.safetensors` ([`tensorlane::st_write::SafetensorsFile`]) or a Tenso bundle, one tensor at a
//! time: a tensor stored plain is read (with `pread`) and handed to the writer, any other is
//! decoded on its own, so memory holds at most one tensor (a Tenso bundle is assembled whole).
//! Every tensor is checked against the target before the output is created, and the output
//! appears atomically or not at all.
//!
//! Element types map as follows. `.zt`: plain dtypes as they are, `bool`, `complex64/128`, float8
//! and float4 with their `.zt` logical types; ggml block types as the spec's lossless
//! `gguf.<type>/1` layout (types it does not list, such as `TQ1_0`, are refused) or, with
//! `dequantize`, as f32; tensors stored as parts (`.zt` sparse, group-quantized, MX; a Tenso CSR
//! matrix) under their layout, quantized Tenso packets as `--quantized` says. `.safetensors`:
//! every dtype the format has (`BOOL`, `F8_*`, `F4`, `C64`, ...); `complex128` is refused, ggml
//! blocks are refused unless `dequantize`. Tenso: plain dtypes, `bool` and complex.

use std::path::Path;

use tensorlane_core::DType;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::ggml::GgmlType;
use tensorlane_core::formats::{self, ElementType, ErrorKind, FormatError, Meta, Storage, TensorInfo, tenso};
use tensorlane_core::wire::{self, Bundle, EncodeOptions, Packet};
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::format::LogicalType;
use tensorlane_core::zt::layout;
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartDecl, PartSpec};

use tensorlane::model::Model;
use tensorlane::st_write::{SafetensorsFile, StDtype, StTensor};
use tensorlane::zt_write::ZtFile;

use crate::error::CliError;
use crate::model_tools::{dtype_name, ggml_plain, meta_json, nbytes};
use crate::output::{advance, finish, progress};

/// What a conversion writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Canonical `.zt` v2 (or aligned as `--align` asks).
    Zt,
    /// `.safetensors`.
    Safetensors,
    /// A Tenso packet file: one bundle.
    Tenso,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Zt => "zt",
            Target::Safetensors => "safetensors",
            Target::Tenso => "tenso",
        }
    }
}

/// What [`convert`] did.
#[derive(Clone, Debug)]
pub struct Converted {
    /// Input format.
    pub from: &'static str,
    /// Output format.
    pub to: &'static str,
    /// Tensors / objects written.
    pub objects: usize,
    /// Output size in bytes.
    pub bytes: u64,
    /// What was not carried over (printed as warnings).
    pub warnings: Vec<String>,
}

/// What `convert` does with a quantized Tenso packet (`--quantized`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Quantized {
    /// Refuse the conversion, naming the packet and the options (the default).
    #[default]
    Error,
    /// Leave the packet out, with a warning.
    Skip,
    /// Write `(q - zero_point) * scale` as a float32 tensor.
    Dequantize,
}

impl Quantized {
    /// `error`, `skip` or `dequantize`.
    pub fn parse(s: &str) -> Option<Quantized> {
        Some(match s {
            "error" => Quantized::Error,
            "skip" => Quantized::Skip,
            "dequantize" => Quantized::Dequantize,
            _ => return None,
        })
    }
}

/// The options of `tensorlane convert`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvertOptions {
    /// Write ggml block-quantized tensors (GGUF) as float32 (`--dequantize`).
    pub dequantize: bool,
    /// Quantized Tenso packets (`--quantized`).
    pub quantized: Quantized,
    /// Leave out, with a warning, what `.zt` has no layout for (Tenso strings, COO and CSC sparse
    /// matrices) instead of refusing the file (`--skip-unsupported`).
    pub skip_unsupported: bool,
    /// `.zt` blob alignment (`--align`): `None` is canonical form's 64 KiB; a smaller power of
    /// two (4096 at least) gives a smaller, non-canonical file.
    pub align: Option<u64>,
}

impl ConvertOptions {
    /// The `.zt` writer options: canonical form, or non-canonical with `align`.
    pub fn zt_options(&self) -> Options {
        match self.align {
            None | Some(65536) => Options::canonical(),
            Some(a) => Options::non_canonical().alignment(a),
        }
    }
}

/// A note for a `.zt` output much larger than its input because of blob alignment (`None` when
/// the growth is small or `--align` was given).
fn alignment_note(input_bytes: u64, output_bytes: u64, opts: &ConvertOptions) -> Option<String> {
    if opts.align.is_some() || output_bytes < input_bytes.saturating_mul(2) || output_bytes - input_bytes < 64 << 10 {
        return None;
    }
    Some(format!(
        "the .zt file is {} where the input is {}: canonical .zt aligns every blob to 64 KiB; pass --align 4096 \
         for a smaller (non-canonical) file",
        crate::output::human_bytes(output_bytes),
        crate::output::human_bytes(input_bytes)
    ))
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
    /// A quantized Tenso packet dequantized to f32 (`--quantized dequantize`).
    DequantizePacket,
    /// Its parts under its layout (`.zt` only).
    Parts,
    /// Left out, with a warning.
    Skip,
}

fn refuse(t: &TensorInfo, why: String) -> CliError {
    CliError::Refused(format!("tensor {:?}: {why}", t.name))
}

/// The `.zt` `gguf.<type>/1` layout id of a ggml block type, when the spec lists it.
fn gguf_layout(g: GgmlType) -> Option<String> {
    let t = g.name().to_ascii_lowercase();
    layout::GGUF_TYPES.contains(&t.as_str()).then(|| format!("gguf.{t}/1"))
}

/// The `.zt` layout a tensor stored as parts is written under (a Tenso CSR matrix is
/// `zt.sparse_csr/1`, its `values`, `indices` and `indptr` the layout's parts).
fn zt_layout(layout: &str) -> &str {
    if layout == tenso::LAYOUT_SPARSE_CSR {
        layout::SPARSE_CSR
    } else {
        layout
    }
}

fn plan_for(
    t: &TensorInfo,
    target: Target,
    opts: &ConvertOptions,
    warnings: &mut Vec<String>,
) -> Result<Plan, CliError> {
    if let Storage::Parts(p) = &t.storage {
        let name = &t.name;
        return Ok(match p.layout.as_str() {
            tenso::LAYOUT_QUANTIZED => match opts.quantized {
                Quantized::Dequantize => Plan::DequantizePacket,
                Quantized::Skip => {
                    warnings.push(format!(
                        "tenso entry {name:?} (a quantized packet) was left out (--quantized skip)"
                    ));
                    Plan::Skip
                }
                Quantized::Error => {
                    return Err(CliError::Refused(format!(
                        "tenso entry {name:?} is a quantized packet, which .zt has no lossless form for here: pass \
                         --quantized dequantize (write it as float32) or --quantized skip (leave it out)"
                    )));
                }
            },
            l if target == Target::Zt && !(l.starts_with("tenso.") && l != tenso::LAYOUT_SPARSE_CSR) => Plan::Parts,
            l if l.starts_with("tenso.") => {
                let what = match l.strip_prefix("tenso.sparse_") {
                    Some(f) => format!("sparse ({f})"),
                    None if l == tenso::LAYOUT_STRINGS => "string".to_string(),
                    None => l.to_string(),
                };
                if !opts.skip_unsupported {
                    return Err(CliError::Refused(format!(
                        "tenso entry {name:?} is a {what} packet; converting to .zt supports dense tensors, CSR \
                         sparse matrices, quantized tensors (with --quantized) and bundles of them: pass \
                         --skip-unsupported to leave it out"
                    )));
                }
                warnings.push(format!(
                    "tenso entry {name:?} (a {what} packet) was left out (--skip-unsupported)"
                ));
                Plan::Skip
            }
            l => {
                let holder = match target {
                    Target::Tenso => "a Tenso bundle",
                    _ => "safetensors",
                };
                return Err(refuse(
                    t,
                    format!("it has layout {l:?}; {holder} holds dense tensors only, so this file cannot be converted"),
                ));
            }
        });
    }
    Ok(match t.ty {
        ElementType::Dense(DType::Bool) if target == Target::Zt => Plan::Bytes {
            dtype: LogicalType::Bool.dtype(),
            logical: Some(LogicalType::Bool),
        },
        ElementType::Dense(dtype) => Plan::Bytes { dtype, logical: None },
        ElementType::Logical(l) => Plan::Bytes {
            dtype: l.dtype(),
            logical: Some(l),
        },
        ElementType::Ggml(g) => match ggml_plain(g) {
            Some(dtype) => Plan::Bytes { dtype, logical: None },
            None if opts.dequantize => Plan::Dequantize,
            None if target == Target::Zt && gguf_layout(g).is_some() => Plan::Blocks(g),
            None => {
                let to = match target {
                    Target::Zt => "the .zt gguf layouts do not include it",
                    Target::Safetensors => "safetensors has no block-quantized types",
                    Target::Tenso => "Tenso has no block-quantized types",
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
        Plan::Dequantize | Plan::DequantizePacket => Ok(StDtype::F32),
        Plan::Blocks(g) => Err(refuse(t, format!("{} blocks have no safetensors dtype", g.name()))),
        Plan::Parts | Plan::Skip => Err(refuse(t, "safetensors holds dense tensors only".into())),
    }
}

/// The Tenso dtype of a planned tensor.
fn tenso_dtype(t: &TensorInfo, plan: Plan) -> Result<DType, CliError> {
    match plan {
        Plan::Bytes { dtype, logical: None } => Ok(dtype),
        Plan::Bytes {
            logical: Some(LogicalType::Bool),
            ..
        } => Ok(DType::Bool),
        Plan::Bytes {
            logical: Some(LogicalType::Complex64),
            ..
        } => Ok(DType::C64),
        Plan::Bytes {
            logical: Some(LogicalType::Complex128),
            ..
        } => Ok(DType::C128),
        Plan::Dequantize | Plan::DequantizePacket => Ok(DType::F32),
        _ => Err(CliError::Refused(format!(
            "object {:?} cannot be represented in Tenso: Tenso has no {} dtype (converting it is not supported)",
            t.name,
            dtype_name(t.ty)
        ))),
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

/// The float32 values of a quantized Tenso packet `t` (its `data`, `scales` and `zero_points`
/// parts and the scheme in its attributes), `(q - zero_point) * scale`.
fn dequantize_packet(model: &Model, t: &TensorInfo) -> Result<Vec<f32>, CliError> {
    let attr = |k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v);
    let num = |k: &str| match attr(k) {
        Some(Meta::UInt(n)) => *n,
        Some(Meta::Int(n)) => *n as u64,
        _ => 0,
    };
    let bad = |why: &str| CliError::Invalid(format!("tenso entry {:?} does not dequantize: {why}", t.name));
    let qdtype = match attr("qdtype") {
        Some(Meta::Str(q)) => wire::QDType::from_name(q).ok_or_else(|| bad("unknown qdtype"))?,
        _ => return Err(bad("no qdtype")),
    };
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    crate::limits::check("tenso", &t.name, t.numel().unwrap_or(u64::MAX).saturating_mul(4))?;
    let q = wire::Quantized {
        qdtype,
        shape: t.shape.clone(),
        scheme: wire::QuantScheme::from_code(num("scheme_code") as u8),
        axis: num("axis") as u8,
        group_size: num("group_size") as u32,
        scales: floats(&model.read_part(t, "scales")?),
        zero_points: floats(&model.read_part(t, "zero_points")?),
        data: model.read_part(t, "data")?,
    };
    q.dequantize().map_err(|e| bad(&e.to_string()))
}

/// Refuses part `part` of `t` (its `data` for a tensor stored as one array), which must be whole
/// in memory, when its `bytes` are over `--max-tensor-bytes` (a `.zt` object's part is named
/// `object/part`, as the `.zt` tools name it).
fn check_whole(model: &Model, t: &TensorInfo, part: &str, bytes: u64) -> Result<(), CliError> {
    let format = model.format().name();
    let what = if format.starts_with("zt") {
        format!("{}/{part}", t.name)
    } else {
        t.name.clone()
    };
    crate::limits::check(format, &what, bytes)
}

/// A tensor's output bytes under its plan.
fn tensor_bytes<'m>(model: &'m Model, t: &TensorInfo, plan: Plan) -> Result<std::borrow::Cow<'m, [u8]>, CliError> {
    Ok(match plan {
        Plan::Dequantize => f32_bytes(&model.dequantize(t)?).into(),
        Plan::DequantizePacket => f32_bytes(&dequantize_packet(model, t)?).into(),
        _ => model.read(t)?,
    })
}

/// The byte count a tensor has once written under its plan.
fn out_nbytes(t: &TensorInfo, plan: Plan) -> u64 {
    match (plan, &t.storage) {
        (Plan::Dequantize | Plan::DequantizePacket, _) => t.numel().unwrap_or(0).saturating_mul(4),
        (Plan::Skip, _) => 0,
        (_, Storage::Parts(p)) => p.parts.iter().map(|p| p.len).sum(),
        _ => t.nbytes().unwrap_or(0),
    }
}

/// The `.zt` storage dtype and logical type of part `part` of `t` (from the `parts` attribute
/// where the format has one, else from the part's element type; Tenso's signed CSR indices as
/// the unsigned `.zt` ones, which hold the same values since a valid matrix's are all ≥ 0).
fn part_types(t: &TensorInfo, part: &formats::Part) -> Result<(DType, Option<String>), CliError> {
    let described = t
        .attributes
        .iter()
        .find(|(k, _)| k == "parts")
        .and_then(|(_, m)| match m {
            Meta::Map(m) => m.iter().find(|(n, _)| *n == part.name).map(|(_, v)| v),
            _ => None,
        })
        .and_then(|m| match m {
            Meta::Map(f) => Some(f),
            _ => None,
        });
    let text = |k: &str| {
        described
            .and_then(|f| f.iter().find(|(n, _)| n == k))
            .and_then(|(_, v)| match v {
                Meta::Str(s) => Some(s.clone()),
                _ => None,
            })
    };
    let stored =
        text("dtype").and_then(|d| tensorlane_core::zt::format::dtype_from_zt(&d).or_else(|| DType::from_name(&d)));
    let (dtype, logical) = match (stored, part.ty) {
        (Some(d), _) => (d, text("type")),
        (None, Some(ElementType::Dense(d))) => (d, None),
        (None, Some(ElementType::Logical(l))) => (l.dtype(), Some(l.name().to_string())),
        _ => {
            return Err(refuse(
                t,
                format!(
                    "part {:?} has type {:?}, which .zt cannot name",
                    part.name, part.type_name
                ),
            ));
        }
    };
    let tenso = matches!(&t.storage, Storage::Parts(p) if p.layout.starts_with("tenso."));
    let unsigned = match dtype {
        DType::I32 if tenso && part.name != "values" => DType::U32,
        DType::I64 if tenso && part.name != "values" => DType::U64,
        d => d,
    };
    Ok((unsigned, logical))
}

/// The file attributes a `.zt` output may get, the first the writer takes: a `.zt` input's own
/// (exactly; none when it has none), a Tenso input's none, else the source format with and
/// without its metadata.
fn zt_file_attributes(model: &Model) -> Result<Vec<Option<Value<'static>>>, CliError> {
    let cat = model.catalog();
    if let Some(own) = crate::zt_tools::file_attributes(model)? {
        return Ok(vec![own]);
    }
    if cat.format == Format::Tenso {
        return Ok(vec![None]);
    }
    let base = vec![(Value::text("source_format"), Value::text(cat.format.name()))];
    let mut out = Vec::new();
    if !cat.metadata.is_empty() {
        let mut full = base.clone();
        full.push((Value::text("source_metadata"), meta_cbor_map(&cat.metadata)));
        out.push(Some(Value::Map(full)));
    }
    out.push(Some(Value::Map(base)));
    Ok(out)
}

fn write_zt(
    model: &Model,
    plans: &[Plan],
    output: &Path,
    options: Options,
    warnings: &mut Vec<String>,
) -> Result<u64, CliError> {
    let cat = model.catalog();
    let zt_input = cat.format.name().starts_with("zt");
    // Canonical form stores objects in bytewise name order.
    let mut order: Vec<usize> = (0..cat.tensors.len())
        .filter(|&i| !matches!(plans[i], Plan::Skip))
        .collect();
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
    // The first the writer takes: with the source metadata, else without it.
    let candidates = zt_file_attributes(model)?;
    let last = candidates.len() - 1;
    for (k, a) in candidates.into_iter().enumerate() {
        let Some(a) = a else { break };
        match w.set_attributes(a) {
            Ok(()) => break,
            Err(e) if k < last => warnings.push(format!(
                "the file metadata is not kept: the .zt writer refuses it ({e})"
            )),
            Err(e) => return Err(e.into()),
        }
    }
    let total = order.iter().map(|&i| out_nbytes(&cat.tensors[i], plans[i])).sum();
    let bar = progress(total, "converting");
    for &i in &order {
        let (t, plan) = (&cat.tensors[i], plans[i]);
        let refused = |e: tensorlane_core::zt::Error| {
            CliError::Refused(format!("tensor {:?}: the .zt writer refused: {e}", t.name))
        };
        // A `.zt` object's own attributes go with it.
        let own = zt_input
            .then(|| {
                t.attributes
                    .iter()
                    .find(|(k, _)| k == "attributes")
                    .map(|(_, v)| meta_cbor(v))
            })
            .flatten();
        let with_own = |spec: ObjectSpec| match &own {
            Some(a) => spec.attributes(a.clone()),
            None => spec,
        };
        let (spec, decl) = match plan {
            Plan::Skip => continue,
            Plan::Dequantize | Plan::DequantizePacket => {
                let bytes = tensor_bytes(model, t, plan)?;
                let part = PartSpec::new("data", DType::F32, &bytes);
                w.add_object(&t.name, &ObjectSpec::dense(&t.shape), &[part])
                    .map_err(refused)?;
                advance(bar.as_ref(), bytes.len() as u64);
                continue;
            }
            Plan::Parts => {
                let Storage::Parts(p) = &t.storage else { continue };
                // One object's parts in memory at a time, each under --max-tensor-bytes.
                let mut loaded = Vec::with_capacity(p.parts.len());
                for part in &p.parts {
                    check_whole(model, t, &part.name, part.len)?;
                    let (dtype, logical) = part_types(t, part)?;
                    loaded.push((part.name.clone(), dtype, logical, model.read_part(t, &part.name)?));
                }
                let specs: Vec<PartSpec<'_>> = loaded
                    .iter()
                    .map(|(n, d, l, b)| {
                        let s = PartSpec::new(n.clone(), *d, b);
                        match l {
                            Some(l) => s.logical(l.clone()),
                            None => s,
                        }
                    })
                    .collect();
                let spec = with_own(ObjectSpec::new(&t.shape, zt_layout(&p.layout).to_string()));
                w.add_object(&t.name, &spec, &specs).map_err(refused)?;
                advance(bar.as_ref(), out_nbytes(t, plan));
                continue;
            }
            Plan::Bytes { dtype, logical } => {
                let d = PartDecl::new("data", dtype, out_nbytes(t, plan));
                let d = match logical {
                    Some(l) => d.logical(l.name()),
                    None => d,
                };
                (with_own(ObjectSpec::dense(&t.shape)), d)
            }
            Plan::Blocks(g) => {
                let spec = ObjectSpec::new(&t.shape, gguf_layout(g).unwrap_or_default());
                let spec = match own {
                    Some(ref a) => spec.attributes(a.clone()),
                    None => spec.attributes(Value::Map(vec![
                        (Value::text("block_bytes"), Value::Uint(g.type_size().unwrap_or(0))),
                        (Value::text("elems_per_block"), Value::Uint(g.block_size().unwrap_or(0))),
                    ])),
                };
                (spec, PartDecl::new("data", DType::U8, out_nbytes(t, plan)))
            }
        };
        // Streamed: the tensor passes through bounded pieces (a deflated member inflated or an
        // encoded part decoded on the way, its checksum checked before the object is finished),
        // whatever its size.
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
    crate::identify::check_unchanged(model)?;
    let size = w.finish()?.size;
    finish(bar);
    Ok(size)
}

/// The `__metadata__` a safetensors output gets: the `source_metadata` a conversion to `.zt`
/// kept, else the file's metadata; text as it is, anything else as JSON text.
fn st_metadata(cat: &formats::Catalog) -> Vec<(String, String)> {
    if cat.format == Format::Tenso {
        return Vec::new();
    }
    let entries = match cat.metadata.iter().find(|(k, _)| k == "source_metadata") {
        Some((_, Meta::Map(m))) if cat.format == Format::Zt => m.as_slice(),
        _ => &cat.metadata,
    };
    entries
        .iter()
        .map(|(k, v)| {
            let s = match v {
                Meta::Str(s) => s.clone(),
                other => meta_json(other),
            };
            (k.clone(), s)
        })
        .collect()
}

fn write_safetensors(model: &Model, plans: &[Plan], output: &Path) -> Result<u64, CliError> {
    let cat = model.catalog();
    let mut tensors = Vec::with_capacity(plans.len());
    for (t, &plan) in cat.tensors.iter().zip(plans) {
        tensors.push(StTensor::new(t.name.clone(), st_dtype(t, plan)?, t.shape.clone()));
    }
    let mut w = SafetensorsFile::publish(output, tensors, &st_metadata(cat))?;
    let size = w.total_size();
    let bar = progress(size, "converting");
    while let Some(i) = w.next_tensor() {
        let mut written = 0u64;
        if let Plan::Dequantize | Plan::DequantizePacket = plans[i] {
            let bytes = tensor_bytes(model, &cat.tensors[i], plans[i])?;
            for c in bytes.chunks(8 << 20) {
                w.write(c)?;
                advance(bar.as_ref(), c.len() as u64);
            }
            written = bytes.len() as u64;
        } else {
            // Streamed: a tensor of any size (a deflated member or an encoded part included)
            // passes through bounded pieces; a checksum mismatch fails before the file is
            // published.
            let mut failed = None;
            let r = model.read_chunks(&cat.tensors[i], 8 << 20, &mut |c| {
                w.write(c).map_err(|e| {
                    let msg = e.to_string();
                    failed = Some(e);
                    FormatError::new("safetensors", ErrorKind::Io, msg)
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
    crate::identify::check_unchanged(model)?;
    w.finish()?;
    finish(bar);
    Ok(size)
}

/// Writes every tensor as one entry of a Tenso bundle (in memory, each under
/// `--max-tensor-bytes`), published atomically.
fn write_tenso(model: &Model, plans: &[Plan], output: &Path) -> Result<u64, CliError> {
    let cat = model.catalog();
    let mut dtypes = Vec::with_capacity(plans.len());
    for (t, &plan) in cat.tensors.iter().zip(plans) {
        dtypes.push(tenso_dtype(t, plan)?);
    }
    let total = cat.tensors.iter().zip(plans).map(|(t, &p)| out_nbytes(t, p)).sum();
    let bar = progress(total, "reading");
    let mut bundle = Bundle::new();
    for ((t, &plan), dtype) in cat.tensors.iter().zip(plans).zip(dtypes) {
        // The bundle is assembled whole: refuse what is over the limit before decoding it.
        check_whole(model, t, "data", out_nbytes(t, plan))?;
        let bytes = tensor_bytes(model, t, plan)?;
        advance(bar.as_ref(), bytes.len() as u64);
        let tensor = tensorlane_core::Tensor::new(dtype, t.shape.clone(), bytes)
            .map_err(|e| refuse(t, format!("it cannot be represented in Tenso: {e}")))?;
        bundle
            .entries
            .push((std::borrow::Cow::Owned(t.name.clone()), Packet::Dense(tensor)));
    }
    finish(bar);
    let bytes = wire::encode(&Packet::Bundle(bundle), &EncodeOptions::default())
        .map_err(|e| CliError::Refused(format!("Tenso cannot encode the bundle: {e}")))?;
    crate::identify::check_unchanged(model)?;
    tensorlane::publish::write_file(output, &bytes)?;
    Ok(bytes.len() as u64)
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

/// Converts `model` to `output` as `target`, one tensor at a time (a Tenso bundle is assembled in
/// memory). Every tensor is planned (checked against the target) before the output is created;
/// ggml block-quantized tensors are written as f32 with `--dequantize`, otherwise they go to
/// `.zt` as `gguf.<type>/1` and are refused elsewhere; tensors stored as parts keep them in
/// `.zt`. File metadata goes to the `.zt` attributes (a `.zt` file's own as they are, otherwise
/// `source_format` and `source_metadata`) or the safetensors `__metadata__`.
pub fn convert_model(
    model: &Model,
    output: &Path,
    target: Target,
    opts: &ConvertOptions,
) -> Result<Converted, CliError> {
    let cat = model.catalog();
    let format = cat.format.name();
    if cat.metadata.iter().any(|(k, _)| k == "zt.data_shard") {
        return Err(CliError::Refused(
            "a data shard describes no tensors; there is nothing to convert".into(),
        ));
    }
    let mut warnings = model.warnings();
    let mut plans = Vec::with_capacity(cat.tensors.len());
    for t in &cat.tensors {
        let plan = plan_for(t, target, opts, &mut warnings)?;
        if !matches!(t.storage, Storage::Parts(_)) {
            nbytes(format, t)?;
        }
        plans.push(plan);
    }
    let bytes = match target {
        Target::Zt => write_zt(model, &plans, output, opts.zt_options(), &mut warnings)?,
        Target::Safetensors => write_safetensors(model, &plans, output)?,
        Target::Tenso => write_tenso(model, &plans, output)?,
    };
    Ok(Converted {
        from: format,
        to: target.name(),
        objects: plans.iter().filter(|p| !matches!(p, Plan::Skip)).count(),
        bytes,
        warnings,
    })
}

/// `tensorlane convert`: the input (any format [`Model`] opens) from its content, the target
/// from `to` (`zt`, `tenso`, `safetensors`), else from the output's extension, else `.zt` (Tenso
/// for `.zt` v2 input). A URL output is written locally and uploaded.
pub fn convert(input: &Path, output: &Path, to: Option<&str>, opts: &ConvertOptions) -> Result<Converted, CliError> {
    if crate::remote::is_url(output) {
        return crate::remote::convert_to_url(output, |local| convert(input, local, to, opts));
    }
    let (model, input_bytes) = crate::limits::open_model(input)?;
    let target = match to.or_else(|| target_from_extension(output)) {
        Some("zt") => Target::Zt,
        Some("safetensors") => Target::Safetensors,
        Some("tenso") => Target::Tenso,
        Some(other) => {
            return Err(CliError::Refused(format!(
                "converting {} to {other} is not supported (targets: zt, safetensors, tenso)",
                model.format().name()
            )));
        }
        None if model.format() == Format::Zt => Target::Tenso,
        None => Target::Zt,
    };
    let mut done = convert_model(&model, output, target, opts)
        .map_err(|e| crate::identify::note_if_changed(input, input_bytes, e))?;
    if done.to == "zt"
        && let Some(note) = alignment_note(input_bytes, done.bytes, opts)
    {
        done.warnings.push(note);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_as_cbor() {
        let m = vec![
            ("a".to_string(), Meta::Str("x".into())),
            ("b".to_string(), Meta::Float(f64::NAN)),
            (
                "d".to_string(),
                Meta::Map(vec![("k".into(), Meta::Int(-3)), ("k".into(), Meta::UInt(4))]),
            ),
        ];
        let Value::Map(c) = meta_cbor_map(&m) else { panic!() };
        let Value::Map(d) = &c[2].1 else { panic!() };
        assert_eq!(d.len(), 1, "the last duplicate key wins");
        assert!(tensorlane_core::zt::cbor::encode(&Value::Map(c)).is_ok());
    }

    #[test]
    fn gguf_layouts() {
        assert_eq!(gguf_layout(GgmlType(2)).as_deref(), Some("gguf.q4_0/1"));
        assert_eq!(gguf_layout(GgmlType(16)).as_deref(), Some("gguf.iq2_xxs/1"));
        assert_eq!(gguf_layout(GgmlType(34)), None, "TQ1_0 is not a .zt layout");
    }
}
