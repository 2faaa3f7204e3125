//! The per-leaf kernels of [`super`]: moments (sum, min, max, zeros, then the centred second
//! moment) and the histogram bin rule, over at most [`super::decode::LEAF`] f64 values.
//!
//! Loops run over 8 independent lanes so that the compiler keeps them in SIMD registers (a float
//! reduction in one accumulator cannot be vectorized: addition is not associative).

use crate::formats::ggml::groups::Linear;

const LANES: usize = 8;

/// Count, mean, centred second moment, min and max of some finite values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Moments {
    pub n: u64,
    pub mean: f64,
    pub m2: f64,
    pub min: f64,
    pub max: f64,
}

impl Moments {
    /// No values.
    pub(crate) const EMPTY: Moments = Moments {
        n: 0,
        mean: 0.0,
        m2: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    /// Chan, Golub and LeVeque's pairwise update: the moments of `self`'s values followed by
    /// `b`'s.
    pub(crate) fn merge(self, b: Moments) -> Moments {
        if b.n == 0 {
            return self;
        }
        if self.n == 0 {
            return b;
        }
        let n = self.n + b.n;
        let (na, nb, nf) = (self.n as f64, b.n as f64, n as f64);
        let delta = b.mean - self.mean;
        Moments {
            n,
            mean: self.mean + delta * (nb / nf),
            m2: self.m2 + b.m2 + delta * delta * (na * (nb / nf)),
            min: if b.min < self.min { b.min } else { self.min },
            max: if b.max > self.max { b.max } else { self.max },
        }
    }
}

/// What one leaf adds: moments of its finite values and its special-value counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Leaf {
    pub moments: Moments,
    pub zeros: u64,
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
}

impl Leaf {
    /// No values.
    pub(crate) const EMPTY: Leaf = Leaf {
        moments: Moments::EMPTY,
        zeros: 0,
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
    };

    /// The values of `self` followed by those of `b`.
    pub(crate) fn then(self, b: Leaf) -> Leaf {
        Leaf {
            moments: self.moments.merge(b.moments),
            zeros: self.zeros + b.zeros,
            nan: self.nan + b.nan,
            pos_inf: self.pos_inf + b.pos_inf,
            neg_inf: self.neg_inf + b.neg_inf,
        }
    }
}

/// The moments of one Q4_K block whose groups are all linear ([`Linear`]: 32 values
/// `(a q - b) 2^e` each, one `e` for the block), from the groups' index sums in integers: the sum
/// `S = sum(a s1 - 32 b)` and the sum of squares `Q = sum(a^2 s2 - 2 a b s1 + 32 b^2)` (units of
/// 2^e and 2^2e) are exact, so the mean `S 2^e / n` is exact and the centred second moment
/// `(n Q - S^2) 2^2e / n` is rounded once. The extremes are the decoder's values at each group's
/// extreme indices.
pub(crate) fn linear_block(groups: &[Linear]) -> Leaf {
    let Some(first) = groups.first() else {
        return Leaf::EMPTY;
    };
    // 2^e for e in [-24, 15] (f16 exponents with trailing zeros shifted in), a normal f64.
    let p = f64::from_bits(((1023 + i64::from(first.e)) as u64) << 52);
    // In i64: |a q - b| < 2^24 for every index, so |a| < 2^21.1 and |b| < 2^24: each term below
    // is under 2^56, a group's sum of squares under 2^53, a block's under 2^56.
    let (mut s, mut q, mut zeros) = (0i64, 0i64, 0u64);
    // Extremes in units of 2^e too (the first group to reach one on a tie, as in order).
    let ((mut min, mut kmin), (mut max, mut kmax)) = ((i64::MAX, 0), (i64::MIN, 0));
    for (k, g) in groups.iter().enumerate() {
        let (a, b, s1) = (g.a, g.b, i64::from(g.s1));
        s += a * s1 - 32 * b;
        q += a * a * i64::from(g.s2) - 2 * a * b * s1 + 32 * b * b;
        let (at_min, at_max) = (a * i64::from(g.qmin) - b, a * i64::from(g.qmax) - b);
        let (lo, hi) = if a >= 0 { (at_min, at_max) } else { (at_max, at_min) };
        if lo < min {
            (min, kmin) = (lo, k);
        }
        if hi > max {
            (max, kmax) = (hi, k);
        }
        zeros += u64::from(g.zeros);
    }
    // A zero extreme carries the decoder's sign (`ds * q - dm` can be -0).
    let value = |x: i64, k: usize, lowest: bool| {
        let g = &groups[k];
        if x != 0 {
            x as f64 * p
        } else if (g.a >= 0) == lowest {
            f64::from(g.value(g.qmin))
        } else {
            f64::from(g.value(g.qmax))
        }
    };
    let (min, max) = (value(min, kmin, true), value(max, kmax, false));
    let n = 32 * groups.len() as i64;
    let (n2, s2) = (i128::from(n), i128::from(s));
    Leaf {
        moments: Moments {
            n: n as u64,
            mean: s as f64 * p / n as f64,
            m2: (n2 * i128::from(q) - s2 * s2) as f64 * p * p / n as f64,
            min,
            max,
        },
        zeros,
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
    }
}

/// Sums 8 lanes pairwise.
fn reduce(s: [f64; LANES]) -> f64 {
    ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

/// How many elements each value given to [`Bins`] stands for: one each ([`Ones`]), or a count per
/// value (`&[u8]`, the weighted leaves of the 4-bit ggml groups: at most 32 elements a value).
pub(crate) trait Weights: Copy {
    /// The weight of value `i`.
    fn count(self, i: usize) -> u64;
}

/// Every value is one element.
#[derive(Clone, Copy)]
pub(crate) struct Ones;

impl Weights for Ones {
    #[inline(always)]
    fn count(self, _: usize) -> u64 {
        1
    }
}

impl Weights for &[u8] {
    #[inline(always)]
    fn count(self, i: usize) -> u64 {
        u64::from(self[i])
    }
}

/// The moments and counts of `x` (at most a leaf of values).
pub(crate) fn leaf(x: &[f64]) -> Leaf {
    if x.is_empty() {
        return Leaf::EMPTY;
    }
    // Pass 1 over all values, as if all were finite: a NaN or an infinity makes the sum NaN or
    // infinite, which sends the leaf down the slow path (rare: special values, or a sum that
    // overflows f64).
    let (chunks, rest) = x.as_chunks::<LANES>();
    let mut s = [0.0f64; LANES];
    let mut lo = [f64::INFINITY; LANES];
    let mut hi = [f64::NEG_INFINITY; LANES];
    let mut z = [0u64; LANES];
    for c in chunks {
        for j in 0..LANES {
            let v = c[j];
            s[j] += v;
            lo[j] = if v < lo[j] { v } else { lo[j] };
            hi[j] = if v > hi[j] { v } else { hi[j] };
            z[j] += u64::from(v == 0.0);
        }
    }
    for (j, &v) in rest.iter().enumerate() {
        s[j] += v;
        lo[j] = if v < lo[j] { v } else { lo[j] };
        hi[j] = if v > hi[j] { v } else { hi[j] };
        z[j] += u64::from(v == 0.0);
    }
    let sum = reduce(s);
    if !sum.is_finite() {
        return slow(x);
    }
    let n = x.len();
    let mean = sum / n as f64;
    // Pass 2: the centred second moment, with the correction term of the corrected two-pass
    // algorithm (sum of deviations, zero in exact arithmetic).
    let mut q = [0.0f64; LANES];
    let mut c = [0.0f64; LANES];
    for ch in chunks {
        for j in 0..LANES {
            let d = ch[j] - mean;
            q[j] += d * d;
            c[j] += d;
        }
    }
    for (j, &v) in rest.iter().enumerate() {
        let d = v - mean;
        q[j] += d * d;
        c[j] += d;
    }
    let (q, c) = (reduce(q), reduce(c));
    let nf = n as f64;
    Leaf {
        moments: Moments {
            n: n as u64,
            mean: mean + c / nf,
            m2: q - c * c / nf,
            min: lo.iter().copied().fold(f64::INFINITY, |a, b| if b < a { b } else { a }),
            max: hi
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, |a, b| if b > a { b } else { a }),
        },
        zeros: z.iter().sum(),
        nan: 0,
        pos_inf: 0,
        neg_inf: 0,
    }
}

/// [`leaf`] with every value classified (the leaf holds a NaN or an infinity).
fn slow(x: &[f64]) -> Leaf {
    let (mut nan, mut pos_inf, mut neg_inf, mut zeros) = (0u64, 0u64, 0u64, 0u64);
    let (mut n, mut sum) = (0u64, 0.0f64);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &v in x {
        if v.is_nan() {
            nan += 1;
        } else if v == f64::INFINITY {
            pos_inf += 1;
        } else if v == f64::NEG_INFINITY {
            neg_inf += 1;
        } else {
            n += 1;
            sum += v;
            lo = if v < lo { v } else { lo };
            hi = if v > hi { v } else { hi };
            zeros += u64::from(v == 0.0);
        }
    }
    let moments = if n == 0 {
        Moments::EMPTY
    } else {
        let nf = n as f64;
        let mean = sum / nf;
        let (mut q, mut c) = (0.0f64, 0.0f64);
        for &v in x {
            if v.is_finite() {
                let d = v - mean;
                q += d * d;
                c += d;
            }
        }
        Moments {
            n,
            mean: mean + c / nf,
            m2: q - c * c / nf,
            min: lo,
            max: hi,
        }
    };
    Leaf {
        moments,
        zeros,
        nan,
        pos_inf,
        neg_inf,
    }
}

/// NumPy's equal-width bins over `[lo, hi]` (`numpy.histogram`'s fast path, numpy 2.x).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Bins {
    pub lo: f64,
    pub hi: f64,
    /// `hi - lo` (`norm_denom`).
    pub denom: f64,
    /// `bins + 1` edges, `numpy.linspace(lo, hi, bins + 1)`.
    pub edges: alloc::vec::Vec<f64>,
    /// Counts, in [`TABLES`] interleaved tables (`table * bins + bin`): consecutive values land
    /// in different tables, so increments of the same bin do not wait on each other. Summed by
    /// [`Bins::counts`].
    tables: alloc::vec::Vec<u64>,
    bins: usize,
    /// For values that are f32 ([`Bins::add_weighted`]): `lo`, `hi` and `bins / (hi - lo)` as
    /// f32 and the `near` of positions estimated in f32, when `lo` and `hi` are f32 exactly and
    /// that estimate is close enough to be useful (else those values are binned as f64).
    f32: Option<F32Estimate>,
}

/// The constants of [`Bins`]'s f32 position estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
struct F32Estimate {
    lo: f32,
    hi: f32,
    scale: f32,
    near: f32,
}

/// Count tables of [`Bins`].
const TABLES: usize = 4;

/// `numpy.linspace(lo, hi, bins + 1)` for float64, operation for operation: `i * step + lo` with
/// `step = (hi - lo) / bins` (or `(i / bins) * (hi - lo) + lo` when the step underflows to 0),
/// and the last edge exactly `hi`.
pub(crate) fn linspace(lo: f64, hi: f64, bins: usize) -> alloc::vec::Vec<f64> {
    let div = bins as f64;
    let delta = hi - lo;
    let step = delta / div;
    let mut y: alloc::vec::Vec<f64> = (0..=bins)
        .map(|i| {
            let i = i as f64;
            if step == 0.0 { (i / div) * delta } else { i * step }
        })
        .collect();
    for v in &mut y {
        *v += lo;
    }
    if let Some(last) = y.last_mut() {
        *last = hi;
    }
    y
}

impl Bins {
    /// Bins over `[lo, hi]` (already checked finite, `lo < hi`, `bins >= 1`).
    pub(crate) fn new(lo: f64, hi: f64, bins: usize) -> Bins {
        Bins {
            lo,
            hi,
            denom: hi - lo,
            edges: linspace(lo, hi, bins),
            tables: alloc::vec![0; bins * TABLES],
            bins,
            f32: F32Estimate::new(lo, hi, bins),
        }
    }

    /// Counts the values of `x` in `[lo, hi]` (NaN, infinities and values outside are skipped).
    pub(crate) fn add(&mut self, x: &[f64]) {
        self.add_by(x, Ones);
    }

    /// Counts f32 values `v` with weights `w` (same length), as [`Bins::add`] would count each
    /// value repeated its weight's times: positions estimated in f32 (four to a SIMD register)
    /// where [`F32Estimate`] allows, else in f64.
    pub(crate) fn add_weighted(&mut self, v: &[f32], w: &[u8]) {
        let n = v.len().min(w.len());
        let (v, w) = (&v[..n], &w[..n]);
        match self.f32 {
            Some(e) => self.add_f32(v, w, e),
            None => {
                let mut x = [0f64; ESTIMATES];
                for (v, w) in v.chunks(ESTIMATES).zip(w.chunks(ESTIMATES)) {
                    for (x, &v) in x.iter_mut().zip(v) {
                        *x = f64::from(v);
                    }
                    self.add_by(&x[..v.len()], w);
                }
            }
        }
    }

    /// [`Bins::add_by`] for f32 values, the position estimated in f32 (see [`F32Estimate`]).
    fn add_f32(&mut self, x: &[f32], w: &[u8], e: F32Estimate) {
        let bins = self.bins;
        let last = bins - 1;
        let edges = &self.edges[..bins + 1];
        let tables = &mut self.tables[..bins * TABLES];
        for (x, w) in x.chunks(ESTIMATES).zip(w.chunks(ESTIMATES)) {
            let mut idx = [0u32; ESTIMATES];
            for (i, &v) in idx.iter_mut().zip(x) {
                let f = (v - e.lo) * e.scale;
                let t = (f as u32).min(last as u32);
                let frac = f - t as f32;
                let sure = (frac > e.near) & (frac < 1.0 - e.near);
                let inside = (v >= e.lo) & (v <= e.hi);
                *i = if !inside {
                    OUT
                } else if sure {
                    t
                } else {
                    t | NEAR
                };
            }
            for (k, ((&v, &i), &w)) in x.iter().zip(&idx).zip(w).enumerate() {
                let i = if (i as usize) < bins {
                    i as usize
                } else if i == OUT {
                    continue;
                } else {
                    let v = f64::from(v);
                    let mut i = (i & !NEAR) as usize;
                    i = i.saturating_sub(usize::from(v < edges[i]));
                    i + usize::from((i != last) & (v >= edges[i + 1]))
                };
                tables[(k % TABLES) * bins + i] += u64::from(w);
            }
        }
    }

    #[inline(always)]
    fn add_by<W: Weights>(&mut self, x: &[f64], w: W) {
        let (lo, hi) = (self.lo, self.hi);
        let bins = self.bins;
        // NumPy divides by `norm_denom` then multiplies by the bin count; one multiplication by
        // their quotient gives a position a few ulps away, and the edges settle the bin wherever
        // that could matter (below). A division per value was most of this loop's time.
        let scale = bins as f64 / self.denom;
        // How far the position `f` can be from the value's true place among the edges: a few ulps
        // of `f` (the subtraction and the two roundings of the multiplication) and of each edge
        // (linspace's `i * step + lo`), both measured in bins, with a 16x margin. A value whose
        // `f` is further than this from every integer is in bin `floor(f)` for certain; one
        // closer is settled by NumPy's comparison with the edges. For any real range `near` is
        // around 1e-12, so the comparison is almost never made.
        let near = f64::EPSILON * 16.0 * ((lo.abs() + hi.abs()) * scale + bins as f64 + 1.0);
        let last = bins - 1;
        let edges = &self.edges[..bins + 1];
        let tables = &mut self.tables[..bins * TABLES];
        for (b, x) in x.chunks(ESTIMATES).enumerate() {
            // The bin of each value of a block, in a loop the compiler vectorizes: the floor of
            // its position, tagged [`NEAR`] when the position is close enough to an integer for
            // the edges to decide, or [`OUT`] for a value outside [lo, hi] (NaN, ±Inf included).
            let mut idx = [0u32; ESTIMATES];
            for (i, &v) in idx.iter_mut().zip(x) {
                let f = (v - lo) * scale;
                // In range, `f` is in [0, bins] up to rounding: the truncation is the floor.
                let t = (f as u32).min(last as u32);
                let frac = f - f64::from(t);
                let sure = (frac > near) & (frac < 1.0 - near);
                let inside = (v >= lo) & (v <= hi);
                *i = if !inside {
                    OUT
                } else if sure {
                    t
                } else {
                    t | NEAR
                };
            }
            for (k, (&v, &i)) in x.iter().zip(&idx).enumerate() {
                let i = if (i as usize) < bins {
                    i as usize
                } else if i == OUT {
                    continue;
                } else {
                    // NumPy's correction against the edges, one step down when below the bin's
                    // left edge, one up when at or past its right edge (the last bin is closed).
                    let mut i = (i & !NEAR) as usize;
                    i = i.saturating_sub(usize::from(v < edges[i]));
                    i + usize::from((i != last) & (v >= edges[i + 1]))
                };
                tables[(k % TABLES) * bins + i] += w.count(b * ESTIMATES + k);
            }
        }
    }
}

impl F32Estimate {
    /// The f32 estimate for bins over `[lo, hi]`, or `None` where it does not apply: `lo` or `hi`
    /// not exactly f32, or a `near` of a quarter bin or more. A position `(v - lo) * scale` made
    /// of three f32 roundings (the subtraction, `scale` rounded to f32, the product) is within
    /// `3 * 2^-24` of its value relative to it, at most `bins + 1`; NumPy's edges are within a few
    /// f64 ulps of `lo`..`hi`, i.e. `(|lo| + |hi|) * scale * 2^-51` positions. `near` covers both
    /// with a margin of 4 or more, so a position further than `near` from every integer is in bin
    /// `floor` for certain, as in [`Bins::add_by`]; closer ones are settled by the edges in f64.
    fn new(lo: f64, hi: f64, bins: usize) -> Option<F32Estimate> {
        let (lo32, hi32) = (lo as f32, hi as f32);
        if f64::from(lo32) != lo || f64::from(hi32) != hi {
            return None;
        }
        let scale = bins as f64 / (hi - lo);
        let scale32 = scale as f32;
        let near = 16.0 * f64::from(f32::EPSILON) * ((lo.abs() + hi.abs()) * scale + bins as f64 + 1.0);
        if !(scale32.is_finite() && scale32 > 0.0 && near < 0.25) {
            return None;
        }
        Some(F32Estimate {
            lo: lo32,
            hi: hi32,
            scale: scale32,
            near: near as f32,
        })
    }
}

/// A bin index of [`Bins::add_by`] whose value must be compared with the edges.
const NEAR: u32 = 1 << 30;
/// A value [`Bins::add_by`] does not count.
const OUT: u32 = u32::MAX;

impl Bins {
    /// The count of each bin.
    pub(crate) fn counts(&self) -> alloc::vec::Vec<u64> {
        let mut c = alloc::vec![0u64; self.bins];
        for t in self.tables.chunks_exact(self.bins) {
            for (c, t) in c.iter_mut().zip(t) {
                *c += t;
            }
        }
        c
    }

    /// Adds `other`'s counts (same bins).
    pub(crate) fn add_counts(&mut self, other: &Bins) {
        for (a, b) in self.tables.iter_mut().zip(&other.tables) {
            *a += b;
        }
    }
}

/// Bin positions computed at a time by [`Bins::add`] (a stack array of 2 KiB).
const ESTIMATES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_matches_numpy() {
        // Printed by numpy 2.4.6: numpy.linspace(-3.3, 17.9, 11), and (0.1, 0.7, 7).
        let want = [
            -3.3,
            -1.1799999999999997,
            0.9400000000000004,
            3.0600000000000005,
            5.180000000000001,
            7.300000000000002,
            9.420000000000002,
            11.54,
            13.66,
            15.780000000000001,
            17.9,
        ];
        assert_eq!(linspace(-3.3, 17.9, 10), want);
        assert_eq!(linspace(0.1, 0.7, 6), [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]);
        // A subnormal range: the step underflows, numpy's special case.
        let tiny = f64::from_bits(3);
        let e = linspace(0.0, tiny, 4);
        assert_eq!(e[0], 0.0);
        assert_eq!(e[4], tiny);
    }

    proptest::proptest! {
        /// f32 values binned with the f32 position estimate count as the same values binned in
        /// f64: values on and next to edges, outside the range, NaN and infinities included.
        #[test]
        fn f32_estimate_bins_as_f64(
            raw in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..600),
            lo in -1000i32..1000, width in 1u32..4000, scale_exp in -12i32..12, bins in 1usize..300,
            w in proptest::collection::vec(0u8..33, 600),
        ) {
            let p = 2f64.powi(scale_exp);
            let (lo, hi) = (f64::from(lo) * p, (f64::from(lo) + f64::from(width)) * p);
            let step = (hi - lo) / bins as f64;
            // Values: edges, their f32 neighbours, random ones in and around the range, specials.
            let v: alloc::vec::Vec<f32> = raw
                .iter()
                .map(|&r| match r % 6 {
                    0 => (lo + step * f64::from(r >> 8) % (hi - lo + step)) as f32,
                    1 => {
                        let e = (lo + step * f64::from((r >> 8) % (bins as u32 + 1))) as f32;
                        f32::from_bits(e.to_bits().wrapping_add((r >> 3) % 3).wrapping_sub(1))
                    }
                    2 => (lo + (hi - lo) * f64::from(r >> 8) / f64::from(1u32 << 24)) as f32,
                    3 => (lo - (hi - lo) * 0.5 + 2.0 * (hi - lo) * f64::from(r >> 8) / f64::from(1u32 << 24)) as f32,
                    4 => [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, lo as f32, hi as f32][(r >> 8) as usize % 5],
                    _ => f32::from_bits(r),
                })
                .collect();
            let w = &w[..v.len()];
            let mut a = Bins::new(lo, hi, bins);
            proptest::prop_assume!(a.edges.windows(2).all(|e| e[0] < e[1]));
            proptest::prop_assume!(a.f32.is_some());
            a.add_weighted(&v, w);
            let mut b = Bins::new(lo, hi, bins);
            let x: alloc::vec::Vec<f64> = v.iter().map(|&v| f64::from(v)).collect();
            b.add_by(&x, w);
            proptest::prop_assert_eq!(a.counts(), b.counts());
        }
    }

    #[test]
    fn f32_estimate_applies_only_where_exact() {
        assert!(F32Estimate::new(-1.5, 2.25, 64).is_some());
        assert!(F32Estimate::new(0.1, 1.0, 64).is_none(), "0.1 is not an f32");
        assert!(
            F32Estimate::new(1e6, 1e6 + 0.0625, 64).is_none(),
            "a range far below its magnitude"
        );
        assert!(
            F32Estimate::new(0.0, 1.0, 1 << 20).is_none(),
            "more bins than the estimate resolves"
        );
    }

    #[test]
    fn leaf_fast_and_slow_agree() {
        let x: alloc::vec::Vec<f64> = (0..1000).map(|i| (i as f64 * 0.37).sin() * 10.0).collect();
        let a = leaf(&x);
        let b = slow(&x);
        assert_eq!(a.moments.n, b.moments.n);
        assert_eq!((a.moments.min, a.moments.max), (b.moments.min, b.moments.max));
        assert!((a.moments.mean - b.moments.mean).abs() < 1e-14);
        assert!((a.moments.m2 - b.moments.m2).abs() / b.moments.m2 < 1e-13);
        let mut y = x.clone();
        y[3] = f64::NAN;
        y[7] = f64::INFINITY;
        y[8] = f64::NEG_INFINITY;
        y[9] = 0.0;
        let l = leaf(&y);
        assert_eq!((l.nan, l.pos_inf, l.neg_inf, l.moments.n), (1, 1, 1, 997));
        assert_eq!(l.zeros, 2); // y[0] = sin(0) = 0 and y[9]
    }
}
