//! ggml tensor types (the element types of GGUF files) and block dequantization to f32.
//!
//! [`dequantize`] is a port of the gguf Python package's `gguf.quants` (0.19.0) block decoders,
//! operation for operation in f32, so that its output is bit-identical to
//! `gguf.quants.dequantize`'s (checked by the fixtures and a live cross-check). The IQ grids and
//! value tables are generated from that package into `ggml/tables.rs`.

use alloc::vec::Vec;

use super::{ErrorKind, FormatError};

#[rustfmt::skip]
mod tables;
pub(crate) mod groups;

use tables::{FP4_VALUES, IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, IQ4NL_VALUES, KSIGNS};

/// A ggml type id, as stored in a GGUF tensor info (`GGML_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

/// `(id, name, elements per block, bytes per block)` of every ggml type GGUF files use.
/// Ids 4, 5, 31–33 and 36–38 were removed from ggml and are not listed. (Ids as in the gguf Python
/// package 0.19.0, `GGML_QUANT_SIZES`.)
pub const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
];

impl GgmlType {
    /// The dense dtype of a plain (unquantized) ggml type: F32, F16, BF16, F64 and the signed
    /// integers; `None` for block-quantized and unknown types.
    pub fn plain_dtype(self) -> Option<crate::dtype::DType> {
        use crate::dtype::DType;
        match self.0 {
            0 => Some(DType::F32),
            1 => Some(DType::F16),
            24 => Some(DType::I8),
            25 => Some(DType::I16),
            26 => Some(DType::I32),
            27 => Some(DType::I64),
            28 => Some(DType::F64),
            30 => Some(DType::BF16),
            _ => None,
        }
    }

    /// The type named `name` (`Q4_0`, `q4_k`, ...: ggml's names, any case), if ggml has it.
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TYPES
            .iter()
            .find(|e| e.1.eq_ignore_ascii_case(name))
            .map(|e| GgmlType(e.0))
    }

    fn entry(self) -> Option<&'static (u32, &'static str, u64, u64)> {
        TYPES.iter().find(|e| e.0 == self.0)
    }

    /// Whether the id is a known ggml type.
    pub fn is_known(self) -> bool {
        self.entry().is_some()
    }

    /// The ggml name (`Q4_0`, `Q6_K`, `F32`, ...); `"unknown"` for an unknown id.
    pub fn name(self) -> &'static str {
        self.entry().map_or("unknown", |e| e.1)
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> Option<u64> {
        self.entry().map(|e| e.2)
    }

    /// Bytes per block.
    pub fn type_size(self) -> Option<u64> {
        self.entry().map(|e| e.3)
    }

    /// Whether the type is block-quantized (more than one element per block).
    pub fn is_quantized(self) -> bool {
        self.block_size().is_some_and(|b| b > 1)
    }

    /// Stored bytes for `n` elements: `None` for an unknown type, on overflow, or when `n` is not
    /// a whole number of blocks.
    pub fn nbytes(self, n: u64) -> Option<u64> {
        let (_, _, block, size) = *self.entry()?;
        if !n.is_multiple_of(block) {
            return None;
        }
        (n / block).checked_mul(size)
    }
}

/// Whether [`dequantize`] supports `ty`: the plain float types F32, F16 and BF16 and every block
/// type except `Q1_0` (which the reference package cannot dequantize either).
pub fn can_dequantize(ty: GgmlType) -> bool {
    block_decoder(ty).is_some() || matches!(ty.0, 0 | 1 | 30)
}

/// Dequantizes stored blocks of type `ty` to f32 values, in storage order (for a GGUF tensor:
/// C order of its row-major shape).
///
/// `blocks` must be a whole number of blocks. The result is bit-identical to
/// `gguf.quants.dequantize` of the gguf Python package 0.19.0 for every type that package
/// dequantizes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K–Q6_K, TQ1_0, TQ2_0, MXFP4, NVFP4, every IQ type,
/// BF16, F16, F32). Q8_1 and Q8_K, which the package does not dequantize, follow ggml
/// (`d * q`). Refused: `Q1_0` and the integer and F64 types ([`ErrorKind::Unsupported`]), a length
/// that is not a whole number of blocks ([`ErrorKind::SizeMismatch`]).
pub fn dequantize(ty: GgmlType, blocks: &[u8]) -> Result<Vec<f32>, FormatError> {
    let (block, size) = geometry(ty, blocks.len())?;
    if !can_dequantize(ty) {
        return Err(cannot_dequantize(ty));
    }
    let mut out = alloc::vec![0f32; blocks.len() / size * block];
    dequantize_into(ty, blocks, &mut out)?;
    Ok(out)
}

/// [`dequantize`] into a buffer the caller owns (no allocation): `out` must hold exactly the
/// elements of `blocks` (blocks × elements per block), else [`ErrorKind::SizeMismatch`]. Used by
/// streaming consumers ([`crate::stats`]) that dequantize a tensor a few blocks at a time.
pub fn dequantize_into(ty: GgmlType, blocks: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    let (block, size) = geometry(ty, blocks.len())?;
    let n = blocks.len() / size * block;
    if out.len() != n {
        return Err(FormatError::new(
            "gguf",
            ErrorKind::SizeMismatch,
            alloc::format!(
                "{} bytes of {} blocks hold {n} elements, but the output buffer has room for {}",
                blocks.len(),
                ty.name(),
                out.len()
            ),
        ));
    }
    match ty.0 {
        0 => {
            for (y, c) in out.iter_mut().zip(blocks.chunks_exact(4)) {
                *y = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
            return Ok(());
        }
        1 => {
            for (y, c) in out.iter_mut().zip(blocks.chunks_exact(2)) {
                *y = f16(c, 0);
            }
            return Ok(());
        }
        30 => {
            for (y, c) in out.iter_mut().zip(blocks.chunks_exact(2)) {
                *y = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
            return Ok(());
        }
        _ => {}
    }
    let decode = block_decoder(ty).ok_or_else(|| cannot_dequantize(ty))?;
    for (b, y) in blocks.chunks_exact(size).zip(out.chunks_exact_mut(block)) {
        decode(b, y);
    }
    Ok(())
}

fn cannot_dequantize(ty: GgmlType) -> FormatError {
    FormatError::new(
        "gguf",
        ErrorKind::Unsupported,
        alloc::format!("dequantizing {} to f32 is not supported", ty.name()),
    )
}

/// `(elements, bytes)` per block of `ty`, after checking that `len` bytes are whole blocks.
fn geometry(ty: GgmlType, len: usize) -> Result<(usize, usize), FormatError> {
    let err = |kind, msg: alloc::string::String| FormatError::new("gguf", kind, msg);
    let (block, size) = match (ty.block_size(), ty.type_size()) {
        (Some(b), Some(s)) => (b as usize, s as usize),
        _ => {
            return Err(err(
                ErrorKind::Unsupported,
                alloc::format!("ggml type id {} is not a known type", ty.0),
            ));
        }
    };
    if !len.is_multiple_of(size) {
        return Err(err(
            ErrorKind::SizeMismatch,
            alloc::format!(
                "{} bytes are not a whole number of {}-byte {} blocks",
                len,
                size,
                ty.name()
            ),
        ));
    }
    Ok((block, size))
}

/// Decodes one block (`b` is exactly one block's bytes, `y` its elements).
type Decoder = fn(&[u8], &mut [f32]);

fn block_decoder(ty: GgmlType) -> Option<Decoder> {
    Some(match ty.0 {
        2 => q4_0,
        3 => q4_1,
        6 => q5_0,
        7 => q5_1,
        8 => q8_0,
        9 => q8_1,
        10 => q2_k,
        11 => q3_k,
        12 => q4_k,
        13 => q5_k,
        14 => q6_k,
        15 => q8_k,
        16 => iq2_xxs,
        17 => iq2_xs,
        18 => iq3_xxs,
        19 => iq1_s,
        20 => iq4_nl,
        21 => iq3_s,
        22 => iq2_s,
        23 => iq4_xs,
        29 => iq1_m,
        34 => tq1_0,
        35 => tq2_0,
        39 => mxfp4,
        40 => nvfp4,
        _ => return None,
    })
}

fn f16(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16le(b, at)).to_f32()
}

fn u16le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Value `j` of a packed grid row.
fn grid(row: u64, j: usize) -> f32 {
    f32::from((row >> (8 * j)) as u8)
}

/// `-1.0` when bit `j` of `signs` is set, else `1.0`.
fn sign(signs: u8, j: usize) -> f32 {
    if (signs >> j) & 1 == 0 { 1.0 } else { -1.0 }
}

fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for j in 0..16 {
        let x = b[2 + j];
        y[j] = d * f32::from((x & 0xF) as i8 - 8);
        y[j + 16] = d * f32::from((x >> 4) as i8 - 8);
    }
}

fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16(b, 0), f16(b, 2));
    for j in 0..16 {
        let x = b[4 + j];
        y[j] = d * f32::from(x & 0xF) + m;
        y[j + 16] = d * f32::from(x >> 4) + m;
    }
}

/// The 5-bit values of a Q5_0/Q5_1 block: low nibbles from `qs`, fifth bits from `qh`.
fn q5_values(qh: u32, qs: &[u8]) -> [u8; 32] {
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (y, q) in y.iter_mut().zip(q5_values(u32le(b, 2), &b[6..22])) {
        *y = d * f32::from(q as i8 - 16);
    }
}

fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16(b, 0), f16(b, 2));
    for (y, q) in y.iter_mut().zip(q5_values(u32le(b, 4), &b[8..24])) {
        *y = d * f32::from(q) + m;
    }
}

fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (y, &x) in y.iter_mut().zip(&b[2..34]) {
        *y = f32::from(x as i8) * d;
    }
}

fn q8_1(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (y, &x) in y.iter_mut().zip(&b[4..36]) {
        *y = f32::from(x as i8) * d;
    }
}

fn q8_k(b: &[u8], y: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (y, &x) in y.iter_mut().zip(&b[4..260]) {
        *y = d * f32::from(x as i8);
    }
}

fn q2_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16(b, 80), f16(b, 82));
    for (e, y) in y.iter_mut().enumerate() {
        let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
        let q = (b[16 + h * 32 + l] >> (2 * s)) & 3;
        let sc = b[e / 16];
        let dl = d * f32::from(sc & 0xF);
        let ml = dmin * f32::from(sc >> 4);
        *y = dl * f32::from(q) - ml;
    }
}

fn q3_k(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 108);
    let s = &b[96..108];
    let mut dl = [0f32; 16];
    for (k, dl) in dl.iter_mut().enumerate() {
        let low = if k < 8 { s[k] & 0xF } else { s[k - 8] >> 4 };
        let high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        *dl = d * f32::from((low | (high << 4)) as i8 - 32);
    }
    for (e, y) in y.iter_mut().enumerate() {
        let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = (b[32 + h * 32 + l] >> (2 * s)) & 3;
        // The high bit subtracts 4 when it is clear.
        let high = ((b[l] >> (e / 32)) & 1) ^ 1;
        *y = dl[e / 16] * f32::from(low as i8 - (high << 2) as i8);
    }
}

/// The 6-bit scales and mins of a Q4_K/Q5_K block (12 packed bytes).
fn k_scale_min(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut m) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
        m[j] = s[4 + j] & 0x3F;
        m[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
    (sc, m)
}

fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (sc, m) = k_scale_min(&b[4..16]);
    // Per sub-block of 32: `(d * sc) * q - dmin * m`, the same operations in the same order as
    // element by element (so still bit-identical), in a loop the compiler vectorizes.
    for (g, y) in y.chunks_exact_mut(32).enumerate() {
        let (ds, dm) = (d * f32::from(sc[g]), dmin * f32::from(m[g]));
        let shift = 4 * (g % 2);
        let qs = &b[16 + (g / 2) * 32..16 + (g / 2) * 32 + 32];
        for (y, q) in y.iter_mut().zip(qs) {
            *y = ds * f32::from((q >> shift) & 0xF) - dm;
        }
    }
}

fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16(b, 0), f16(b, 2));
    let (sc, m) = k_scale_min(&b[4..16]);
    for (e, y) in y.iter_mut().enumerate() {
        let (g, l) = (e / 32, e % 32);
        let low = (b[48 + (g / 2) * 32 + l] >> (4 * (g % 2))) & 0xF;
        let high = (b[16 + l] >> g) & 1;
        *y = d * f32::from(sc[g]) * f32::from(low | (high << 4)) - dmin * f32::from(m[g]);
    }
}

fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 208);
    for (e, y) in y.iter_mut().enumerate() {
        let (h, r) = (e / 128, e % 128);
        let low = (b[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
        let high = (b[128 + h * 32 + r % 32] >> (2 * (r / 32))) & 3;
        let scale = f32::from(b[192 + e / 16] as i8);
        *y = d * scale * f32::from((low | (high << 4)) as i8 - 32);
    }
}

fn tq1_0(b: &[u8], y: &mut [f32]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let d = f16(b, 52);
    for (e, y) in y.iter_mut().enumerate() {
        let v = match e {
            0..160 => b[e % 32].wrapping_mul(POW3[e / 32]),
            160..240 => b[32 + (e - 160) % 16].wrapping_mul(POW3[(e - 160) / 16]),
            _ => b[48 + (e - 240) % 4].wrapping_mul(POW3[(e - 240) / 4]),
        };
        let q = ((u16::from(v) * 3) >> 8) as i8 - 1;
        *y = d * f32::from(q);
    }
}

fn tq2_0(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 64);
    for (e, y) in y.iter_mut().enumerate() {
        let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
        let q = ((b[h * 32 + l] >> (2 * s)) & 3) as i8 - 1;
        *y = d * f32::from(q);
    }
}

/// ggml's `ggml_e8m0_to_fp32_half`: 2^(e - 128) as f32.
fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

fn mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for (e, y) in y.iter_mut().enumerate() {
        let q = (b[1 + e % 16] >> (4 * (e / 16))) & 0xF;
        *y = d * f32::from(FP4_VALUES[usize::from(q)]);
    }
}

/// An unsigned e4m3 (bias 7) NVFP4 scale, halved for the doubled e2m1 values.
fn ue4m3_half(x: u8) -> f32 {
    let exp = i32::from((x >> 3) & 0xF);
    let man = f32::from(x & 7);
    let raw = if exp == 0 {
        man * (1.0 / 512.0)
    } else {
        (1.0 + man / 8.0) * f32::from_bits(((exp - 7 + 127) as u32) << 23)
    };
    if x == 0 || x == 0x7F { 0.0 } else { raw * 0.5 }
}

fn nvfp4(b: &[u8], y: &mut [f32]) {
    for (e, y) in y.iter_mut().enumerate() {
        let (s, k) = (e / 16, e % 16);
        let x = b[4 + s * 8 + k % 8];
        let q = if k < 8 { x & 0xF } else { x >> 4 };
        *y = ue4m3_half(b[s]) * f32::from(FP4_VALUES[usize::from(q)]);
    }
}

fn iq2_xxs(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let at = 2 + 8 * ib;
        let aux = u32le(b, at + 4);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.25;
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let row = IQ2XXS_GRID[usize::from(b[at + l])];
            let signs = KSIGNS[((aux >> (7 * l)) & 0x7F) as usize];
            for (j, y) in y.iter_mut().enumerate() {
                *y = db * grid(row, j) * sign(signs, j);
            }
        }
    }
}

/// `d * (0.5 + s) * 0.25` for the 16 4-bit scales packed in `scales` (IQ2_XS, IQ2_S).
fn iq2_scales(d: f32, scales: &[u8]) -> [f32; 16] {
    let mut db = [0f32; 16];
    for (k, db) in db.iter_mut().enumerate() {
        let s = (scales[k / 2] >> (4 * (k % 2))) & 0xF;
        *db = d * (0.5 + f32::from(s)) * 0.25;
    }
    db
}

fn iq2_xs(b: &[u8], y: &mut [f32]) {
    let db = iq2_scales(f16(b, 0), &b[66..74]);
    for (k, y) in y.chunks_exact_mut(8).enumerate() {
        let q = u16le(b, 2 + 2 * k);
        let row = IQ2XS_GRID[usize::from(q & 511)];
        let signs = KSIGNS[usize::from(q >> 9)];
        for (j, y) in y.iter_mut().enumerate() {
            *y = db[k / 2] * grid(row, j) * sign(signs, j);
        }
    }
}

fn iq2_s(b: &[u8], y: &mut [f32]) {
    let db = iq2_scales(f16(b, 0), &b[74..82]);
    for (k, y) in y.chunks_exact_mut(8).enumerate() {
        let high = (b[66 + k / 4] >> (2 * (k % 4))) & 3;
        let row = IQ2S_GRID[usize::from(b[2 + k]) | (usize::from(high) << 8)];
        let signs = b[34 + k];
        for (j, y) in y.iter_mut().enumerate() {
            *y = db[k / 2] * grid(row, j) * sign(signs, j);
        }
    }
}

fn iq3_xxs(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let aux = u32le(b, 66 + 4 * ib);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for (e, y) in y.iter_mut().enumerate() {
            let (l, j) = (e / 8, e % 8);
            let row = u64::from(IQ3XXS_GRID[usize::from(b[2 + ib * 8 + e / 4])]);
            let signs = KSIGNS[((aux >> (7 * l)) & 0x7F) as usize];
            *y = db * grid(row, e % 4) * sign(signs, j);
        }
    }
}

fn iq3_s(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (e, y) in y.iter_mut().enumerate() {
        let ib = e / 32;
        let db = d * f32::from(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xF));
        let k = e / 4;
        let high = (b[66 + k / 8] >> (k % 8)) & 1;
        let row = u64::from(IQ3S_GRID[usize::from(b[2 + k]) | (usize::from(high) << 8)]);
        *y = db * grid(row, e % 4) * sign(b[74 + e / 8], e % 8);
    }
}

/// Value `j` of an IQ1 grid row (-1, 0 or 1).
fn grid1(row: u64, j: usize) -> f32 {
    f32::from((row >> (8 * j)) as u8 as i8)
}

const IQ1_DELTA: f32 = 0.125;

fn iq1_s(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let qh = u16le(b, 34 + 2 * ib);
        let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
        let delta = if qh & 0x8000 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
        for (l, y) in y.chunks_exact_mut(8).enumerate() {
            let idx = usize::from(b[2 + ib * 4 + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
            let row = IQ1S_GRID[idx];
            for (j, y) in y.iter_mut().enumerate() {
                *y = dl * (grid1(row, j) + delta);
            }
        }
    }
}

fn iq1_m(b: &[u8], y: &mut [f32]) {
    let sc = [u16le(b, 48), u16le(b, 50), u16le(b, 52), u16le(b, 54)];
    // The f16 block scale is spread over the top nibbles of the four scale words.
    let bits = (sc[0] >> 12) | ((sc[1] & 0xF000) >> 8) | ((sc[2] & 0xF000) >> 4) | (sc[3] & 0xF000);
    let d = half::f16::from_bits(bits).to_f32();
    for (k, y) in y.chunks_exact_mut(8).enumerate() {
        let h = k / 2;
        let s = (sc[h / 4] >> (3 * (h % 4))) & 7;
        let dl = d * f32::from(2 * s + 1);
        let qh = b[32 + k / 2] >> (4 * (k % 2));
        let row = IQ1S_GRID[usize::from(b[k]) | (usize::from(qh & 7) << 8)];
        let delta = if qh & 8 == 0 { IQ1_DELTA } else { -IQ1_DELTA };
        for (j, y) in y.iter_mut().enumerate() {
            *y = dl * (grid1(row, j) + delta);
        }
    }
}

fn iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    for (e, y) in y.iter_mut().enumerate() {
        let q = (b[2 + e % 16] >> (4 * (e / 16))) & 0xF;
        *y = d * f32::from(IQ4NL_VALUES[usize::from(q)]);
    }
}

fn iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16(b, 0);
    let high = u16le(b, 2);
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
        let scale = (low | ((((high >> (2 * ib)) & 3) as u8) << 4)) as i8 - 32;
        let dl = d * f32::from(scale);
        for (e, y) in y.iter_mut().enumerate() {
            let q = (b[8 + ib * 16 + e % 16] >> (4 * (e / 16))) & 0xF;
            *y = dl * f32::from(IQ4NL_VALUES[usize::from(q)]);
        }
    }
}
