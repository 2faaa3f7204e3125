//! ONNX: the graph initializers of a `ModelProto`, read by a hand-written protobuf walk
//! ([`super::protobuf`]).
//!
//! Why no generated protobuf code: the protobuf crates need a code generator and `std`, and
//! they decode a message into memory, every `raw_data` field included, so listing a model with
//! embedded weights would read and copy the whole file. This reader walks the messages over the
//! [`ReadAt`] source, reads tags, lengths and the small fields it needs, and skips the bytes of
//! `raw_data`: a tensor stored there becomes [`Storage::Range`] (zero-copy) without being read.
//!
//! What becomes of a `TensorProto` (a graph initializer):
//!
//! * `raw_data` → [`Storage::Range`] of source 0 (little-endian, as ONNX stores it); its length
//!   must be the tensor's byte count.
//! * The typed fields `float_data`, `int32_data`, `int64_data`, `double_data`, `uint64_data`
//!   (packed or not) → decoded while opening into [`Storage::Inline`], with the semantics of
//!   `onnx.numpy_helper.to_array`: FLOAT16, BFLOAT16, INT16, UINT16, INT8, UINT8, BOOL, the
//!   float8 types and FLOAT8E8M0 keep the low 16 or 8 bits of each `int32_data` value; FLOAT4E2M1
//!   keeps one packed byte (two elements) per value; UINT32 keeps the low 32 bits of each
//!   `uint64_data` value; COMPLEX64/128 take two `float_data`/`double_data` values per element.
//!   The number of values must match the shape ([`ErrorKind::SizeMismatch`]).
//! * External data (`data_location = EXTERNAL`, `external_data` keys `location`, `offset`,
//!   `length`, `checksum`) → [`Storage::Range`] into the companion file named by `location`
//!   ([`Catalog::sources`]; a path leaving the model's folder is [`ErrorKind::Refused`]). The
//!   length must be the tensor's byte count. Whether the range lies inside the companion file is
//!   checked by [`Catalog::check_ranges`] once the host has opened it. The checksum (SHA-1 of the
//!   whole external file, 40 hex digits) is kept as an attribute and as one of
//!   [`Catalog::checks`]: checked when a tensor that covers the file (but for at most 1 MiB) is
//!   read, and by a host's verify (every check); a value that is not 40 hex digits is only kept.
//!
//! Every element type of ONNX (1.23) that has a catalog type is read (FLOAT ... FLOAT8E8M0).
//! STRING, INT4, UINT4, INT2, UINT2, FLOAT6E2M3, FLOAT6E3M2 and unknown type codes are listed in
//! [`Catalog::skipped`] with the reason, as are sparse initializers (`GraphProto.sparse_initializer`)
//! by the name of their values. Initializers of subgraphs (If/Loop/Scan bodies in node
//! attributes) are read too and follow the main graph's, with a `subgraph` attribute
//! (`node/attribute/...`). Tensors of `Constant` nodes are not initializers and are not listed.
//!
//! Attributes of each tensor: `onnx_type` (`FLOAT`, `BFLOAT16`, ...), `storage` (`raw_data`,
//! `float_data`, `int32_data`, `int64_data`, `double_data`, `uint64_data` or `external`) and,
//! for external data, `external` (`location`, `offset`, `length`, `checksum` when present).
//! File metadata: `ir_version`, `producer_name`, `producer_version`, `domain`, `model_version`,
//! `doc_string`, `graph_name`, `opset_import` (domain → version, `ai.onnx` for the empty domain)
//! and `metadata_props`.
//!
//! Limits: messages nest at most [`MAX_DEPTH`] deep, a tensor has at most [`MAX_RANK`]
//! dimensions, and everything materialized while opening (names, metadata strings, catalog
//! entries, decoded typed fields) stays within [`MAX_HEADER`] bytes ([`ErrorKind::Limit`]: store
//! large weights as `raw_data` or external data, as `numpy_helper.from_array` does).
//!
//! Cost of listing: with an in-memory (mmap) source nothing is copied; otherwise each tensor
//! costs one small window read (4 KiB) after its skipped payload, so listing a 2.5 GB model with
//! embedded weights reads well under 1% of it (see `core/tests/all/fixtures_onnx.rs`).

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::protobuf::{Field, Value, Wire};
use super::{
    Catalog, Check, Digest, ElementType, ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER, Meta, Storage, TensorInfo,
};
use crate::detect::Format;
use crate::dtype::DType;
use crate::source::ReadAt;
use crate::zt::format::LogicalType;

const FORMAT: &str = "onnx";

/// The most dimensions an initializer may declare.
pub const MAX_RANK: usize = 64;

/// What one catalog entry costs against the [`MAX_HEADER`] budget, besides its name, shape and
/// inline bytes (the entry itself and its attributes).
const ENTRY_COST: u64 = 256;

/// How a typed storage field encodes its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enc {
    Fixed32,
    Fixed64,
    Varint,
}

/// The typed storage fields of `TensorProto`: number, name, encoding.
const TYPED: [(u32, &str, Enc); 6] = [
    (4, "float_data", Enc::Fixed32),
    (5, "int32_data", Enc::Varint),
    (6, "string_data", Enc::Varint),
    (7, "int64_data", Enc::Varint),
    (10, "double_data", Enc::Fixed64),
    (11, "uint64_data", Enc::Varint),
];

/// What a `TensorProto.data_type` code becomes.
enum DataType {
    /// A readable type: ONNX name, catalog type, typed field number, bytes kept per stored value.
    Read(&'static str, ElementType, u32, usize),
    /// Listed in [`Catalog::skipped`]: ONNX name and why.
    Skip(&'static str, &'static str),
}

fn data_type(code: u64) -> DataType {
    use DataType::{Read, Skip};
    use ElementType::{Dense, Logical};
    const NO_4BIT: &str = "sub-byte integer and float6 types have no element type in the catalog";
    match code {
        1 => Read("FLOAT", Dense(DType::F32), 4, 4),
        2 => Read("UINT8", Dense(DType::U8), 5, 1),
        3 => Read("INT8", Dense(DType::I8), 5, 1),
        4 => Read("UINT16", Dense(DType::U16), 5, 2),
        5 => Read("INT16", Dense(DType::I16), 5, 2),
        6 => Read("INT32", Dense(DType::I32), 5, 4),
        7 => Read("INT64", Dense(DType::I64), 7, 8),
        8 => Skip("STRING", "string tensors hold variable-length text, not numeric data"),
        9 => Read("BOOL", Dense(DType::Bool), 5, 1),
        10 => Read("FLOAT16", Dense(DType::F16), 5, 2),
        11 => Read("DOUBLE", Dense(DType::F64), 10, 8),
        12 => Read("UINT32", Dense(DType::U32), 11, 4),
        13 => Read("UINT64", Dense(DType::U64), 11, 8),
        14 => Read("COMPLEX64", Dense(DType::C64), 4, 4),
        15 => Read("COMPLEX128", Dense(DType::C128), 10, 8),
        16 => Read("BFLOAT16", Dense(DType::BF16), 5, 2),
        17 => Read("FLOAT8E4M3FN", Logical(LogicalType::F8E4M3Fn), 5, 1),
        18 => Read("FLOAT8E4M3FNUZ", Logical(LogicalType::F8E4M3Fnuz), 5, 1),
        19 => Read("FLOAT8E5M2", Logical(LogicalType::F8E5M2), 5, 1),
        20 => Read("FLOAT8E5M2FNUZ", Logical(LogicalType::F8E5M2Fnuz), 5, 1),
        21 => Skip("UINT4", NO_4BIT),
        22 => Skip("INT4", NO_4BIT),
        23 => Read("FLOAT4E2M1", Logical(LogicalType::F4E2M1), 5, 1),
        24 => Read("FLOAT8E8M0", Logical(LogicalType::F8E8M0), 5, 1),
        25 => Skip("UINT2", NO_4BIT),
        26 => Skip("INT2", NO_4BIT),
        27 => Skip("FLOAT6E2M3", NO_4BIT),
        28 => Skip("FLOAT6E3M2", NO_4BIT),
        _ => Skip("unknown", "a data_type code this reader does not know (newer ONNX?)"),
    }
}

/// The fields of one `TensorProto`, from a first pass that reads no tensor data.
#[derive(Default)]
struct Proto {
    name: Option<String>,
    dims: Vec<u64>,
    data_type: u64,
    raw: Option<(u64, u64)>,
    external: Vec<(String, String)>,
    location: u64,
    segment: bool,
    /// Per entry of [`TYPED`]: packed payload bytes and unpacked values.
    typed: [(u64, u64); 6],
}

impl Proto {
    fn has(&self, i: usize) -> bool {
        self.typed[i].0 > 0 || self.typed[i].1 > 0
    }
}

/// Opens an ONNX model: the initializers of its graph (and subgraphs) and its metadata. Reads
/// tags, lengths and small fields only; see the module documentation.
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let mut m = Model {
        wire: Wire::new(FORMAT, src),
        cat: Catalog::new(Format::Onnx),
        budget: MAX_HEADER,
        names: BTreeSet::new(),
        nested: Vec::new(),
    };
    m.model()?;
    let mut cat = m.cat;
    cat.tensors.append(&mut m.nested);
    Ok(cat)
}

struct Model<'s, S: ReadAt + ?Sized> {
    wire: Wire<'s, S>,
    cat: Catalog,
    /// Bytes that may still be materialized (names, strings, entries, decoded typed fields).
    budget: u64,
    names: BTreeSet<String>,
    /// Initializers of subgraphs, listed after the main graph's.
    nested: Vec<TensorInfo>,
}

fn err(kind: ErrorKind, msg: impl Into<String>) -> FormatError {
    FormatError::new(FORMAT, kind, msg)
}

impl<'s, S: ReadAt + ?Sized> Model<'s, S> {
    fn charge(&mut self, n: u64, at: u64) -> Result<(), FormatError> {
        self.budget = self.budget.checked_sub(n).ok_or_else(|| {
            err(
                ErrorKind::Limit,
                format!(
                    "the names, metadata and inline (typed-field) tensor data of this model exceed {MAX_HEADER} bytes; \
                     store large initializers as raw_data or external data"
                ),
            )
            .at(at)
        })?;
        Ok(())
    }

    fn deeper(&self, depth: usize, at: u64) -> Result<(), FormatError> {
        if depth > MAX_DEPTH {
            return Err(err(
                ErrorKind::Limit,
                format!("messages (subgraphs in node attributes) nest more than {MAX_DEPTH} deep"),
            )
            .at(at));
        }
        Ok(())
    }

    /// The payload range `(start, end)` of a message field.
    fn span(&self, f: &Field, what: &str) -> Result<(u64, u64), FormatError> {
        match (f.bytes(), f.end()) {
            (Some((o, _)), Some(e)) => Ok((o, e)),
            _ => Err(self.wire.wire_type(f, what)),
        }
    }

    fn varint(&self, f: &Field, what: &str) -> Result<u64, FormatError> {
        match f.value {
            Value::Varint(v) => Ok(v),
            _ => Err(self.wire.wire_type(f, what)),
        }
    }

    fn raw_text(&mut self, f: &Field, what: &str) -> Result<Vec<u8>, FormatError> {
        let (o, _) = self.span(f, what)?;
        let len = f.end().unwrap_or(o) - o;
        self.charge(len, f.at)?;
        Ok(self.wire.read(o, len)?.into_owned())
    }

    /// A string field that must be UTF-8 (names, paths).
    fn string(&mut self, f: &Field, what: &str) -> Result<String, FormatError> {
        String::from_utf8(self.raw_text(f, what)?)
            .map_err(|_| err(ErrorKind::Syntax, format!("{what} is not valid UTF-8")).at(f.at))
    }

    /// A string field of metadata: text, or bytes when it is not UTF-8.
    fn text(&mut self, f: &Field, what: &str) -> Result<Meta, FormatError> {
        Ok(match String::from_utf8(self.raw_text(f, what)?) {
            Ok(s) => Meta::Str(s),
            Err(e) => Meta::Bytes(e.into_bytes()),
        })
    }

    /// A `StringStringEntryProto` (key 1, value 2).
    fn entry(&mut self, f: &Field, what: &str) -> Result<(String, Meta), FormatError> {
        let (mut pos, end) = self.span(f, what)?;
        let (mut key, mut value) = (String::new(), Meta::Str(String::new()));
        while let Some(g) = self.wire.next(&mut pos, end)? {
            match g.number {
                1 => key = self.string(&g, "a key")?,
                2 => value = self.text(&g, "a value")?,
                _ => {}
            }
        }
        Ok((key, value))
    }

    fn model(&mut self) -> Result<(), FormatError> {
        let end = self.wire.size();
        if end == 0 {
            return Err(err(ErrorKind::Syntax, "the file is empty, not an ONNX model"));
        }
        let (mut pos, mut opsets, mut props, mut graphs) = (0, Vec::new(), Vec::new(), 0);
        while let Some(f) = self.wire.next(&mut pos, end)? {
            let key = match f.number {
                1 => "ir_version",
                2 => "producer_name",
                3 => "producer_version",
                4 => "domain",
                5 => "model_version",
                6 => "doc_string",
                _ => "",
            };
            match f.number {
                1 | 5 => {
                    let v = self.varint(&f, "an int64")?;
                    self.cat.metadata.push((key.to_string(), Meta::Int(v as i64)));
                }
                2..=4 | 6 => {
                    let v = self.text(&f, key)?;
                    self.cat.metadata.push((key.to_string(), v));
                }
                7 => {
                    graphs += 1;
                    self.graph(&f, 1, "")?;
                }
                8 => {
                    let (mut p, e) = self.span(&f, "an opset_import entry")?;
                    let (mut domain, mut version) = (String::from("ai.onnx"), 0);
                    while let Some(g) = self.wire.next(&mut p, e)? {
                        match g.number {
                            1 if g.bytes().is_some_and(|(_, l)| l > 0) => {
                                domain = self.string(&g, "an opset domain")?
                            }
                            2 => version = self.varint(&g, "an opset version")? as i64,
                            _ => {}
                        }
                    }
                    opsets.push((domain, Meta::Int(version)));
                }
                14 => props.push(self.entry(&f, "a metadata_props entry")?),
                _ => {}
            }
        }
        if graphs == 0 {
            return Err(err(
                ErrorKind::Syntax,
                "the model has no graph (ModelProto field 7); this is not an ONNX model",
            ));
        }
        if !opsets.is_empty() {
            self.cat.metadata.push(("opset_import".into(), Meta::Map(opsets)));
        }
        if !props.is_empty() {
            self.cat.metadata.push(("metadata_props".into(), Meta::Map(props)));
        }
        Ok(())
    }

    /// A `GraphProto`: initializers (5), sparse initializers (15), nodes (1) for subgraphs.
    /// `path` is empty for the main graph, else `node/attribute/...`.
    fn graph(&mut self, f: &Field, depth: usize, path: &str) -> Result<(), FormatError> {
        self.deeper(depth, f.at)?;
        let (mut pos, end) = self.span(f, "a graph (GraphProto)")?;
        while let Some(g) = self.wire.next(&mut pos, end)? {
            match g.number {
                1 => self.node(&g, depth + 1, path)?,
                2 if path.is_empty() => {
                    let name = self.text(&g, "the graph name")?;
                    self.cat.metadata.push(("graph_name".into(), name));
                }
                5 => self.initializer(&g, depth + 1, path)?,
                15 => self.sparse(&g, depth + 1)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// A `NodeProto`: only its attributes (5) that hold subgraphs matter.
    fn node(&mut self, f: &Field, depth: usize, path: &str) -> Result<(), FormatError> {
        self.deeper(depth, f.at)?;
        let (start, end) = self.span(f, "a node (NodeProto)")?;
        let mut name = None;
        let mut pos = start;
        while let Some(g) = self.wire.next(&mut pos, end)? {
            match g.number {
                3 => name = Some(g),
                5 => self.attribute(&g, depth + 1, path, name.as_ref())?,
                _ => {}
            }
        }
        Ok(())
    }

    /// An `AttributeProto`: its graphs (6 `g`, 11 `graphs`) are walked for initializers.
    fn attribute(&mut self, f: &Field, depth: usize, path: &str, node: Option<&Field>) -> Result<(), FormatError> {
        self.deeper(depth, f.at)?;
        let (start, end) = self.span(f, "a node attribute (AttributeProto)")?;
        let (mut pos, mut name, mut any) = (start, None, false);
        while let Some(g) = self.wire.next(&mut pos, end)? {
            match g.number {
                1 => name = Some(g),
                6 | 11 => any = true,
                _ => {}
            }
        }
        if !any {
            return Ok(());
        }
        // Name the subgraph after the node and the attribute (read only now: most have none).
        let node = match node {
            Some(n) => self.string(n, "a node name")?,
            None => String::new(),
        };
        let attr = match name {
            Some(n) => self.string(&n, "an attribute name")?,
            None => String::new(),
        };
        let sub = if path.is_empty() {
            format!("{node}/{attr}")
        } else {
            format!("{path}/{node}/{attr}")
        };
        self.charge(sub.len() as u64, f.at)?;
        let mut pos = start;
        while let Some(g) = self.wire.next(&mut pos, end)? {
            if g.number == 6 || g.number == 11 {
                self.graph(&g, depth + 1, &sub)?;
            }
        }
        Ok(())
    }

    /// A `SparseTensorProto`: listed in `skipped` under the name of its values.
    fn sparse(&mut self, f: &Field, depth: usize) -> Result<(), FormatError> {
        self.deeper(depth, f.at)?;
        let (mut pos, end) = self.span(f, "a sparse initializer (SparseTensorProto)")?;
        let mut name = None;
        while let Some(g) = self.wire.next(&mut pos, end)? {
            if g.number == 1 {
                self.deeper(depth + 1, g.at)?;
                let (mut p, e) = self.span(&g, "sparse values (TensorProto)")?;
                while let Some(h) = self.wire.next(&mut p, e)? {
                    if h.number == 8 {
                        name = Some(self.string(&h, "a tensor name")?);
                    }
                }
            }
        }
        let name = name.unwrap_or_else(|| format!("sparse_initializer@{}", f.at));
        self.claim(&name, f.at)?;
        self.charge(ENTRY_COST, f.at)?;
        self.cat.skipped.push((
            name,
            "a sparse initializer (SparseTensorProto): sparse tensors are not supported; densify it before reading"
                .into(),
        ));
        Ok(())
    }

    fn claim(&mut self, name: &str, at: u64) -> Result<(), FormatError> {
        if !self.names.insert(name.to_string()) {
            return Err(err(
                ErrorKind::Duplicate,
                "two initializers have this name; ONNX names must be unique in a model",
            )
            .tensor(name)
            .at(at));
        }
        Ok(())
    }

    /// First pass over a `TensorProto`: everything but the tensor data.
    fn tensor_fields(&mut self, start: u64, end: u64) -> Result<Proto, FormatError> {
        let mut p = Proto::default();
        let mut pos = start;
        while let Some(f) = self.wire.next(&mut pos, end)? {
            match f.number {
                1 => {
                    let dims = &mut p.dims;
                    self.wire.varints(&f, |d| {
                        if dims.len() >= MAX_RANK {
                            return Err(err(ErrorKind::Limit, format!("more than {MAX_RANK} dimensions")).at(f.at));
                        }
                        let d = i64::try_from(d).map_err(|_| {
                            err(ErrorKind::Syntax, format!("dimension {} is negative", d as i64)).at(f.at)
                        })?;
                        dims.push(d as u64);
                        Ok(())
                    })?;
                }
                2 => p.data_type = self.varint(&f, "data_type (an enum)")?,
                3 => p.segment = true,
                4 | 5 | 6 | 7 | 10 | 11 => {
                    let i = TYPED.iter().position(|t| t.0 == f.number).unwrap_or(0);
                    let (packed, single) = &mut p.typed[i];
                    match (f.value, TYPED[i].2) {
                        // string_data: one string per field.
                        (Value::Bytes { .. }, _) if f.number == 6 => *single += 1,
                        (Value::Bytes { len, .. }, _) => *packed = packed.saturating_add(len),
                        (Value::Fixed32(_), Enc::Fixed32) | (Value::Fixed64(_), Enc::Fixed64) => *single += 1,
                        (Value::Varint(_), Enc::Varint) if f.number != 6 => *single += 1,
                        _ => return Err(self.wire.wire_type(&f, TYPED[i].1)),
                    }
                }
                8 => p.name = Some(self.string(&f, "a tensor name")?),
                9 => p.raw = Some(self.span(&f, "raw_data").map(|(o, e)| (o, e - o))?),
                13 => {
                    let (k, v) = self.entry(&f, "an external_data entry")?;
                    let v = match v {
                        Meta::Str(s) => s,
                        _ => return Err(err(ErrorKind::Syntax, "an external_data value is not UTF-8").at(f.at)),
                    };
                    p.external.push((k, v));
                }
                14 => p.location = self.varint(&f, "data_location (an enum)")?,
                _ => {}
            }
        }
        Ok(p)
    }

    /// A graph initializer (`TensorProto`).
    fn initializer(&mut self, f: &Field, depth: usize, path: &str) -> Result<(), FormatError> {
        self.deeper(depth, f.at)?;
        let (start, end) = self.span(f, "an initializer (TensorProto)")?;
        let p = self.tensor_fields(start, end)?;
        let name = match &p.name {
            Some(n) if !n.is_empty() => n.clone(),
            _ => return Err(err(ErrorKind::Syntax, "an initializer has no name").at(f.at)),
        };
        let fail = |kind, msg: String| err(kind, msg).tensor(name.clone()).at(f.at);
        self.claim(&name, f.at)?;
        self.charge(ENTRY_COST + 8 * p.dims.len() as u64, f.at)?;
        if p.segment {
            return Err(fail(
                ErrorKind::Unsupported,
                "it is one segment of a larger tensor (TensorProto.segment), which this reader does not support".into(),
            ));
        }
        let (onnx_type, ty, field, width) = match data_type(p.data_type) {
            _ if p.data_type == 0 => {
                return Err(fail(ErrorKind::Syntax, "its data_type is missing (UNDEFINED)".into()));
            }
            DataType::Skip(onnx, why) => {
                let why = match onnx {
                    "unknown" => format!("data_type {}: {why}", p.data_type),
                    _ => format!("{onnx}: {why}"),
                };
                self.cat.skipped.push((name, why));
                return Ok(());
            }
            DataType::Read(o, t, fld, w) => (o, t, fld, w),
        };
        let numel = crate::tensor::numel(&p.dims)
            .ok_or_else(|| fail(ErrorKind::Overflow, format!("its shape {:?} overflows 64 bits", p.dims)))?;
        let nbytes = ty.nbytes(numel).ok_or_else(|| {
            fail(
                ErrorKind::Overflow,
                format!("its byte count ({numel} elements) overflows 64 bits"),
            )
        })?;
        let ti = TYPED.iter().position(|t| t.0 == field).unwrap_or(0);
        if let Some(j) = (0..TYPED.len()).find(|&j| j != ti && p.has(j)) {
            return Err(fail(
                ErrorKind::Syntax,
                format!(
                    "it is {onnx_type} but has values in {}, which is not {onnx_type}'s field",
                    TYPED[j].1
                ),
            ));
        }
        let what = || format!("{onnx_type} {:?} needs {nbytes} bytes", p.dims);
        let mut attributes = alloc::vec![("onnx_type".to_string(), Meta::Str(onnx_type.into()))];
        let storage = if p.location != 0 {
            if p.location != 1 {
                return Err(fail(ErrorKind::Syntax, format!("unknown data_location {}", p.location)));
            }
            if p.raw.is_some() || p.has(ti) {
                return Err(fail(
                    ErrorKind::Syntax,
                    "its data is declared external but it also holds data inline".into(),
                ));
            }
            let (storage, ext) = self.external(&p, nbytes, &name, f.at, &what)?;
            attributes.push(("storage".into(), Meta::Str("external".into())));
            attributes.push(("external".into(), ext));
            storage
        } else if let Some((offset, len)) = p.raw {
            if p.has(ti) {
                return Err(fail(
                    ErrorKind::Syntax,
                    format!("it holds both raw_data and {}; only one may be set", TYPED[ti].1),
                ));
            }
            if len != nbytes {
                return Err(fail(
                    ErrorKind::SizeMismatch,
                    format!("{} but raw_data has {len}", what()),
                ));
            }
            attributes.push(("storage".into(), Meta::Str("raw_data".into())));
            Storage::Range { source: 0, offset, len }
        } else {
            attributes.push(("storage".into(), Meta::Str(TYPED[ti].1.into())));
            Storage::Inline(self.decode(&p, start, end, ti, width, nbytes).map_err(|e| {
                let at = e.offset.unwrap_or(f.at);
                e.tensor(name.clone()).at(at)
            })?)
        };
        let info = TensorInfo {
            name,
            ty,
            shape: p.dims,
            storage,
            arrangement: Default::default(),
            attributes,
        };
        if path.is_empty() {
            self.cat.tensors.push(info);
        } else {
            let mut info = info;
            info.attributes.push(("subgraph".into(), Meta::Str(path.into())));
            self.nested.push(info);
        }
        Ok(())
    }

    /// Second pass over a `TensorProto`: decodes its typed field `TYPED[ti]` into `nbytes` bytes,
    /// `width` bytes kept per stored value.
    fn decode(
        &mut self,
        p: &Proto,
        start: u64,
        end: u64,
        ti: usize,
        width: usize,
        nbytes: u64,
    ) -> Result<Vec<u8>, FormatError> {
        let (number, field, enc) = TYPED[ti];
        let want = nbytes / width as u64;
        // What the field can hold at most, from the first pass: never allocate more than that.
        let (packed, single) = p.typed[ti];
        let most = match enc {
            Enc::Fixed32 => packed / 4 + single,
            Enc::Fixed64 => packed / 8 + single,
            Enc::Varint => packed + single,
        };
        if want > most || (enc != Enc::Varint && want != most) {
            let have = if enc == Enc::Varint {
                format!("at most {most}")
            } else {
                most.to_string()
            };
            let msg = if most == 0 {
                format!("it holds no data for its {want} values (no raw_data, {field} or external data)")
            } else {
                format!("its shape needs {want} values in {field} but it holds {have}")
            };
            return Err(err(ErrorKind::SizeMismatch, msg));
        }
        self.charge(nbytes, start)?;
        let mut out = Vec::with_capacity(nbytes as usize);
        let mut push = |b: &[u8]| {
            if (out.len() + width) as u64 > nbytes {
                return Err(err(
                    ErrorKind::SizeMismatch,
                    format!("{field} holds more than the {want} values its shape needs"),
                ));
            }
            out.extend_from_slice(&b[..width]);
            Ok(())
        };
        let mut pos = start;
        while let Some(f) = self.wire.next(&mut pos, end)? {
            if f.number != number {
                continue;
            }
            match enc {
                Enc::Varint => self.wire.varints(&f, |v| push(&v.to_le_bytes()))?,
                Enc::Fixed32 => self.wire.fixeds::<4>(&f, |b| push(&b))?,
                Enc::Fixed64 => self.wire.fixeds::<8>(&f, |b| push(&b))?,
            }
        }
        if out.len() as u64 != nbytes {
            return Err(err(
                ErrorKind::SizeMismatch,
                format!(
                    "its shape needs {want} values in {field} but it holds {}",
                    out.len() / width
                ),
            ));
        }
        Ok(out)
    }

    /// `Storage::Range` into an external data file, and the `external` attribute.
    fn external(
        &mut self,
        p: &Proto,
        nbytes: u64,
        name: &str,
        at: u64,
        what: &dyn Fn() -> String,
    ) -> Result<(Storage, Meta), FormatError> {
        let fail = |kind, msg: String| err(kind, msg).tensor(name).at(at);
        let (mut location, mut offset, mut length, mut checksum) = (None, 0, None, None);
        let number = |k: &str, v: &str| {
            v.parse::<u64>().map_err(|_| {
                fail(
                    ErrorKind::Syntax,
                    format!("external_data {k} '{v}' is not a byte count"),
                )
            })
        };
        for (k, v) in &p.external {
            match k.as_str() {
                "location" => location = Some(v.as_str()),
                "offset" => offset = number(k, v)?,
                "length" => length = Some(number(k, v)?),
                "checksum" => checksum = Some(v.clone()),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| {
            fail(
                ErrorKind::Syntax,
                "its data_location is EXTERNAL but external_data has no 'location'".into(),
            )
        })?;
        let source = self.cat.source_index(location).map_err(|e| e.tensor(name).at(at))?;
        let len = length.unwrap_or(nbytes);
        if len != nbytes {
            return Err(fail(
                ErrorKind::SizeMismatch,
                format!("{} but its external data length is {len}", what()),
            ));
        }
        if offset.checked_add(len).is_none() {
            return Err(fail(
                ErrorKind::Overflow,
                format!("external range {offset} + {len} overflows 64 bits"),
            ));
        }
        let mut ext = alloc::vec![
            ("location".to_string(), Meta::Str(location.into())),
            ("offset".to_string(), Meta::UInt(offset)),
            ("length".to_string(), Meta::UInt(len)),
        ];
        if let Some(c) = checksum {
            // ONNX: "checksum - SHA1 digest of file specified in under 'location' key": the whole
            // file, checked when a tensor covering (almost) all of it is read, and by verify.
            if let Some(sha1) = parse_sha1(&c)
                && !self
                    .cat
                    .checks
                    .iter()
                    .any(|k| k.source == source && k.digest == Digest::Sha1(sha1))
            {
                self.cat.checks.push(Check {
                    source,
                    offset: 0,
                    len: Check::TO_END,
                    digest: Digest::Sha1(sha1),
                    what: format!("external data file '{location}' (checksum of tensor '{name}')"),
                    decoded: None,
                });
            }
            ext.push(("checksum".into(), Meta::Str(c)));
        }
        Ok((Storage::Range { source, offset, len }, Meta::Map(ext)))
    }
}

/// A SHA-1 digest written as 40 hex digits (either case).
fn parse_sha1(s: &str) -> Option<[u8; 20]> {
    let b = s.trim().as_bytes();
    if b.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, pair) in b.chunks(2).enumerate() {
        let d = |c: u8| (c as char).to_digit(16);
        out[i] = (d(pair[0])? * 16 + d(pair[1])?) as u8;
    }
    Some(out)
}
