//! The 4-bit ggml types seen as groups: in Q4_0, Q4_1, Q4_K and IQ4_NL every group of 32
//! elements takes one of only 16 values, picked by a 4-bit index. A group is then a 16-entry
//! table and a count of each index, which lets [`crate::stats`] summarise 32 elements with at
//! most 16 weighted values instead of dequantizing all 32 (order does not matter to statistics).
//!
//! Each table entry is computed with the same f32 operations, in the same order, as the block
//! decoder of [`super::dequantize_into`] computes that element, so the multiset of a group's
//! values is bit-identical to the dequantized elements (checked by the tests below against the
//! decoders themselves).

use super::{GgmlType, IQ4NL_VALUES, f16, k_scale_min};

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

/// Counts of each nibble of `bytes`: both nibbles of every byte, or only the one at `shift`.
#[inline(always)]
fn count(bytes: &[u8], shift: Option<u32>) -> [u8; 16] {
    // Two interleaved count tables: consecutive equal indices do not wait on each other's store.
    let mut c = [[0u8; 16]; 2];
    match shift {
        None => {
            for &x in bytes {
                c[0][usize::from(x & 0xF)] += 1;
                c[1][usize::from(x >> 4)] += 1;
            }
        }
        Some(s) => {
            for pair in bytes.chunks_exact(2) {
                c[0][usize::from((pair[0] >> s) & 0xF)] += 1;
                c[1][usize::from((pair[1] >> s) & 0xF)] += 1;
            }
        }
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
    g.counts = count(&b[2..18], None);
}

fn q4_1(b: &[u8], out: &mut [Group]) {
    let (d, m) = (f16(b, 0), f16(b, 2));
    let g = &mut out[0];
    for (q, v) in g.values.iter_mut().enumerate() {
        *v = d * f32::from(q as u8) + m;
    }
    g.counts = count(&b[4..20], None);
}

fn q4_k(b: &[u8], out: &mut [Group]) {
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (sc, m) = k_scale_min(&b[4..16]);
    for (k, g) in out.iter_mut().enumerate() {
        let (ds, dm) = (d * f32::from(sc[k]), dmin * f32::from(m[k]));
        for (q, v) in g.values.iter_mut().enumerate() {
            *v = ds * f32::from(q as u8) - dm;
        }
        let at = 16 + (k / 2) * 32;
        g.counts = count(&b[at..at + 32], Some(4 * (k as u32 % 2)));
    }
}

fn iq4_nl(b: &[u8], out: &mut [Group]) {
    let d = f16(b, 0);
    let g = &mut out[0];
    for (q, v) in g.values.iter_mut().enumerate() {
        *v = d * f32::from(IQ4NL_VALUES[q]);
    }
    g.counts = count(&b[2..18], None);
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
}
