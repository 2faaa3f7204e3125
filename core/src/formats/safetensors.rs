//! safetensors: an 8-byte little-endian header length `N`, a JSON header of `N` bytes, then the
//! data section. Also the index of a sharded set (`model.safetensors.index.json`).
//!
//! The header maps each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets
//! relative to the data section) and may hold `"__metadata__"`, a string → string map. Opening
//! checks `N` against [`MAX_HEADER`] and the file size before reading it, parses the JSON with
//! duplicate keys refused (JSON parsers disagree on which of two equal keys wins, so such a file
//! would read differently in different readers) and nesting bounded by [`MAX_DEPTH`], then checks
//! that every tensor's byte count is its dtype × shape and that the tensors tile the data section
//! exactly: in bounds, no overlap, no gap. Tensors are listed in data-offset order; their bytes are
//! [`Storage::Range`]s of the file, read without copying when the file is in memory.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::RefCell;
use core::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{
    Arrangement, Catalog, ElementType, ErrorKind, FormatError, MAX_DEPTH, MAX_HEADER, Meta, Storage, TensorInfo,
    bytes_at, check_companion_path,
};
use crate::detect::Format;
use crate::dtype::DType;
use crate::source::ReadAt;
use crate::zt::format::LogicalType;

const FORMAT: &str = "safetensors";
const INDEX: &str = "safetensors-index";

/// The safetensors dtype names this reader knows, with their element types (every dtype
/// safetensors 0.8 writes except the 6-bit floats, which have no element type here).
pub const DTYPES: [(&str, ElementType); 20] = [
    ("BOOL", ElementType::Dense(DType::Bool)),
    ("U8", ElementType::Dense(DType::U8)),
    ("I8", ElementType::Dense(DType::I8)),
    ("U16", ElementType::Dense(DType::U16)),
    ("I16", ElementType::Dense(DType::I16)),
    ("U32", ElementType::Dense(DType::U32)),
    ("I32", ElementType::Dense(DType::I32)),
    ("U64", ElementType::Dense(DType::U64)),
    ("I64", ElementType::Dense(DType::I64)),
    ("F16", ElementType::Dense(DType::F16)),
    ("BF16", ElementType::Dense(DType::BF16)),
    ("F32", ElementType::Dense(DType::F32)),
    ("F64", ElementType::Dense(DType::F64)),
    ("C64", ElementType::Dense(DType::C64)),
    ("F8_E4M3", ElementType::Logical(LogicalType::F8E4M3Fn)),
    ("F8_E5M2", ElementType::Logical(LogicalType::F8E5M2)),
    ("F8_E4M3FNUZ", ElementType::Logical(LogicalType::F8E4M3Fnuz)),
    ("F8_E5M2FNUZ", ElementType::Logical(LogicalType::F8E5M2Fnuz)),
    ("F8_E8M0", ElementType::Logical(LogicalType::F8E8M0)),
    ("F4", ElementType::Logical(LogicalType::F4E2M1)),
];

/// The element type of a safetensors dtype name (`"F32"`, `"BF16"`, `"F8_E4M3"`, `"F4"`, ...).
pub fn element_type(st_dtype: &str) -> Option<ElementType> {
    DTYPES.iter().find(|(n, _)| *n == st_dtype).map(|(_, t)| *t)
}

// ---------------------------------------------------------------------------------------------
// JSON with duplicate keys refused and bounded nesting.

/// A JSON value, objects in file order.
#[derive(Debug)]
enum Json {
    Null,
    Bool(bool),
    UInt(u64),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Json>),
    Map(Vec<(String, Json)>),
}

impl Json {
    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::UInt(_) | Json::Int(_) | Json::Float(_) => "a number",
            Json::Str(_) => "a string",
            Json::List(_) => "a list",
            Json::Map(_) => "an object",
        }
    }

    fn into_meta(self) -> Meta {
        match self {
            Json::Null => Meta::Null,
            Json::Bool(b) => Meta::Bool(b),
            Json::UInt(u) => i64::try_from(u).map_or(Meta::UInt(u), Meta::Int),
            Json::Int(i) => Meta::Int(i),
            Json::Float(f) => Meta::Float(f),
            Json::Str(s) => Meta::Str(s),
            Json::List(v) => Meta::List(v.into_iter().map(Json::into_meta).collect()),
            Json::Map(m) => Meta::Map(m.into_iter().map(|(k, v)| (k, v.into_meta())).collect()),
        }
    }
}

/// Why the visitor stopped, when it was not a plain syntax error.
type Problem = RefCell<Option<(ErrorKind, String)>>;

#[derive(Clone, Copy)]
struct Node<'p> {
    depth: usize,
    problem: &'p Problem,
}

impl Node<'_> {
    fn fail<E: de::Error>(&self, kind: ErrorKind, msg: String) -> E {
        let e = E::custom(&msg);
        *self.problem.borrow_mut() = Some((kind, msg));
        e
    }

    fn child<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.fail(
                ErrorKind::Limit,
                format!("the JSON nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(Node {
            depth: self.depth + 1,
            problem: self.problem,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Json;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::UInt(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let child = self.child()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(child)? {
            out.push(v);
        }
        Ok(Json::List(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let child = self.child()?;
        // Small objects (a tensor entry has three keys) are checked by a scan of the keys so far;
        // the set (a copy of every key) is built only once an object grows past SCAN keys.
        const SCAN: usize = 8;
        let mut seen: Option<BTreeSet<String>> = None;
        let mut out: Vec<(String, Json)> = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let repeated = match &mut seen {
                Some(set) => !set.insert(k.clone()),
                None if out.len() < SCAN => out.iter().any(|(o, _)| *o == k),
                None => {
                    let mut set: BTreeSet<String> = out.iter().map(|(o, _)| o.clone()).collect();
                    let repeated = !set.insert(k.clone());
                    seen = Some(set);
                    repeated
                }
            };
            if repeated {
                return Err(self.fail(
                    ErrorKind::Duplicate,
                    format!(
                        "key '{k}' appears twice in one JSON object; readers disagree on which entry wins, so the \
                         file is refused"
                    ),
                ));
            }
            let v = map.next_value_seed(child)?;
            out.push((k, v));
        }
        Ok(Json::Map(out))
    }
}

/// The byte offset of a 1-based line and column in `bytes`.
fn position(bytes: &[u8], line: usize, column: usize) -> u64 {
    let line_start = if line <= 1 {
        0
    } else {
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)
            .map_or(bytes.len(), |(i, _)| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(bytes.len()) as u64
}

/// Parses `bytes` (at byte `base` of the file) as one JSON value.
fn parse_json(format: &'static str, bytes: &[u8], base: u64) -> Result<Json, FormatError> {
    let problem = Problem::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let node = Node {
        depth: 0,
        problem: &problem,
    };
    let parsed = node.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| {
        let at = base + position(bytes, e.line(), e.column());
        let (kind, msg) = problem
            .take()
            .unwrap_or_else(|| (ErrorKind::Syntax, format!("the header is not valid JSON: {e}")));
        FormatError::new(format, kind, msg).at(at)
    })
}

// ---------------------------------------------------------------------------------------------
// Single files.

/// One header entry before the data section is checked.
struct Entry {
    name: String,
    st_dtype: String,
    ty: ElementType,
    shape: Vec<u64>,
    begin: u64,
    end: u64,
}

fn entry(name: String, v: Json, at: u64) -> Result<Entry, FormatError> {
    let err = |kind, msg: String| FormatError::new(FORMAT, kind, msg).tensor(name.clone()).at(at);
    let Json::Map(fields) = v else {
        return Err(err(
            ErrorKind::Syntax,
            format!(
                "its header entry is {}, not an object with dtype, shape and data_offsets",
                v.kind()
            ),
        ));
    };
    let (mut dtype, mut shape, mut offsets) = (None, None, None);
    for (k, v) in fields {
        match k.as_str() {
            "dtype" => dtype = Some(v),
            "shape" => shape = Some(v),
            "data_offsets" => offsets = Some(v),
            _ => {} // Unknown fields are ignored, as the reference reader does.
        }
    }
    let missing = |f: &str| err(ErrorKind::Syntax, format!("its header entry has no '{f}'"));
    let Json::Str(st_dtype) = dtype.ok_or_else(|| missing("dtype"))? else {
        return Err(err(ErrorKind::Syntax, "its dtype is not a string".into()));
    };
    let ty = element_type(&st_dtype).ok_or_else(|| {
        err(
            ErrorKind::Unsupported,
            format!(
                "dtype '{st_dtype}' is not supported (known: {})",
                DTYPES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        )
    })?;
    let ints = |v: Json, what: &str| -> Result<Vec<u64>, FormatError> {
        let Json::List(items) = v else {
            return Err(err(ErrorKind::Syntax, format!("its {what} is not a list")));
        };
        items
            .into_iter()
            .map(|d| match d {
                Json::UInt(u) => Ok(u),
                // serde_json reads an integer beyond u64 as a float.
                Json::Float(f) if f >= 18_446_744_073_709_551_616.0 => Err(err(
                    ErrorKind::Overflow,
                    format!("its {what} holds {f}, which does not fit in 64 bits"),
                )),
                other => Err(err(
                    ErrorKind::Syntax,
                    format!("its {what} holds {}, not a non-negative integer", other.kind()),
                )),
            })
            .collect()
    };
    let shape = ints(shape.ok_or_else(|| missing("shape"))?, "shape")?;
    let offsets = ints(offsets.ok_or_else(|| missing("data_offsets"))?, "data_offsets")?;
    let [begin, end] = offsets[..] else {
        return Err(err(
            ErrorKind::Syntax,
            format!("its data_offsets has {} numbers, not [begin, end]", offsets.len()),
        ));
    };
    if end < begin {
        return Err(err(
            ErrorKind::OutOfBounds,
            format!("its data_offsets [{begin}, {end}] end before they begin"),
        ));
    }
    let n = crate::tensor::numel(&shape)
        .ok_or_else(|| err(ErrorKind::Overflow, format!("its shape {shape:?} overflows 64 bits")))?;
    if ty == ElementType::Logical(LogicalType::F4E2M1) && n % 2 != 0 {
        return Err(err(
            ErrorKind::SizeMismatch,
            format!("F4 packs two elements per byte, but its shape {shape:?} has an odd number of elements ({n})"),
        ));
    }
    let nbytes = ty
        .nbytes(n)
        .ok_or_else(|| err(ErrorKind::Overflow, format!("{st_dtype} {shape:?} overflows 64 bits")))?;
    if end - begin != nbytes {
        return Err(err(
            ErrorKind::SizeMismatch,
            format!(
                "{st_dtype} {shape:?} is {nbytes} bytes, but its data_offsets [{begin}, {end}] span {}",
                end - begin
            ),
        ));
    }
    Ok(Entry {
        name,
        st_dtype,
        ty,
        shape,
        begin,
        end,
    })
}

fn metadata(v: Json, at: u64) -> Result<Vec<(String, Meta)>, FormatError> {
    let err = |msg: String| FormatError::new(FORMAT, ErrorKind::Syntax, msg).at(at);
    match v {
        Json::Null => Ok(Vec::new()),
        Json::Map(m) => m
            .into_iter()
            .map(|(k, v)| match v {
                Json::Str(s) => Ok((k, Meta::Str(s))),
                other => Err(err(format!(
                    "__metadata__ must map strings to strings, but '{k}' is {}",
                    other.kind()
                ))),
            })
            .collect(),
        other => Err(err(format!(
            "__metadata__ must be an object of strings, not {}",
            other.kind()
        ))),
    }
}

/// Opens a safetensors file: the catalog of its tensors in data-offset order, `__metadata__` as
/// [`Catalog::metadata`], and per tensor the attributes `st_dtype` (the header's dtype name) and
/// `data_offsets` (`[begin, end]`, relative to the data section).
pub fn open<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let size = src.size();
    let err = |kind, msg: String| FormatError::new(FORMAT, kind, msg);
    if size < 8 {
        return Err(err(
            ErrorKind::Truncated,
            format!(
                "the file has {size} bytes, fewer than the 8-byte header length: it is truncated or not safetensors"
            ),
        ));
    }
    let head = bytes_at(FORMAT, src, 0, 8)?;
    let n = u64::from_le_bytes(
        head[..8]
            .try_into()
            .map_err(|_| err(ErrorKind::Truncated, "short read".into()))?,
    );
    if n > MAX_HEADER {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            format!("the header length field claims {n} bytes, over the {MAX_HEADER}-byte limit; the file is corrupt or hostile"),
        )
        .at(0));
    }
    if n > size - 8 {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            format!(
                "the header length field claims {n} bytes, but only {} follow it; the file is truncated or corrupt",
                size - 8
            ),
        )
        .at(0));
    }
    let header = bytes_at(FORMAT, src, 8, n)?;
    let Json::Map(items) = parse_json(FORMAT, &header, 8)? else {
        return Err(err(ErrorKind::Syntax, "the header is not a JSON object".into()).at(8));
    };
    drop(header);
    let data_start = 8 + n;
    let data_len = size - data_start;
    let mut cat = Catalog::new(Format::Safetensors);
    let mut entries = Vec::with_capacity(items.len());
    for (name, v) in items {
        if name == "__metadata__" {
            cat.metadata = metadata(v, 8)?;
        } else {
            let e = entry(name, v, 8)?;
            if e.end > data_len {
                return Err(err(
                    ErrorKind::OutOfBounds,
                    format!(
                        "its data_offsets [{}, {}] run past the end of the {data_len}-byte data section",
                        e.begin, e.end
                    ),
                )
                .tensor(e.name)
                .at(data_start));
            }
            entries.push(e);
        }
    }
    // The tensors must tile the data section: sorted by offsets, each begins where the last ended.
    entries.sort_by_key(|e| (e.begin, e.end));
    let mut covered = 0u64;
    let mut last: Option<&str> = None;
    for e in &entries {
        if e.begin < covered {
            return Err(err(
                ErrorKind::Overlap,
                format!(
                    "its bytes [{}, {}) overlap those of '{}', which end at {covered}",
                    e.begin,
                    e.end,
                    last.unwrap_or("")
                ),
            )
            .tensor(e.name.clone())
            .at(data_start + e.begin));
        }
        if e.begin > covered {
            return Err(err(
                ErrorKind::Gap,
                format!(
                    "bytes [{covered}, {}) of the data section belong to no tensor (before '{}')",
                    e.begin, e.name
                ),
            )
            .at(data_start + covered));
        }
        covered = e.end;
        last = Some(&e.name);
    }
    if covered != data_len {
        return Err(err(
            ErrorKind::Gap,
            format!(
                "the last {} bytes of the {data_len}-byte data section belong to no tensor",
                data_len - covered
            ),
        )
        .at(data_start + covered));
    }
    cat.tensors = entries
        .into_iter()
        .map(|e| TensorInfo {
            storage: Storage::Range {
                source: 0,
                offset: data_start + e.begin,
                len: e.end - e.begin,
            },
            ty: e.ty,
            shape: e.shape,
            arrangement: Arrangement::default(),
            attributes: alloc::vec![
                ("st_dtype".into(), Meta::Str(e.st_dtype)),
                (
                    "data_offsets".into(),
                    Meta::List(alloc::vec![Meta::UInt(e.begin), Meta::UInt(e.end)])
                ),
            ],
            name: e.name,
        })
        .collect();
    Ok(cat)
}

// ---------------------------------------------------------------------------------------------
// Sharded sets.

/// A parsed `model.safetensors.index.json`.
struct Index {
    metadata: Vec<(String, Meta)>,
    /// Tensor name → shard file, in file order.
    weight_map: Vec<(String, String)>,
}

fn parse_index<S: ReadAt + ?Sized>(src: &S) -> Result<Index, FormatError> {
    let size = src.size();
    let err = |kind, msg: String| FormatError::new(INDEX, kind, msg);
    if size > MAX_HEADER {
        return Err(err(
            ErrorKind::HeaderTooLarge,
            format!("the index is {size} bytes, over the {MAX_HEADER}-byte limit"),
        ));
    }
    let bytes = bytes_at(INDEX, src, 0, size)?;
    let Json::Map(items) = parse_json(INDEX, &bytes, 0)? else {
        return Err(err(ErrorKind::Syntax, "the index is not a JSON object".into()).at(0));
    };
    let mut index = Index {
        metadata: Vec::new(),
        weight_map: Vec::new(),
    };
    let mut have_map = false;
    for (k, v) in items {
        match (k.as_str(), v) {
            ("metadata", Json::Map(m)) => index.metadata = m.into_iter().map(|(k, v)| (k, v.into_meta())).collect(),
            ("metadata", Json::Null) => {}
            ("weight_map", Json::Map(m)) => {
                have_map = true;
                for (name, shard) in m {
                    let Json::Str(shard) = shard else {
                        return Err(err(
                            ErrorKind::Syntax,
                            format!("weight_map maps '{name}' to {}, not a shard file name", shard.kind()),
                        )
                        .tensor(name));
                    };
                    index.weight_map.push((name, shard));
                }
            }
            ("metadata" | "weight_map", v) => {
                return Err(err(ErrorKind::Syntax, format!("'{k}' is {}, not an object", v.kind())));
            }
            _ => {} // Other keys carry nothing a reader needs.
        }
    }
    if !have_map {
        return Err(err(
            ErrorKind::Syntax,
            "the JSON has no 'weight_map': not a safetensors index".into(),
        ));
    }
    Ok(index)
}

/// Opens a sharded set from its index (`model.safetensors.index.json`): every tensor of every
/// shard, in the index's `weight_map` order, each with a `shard` attribute; the index's
/// `metadata` as [`Catalog::metadata`]; the shards as [`Catalog::sources`] `1..`.
///
/// `open_shard` opens one shard by the name the index gives it (the host maps it to the file next
/// to the index, usually with [`open`]); it is called once per distinct shard, after the name is
/// checked with [`check_companion_path`]. The index and the shards must agree exactly: a tensor
/// the `weight_map` places in a shard that does not have it, or a shard tensor the `weight_map`
/// does not place there, is refused with [`ErrorKind::Companion`].
pub fn open_index<S: ReadAt + ?Sized>(
    index_src: &S,
    open_shard: &mut dyn FnMut(&str) -> Result<Catalog, FormatError>,
) -> Result<Catalog, FormatError> {
    open_index_prefetched(index_src, &mut |_| {}, open_shard)
}

/// [`open_index`], first handing `prefetch` the names of every distinct shard (each checked with
/// [`check_companion_path`]), in `weight_map` order, before `open_shard` is called for any: a host
/// reading the shards over a network opens them all at once there (one round trip for the set,
/// not one per shard) and answers `open_shard` from what it fetched.
pub fn open_index_prefetched<S: ReadAt + ?Sized>(
    index_src: &S,
    prefetch: &mut dyn FnMut(&[&str]),
    open_shard: &mut dyn FnMut(&str) -> Result<Catalog, FormatError>,
) -> Result<Catalog, FormatError> {
    let index = parse_index(index_src)?;
    let mut shards: Vec<&str> = Vec::new();
    let mut seen = BTreeSet::new();
    for (_, shard) in &index.weight_map {
        if seen.insert(shard.as_str()) {
            check_companion_path(INDEX, shard)?;
            shards.push(shard);
        }
    }
    prefetch(&shards);
    let err = |kind, msg: String| FormatError::new(INDEX, kind, msg);
    let placed: BTreeMap<&str, &str> = index.weight_map.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
    let mut cat = Catalog::new(Format::SafetensorsIndex);
    cat.metadata = index.metadata.clone();
    let mut opened = BTreeSet::new();
    for (_, shard) in &index.weight_map {
        if !opened.insert(shard.as_str()) {
            continue;
        }
        check_companion_path(INDEX, shard)?;
        let part = open_shard(shard).map_err(|mut e| {
            e.message = format!("{} (in shard '{shard}' of the index)", e.message);
            e
        })?;
        for t in &part.tensors {
            match placed.get(t.name.as_str()) {
                Some(s) if s == shard => {}
                Some(s) => {
                    return Err(err(
                        ErrorKind::Companion,
                        format!("shard '{shard}' holds it, but the index's weight_map places it in '{s}'"),
                    )
                    .tensor(t.name.clone()));
                }
                None => {
                    return Err(err(
                        ErrorKind::Companion,
                        format!("shard '{shard}' holds it, but the index's weight_map does not list it"),
                    )
                    .tensor(t.name.clone()));
                }
            }
        }
        cat.absorb(part, shard)?;
    }
    // Every shard tensor is in the weight_map (checked above); now every weight_map entry must be
    // in its shard. Tensors come out in weight_map order.
    let mut by_name: BTreeMap<String, TensorInfo> = cat.tensors.drain(..).map(|t| (t.name.clone(), t)).collect();
    for (name, shard) in index.weight_map {
        let mut t = by_name.remove(&name).ok_or_else(|| {
            err(
                ErrorKind::Companion,
                format!("the index's weight_map places it in shard '{shard}', which does not hold it"),
            )
            .tensor(name.clone())
        })?;
        t.attributes.push(("shard".into(), Meta::Str(shard)));
        cat.tensors.push(t);
    }
    Ok(cat)
}

/// What [`super::open_as`] answers for an index on its own: the index is checked, then refused
/// with [`ErrorKind::Companion`], because its tensors are in the shard files and `open_as` has no
/// way to open them. Open the index with [`open_index`] (which the host gives a way to open the
/// shards next to it), or open one shard on its own with [`open`].
pub fn open_index_alone<S: ReadAt + ?Sized>(src: &S) -> Result<Catalog, FormatError> {
    let index = parse_index(src)?;
    let mut shards: Vec<&str> = Vec::new();
    for (_, s) in &index.weight_map {
        if !shards.contains(&s.as_str()) {
            shards.push(s);
        }
        if shards.len() > 4 {
            break;
        }
    }
    let listed = if shards.len() > 4 {
        format!("{}, ...", shards[..4].join(", "))
    } else {
        shards.join(", ")
    };
    Err(FormatError::new(
        INDEX,
        ErrorKind::Companion,
        format!(
            "this is the index of a sharded safetensors set ({} tensors in shards {listed}); its tensors are in the \
             shard files: open the index together with its shards (safetensors::open_index), or open one shard",
            index.weight_map.len()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn reads_in_offset_order_with_metadata() {
        let f = file(
            r#"{"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"__metadata__":{"k":"v"},"a":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}"#,
            &[1, 0, 7, 8],
        );
        let cat = open(&f[..]).unwrap();
        assert_eq!(cat.tensors[0].name, "a");
        assert_eq!(cat.tensors[1].name, "b");
        assert_eq!(cat.metadata, [("k".into(), Meta::Str("v".into()))]);
        let b = &cat.tensors[1];
        assert!(b.is_zero_copy());
        assert_eq!(&super::super::read::<[u8]>(FORMAT, b, &[&f[..]]).unwrap()[..], &[7, 8]);
    }

    #[test]
    fn duplicate_and_depth() {
        let f = file(r#"{"__metadata__":{"a":"1","a":"2"}}"#, &[]);
        assert_eq!(open(&f[..]).unwrap_err().kind, ErrorKind::Duplicate);
        // Objects past the scanned size: a key repeated before, at and after the switch to a set.
        for (first, again) in [(0, 5), (2, 8), (3, 12), (11, 30)] {
            let keys: Vec<String> = (0..40)
                .map(|i| format!(r#""k{}":"v""#, if i == again { first } else { i }))
                .collect();
            let f = file(&format!(r#"{{"__metadata__":{{{}}}}}"#, keys.join(",")), &[]);
            let e = open(&f[..]).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Duplicate, "{first} {again}");
            assert!(e.message.contains(&format!("'k{first}'")), "{}", e.message);
        }
        let keys: Vec<String> = (0..40).map(|i| format!(r#""k{i}":"v""#)).collect();
        let f = file(&format!(r#"{{"__metadata__":{{{}}}}}"#, keys.join(",")), &[]);
        assert_eq!(open(&f[..]).unwrap().metadata.len(), 40);
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let f = file(&format!(r#"{{"__metadata__":{deep}}}"#), &[]);
        assert_eq!(open(&f[..]).unwrap_err().kind, ErrorKind::Limit);
        let e = open(&file("{\"a\":", &[])[..]).unwrap_err();
        assert_eq!((e.kind, e.offset), (ErrorKind::Syntax, Some(12)));
    }

    #[test]
    fn position_of_line_and_column() {
        assert_eq!(position(b"ab\ncd\nef", 1, 2), 1);
        assert_eq!(position(b"ab\ncd\nef", 3, 1), 6);
        assert_eq!(position(b"ab", 9, 9), 2);
    }
}
