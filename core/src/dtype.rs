//! The storage dtypes tensorlane understands, with their NumPy names and element sizes.
//!
//! One table serves every format: the Tenso wire codes live in [`crate::wire`], other formats map
//! their own codes onto the same [`DType`].

use alloc::vec::Vec;

/// A storage dtype of a dense tensor. Names follow NumPy (`float32`, `bfloat16`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// IEEE-754 binary32.
    F32,
    /// IEEE-754 binary64.
    F64,
    /// IEEE-754 binary16.
    F16,
    /// bfloat16: the top 16 bits of a binary32.
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// One byte per element; 0 is false. Other byte values are kept as they are (see
    /// [`crate::tensor::Tensor::bool_values`] for a validated read).
    Bool,
    /// Two interleaved binary32 values (re, im).
    C64,
    /// Two interleaved binary64 values (re, im).
    C128,
}

/// What family a dtype belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Floating point (including f16 and bf16).
    Float,
    /// Signed integer.
    Int,
    /// Unsigned integer.
    UInt,
    /// Boolean stored as one byte.
    Bool,
    /// Complex floating point.
    Complex,
}

impl DType {
    /// Every dtype, in a stable order.
    pub const ALL: [DType; 15] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::C64,
        DType::C128,
    ];

    /// The NumPy name (`"float32"`, `"bfloat16"`, `"complex64"`, `"bool"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::Bool => "bool",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    /// Parses a NumPy name, as returned by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub const fn itemsize(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// The size of one scalar lane for byte swapping (half the item size for complex types).
    pub const fn lane_size(self) -> usize {
        match self {
            DType::C64 => 4,
            DType::C128 => 8,
            other => other.itemsize(),
        }
    }

    /// The dtype's family.
    pub const fn kind(self) -> Kind {
        match self {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Kind::Float,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => Kind::Int,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => Kind::UInt,
            DType::Bool => Kind::Bool,
            DType::C64 | DType::C128 => Kind::Complex,
        }
    }
}

impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Widens little-endian float16 bytes to f32 values (via the `half` crate).
pub fn f16_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect()
}

/// Widens little-endian bfloat16 bytes to f32 values (exact: bf16 is a truncated f32).
pub fn bf16_le_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(2)
        .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float128"), None);
    }

    #[test]
    fn widen_half_types() {
        assert_eq!(f16_le_to_f32(&[0x00, 0x3c, 0x00, 0xc0]), [1.0, -2.0]);
        assert_eq!(bf16_le_to_f32(&[0x80, 0x3f]), [1.0]);
    }
}
