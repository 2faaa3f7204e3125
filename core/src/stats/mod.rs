//! Tensor statistics in one streaming pass (plus one for the histogram), over any element type
//! the readers yield, fed chunk by chunk so hosts can read a file piece by piece (a browser
//! Worker reading `File` slices, a progress bar) and merge partial results.
//!
//! * [`Stats`] — pass 1: count, min, max, mean, std, zeros, NaN, ±Inf. Feed it bytes with
//!   [`Stats::push`] in pieces of any size (a piece may end in the middle of an element or of a
//!   ggml block: the remainder is carried), merge the results of separate parts with
//!   [`Stats::merge`], read the [`Summary`] at any time. To run a pass in parts (one per Worker),
//!   cut the tensor with [`split`] and carry each part's state as a [`StatsPart`].
//! * [`HistogramAccumulator`] — pass 2: equal-width bins over `[min, max]` once pass 1 has told
//!   the range ([`HistogramAccumulator::from_summary`]).
//! * [`DiffAccumulator`] — two tensors compared value by value (max and mean |a − b|, relative
//!   L2, cosine), fed as two byte streams of any element types.
//! * [`tensor_stats`] — both passes over one catalog tensor ([`crate::formats::TensorInfo`]),
//!   reading the source in [`StatsOptions::chunk_bytes`] pieces.
//!
//! # Values
//!
//! Every element becomes one f64 value, exactly as `numpy.astype(numpy.float64)` would make it:
//!
//! | element type | value |
//! | --- | --- |
//! | float64, float32, float16, bfloat16 | the float (exact) |
//! | int8 … int64, uint8 … uint64 | the integer; beyond 2^53, rounded to nearest (ties to even), as NumPy's cast |
//! | bool | 0.0 or 1.0 (any non-zero byte is true) |
//! | complex64, complex128 | **two values per element, its real and its imaginary part** (NumPy: `x.view(float32/float64)`); `count` is then twice the element count |
//! | float8 e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu; float4 e2m1fn | the float, as `ml_dtypes` decodes it (`fn`: no infinities, `fnuz`: byte 0x80 is NaN, e8m0: 0xFF is NaN); float4 packs two per byte, low nibble first |
//! | GGUF quantized blocks (Q4_0 … Q8_K, IQ*, TQ*, MXFP4, NVFP4) | the f32 values of [`crate::formats::ggml::dequantize`] (bit-identical to `gguf.quants.dequantize`) |
//!
//! Refused ([`StatsError::Unsupported`]): ggml `Q1_0` (which the gguf reference package cannot
//! dequantize either) and unknown ggml type ids.
//!
//! # Summary
//!
//! * `count`: every value (finite or not); `finite`: the values that are neither NaN nor ±Inf.
//! * `min`, `max`, `mean`, `std` are over the finite values; `std` is the population standard
//!   deviation (ddof = 0, NumPy's default). With no finite value all four are NaN.
//! * `zeros` counts +0 and -0; `nan`, `pos_inf`, `neg_inf` count the special values.
//!
//! Accumulation is in f64. Values are decoded into leaves of 2048; each leaf is summed with the
//! corrected two-pass algorithm (sum, then centred squares and the sum of deviations), and leaves
//! are combined with Chan–Golub–LeVeque's pairwise update in a binary tree (leaf *k* merges with
//! its sibling when both are complete), so rounding error grows with log2(n / 2048), not with n:
//! on 10^9 values mean and std are within a few ulps of the exactly rounded result. Because leaf
//! boundaries follow the element index, not the chunk boundaries, pushing the same bytes in any
//! pieces gives bit-identical results. [`Stats::merge`] of separately accumulated parts agrees
//! with one pass over the whole to rounding (counts, min and max exactly). Q4_K blocks are not
//! dequantized for the summary: a group's 32 values are exactly `(a q - b) 2^e` over its 4-bit
//! indices, so a block's moments come from integer sums of the indices and their squares (mean
//! exact, second moment rounded once); a block whose scales do not allow that form (too far apart
//! in magnitude, Inf, NaN) is dequantized into a leaf of its own.
//!
//! # Histogram
//!
//! Exactly `numpy.histogram(v, bins=bins, range=(min, max))` where `v` are the finite values as
//! float64: edges are `numpy.linspace(min, max, bins + 1)` computed operation for operation
//! (`i * step + min`, last edge `max`), and a value's bin is NumPy's: the estimate
//! `((v - min) / (max - min)) * bins`, then one step down when `v` is below that bin's left edge
//! or up when it is at or past its right edge; the last bin is closed. (Here the estimate
//! multiplies by `bins / (max - min)` instead of dividing, and the edge comparison is made only
//! for a value whose estimate lies within a few ulps of an integer, where it could matter; any
//! other value is in the estimate's bin for certain. Both estimates are within one bin of the bin
//! whose edges hold `v`, and one correction step from such an estimate lands on exactly that bin,
//! so both give NumPy's counts: the live cross-check compares them.)
//!
//! When `min == max` the range is `(min - 0.5, max + 0.5)`, as NumPy does. With no finite value
//! the histogram is NumPy's for an empty array: `bins` bins over `[0, 1]`, all counts 0. Where NumPy refuses ("Too many bins for
//! data range": a constant value beyond 2^53, where `± 0.5` is lost to rounding, or a range of
//! fewer ulps than bins), [`HistogramAccumulator::new`] refuses too
//! ([`StatsError::NarrowRange`]) and [`tensor_stats`] gives one bin `[min, max]` holding every
//! finite value ([`Histogram::single`]).
//!
//! # Errors
//!
//! [`Stats`] and [`HistogramAccumulator`] refuse what they cannot do with a [`StatsError`] when
//! they are made (an element type without values, no bins, a range that is not finite);
//! [`Stats::push`] then cannot fail. [`tensor_stats`] reads from a source, so it returns the
//! readers' [`FormatError`] (a [`StatsError`] becomes one with [`StatsError::to_format_error`]:
//! kind [`ErrorKind::Unsupported`] or [`ErrorKind::Limit`], with the tensor's name).
//!
//! ```
//! use tensorlane_core::formats::ElementType;
//! use tensorlane_core::stats::{HistogramAccumulator, Stats};
//! use tensorlane_core::DType;
//!
//! let bytes: Vec<u8> = [1.0f32, 2.0, f32::NAN, 4.0, -0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let ty = ElementType::Dense(DType::F32);
//! let mut s = Stats::new(ty)?;
//! s.push(&bytes[..7]); // any piece boundaries: the cut element is carried
//! s.push(&bytes[7..]);
//! let sum = s.summary();
//! assert_eq!((sum.count, sum.finite, sum.nan, sum.zeros), (5, 4, 1, 1));
//! assert_eq!((sum.min, sum.max, sum.mean), (-0.0, 4.0, 1.75));
//! let mut h = HistogramAccumulator::from_summary(ty, &sum, 4)?;
//! h.push(&bytes);
//! let h = h.finish();
//! assert_eq!(h.edges, [0.0, 1.0, 2.0, 3.0, 4.0]);
//! assert_eq!(h.counts, [1, 1, 1, 1]);
//! # Ok::<(), tensorlane_core::stats::StatsError>(())
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::formats::{self, ElementType, ErrorKind, FormatError, Storage, TensorInfo};
use crate::source::ReadAt;

mod decode;
mod diff;
mod kernel;

pub use diff::{Diff, DiffAccumulator};

use crate::formats::ggml::GgmlType;
use crate::formats::ggml::groups::{GROUP, Group, GroupDecoder, Linear, group_decoder, q4_k_linear};
use decode::{Codec, LEAF};
use kernel::{Bins, Leaf, Moments};

/// The most histogram bins [`HistogramAccumulator`] accepts (2^20: 40 MiB of count tables and
/// edges).
pub const MAX_BINS: usize = 1 << 20;

/// Options of [`tensor_stats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsOptions {
    /// Histogram bins (default 64; 1 to [`MAX_BINS`]).
    pub bins: usize,
    /// Bytes read and fed at a time (default 4 MiB; rounded down to whole elements or ggml
    /// blocks, at least one).
    pub chunk_bytes: usize,
}

impl Default for StatsOptions {
    fn default() -> StatsOptions {
        StatsOptions {
            bins: 64,
            chunk_bytes: 4 << 20,
        }
    }
}

/// Pass-1 results (see the module docs for the exact meaning of each field).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Every value, finite or not (complex: two per element).
    pub count: u64,
    /// Values that are neither NaN nor ±Inf.
    pub finite: u64,
    /// Smallest finite value (NaN when there is none).
    pub min: f64,
    /// Largest finite value (NaN when there is none).
    pub max: f64,
    /// Mean of the finite values (NaN when there is none).
    pub mean: f64,
    /// Population standard deviation (ddof = 0) of the finite values (NaN when there is none).
    pub std: f64,
    /// Values equal to zero (+0 and -0).
    pub zeros: u64,
    /// NaN values.
    pub nan: u64,
    /// +Inf values.
    pub pos_inf: u64,
    /// -Inf values.
    pub neg_inf: u64,
}

/// Equal-width bins: `edges.len() == counts.len() + 1`; bin `i` is `[edges[i], edges[i + 1])`,
/// the last one closed.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Bin edges, ascending (`numpy.linspace`).
    pub edges: Vec<f64>,
    /// Values per bin.
    pub counts: Vec<u64>,
}

impl Histogram {
    /// The histogram used where NumPy has none ([`StatsError::NarrowRange`]): one bin
    /// `[min, max]` holding every finite value.
    pub fn single(summary: &Summary) -> Histogram {
        Histogram {
            edges: alloc::vec![summary.min, summary.max],
            counts: alloc::vec![summary.finite],
        }
    }
}

/// The statistics of one tensor ([`tensor_stats`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorStats {
    /// The tensor's name.
    pub name: String,
    /// Its element type's name ([`ElementType::name`]: `float32`, `bfloat16`, `Q4_K`, ...).
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Pass-1 results.
    pub summary: Summary,
    /// Pass-2 results.
    pub histogram: Histogram,
}

/// Why statistics cannot be computed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StatsError {
    /// The element type has no values this module can decode.
    Unsupported {
        /// The element type's name.
        dtype: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// The number of histogram bins is 0 or over [`MAX_BINS`].
    Bins {
        /// The number asked for.
        bins: usize,
    },
    /// The histogram range is not finite or `lo > hi`.
    Range {
        /// Left end.
        lo: f64,
        /// Right end.
        hi: f64,
    },
    /// The range is too narrow for its magnitude: the `bins + 1` edges would not strictly
    /// increase (NumPy: "Too many bins for data range"). Happens for a constant value beyond
    /// 2^53, where `± 0.5` is lost to rounding, or a range of fewer ulps than bins.
    /// [`tensor_stats`] and [`stats_of_bytes`] then give [`Histogram::single`].
    NarrowRange {
        /// Left end.
        lo: f64,
        /// Right end.
        hi: f64,
        /// The number of bins asked for.
        bins: usize,
    },
    /// A [`StatsPart`] given as numbers ([`StatsPart::from_array`]) that no accumulator could
    /// have made.
    Part {
        /// The rule it breaks.
        rule: &'static str,
    },
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatsError::Unsupported { dtype, reason } => {
                write!(f, "statistics of {dtype} values are not supported: {reason}")
            }
            StatsError::Bins { bins } => write!(
                f,
                "a histogram needs 1 to {MAX_BINS} bins, not {bins}; pick a number in that range"
            ),
            StatsError::Range { lo, hi } => write!(
                f,
                "histogram range [{lo}, {hi}] is not a finite interval with lo <= hi (NumPy refuses it too)"
            ),
            StatsError::NarrowRange { lo, hi, bins } => write!(
                f,
                "histogram range [{lo}, {hi}] is too narrow for {bins} finite-sized bins at its magnitude (NumPy \
                 refuses it too); use fewer bins"
            ),
            StatsError::Part { rule } => write!(
                f,
                "a statistics part is malformed: {rule}; pass the numbers StatsPart::to_array gave, unchanged"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for StatsError {}

impl StatsError {
    /// This error as a [`FormatError`] of `format`: [`ErrorKind::Unsupported`] for an element
    /// type, [`ErrorKind::Syntax`] for a malformed part, [`ErrorKind::Limit`] for bins and ranges.
    pub fn to_format_error(&self, format: &'static str) -> FormatError {
        let kind = match self {
            StatsError::Unsupported { .. } => ErrorKind::Unsupported,
            StatsError::Part { .. } => ErrorKind::Syntax,
            _ => ErrorKind::Limit,
        };
        FormatError::new(format, kind, alloc::format!("{self}"))
    }
}

/// Where a [`Feed`] hands its full leaves: plain values, or weighted ones (4-bit ggml groups), or
/// (for a sink that takes them) their moments.
trait Sink {
    /// Whether the sink takes a leaf as its moments ([`Sink::moments`]): then a [`Feed`] of Q4_K
    /// blocks summarises each group from its index sums instead of dequantizing it.
    const MOMENTS: bool = false;

    /// A leaf of values.
    fn values(&mut self, x: &[f64]);

    /// A leaf of `count` values given by their moments and counts; only called when
    /// [`Sink::MOMENTS`] is true (the default ignores it).
    fn moments(&mut self, l: &Leaf, count: u64) {
        let _ = (l, count);
    }
    /// A leaf of values `v` (the f32 values of 4-bit ggml groups), value `i` standing for `w[i]`
    /// elements. Only the histogram reads grouped feeds ([`Feed::grouped`]); any other sink gets
    /// the values repeated, in order of the pairs.
    fn weighted(&mut self, v: &[f32], w: &[u8]) {
        let mut buf = Vec::with_capacity(LEAF);
        for (&v, &w) in v.iter().zip(w) {
            buf.extend(core::iter::repeat_n(f64::from(v), usize::from(w)));
            if buf.len() >= LEAF {
                self.values(&buf);
                buf.clear();
            }
        }
        if !buf.is_empty() {
            self.values(&buf);
        }
    }
}

/// Bytes → values in leaves: carries a cut unit between pushes and stops at an element limit.
#[derive(Clone, Debug)]
struct Feed {
    codec: Codec,
    /// Values per element (2 for complex).
    per_element: u64,
    /// The bytes of a unit cut at the end of the last push.
    carry: Vec<u8>,
    /// Decoded values not yet handed to the sink (fewer than [`LEAF`]).
    buf: Vec<f64>,
    fill: usize,
    /// f32 scratch for ggml blocks.
    scratch: Vec<f32>,
    /// Values still to take (`u64::MAX`: no limit).
    left: u64,
    /// Values taken.
    taken: u64,
    /// For the 4-bit ggml types when made by [`Feed::grouped`]: blocks become weighted leaves.
    groups: Option<Grouped>,
    /// Q4_K into a sink that takes moments: whole blocks are summarised from their groups' index
    /// sums ([`q4_k_linear`], [`kernel::linear_block`]) into `cur`, handed out every [`LEAF`]
    /// values.
    linear: bool,
    lin: [Linear; 8],
    cur: Leaf,
    cur_n: usize,
}

/// The weighted leaf a grouped [`Feed`] is filling: each group of 32 elements gives its 16
/// (value, count) pairs, count 0 included (the kernels give a zero weight no say, and a fixed
/// layout spares a branch per pair).
#[derive(Clone, Debug)]
struct Grouped {
    decoder: GroupDecoder,
    /// One block's groups.
    block: Vec<Group>,
    /// [`LEAF`] / [`GROUP`] * 16 pairs.
    values: Vec<f32>,
    weights: Vec<u8>,
    /// Elements the pairs stand for (at most [`LEAF`]); pairs in use are `fill / GROUP * 16`.
    fill: usize,
}

impl Grouped {
    /// Decodes whole blocks `src` into pairs, handing out a weighted leaf at every [`LEAF`]
    /// elements (a multiple of every block size).
    fn blocks(&mut self, src: &[u8], unit: usize, per: usize, sink: &mut impl Sink) {
        for b in src.chunks_exact(unit) {
            self.decoder.fill(b, &mut self.block);
            let at = self.fill / GROUP * 16;
            let (values, weights) = (
                &mut self.values[at..at + per / GROUP * 16],
                &mut self.weights[at..at + per / GROUP * 16],
            );
            for ((g, v), w) in self
                .block
                .iter()
                .zip(values.chunks_exact_mut(16))
                .zip(weights.chunks_exact_mut(16))
            {
                v.copy_from_slice(&g.values);
                w.copy_from_slice(&g.counts);
            }
            self.fill += per;
            if self.fill >= LEAF {
                sink.weighted(&self.values, &self.weights);
                self.fill = 0;
            }
        }
    }

    /// The pairs not yet handed out.
    fn pending(&self) -> (&[f32], &[u8]) {
        let n = self.fill / GROUP * 16;
        (&self.values[..n], &self.weights[..n])
    }
}

impl Feed {
    fn new(ty: ElementType) -> Result<Feed, StatsError> {
        let (codec, per_element) = Codec::of(ty)?;
        Ok(Feed {
            codec,
            per_element,
            carry: Vec::new(),
            buf: alloc::vec![0.0; LEAF],
            fill: 0,
            scratch: Vec::new(),
            left: u64::MAX,
            taken: 0,
            groups: None,
            linear: matches!(ty, ElementType::Ggml(GgmlType(12))),
            lin: [Linear::default(); 8],
            cur: Leaf::EMPTY,
            cur_n: 0,
        })
    }

    /// [`Feed::new`], with the 4-bit ggml types (Q4_0, Q4_1, Q4_K, IQ4_NL) read as groups of 16
    /// weighted values: the same histogram counts, without binning every element (for
    /// [`HistogramAccumulator`]; the summary pass stays plain, where the vectorized dequantization
    /// and moment kernel are faster than weighting).
    fn grouped(ty: ElementType) -> Result<Feed, StatsError> {
        let mut f = Feed::new(ty)?;
        if let Codec::Ggml { ty, block, .. } = f.codec
            && let Some(decoder) = group_decoder(ty)
        {
            let pairs = LEAF / GROUP * 16;
            f.groups = Some(Grouped {
                decoder,
                block: alloc::vec![Group::default(); block / GROUP],
                values: alloc::vec![0.0; pairs],
                weights: alloc::vec![0; pairs],
                fill: 0,
            });
        }
        Ok(f)
    }

    fn limit(&mut self, elements: u64) {
        self.left = elements.saturating_mul(self.per_element).saturating_sub(self.taken);
    }

    /// Feeds `bytes`, handing every full leaf to `sink`.
    fn push(&mut self, mut bytes: &[u8], sink: &mut impl Sink) {
        let unit = self.codec.unit_bytes();
        if !self.carry.is_empty() {
            let need = unit - self.carry.len();
            if bytes.len() < need {
                self.carry.extend_from_slice(bytes);
                return;
            }
            let mut whole = core::mem::take(&mut self.carry);
            whole.extend_from_slice(&bytes[..need]);
            bytes = &bytes[need..];
            self.units(&whole, sink);
            whole.clear();
            self.carry = whole; // keep the allocation
        }
        let cut = bytes.len() - bytes.len() % unit;
        self.units(&bytes[..cut], sink);
        self.carry.extend_from_slice(&bytes[cut..]);
    }

    /// Decodes whole units into the leaf buffer, handing out full leaves.
    fn units<S: Sink>(&mut self, mut src: &[u8], sink: &mut S) {
        let (unit, per) = (self.codec.unit_bytes(), self.codec.unit_values());
        if S::MOMENTS && self.linear && self.fill == 0 {
            // Whole Q4_K blocks the element limit does not cut: each group's moments from its
            // index sums where its values are exactly linear in the index (almost always), else
            // the block dequantized. Leaves still end every LEAF values, so the pieces the bytes
            // come in do not change the result.
            let whole = (self.left / per as u64).min((src.len() / unit) as u64) as usize;
            for b in src[..whole * unit].chunks_exact(unit) {
                let l = if q4_k_linear(b, &mut self.lin) {
                    kernel::linear_block(&self.lin)
                } else {
                    self.codec.decode(b, &mut self.buf[..per], &mut self.scratch);
                    kernel::leaf(&self.buf[..per])
                };
                self.cur = self.cur.then(l);
                self.cur_n += per;
                if self.cur_n == LEAF {
                    sink.moments(&self.cur, LEAF as u64);
                    (self.cur, self.cur_n) = (Leaf::EMPTY, 0);
                }
            }
            let took = (whole * per) as u64;
            self.left -= took;
            self.taken += took;
            src = &src[whole * unit..];
        }
        if let Some(g) = &mut self.groups {
            // Whole blocks the element limit does not cut go as groups; the rest below.
            let whole = (self.left / per as u64).min((src.len() / unit) as u64) as usize;
            g.blocks(&src[..whole * unit], unit, per, sink);
            let took = (whole * per) as u64;
            self.left -= took;
            self.taken += took;
            src = &src[whole * unit..];
        }
        while !src.is_empty() && self.left > 0 {
            let room = (LEAF - self.fill) / per;
            let n = room.min(src.len() / unit);
            let vals = n * per;
            let dst = &mut self.buf[self.fill..self.fill + vals];
            self.codec.decode(&src[..n * unit], dst, &mut self.scratch);
            src = &src[n * unit..];
            let keep = (vals as u64).min(self.left) as usize;
            self.fill += keep;
            self.left -= keep as u64;
            self.taken += keep as u64;
            if self.fill == LEAF {
                sink.values(&self.buf);
                self.fill = 0;
            }
        }
    }

    /// Values decoded but not yet handed out.
    fn pending(&self) -> &[f64] {
        &self.buf[..self.fill]
    }

    /// Elements decoded but not yet handed out (plain, grouped and summarised).
    fn pending_count(&self) -> u64 {
        (self.fill + self.groups.as_ref().map_or(0, |g| g.fill) + self.cur_n) as u64
    }

    /// The moments and counts of what a summary feed holds: summarised blocks, then values.
    fn pending_leaf(&self) -> Leaf {
        self.cur.then(kernel::leaf(self.pending()))
    }

    /// Hands what is pending to `sink` without clearing it.
    fn pending_into(&self, sink: &mut impl Sink) {
        sink.values(self.pending());
        if let Some(g) = &self.groups {
            let (v, w) = g.pending();
            sink.weighted(v, w);
        }
    }
}

/// Pass-1 accumulator: feed it a tensor's bytes (C order, little-endian, as
/// [`crate::formats::read`] gives them) in pieces of any size, read the [`Summary`] at any time.
#[derive(Clone, Debug)]
pub struct Stats {
    feed: Feed,
    acc: Acc,
}

/// The accumulated leaves of a [`Stats`].
#[derive(Clone, Debug)]
struct Acc {
    /// Complete leaves merged pairwise: `(level, moments of 2^level leaves)`, levels strictly
    /// decreasing.
    tree: Vec<(u32, Moments)>,
    /// What [`Stats::merge`] and [`Stats::merge_part`] brought in.
    merged: StatsPart,
    count: u64,
    zeros: u64,
    nan: u64,
    pos_inf: u64,
    neg_inf: u64,
}

impl Acc {
    fn add_counts(&mut self, l: &Leaf, values: u64) {
        self.count += values;
        self.zeros += l.zeros;
        self.nan += l.nan;
        self.pos_inf += l.pos_inf;
        self.neg_inf += l.neg_inf;
    }

    fn add_leaf(&mut self, x: &[f64]) {
        self.add_moments(&kernel::leaf(x), x.len() as u64);
    }

    fn add_moments(&mut self, l: &Leaf, values: u64) {
        self.add_counts(l, values);
        let mut node = (0u32, l.moments);
        while let Some(&(level, m)) = self.tree.last() {
            if level != node.0 {
                break;
            }
            self.tree.pop();
            node = (level + 1, m.merge(node.1));
        }
        self.tree.push(node);
    }

    /// The moments of the values pushed here: the tree (oldest first), then `pending`.
    fn moments(&self, pending: &Leaf) -> Moments {
        let mut m = Moments::EMPTY;
        for &(_, t) in self.tree.iter().rev() {
            m = t.merge(m);
        }
        m.merge(pending.moments)
    }
}

impl Default for Acc {
    fn default() -> Acc {
        Acc {
            tree: Vec::new(),
            merged: StatsPart::EMPTY,
            count: 0,
            zeros: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
        }
    }
}

impl Sink for Acc {
    const MOMENTS: bool = true;

    fn values(&mut self, x: &[f64]) {
        self.add_leaf(x);
    }

    fn moments(&mut self, l: &Leaf, count: u64) {
        self.add_moments(l, count);
    }
}

impl Sink for Bins {
    fn values(&mut self, x: &[f64]) {
        self.add(x);
    }

    fn weighted(&mut self, v: &[f32], w: &[u8]) {
        self.add_weighted(v, w);
    }
}

/// A queue of values in order ([`DiffAccumulator`]'s: its feeds are plain, never grouped, since
/// a comparison pairs values in order).
impl Sink for Vec<f64> {
    fn values(&mut self, x: &[f64]) {
        self.extend_from_slice(x);
    }
}

impl Stats {
    /// An accumulator for elements of type `ty` (refused: see [`StatsError::Unsupported`]).
    pub fn new(ty: ElementType) -> Result<Stats, StatsError> {
        Ok(Stats {
            feed: Feed::new(ty)?,
            acc: Acc::default(),
        })
    }

    /// Takes at most `elements` elements from the pushed bytes and ignores the rest: for a
    /// tensor of packed float4 with an odd element count, whose last byte holds one element and
    /// a padding nibble. [`tensor_stats`] sets it to the tensor's element count.
    pub fn with_elements(mut self, elements: u64) -> Stats {
        self.feed.limit(elements);
        self
    }

    /// Bytes of one indivisible unit (an element, a complex component, a ggml block): parts
    /// that are accumulated separately and then merged should be cut at multiples of it.
    pub fn unit_bytes(&self) -> usize {
        self.feed.codec.unit_bytes()
    }

    /// Bytes of a cut unit held since the last [`Stats::push`], waiting for the rest of it.
    pub fn pending_bytes(&self) -> usize {
        self.feed.carry.len()
    }

    /// Feeds the next bytes of the tensor. A piece may end anywhere: a cut element or ggml block
    /// is completed by the next push.
    pub fn push(&mut self, bytes: &[u8]) {
        self.feed.push(bytes, &mut self.acc);
    }

    /// Adds the results of `other`, an accumulator over another part of the data (of any element
    /// type), as if its values followed those pushed here. `other`'s cut unit, if any
    /// ([`Stats::pending_bytes`]), is not carried over: cut parts at [`Stats::unit_bytes`]
    /// multiples.
    pub fn merge(&mut self, other: &Stats) {
        self.merge_part(&other.part());
    }

    /// Adds a part accumulated elsewhere ([`Stats::part`], perhaps in another Worker or process,
    /// carried as [`StatsPart::to_array`]), as [`Stats::merge`] does.
    pub fn merge_part(&mut self, part: &StatsPart) {
        self.acc.merged = self.acc.merged.merge(part);
    }

    /// What this accumulator holds, in the form [`Stats::merge_part`] adds elsewhere.
    pub fn part(&self) -> StatsPart {
        let pending = self.feed.pending_leaf();
        let m = self.acc.moments(&pending);
        let a = &self.acc;
        let own = StatsPart::of(
            m,
            a.count + self.feed.pending_count(),
            [
                a.zeros + pending.zeros,
                a.nan + pending.nan,
                a.pos_inf + pending.pos_inf,
                a.neg_inf + pending.neg_inf,
            ],
        );
        own.merge(&a.merged)
    }

    /// The statistics of everything pushed and merged so far.
    pub fn summary(&self) -> Summary {
        self.part().summary()
    }
}

/// The mergeable state of a [`Stats`] ([`Stats::part`]): the moments of its finite values and
/// its counts. It lets pass 1 run in parts (byte ranges cut at [`Stats::unit_bytes`] multiples,
/// one per Worker or thread) whose results are then merged in order ([`StatsPart::merge`]); the
/// merged summary agrees with one pass over the whole to rounding (counts, min and max exactly).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatsPart {
    /// Every value, finite or not.
    pub count: u64,
    /// Finite values.
    pub finite: u64,
    /// Mean of the finite values (0 when there is none).
    pub mean: f64,
    /// Sum of the squared deviations of the finite values from their mean (0 when there is none).
    pub m2: f64,
    /// Smallest finite value (+Inf when there is none).
    pub min: f64,
    /// Largest finite value (-Inf when there is none).
    pub max: f64,
    /// Values equal to zero.
    pub zeros: u64,
    /// NaN values.
    pub nan: u64,
    /// +Inf values.
    pub pos_inf: u64,
    /// -Inf values.
    pub neg_inf: u64,
}

impl StatsPart {
    /// No values.
    pub const EMPTY: StatsPart = StatsPart {
        count: 0,
        finite: 0,
        mean: 0.0,
        m2: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        zeros: 0,
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
    };

    /// How many numbers [`StatsPart::to_array`] gives.
    pub const LEN: usize = 10;

    fn moments(&self) -> Moments {
        Moments {
            n: self.finite,
            mean: self.mean,
            m2: self.m2,
            min: self.min,
            max: self.max,
        }
    }

    /// A part of `count` values: moments `m` of the finite ones, and `[zeros, nan, pos_inf, neg_inf]`.
    fn of(m: Moments, count: u64, [zeros, nan, pos_inf, neg_inf]: [u64; 4]) -> StatsPart {
        StatsPart {
            count,
            finite: m.n,
            mean: m.mean,
            m2: m.m2,
            min: m.min,
            max: m.max,
            zeros,
            nan,
            pos_inf,
            neg_inf,
        }
    }

    /// The part of `self`'s values followed by `later`'s (Chan, Golub and LeVeque's update).
    pub fn merge(&self, later: &StatsPart) -> StatsPart {
        StatsPart::of(
            self.moments().merge(later.moments()),
            self.count + later.count,
            [
                self.zeros + later.zeros,
                self.nan + later.nan,
                self.pos_inf + later.pos_inf,
                self.neg_inf + later.neg_inf,
            ],
        )
    }

    /// The summary of these values.
    pub fn summary(&self) -> Summary {
        let none = self.finite == 0;
        let nan_if = |v: f64| if none { f64::NAN } else { v };
        Summary {
            count: self.count,
            finite: self.finite,
            min: nan_if(self.min),
            max: nan_if(self.max),
            mean: nan_if(self.mean),
            std: nan_if(libm::sqrt((self.m2 / self.finite as f64).max(0.0))),
            zeros: self.zeros,
            nan: self.nan,
            pos_inf: self.pos_inf,
            neg_inf: self.neg_inf,
        }
    }

    /// The part as [`StatsPart::LEN`] numbers, in field order (`count`, `finite`, `mean`, `m2`,
    /// `min`, `max`, `zeros`, `nan`, `pos_inf`, `neg_inf`): what a host passes between Workers
    /// (a `Float64Array`: every float exact, counts exact up to 2^53).
    pub fn to_array(&self) -> [f64; StatsPart::LEN] {
        [
            self.count as f64,
            self.finite as f64,
            self.mean,
            self.m2,
            self.min,
            self.max,
            self.zeros as f64,
            self.nan as f64,
            self.pos_inf as f64,
            self.neg_inf as f64,
        ]
    }

    /// The part [`StatsPart::to_array`] gave, checked: counts are whole numbers up to 2^53 that
    /// add up (`finite + nan + pos_inf + neg_inf == count`, `zeros <= finite`), and with finite
    /// values `min <= max` are finite and `mean` and `m2 >= 0` are numbers (with none, the
    /// moments are those of [`StatsPart::EMPTY`] whatever was passed).
    pub fn from_array(a: &[f64]) -> Result<StatsPart, StatsError> {
        let bad = |rule| Err(StatsError::Part { rule });
        if a.len() != StatsPart::LEN {
            return bad("a part is 10 numbers (count, finite, mean, m2, min, max, zeros, nan, pos_inf, neg_inf)");
        }
        let mut counts = [0u64; 6];
        for (c, &v) in counts.iter_mut().zip([a[0], a[1], a[6], a[7], a[8], a[9]].iter()) {
            if !((0.0..=9_007_199_254_740_992.0).contains(&v) && libm::trunc(v) == v) {
                return bad("a count is not a whole number from 0 to 2^53");
            }
            *c = v as u64;
        }
        let [count, finite, zeros, nan, pos_inf, neg_inf] = counts;
        if finite
            .checked_add(nan)
            .and_then(|n| n.checked_add(pos_inf))
            .and_then(|n| n.checked_add(neg_inf))
            != Some(count)
        {
            return bad("finite + nan + pos_inf + neg_inf must equal count");
        }
        if zeros > finite {
            return bad("zeros cannot exceed finite");
        }
        let (mean, m2, min, max) = (a[2], a[3], a[4], a[5]);
        if finite == 0 {
            return Ok(StatsPart {
                count,
                zeros,
                nan,
                pos_inf,
                neg_inf,
                ..StatsPart::EMPTY
            });
        }
        if !(min.is_finite() && max.is_finite() && min <= max) {
            return bad("min and max must be finite with min <= max");
        }
        if mean.is_nan() || m2.is_nan() || m2 < 0.0 {
            return bad("mean must be a number and m2 a number >= 0");
        }
        Ok(StatsPart {
            count,
            finite,
            mean,
            m2,
            min,
            max,
            zeros,
            nan,
            pos_inf,
            neg_inf,
        })
    }
}

/// One part of a tensor's stored bytes for statistics in parts ([`split`]): bytes
/// `[offset, offset + bytes)`, holding `elements` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte, from the start of the tensor's stored bytes.
    pub offset: u64,
    /// Length in bytes.
    pub bytes: u64,
    /// Elements in it (the [`Stats::with_elements`] of its accumulators).
    pub elements: u64,
}

/// Splits `elements` elements of `ty` into at most `parts` spans of nearly equal size, in order,
/// each a whole number of elements and of decoding units (a ggml block, a byte of two float4):
/// both passes can then run one span per Worker or thread, and their results merge
/// ([`StatsPart::merge`] in span order, [`HistogramAccumulator::merge`]) into those of one pass
/// over the whole. Fewer spans come back when there are fewer units than `parts`; one empty span
/// for an empty tensor. `None` when `elements` is not a whole number of ggml blocks or the size
/// overflows.
pub fn split(ty: ElementType, elements: u64, parts: usize) -> Option<Vec<Span>> {
    let granule = match ty {
        ElementType::Ggml(g) => g.block_size()?,
        ElementType::Logical(crate::zt::format::LogicalType::F4E2M1) => 2,
        _ => 1,
    };
    ty.nbytes(elements)?;
    let units = elements.div_ceil(granule);
    let parts = (parts.max(1) as u64).min(units.max(1));
    let mut out = Vec::new();
    let mut at = 0u64;
    for k in 1..=parts {
        let end = (u128::from(units) * u128::from(k) / u128::from(parts)) as u64;
        let end_el = (end * granule).min(elements);
        let (from, to) = (ty.nbytes(at)?, ty.nbytes(end_el)?);
        out.push(Span {
            offset: from,
            bytes: to - from,
            elements: end_el - at,
        });
        at = end_el;
    }
    Some(out)
}

/// Pass-2 accumulator: equal-width histogram bins over a range, NumPy's rule (module docs).
#[derive(Clone, Debug)]
pub struct HistogramAccumulator {
    feed: Feed,
    bins: Bins,
}

impl HistogramAccumulator {
    /// `bins` bins over `[lo, hi]` (like `numpy.histogram`'s `range=(lo, hi)`: `lo == hi` becomes
    /// `(lo - 0.5, hi + 0.5)`; values outside, NaN and ±Inf are not counted) for elements of type
    /// `ty`.
    pub fn new(ty: ElementType, lo: f64, hi: f64, bins: usize) -> Result<HistogramAccumulator, StatsError> {
        if bins == 0 || bins > MAX_BINS {
            return Err(StatsError::Bins { bins });
        }
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(StatsError::Range { lo, hi });
        }
        let feed = Feed::grouped(ty)?;
        let (wlo, whi) = if lo == hi { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
        let b = Bins::new(wlo, whi, bins);
        if b.edges.windows(2).any(|w| w[0] >= w[1]) {
            return Err(StatsError::NarrowRange { lo, hi, bins });
        }
        Ok(HistogramAccumulator { feed, bins: b })
    }

    /// The histogram NumPy makes of the finite values that `summary` describes: over
    /// `[min, max]`, or over `[0, 1]` when there is no finite value.
    pub fn from_summary(ty: ElementType, summary: &Summary, bins: usize) -> Result<HistogramAccumulator, StatsError> {
        if summary.finite == 0 {
            HistogramAccumulator::new(ty, 0.0, 1.0, bins)
        } else {
            HistogramAccumulator::new(ty, summary.min, summary.max, bins)
        }
    }

    /// As [`Stats::with_elements`].
    pub fn with_elements(mut self, elements: u64) -> HistogramAccumulator {
        self.feed.limit(elements);
        self
    }

    /// The bin edges (`bins + 1`).
    pub fn edges(&self) -> &[f64] {
        &self.bins.edges
    }

    /// Feeds the next bytes (any piece boundaries, as [`Stats::push`]).
    pub fn push(&mut self, bytes: &[u8]) {
        self.feed.push(bytes, &mut self.bins);
    }

    /// Adds the counts of `other`, made with the same range and bins (when the edges differ,
    /// nothing is added and `false` is returned).
    pub fn merge(&mut self, other: &HistogramAccumulator) -> bool {
        if other.bins.edges != self.bins.edges {
            return false;
        }
        self.bins.add_counts(&other.bins);
        other.feed.pending_into(&mut self.bins);
        true
    }

    /// The histogram of everything pushed and merged.
    pub fn finish(mut self) -> Histogram {
        self.feed.pending_into(&mut self.bins);
        Histogram {
            counts: self.bins.counts(),
            edges: self.bins.edges,
        }
    }
}

/// [`Stats`] and [`HistogramAccumulator`] over bytes already in memory: `elements` elements of
/// `ty` in `bytes` (C order, little-endian), `bins` bins.
pub fn stats_of_bytes(
    ty: ElementType,
    elements: u64,
    bytes: &[u8],
    bins: usize,
) -> Result<(Summary, Histogram), StatsError> {
    if bins == 0 || bins > MAX_BINS {
        return Err(StatsError::Bins { bins });
    }
    let mut s = Stats::new(ty)?.with_elements(elements);
    s.push(bytes);
    let summary = s.summary();
    let mut h = match HistogramAccumulator::from_summary(ty, &summary, bins) {
        Ok(h) => h.with_elements(elements),
        Err(StatsError::NarrowRange { .. }) => return Ok((summary, Histogram::single(&summary))),
        Err(e) => return Err(e),
    };
    if summary.finite > 0 {
        h.push(bytes);
    }
    Ok((summary, h.finish()))
}

/// Both passes over tensor `t` of a catalog of `format` (`sources[k]` is the file named by
/// [`crate::formats::Catalog::sources`]`[k]`).
///
/// When the tensor's stored bytes are the tensor ([`TensorInfo::is_zero_copy`]) they are read
/// straight from the source, [`StatsOptions::chunk_bytes`] at a time (borrowed when the source is
/// in memory, else into one reused buffer); a deflated member or a byte-swapped range is streamed
/// by [`crate::formats::read_chunks`] in each pass (bounded memory whatever the declared size);
/// otherwise (strided views, HDF5 chunks) the tensor is decoded once by [`crate::formats::read`]
/// (under its default limit) and fed in the same pieces. `progress(done, total)` is called after each piece, `total` being twice the
/// tensor's byte size (two passes); the second pass is skipped when there is no finite value or
/// NumPy would have no bins ([`StatsError::NarrowRange`]: the histogram is then
/// [`Histogram::single`]).
pub fn tensor_stats<S: ReadAt + ?Sized>(
    format: &'static str,
    t: &TensorInfo,
    sources: &[&S],
    opts: &StatsOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<TensorStats, FormatError> {
    let name = || t.name.clone();
    let err = |e: StatsError| e.to_format_error(format).tensor(t.name.clone());
    if opts.bins == 0 || opts.bins > MAX_BINS {
        return Err(err(StatsError::Bins { bins: opts.bins }));
    }
    let overflow = || FormatError::new(format, ErrorKind::Overflow, "its size overflows 64 bits").tensor(name());
    let numel = t.numel().ok_or_else(overflow)?;
    let nbytes = t.nbytes().ok_or_else(overflow)?;
    let mut stats = Stats::new(t.ty).map_err(err)?.with_elements(numel);
    let unit = stats.unit_bytes();
    let chunk = (opts.chunk_bytes / unit).max(1) * unit;
    let total = nbytes.saturating_mul(2);

    let input = match (&t.storage, t.arrangement.is_native()) {
        (Storage::Range { source, offset, len }, true) => {
            if *len != nbytes {
                return Err(FormatError::new(
                    format,
                    ErrorKind::SizeMismatch,
                    alloc::format!(
                        "{} {:?} needs {nbytes} bytes but {len} are stored",
                        t.ty.name(),
                        t.shape
                    ),
                )
                .tensor(name()));
            }
            let src = sources.get(*source).copied().ok_or_else(|| {
                FormatError::new(
                    format,
                    ErrorKind::Companion,
                    alloc::format!("needs source #{source}, but only {} were supplied", sources.len()),
                )
                .tensor(name())
            })?;
            // The whole range must be in the source before any piece is read (or allocated).
            crate::source::check_range(*offset, *len, src.size())
                .map_err(|e| FormatError::source(format, e).tensor(name()))?;
            Input::Direct(src, *offset)
        }
        // Stored in order, only compressed or byte-swapped: streamed in bounded pieces per pass.
        (
            Storage::Deflate { .. }
            | Storage::Range { .. }
            | Storage::Encoded {
                codec: formats::Codec::ZstdSeekable,
                ..
            },
            _,
        ) if t.arrangement.view.is_none() => Input::Stream,
        _ => Input::Decoded(formats::read(format, t, sources)?),
    };
    let mut buf = Vec::new();
    let mut pass = |done: &mut u64, feed: &mut dyn FnMut(&[u8])| -> Result<(), FormatError> {
        let mut pos = 0u64;
        if let Input::Stream = input {
            return formats::read_chunks(
                format,
                t,
                sources,
                &[],
                &formats::ReadLimits::default(),
                chunk,
                &mut |p| {
                    feed(p);
                    *done += p.len() as u64;
                    progress(*done, total);
                    Ok(())
                },
            );
        }
        while pos < nbytes {
            let n = (nbytes - pos).min(chunk as u64);
            match &input {
                Input::Decoded(bytes) => {
                    let piece = bytes.get(pos as usize..(pos + n) as usize).ok_or_else(|| {
                        FormatError::new(
                            format,
                            ErrorKind::SizeMismatch,
                            alloc::format!("{} bytes were read where {nbytes} were expected", bytes.len()),
                        )
                        .tensor(name())
                    })?;
                    feed(piece);
                }
                Input::Stream => {}
                Input::Direct(src, offset) => {
                    let at = offset + pos;
                    if let Some(s) = src.slice(at, n) {
                        feed(s);
                    } else {
                        buf.resize(n as usize, 0);
                        src.read_at(at, &mut buf)
                            .map_err(|e| FormatError::source(format, e).tensor(name()))?;
                        feed(&buf);
                    }
                }
            }
            pos += n;
            *done += n;
            progress(*done, total);
        }
        Ok(())
    };
    let mut done = 0u64;
    pass(&mut done, &mut |b| stats.push(b))?;
    let summary = stats.summary();
    let histogram = match HistogramAccumulator::from_summary(t.ty, &summary, opts.bins) {
        Ok(h) => {
            let mut hist = h.with_elements(numel);
            if summary.finite > 0 {
                pass(&mut done, &mut |b| hist.push(b))?;
            }
            hist.finish()
        }
        Err(StatsError::NarrowRange { .. }) => Histogram::single(&summary),
        Err(e) => return Err(err(e)),
    };
    progress(total, total);
    Ok(TensorStats {
        name: name(),
        dtype: t.ty.name().into(),
        shape: t.shape.clone(),
        summary,
        histogram,
    })
}

/// Where [`tensor_stats`] reads a tensor's bytes.
enum Input<'s, S: ?Sized> {
    /// Straight from the source at this offset.
    Direct(&'s S, u64),
    /// Decoded once by [`formats::read`].
    Decoded(alloc::borrow::Cow<'s, [u8]>),
    /// Streamed by [`formats::read_chunks`] in each pass (inflated or byte-swapped on the way).
    Stream,
}

#[cfg(test)]
mod tests;
