//! AVX-512 kernels (with VNNI) for the prompt's products, where the CPU has them: the same
//! integer lanes and float operations as the AVX2 kernels in `super::x86` (so the same results
//! bit for bit), on 512-bit vectors: a 64-value half-block takes one load, one `vpmaddubsw` and
//! one `vpdpwssd` per input where AVX2 takes two of each and two adds, and the 32 vector
//! registers hold a block's decoded row for four inputs without spilling it to the stack.
//!
//! `unsafe` only because `std::arch` intrinsics and `#[target_feature]` functions are.

use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Whether this CPU has AVX-512 F, BW, VL and VNNI as well as AVX2 and FMA (checked once).
pub(super) fn available() -> bool {
    static AVX512: OnceLock<bool> = OnceLock::new();
    *AVX512.get_or_init(|| {
        super::simd()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
            && std::env::var_os("TENSORLANE_NO_AVX512").is_none()
    })
}

/// llama.cpp's `get_scale_shuffle_k4(2j)` in the low 256 bits and `(2j + 1)` in the high 256
/// (each 128-bit lane indexes its own copy of the 16 scale bytes).
static SHUFFLE_K4_PAIRS: [[u8; 64]; 4] = {
    let mut t = [[0u8; 64]; 4];
    let mut j = 0;
    while j < 4 {
        let mut b = 0;
        while b < 64 {
            let i = 2 * j + b / 32;
            t[j][b] = (2 * i + b % 2) as u8;
            b += 1;
        }
        j += 1;
    }
    t
};

/// The 64 nibbles of the 32 bytes at `p` as bytes: the low nibbles in the low 256 bits, the
/// high ones in the high 256 (one broadcast load and a shift per half: built from two 256-bit
/// halves instead, the compiler went through the stack, and a store that a wider load had to
/// wait on halved a decode step's speed).
///
/// # Safety
/// `p` must point at 32 readable bytes.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn nibbles64(p: *const u8) -> __m512i {
    // SAFETY: the caller promises 32 bytes at p.
    let both = unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(p as *const __m256i)) };
    let shift = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(4));
    _mm512_and_si512(_mm512_srlv_epi16(both, shift), _mm512_set1_epi8(0xF))
}

/// `super::x86::dot_q4_k_x4` on 512-bit vectors, with `N` inputs (4 or 8): one Q4_K row, each
/// result bit for bit the AVX2 kernel's (and so `ggml_vec_dot_q4_K_q8_K`'s, or with
/// `INTERLEAVED` the order of llama.cpp's interleaved kernels): each input's 8 lanes of integer
/// sums per block are the AVX2 kernel's lanes (the low and high 256 bits of one accumulator
/// added), and the float operations on them are the same. Eight inputs decode the row's block
/// once where four inputs twice would.
///
/// # Safety
/// The CPU must have what [`available`] checks. Sizes are checked (a panic, not undefined
/// behaviour): with `nb` the row's blocks of 144 bytes, each `d[k]` holds `nb` scales, `q[k]`
/// `256 * nb` values and `sums[k]` `16 * nb`; `N` must be a multiple of 4.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dot_q4_k_xn<const INTERLEAVED: bool, const N: usize>(
    row: &[u8],
    d: [&[f32]; N],
    q: [&[i8]; N],
    sums: [&[i16]; N],
) -> [f32; N] {
    let nb = row.len() / 144;
    assert!(N.is_multiple_of(4) && (0..N).all(|k| d[k].len() >= nb && q[k].len() >= 256 * nb && sums[k].len() >= 16 * nb));
    let (z, zm) = (_mm256_setzero_ps(), _mm_setzero_ps());
    // per input: the scales' and the mins' accumulators
    let (mut acc, mut acc_m) = ([z; N], [zm; N]);
    // INTERLEAVED: the sums of each four inputs, a lane each
    let (mut s4, mut sm4) = ([zm; N], [zm; N]);
    for i in 0..nb {
        let blk = &row[144 * i..144 * (i + 1)];
        let (wd, wm) = (super::f16_bits(blk, 0), super::f16_bits(blk, 2));
        let utmp = super::q4_k_scales_mins(blk);
        let mins_and_scales =
            _mm256_cvtepu8_epi16(_mm_set_epi32(utmp[3] as i32, utmp[2] as i32, utmp[1] as i32, utmp[0] as i32));
        let mins = _mm256_extracti128_si256::<1>(mins_and_scales);
        let scales = _mm512_broadcast_i32x4(_mm256_castsi256_si128(mins_and_scales));
        // each 64 values: the low nibbles (values 64j..64j + 32) in the low half, the high
        // ones (64j + 32..64j + 64) in the high half, and their scales the same way
        let w: [(__m512i, __m512i); 4] = std::array::from_fn(|j| {
            // SAFETY: the block's 128 bytes of nibbles are at 16, 32 of them at 16 + 32j; the
            // shuffle row holds 64 bytes.
            let (q4, shuffle) = unsafe {
                (
                    nibbles64(blk.as_ptr().add(16 + 32 * j)),
                    _mm512_loadu_si512(SHUFFLE_K4_PAIRS[j].as_ptr() as *const __m512i),
                )
            };
            (q4, _mm512_shuffle_epi8(scales, shuffle))
        });
        // input k's integer sums of this block: the scaled nibble products (8 lanes) and the
        // mins times the activations' sums (4 lanes)
        let input = |k: usize| {
            // SAFETY: q[k] holds 256 values at 256i (asserted); q4_k_mins_product checks sums.
            let (prod, q8) = unsafe { (super::x86::q4_k_mins_product(mins, sums[k], i), q[k].as_ptr().add(256 * i)) };
            let mut acc = _mm512_setzero_si512();
            for (j, &(q4, sc)) in w.iter().enumerate() {
                // SAFETY: 64 activations at 64j of this block's 256.
                let x = unsafe { _mm512_loadu_si512(q8.add(64 * j) as *const __m512i) };
                acc = _mm512_dpwssd_epi32(acc, sc, _mm512_maddubs_epi16(q4, x));
            }
            let sumi = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64::<1>(acc));
            (sumi, prod)
        };
        for g in 0..N / 4 {
            let k = 4 * g;
            let ((i0, p0), (i1, p1), (i2, p2), (i3, p3)) = (input(k), input(k + 1), input(k + 2), input(k + 3));
            if INTERLEAVED {
                // as the AVX2 kernel: four inputs' block sums reduced together, a lane each
                let h = _mm256_hadd_epi32(_mm256_hadd_epi32(i0, i1), _mm256_hadd_epi32(i2, i3));
                let tot = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
                let mtot = _mm_hadd_epi32(_mm_hadd_epi32(p0, p1), _mm_hadd_epi32(p2, p3));
                let dx = _mm_set_ps(d[k + 3][i], d[k + 2][i], d[k + 1][i], d[k][i]);
                s4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), _mm_mul_ps(_mm_set1_ps(wd), dx), s4[g]);
                sm4[g] = _mm_fmadd_ps(_mm_cvtepi32_ps(mtot), _mm_mul_ps(_mm_set1_ps(wm), dx), sm4[g]);
            } else {
                for (k, (sumi, prod)) in (k..k + 4).zip([(i0, p0), (i1, p1), (i2, p2), (i3, p3)]) {
                    let dx = d[k][i];
                    let (dd, dmin) = (dx * wd, -dx * wm);
                    acc_m[k] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[k]);
                    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc[k]);
                }
            }
        }
    }
    let mut out = [0f32; N];
    if INTERLEAVED {
        for (g, o) in out.chunks_exact_mut(4).enumerate() {
            // SAFETY: o holds four floats.
            unsafe { _mm_storeu_ps(o.as_mut_ptr(), _mm_sub_ps(s4[g], sm4[g])) };
        }
        return out;
    }
    for (k, o) in out.iter_mut().enumerate() {
        *o = super::x86::fin(acc[k], acc_m[k]);
    }
    out
}

/// `super::x86::dot_q6_k_x4` on 512-bit vectors: one Q6_K row with four inputs, each result
/// bit for bit the AVX2 kernel's (`ggml_vec_dot_q6_K_q8_K`'s): two groups of 32 values a
/// vector, their products added into the AVX2 kernel's 8 lanes, the same float operations.
///
/// # Safety
/// The CPU must have what [`available`] checks. Sizes are checked (a panic, not undefined
/// behaviour): with `nb` the row's blocks of 210 bytes, each `d[k]` holds `nb` scales, `q[k]`
/// `256 * nb` values and `sums[k]` `16 * nb`.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dot_q6_k_x4(row: &[u8], d: [&[f32]; 4], q: [&[i8]; 4], sums: [&[i16]; 4]) -> [f32; 4] {
    let nb = row.len() / 210;
    assert!((0..4).all(|k| d[k].len() >= nb && q[k].len() >= 256 * nb && sums[k].len() >= 16 * nb));
    let z = _mm256_setzero_ps();
    let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
    let pair = |lo: __m256i, hi: __m256i| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
    for i in 0..nb {
        let blk = &row[210 * i..210 * (i + 1)];
        let wd = super::f16_bits(blk, 208);
        // SAFETY: the block's 16 scales are at 192.
        let scales = unsafe { _mm_loadu_si128(blk.as_ptr().add(192) as *const __m128i) };
        let scales_16 = _mm256_cvtepi8_epi16(scales);
        let scale = |g: usize| _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, super::x86::scale_shuffle(g)));
        // the 6-bit values (unsigned) of 64 values and their scales: w[2j + h] holds groups
        // 4j + 2h and 4j + 2h + 1, activations 128j + 64h..128j + 64h + 64
        let mut w = [(_mm512_setzero_si512(), _mm512_setzero_si512()); 4];
        for j in 0..2 {
            // SAFETY: the CPU has AVX2 (this function's features); blk is a whole block.
            let [v0, v1, v2, v3] = unsafe { super::x86::q6_k_values(blk, j) };
            w[2 * j] = (pair(v0, v1), pair(scale(4 * j), scale(4 * j + 1)));
            w[2 * j + 1] = (pair(v2, v3), pair(scale(4 * j + 2), scale(4 * j + 3)));
        }
        let input = |k: usize| {
            // SAFETY: sums[k] holds 16 values at 16i and q[k] 256 at 256i (asserted).
            let (q8sums, q8) = unsafe {
                (
                    _mm256_loadu_si256(sums[k].as_ptr().add(16 * i) as *const __m256i),
                    q[k].as_ptr().add(256 * i),
                )
            };
            let q8sclsub = _mm256_slli_epi32::<5>(_mm256_madd_epi16(q8sums, scales_16));
            let mut acc = _mm512_setzero_si512();
            for (g, &(v, sc)) in w.iter().enumerate() {
                // SAFETY: 64 activations at 64g of this block's 256.
                let x = unsafe { _mm512_loadu_si512(q8.add(64 * g) as *const __m512i) };
                acc = _mm512_dpwssd_epi32(acc, sc, _mm512_maddubs_epi16(v, x));
            }
            let sumi = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64::<1>(acc));
            _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, q8sclsub))
        };
        let dd = |k: usize| _mm256_set1_ps(d[k][i] * wd);
        a0 = _mm256_fmadd_ps(dd(0), input(0), a0);
        a1 = _mm256_fmadd_ps(dd(1), input(1), a1);
        a2 = _mm256_fmadd_ps(dd(2), input(2), a2);
        a3 = _mm256_fmadd_ps(dd(3), input(3), a3);
    }
    use super::x86::hsum;
    [hsum(a0), hsum(a1), hsum(a2), hsum(a3)]
}

/// `super::x86::dot_q8_0_x4` on 512-bit vectors with VNNI: one Q8_0 row with four inputs, each
/// result bit for bit the AVX2 kernel's (`ggml_vec_dot_q8_0_q8_0`'s): two blocks a vector, each
/// block's 8 lanes of integer sums by one `vpdpbusd` (exact: what `vpmaddubsw` + `vpmaddwd` sum,
/// with no 16-bit step), converted and multiply-added into the same 8 float lanes in block order.
///
/// # Safety
/// The CPU must have what [`available`] checks. Sizes are checked (a panic, not undefined
/// behaviour): with `nb` the row's blocks of 34 bytes, each `d[k]` holds `nb` scales and `q[k]`
/// `32 * nb` values of at most 127 in magnitude (as Q8_0 quantization gives).
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dot_q8_0_x4(row: &[u8], d: [&[f32]; 4], q: [&[i8]; 4]) -> [f32; 4] {
    let nb = row.len() / 34;
    assert!((0..4).all(|k| d[k].len() >= nb && q[k].len() >= 32 * nb));
    let t = super::f16_table();
    let z = _mm256_setzero_ps();
    let (mut a0, mut a1, mut a2, mut a3) = (z, z, z, z);
    let zero = _mm512_setzero_si512();
    let mut b = 0;
    while b + 2 <= nb {
        let (blk0, blk1) = (&row[34 * b..34 * b + 34], &row[34 * b + 34..34 * b + 68]);
        // SAFETY: each block has 32 values after its 2-byte scale; each q[k] 64 values at 32b
        // (b + 2 <= nb, asserted).
        let (w, x0, x1, x2, x3) = unsafe {
            let x = |k: usize| _mm512_loadu_si512(q[k].as_ptr().add(32 * b) as *const __m512i);
            (
                _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_loadu_si256(blk0.as_ptr().add(2) as *const __m256i)),
                    _mm256_loadu_si256(blk1.as_ptr().add(2) as *const __m256i),
                ),
                x(0),
                x(1),
                x(2),
                x(3),
            )
        };
        // |w| as unsigned bytes and x with w's sign (as vpsignb: x where w is 0 meets |w| = 0)
        let (aw, neg) = (_mm512_abs_epi8(w), _mm512_movepi8_mask(w));
        let (dw0, dw1) = (super::f16_at(t, blk0, 0), super::f16_at(t, blk1, 0));
        macro_rules! input {
            ($k:expr, $x:ident, $a:ident) => {{
                let v = _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8($x, neg, zero, $x));
                let (lo, hi) = (_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
                $a = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * d[$k][b]), _mm256_cvtepi32_ps(lo), $a);
                $a = _mm256_fmadd_ps(_mm256_set1_ps(dw1 * d[$k][b + 1]), _mm256_cvtepi32_ps(hi), $a);
            }};
        }
        input!(0, x0, a0);
        input!(1, x1, a1);
        input!(2, x2, a2);
        input!(3, x3, a3);
        b += 2;
    }
    if b < nb {
        // the last block of an odd count, with 256-bit vectors
        let blk = &row[34 * b..34 * b + 34];
        // SAFETY: the block has 32 values after its scale; each q[k] 32 values at 32b.
        let (w, x) = unsafe {
            (
                _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i),
                [0, 1, 2, 3].map(|k| _mm256_loadu_si256(q[k].as_ptr().add(32 * b) as *const __m256i)),
            )
        };
        let aw = _mm256_sign_epi8(w, w);
        let dw = super::f16_at(t, blk, 0);
        let sum = |x: __m256i| _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, w)));
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[0][b]), sum(x[0]), a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[1][b]), sum(x[1]), a1);
        a2 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[2][b]), sum(x[2]), a2);
        a3 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[3][b]), sum(x[3]), a3);
    }
    use super::x86::hsum;
    [hsum(a0), hsum(a1), hsum(a2), hsum(a3)]
}
