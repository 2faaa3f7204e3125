//! The checks every object passes before a byte is written: names, digests, shapes, attributes
//! and dtypes.

use alloc::format;
use alloc::string::{String, ToString};

use crate::dtype::DType;
use crate::zt::cbor::{self, Value};
use crate::zt::format::MAX_RANK;

use crate::zt::Error;
use crate::zt::rule::Rule;

const MAX_DEPTH: usize = cbor::MAX_DEPTH;

pub(super) fn check_name(name: &str, what: &str, canonical: bool) -> crate::zt::Result<()> {
    // The reader's §5 rules, then what canonical form adds.
    crate::zt::format::check_name(name, what).map_err(|e| Error::write(Rule::Name, e.message))?;
    if canonical && !name.is_ascii() && !unicode_normalization::is_nfc(name) {
        return Err(Error::write(
            Rule::Name,
            format!("canonical form requires NFC names (§10 rule 5); normalise {what} name {name:?} to NFC first"),
        ));
    }
    Ok(())
}

/// §5 shard names, as the reader checks them.
pub(super) fn check_shard_name(name: &str) -> crate::zt::Result<()> {
    crate::zt::format::check_shard_name(name).map_err(|e| Error::write(Rule::ShardName, e.message))
}

/// `"<algo>:<lowercase hex>"` (§4), as the reader checks it.
pub(super) fn check_digest(d: &str) -> crate::zt::Result<()> {
    crate::zt::format::parse_digest(d)
        .map(|_| ())
        .map_err(|e| Error::write(Rule::Schema, e.message))
}

pub(super) fn check_shape(shape: &[u64]) -> crate::zt::Result<u64> {
    if shape.len() > MAX_RANK {
        return Err(Error::write(
            Rule::Shape,
            format!("rank {} exceeds {MAX_RANK} (§5)", shape.len()),
        ));
    }
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| {
        Error::write(
            Rule::Shape,
            format!("the element count of shape {shape:?} overflows u64 (§5)"),
        )
    })
}

fn depth(v: &Value<'_>) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Map(m) => 1 + m.iter().map(|(k, v)| depth(k).max(depth(v))).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks an attributes map that sits at manifest depth `at` (its own depth).
pub(super) fn check_attributes(v: &Value<'_>, at: usize) -> crate::zt::Result<()> {
    let Value::Map(entries) = v else {
        return Err(Error::write(
            Rule::Schema,
            "attributes must be a map with text keys (§4)",
        ));
    };
    for (k, _) in entries {
        match k {
            Value::Text(s) => check_name(s, "attribute", false)?,
            _ => {
                return Err(Error::write(
                    Rule::Schema,
                    format!("attribute key {k:?} is not text (§4)"),
                ));
            }
        }
    }
    if at + depth(v) - 1 > MAX_DEPTH {
        return Err(Error::write(
            Rule::Schema,
            format!("attributes nest too deep: the manifest allows CBOR depth {MAX_DEPTH} (§3)"),
        ));
    }
    cbor::encode(v).map_err(|e| Error::write(Rule::Schema, format!("attributes: {}", e.message)))?;
    Ok(())
}

/// The zt dtype name and logical type a [`DType`] is written as.
pub fn storage_of(dtype: DType, logical: Option<&str>) -> core::result::Result<(&'static str, Option<String>), String> {
    let (name, implied) = match dtype {
        DType::F64 => ("f64", None),
        DType::F32 => ("f32", None),
        DType::F16 => ("f16", None),
        DType::BF16 => ("bf16", None),
        DType::I64 => ("i64", None),
        DType::I32 => ("i32", None),
        DType::I16 => ("i16", None),
        DType::I8 => ("i8", None),
        DType::U64 => ("u64", None),
        DType::U32 => ("u32", None),
        DType::U16 => ("u16", None),
        DType::U8 => ("u8", None),
        DType::Bool => ("u8", Some("bool")),
        DType::C64 => ("f32", Some("complex64")),
        DType::C128 => ("f64", Some("complex128")),
        #[allow(unreachable_patterns)]
        other => return Err(format!("dtype {other} has no .zt storage type")),
    };
    match (implied, logical) {
        (Some(i), Some(l)) if i != l => Err(format!("dtype {dtype} implies logical type {i:?}, but {l:?} was given")),
        (Some(i), _) => Ok((name, Some(i.to_string()))),
        (None, l) => Ok((name, l.map(str::to_string))),
    }
}

pub(super) fn dtype_width(name: &str) -> u64 {
    match name {
        "f64" | "i64" | "u64" => 8,
        "f32" | "i32" | "u32" => 4,
        "f16" | "bf16" | "i16" | "u16" => 2,
        _ => 1,
    }
}

pub(super) fn word_width(word: &str) -> Option<u64> {
    match word {
        "u8" => Some(1),
        "u16" => Some(2),
        "u32" => Some(4),
        "u64" => Some(8),
        _ => None,
    }
}

/// A registered logical type's pinned dtype.
pub(super) fn logical_dtype(l: &str) -> Option<&'static str> {
    match l {
        "bool" | "f8_e4m3fn" | "f8_e5m2" | "f8_e4m3fnuz" | "f8_e5m2fnuz" | "f8_e8m0" | "f4_e2m1" => Some("u8"),
        "complex64" => Some("f32"),
        "complex128" => Some("f64"),
        _ => None,
    }
}

/// Decoded bytes for `n` elements, `None` for an unknown logical type (structural) or overflow.
pub(super) fn size_fn(dtype: &str, logical: Option<&str>, n: u64) -> Option<Option<u64>> {
    Some(match logical {
        None => n.checked_mul(dtype_width(dtype)),
        Some("f4_e2m1") => Some(n / 2 + n % 2),
        Some("complex64") => n.checked_mul(8),
        Some("complex128") => n.checked_mul(16),
        Some(l) if logical_dtype(l).is_some() => Some(n),
        Some(_) => return None,
    })
}
