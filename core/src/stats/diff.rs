//! Element-wise comparison of two tensors ([`DiffAccumulator`]): max |a − b|, mean |a − b|,
//! relative L2 (‖a − b‖ / ‖a‖) and cosine similarity, streamed in pieces of any size from two
//! byte streams of possibly different element types (a bf16 checkpoint against its f32 original,
//! a Q4_K quantization against an f16 one).
//!
//! Values are decoded exactly as [`super::Stats`] decodes them (module docs of [`super`]: f64 of
//! every element type, ggml blocks through [`crate::formats::ggml::dequantize`]), so the numbers
//! are NumPy's over `a.astype(float64)` and `b.astype(float64)`:
//!
//! ```text
//! d = a - b;  ok = isfinite(a) & isfinite(b)
//! max_abs  = abs(d[ok]).max()          mean_abs = abs(d[ok]).mean()
//! rel_l2   = norm(d[ok]) / norm(a[ok]) cosine   = dot(a[ok], b[ok]) / (norm(a[ok]) * norm(b[ok]))
//! ```
//!
//! Pairs where either value is NaN or ±Inf are counted in [`Diff::nonfinite`] and left out of
//! every sum. Sums are kept in f64: per leaf of 2048 pairs in four lanes, leaves added in order.
//!
//! Memory: each side's decoded values wait in a queue until the other side has the same element
//! index; push both streams in step (the same element count at a time) and the queues stay within
//! one push — with [`DiffAccumulator::push`], within 2048 values per side. Both streams must yield the same number of values: [`DiffAccumulator::new`] refuses
//! pairs of element types with different values per element (complex against real).

use alloc::vec::Vec;

use super::decode::LEAF;
use super::{Feed, StatsError};
use crate::formats::ElementType;

/// The comparison of two value streams so far ([`DiffAccumulator::diff`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diff {
    /// Value pairs seen (finite or not).
    pub count: u64,
    /// Pairs where `a` or `b` is NaN or ±Inf (left out of everything below).
    pub nonfinite: u64,
    /// Largest |a − b| (NaN when no pair was finite).
    pub max_abs: f64,
    /// Mean |a − b| (NaN when no pair was finite).
    pub mean_abs: f64,
    /// ‖a − b‖ / ‖a‖: 0 when both are 0, +Inf when only ‖a‖ is 0, NaN when no pair was finite.
    pub rel_l2: f64,
    /// a·b / (‖a‖ ‖b‖): NaN when either norm is 0 or no pair was finite.
    pub cosine: f64,
    /// ‖a‖ (L2 norm of the finite pairs' `a` values).
    pub norm_a: f64,
    /// ‖b‖.
    pub norm_b: f64,
    /// ‖a − b‖.
    pub norm_diff: f64,
}

/// Running sums over finite pairs.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    n: u64,
    nonfinite: u64,
    abs: f64,
    dd: f64,
    aa: f64,
    bb: f64,
    ab: f64,
    max: f64,
}

impl Sums {
    /// Adds the pairs `a[i], b[i]` (equal lengths), leaf by leaf: a four-lane pass that the
    /// compiler vectorizes, and, when a leaf holds a NaN or an infinity, a masked pass instead.
    fn add(&mut self, a: &[f64], b: &[f64]) {
        for (ca, cb) in a.chunks(LEAF).zip(b.chunks(LEAF)) {
            let mut s = [[0.0f64; 4]; 5];
            let mut mx = [0.0f64; 4];
            let (qa, ra) = ca.as_chunks::<4>();
            let (qb, rb) = cb.as_chunks::<4>();
            for (x, y) in qa.iter().zip(qb) {
                for l in 0..4 {
                    let d = x[l] - y[l];
                    let ad = d.abs();
                    s[0][l] += ad;
                    s[1][l] += d * d;
                    s[2][l] += x[l] * x[l];
                    s[3][l] += y[l] * y[l];
                    s[4][l] += x[l] * y[l];
                    mx[l] = if ad > mx[l] { ad } else { mx[l] };
                }
            }
            for (l, (x, y)) in ra.iter().zip(rb).enumerate() {
                let d = x - y;
                let ad = d.abs();
                s[0][l] += ad;
                s[1][l] += d * d;
                s[2][l] += x * x;
                s[3][l] += y * y;
                s[4][l] += x * y;
                mx[l] = if ad > mx[l] { ad } else { mx[l] };
            }
            let t = s.map(|v| (v[0] + v[1]) + (v[2] + v[3]));
            if t.iter().all(|v| v.is_finite()) {
                self.abs += t[0];
                self.dd += t[1];
                self.aa += t[2];
                self.bb += t[3];
                self.ab += t[4];
                self.max = mx.iter().fold(self.max, |m, &v| if v > m { v } else { m });
                self.n += ca.len() as u64;
            } else {
                self.masked(ca, cb);
            }
        }
    }

    /// The slow path: pair by pair, skipping pairs with a non-finite value.
    fn masked(&mut self, a: &[f64], b: &[f64]) {
        for (&x, &y) in a.iter().zip(b) {
            if !(x.is_finite() && y.is_finite()) {
                self.nonfinite += 1;
                continue;
            }
            let d = x - y;
            let ad = d.abs();
            self.abs += ad;
            self.dd += d * d;
            self.aa += x * x;
            self.bb += y * y;
            self.ab += x * y;
            if ad > self.max {
                self.max = ad;
            }
            self.n += 1;
        }
    }

    fn diff(&self) -> Diff {
        let none = self.n == 0;
        let nan_if = |v: f64| if none { f64::NAN } else { v };
        let (na, nb, nd) = (libm::sqrt(self.aa), libm::sqrt(self.bb), libm::sqrt(self.dd));
        let rel = if na > 0.0 {
            nd / na
        } else if nd == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        let cos = if na > 0.0 && nb > 0.0 {
            self.ab / na / nb
        } else {
            f64::NAN
        };
        Diff {
            count: self.n + self.nonfinite,
            nonfinite: self.nonfinite,
            max_abs: nan_if(self.max),
            mean_abs: nan_if(self.abs / self.n as f64),
            rel_l2: nan_if(rel),
            cosine: nan_if(cos),
            norm_a: na,
            norm_b: nb,
            norm_diff: nd,
        }
    }
}

/// Compares two tensors' values pair by pair, fed as two byte streams (C order, little-endian, as
/// [`crate::formats::read`] gives them) in pieces of any size; see the module docs.
///
/// ```
/// use tensorlane_core::formats::ElementType;
/// use tensorlane_core::stats::DiffAccumulator;
/// use tensorlane_core::DType;
///
/// let a: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let b: Vec<u8> = [1.0f64, 2.5, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let mut acc = DiffAccumulator::new(ElementType::Dense(DType::F32), ElementType::Dense(DType::F64))?;
/// acc.push_a(&a[..5]); // cut elements are carried to the next push
/// acc.push_b(&b);
/// acc.push_a(&a[5..]);
/// let d = acc.diff();
/// assert_eq!((d.count, d.max_abs, d.mean_abs), (3, 1.0, 0.5));
/// # Ok::<(), tensorlane_core::stats::StatsError>(())
/// ```
#[derive(Clone, Debug)]
pub struct DiffAccumulator {
    a: Feed,
    b: Feed,
    /// Decoded values of one side waiting for the other side's (the longer queue is non-empty).
    qa: Vec<f64>,
    qb: Vec<f64>,
    sums: Sums,
}

impl DiffAccumulator {
    /// A comparison of elements of type `a` with elements of type `b` (each refused as
    /// [`super::Stats::new`] refuses it; a pair with different values per element is
    /// [`StatsError::Unsupported`]).
    pub fn new(a: ElementType, b: ElementType) -> Result<DiffAccumulator, StatsError> {
        let (fa, fb) = (Feed::new(a)?, Feed::new(b)?);
        if fa.per_element != fb.per_element {
            return Err(StatsError::Unsupported {
                dtype: if fa.per_element > fb.per_element {
                    a.name()
                } else {
                    b.name()
                },
                reason: "complex values cannot be compared with real ones (two values per element against one)",
            });
        }
        Ok(DiffAccumulator {
            a: fa,
            b: fb,
            qa: Vec::new(),
            qb: Vec::new(),
            sums: Sums::default(),
        })
    }

    /// Takes at most `elements` elements from each stream (as [`super::Stats::with_elements`]).
    pub fn with_elements(mut self, elements: u64) -> DiffAccumulator {
        self.a.limit(elements);
        self.b.limit(elements);
        self
    }

    /// Bytes of one indivisible unit of stream `a` and of stream `b` (an element, a ggml block).
    pub fn unit_bytes(&self) -> (usize, usize) {
        (self.a.codec.unit_bytes(), self.b.codec.unit_bytes())
    }

    /// Values decoded on one side and waiting for the other side's.
    pub fn queued(&self) -> usize {
        self.qa.len() + self.qb.len()
    }

    /// Feeds the next bytes of tensor `a` (any piece boundaries).
    pub fn push_a(&mut self, bytes: &[u8]) {
        let q = &mut self.qa;
        self.a.push(bytes, q);
        self.pair();
    }

    /// Feeds the next bytes of tensor `b` (any piece boundaries).
    pub fn push_b(&mut self, bytes: &[u8]) {
        let q = &mut self.qb;
        self.b.push(bytes, q);
        self.pair();
    }

    /// Feeds the next bytes of both tensors at once: `a` and `b` should cover the same elements
    /// (any boundaries are still accepted). They are fed in steps of `LEAF` values per side, so
    /// the decoded values of both sides are paired while they are in cache and the queues stay
    /// within a step: the fast way to feed large slices.
    pub fn push(&mut self, mut a: &[u8], mut b: &[u8]) {
        let step = |f: &Feed| {
            let c = f.codec;
            (LEAF / c.unit_values()).max(1) * c.unit_bytes()
        };
        let (sa, sb) = (step(&self.a), step(&self.b));
        // Both sides in step (nothing carried, queued or half-filled): decode a leaf of each
        // straight into the feeds' leaf buffers and compare them there.
        let vals = |f: &Feed, s: usize| s / f.codec.unit_bytes() * f.codec.unit_values();
        if vals(&self.a, sa) == LEAF && vals(&self.b, sb) == LEAF {
            while self.in_step()
                && a.len() >= sa
                && b.len() >= sb
                && self.a.left >= LEAF as u64
                && self.b.left >= LEAF as u64
            {
                let (fa, fb) = (&mut self.a, &mut self.b);
                fa.codec.decode(&a[..sa], &mut fa.buf, &mut fa.scratch);
                fb.codec.decode(&b[..sb], &mut fb.buf, &mut fb.scratch);
                for f in [&mut *fa, &mut *fb] {
                    f.left -= LEAF as u64;
                    f.taken += LEAF as u64;
                }
                self.sums.add(&self.a.buf, &self.b.buf);
                a = &a[sa..];
                b = &b[sb..];
            }
        }
        while a.len() > sa && b.len() > sb {
            self.push_a(&a[..sa]);
            self.push_b(&b[..sb]);
            a = &a[sa..];
            b = &b[sb..];
        }
        self.push_a(a);
        self.push_b(b);
    }

    /// Whether both feeds stand at the same leaf boundary with nothing carried or queued.
    fn in_step(&self) -> bool {
        let clean = |f: &Feed| f.carry.is_empty() && f.fill == 0;
        clean(&self.a) && clean(&self.b) && self.qa.is_empty() && self.qb.is_empty()
    }

    /// Compares the values both queues hold and drops them.
    fn pair(&mut self) {
        let n = self.qa.len().min(self.qb.len());
        if n == 0 {
            return;
        }
        self.sums.add(&self.qa[..n], &self.qb[..n]);
        self.qa.drain(..n);
        self.qb.drain(..n);
    }

    /// The comparison of every pair both streams have yielded so far (values decoded on one
    /// side only, past the other side's count, are not in it).
    pub fn diff(&self) -> Diff {
        let mut a = self.qa.clone();
        a.extend_from_slice(self.a.pending());
        let mut b = self.qb.clone();
        b.extend_from_slice(self.b.pending());
        let n = a.len().min(b.len());
        let mut s = self.sums;
        s.add(&a[..n], &b[..n]);
        s.diff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn le32(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn any_piece_boundaries_give_the_same_numbers() {
        let a: Vec<f32> = (0..10_000).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let b: Vec<f32> = a.iter().enumerate().map(|(i, x)| x + (i % 13) as f32 * 0.01).collect();
        let (ba, bb) = (le32(&a), le32(&b));
        let f32t = ElementType::Dense(DType::F32);
        let mut whole = DiffAccumulator::new(f32t, f32t).unwrap();
        whole.push_a(&ba);
        whole.push_b(&bb);
        let w = whole.diff();
        let mut cut = DiffAccumulator::new(f32t, f32t).unwrap();
        for (pa, pb) in ba.chunks(4099).zip(bb.chunks(333)) {
            cut.push_a(pa);
            cut.push_b(pb);
        }
        for pb in bb.chunks(333).skip(ba.chunks(4099).count()) {
            cut.push_b(pb);
        }
        let c = cut.diff();
        let mut both = DiffAccumulator::new(f32t, f32t).unwrap();
        both.push(&ba[..20_001], &bb[..20_001]);
        both.push(&ba[20_001..], &bb[20_001..]);
        assert_eq!(both.diff(), w);
        assert!(both.queued() == 0);
        // The in-step fast path and the queued path agree bit for bit, across types too.
        let bf: Vec<u8> = b
            .iter()
            .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
            .collect();
        let bf16 = ElementType::Dense(DType::BF16);
        let mut fast = DiffAccumulator::new(f32t, bf16).unwrap().with_elements(10_000);
        fast.push(&ba, &bf);
        let mut slow = DiffAccumulator::new(f32t, bf16).unwrap().with_elements(10_000);
        for (pa, pb) in ba.chunks(1000).zip(bf.chunks(500)) {
            slow.push_a(pa);
            slow.push_b(pb);
        }
        assert_eq!(fast.diff(), slow.diff());
        assert_eq!(w.count, 10_000);
        assert_eq!((w.count, w.max_abs), (c.count, c.max_abs));
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(1e-300);
        assert!(close(w.mean_abs, c.mean_abs) && close(w.rel_l2, c.rel_l2) && close(w.cosine, c.cosine));
        // Direct f64 reference.
        let (mut s, mut aa, mut m) = (0.0f64, 0.0f64, 0.0f64);
        for (x, y) in a.iter().zip(&b) {
            let d = f64::from(*x) - f64::from(*y);
            s += d.abs();
            aa += f64::from(*x) * f64::from(*x);
            m = m.max(d.abs());
        }
        assert!(close(w.mean_abs, s / 10_000.0));
        assert_eq!(w.max_abs, m);
        assert!(close(w.norm_a, aa.sqrt()));
    }

    #[test]
    fn nonfinite_pairs_are_counted_and_left_out() {
        let f32t = ElementType::Dense(DType::F32);
        let mut acc = DiffAccumulator::new(f32t, f32t).unwrap();
        acc.push_a(&le32(&[1.0, f32::NAN, 3.0, f32::INFINITY]));
        acc.push_b(&le32(&[2.0, 1.0, 3.0, f32::INFINITY]));
        let d = acc.diff();
        assert_eq!((d.count, d.nonfinite, d.max_abs, d.mean_abs), (4, 2, 1.0, 0.5));
        let zero = DiffAccumulator::new(f32t, f32t).unwrap().diff();
        assert!(zero.max_abs.is_nan() && zero.cosine.is_nan());
    }

    #[test]
    fn complex_against_real_is_refused() {
        let r = DiffAccumulator::new(ElementType::Dense(DType::C64), ElementType::Dense(DType::F32));
        assert!(matches!(r, Err(StatsError::Unsupported { .. })));
    }
}
