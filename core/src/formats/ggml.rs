//! ggml tensor types (the element types of GGUF files) and block dequantization to f32.

/// A ggml type id, as stored in a GGUF tensor info (`GGML_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

/// `(id, name, elements per block, bytes per block)` of every ggml type GGUF files use.
/// Ids 4, 5, 31–33 and 36–38 were removed from ggml and are not listed.
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
];

impl GgmlType {
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
        if n % block != 0 {
            return None;
        }
        (n / block).checked_mul(size)
    }
}

/// Dequantizes stored blocks of type `ty` to f32 values.
pub fn dequantize(ty: GgmlType, _blocks: &[u8]) -> Result<alloc::vec::Vec<f32>, super::FormatError> {
    Err(super::FormatError::new(
        "gguf",
        super::ErrorKind::Unsupported,
        alloc::format!("dequantizing {} is not yet implemented", ty.name()),
    ))
}
