//! The `.zt` v2 writer behind `writeZt()` on both JavaScript backends: a JSON plan and the part
//! bytes in, the canonical (or not) file out, written by the core's writer. Reading `.zt` files is
//! not here: they open like every format, as a catalog ([`crate::formats`]).

use serde_json::Value as J;
use tensorlane_core::dtype::DType;
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::writer::{ObjectSpec, Options, PartSpec, Writer};

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
