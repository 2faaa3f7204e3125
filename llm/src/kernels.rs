//! Weights in their stored form and the CPU kernels over them: a weight matrix stays as the
//! file's bytes (borrowed from the map) and each product dequantizes one row at a time into a
//! small per-thread buffer, then takes its dot products with every input vector in f32.

use std::borrow::Cow;
use std::sync::OnceLock;

use rayon::prelude::*;
use tensorlane_core::dtype::DType;
use tensorlane_core::formats::ggml::{self, GgmlType};
use tensorlane_core::formats::{ElementType, TensorInfo};

use crate::{Error, Result};

/// How a matrix's elements are stored (ggml's type names).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_K,
    Q6_K,
    /// Any other ggml block type: decoded by `tensorlane_core::formats::ggml`.
    Other(GgmlType),
}

impl Kind {
    /// The kind of a catalog element type, if it can be computed with.
    pub(crate) fn of(ty: ElementType) -> Option<Kind> {
        Some(match ty {
            ElementType::Dense(DType::F32) => Kind::F32,
            ElementType::Dense(DType::F16) => Kind::F16,
            ElementType::Dense(DType::BF16) => Kind::BF16,
            ElementType::Ggml(GgmlType(0)) => Kind::F32,
            ElementType::Ggml(GgmlType(1)) => Kind::F16,
            ElementType::Ggml(GgmlType(30)) => Kind::BF16,
            ElementType::Ggml(GgmlType(8)) => Kind::Q8_0,
            ElementType::Ggml(GgmlType(2)) => Kind::Q4_0,
            ElementType::Ggml(GgmlType(12)) => Kind::Q4_K,
            ElementType::Ggml(GgmlType(14)) => Kind::Q6_K,
            ElementType::Ggml(g) if g.is_quantized() && ggml::can_dequantize(g) => Kind::Other(g),
            _ => return None,
        })
    }

    /// `(elements, bytes)` per block.
    fn block(self) -> (usize, usize) {
        match self {
            Kind::F32 => (1, 4),
            Kind::F16 | Kind::BF16 => (1, 2),
            Kind::Q8_0 => (32, 34),
            Kind::Q4_0 => (32, 18),
            Kind::Q4_K => (256, 144),
            Kind::Q6_K => (256, 210),
            Kind::Other(g) => (
                g.block_size().unwrap_or(1) as usize,
                g.type_size().unwrap_or(1) as usize,
            ),
        }
    }
}

/// A `[rows, cols]` weight matrix in its stored form.
#[derive(Debug)]
pub(crate) struct Matrix<'m> {
    pub kind: Kind,
    pub rows: usize,
    pub cols: usize,
    row_bytes: usize,
    data: Cow<'m, [u8]>,
}

impl<'m> Matrix<'m> {
    /// Wraps a tensor's stored bytes; `t` must be 2-D (the caller checked its shape).
    pub(crate) fn new(t: &TensorInfo, data: Cow<'m, [u8]>) -> Result<Matrix<'m>> {
        let kind = Kind::of(t.ty).ok_or_else(|| Error::TensorType {
            name: t.name.clone(),
            ty: t.ty.name().into(),
        })?;
        let (rows, cols) = match t.shape[..] {
            [r, c] => (r as usize, c as usize),
            [c] => (1, c as usize),
            _ => {
                return Err(Error::TensorShape {
                    name: t.name.clone(),
                    expected: vec![0, 0],
                    found: t.shape.clone(),
                });
            }
        };
        let (block, bytes) = kind.block();
        if !cols.is_multiple_of(block) {
            return Err(Error::TensorType {
                name: t.name.clone(),
                ty: format!(
                    "{} with rows of {cols} elements (not whole blocks of {block})",
                    t.ty.name()
                ),
            });
        }
        let row_bytes = cols / block * bytes;
        if data.len() != rows * row_bytes {
            return Err(Error::TensorType {
                name: t.name.clone(),
                ty: format!(
                    "{} with {} stored bytes for {rows} rows of {row_bytes} bytes",
                    t.ty.name(),
                    data.len()
                ),
            });
        }
        Ok(Matrix {
            kind,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// Stored bytes of the whole matrix.
    pub(crate) fn stored_bytes(&self) -> usize {
        self.data.len()
    }

    /// Row `r` as f32 into `out` (`cols` long).
    pub(crate) fn row_into(&self, r: usize, out: &mut [f32]) {
        let b = &self.data[r * self.row_bytes..(r + 1) * self.row_bytes];
        dequantize_row(self.kind, b, out);
    }

    /// `out[i][r] = Σ_c W[r][c] · x[i][c]` for `n = x.len() / cols` input vectors:
    /// `out` is `n × rows`. Output rows are spread over the pool's threads.
    pub(crate) fn matmul(&self, x: &[f32], out: &mut [f32], pool: &rayon::ThreadPool) {
        let x = &*round_activations(self.kind, x);
        let n = x.len() / self.cols;
        debug_assert_eq!(x.len(), n * self.cols);
        debug_assert_eq!(out.len(), n * self.rows);
        let threads = pool.current_num_threads().max(1);
        // Enough chunks to balance the threads, each a few rows at least.
        let rows_per = self.rows.div_ceil(threads * 4).max(1);
        let cols = self.cols;
        if n == 1 {
            pool.install(|| {
                out.par_chunks_mut(rows_per).enumerate().for_each_init(
                    || vec![0f32; cols],
                    |buf, (ci, o)| {
                        for (j, y) in o.iter_mut().enumerate() {
                            self.row_into(ci * rows_per + j, buf);
                            *y = dot(buf, x);
                        }
                    },
                )
            });
            return;
        }
        // Several inputs: each weight row is dequantized once and used n times; the result is
        // computed transposed (rows × n) and then put back in order.
        let mut t = vec![0f32; n * self.rows];
        pool.install(|| {
            t.par_chunks_mut(rows_per * n).enumerate().for_each_init(
                || vec![0f32; cols],
                |buf, (ci, o)| {
                    for (j, ys) in o.chunks_mut(n).enumerate() {
                        self.row_into(ci * rows_per + j, buf);
                        for (i, y) in ys.iter_mut().enumerate() {
                            *y = dot(buf, &x[i * cols..(i + 1) * cols]);
                        }
                    }
                },
            )
        });
        for (r, ys) in t.chunks(n).enumerate() {
            for (i, &y) in ys.iter().enumerate() {
                out[i * self.rows + r] = y;
            }
        }
    }
}

/// The activations as llama.cpp's CPU backend rounds them before a product with weights of
/// `kind` (its `vec_dot_type`): to f16 for F16 weights, to bf16 for BF16, to 8-bit blocks of 32
/// with an f16 scale (Q8_0) for the 32-element block types, to 8-bit blocks of 256 with an f32
/// scale (Q8_K) for the K-quants; F32 and other types are left as they are. The product is then
/// taken in f32 over the rounded values, so results agree with llama.cpp's to float rounding.
pub(crate) fn round_activations(kind: Kind, x: &[f32]) -> Cow<'_, [f32]> {
    let t = f16_table();
    match kind {
        Kind::F32 => Cow::Borrowed(x),
        Kind::F16 => Cow::Owned(
            x.iter()
                .map(|&v| t[half::f16::from_f32(v).to_bits() as usize])
                .collect(),
        ),
        Kind::BF16 => Cow::Owned(
            x.iter()
                .map(|&v| {
                    let u = v.to_bits();
                    let h = if u & 0x7fff_ffff > 0x7f80_0000 {
                        (u >> 16) | 64
                    } else {
                        (u + (0x7fff + ((u >> 16) & 1))) >> 16
                    };
                    f32::from_bits(h << 16)
                })
                .collect(),
        ),
        Kind::Q8_0 | Kind::Q4_0 | Kind::Other(GgmlType(3 | 6 | 7)) if x.len().is_multiple_of(32) => {
            let mut y = x.to_vec();
            for b in y.chunks_exact_mut(32) {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = t[half::f16::from_f32(amax / 127.0).to_bits() as usize];
                let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
                for v in b.iter_mut() {
                    *v = (*v * id).round_ties_even() * d;
                }
            }
            Cow::Owned(y)
        }
        Kind::Q4_K | Kind::Q6_K | Kind::Other(GgmlType(10 | 11 | 13)) if x.len().is_multiple_of(256) => {
            let mut y = x.to_vec();
            for b in y.chunks_exact_mut(256) {
                let (mut amax, mut max) = (0f32, 0f32);
                for &v in b.iter() {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    b.fill(0.0);
                    continue;
                }
                let iscale = -127.0 / max;
                let d = 1.0 / iscale;
                for v in b.iter_mut() {
                    *v = (iscale * *v).round_ties_even().min(127.0) * d;
                }
            }
            Cow::Owned(y)
        }
        _ => Cow::Borrowed(x),
    }
}

/// The dot product of two equal-length vectors, in f32 with 16 partial sums (so the compiler can
/// keep them in vector registers).
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 16];
    let ca = a.chunks_exact(16);
    let cb = b.chunks_exact(16);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut tail = 0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    // pairwise reduction of the partial sums
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for k in 0..w {
            acc[k] += acc[k + w];
        }
    }
    acc[0] + tail
}

/// Every f16 bit pattern as f32 (256 KiB, built once): a table lookup is faster than converting
/// in software without F16C.
fn f16_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(|b| half::f16::from_bits(b).to_f32()).collect())
}

#[inline]
fn f16_at(t: &[f32], b: &[u8], i: usize) -> f32 {
    t[u16::from_le_bytes([b[i], b[i + 1]]) as usize]
}

/// Dequantizes one row's stored bytes into `out` (its element count).
pub(crate) fn dequantize_row(kind: Kind, b: &[u8], out: &mut [f32]) {
    match kind {
        Kind::F32 => {
            for (y, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                *y = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Kind::F16 => {
            let t = f16_table();
            for (y, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *y = t[u16::from_le_bytes([c[0], c[1]]) as usize];
            }
        }
        Kind::BF16 => {
            for (y, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *y = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        Kind::Q8_0 => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(t, blk, 0);
                for (v, &q) in y.iter_mut().zip(&blk[2..34]) {
                    *v = d * f32::from(q as i8);
                }
            }
        }
        Kind::Q4_0 => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(t, blk, 0);
                let qs = &blk[2..18];
                let (lo, hi) = y.split_at_mut(16);
                for j in 0..16 {
                    lo[j] = d * f32::from((qs[j] & 0xF) as i8 - 8);
                    hi[j] = d * f32::from((qs[j] >> 4) as i8 - 8);
                }
            }
        }
        Kind::Q4_K => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
                let d = f16_at(t, blk, 0);
                let dmin = f16_at(t, blk, 2);
                let scales = &blk[4..16];
                let q = &blk[16..144];
                for (j, (y, q)) in y.chunks_exact_mut(64).zip(q.chunks_exact(32)).enumerate() {
                    let (sc1, m1) = scale_min_k4(2 * j, scales);
                    let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
                    let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
                    let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
                    let (lo, hi) = y.split_at_mut(32);
                    for l in 0..32 {
                        lo[l] = d1 * f32::from(q[l] & 0xF) - m1;
                        hi[l] = d2 * f32::from(q[l] >> 4) - m2;
                    }
                }
            }
        }
        Kind::Q6_K => {
            let t = f16_table();
            for (blk, y) in b.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
                let d = f16_at(t, blk, 208);
                for h in 0..2 {
                    let ql = &blk[h * 64..h * 64 + 64];
                    let qh = &blk[128 + h * 32..128 + h * 32 + 32];
                    let sc = &blk[192 + h * 8..192 + h * 8 + 8];
                    let y = &mut y[h * 128..h * 128 + 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                        y[l] = d * f32::from(sc[is] as i8) * f32::from(q1);
                        y[l + 32] = d * f32::from(sc[is + 2] as i8) * f32::from(q2);
                        y[l + 64] = d * f32::from(sc[is + 4] as i8) * f32::from(q3);
                        y[l + 96] = d * f32::from(sc[is + 6] as i8) * f32::from(q4);
                    }
                }
            }
        }
        Kind::Other(g) => {
            // The row is whole blocks of a type `can_dequantize` accepts (checked in Matrix::new).
            if ggml::dequantize_into(g, b, out).is_err() {
                out.fill(f32::NAN);
            }
        }
    }
}

/// Scale and min `j` (0..8) of a Q4_K/Q5_K super-block's 12 packed 6-bit values.
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random blocks with sane f16 scales, so every value is finite.
    fn blocks(kind: Kind, n: usize, seed: u64) -> Vec<u8> {
        let (_, size) = kind.block();
        let mut s = seed;
        let mut b: Vec<u8> = (0..n * size)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect();
        let d = half::f16::from_f32(0.01).to_bits().to_le_bytes();
        for blk in b.chunks_exact_mut(size) {
            match kind {
                Kind::Q8_0 | Kind::Q4_0 => blk[..2].copy_from_slice(&d),
                Kind::Q4_K => {
                    blk[..2].copy_from_slice(&d);
                    blk[2..4].copy_from_slice(&d);
                }
                Kind::Q6_K => blk[208..210].copy_from_slice(&d),
                _ => {}
            }
        }
        b
    }

    /// The kernels here decode exactly what the core's (gguf-py-identical) decoder does.
    #[test]
    fn block_kernels_match_core_dequantize() {
        for (kind, id) in [(Kind::Q8_0, 8u32), (Kind::Q4_0, 2), (Kind::Q4_K, 12), (Kind::Q6_K, 14)] {
            let (block, _) = kind.block();
            let b = blocks(kind, 8, u64::from(id));
            let want = ggml::dequantize(GgmlType(id), &b).unwrap();
            let mut got = vec![0f32; 8 * block];
            dequantize_row(kind, &b, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                    "{kind:?} element {i}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn dot_matches_f64() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
        assert!((f64::from(dot(&a, &b)) - want).abs() < 1e-5);
    }
}
