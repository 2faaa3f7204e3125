//! The computation graph of an ONNX model ([`read_graph`]): nodes (name, op type, domain, inputs,
//! outputs, a summary of each attribute), the graph's inputs and outputs with their element
//! types and shapes, the names of its initializers, the opset imports and the producer — what a
//! model viewer draws, read by the same bounded protobuf walk as [`super::onnx`] (tags, lengths
//! and small fields; `raw_data` payloads are skipped, never read).
//!
//! Only the main graph's nodes are listed; an attribute holding a subgraph (If/Loop/Scan bodies)
//! is summarised as `graph` with its node count. Attribute summaries are short text (at most
//! [`MAX_SUMMARY`] characters): a number, a quoted string, a list (its first
//! [`MAX_LIST`] values and its length), `tensor <TYPE> [dims]`, `graph (N nodes)`.
//!
//! Limits: everything materialized (names, strings, node and attribute entries) stays within
//! [`super::MAX_HEADER`] bytes ([`ErrorKind::Limit`]), messages nest at most
//! [`super::MAX_DEPTH`] deep. Errors carry the byte offset of the field at fault.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::protobuf::{Field, Value, Wire};
use super::{ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER};
use crate::source::ReadAt;

const FORMAT: &str = "onnx";

/// The longest attribute summary (characters).
pub const MAX_SUMMARY: usize = 160;
/// Values of a list attribute shown in its summary.
pub const MAX_LIST: usize = 8;
/// What one node, attribute or value-info entry costs against the budget besides its strings.
const ENTRY_COST: u64 = 64;

/// An ONNX model's main graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// `GraphProto.name`.
    pub name: String,
    /// `ModelProto.ir_version` (0 when absent).
    pub ir_version: i64,
    /// `ModelProto.producer_name`.
    pub producer_name: String,
    /// `ModelProto.producer_version`.
    pub producer_version: String,
    /// `(domain, version)` per opset import; the default domain is named `ai.onnx`.
    pub opset_import: Vec<(String, i64)>,
    /// The graph's inputs (initializers listed as inputs too, as older exporters do, included).
    pub inputs: Vec<ValueInfo>,
    /// The graph's outputs.
    pub outputs: Vec<ValueInfo>,
    /// Names of the graph's initializers, in file order.
    pub initializers: Vec<String>,
    /// The nodes, in file (topological) order.
    pub nodes: Vec<Node>,
}

/// A graph input or output (`ValueInfoProto`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValueInfo {
    /// The value's name.
    pub name: String,
    /// `TensorProto.DataType` code of a tensor type (0: not a tensor type or not given).
    pub elem_type: u64,
    /// Dimensions of a tensor type: a number, or a symbolic name; `None` when the shape is not given.
    pub shape: Option<Vec<Dim>>,
}

/// One dimension of a [`ValueInfo`] shape.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    /// `dim_value`.
    Value(i64),
    /// `dim_param` (a symbolic size such as `batch`).
    Param(String),
    /// Neither is set.
    Unknown,
}

/// A `NodeProto`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// `name` (may be empty).
    pub name: String,
    /// `op_type` (`Conv`, `MatMul`, ...).
    pub op_type: String,
    /// `domain` (empty: the default `ai.onnx`).
    pub domain: String,
    /// Input value names (an empty name is an omitted optional input).
    pub inputs: Vec<String>,
    /// Output value names.
    pub outputs: Vec<String>,
    /// Attributes, in file order.
    pub attributes: Vec<Attribute>,
}

/// A node attribute, summarised.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attribute {
    /// Its name.
    pub name: String,
    /// Its kind, as `onnx.AttributeProto.AttributeType` names it in lower case: `float`, `int`,
    /// `string`, `tensor`, `graph`, `floats`, `ints`, `strings`, `tensors`, `graphs`,
    /// `sparse_tensor`, `type_proto`, ... (`undefined` when the field is not set and no value is
    /// present).
    pub kind: &'static str,
    /// A short rendering of its value (module docs).
    pub summary: String,
}

/// The element type name of a `TensorProto.DataType` code (`FLOAT`, `INT64`, ...; `UNDEFINED`
/// for 0, `?` for unknown codes).
pub fn elem_type_name(code: u64) -> &'static str {
    const NAMES: [&str; 27] = [
        "UNDEFINED",
        "FLOAT",
        "UINT8",
        "INT8",
        "UINT16",
        "INT16",
        "INT32",
        "INT64",
        "STRING",
        "BOOL",
        "FLOAT16",
        "DOUBLE",
        "UINT32",
        "UINT64",
        "COMPLEX64",
        "COMPLEX128",
        "BFLOAT16",
        "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ",
        "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ",
        "UINT4",
        "INT4",
        "FLOAT4E2M1",
        "FLOAT8E8M0",
        "UINT2",
        "INT2",
    ];
    NAMES.get(code as usize).copied().unwrap_or("?")
}

/// The lower-case name of an `AttributeProto.AttributeType` code.
fn attr_type_name(code: u64) -> &'static str {
    match code {
        1 => "float",
        2 => "int",
        3 => "string",
        4 => "tensor",
        5 => "graph",
        6 => "floats",
        7 => "ints",
        8 => "strings",
        9 => "tensors",
        10 => "graphs",
        11 => "sparse_tensor",
        12 => "sparse_tensors",
        13 => "type_proto",
        14 => "type_protos",
        _ => "undefined",
    }
}

fn err(kind: ErrorKind, msg: impl Into<String>) -> FormatError {
    FormatError::new(FORMAT, kind, msg)
}

/// Reads the graph of the ONNX model in `src` (see the module docs).
pub fn read_graph<S: ReadAt + ?Sized>(src: &S) -> Result<Graph, FormatError> {
    let mut r = Reader {
        wire: Wire::new(FORMAT, src),
        budget: MAX_HEADER,
    };
    r.model()
}

struct Reader<'s, S: ReadAt + ?Sized> {
    wire: Wire<'s, S>,
    budget: u64,
}

impl<'s, S: ReadAt + ?Sized> Reader<'s, S> {
    fn charge(&mut self, n: u64, at: u64) -> Result<(), FormatError> {
        self.budget = self.budget.checked_sub(n).ok_or_else(|| {
            err(
                ErrorKind::Limit,
                format!(
                    "the graph's names, attributes and entries exceed {MAX_HEADER} bytes; this reader lists graphs \
                     up to that size"
                ),
            )
            .at(at)
        })?;
        Ok(())
    }

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

    /// A string field (lossy UTF-8: names of hostile files still list), charged to the budget.
    fn string(&mut self, f: &Field, what: &str) -> Result<String, FormatError> {
        let (o, e) = self.span(f, what)?;
        self.charge(e - o, f.at)?;
        let b = self.wire.read(o, e - o)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    fn deeper(&self, depth: usize, at: u64) -> Result<(), FormatError> {
        if depth > MAX_DEPTH {
            return Err(err(ErrorKind::Limit, format!("messages nest more than {MAX_DEPTH} deep")).at(at));
        }
        Ok(())
    }

    fn model(&mut self) -> Result<Graph, FormatError> {
        let end = self.wire.size();
        if end == 0 {
            return Err(err(ErrorKind::Syntax, "the file is empty, not an ONNX model"));
        }
        let mut g = Graph::default();
        let (mut pos, mut graphs) = (0, 0);
        while let Some(f) = self.wire.next(&mut pos, end)? {
            match f.number {
                1 => g.ir_version = self.varint(&f, "ir_version (an int64)")? as i64,
                2 => g.producer_name = self.string(&f, "producer_name")?,
                3 => g.producer_version = self.string(&f, "producer_version")?,
                7 => {
                    graphs += 1;
                    self.graph(&f, &mut g)?;
                }
                8 => {
                    let (mut p, e) = self.span(&f, "an opset_import entry")?;
                    let (mut domain, mut version) = (String::from("ai.onnx"), 0);
                    while let Some(h) = self.wire.next(&mut p, e)? {
                        match h.number {
                            1 if h.bytes().is_some_and(|(_, l)| l > 0) => {
                                domain = self.string(&h, "an opset domain")?
                            }
                            2 => version = self.varint(&h, "an opset version")? as i64,
                            _ => {}
                        }
                    }
                    self.charge(ENTRY_COST, f.at)?;
                    g.opset_import.push((domain, version));
                }
                _ => {}
            }
        }
        if graphs == 0 {
            return Err(err(
                ErrorKind::Syntax,
                "the model has no graph (ModelProto field 7); this is not an ONNX model",
            ));
        }
        Ok(g)
    }

    fn graph(&mut self, f: &Field, g: &mut Graph) -> Result<(), FormatError> {
        let (mut pos, end) = self.span(f, "a graph (GraphProto)")?;
        while let Some(h) = self.wire.next(&mut pos, end)? {
            match h.number {
                1 => {
                    let n = self.node(&h)?;
                    g.nodes.push(n);
                }
                2 => g.name = self.string(&h, "the graph name")?,
                5 => {
                    let name = self.tensor_name(&h)?;
                    g.initializers.push(name);
                }
                11 => {
                    let v = self.value_info(&h)?;
                    g.inputs.push(v);
                }
                12 => {
                    let v = self.value_info(&h)?;
                    g.outputs.push(v);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The name (field 8) of a `TensorProto`; its data is skipped.
    fn tensor_name(&mut self, f: &Field) -> Result<String, FormatError> {
        let (mut p, e) = self.span(f, "an initializer (TensorProto)")?;
        let mut name = String::new();
        while let Some(h) = self.wire.next(&mut p, e)? {
            if h.number == 8 {
                name = self.string(&h, "a tensor name")?;
            }
        }
        self.charge(ENTRY_COST, f.at)?;
        Ok(name)
    }

    fn node(&mut self, f: &Field) -> Result<Node, FormatError> {
        let (mut pos, end) = self.span(f, "a node (NodeProto)")?;
        self.charge(ENTRY_COST, f.at)?;
        let mut n = Node::default();
        while let Some(h) = self.wire.next(&mut pos, end)? {
            match h.number {
                1 => {
                    let s = self.string(&h, "a node input")?;
                    self.charge(24, h.at)?;
                    n.inputs.push(s);
                }
                2 => {
                    let s = self.string(&h, "a node output")?;
                    self.charge(24, h.at)?;
                    n.outputs.push(s);
                }
                3 => n.name = self.string(&h, "a node name")?,
                4 => n.op_type = self.string(&h, "an op_type")?,
                7 => n.domain = self.string(&h, "a node domain")?,
                5 => {
                    let a = self.attribute(&h)?;
                    n.attributes.push(a);
                }
                _ => {}
            }
        }
        Ok(n)
    }

    fn attribute(&mut self, f: &Field) -> Result<Attribute, FormatError> {
        let (mut pos, end) = self.span(f, "a node attribute (AttributeProto)")?;
        self.charge(ENTRY_COST + MAX_SUMMARY as u64, f.at)?;
        let mut a = Attribute::default();
        let mut declared = 0u64;
        let mut seen = "undefined";
        let mut summary = String::new();
        let mut list = List::default();
        while let Some(h) = self.wire.next(&mut pos, end)? {
            match h.number {
                1 => a.name = self.string(&h, "an attribute name")?,
                20 => declared = self.varint(&h, "an attribute type (an enum)")?,
                2 => {
                    let Value::Fixed32(v) = h.value else {
                        return Err(self.wire.wire_type(&h, "a float (fixed32)"));
                    };
                    seen = "float";
                    summary = fmt_f32(f32::from_bits(v));
                }
                3 => {
                    seen = "int";
                    summary = format!("{}", self.varint(&h, "an int (varint)")? as i64);
                }
                4 => {
                    seen = "string";
                    summary = self.quoted(&h)?;
                }
                5 => {
                    seen = "tensor";
                    summary = self.tensor_summary(&h)?;
                }
                6 => {
                    seen = "graph";
                    summary = self.graph_summary(&h, 1)?;
                }
                7 => {
                    seen = "floats";
                    let l = &mut list;
                    self.wire.fixeds::<4>(&h, |b| {
                        l.add(fmt_f32(f32::from_le_bytes(b)));
                        Ok(())
                    })?;
                }
                8 => {
                    seen = "ints";
                    let l = &mut list;
                    self.wire.varints(&h, |v| {
                        l.add(format!("{}", v as i64));
                        Ok(())
                    })?;
                }
                9 => {
                    seen = "strings";
                    let s = if list.len < MAX_LIST {
                        self.quoted(&h)?
                    } else {
                        String::new()
                    };
                    list.add(s);
                }
                10 => {
                    seen = "tensors";
                    list.add(String::from("tensor"));
                }
                11 => {
                    seen = "graphs";
                    let s = if list.len < MAX_LIST {
                        self.graph_summary(&h, 1)?
                    } else {
                        String::new()
                    };
                    list.add(s);
                }
                22 => {
                    seen = "sparse_tensor";
                    summary = String::from("sparse tensor");
                }
                23 => {
                    seen = "sparse_tensors";
                    list.add(String::from("sparse tensor"));
                }
                14 => {
                    seen = "type_proto";
                    summary = String::from("type");
                }
                15 => {
                    seen = "type_protos";
                    list.add(String::from("type"));
                }
                21 => {
                    let r = self.string(&h, "a ref_attr_name")?;
                    summary = format!("@{r}");
                }
                _ => {}
            }
        }
        a.kind = if declared != 0 { attr_type_name(declared) } else { seen };
        if matches!(
            a.kind,
            "floats" | "ints" | "strings" | "tensors" | "graphs" | "sparse_tensors" | "type_protos"
        ) && summary.is_empty()
        {
            summary = list.render();
        }
        a.summary = clip(summary);
        Ok(a)
    }

    /// A string attribute value, quoted and clipped.
    fn quoted(&mut self, f: &Field) -> Result<String, FormatError> {
        let (o, e) = self.span(f, "a string")?;
        let n = (e - o).min(MAX_SUMMARY as u64);
        let b = self.wire.read(o, n)?;
        let s = String::from_utf8_lossy(&b);
        Ok(if e - o > n {
            format!("{s:?}…")
        } else {
            format!("{s:?}")
        })
    }

    /// `tensor TYPE [d0, d1]` of a `TensorProto` (its data skipped).
    fn tensor_summary(&mut self, f: &Field) -> Result<String, FormatError> {
        let (mut p, e) = self.span(f, "a tensor (TensorProto)")?;
        let (mut dims, mut ty) = (List::default(), 0);
        while let Some(h) = self.wire.next(&mut p, e)? {
            match h.number {
                1 => {
                    let l = &mut dims;
                    self.wire.varints(&h, |v| {
                        l.add(format!("{}", v as i64));
                        Ok(())
                    })?;
                }
                2 => ty = self.varint(&h, "data_type (an enum)")?,
                _ => {}
            }
        }
        Ok(format!("tensor {} {}", elem_type_name(ty), dims.render()))
    }

    /// `graph (N nodes)` of a subgraph (its nodes are counted, not read).
    fn graph_summary(&mut self, f: &Field, depth: usize) -> Result<String, FormatError> {
        self.deeper(depth, f.at)?;
        let (mut p, e) = self.span(f, "a subgraph (GraphProto)")?;
        let mut nodes = 0u64;
        while let Some(h) = self.wire.next(&mut p, e)? {
            if h.number == 1 {
                nodes += 1;
            }
        }
        Ok(format!("graph ({nodes} nodes)"))
    }

    /// A `ValueInfoProto`: name, and a tensor type's element type and shape.
    fn value_info(&mut self, f: &Field) -> Result<ValueInfo, FormatError> {
        let (mut p, e) = self.span(f, "a graph input/output (ValueInfoProto)")?;
        self.charge(ENTRY_COST, f.at)?;
        let mut v = ValueInfo::default();
        while let Some(h) = self.wire.next(&mut p, e)? {
            match h.number {
                1 => v.name = self.string(&h, "a value name")?,
                2 => {
                    // TypeProto: tensor_type (1) holds elem_type (1) and shape (2).
                    let (mut tp, te) = self.span(&h, "a type (TypeProto)")?;
                    while let Some(t) = self.wire.next(&mut tp, te)? {
                        if t.number != 1 {
                            continue;
                        }
                        let (mut q, qe) = self.span(&t, "a tensor type (TypeProto.Tensor)")?;
                        while let Some(k) = self.wire.next(&mut q, qe)? {
                            match k.number {
                                1 => v.elem_type = self.varint(&k, "elem_type (an enum)")?,
                                2 => v.shape = Some(self.shape(&k)?),
                                _ => {}
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(v)
    }

    /// A `TensorShapeProto`: its dimensions.
    fn shape(&mut self, f: &Field) -> Result<Vec<Dim>, FormatError> {
        let (mut p, e) = self.span(f, "a shape (TensorShapeProto)")?;
        let mut dims = Vec::new();
        while let Some(h) = self.wire.next(&mut p, e)? {
            if h.number != 1 {
                continue;
            }
            self.charge(16, h.at)?;
            let (mut q, qe) = self.span(&h, "a dimension")?;
            let mut d = Dim::Unknown;
            while let Some(k) = self.wire.next(&mut q, qe)? {
                match k.number {
                    1 => d = Dim::Value(self.varint(&k, "dim_value (an int64)")? as i64),
                    2 => d = Dim::Param(self.string(&k, "dim_param")?),
                    _ => {}
                }
            }
            dims.push(d);
        }
        Ok(dims)
    }
}

/// The first [`MAX_LIST`] items of a list and its length.
#[derive(Default)]
struct List {
    items: Vec<String>,
    len: usize,
}

impl List {
    fn add(&mut self, s: String) {
        if self.len < MAX_LIST {
            self.items.push(s);
        }
        self.len += 1;
    }

    fn render(&self) -> String {
        let mut s = String::from("[");
        s.push_str(&self.items.join(", "));
        if self.len > self.items.len() {
            s.push_str(&format!(", … ({} values)", self.len));
        }
        s.push(']');
        s
    }
}

/// A float as Python's `repr` of a float32 widened to f64 would mostly show it (shortest f32
/// round-trip text).
fn fmt_f32(v: f32) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".to_string() } else { "-inf".to_string() };
    }
    format!("{v:?}")
}

/// `s` cut to [`MAX_SUMMARY`] characters.
fn clip(s: String) -> String {
    if s.chars().count() <= MAX_SUMMARY {
        return s;
    }
    let mut out: String = s.chars().take(MAX_SUMMARY - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_bytes_are_refused_not_panicked() {
        for b in [
            &b""[..],
            &b"\x3a\xff\xff\xff\xff\x0f"[..],
            &b"\x08\x07"[..],
            &[0xffu8; 12][..],
        ] {
            assert!(read_graph(b).is_err(), "{b:?}");
        }
    }

    #[test]
    fn lists_are_clipped() {
        let mut l = List::default();
        for i in 0..20 {
            l.add(format!("{i}"));
        }
        assert_eq!(l.render(), "[0, 1, 2, 3, 4, 5, 6, 7, … (20 values)]");
    }
}
