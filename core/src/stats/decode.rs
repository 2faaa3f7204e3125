//! Element decoding for [`super`]: bytes of any element type the readers yield to f64 values,
//! one monomorphized loop per type (no per-element dispatch).

use alloc::vec::Vec;

use crate::dtype::DType;
use crate::formats::ElementType;
use crate::formats::ggml::{self, GgmlType};
use crate::zt::format::LogicalType;

use super::StatsError;

/// Values decoded at a time: the leaf of the pairwise moment tree and the buffer every kernel
/// runs over (16 KiB of f64, so both passes of a leaf stay in L1). Every ggml block size (1, 32,
/// 64, 128, 256 elements) divides it, so whole blocks always fit.
pub(crate) const LEAF: usize = 2048;

/// How one element type becomes f64 values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Codec {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    /// One byte, `!= 0` is 1.0.
    Bool,
    /// One byte through a 256-entry table (the float8 variants).
    Table(&'static [f64; 256]),
    /// Two float4 e2m1 values per byte, low nibble first.
    F4,
    /// ggml blocks, dequantized with [`ggml::dequantize_into`].
    Ggml {
        /// The type.
        ty: GgmlType,
        /// Elements per block.
        block: usize,
        /// Bytes per block.
        size: usize,
    },
}

impl Codec {
    /// The codec of `ty`, and how many values one element gives (2 for complex: real and
    /// imaginary part).
    pub(crate) fn of(ty: ElementType) -> Result<(Codec, u64), StatsError> {
        let dense = |d: DType| -> (Codec, u64) {
            match d {
                DType::F32 => (Codec::F32, 1),
                DType::F64 => (Codec::F64, 1),
                DType::F16 => (Codec::F16, 1),
                DType::BF16 => (Codec::BF16, 1),
                DType::I8 => (Codec::I8, 1),
                DType::I16 => (Codec::I16, 1),
                DType::I32 => (Codec::I32, 1),
                DType::I64 => (Codec::I64, 1),
                DType::U8 => (Codec::U8, 1),
                DType::U16 => (Codec::U16, 1),
                DType::U32 => (Codec::U32, 1),
                DType::U64 => (Codec::U64, 1),
                DType::Bool => (Codec::Bool, 1),
                DType::C64 => (Codec::F32, 2),
                DType::C128 => (Codec::F64, 2),
            }
        };
        Ok(match ty {
            ElementType::Dense(d) => dense(d),
            ElementType::Logical(l) => match l {
                LogicalType::Bool => (Codec::Bool, 1),
                LogicalType::F8E4M3Fn => (Codec::Table(&F8E4M3FN), 1),
                LogicalType::F8E4M3Fnuz => (Codec::Table(&F8E4M3FNUZ), 1),
                LogicalType::F8E5M2 => (Codec::Table(&F8E5M2), 1),
                LogicalType::F8E5M2Fnuz => (Codec::Table(&F8E5M2FNUZ), 1),
                LogicalType::F8E8M0 => (Codec::Table(&F8E8M0FNU), 1),
                LogicalType::F4E2M1 => (Codec::F4, 1),
                LogicalType::Complex64 => (Codec::F32, 2),
                LogicalType::Complex128 => (Codec::F64, 2),
            },
            ElementType::Ggml(g) => {
                // Plain ggml types are dense dtypes (the GGUF reader already maps them so).
                if let Some(d) = g.plain_dtype() {
                    return Ok(dense(d));
                }
                let (Some(block), Some(size)) = (g.block_size(), g.type_size()) else {
                    return Err(StatsError::Unsupported {
                        dtype: g.name(),
                        reason: "it is not a known ggml type id",
                    });
                };
                if !ggml::can_dequantize(g) {
                    return Err(StatsError::Unsupported {
                        dtype: g.name(),
                        reason: "its blocks cannot be dequantized (the gguf reference package cannot either)",
                    });
                }
                (
                    Codec::Ggml {
                        ty: g,
                        block: block as usize,
                        size: size as usize,
                    },
                    1,
                )
            }
        })
    }

    /// Bytes of one decoding unit (an element, a complex component, a byte of float4, a ggml
    /// block).
    pub(crate) fn unit_bytes(self) -> usize {
        match self {
            Codec::F64 | Codec::I64 | Codec::U64 => 8,
            Codec::F32 | Codec::I32 | Codec::U32 => 4,
            Codec::F16 | Codec::BF16 | Codec::I16 | Codec::U16 => 2,
            Codec::I8 | Codec::U8 | Codec::Bool | Codec::Table(_) | Codec::F4 => 1,
            Codec::Ggml { size, .. } => size,
        }
    }

    /// Values one unit gives.
    pub(crate) fn unit_values(self) -> usize {
        match self {
            Codec::F4 => 2,
            Codec::Ggml { block, .. } => block,
            _ => 1,
        }
    }

    /// Decodes whole units `src` into `dst` (`dst.len()` is exactly `src` units × values per
    /// unit). `scratch` holds at least [`LEAF`] f32 for ggml blocks.
    pub(crate) fn decode(self, src: &[u8], dst: &mut [f64], scratch: &mut Vec<f32>) {
        match self {
            Codec::F32 => each::<4>(src, dst, |b| f64::from(f32::from_le_bytes(b))),
            Codec::F64 => each::<8>(src, dst, f64::from_le_bytes),
            Codec::F16 => each::<2>(src, dst, |b| f64::from(half::f16::from_bits(u16::from_le_bytes(b)))),
            Codec::BF16 => each::<2>(src, dst, |b| {
                f64::from(f32::from_bits(u32::from(u16::from_le_bytes(b)) << 16))
            }),
            Codec::I8 => each::<1>(src, dst, |b| f64::from(b[0] as i8)),
            Codec::U8 => each::<1>(src, dst, |b| f64::from(b[0])),
            Codec::I16 => each::<2>(src, dst, |b| f64::from(i16::from_le_bytes(b))),
            Codec::U16 => each::<2>(src, dst, |b| f64::from(u16::from_le_bytes(b))),
            Codec::I32 => each::<4>(src, dst, |b| f64::from(i32::from_le_bytes(b))),
            Codec::U32 => each::<4>(src, dst, |b| f64::from(u32::from_le_bytes(b))),
            // Round to nearest, ties to even: what NumPy's astype(float64) does (a C cast).
            Codec::I64 => each::<8>(src, dst, |b| i64::from_le_bytes(b) as f64),
            Codec::U64 => each::<8>(src, dst, |b| u64::from_le_bytes(b) as f64),
            Codec::Bool => each::<1>(src, dst, |b| if b[0] != 0 { 1.0 } else { 0.0 }),
            Codec::Table(t) => each::<1>(src, dst, |b| t[usize::from(b[0])]),
            Codec::F4 => {
                for (d, &b) in dst.as_chunks_mut::<2>().0.iter_mut().zip(src) {
                    *d = [F4E2M1[usize::from(b & 0xF)], F4E2M1[usize::from(b >> 4)]];
                }
            }
            Codec::Ggml { ty, .. } => {
                scratch.resize(dst.len(), 0.0);
                // Cannot fail: the type was checked by `Codec::of`, `src` is whole blocks and
                // `scratch` has exactly their elements. Should it fail anyway, the values read
                // as NaN rather than as made-up numbers.
                if ggml::dequantize_into(ty, src, scratch).is_err() {
                    scratch.fill(f32::NAN);
                }
                for (d, s) in dst.iter_mut().zip(scratch.iter()) {
                    *d = f64::from(*s);
                }
            }
        }
    }
}

/// `dst[i] = f(src unit i)` over `N`-byte units.
#[inline(always)]
fn each<const N: usize>(src: &[u8], dst: &mut [f64], f: impl Fn([u8; N]) -> f64) {
    for (d, b) in dst.iter_mut().zip(src.as_chunks::<N>().0) {
        *d = f(*b);
    }
}

/// Which bit patterns of a minifloat are special.
#[derive(Clone, Copy)]
enum Special {
    /// IEEE: all-ones exponent is ±inf (mantissa 0) or NaN.
    Ieee,
    /// "fn": only all-ones exponent and mantissa is NaN; no infinities.
    Fn,
    /// "fnuz": only 0x80 (negative zero's pattern) is NaN; no infinities, no -0.
    Fnuz,
    /// None (float4 e2m1).
    Finite,
}

/// The f64 value of the minifloat `bits` (`e` exponent bits, `m` mantissa bits, one sign bit).
const fn minifloat(bits: u32, e: u32, m: u32, bias: i32, special: Special) -> f64 {
    let sign = (bits >> (e + m)) & 1;
    let exp = (bits >> m) & ((1 << e) - 1);
    let man = bits & ((1 << m) - 1);
    let emax = (1 << e) - 1;
    let neg = sign == 1;
    match special {
        Special::Ieee if exp == emax => {
            return if man != 0 {
                f64::NAN
            } else if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
        }
        Special::Fn if exp == emax && man == (1 << m) - 1 => return f64::NAN,
        Special::Fnuz if neg && exp == 0 && man == 0 => return f64::NAN,
        _ => {}
    }
    // value = man * 2^(1 - bias - m) when subnormal, (2^m + man) * 2^(exp - bias - m) otherwise:
    // an integer times a power of two, both exact in f64.
    let (int, pow) = if exp == 0 {
        (man, 1 - bias - m as i32)
    } else {
        (man | (1 << m), exp as i32 - bias - m as i32)
    };
    let v = int as f64 * pow2(pow);
    if neg { -v } else { v }
}

/// 2^p for |p| < 1023 (exact).
const fn pow2(p: i32) -> f64 {
    f64::from_bits(((p + 1023) as u64) << 52)
}

const fn table(e: u32, m: u32, bias: i32, special: Special) -> [f64; 256] {
    let mut t = [0.0; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = minifloat(i as u32, e, m, bias, special);
        i += 1;
    }
    t
}

const fn e8m0() -> [f64; 256] {
    let mut t = [0.0; 256];
    let mut i = 0;
    while i < 255 {
        t[i] = pow2(i as i32 - 127);
        i += 1;
    }
    t[255] = f64::NAN;
    t
}

/// float8_e4m3fn (OCP / NVIDIA): bias 7, NaN = S.1111.111, no infinities.
pub(crate) static F8E4M3FN: [f64; 256] = table(4, 3, 7, Special::Fn);
/// float8_e4m3fnuz (AMD): bias 8, NaN = 0x80, no infinities.
pub(crate) static F8E4M3FNUZ: [f64; 256] = table(4, 3, 8, Special::Fnuz);
/// float8_e5m2 (OCP): IEEE-like, bias 15.
pub(crate) static F8E5M2: [f64; 256] = table(5, 2, 15, Special::Ieee);
/// float8_e5m2fnuz (AMD): bias 16, NaN = 0x80, no infinities.
pub(crate) static F8E5M2FNUZ: [f64; 256] = table(5, 2, 16, Special::Fnuz);
/// float8_e8m0fnu (OCP MX scale): 2^(byte - 127), 0xFF is NaN; no sign, no zero.
pub(crate) static F8E8M0FNU: [f64; 256] = e8m0();
/// float4_e2m1fn (OCP MX): bias 1, no specials; the 16 nibble values.
pub(crate) static F4E2M1: [f64; 16] = {
    let mut t = [0.0; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = minifloat(i as u32, 2, 1, 1, Special::Finite);
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minifloat_tables() {
        // float8_e4m3fn: 0x38 = 1.0, 0x7E = 448 (max), 0x7F NaN, 0x01 = 2^-9, 0x80 = -0.
        assert_eq!(F8E4M3FN[0x38], 1.0);
        assert_eq!(F8E4M3FN[0x7E], 448.0);
        assert!(F8E4M3FN[0x7F].is_nan() && F8E4M3FN[0xFF].is_nan());
        assert_eq!(F8E4M3FN[0x01], 2f64.powi(-9));
        assert!(F8E4M3FN[0x80] == 0.0 && F8E4M3FN[0x80].is_sign_negative());
        // float8_e5m2: 0x3C = 1.0, 0x7B = 57344 (max), 0x7C inf, 0xFC -inf, 0x7D NaN.
        assert_eq!(F8E5M2[0x3C], 1.0);
        assert_eq!(F8E5M2[0x7B], 57344.0);
        assert_eq!(F8E5M2[0x7C], f64::INFINITY);
        assert_eq!(F8E5M2[0xFC], f64::NEG_INFINITY);
        assert!(F8E5M2[0x7D].is_nan());
        // fnuz: 0x80 NaN, 0x40 = 1.0 (e4m3, bias 8), 0x7F = 240 (e4m3fnuz max), 0x7F = 57344 (e5m2fnuz).
        assert!(F8E4M3FNUZ[0x80].is_nan() && F8E5M2FNUZ[0x80].is_nan());
        assert_eq!(F8E4M3FNUZ[0x40], 1.0);
        assert_eq!(F8E4M3FNUZ[0x7F], 240.0);
        assert_eq!(F8E5M2FNUZ[0x7F], 57344.0);
        assert_eq!(F8E5M2FNUZ[0x40], 1.0);
        // e8m0: 127 = 1.0, 0 = 2^-127, 254 = 2^127, 255 NaN.
        assert_eq!(F8E8M0FNU[127], 1.0);
        assert_eq!(F8E8M0FNU[0], 2f64.powi(-127));
        assert_eq!(F8E8M0FNU[254], 2f64.powi(127));
        assert!(F8E8M0FNU[255].is_nan());
        assert_eq!(F4E2M1[..8], [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(F4E2M1[15], -6.0);
    }
}
