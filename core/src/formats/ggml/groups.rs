//! The 4-bit ggml types seen as groups: in Q4_0, Q4_1, Q4_K and IQ4_NL every group of 32
//! elements takes one of only 16 values, picked by a 4-bit index. A group is then a 16-entry
//! table and a count of each index, which lets [`crate::stats`] summarise 32 elements with at
//! most 16 weighted values instead of dequantizing all 32 (order does not matter to statistics).
//!
//! Each table entry is computed with the same f32 operations, in the same order, as the block
//! decoder of [`super::dequantize_into`] computes that element, so the multiset of a group's
//! values is bit-identical to the dequantized elements (checked by the tests below against the
//! decoders themselves).

use super::{GgmlType, IQ4NL_VALUES, f16, k_scale_min, u16le};

/// Elements in a group.
pub(crate) const GROUP: usize = 32;

/// One group: the value of each 4-bit index and how many elements of the group have it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Group {
    pub values: [f32; 16],
    pub counts: [u8; 16],
}

/// Fills `out` (exactly the block's groups: block elements / [`GROUP`]) from one block's bytes.
type Fill = fn(&[u8], &mut [Group]);

/// How the blocks of one grouped type become [`Group`]s.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupDecoder {
    fill: Fill,
}

impl GroupDecoder {
    /// The groups of one block (`b` is exactly one block's bytes, `out` has one entry per
    /// [`GROUP`] elements of the block).
    #[inline]
    pub(crate) fn fill(&self, b: &[u8], out: &mut [Group]) {
        (self.fill)(b, out)
    }
}

/// The group decoder of `ty`, for the types whose groups have 16 values.
pub(crate) fn group_decoder(ty: GgmlType) -> Option<GroupDecoder> {
    let fill: Fill = match ty.0 {
        2 => q4_0,
        3 => q4_1,
        12 => q4_k,
        20 => iq4_nl,
        _ => return None,
    };
    Some(GroupDecoder { fill })
}

/// Counts of each nibble of `bytes` (both nibbles of every byte).
#[inline(always)]
fn count(bytes: &[u8]) -> [u8; 16] {
    // Two interleaved count tables: consecutive equal indices do not wait on each other's store.
    let mut c = [[0u8; 16]; 2];
    for &x in bytes {
        c[0][usize::from(x & 0xF)] += 1;
        c[1][usize::from(x >> 4)] += 1;
    }
    let mut out = [0u8; 16];
    for (o, (a, b)) in out.iter_mut().zip(c[0].iter().zip(&c[1])) {
        *o = a + b;
    }
    out
}

fn q4_0(b: &[u8], out: &mut [Group]) {
    let d = f16(b, 0);
    let g = &mut out[0];
    for (q, v) in g.values.iter_mut().enumerate() {
        *v = d * f32::from(q as i8 - 8);
    }
    g.counts = count(&b[2..18]);
}

fn q4_1(b: &[u8], out: &mut [Group]) {
    let (d, m) = (f16(b, 0), f16(b, 2));
    let g = &mut out[0];
    for (q, v) in g.values.iter_mut().enumerate() {
        *v = d * f32::from(q as u8) + m;
    }
    g.counts = count(&b[4..20]);
}

fn q4_k(b: &[u8], out: &mut [Group]) {
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (sc, m) = k_scale_min(&b[4..16]);
    for (k, g) in out.iter_mut().enumerate() {
        let (ds, dm) = (d * f32::from(sc[k]), dmin * f32::from(m[k]));
        for (q, v) in g.values.iter_mut().enumerate() {
            *v = ds * f32::from(q as u8) - dm;
        }
    }
    // Groups 2j and 2j + 1 are the low and high nibbles of the same 32 bytes: counted in one
    // pass, two interleaved tables each.
    for (pair, qs) in out.chunks_exact_mut(2).zip(b[16..].chunks_exact(32)) {
        let (mut c0, mut c1) = ([[0u8; 16]; 2], [[0u8; 16]; 2]);
        for two in qs.chunks_exact(2) {
            c0[0][usize::from(two[0] & 0xF)] += 1;
            c1[0][usize::from(two[0] >> 4)] += 1;
            c0[1][usize::from(two[1] & 0xF)] += 1;
            c1[1][usize::from(two[1] >> 4)] += 1;
        }
        for q in 0..16 {
            pair[0].counts[q] = c0[0][q] + c0[1][q];
            pair[1].counts[q] = c1[0][q] + c1[1][q];
        }
    }
}

fn iq4_nl(b: &[u8], out: &mut [Group]) {
    let d = f16(b, 0);
    let g = &mut out[0];
    for (q, v) in g.values.iter_mut().enumerate() {
        *v = d * f32::from(IQ4NL_VALUES[q]);
    }
    g.counts = count(&b[2..18]);
}

/// A Q4_K group whose 32 values are exactly `(a * q - b) * 2^e` over its 4-bit indices `q`, with
/// `|a * q - b| < 2^24` for every `q` (so each is an f32 without rounding, the decoder's value):
/// its index sums then give its moments exactly, without dequantizing an element.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Linear {
    /// Slope and offset, in units of `2^e`.
    pub a: i64,
    pub b: i64,
    pub e: i32,
    /// The value of index `q` as the decoder computes it (`ds * q - dm` in f32), for the
    /// extremes (it carries the decoder's sign of a zero).
    pub ds: f32,
    pub dm: f32,
    /// Sum of the 32 indices, and of their squares.
    pub s1: u32,
    pub s2: u32,
    /// Smallest and largest index.
    pub qmin: u8,
    pub qmax: u8,
    /// Elements whose value is zero.
    pub zeros: u8,
}

impl Linear {
    /// The decoder's value of index `q`.
    pub(crate) fn value(&self, q: u8) -> f32 {
        self.ds * f32::from(q) - self.dm
    }
}

/// An f16 (bits `h`) as `(m, e)` with value `m * 2^e` exactly and `m` odd (zero: `(0, i32::MAX)`,
/// no constraint on a common exponent); `None` for Inf and NaN.
fn f16_parts(h: u16) -> Option<(i64, i32)> {
    let (sign, exp, frac) = (h >> 15, i32::from((h >> 10) & 0x1F), i64::from(h & 0x3FF));
    let (m, e) = match exp {
        0 => (frac, -24),
        31 => return None,
        _ => (frac | 0x400, exp - 25),
    };
    if m == 0 {
        return Some((0, i32::MAX));
    }
    let tz = m.trailing_zeros();
    let m = m >> tz;
    Some((if sign == 1 { -m } else { m }, e + tz as i32))
}

/// One Q4_K group as a line: its value of index `q` is exactly `(a q - b) 2^e` (`e` is the
/// block's), with `|a q - b| < 2^24` for every `q`, so each value is an f32 without rounding:
/// the decoder's `ds * q - dm`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Line {
    /// Slope and offset, in units of `2^e`.
    pub a: i64,
    pub b: i64,
    /// The decoder's factors (`d * sc`, `dmin * m`).
    pub ds: f32,
    pub dm: f32,
}

/// The 8 groups of Q4_K block `b` as [`Line`]s with their common exponent `e`; `None` when a
/// scale is Inf or NaN, or some group's values do not all fit that form (scales too far apart in
/// magnitude): the caller dequantizes that block instead.
pub(crate) fn q4_k_lines(b: &[u8]) -> Option<(i32, [Line; 8])> {
    let ((md, ed), (mm, em)) = (f16_parts(u16le(b, 0))?, f16_parts(u16le(b, 2))?);
    // Both scales in units of 2^e (a shift over 30 could only give values beyond 24 bits).
    let e = match ed.min(em) {
        i32::MAX => 0,
        e => e,
    };
    let units = |m: i64, x: i32| match m {
        0 => Some(0),
        _ if x - e > 30 => None,
        _ => Some(m << (x - e)),
    };
    let (ud, um) = (units(md, ed)?, units(mm, em)?);
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (sc, m) = k_scale_min(&b[4..16]);
    let mut lines = [Line::default(); 8];
    for (k, l) in lines.iter_mut().enumerate() {
        let (a, c) = (ud * i64::from(sc[k]), um * i64::from(m[k]));
        // The values are linear in q: the extremes are at q = 0 and q = 15.
        const LIMIT: i64 = 1 << 24;
        if c.abs() >= LIMIT || (15 * a - c).abs() >= LIMIT {
            return None;
        }
        *l = Line {
            a,
            b: c,
            ds: d * f32::from(sc[k]),
            dm: dmin * f32::from(m[k]),
        };
    }
    Some((e, lines))
}

/// The 8 groups of Q4_K block `b` as [`Linear`]s ([`q4_k_lines`] with their index sums);
/// `false` where [`q4_k_lines`] gives `None`.
pub(crate) fn q4_k_linear(b: &[u8], out: &mut [Linear; 8]) -> bool {
    let Some((e, lines)) = q4_k_lines(b) else {
        return false;
    };
    for pair in 0..4 {
        let qs = &b[16 + pair * 32..16 + pair * 32 + 32];
        // Index sums of the low nibbles (group 2 * pair) and the high ones (2 * pair + 1), in a
        // loop the compiler vectorizes.
        let (mut s1, mut s2) = ([0u32; 2], [0u32; 2]);
        let (mut lo, mut hi) = ([15u8; 2], [0u8; 2]);
        for &x in qs {
            let (l, h) = (x & 0xF, x >> 4);
            s1[0] += u32::from(l);
            s2[0] += u32::from(l) * u32::from(l);
            s1[1] += u32::from(h);
            s2[1] += u32::from(h) * u32::from(h);
            lo[0] = lo[0].min(l);
            hi[0] = hi[0].max(l);
            lo[1] = lo[1].min(h);
            hi[1] = hi[1].max(h);
        }
        for half in 0..2 {
            let k = 2 * pair + half;
            let Line { a, b: c, ds, dm } = lines[k];
            let zeros = if a == 0 {
                if c == 0 { 32 } else { 0 }
            } else if c % a == 0 && (0..16).contains(&(c / a)) {
                let q0 = (c / a) as u8;
                qs.iter().filter(|&&x| (x >> (4 * half)) & 0xF == q0).count() as u8
            } else {
                0
            };
            out[k] = Linear {
                a,
                b: c,
                e,
                ds,
                dm,
                s1: s1[half],
                s2: s2[half],
                qmin: lo[half],
                qmax: hi[half],
                zeros,
            };
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::{block_decoder, dequantize_into};
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// The multiset of each group's values, as sorted bit patterns.
    fn from_groups(groups: &[Group]) -> Vec<Vec<u32>> {
        groups
            .iter()
            .map(|g| {
                let mut v: Vec<u32> = (0..16)
                    .flat_map(|q| core::iter::repeat_n(g.values[q].to_bits(), usize::from(g.counts[q])))
                    .collect();
                v.sort_unstable();
                v
            })
            .collect()
    }

    #[test]
    fn groups_hold_exactly_the_dequantized_values() {
        // A xorshift stream of block bytes, with the f16 scales kept finite and varied in sign.
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for ty in [2u32, 3, 12, 20] {
            let ty = GgmlType(ty);
            let dec = group_decoder(ty).unwrap();
            assert!(block_decoder(ty).is_some());
            let (block, size) = (ty.block_size().unwrap() as usize, ty.type_size().unwrap() as usize);
            let groups = block / GROUP;
            for _ in 0..500 {
                let mut b: Vec<u8> = (0..size).map(|_| next() as u8).collect();
                // Scales: f16 with exponent bits cleared of all-ones (no Inf/NaN).
                for at in [0usize, 2] {
                    if at + 1 < size {
                        b[at + 1] &= 0xBB;
                    }
                }
                let mut y = vec![0f32; block];
                dequantize_into(ty, &b, &mut y).unwrap();
                let want: Vec<Vec<u32>> = y
                    .chunks_exact(GROUP)
                    .map(|c| {
                        let mut v: Vec<u32> = c.iter().map(|x| x.to_bits()).collect();
                        v.sort_unstable();
                        v
                    })
                    .collect();
                let mut out = vec![Group::default(); groups];
                dec.fill(&b, &mut out);
                assert_eq!(from_groups(&out), want, "{}", ty.name());
            }
        }
    }

    #[test]
    fn linear_groups_are_the_dequantized_values() {
        let mut s = 0x0123_4567_89ab_cdefu64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let ty = GgmlType(12);
        let (mut exact, mut refused) = (0, 0);
        for i in 0..3000 {
            let mut b: Vec<u8> = (0..144).map(|_| next() as u8).collect();
            // Scales: finite f16 of both signs, often near each other, sometimes zero or far apart.
            b[1] &= 0xBB;
            b[3] = if i % 3 == 0 {
                b[3] & 0xBB
            } else {
                (b[1] & 0x80) | (b[1] & 0x7C).saturating_sub(4 * (i % 4) as u8)
            };
            if i % 17 == 0 {
                b[2] = 0;
                b[3] = 0;
            }
            let mut y = vec![0f32; 256];
            dequantize_into(ty, &b, &mut y).unwrap();
            let mut out = [Linear::default(); 8];
            if !q4_k_linear(&b, &mut out) {
                refused += 1;
                continue;
            }
            exact += 1;
            for (k, (g, y)) in out.iter().zip(y.chunks_exact(32)).enumerate() {
                let scale = 2f64.powi(g.e);
                let qs: Vec<u8> = b[16 + (k / 2) * 32..16 + (k / 2) * 32 + 32]
                    .iter()
                    .map(|x| (x >> (4 * (k % 2))) & 0xF)
                    .collect();
                for (&q, &v) in qs.iter().zip(y) {
                    assert_eq!(
                        ((g.a * i64::from(q) - g.b) as f64 * scale),
                        f64::from(v),
                        "block {i} group {k}"
                    );
                    assert_eq!(g.value(q).to_bits(), v.to_bits());
                }
                assert_eq!(g.s1, qs.iter().map(|&q| u32::from(q)).sum::<u32>());
                assert_eq!(g.s2, qs.iter().map(|&q| u32::from(q) * u32::from(q)).sum::<u32>());
                assert_eq!((g.qmin, g.qmax), (*qs.iter().min().unwrap(), *qs.iter().max().unwrap()));
                assert_eq!(usize::from(g.zeros), y.iter().filter(|v| **v == 0.0).count());
            }
        }
        assert!(exact > 1000 && refused > 100, "{exact} exact, {refused} refused");
        // Inf and NaN scales are refused.
        let mut b = vec![0u8; 144];
        b[0..2].copy_from_slice(&half::f16::INFINITY.to_bits().to_le_bytes());
        assert!(!q4_k_linear(&b, &mut [Linear::default(); 8]));
        b[0..2].copy_from_slice(&half::f16::NAN.to_bits().to_le_bytes());
        assert!(!q4_k_linear(&b, &mut [Linear::default(); 8]));
    }
}
