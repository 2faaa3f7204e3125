//! The §7 metadata rules of the layouts the writer knows (`dense`, sparse COO/CSR, quant_group).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::zt::cbor::Value;
use crate::zt::layout::{
    DENSE as LAYOUT_DENSE, QUANT_GROUP as LAYOUT_QUANT_GROUP, SPARSE_COO as LAYOUT_SPARSE_COO,
    SPARSE_CSR as LAYOUT_SPARSE_CSR,
};

use super::checks::{dtype_width, size_fn, word_width};
use super::spec::ObjectSpec;
use crate::zt::Error;
use crate::zt::rule::Rule;

/// What the layout checks see of a part.
pub(super) struct PartMeta<'a> {
    pub(super) name: &'a str,
    pub(super) dtype: &'static str,
    pub(super) logical: Option<&'a str>,
    pub(super) size: u64,
}

fn layout_err(msg: impl Into<String>) -> Error {
    Error::write(Rule::LayoutRule, msg)
}

fn expect_parts(parts: &[PartMeta<'_>], names: &[&str], layout: &str) -> crate::zt::Result<()> {
    let have: Vec<&str> = parts.iter().map(|p| p.name).collect();
    let mut want: Vec<&str> = names.to_vec();
    want.sort_unstable();
    if have != want {
        return Err(layout_err(format!(
            "{layout} needs exactly the parts {want:?}, got {have:?}"
        )));
    }
    Ok(())
}

fn expect_size(p: &PartMeta<'_>, n: u64, what: &str) -> crate::zt::Result<()> {
    match size_fn(p.dtype, p.logical, n) {
        None => Ok(()),
        Some(None) => Err(Error::write(Rule::Shape, format!("size of {n} elements overflows u64")).in_part(p.name)),
        Some(Some(s)) if s == p.size => Ok(()),
        Some(Some(s)) => Err(layout_err(format!(
            "{what}: {n} elements of {} are {s} bytes, got {}",
            p.logical.unwrap_or(p.dtype),
            p.size
        ))
        .in_part(p.name)),
    }
}

fn get_part<'p, 'a>(parts: &'p [PartMeta<'a>], n: &str) -> &'p PartMeta<'a> {
    parts.iter().find(|p| p.name == n).expect("checked by expect_parts")
}

fn index_part(p: &PartMeta<'_>, layout: &str) -> crate::zt::Result<u64> {
    if p.logical.is_some() || !matches!(p.dtype, "u32" | "u64") {
        return Err(layout_err(format!(
            "{layout}: part {:?} must be u32 or u64 with no logical type",
            p.name
        ))
        .in_part(p.name));
    }
    Ok(dtype_width(p.dtype))
}

/// The §7 metadata rules of the four layouts this writer knows; other layouts are structural.
pub(super) fn validate_layout(spec: &ObjectSpec, count: u64, parts: &[PartMeta<'_>]) -> crate::zt::Result<()> {
    let shape = &spec.shape;
    let layout = spec.layout.as_str();
    let no_attrs = || -> crate::zt::Result<()> {
        match &spec.attributes {
            Some(Value::Map(m)) if !m.is_empty() => Err(layout_err(format!("{layout} takes no attributes"))),
            _ => Ok(()),
        }
    };
    match layout {
        LAYOUT_DENSE => {
            if parts.len() != 1 || parts[0].name != "data" {
                return Err(layout_err("dense objects have exactly one part, named \"data\""));
            }
            let p = &parts[0];
            match size_fn(p.dtype, p.logical, count) {
                None => Ok(()),
                Some(Some(s)) if s == p.size => Ok(()),
                Some(s) => Err(Error::write(
                    Rule::DenseSize,
                    format!(
                        "shape {shape:?} of {} needs {} bytes, got {}",
                        p.logical.unwrap_or(p.dtype),
                        s.map_or("> u64::MAX".to_string(), |s| s.to_string()),
                        p.size
                    ),
                )
                .in_part("data")),
            }
        }
        LAYOUT_SPARSE_CSR => {
            no_attrs()?;
            if shape.len() != 2 {
                return Err(layout_err(format!("{layout} needs rank 2, got shape {shape:?}")));
            }
            expect_parts(parts, &["values", "indices", "indptr"], layout)?;
            let (indices, indptr, values) = (
                get_part(parts, "indices"),
                get_part(parts, "indptr"),
                get_part(parts, "values"),
            );
            let w = index_part(indices, layout)?;
            index_part(indptr, layout)?;
            if indptr.dtype != indices.dtype {
                return Err(layout_err(format!(
                    "{layout}: indptr is {} but indices is {}",
                    indptr.dtype, indices.dtype
                ))
                .in_part("indptr"));
            }
            let rows = shape[0].checked_add(1).and_then(|r| r.checked_mul(w));
            if rows != Some(indptr.size) {
                return Err(layout_err(format!(
                    "{layout}: indptr must hold R+1 = {} entries of {w} bytes, got {} bytes",
                    shape[0].wrapping_add(1),
                    indptr.size
                ))
                .in_part("indptr"));
            }
            if indices.size % w != 0 {
                return Err(layout_err(format!(
                    "{layout}: indices is {} bytes, not a multiple of {w}",
                    indices.size
                ))
                .in_part("indices"));
            }
            expect_size(values, indices.size / w, "values must hold one element per index")
        }
        LAYOUT_SPARSE_COO => {
            no_attrs()?;
            if shape.is_empty() {
                return Err(layout_err(format!("{layout} needs rank >= 1")));
            }
            expect_parts(parts, &["values", "coords"], layout)?;
            let (coords, values) = (get_part(parts, "coords"), get_part(parts, "values"));
            let w = index_part(coords, layout)?;
            let per = w * shape.len() as u64;
            if coords.size % per != 0 {
                return Err(layout_err(format!(
                    "{layout}: coords is {} bytes, not a multiple of {w} x rank {}",
                    coords.size,
                    shape.len()
                ))
                .in_part("coords"));
            }
            expect_size(values, coords.size / per, "values must hold one element per coordinate")
        }
        LAYOUT_QUANT_GROUP => validate_quant_group(spec, count, parts),
        _ => Ok(()),
    }
}

fn validate_quant_group(spec: &ObjectSpec, count: u64, parts: &[PartMeta<'_>]) -> crate::zt::Result<()> {
    let q = quant_group_attributes(spec)?;
    check_quant_group_parts(spec, count, parts, &q)
}

/// The `zt.quant_group/1` attributes, as [`quant_group_attributes`] checks them.
struct QuantGroupAttrs {
    bits: u64,
    group_size: u64,
    axis: u64,
    /// The packing word's name and width in bytes.
    word: String,
    word_width: u64,
    /// Codes per packing word.
    per_word: u64,
    scale_form: String,
    /// `None`: no zeros part; `Some(true)`: packed as the data; `Some(false)`: plain.
    zeros: Option<bool>,
}

/// Checks an object's `zt.quant_group/1` attributes (bits, group size, axis, packing, scale form,
/// zero point) against each other and the shape.
fn quant_group_attributes(spec: &ObjectSpec) -> crate::zt::Result<QuantGroupAttrs> {
    let l = LAYOUT_QUANT_GROUP;
    let attrs = spec.attributes.as_ref().ok_or_else(|| {
        layout_err(format!(
            "{l} requires attributes bits, group_size, axis, packing, scale_form, zero_point"
        ))
    })?;
    let uint = |k: &str| {
        attrs
            .get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| layout_err(format!("{l}: attribute {k:?} must be an unsigned integer")))
    };
    let text = |v: Option<&Value<'static>>, k: &str| -> crate::zt::Result<String> {
        v.and_then(Value::as_text)
            .map(str::to_string)
            .ok_or_else(|| layout_err(format!("{l}: attribute {k:?} must be text")))
    };
    let (bits, group_size, axis) = (uint("bits")?, uint("group_size")?, uint("axis")?);
    if !matches!(bits, 2 | 3 | 4 | 5 | 6 | 8) {
        return Err(layout_err(format!("{l}: bits must be 2, 3, 4, 5, 6 or 8, got {bits}")));
    }
    if axis >= spec.shape.len() as u64 {
        return Err(layout_err(format!(
            "{l}: axis {axis} is not below rank {}",
            spec.shape.len()
        )));
    }
    let packing = attrs
        .get("packing")
        .filter(|v| v.as_map().is_some())
        .ok_or_else(|| layout_err(format!("{l}: attribute \"packing\" must be a map")))?;
    let word = text(packing.get("word"), "packing.word")?;
    let ww = word_width(&word)
        .ok_or_else(|| layout_err(format!("{l}: packing.word must be u8, u16, u32 or u64, got {word:?}")))?;
    let order = text(packing.get("order"), "packing.order")?;
    if order != "lsb_first" && order != "msb_first" {
        return Err(layout_err(format!(
            "{l}: packing.order must be lsb_first or msb_first, got {order:?}"
        )));
    }
    if (8 * ww) % bits != 0 {
        return Err(layout_err(format!(
            "{l}: bits {bits} must divide the {}-bit word",
            8 * ww
        )));
    }
    let per_word = 8 * ww / bits;
    if packing.get("per_word").and_then(Value::as_u64) != Some(per_word) {
        return Err(layout_err(format!(
            "{l}: packing.per_word must be 8 x width(word) / bits = {per_word}"
        )));
    }
    let scale_form = text(attrs.get("scale_form"), "scale_form")?;
    if !matches!(scale_form.as_str(), "f32_factors" | "f16_factors" | "e8m0_exponent") {
        return Err(layout_err(format!(
            "{l}: scale_form must be f32_factors, f16_factors or e8m0_exponent, got {scale_form:?}"
        )));
    }
    let zp = attrs
        .get("zero_point")
        .filter(|v| v.as_map().is_some())
        .ok_or_else(|| layout_err(format!("{l}: attribute \"zero_point\" must be a map")))?;
    let form = text(zp.get("form"), "zero_point.form")?;
    let zeros = match form.as_str() {
        "none" => None,
        "implied" => {
            if !matches!(zp.get("value"), Some(Value::Uint(_) | Value::Neg(_))) {
                return Err(layout_err(format!(
                    "{l}: zero_point.value (an integer) is required when form is implied"
                )));
            }
            None
        }
        "tensor" => {
            let p = text(zp.get("packing"), "zero_point.packing")?;
            if p != "same_as_data" && p != "plain" {
                return Err(layout_err(format!(
                    "{l}: zero_point.packing must be same_as_data or plain, got {p:?}"
                )));
            }
            Some(p == "same_as_data")
        }
        other => {
            return Err(layout_err(format!(
                "{l}: zero_point.form must be none, implied or tensor, got {other:?}"
            )));
        }
    };
    Ok(QuantGroupAttrs {
        bits,
        group_size,
        axis,
        word,
        word_width: ww,
        per_word,
        scale_form,
        zeros,
    })
}

/// Checks the parts of a `zt.quant_group/1` object (which are present, their dtypes and sizes)
/// against its checked attributes `q` and its `count` elements.
fn check_quant_group_parts(
    spec: &ObjectSpec,
    count: u64,
    parts: &[PartMeta<'_>],
    q: &QuantGroupAttrs,
) -> crate::zt::Result<()> {
    let l = LAYOUT_QUANT_GROUP;
    let QuantGroupAttrs {
        bits,
        group_size,
        axis,
        ref word,
        word_width: ww,
        per_word,
        ref scale_form,
        zeros,
    } = *q;
    if zeros.is_some() {
        expect_parts(parts, &["data", "scales", "zeros"], l)?;
    } else {
        expect_parts(parts, &["data", "scales"], l)?;
    }
    let data = get_part(parts, "data");
    let unsigned = match data.dtype {
        "i8" => "u8",
        "i16" => "u16",
        "i32" => "u32",
        "i64" => "u64",
        d => d,
    };
    if unsigned != word || data.logical.is_some() {
        return Err(layout_err(format!(
            "{l}: data must be stored as the packing word {word} (or its signed twin), got {}",
            data.dtype
        ))
        .in_part("data"));
    }
    let scales = get_part(parts, "scales");
    if scale_form == "e8m0_exponent" && !(scales.dtype == "u8" && scales.logical == Some("f8_e8m0")) {
        return Err(layout_err(format!("{l}: e8m0_exponent scales must be u8 with type f8_e8m0")).in_part("scales"));
    }
    let along = spec.shape[axis as usize];
    let groups = if group_size == 0 {
        along
    } else {
        if !along.is_multiple_of(group_size) {
            return Err(layout_err(format!(
                "{l}: group_size {group_size} does not divide shape[{axis}] = {along}"
            )));
        }
        along / group_size
    };
    let lanes = count.checked_div(along).unwrap_or(0);
    let gl = groups
        .checked_mul(lanes)
        .ok_or_else(|| Error::write(Rule::Shape, "groups x lanes overflows u64"))?;
    if !count.is_multiple_of(per_word) || count / per_word * ww != data.size {
        return Err(layout_err(format!(
            "{l}: {count} codes of {bits} bits pack into {} bytes of {word}, got {}",
            count / per_word * ww,
            data.size
        ))
        .in_part("data"));
    }
    if gl * dtype_width(scales.dtype) != scales.size {
        return Err(layout_err(format!(
            "{l}: scales must hold groups x lanes = {gl} values, got {} bytes",
            scales.size
        ))
        .in_part("scales"));
    }
    if let Some(same) = zeros {
        let z = get_part(parts, "zeros");
        let want = if same {
            gl / per_word * ww
        } else {
            gl * dtype_width(z.dtype)
        };
        if want != z.size {
            return Err(layout_err(format!("{l}: zeros must be {want} bytes, got {}", z.size)).in_part("zeros"));
        }
    }
    Ok(())
}
