//! `tensorlane stats FILE [TENSOR...] [--bins N] [--json]`: count, min, max, mean, std, zeros,
//! NaN, ±Inf and a histogram per tensor ([`tensorlane_core::stats`]).
//!
//! Reads every file [`Model`] opens, through the one catalog: the model formats, `.zt` v2 (dense
//! objects, and the lossless `gguf.<type>/1` objects through dequantization), legacy `.zt` and
//! Tenso packet files. With no TENSOR every tensor is summarised, in file order, and one stats
//! cannot read (a tensor stored as parts: sparse, group-quantized; an element type without
//! values) is left out with a warning on stderr; otherwise the named ones, in the order given (a
//! name the file does not have, or one stats cannot read: exit 2, naming it).
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
use tensorlane_core::formats::{ErrorKind, TensorInfo};
use tensorlane_core::stats::{StatsOptions, TensorStats};

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

/// Runs both passes over `t` (in `sources`, read with `stats`), drawing a progress bar on stderr
/// for a large tensor from the `(done, total)` callback.
fn with_bar(
    t: &TensorInfo,
    stats: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<TensorStats, CliError>,
) -> Result<StatsRow, CliError> {
    let bar = progress(t.nbytes().unwrap_or(0).saturating_mul(2), "stats");
    let r = stats(&mut |done, _total| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    });
    finish(bar);
    r.map(StatsRow::from)
}

/// Which tensors to summarise, and what to do with one stats cannot read.
struct Selection<'n> {
    names: &'n [String],
    /// The file, for warnings.
    file: &'n str,
}

impl Selection<'_> {
    /// The tensors named (each must exist), in the order given, or all of them in file order.
    fn pick<'a, T>(&self, all: &'a [T], name_of: impl Fn(&T) -> &str) -> Result<Vec<&'a T>, CliError> {
        if self.names.is_empty() {
            return Ok(all.iter().collect());
        }
        self.names
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

    /// A tensor stats cannot read: an error when it was named, else a warning on stderr and
    /// `Ok(None)` (it is left out of the report).
    fn unreadable(&self, e: CliError) -> Result<Option<StatsRow>, CliError> {
        if !self.names.is_empty() {
            return Err(e);
        }
        eprintln!("warning: {}: {e}; left out", self.file);
        Ok(None)
    }
}

/// Statistics of the tensors `names` (all when empty) of any file. With no names, a tensor stats
/// cannot read (stored as parts, or of an element type without values) is left out with a
/// warning.
pub fn model_stats(model: &Model, file: &str, names: &[String], opts: &StatsOptions) -> Result<StatsReport, CliError> {
    let sel = Selection { names, file };
    let mut rows = Vec::new();
    for t in sel.pick(&model.catalog().tensors, |t| &t.name)? {
        let row = match with_bar(t, |tick| Ok(model.stats(t, opts, tick)?)) {
            Err(CliError::Format(e)) if e.kind == ErrorKind::Unsupported => sel.unreadable(CliError::Format(e))?,
            r => Some(r?),
        };
        rows.extend(row);
    }
    crate::identify::check_unchanged(model)?;
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
