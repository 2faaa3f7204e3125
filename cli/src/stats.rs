//! `tensorlane stats FILE [TENSOR...] [--bins N] [--json]`: count, min, max, mean, std, zeros,
//! NaN, ±Inf and a histogram per tensor ([`tensorlane_core::stats`]).
//!
//! Reads every model format [`Model`] opens and `.zt` v2 files (dense objects, and the lossless
//! `gguf.<type>/1` objects through dequantization). With no TENSOR every tensor is summarised, in
//! file order; otherwise the named ones, in the order given (a name the file does not have: exit
//! 2, naming it).
//!
//! `--json` prints an **array** with one object per tensor, in that order:
//!
//! ```json
//! [{"name": "w", "dtype": "float32", "shape": [2, 3], "count": 6, "min": -1.0, "max": 4.0,
//!   "mean": 1.5, "std": 1.7, "zeros": 1, "nan": 0, "pos_inf": 0, "neg_inf": 0,
//!   "histogram": {"edges": [-1.0, 1.5, 4.0], "counts": [3, 3]}}]
//! ```
//!
//! `min`, `max`, `mean` and `std` are over the finite values (`std`: population, ddof = 0) and
//! are `null` when there is none; `count` counts every value (complex: two per element). The
//! table prints one row per tensor with a sparkline of the histogram. Tensors of at least 64 MiB
//! draw a progress bar on stderr (bytes of both passes; nothing when stderr is not a terminal).

use serde::Serialize;
use tensorlane::model::Model;
use tensorlane::source::MmapSource;
use tensorlane_core::formats::ggml::GgmlType;
use tensorlane_core::formats::{Arrangement, ElementType, FormatError, Storage, TensorInfo};
use tensorlane_core::stats::{StatsOptions, TensorStats, tensor_stats};
use tensorlane_core::zt::format::LogicalType;
use tensorlane_core::zt::layout;
use tensorlane_core::zt::reader::Reader;

use crate::error::CliError;
use crate::output::{Table, finish, progress, render_table, shape_str};

/// The histogram of one tensor: `edges.len() == counts.len() + 1`.
#[derive(Clone, Debug, Serialize)]
pub struct HistogramJson {
    /// Bin edges, ascending.
    pub edges: Vec<f64>,
    /// Values per bin (the last bin is closed).
    pub counts: Vec<u64>,
}

/// One tensor's statistics, as `--json` prints them.
#[derive(Clone, Debug, Serialize)]
pub struct StatsRow {
    /// The tensor's name.
    pub name: String,
    /// Its element type (`float32`, `bfloat16`, `Q4_K`, ...).
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Values (finite or not).
    pub count: u64,
    /// Smallest finite value (`null`: none).
    pub min: Option<f64>,
    /// Largest finite value (`null`: none).
    pub max: Option<f64>,
    /// Mean of the finite values (`null`: none).
    pub mean: Option<f64>,
    /// Population standard deviation of the finite values (`null`: none).
    pub std: Option<f64>,
    /// Values equal to zero.
    pub zeros: u64,
    /// NaN values.
    pub nan: u64,
    /// +Inf values.
    pub pos_inf: u64,
    /// -Inf values.
    pub neg_inf: u64,
    /// Equal-width bins over `[min, max]`.
    pub histogram: HistogramJson,
}

impl From<TensorStats> for StatsRow {
    fn from(t: TensorStats) -> StatsRow {
        let s = t.summary;
        let finite = |v: f64| (s.finite > 0).then_some(v);
        StatsRow {
            name: t.name,
            dtype: t.dtype,
            shape: t.shape,
            count: s.count,
            min: finite(s.min),
            max: finite(s.max),
            mean: finite(s.mean),
            std: finite(s.std),
            zeros: s.zeros,
            nan: s.nan,
            pos_inf: s.pos_inf,
            neg_inf: s.neg_inf,
            histogram: HistogramJson {
                edges: t.histogram.edges,
                counts: t.histogram.counts,
            },
        }
    }
}

/// Every summarised tensor, in order.
#[derive(Serialize)]
#[serde(transparent)]
pub struct StatsReport(pub Vec<StatsRow>);

/// A number for the table: 6 significant digits, `-` when absent.
fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(0.0) => "0".into(),
        Some(v) if v.abs() >= 1e6 || v.abs() < 1e-4 => format!("{v:.5e}"),
        Some(v) => {
            let s = format!("{v:.6}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// The histogram as a line of at most 32 block characters (adjacent bins summed), scaled to the
/// fullest; `·` marks an empty bin.
pub fn sparkline(counts: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let group = counts.len().div_ceil(32).max(1);
    let cells: Vec<u64> = counts.chunks(group).map(|c| c.iter().sum()).collect();
    let top = cells.iter().copied().max().unwrap_or(0);
    cells
        .iter()
        .map(|&c| match c {
            0 => '·',
            // 1..=8 eighths of the fullest cell, rounded up so that any count shows.
            c => BLOCKS[((c as u128 * 8).div_ceil(top as u128) as usize).clamp(1, 8) - 1],
        })
        .collect()
}

impl Table for StatsReport {
    fn to_table(&self) -> String {
        let mut rows: Vec<Vec<String>> = vec![
            [
                "NAME",
                "DTYPE",
                "SHAPE",
                "COUNT",
                "MIN",
                "MAX",
                "MEAN",
                "STD",
                "ZEROS",
                "NAN",
                "+INF",
                "-INF",
                "HISTOGRAM",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ];
        for t in &self.0 {
            rows.push(vec![
                t.name.clone(),
                t.dtype.clone(),
                shape_str(&t.shape),
                t.count.to_string(),
                num(t.min),
                num(t.max),
                num(t.mean),
                num(t.std),
                t.zeros.to_string(),
                t.nan.to_string(),
                t.pos_inf.to_string(),
                t.neg_inf.to_string(),
                sparkline(&t.histogram.counts),
            ]);
        }
        render_table(&rows, &[3, 4, 5, 6, 7, 8, 9, 10, 11])
    }
}

/// Runs both passes over `t`, drawing a progress bar for a large tensor.
fn one<S: tensorlane_core::source::ReadAt + ?Sized>(
    format: &'static str,
    t: &TensorInfo,
    sources: &[&S],
    opts: &StatsOptions,
) -> Result<StatsRow, FormatError> {
    let total = t.nbytes().unwrap_or(0).saturating_mul(2);
    let bar = progress(total, "stats");
    let mut tick = |done: u64, _total: u64| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    };
    let r = tensor_stats(format, t, sources, opts, &mut tick);
    finish(bar);
    r.map(StatsRow::from)
}

/// The tensors to summarise: `names` in order (each must exist), or all of them.
fn select<'a, T>(all: &'a [T], name_of: impl Fn(&T) -> &str, names: &[String]) -> Result<Vec<&'a T>, CliError> {
    if names.is_empty() {
        return Ok(all.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            all.iter().find(|t| name_of(t) == n).ok_or_else(|| {
                CliError::Refused(format!(
                    "no tensor named {n:?} (the file has {} tensor{}; `tensorlane inspect` lists them)",
                    all.len(),
                    if all.len() == 1 { "" } else { "s" }
                ))
            })
        })
        .collect()
}

/// Statistics of the tensors `names` (all when empty) of a model file.
pub fn model_stats(model: &Model, names: &[String], opts: &StatsOptions) -> Result<StatsReport, CliError> {
    let cat = model.catalog();
    let chosen = select(&cat.tensors, |t| &t.name, names)?;
    let mut rows = Vec::with_capacity(chosen.len());
    for t in chosen {
        let total = t.nbytes().unwrap_or(0).saturating_mul(2);
        let bar = progress(total, "stats");
        let r = model.stats(t, opts, &mut |done, _| {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        });
        finish(bar);
        rows.push(StatsRow::from(r?));
    }
    Ok(StatsReport(rows))
}

/// The element type of a `.zt` object, when stats can read it: a dense object's `data` part
/// (plain dtype or logical type), or a `gguf.<type>/1` object's blocks.
fn zt_element(o: &tensorlane_core::zt::manifest::Object) -> Option<ElementType> {
    let data = o.parts.get("data")?;
    if o.layout == layout::DENSE {
        return Some(match data.logical.as_deref() {
            None => ElementType::Dense(data.dtype),
            Some(l) => ElementType::Logical(LogicalType::from_name(l)?),
        });
    }
    let ty = o.layout.strip_prefix("gguf.")?.strip_suffix("/1")?;
    (0..=u32::from(u8::MAX))
        .map(GgmlType)
        .find(|g| g.name().eq_ignore_ascii_case(ty))
        .map(ElementType::Ggml)
}

/// Statistics of the objects `names` (all when empty) of a `.zt` v2 file. Each object's `data`
/// part is read (decoded when it is stored under an encoding) and fed to the same passes.
pub fn zt_stats(reader: &Reader<MmapSource>, names: &[String], opts: &StatsOptions) -> Result<StatsReport, CliError> {
    let m = reader
        .manifest()
        .ok_or_else(|| CliError::Refused("a data shard describes no tensors; run stats on its root file".into()))?;
    let all: Vec<(&String, _)> = m.objects.iter().collect();
    let mut rows = Vec::new();
    for (name, o) in select(&all, |(n, _)| n.as_str(), names)? {
        let ty = zt_element(o).ok_or_else(|| {
            CliError::Refused(format!(
                "object {name:?} has layout {:?}; stats reads dense and gguf.<type>/1 objects",
                o.layout
            ))
        })?;
        let bytes = reader.read(name, "data")?;
        let t = TensorInfo {
            name: name.to_string(),
            ty,
            shape: o.shape.clone(),
            storage: Storage::Range {
                source: 0,
                offset: 0,
                len: bytes.len() as u64,
            },
            arrangement: Arrangement::default(),
            attributes: Vec::new(),
        };
        rows.push(one::<[u8]>("zt", &t, &[&bytes[..]], opts)?);
    }
    Ok(StatsReport(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_and_groups() {
        assert_eq!(sparkline(&[0, 1, 8, 4]), "·▁█▄");
        assert_eq!(sparkline(&[]), "");
        // 64 bins become 32 cells of two.
        let c: Vec<u64> = (0..64).map(|i| u64::from(i >= 62)).collect();
        let s = sparkline(&c);
        assert_eq!(s.chars().count(), 32);
        assert!(s.ends_with('█') && s.starts_with('·'), "{s}");
        assert_eq!(num(Some(1.5)), "1.5");
        assert_eq!(num(Some(-2.0)), "-2");
        assert_eq!(num(Some(1e9)), "1.00000e9");
        assert_eq!(num(None), "-");
    }
}
