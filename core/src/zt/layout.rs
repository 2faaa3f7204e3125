//! L2 layouts (spec §7): metadata rules of `dense`, `zt.sparse_csr/1`, `zt.sparse_coo/1`,
//! `zt.quant_group/1`, `zt.mx/1` and `gguf.<type>/1`.
//!
//! Open-time validation ([`Profiles::Reference`]) checks `dense` and `zt.sparse_csr/1` only, like
//! the reference `Vocabulary::standard()`, so this reader accepts and rejects exactly the images
//! the reference does. [`Profiles::All`] adds the COO, group-quantization, MX and GGUF size
//! equations; it is used before any of those objects is interpreted (and by verify). That is
//! stricter than the reference, which reads those profiles structurally only (spec §7, "legal
//! under the spec"). Unknown layouts are always structural: no layout rule is checked.

use alloc::string::String;

use super::cbor::Value;
use super::format::{ElementType, LogicalType};
use super::manifest::{Object, Part};
use super::rule::Rule;
use super::{Error, Result};
use crate::dtype::DType;

/// Layout id of the core dense layout.
pub const DENSE: &str = "dense";
/// Layout id of compressed sparse rows.
pub const SPARSE_CSR: &str = "zt.sparse_csr/1";
/// Layout id of coordinate-list sparse tensors.
pub const SPARSE_COO: &str = "zt.sparse_coo/1";
/// Layout id of affine group quantization.
pub const QUANT_GROUP: &str = "zt.quant_group/1";
/// Layout id of OCP microscaling.
pub const MX: &str = "zt.mx/1";
/// The ggml block types `gguf.<type>/1` accepts.
pub const GGUF_TYPES: [&str; 22] = [
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k", "iq1_s", "iq1_m",
    "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_nl", "iq4_xs", "mxfp4",
];

/// Which layout profiles a check covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profiles {
    /// `dense` and `zt.sparse_csr/1` (what the reference validates at open).
    Reference,
    /// Every profile of spec §7.
    All,
}

/// The ggml type of a `gguf.<type>/1` layout id, when it is one this reader knows.
pub fn gguf_type(layout: &str) -> Option<&str> {
    let t = layout.strip_prefix("gguf.")?.strip_suffix("/1")?;
    GGUF_TYPES.contains(&t).then_some(t)
}

/// True when `layout` is one of the profiles of spec §7 (anything else is structural).
pub fn is_known_layout(layout: &str) -> bool {
    matches!(layout, DENSE | SPARSE_CSR | SPARSE_COO | QUANT_GROUP | MX) || gguf_type(layout).is_some()
}

fn rule(msg: impl Into<String>) -> Error {
    Error::new(Rule::LayoutRule, msg)
}

fn expect_parts(obj: &Object, names: &[&str], layout: &str) -> Result<()> {
    let ok = obj.parts.len() == names.len() && names.iter().all(|n| obj.parts.contains_key(*n));
    if ok {
        Ok(())
    } else {
        let have: alloc::vec::Vec<&str> = obj.parts.keys().map(|s| s.as_str()).collect();
        Err(rule(alloc::format!(
            "{layout} needs exactly the parts {names:?}, found {have:?}"
        )))
    }
}

fn part<'o>(obj: &'o Object, name: &str) -> Result<&'o Part> {
    obj.parts
        .get(name)
        .ok_or_else(|| rule(alloc::format!("missing part {name:?}")))
}

fn size_eq(p: &Part, name: &str, expected: Option<u64>, what: &str) -> Result<()> {
    match expected {
        Some(e) if e == p.decoded_size() => Ok(()),
        Some(e) => Err(rule(alloc::format!(
            "part {name:?} decodes to {} bytes, but {what} requires {e}",
            p.decoded_size()
        ))),
        None => Err(rule(alloc::format!(
            "part {name:?}: the size {what} requires overflows u64"
        ))),
    }
}

fn index_width(p: &Part, name: &str, layout: &str) -> Result<u64> {
    if !matches!(p.dtype, DType::U32 | DType::U64) || p.logical.is_some() {
        return Err(rule(alloc::format!(
            "{layout}: {name:?} must be u32 or u64 without a logical type"
        )));
    }
    Ok(p.dtype.itemsize() as u64)
}

/// Checks `obj` (named `name`) against its layout profile; errors carry the object name.
pub fn check_layout(name: &str, obj: &Object, profiles: Profiles) -> Result<()> {
    let r = match obj.layout.as_str() {
        DENSE => check_dense(obj),
        SPARSE_CSR => check_csr(obj).map(|_| ()),
        _ if profiles == Profiles::Reference => Ok(()),
        SPARSE_COO => check_coo(obj).map(|_| ()),
        QUANT_GROUP => check_quant_group(obj),
        MX => check_mx(obj),
        l if gguf_type(l).is_some() => check_gguf(obj),
        _ => Ok(()),
    };
    r.map_err(|mut e| {
        if e.object.is_none() {
            e.object = Some(name.into());
        }
        e
    })
}

fn check_dense(obj: &Object) -> Result<()> {
    expect_parts(obj, &["data"], DENSE)?;
    let p = part(obj, "data")?;
    let et = p.element_type();
    if et == ElementType::Unknown {
        return Ok(());
    }
    let n = obj.elements();
    match et.size(n) {
        Some(s) if s == p.decoded_size() => Ok(()),
        Some(s) => {
            let mut e = Error::new(
                Rule::DenseSize,
                alloc::format!(
                    "dense data decodes to {} bytes, but {n} elements of its type take {s}",
                    p.decoded_size()
                ),
            );
            e.part = Some("data".into());
            Err(e)
        }
        None => Err(Error::new(
            Rule::DenseSize,
            alloc::format!("the size of {n} elements overflows u64"),
        )),
    }
}

/// Derived CSR quantities: `(rows, cols, index width, nnz)`.
pub(crate) fn check_csr(obj: &Object) -> Result<(u64, u64, u64, u64)> {
    if obj.shape.len() != 2 {
        return Err(rule(alloc::format!(
            "{SPARSE_CSR} needs rank 2, the shape has rank {}",
            obj.shape.len()
        )));
    }
    expect_parts(obj, &["indices", "indptr", "values"], SPARSE_CSR)?;
    let (indices, indptr, values) = (part(obj, "indices")?, part(obj, "indptr")?, part(obj, "values")?);
    let w = index_width(indices, "indices", SPARSE_CSR)?;
    if indptr.dtype != indices.dtype || indptr.logical.is_some() {
        return Err(rule("indptr must have the dtype of indices and no logical type"));
    }
    let (r, c) = (obj.shape[0], obj.shape[1]);
    let need = r
        .checked_add(1)
        .and_then(|r1| r1.checked_mul(w))
        .ok_or_else(|| Error::new(Rule::Shape, "(rows + 1) × index width overflows u64"))?;
    size_eq(indptr, "indptr", Some(need), "rows + 1 indices")?;
    if !indices.decoded_size().is_multiple_of(w) {
        return Err(rule(alloc::format!(
            "indices decode to {} bytes, not a multiple of {w}",
            indices.decoded_size()
        )));
    }
    let nnz = indices.decoded_size() / w;
    if values.element_type() != ElementType::Unknown {
        size_eq(values, "values", values.element_type().size(nnz), "nnz values")?;
    }
    Ok((r, c, w, nnz))
}

/// Derived COO quantities: `(index width, nnz)`.
pub(crate) fn check_coo(obj: &Object) -> Result<(u64, u64)> {
    if obj.shape.is_empty() {
        return Err(rule(alloc::format!("{SPARSE_COO} needs rank ≥ 1")));
    }
    expect_parts(obj, &["coords", "values"], SPARSE_COO)?;
    let (coords, values) = (part(obj, "coords")?, part(obj, "values")?);
    let w = index_width(coords, "coords", SPARSE_COO)?;
    let per = w * obj.shape.len() as u64;
    if !coords.decoded_size().is_multiple_of(per) {
        return Err(rule(alloc::format!(
            "coords decode to {} bytes, not a multiple of {w} × rank {}",
            coords.decoded_size(),
            obj.shape.len()
        )));
    }
    let nnz = coords.decoded_size() / per;
    if values.element_type() != ElementType::Unknown {
        size_eq(values, "values", values.element_type().size(nnz), "nnz values")?;
    }
    Ok((w, nnz))
}

fn attr<'o>(obj: &'o Object, key: &str) -> Result<&'o Value<'static>> {
    obj.attribute(key)
        .ok_or_else(|| rule(alloc::format!("missing required attribute {key:?}")))
}

fn attr_uint(obj: &Object, key: &str) -> Result<u64> {
    attr(obj, key)?
        .as_u64()
        .ok_or_else(|| rule(alloc::format!("attribute {key:?} must be an unsigned integer")))
}

fn attr_text<'o>(v: &'o Value<'static>, key: &str) -> Result<&'o str> {
    v.as_text()
        .ok_or_else(|| rule(alloc::format!("attribute {key:?} must be text")))
}

fn sub<'o>(map: &'o Value<'static>, key: &str, whose: &str) -> Result<&'o Value<'static>> {
    map.get(key)
        .ok_or_else(|| rule(alloc::format!("{whose} has no {key:?}")))
}

fn word_dtype(s: &str) -> Option<DType> {
    Some(match s {
        "u8" => DType::U8,
        "u16" => DType::U16,
        "u32" => DType::U32,
        "u64" => DType::U64,
        _ => return None,
    })
}

fn unsigned_of(d: DType) -> DType {
    match d {
        DType::I8 => DType::U8,
        DType::I16 => DType::U16,
        DType::I32 => DType::U32,
        DType::I64 => DType::U64,
        other => other,
    }
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

/// Parsed `zt.quant_group/1` parameters (spec §7.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantGroup {
    /// Code width in bits.
    pub bits: u32,
    /// Codes per scale along `axis` (0 = per channel).
    pub group_size: u64,
    /// The axis groups run along.
    pub axis: usize,
    /// Packing word dtype (unsigned).
    pub word: DType,
    /// True for `lsb_first` (lowest index in the low bits), false for `msb_first`.
    pub lsb_first: bool,
    /// Codes per word.
    pub per_word: u64,
    /// `"f32_factors"`, `"f16_factors"` or `"e8m0_exponent"`.
    pub scale_form: String,
    /// `"none"`, `"implied"` or `"tensor"`.
    pub zero_form: String,
    /// The implied zero point (for `"implied"`).
    pub zero_value: Option<i64>,
    /// For `"tensor"`: true when zeros are packed like the data (`"same_as_data"`).
    pub zeros_packed: bool,
}

/// Parses and checks the attributes and size equations of a `zt.quant_group/1` object.
pub fn quant_group_params(obj: &Object) -> Result<QuantGroup> {
    let q = quant_group_attributes(obj)?;
    check_quant_group_parts(obj, &q)?;
    Ok(q)
}

/// The attributes of a `zt.quant_group/1` object (bits, group size, axis, packing, scale form,
/// zero point), checked against each other and the shape.
fn quant_group_attributes(obj: &Object) -> Result<QuantGroup> {
    let bits = attr_uint(obj, "bits")?;
    if !matches!(bits, 2..=6 | 8) {
        return Err(rule(alloc::format!("bits must be 2, 3, 4, 5, 6 or 8, not {bits}")));
    }
    let group_size = attr_uint(obj, "group_size")?;
    let axis = attr_uint(obj, "axis")?;
    if axis >= obj.shape.len() as u64 {
        return Err(rule(alloc::format!(
            "axis {axis} is not below the rank {}",
            obj.shape.len()
        )));
    }
    let axis = axis as usize;
    let packing = attr(obj, "packing")?;
    if packing.as_map().is_none() {
        return Err(rule("attribute \"packing\" must be a map"));
    }
    let word_s = attr_text(sub(packing, "word", "packing")?, "packing.word")?;
    let word =
        word_dtype(word_s).ok_or_else(|| rule(alloc::format!("packing.word {word_s:?} is not u8, u16, u32 or u64")))?;
    let lsb_first = match attr_text(sub(packing, "order", "packing")?, "packing.order")? {
        "lsb_first" => true,
        "msb_first" => false,
        o => {
            return Err(rule(alloc::format!(
                "packing.order {o:?} is not lsb_first or msb_first"
            )));
        }
    };
    let word_bits = 8 * word.itemsize() as u64;
    if !word_bits.is_multiple_of(bits) {
        return Err(rule(alloc::format!(
            "{bits}-bit codes do not fill a {word_bits}-bit word exactly"
        )));
    }
    let per_word = word_bits / bits;
    let pw = sub(packing, "per_word", "packing")?
        .as_u64()
        .ok_or_else(|| rule("packing.per_word must be an unsigned integer"))?;
    if pw != per_word {
        return Err(rule(alloc::format!(
            "packing.per_word is {pw}, but {word_bits}-bit words hold {per_word} codes"
        )));
    }
    let scale_form = attr_text(attr(obj, "scale_form")?, "scale_form")?;
    let zp = attr(obj, "zero_point")?;
    if zp.as_map().is_none() {
        return Err(rule("attribute \"zero_point\" must be a map"));
    }
    let zero_form = attr_text(sub(zp, "form", "zero_point")?, "zero_point.form")?;
    let mut zero_value = None;
    let mut zeros_packed = false;
    match zero_form {
        "none" => {}
        "implied" => {
            zero_value = Some(match sub(zp, "value", "zero_point")? {
                Value::Uint(n) if *n <= i64::MAX as u64 => *n as i64,
                Value::Neg(n) if *n < i64::MAX as u64 => -1 - *n as i64,
                _ => return Err(rule("zero_point.value must be an integer")),
            });
        }
        "tensor" => {
            zeros_packed = match attr_text(sub(zp, "packing", "zero_point")?, "zero_point.packing")? {
                "same_as_data" => true,
                "plain" => false,
                o => {
                    return Err(rule(alloc::format!(
                        "zero_point.packing {o:?} is not same_as_data or plain"
                    )));
                }
            };
        }
        o => {
            return Err(rule(alloc::format!(
                "zero_point.form {o:?} is not none, implied or tensor"
            )));
        }
    }
    Ok(QuantGroup {
        bits: bits as u32,
        group_size,
        axis,
        word,
        lsb_first,
        per_word,
        scale_form: scale_form.into(),
        zero_form: zero_form.into(),
        zero_value,
        zeros_packed,
    })
}

/// The parts of a `zt.quant_group/1` object (which are present, their dtypes and the size
/// equations) against its checked attributes `q`.
fn check_quant_group_parts(obj: &Object, q: &QuantGroup) -> Result<()> {
    let (group_size, axis, word, per_word, zeros_packed) = (q.group_size, q.axis, q.word, q.per_word, q.zeros_packed);
    let (scale_form, zero_form) = (q.scale_form.as_str(), q.zero_form.as_str());
    let word_s = attr_text(sub(attr(obj, "packing")?, "word", "packing")?, "packing.word")?;
    if zero_form == "tensor" {
        expect_parts(obj, &["data", "scales", "zeros"], QUANT_GROUP)?;
    } else {
        expect_parts(obj, &["data", "scales"], QUANT_GROUP)?;
    }
    let data = part(obj, "data")?;
    if unsigned_of(data.dtype) != word {
        return Err(rule(alloc::format!(
            "data dtype {} does not match packing.word {word_s:?}",
            data.dtype
        )));
    }
    let scales = part(obj, "scales")?;
    match scale_form {
        "f32_factors" if is_float(scales.dtype) && scales.logical.is_none() => {}
        "f16_factors" if matches!(scales.dtype, DType::F16 | DType::BF16) && scales.logical.is_none() => {}
        "e8m0_exponent" if scales.dtype == DType::U8 && scales.logical_type() == Some(LogicalType::F8E8M0) => {}
        "f32_factors" | "f16_factors" | "e8m0_exponent" => {
            return Err(rule(alloc::format!(
                "scales dtype {} does not fit scale_form {scale_form:?}",
                scales.dtype
            )));
        }
        o => {
            return Err(rule(alloc::format!(
                "scale_form {o:?} is not f32_factors, f16_factors or e8m0_exponent"
            )));
        }
    }
    let along = obj.shape[axis];
    let groups = if group_size == 0 {
        along
    } else {
        if !along.is_multiple_of(group_size) {
            return Err(rule(alloc::format!(
                "group_size {group_size} does not divide shape[{axis}] = {along}"
            )));
        }
        along / group_size
    };
    let lanes = obj
        .shape
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != axis)
        .try_fold(1u64, |a, (_, &d)| a.checked_mul(d));
    let lanes = lanes.ok_or_else(|| rule("the lane count overflows u64"))?;
    let codes = obj.elements();
    if !codes.is_multiple_of(per_word) {
        return Err(rule(alloc::format!(
            "{codes} codes do not fill whole {per_word}-code words"
        )));
    }
    let ww = word.itemsize() as u64;
    size_eq(
        data,
        "data",
        (codes / per_word).checked_mul(ww),
        "the packed code count",
    )?;
    let gl = groups.checked_mul(lanes);
    size_eq(
        scales,
        "scales",
        gl.and_then(|g| g.checked_mul(scales.dtype.itemsize() as u64)),
        "one scale per group",
    )?;
    if zero_form == "tensor" {
        let zeros = part(obj, "zeros")?;
        let need = if zeros_packed {
            if unsigned_of(zeros.dtype) != word {
                return Err(rule("zeros packed same_as_data must use the data word dtype"));
            }
            let g = gl.ok_or_else(|| rule("the group count overflows u64"))?;
            if !g.is_multiple_of(per_word) {
                return Err(rule(alloc::format!(
                    "{g} zero points do not fill whole {per_word}-code words"
                )));
            }
            (g / per_word).checked_mul(ww)
        } else {
            gl.and_then(|g| g.checked_mul(zeros.dtype.itemsize() as u64))
        };
        size_eq(zeros, "zeros", need, "one zero point per group")?;
    }
    Ok(())
}

fn check_quant_group(obj: &Object) -> Result<()> {
    quant_group_params(obj).map(|_| ())
}

/// Parsed `zt.mx/1` parameters: `(block_size, axis)`; the element type is `None` when
/// unrecognised (refuse to decode; structural access only).
pub fn mx_params(obj: &Object) -> Result<(u64, usize, Option<ElementType>)> {
    expect_parts(obj, &["data", "scales"], MX)?;
    let (data, scales) = (part(obj, "data")?, part(obj, "scales")?);
    if scales.dtype != DType::U8 || scales.logical_type() != Some(LogicalType::F8E8M0) {
        return Err(rule("zt.mx/1 scales must be u8 with type f8_e8m0"));
    }
    if obj.shape.is_empty() {
        return Err(rule("zt.mx/1 needs rank ≥ 1"));
    }
    let block = attr_uint(obj, "block_size")?;
    let axis = match obj.attribute("axis") {
        None => obj.shape.len() as u64 - 1,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| rule("attribute \"axis\" must be an unsigned integer"))?,
    };
    if axis >= obj.shape.len() as u64 {
        return Err(rule(alloc::format!(
            "axis {axis} is not below the rank {}",
            obj.shape.len()
        )));
    }
    let axis = axis as usize;
    if block < 2 || !obj.shape[axis].is_multiple_of(block) {
        return Err(rule(alloc::format!(
            "block_size {block} must be ≥ 2 and divide shape[{axis}] = {}",
            obj.shape[axis]
        )));
    }
    match attr_text(attr(obj, "scale_form")?, "scale_form")? {
        "e8m0_exponent" => {}
        o => {
            return Err(rule(alloc::format!(
                "zt.mx/1 scale_form must be \"e8m0_exponent\", not {o:?}"
            )));
        }
    }
    let et = match data.element_type() {
        e @ ElementType::Logical(LogicalType::F4E2M1 | LogicalType::F8E4M3Fn | LogicalType::F8E5M2) => Some(e),
        e @ ElementType::Plain(DType::I8) => Some(e),
        _ => None,
    };
    let elements = obj.elements();
    if let Some(e) = et {
        size_eq(data, "data", e.size(elements), "the element count")?;
    }
    size_eq(scales, "scales", Some(elements / block), "one scale per block")?;
    Ok((block, axis, et))
}

fn check_mx(obj: &Object) -> Result<()> {
    mx_params(obj).map(|_| ())
}

/// Parsed `gguf.<type>/1` constants: `(elems_per_block, block_bytes)`.
pub fn gguf_params(obj: &Object) -> Result<(u64, u64)> {
    expect_parts(obj, &["data"], "gguf")?;
    let data = part(obj, "data")?;
    if data.dtype != DType::U8 || data.logical.is_some() {
        return Err(rule("gguf data must be u8 without a logical type"));
    }
    let epb = attr_uint(obj, "elems_per_block")?;
    let bb = attr_uint(obj, "block_bytes")?;
    let n = obj.elements();
    if epb == 0 || bb == 0 || !n.is_multiple_of(epb) {
        return Err(rule(alloc::format!(
            "elems_per_block {epb} and block_bytes {bb} must be ≥ 1, and elems_per_block must divide {n} elements"
        )));
    }
    size_eq(data, "data", (n / epb).checked_mul(bb), "blocks × block_bytes")?;
    Ok((epb, bb))
}

fn check_gguf(obj: &Object) -> Result<()> {
    gguf_params(obj).map(|_| ())
}
