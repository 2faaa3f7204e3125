//! Tenso packets for both JavaScript backends: the two describe decoded packets and read encode
//! plans with the very same code.
//!
//! Decoding produces a *descriptor*: JSON metadata in which every byte range that lies inside
//! the caller's input is given as `"off"`/`"len"` (absolute offsets into the input), and every
//! byte range the decoder had to produce itself (a decompressed body) as `"own": i`, an index into
//! a list of owned buffers handed to JavaScript beside the JSON. The shared JavaScript layer
//! (`js/common.js`) turns offsets into TypedArray views on the caller's `ArrayBuffer`.
//!
//! Encoding reads a *plan*: JSON metadata plus a list of byte buffers referenced by index.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::Value;
use tensorlane_core::dtype::DType;
use tensorlane_core::tensor::Tensor;
use tensorlane_core::wire::{
    Bundle, DecodeOptions, EncodeOptions, Packet, QDType, QuantScheme, Quantized, Sparse, SparseFormat, Strings,
};

/// Decode option bits, as packed by `js/common.js`.
pub const F_VERIFY_INTEGRITY: u32 = 1;
/// See [`DecodeOptions::require_integrity`].
pub const F_REQUIRE_INTEGRITY: u32 = 2;
/// See [`DecodeOptions::allow_trailing_bytes`].
pub const F_ALLOW_TRAILING: u32 = 4;
/// See [`DecodeOptions::allow_v2`].
pub const F_ALLOW_V2: u32 = 8;
/// See [`DecodeOptions::strict_keys`].
pub const F_STRICT_KEYS: u32 = 16;
/// See [`DecodeOptions::validate_sparse`].
pub const F_VALIDATE_SPARSE: u32 = 32;

/// Stream limits from JS numbers; a negative or non-finite limit keeps the core's default.
pub fn stream_limits(max_packet_bytes: f64, max_buffered_bytes: f64) -> tensorlane_core::wire::StreamLimits {
    let mut l = tensorlane_core::wire::StreamLimits::default();
    if max_packet_bytes.is_finite() && max_packet_bytes >= 0.0 {
        l.max_packet_bytes = max_packet_bytes.min(usize::MAX as f64) as usize;
    }
    if max_buffered_bytes.is_finite() && max_buffered_bytes >= 0.0 {
        l.max_buffered_bytes = max_buffered_bytes.min(usize::MAX as f64) as usize;
    }
    l
}

/// Unpacks the option bits; a non-positive or non-finite cap keeps the default.
pub fn decode_options(bits: u32, max_decompressed_bytes: f64) -> DecodeOptions {
    let mut o = DecodeOptions {
        verify_integrity: bits & F_VERIFY_INTEGRITY != 0,
        require_integrity: bits & F_REQUIRE_INTEGRITY != 0,
        allow_trailing_bytes: bits & F_ALLOW_TRAILING != 0,
        allow_v2: bits & F_ALLOW_V2 != 0,
        strict_keys: bits & F_STRICT_KEYS != 0,
        validate_sparse: bits & F_VALIDATE_SPARSE != 0,
        ..DecodeOptions::default()
    };
    if max_decompressed_bytes.is_finite() && max_decompressed_bytes >= 0.0 {
        o.max_decompressed_bytes = (max_decompressed_bytes as u64).min(o.max_decompressed_bytes);
    }
    o
}

/// Appends `s` as a JSON string literal.
pub fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string()));
}

/// Appends `[d0,d1,...]`.
pub fn json_shape(out: &mut String, shape: &[u64]) {
    out.push('[');
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{d}");
    }
    out.push(']');
}

/// The descriptor of a dense tensor whose body lies at `off..off+len` of the input.
pub fn dense_at(out: &mut String, dtype: DType, shape: &[u64], off: usize, len: usize) {
    out.push_str("{\"kind\":\"dense\",\"dtype\":\"");
    out.push_str(dtype.name());
    out.push_str("\",\"shape\":");
    json_shape(out, shape);
    let _ = write!(out, ",\"off\":{off},\"len\":{len}}}");
}

/// Appends `"off":N,"len":N` when `bytes` lies inside `region` (which starts at input offset
/// `base`), else moves or copies the bytes into `owned` and appends `"own":i`.
fn bytes_ref(out: &mut String, bytes: Cow<'_, [u8]>, region: &[u8], base: usize, owned: &mut Vec<Vec<u8>>) {
    if let Cow::Borrowed(b) = &bytes {
        let start = region.as_ptr() as usize;
        let p = b.as_ptr() as usize;
        if p >= start && p + b.len() <= start + region.len() {
            let _ = write!(out, "\"off\":{},\"len\":{}", base + (p - start), b.len());
            return;
        }
    }
    let _ = write!(out, "\"own\":{}", owned.len());
    owned.push(bytes.into_owned());
}

fn f32_bits(out: &mut String, v: &[f32]) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{}", x.to_bits());
    }
    out.push(']');
}

/// Appends the descriptor of a decoded packet. `region` is the buffer the packet was decoded
/// from and `base` its offset in the caller's input.
pub fn describe(out: &mut String, p: Packet<'_>, region: &[u8], base: usize, owned: &mut Vec<Vec<u8>>) {
    match p {
        Packet::Dense(t) => {
            out.push_str("{\"kind\":\"dense\",\"dtype\":\"");
            out.push_str(t.dtype().name());
            out.push_str("\",\"shape\":");
            json_shape(out, t.shape());
            out.push(',');
            bytes_ref(out, t.into_data(), region, base, owned);
            out.push('}');
        }
        Packet::Bundle(b) => {
            out.push_str("{\"kind\":\"bundle\",\"entries\":[");
            for (i, (k, v)) in b.entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('[');
                json_str(out, &k);
                out.push(',');
                describe(out, v, region, base, owned);
                out.push(']');
            }
            out.push_str("]}");
        }
        Packet::Sparse(s) => {
            out.push_str("{\"kind\":\"sparse\",\"format\":\"");
            out.push_str(s.format.name());
            out.push_str("\",\"shape\":");
            json_shape(out, &s.shape);
            out.push_str(",\"components\":[");
            let [a, b, c] = s.components;
            for (i, t) in [a, b, c].into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                describe(out, Packet::Dense(t), region, base, owned);
            }
            out.push_str("]}");
        }
        Packet::Quantized(q) => {
            out.push_str("{\"kind\":\"quantized\",\"qdtype\":\"");
            out.push_str(q.qdtype.name());
            out.push_str("\",\"shape\":");
            json_shape(out, &q.shape);
            out.push_str(",\"scheme\":\"");
            out.push_str(q.scheme.name());
            let _ = write!(
                out,
                "\",\"schemeCode\":{},\"axis\":{},\"groupSize\":{},\"scales\":",
                q.scheme.code(),
                q.axis,
                q.group_size
            );
            f32_bits(out, &q.scales);
            out.push_str(",\"zeroPoints\":");
            f32_bits(out, &q.zero_points);
            out.push(',');
            bytes_ref(out, q.data, region, base, owned);
            out.push('}');
        }
        Packet::Strings(s) => {
            // Offsets (count + 1 little-endian u64) immediately precede the payload on the wire.
            let count = s.len();
            let _ = write!(out, "{{\"kind\":\"string\",\"count\":{count},");
            let payload = s.payload();
            let start = region.as_ptr() as usize;
            let p = payload.as_ptr() as usize;
            let olen = (count + 1) * 8;
            if p >= start + olen && p + payload.len() <= start + region.len() {
                let off = base + (p - start) - olen;
                let _ = write!(out, "\"off\":{off},\"len\":{}", olen + payload.len());
            } else {
                let mut v = Vec::with_capacity(olen + payload.len());
                for o in s.offsets() {
                    v.extend_from_slice(&o.to_le_bytes());
                }
                v.extend_from_slice(payload);
                let _ = write!(out, "\"own\":{}", owned.len());
                owned.push(v);
            }
            out.push('}');
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encode plans.

fn field<'v>(v: &'v Value, name: &str) -> Result<&'v Value, String> {
    v.get(name)
        .ok_or_else(|| format!("encode plan: missing field {name:?}"))
}

fn as_u64(v: &Value, what: &str) -> Result<u64, String> {
    v.as_u64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= 9007199254740991.0)
                .map(|f| f as u64)
        })
        .ok_or_else(|| format!("{what} must be a non-negative integer, got {v}"))
}

fn shape_of(v: &Value) -> Result<Vec<u64>, String> {
    field(v, "shape")?
        .as_array()
        .ok_or_else(|| "shape must be an array of integers".to_string())?
        .iter()
        .map(|d| as_u64(d, "each shape dimension"))
        .collect()
}

fn buf<'b>(v: &Value, name: &str, bufs: &[&'b [u8]]) -> Result<&'b [u8], String> {
    let i = as_u64(field(v, name)?, name)? as usize;
    bufs.get(i)
        .copied()
        .ok_or_else(|| format!("encode plan: buffer {i} missing"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn dense<'b>(v: &Value, bufs: &[&'b [u8]]) -> Result<Tensor<'b>, String> {
    let name = field(v, "dtype")?.as_str().ok_or("dtype must be a string")?;
    let dtype = DType::from_name(name).ok_or_else(|| format!("unknown dtype {name:?}"))?;
    let shape = shape_of(v)?;
    let data = buf(v, "b", bufs)?;
    Tensor::new(dtype, shape.clone(), data).map_err(|e| format!("dense tensor {name} {shape:?}: {e}"))
}

/// Builds a quantized packet from its plan.
pub fn quantized<'b>(v: &Value, bufs: &[&'b [u8]]) -> Result<Quantized<'b>, String> {
    let name = field(v, "qdtype")?.as_str().ok_or("qdtype must be a string")?;
    let qdtype = QDType::from_name(name)
        .ok_or_else(|| format!("unknown quantized dtype {name:?} (qint8, quint8, qint4, quint4)"))?;
    let scheme = as_u64(field(v, "schemeCode")?, "schemeCode")?;
    let axis = as_u64(field(v, "axis")?, "axis")?;
    let group_size = as_u64(field(v, "groupSize")?, "groupSize")?;
    if scheme > 255 || axis > 255 || group_size > u32::MAX as u64 {
        return Err("schemeCode and axis must fit a byte, groupSize 32 bits".into());
    }
    Ok(Quantized {
        qdtype,
        shape: shape_of(v)?,
        scheme: QuantScheme::from_code(scheme as u8),
        axis: axis as u8,
        group_size: group_size as u32,
        scales: f32s(buf(v, "scales", bufs)?),
        zero_points: f32s(buf(v, "zeroPoints", bufs)?),
        data: Cow::Borrowed(buf(v, "b", bufs)?),
    })
}

/// Builds the packet a plan describes (borrowing the buffers).
pub fn packet<'b>(v: &Value, bufs: &[&'b [u8]], depth: usize) -> Result<Packet<'b>, String> {
    if depth > 64 {
        return Err("values nested deeper than 64 levels".into());
    }
    let kind = field(v, "kind")?.as_str().ok_or("kind must be a string")?;
    Ok(match kind {
        "dense" => Packet::Dense(dense(v, bufs)?),
        "bundle" => {
            let mut b = Bundle::new();
            for e in field(v, "entries")?.as_array().ok_or("entries must be an array")? {
                let pair = e
                    .as_array()
                    .filter(|p| p.len() == 2)
                    .ok_or("bundle entries are [key, value] pairs")?;
                let key = pair[0].as_str().ok_or("bundle keys are strings")?;
                b.entries
                    .push((Cow::Owned(key.to_string()), packet(&pair[1], bufs, depth + 1)?));
            }
            Packet::Bundle(b)
        }
        "sparse" => {
            let f = field(v, "format")?.as_str().ok_or("format must be a string")?;
            let format = match f {
                "coo" => SparseFormat::Coo,
                "csr" => SparseFormat::Csr,
                "csc" => SparseFormat::Csc,
                _ => return Err(format!("unknown sparse format {f:?} (coo, csr, csc)")),
            };
            let c = field(v, "components")?
                .as_array()
                .filter(|c| c.len() == 3)
                .ok_or("sparse needs three components")?;
            Packet::from(Sparse {
                format,
                shape: shape_of(v)?,
                components: [dense(&c[0], bufs)?, dense(&c[1], bufs)?, dense(&c[2], bufs)?],
            })
        }
        "quantized" => Packet::from(quantized(v, bufs)?),
        "string" => {
            let payload = buf(v, "b", bufs)?;
            let mut items: Vec<&[u8]> = Vec::new();
            let mut at = 0usize;
            for l in field(v, "lengths")?.as_array().ok_or("lengths must be an array")? {
                let l = as_u64(l, "string length")? as usize;
                let end = at
                    .checked_add(l)
                    .filter(|&e| e <= payload.len())
                    .ok_or("string lengths exceed the payload")?;
                items.push(&payload[at..end]);
                at = end;
            }
            Packet::Strings(Strings::from_items(&items))
        }
        other => {
            return Err(format!(
                "unknown kind {other:?} (dense, bundle, sparse, quantized, string)"
            ));
        }
    })
}

/// Encode options from the plan's `"options"` object.
pub fn encode_options(v: Option<&Value>) -> Result<EncodeOptions, String> {
    let mut o = EncodeOptions::default();
    let Some(v) = v else { return Ok(o) };
    let flag = |name: &str, d: bool| v.get(name).and_then(Value::as_bool).unwrap_or(d);
    o.integrity = flag("integrity", o.integrity);
    o.compress = flag("compress", o.compress);
    o.compress_in_containers = flag("compressInContainers", o.compress_in_containers);
    o.skip_incompressible = flag("skipIncompressible", o.skip_incompressible);
    o.sparse_integrity = flag("sparseIntegrity", o.sparse_integrity);
    if let Some(a) = v.get("alignment").filter(|a| !a.is_null()) {
        o.alignment = as_u64(a, "alignment")?;
    }
    Ok(o)
}

/// Encodes a plan `{"value": ..., "options": ...}` into packet bytes.
pub fn encode_plan(plan: &str, bufs: &[&[u8]]) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_str(plan).map_err(|e| format!("encode plan: {e}"))?;
    let p = packet(field(&v, "value")?, bufs, 0)?;
    let o = encode_options(v.get("options"))?;
    tensorlane_core::wire::encode(&p, &o).map_err(|e| e.to_string())
}

/// Dequantizes a quantized plan (`{"value": {...}}`) with the core's float32 arithmetic.
pub fn dequantize_plan(plan: &str, bufs: &[&[u8]]) -> Result<Vec<f32>, String> {
    let v: Value = serde_json::from_str(plan).map_err(|e| format!("dequantize plan: {e}"))?;
    quantized(field(&v, "value")?, bufs)?
        .dequantize()
        .map_err(|e| e.to_string())
}
