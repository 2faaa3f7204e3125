//! `.zt` for both JavaScript backends, so that `open()`/`writeZt()` behave the same on both.
//!
//! The JavaScript layer (`js/common.js`) does the I/O: it reads the header, the tail window and
//! (when it lies outside the tail) the manifest of a file, and hands those **pieces** to
//! [`open_pieces`], which validates the image with the core (spec §13, the corpus's `open`) and
//! describes it as JSON. Part bytes never pass through here unless they must be transformed:
//! [`decode_part`] decodes `zt.zstd-seekable/1`, [`verify_image`] runs the core's deep verify
//! over a whole in-memory file, [`write_plan`] runs the canonical writer.

use std::fmt::Write as _;

use serde_json::Value as J;
use tensorlane_core::dtype::DType;
use tensorlane_core::source::{ReadAt, SourceError};
use tensorlane_core::zt::Error as ZtError;
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::format::{ENCODING_ZSTD_SEEKABLE, LogicalType};
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::rule::Rule;
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartSpec, Writer};

/// A file of `size` bytes of which only some ranges are loaded.
pub struct Pieces<'a> {
    size: u64,
    pieces: Vec<(u64, &'a [u8])>,
}

impl<'a> Pieces<'a> {
    /// `pieces`: `(absolute offset, bytes)`.
    pub fn new(size: u64, pieces: Vec<(u64, &'a [u8])>) -> Self {
        Pieces { size, pieces }
    }
}

impl ReadAt for Pieces<'_> {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        match self.slice(offset, buf.len() as u64) {
            Some(s) => {
                buf.copy_from_slice(s);
                Ok(())
            }
            None => Err(SourceError::Io(format!(
                "bytes [{offset}, +{}) were not loaded",
                buf.len()
            ))),
        }
    }
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        self.pieces.iter().find_map(|&(o, b)| {
            (offset >= o && end <= o + b.len() as u64).then(|| &b[(offset - o) as usize..(end - o) as usize])
        })
    }
}

/// An error message for JavaScript: `"<Rule>: <message> (object, part, at byte N); <hint>"`.
pub fn message(e: &ZtError) -> String {
    e.to_string()
}

fn q(s: &str) -> String {
    J::String(s.to_string()).to_string()
}

/// CBOR attribute values as JSON (byte strings as `{"bytes": n}`).
pub fn cbor_json(v: &Value<'_>) -> J {
    match v {
        Value::Uint(n) => J::from(*n),
        Value::Neg(n) => i64::try_from(*n).map_or_else(|_| J::from(-(*n as f64) - 1.0), |n| J::from(-1 - n)),
        Value::Bytes(b) => serde_json::json!({ "bytes": b.len() }),
        Value::Text(s) => J::String(s.to_string()),
        Value::Array(a) => J::Array(a.iter().map(cbor_json).collect()),
        Value::Map(m) => J::Object(
            m.iter()
                .map(|(k, v)| {
                    (
                        k.as_text().map_or_else(|| cbor_json(k).to_string(), str::to_string),
                        cbor_json(v),
                    )
                })
                .collect(),
        ),
        Value::Bool(b) => J::Bool(*b),
        Value::Null => J::Null,
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
    }
}

/// JSON attribute values as CBOR (integers stay integers; other numbers become floats).
pub fn json_cbor(v: &J) -> Value<'static> {
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::Uint(u),
            (None, Some(i)) => Value::Neg((-1 - i) as u64),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::text(s.clone()),
        J::Array(a) => Value::Array(a.iter().map(json_cbor).collect()),
        J::Object(m) => Value::Map(m.iter().map(|(k, v)| (Value::text(k.clone()), json_cbor(v))).collect()),
    }
}

/// The NumPy-style name of an element type (as the fixtures' manifest writes it).
pub fn element_name(dtype: DType, logical: Option<&str>) -> String {
    match logical.map(|l| (l, LogicalType::from_name(l))) {
        None => dtype.name().to_string(),
        Some((_, Some(LogicalType::Bool))) => "bool".into(),
        Some((_, Some(LogicalType::Complex64))) => "complex64".into(),
        Some((_, Some(LogicalType::Complex128))) => "complex128".into(),
        Some((_, Some(LogicalType::F8E4M3Fn))) => "float8_e4m3fn".into(),
        Some((_, Some(LogicalType::F8E5M2))) => "float8_e5m2".into(),
        Some((_, Some(LogicalType::F8E4M3Fnuz))) => "float8_e4m3fnuz".into(),
        Some((_, Some(LogicalType::F8E5M2Fnuz))) => "float8_e5m2fnuz".into(),
        Some((_, Some(LogicalType::F8E8M0))) => "float8_e8m0fnu".into(),
        Some((_, Some(LogicalType::F4E2M1))) => "float4_e2m1fn".into(),
        Some((l, None)) => l.to_string(),
    }
}

/// [`open_pieces`] over pieces as JavaScript passes them: their bytes back to back in `joined`,
/// piece `i` at file offset `starts[i]` with `lens[i]` bytes (JS numbers).
pub fn open_joined(size: u64, starts: &[f64], lens: &[f64], joined: &[u8]) -> Result<String, String> {
    if starts.len() != lens.len() {
        return Err(format!(
            "ztOpenRaw: {} piece offsets but {} lengths",
            starts.len(),
            lens.len()
        ));
    }
    let mut pieces = Vec::with_capacity(starts.len());
    let mut at = 0usize;
    for (&s, &l) in starts.iter().zip(lens) {
        let b = joined
            .get(at..)
            .and_then(|rest| rest.get(..l as usize))
            .ok_or("ztOpenRaw: pieces exceed the joined bytes")?;
        pieces.push((s as u64, b));
        at += b.len();
    }
    open_pieces(size, pieces)
}

/// Validates the image made of `pieces` (without resolving shards) and describes it:
/// `{"dataShard", "attributes", "shards": {name: {size, digest}}, "objects": [{name, layout,
/// shape, attributes, dtype, parts: [{name, dtype, storage, type, encoding, offset, length,
/// nbytes, digest, shard}]}]}` (`dtype` of an object: its element type when dense).
pub fn open_pieces(size: u64, pieces: Vec<(u64, &[u8])>) -> Result<String, String> {
    let src = Pieces::new(size, pieces);
    let reader = Reader::open(&src).map_err(|e| message(&e))?;
    let mut out = String::from("{");
    let _ = write!(out, "\"dataShard\":{}", reader.is_data_shard());
    if let Some(a) = reader.attributes() {
        let _ = write!(out, ",\"attributes\":{}", cbor_json(a));
    }
    if let Some(t) = reader.shard_table() {
        let m: serde_json::Map<String, J> = t
            .iter()
            .map(|(n, e)| (n.clone(), serde_json::json!({"size": e.size, "digest": e.digest})))
            .collect();
        let _ = write!(out, ",\"shards\":{}", J::Object(m));
    }
    out.push_str(",\"objects\":[");
    if let Some(m) = reader.manifest() {
        for (i, (name, o)) in m.objects.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let shape: Vec<String> = o.shape.iter().map(|d| d.to_string()).collect();
            let _ = write!(
                out,
                "{{\"name\":{},\"layout\":{},\"shape\":[{}]",
                q(name),
                q(&o.layout),
                shape.join(",")
            );
            if let Some(a) = &o.attributes {
                let _ = write!(out, ",\"attributes\":{}", cbor_json(a));
            }
            if let Some(p) = o.parts.get("data").filter(|_| o.layout == "dense") {
                let _ = write!(out, ",\"dtype\":{}", q(&element_name(p.dtype, p.logical.as_deref())));
            }
            out.push_str(",\"parts\":[");
            for (j, (pn, p)) in o.parts.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "{{\"name\":{},\"dtype\":{},\"storage\":{},\"offset\":{},\"length\":{},\"nbytes\":{}",
                    q(pn),
                    q(&element_name(p.dtype, p.logical.as_deref())),
                    q(p.dtype.name()),
                    p.blob.offset,
                    p.blob.length,
                    p.decoded_size()
                );
                for (k, v) in [
                    ("type", &p.logical),
                    ("encoding", &p.encoding),
                    ("digest", &p.digest),
                    ("shard", &p.shard),
                ] {
                    if let Some(v) = v {
                        let _ = write!(out, ",\"{k}\":{}", q(v));
                    }
                }
                out.push('}');
            }
            out.push_str("]}");
        }
    }
    out.push_str("]}");
    Ok(out)
}

/// Decodes a part's stored bytes (`zt.zstd-seekable/1`) to exactly `decoded_length` bytes.
pub fn decode_part(stored: &[u8], encoding: &str, decoded_length: u64) -> Result<Vec<u8>, String> {
    if encoding != ENCODING_ZSTD_SEEKABLE {
        return Err(message(&ZtError::new(
            Rule::Unsupported,
            format!("encoding {encoding:?} is not supported"),
        )));
    }
    tensorlane_core::zt::seekable::decode(stored, decoded_length).map_err(|e| message(&e))
}

/// Deep-verifies a whole in-memory file (shards are not available: their parts are reported as
/// unresolved). Returns `{"partsDigestChecked", "partsWithoutDigest", "unresolved": [[o, p]]}`.
pub fn verify_image(bytes: &[u8]) -> Result<String, String> {
    let reader = Reader::open(bytes).map_err(|e| message(&e))?;
    let r = reader.verify().map_err(|e| message(&reader.with_location(e)))?;
    Ok(serde_json::json!({
        "partsDigestChecked": r.parts_digest_checked,
        "partsWithoutDigest": r.parts_without_digest,
        "unresolved": r.unresolved.iter().map(|(o, p)| [o, p]).collect::<Vec<_>>(),
        "dataShard": reader.is_data_shard(),
    })
    .to_string())
}

/// Writes a `.zt` file from a plan: `{"canonical": bool, "attributes"?: {...}, "objects": [{"name",
/// "shape", "layout", "attributes"?, "parts": [{"name", "dtype" (NumPy name), "type"?, "buf": i}]}]}`
/// with the part bytes in `bufs`. Objects are sorted by name (bytewise) first, as canonical form
/// requires.
pub fn write_plan(plan: &str, bufs: &[&[u8]]) -> Result<Vec<u8>, String> {
    let plan: J = serde_json::from_str(plan).map_err(|e| format!("bad write plan: {e}"))?;
    let canonical = plan.get("canonical").and_then(J::as_bool).unwrap_or(true);
    let opts = if canonical {
        Options::canonical()
    } else {
        Options::non_canonical()
    };
    let mut w = Writer::new(Vec::new(), opts).map_err(|e| e.to_string())?;
    if let Some(a) = plan.get("attributes").filter(|a| !a.is_null()) {
        w.set_attributes(json_cbor(a)).map_err(|e| e.to_string())?;
    }
    let mut objects: Vec<&J> = plan
        .get("objects")
        .and_then(J::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let name_of = |o: &J| o.get("name").and_then(J::as_str).unwrap_or("").to_string();
    objects.sort_by_key(|o| name_of(o).into_bytes());
    for o in objects {
        let name = name_of(o);
        let shape: Vec<u64> = o
            .get("shape")
            .and_then(J::as_array)
            .map(|a| a.iter().filter_map(J::as_u64).collect())
            .unwrap_or_default();
        let layout = o.get("layout").and_then(J::as_str).unwrap_or("dense");
        let mut spec = ObjectSpec::new(&shape, layout);
        if let Some(a) = o.get("attributes").filter(|a| !a.is_null()) {
            spec = spec.attributes(json_cbor(a));
        }
        let mut parts = Vec::new();
        for p in o.get("parts").and_then(J::as_array).into_iter().flatten() {
            let pname = p.get("name").and_then(J::as_str).unwrap_or("data");
            let dname = p.get("dtype").and_then(J::as_str).unwrap_or("");
            let (dtype, implied) = match dname {
                "float8_e4m3fn" => (DType::U8, Some("f8_e4m3fn")),
                "float8_e5m2" => (DType::U8, Some("f8_e5m2")),
                "float8_e4m3fnuz" => (DType::U8, Some("f8_e4m3fnuz")),
                "float8_e5m2fnuz" => (DType::U8, Some("f8_e5m2fnuz")),
                "float8_e8m0fnu" => (DType::U8, Some("f8_e8m0")),
                "float4_e2m1fn" => (DType::U8, Some("f4_e2m1")),
                d => (
                    DType::from_name(d)
                        .ok_or_else(|| format!("object {name:?} part {pname:?}: unknown dtype {d:?}"))?,
                    None,
                ),
            };
            let buf = p
                .get("buf")
                .and_then(J::as_u64)
                .and_then(|i| bufs.get(i as usize))
                .ok_or_else(|| format!("object {name:?} part {pname:?}: no data"))?;
            let mut s = PartSpec::new(pname, dtype, buf);
            if let Some(l) = p.get("type").and_then(J::as_str).or(implied) {
                s = s.logical(l);
            }
            parts.push(s);
        }
        w.add_object(&name, &spec, &parts).map_err(|e| e.to_string())?;
    }
    w.finish().map(|f| f.sink).map_err(|e| e.to_string())
}
