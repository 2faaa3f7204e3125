//! Tensor statistics for both JavaScript backends ([`tensorlane_core::stats`]), so that
//! `reader.stats(name)` and `stats({dtype, shape, data})` give the same names and numbers on the
//! addon and the wasm build.
//!
//! JavaScript drives the passes (`js/formats.js`): it reads a tensor's stored bytes in slices (from
//! memory, a mapped file or a `Blob`) and pushes each slice into a [`SummaryPass`] (pass 1: count,
//! min, max, mean, std, zeros, NaN, ±Inf), then into a [`HistogramPass`] over `[min, max]` of the
//! finite values (pass 2), so a host never holds more than one slice of a tensor of any size.
//! Slices may end anywhere (the core carries a cut element or ggml block to the next push).
//! Results cross as JSON: [`summary_json`], [`histogram_json`], [`tensor_stats_json`].

use serde_json::{Value as J, json};
use tensorlane_core::dtype::DType;
use tensorlane_core::formats::ggml::GgmlType;
use tensorlane_core::formats::{ElementType, ErrorKind, FormatError};
use tensorlane_core::stats::{
    self as core_stats, Diff, DiffAccumulator, Histogram, HistogramAccumulator, Stats, StatsError, StatsPart, Summary,
    TensorStats,
};
use tensorlane_core::zt::format::LogicalType;

use crate::formats::error_json;

/// The `format` of errors raised here (JavaScript adds the tensor's name).
const FORMAT: &str = "stats";

fn error(kind: ErrorKind, message: String) -> String {
    error_json(&FormatError::new(FORMAT, kind, message)).to_string()
}

fn stats_error(e: &StatsError) -> String {
    error_json(&e.to_format_error(FORMAT)).to_string()
}

/// The element type a catalog entry names: `ggml` is the ggml type id of a GGUF tensor (negative
/// for none), else `dtype` is a NumPy-style name (`float32`, `bfloat16`, `float8_e4m3fn`, ...).
/// An unknown name is an error (a [`FormatError`] as JSON, kind `unsupported`).
pub fn element_type(dtype: &str, ggml: f64) -> Result<ElementType, String> {
    if ggml >= 0.0 {
        if ggml.fract() != 0.0 || ggml > f64::from(u32::MAX) {
            return Err(error(
                ErrorKind::Unsupported,
                format!("ggml type id {ggml} is not a u32"),
            ));
        }
        return Ok(ElementType::Ggml(GgmlType(ggml as u32)));
    }
    if let Some(d) = DType::from_name(dtype) {
        return Ok(ElementType::Dense(d));
    }
    LogicalType::ALL
        .into_iter()
        .map(ElementType::Logical)
        .find(|t| t.name() == dtype)
        .ok_or_else(|| {
            error(
                ErrorKind::Unsupported,
                format!(
                    "unknown element type {dtype:?}: use a dtype name a reader lists (float32, bfloat16, \
                     float8_e4m3fn, ...)"
                ),
            )
        })
}

/// An element count as JS passes it (a whole number it holds exactly).
fn whole(elements: f64) -> Result<u64, String> {
    if elements >= 0.0 && elements.fract() == 0.0 && elements <= 9007199254740991.0 {
        Ok(elements as u64)
    } else {
        Err(error(
            ErrorKind::Limit,
            format!("the element count {elements} is not a whole number JavaScript holds exactly"),
        ))
    }
}

/// `elements` elements of `ty`, checked against the `bytes` that will be pushed.
fn checked_elements(ty: ElementType, elements: f64, bytes: f64) -> Result<u64, String> {
    let n = whole(elements)?;
    match ty.nbytes(n) {
        Some(want) if want as f64 == bytes => Ok(n),
        Some(want) => Err(error(
            ErrorKind::SizeMismatch,
            format!("{n} {} elements are {want} bytes, but {bytes} were given", ty.name()),
        )),
        None => Err(error(
            ErrorKind::SizeMismatch,
            format!("{n} elements are not a whole number of {} blocks", ty.name()),
        )),
    }
}

/// A number as JSON, `null` when it is not finite (no finite value to take a minimum of, ...).
fn num(v: f64) -> J {
    serde_json::Number::from_f64(v).map_or(J::Null, J::Number)
}

/// A [`Summary`] as JSON: `{count, finite, min, max, mean, std, zeros, nan, pos_inf, neg_inf}`;
/// `min`, `max`, `mean` and `std` are `null` when no value is finite (NaN in the core).
pub fn summary_json(s: &Summary) -> J {
    json!({
        "count": s.count, "finite": s.finite,
        "min": num(s.min), "max": num(s.max), "mean": num(s.mean), "std": num(s.std),
        "zeros": s.zeros, "nan": s.nan, "pos_inf": s.pos_inf, "neg_inf": s.neg_inf,
    })
}

/// A [`Histogram`] as JSON: `{edges, counts}` (`edges` one longer than `counts`).
pub fn histogram_json(h: &Histogram) -> J {
    json!({ "edges": h.edges.iter().map(|&e| num(e)).collect::<Vec<_>>(), "counts": h.counts })
}

/// A [`TensorStats`] as JSON: `{name, dtype, shape, summary, histogram}`.
pub fn tensor_stats_json(t: &TensorStats) -> J {
    json!({
        "name": t.name, "dtype": t.dtype, "shape": t.shape,
        "summary": summary_json(&t.summary), "histogram": histogram_json(&t.histogram),
    })
}

/// Pass 1: the summary of a tensor fed slice by slice.
pub struct SummaryPass {
    inner: Stats,
}

impl SummaryPass {
    /// A pass over `elements` elements of type `dtype`/`ggml` ([`element_type`]) stored in
    /// `bytes` bytes (checked: a size that does not match the elements is refused).
    pub fn new(dtype: &str, ggml: f64, elements: f64, bytes: f64) -> Result<SummaryPass, String> {
        let ty = element_type(dtype, ggml)?;
        let n = checked_elements(ty, elements, bytes)?;
        let inner = Stats::new(ty).map_err(|e| stats_error(&e))?.with_elements(n);
        Ok(SummaryPass { inner })
    }

    /// Adds the next slice of the tensor's stored bytes (any boundaries).
    pub fn push(&mut self, bytes: &[u8]) {
        self.inner.push(bytes);
    }

    /// The summary so far, as [`summary_json`].
    pub fn summary(&self) -> String {
        summary_json(&self.inner.summary()).to_string()
    }

    /// The state so far as [`StatsPart::to_array`] numbers, for [`summary_of_parts`] (another
    /// Worker's pass over another span of the tensor).
    pub fn part(&self) -> Vec<f64> {
        self.inner.part().to_array().to_vec()
    }
}

/// The spans of [`tensorlane_core::stats::split`] for `elements` elements of `dtype`/`ggml` in
/// at most `parts` parts, flattened as `[offset, bytes, elements, ...]`.
pub fn split(dtype: &str, ggml: f64, elements: f64, parts: u32) -> Result<Vec<f64>, String> {
    let ty = element_type(dtype, ggml)?;
    let n = whole(elements)?;
    let spans = core_stats::split(ty, n, parts as usize).ok_or_else(|| {
        error(
            ErrorKind::SizeMismatch,
            format!("{n} elements are not a whole number of {} blocks", ty.name()),
        )
    })?;
    Ok(spans
        .iter()
        .flat_map(|s| [s.offset as f64, s.bytes as f64, s.elements as f64])
        .collect())
}

/// The summary ([`summary_json`]) of parts given as [`SummaryPass::part`] arrays one after
/// another, merged in that order; a malformed part is an error naming it and the rule it breaks.
pub fn summary_of_parts(parts: &[f64]) -> Result<String, String> {
    if !parts.len().is_multiple_of(StatsPart::LEN) {
        return Err(stats_error(&StatsError::Part {
            rule: "parts are runs of 10 numbers (count, finite, mean, m2, min, max, zeros, nan, pos_inf, neg_inf)",
        }));
    }
    let mut total = StatsPart::EMPTY;
    for (i, a) in parts.chunks(StatsPart::LEN).enumerate() {
        let p = StatsPart::from_array(a).map_err(|e| error(ErrorKind::Syntax, format!("part {i}: {e}")))?;
        total = total.merge(&p);
    }
    Ok(summary_json(&total.summary()).to_string())
}

/// Pass 2: the histogram of the finite values, fed slice by slice.
pub struct HistogramPass {
    inner: Option<HistogramAccumulator>,
}

impl HistogramPass {
    /// `bins` equal bins over `[min, max]` of pass 1 (NumPy's `[0, 1]` when `finite` is 0), for
    /// the elements [`SummaryPass::new`] accepted.
    pub fn new(
        dtype: &str,
        ggml: f64,
        elements: f64,
        finite: f64,
        min: f64,
        max: f64,
        bins: u32,
    ) -> Result<HistogramPass, String> {
        let ty = element_type(dtype, ggml)?;
        let n = whole(elements)?;
        let (lo, hi) = if finite > 0.0 { (min, max) } else { (0.0, 1.0) };
        let inner = HistogramAccumulator::new(ty, lo, hi, bins as usize)
            .map_err(|e| stats_error(&e))?
            .with_elements(n);
        Ok(HistogramPass { inner: Some(inner) })
    }

    /// Adds the next slice (any boundaries). Ignored after [`HistogramPass::finish`].
    pub fn push(&mut self, bytes: &[u8]) {
        if let Some(h) = &mut self.inner {
            h.push(bytes);
        }
    }

    /// The histogram, as [`histogram_json`]; an error when called twice.
    pub fn finish(&mut self) -> Result<String, String> {
        let h = self
            .inner
            .take()
            .ok_or_else(|| error(ErrorKind::Io, "the histogram was already finished".into()))?;
        Ok(histogram_json(&h.finish()).to_string())
    }
}

/// A [`Diff`] as JSON: `{count, nonfinite, max_abs, mean_abs, rel_l2, cosine, norm_a, norm_b,
/// norm_diff}` (`null` where the core gives NaN; `rel_l2` +Inf is `"inf"`).
pub fn diff_json(d: &Diff) -> J {
    let inf_or = |v: f64| if v == f64::INFINITY { json!("inf") } else { num(v) };
    json!({
        "count": d.count, "nonfinite": d.nonfinite,
        "max_abs": num(d.max_abs), "mean_abs": num(d.mean_abs), "rel_l2": inf_or(d.rel_l2),
        "cosine": num(d.cosine), "norm_a": inf_or(d.norm_a), "norm_b": inf_or(d.norm_b),
        "norm_diff": inf_or(d.norm_diff),
    })
}

/// Two tensors compared value by value ([`DiffAccumulator`]), fed as two byte streams.
pub struct DiffPass {
    inner: DiffAccumulator,
}

impl DiffPass {
    /// A comparison of `elements` elements of `dtype_a`/`ggml_a` with as many of
    /// `dtype_b`/`ggml_b` ([`element_type`]); `bytes_a` and `bytes_b` are the stored sizes,
    /// checked against the element count.
    pub fn new(
        dtype_a: &str,
        ggml_a: f64,
        bytes_a: f64,
        dtype_b: &str,
        ggml_b: f64,
        bytes_b: f64,
        elements: f64,
    ) -> Result<DiffPass, String> {
        let (ta, tb) = (element_type(dtype_a, ggml_a)?, element_type(dtype_b, ggml_b)?);
        let n = checked_elements(ta, elements, bytes_a)?;
        checked_elements(tb, elements, bytes_b)?;
        let inner = DiffAccumulator::new(ta, tb)
            .map_err(|e| stats_error(&e))?
            .with_elements(n);
        Ok(DiffPass { inner })
    }

    /// Adds the next slice of tensor A's stored bytes (any boundaries).
    pub fn push_a(&mut self, bytes: &[u8]) {
        self.inner.push_a(bytes);
    }

    /// Adds the next slice of tensor B's stored bytes (any boundaries).
    pub fn push_b(&mut self, bytes: &[u8]) {
        self.inner.push_b(bytes);
    }

    /// Adds the next slices of both tensors (the same elements: the fast path).
    pub fn push(&mut self, a: &[u8], b: &[u8]) {
        self.inner.push(a, b);
    }

    /// The comparison so far, as [`diff_json`].
    pub fn diff(&self) -> String {
        diff_json(&self.inner.diff()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn passes_over_slices_match_numpy_on_a_small_case() {
        // numpy: x = [1, 2, nan, 4, -0., inf]; finite = [1, 2, 4, -0.]; mean 1.75,
        // std sqrt(((0.75)^2 + 0.25^2 + 2.25^2 + 1.75^2) / 4); histogram(finite, 4) = [1, 1, 1, 1].
        let b = f32_bytes(&[1.0, 2.0, f32::NAN, 4.0, -0.0, f32::INFINITY]);
        let mut s = SummaryPass::new("float32", -1.0, 6.0, b.len() as f64).unwrap();
        for piece in b.chunks(5) {
            s.push(piece);
        }
        let sum: J = serde_json::from_str(&s.summary()).unwrap();
        assert_eq!(sum["count"], 6);
        assert_eq!(sum["finite"], 4);
        assert_eq!(
            (sum["nan"].clone(), sum["pos_inf"].clone(), sum["zeros"].clone()),
            (json!(1), json!(1), json!(1))
        );
        assert_eq!(sum["mean"], 1.75);
        let std = ((0.75f64.powi(2) + 0.25f64.powi(2) + 2.25f64.powi(2) + 1.75f64.powi(2)) / 4.0).sqrt();
        assert!((sum["std"].as_f64().unwrap() - std).abs() <= 1e-15 * std);
        let mut h = HistogramPass::new("float32", -1.0, 6.0, 4.0, -0.0, 4.0, 4).unwrap();
        for piece in b.chunks(7) {
            h.push(piece);
        }
        let hist: J = serde_json::from_str(&h.finish().unwrap()).unwrap();
        assert_eq!(hist["edges"], json!([0.0, 1.0, 2.0, 3.0, 4.0]));
        assert_eq!(hist["counts"], json!([1, 1, 1, 1]));
        assert!(h.finish().is_err());
    }

    #[test]
    fn no_finite_value_gives_nulls_and_numpys_empty_histogram() {
        let b = f32_bytes(&[f32::NAN, f32::NEG_INFINITY]);
        let mut s = SummaryPass::new("float32", -1.0, 2.0, 8.0).unwrap();
        s.push(&b);
        let sum: J = serde_json::from_str(&s.summary()).unwrap();
        assert_eq!(
            (sum["finite"].clone(), sum["min"].clone(), sum["std"].clone()),
            (json!(0), J::Null, J::Null)
        );
        let mut h = HistogramPass::new("float32", -1.0, 2.0, 0.0, f64::NAN, f64::NAN, 2).unwrap();
        let hist: J = serde_json::from_str(&h.finish().unwrap()).unwrap();
        assert_eq!(hist, json!({ "edges": [0.0, 0.5, 1.0], "counts": [0, 0] }));
    }

    #[test]
    fn names_sizes_and_types_are_checked() {
        assert!(matches!(
            element_type("bfloat16", -1.0),
            Ok(ElementType::Dense(DType::BF16))
        ));
        assert_eq!(element_type("float8_e5m2", -1.0).unwrap().name(), "float8_e5m2");
        assert_eq!(element_type("ignored", 12.0).unwrap().name(), "Q4_K");
        let e: J = serde_json::from_str(&element_type("float7", -1.0).unwrap_err()).unwrap();
        assert_eq!(e["kind"], "unsupported");
        let e: J = serde_json::from_str(&SummaryPass::new("float32", -1.0, 3.0, 8.0).err().unwrap()).unwrap();
        assert_eq!(e["kind"], "size-mismatch", "{e}");
        // Q4_K blocks hold 256 elements in 144 bytes.
        assert!(SummaryPass::new("Q4_K", 12.0, 256.0, 144.0).is_ok());
        assert!(SummaryPass::new("Q4_K", 12.0, 100.0, 144.0).is_err());
    }

    #[test]
    fn diff_pass_pairs_types_and_checks_sizes() {
        let a = f32_bytes(&[1.0, -2.0]);
        // bfloat16 1.0 = 0x3f80, -1.0 = 0xbf80
        let b = [0x80u8, 0x3f, 0x80, 0xbf];
        let mut d = DiffPass::new("float32", -1.0, 8.0, "bfloat16", -1.0, 4.0, 2.0).unwrap();
        d.push_b(&b);
        d.push_a(&a);
        let j: J = serde_json::from_str(&d.diff()).unwrap();
        assert_eq!(
            (j["count"].clone(), j["max_abs"].clone(), j["mean_abs"].clone()),
            (json!(2), json!(1.0), json!(0.5))
        );
        assert!(DiffPass::new("float32", -1.0, 8.0, "bfloat16", -1.0, 6.0, 2.0).is_err());
    }
}
