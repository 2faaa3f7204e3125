//! Tenso 0.24.0-compatible tensor packets.
//!
//! Byte layout: `docs/specs/tenso-wire.md`. tensorlane writes v4 headers, reads v3 and v4,
//! and produces tenso's exact bytes for every packet tenso can write (compressed bodies included,
//! with the default `std` feature). Where tenso 0.24.0 is wrong or unsafe, tensorlane does the safe
//! thing (spec §21):
//!
//! * compressed sub-packets inside bundles and sparse containers **decode** (tenso cannot read its
//!   own compressed bundles); their length comes from the entry's length prefix;
//! * decompression is bounded by the shape: the output never grows past `numel * itemsize`, a frame
//!   that declares another content size is refused before any work, and a cap
//!   ([`DecodeOptions::max_decompressed_bytes`]) bounds every decompression;
//! * nothing is allocated for a length the input merely declares: every length is checked against
//!   the bytes present first (and [`StreamDecoder`] buffers only bytes it has received);
//! * big-endian input is swapped on encode ([`crate::tensor::Tensor::from_bytes_in_order`]);
//! * bundle entries and sparse components of 4 GiB or more are refused on encode, naming the key;
//! * a negative per-channel axis is normalised on quantize, and dequantize checks the scales
//!   against the scheme;
//! * bool bytes and string payloads are never reinterpreted without validation.
//!
//! The XXH3 footer detects accidental corruption only: it covers the body, not the header, and it
//! is not a MAC. A receiver can demand it with [`DecodeOptions::require_integrity`].

mod decode;
mod encode;
mod error;
mod layout;
pub mod lz4;
mod packet;
mod quant;
mod stream;

pub use decode::{DecodeOptions, Decoded, decode, decode_with, verify};
pub use encode::{EncodeOptions, MAX_ALIGNMENT, Parts, encode, encode_into, encode_parts};
pub use error::{Error, ErrorKind, Result};
pub use layout::{Header, Measure, measure, parse_header};
pub use packet::{Bundle, Packet, QDType, QuantScheme, Quantized, Sparse, SparseFormat, Strings};
pub use quant::QuantizeParams;
pub use stream::{StreamDecoder, StreamLimits};

use crate::dtype::DType;

/// The four magic bytes every packet starts with: ASCII `TNSO`.
pub const MAGIC: [u8; 4] = *b"TNSO";
/// The header version tensorlane writes.
pub const VERSION: u8 = 4;
/// At most this many dimensions.
pub const MAX_NDIM: usize = 32;
/// At most this many elements in a dense or quantized tensor (exactly 10^9 is allowed).
pub const MAX_ELEMENTS: u64 = 1_000_000_000;
/// At most this many bundle entries (the count lives in one byte).
pub const MAX_BUNDLE_ENTRIES: usize = 255;
/// At most this many nested containers around a leaf.
pub const MAX_DEPTH: usize = 64;
/// The default body alignment, relative to the packet's first byte.
pub const DEFAULT_ALIGNMENT: u64 = 64;

/// Header flag bits.
pub mod flags {
    /// Body padded to 64 bytes.
    pub const ALIGNED: u16 = 0x0001;
    /// An XXH3-64 footer follows the body.
    pub const INTEGRITY: u16 = 0x0002;
    /// The dense body is an LZ4 frame.
    pub const COMPRESSION: u16 = 0x0004;
    /// Sparse COO container.
    pub const SPARSE_COO: u16 = 0x0008;
    /// Dict bundle; `ndim` holds the entry count.
    pub const BUNDLE: u16 = 0x0010;
    /// Sparse CSR container.
    pub const SPARSE_CSR: u16 = 0x0020;
    /// Sparse CSC container.
    pub const SPARSE_CSC: u16 = 0x0040;
    /// Custom alignment: a log2 exponent byte follows the shape (and quant metadata).
    pub const CUST_ALIGN: u16 = 0x0080;
    /// String tensor.
    pub const STRING: u16 = 0x0100;
    /// Direct ragged framing (never written).
    pub const RAGGED: u16 = 0x0200;
    /// GPU IPC reference (never written by tenso's Python layer).
    pub const GPU_IPC_REF: u16 = 0x0400;
}

/// The Tenso dtype code of a dense dtype.
pub const fn dtype_code(d: DType) -> u8 {
    match d {
        DType::F32 => 1,
        DType::I32 => 2,
        DType::F64 => 3,
        DType::I64 => 4,
        DType::U8 => 5,
        DType::U16 => 6,
        DType::Bool => 7,
        DType::F16 => 8,
        DType::I8 => 9,
        DType::I16 => 10,
        DType::U32 => 11,
        DType::U64 => 12,
        DType::C64 => 13,
        DType::C128 => 14,
        DType::BF16 => 15,
    }
}

/// The dense dtype of a Tenso dtype code (1..=15), or `None`.
pub const fn dtype_from_code(code: u8) -> Option<DType> {
    Some(match code {
        1 => DType::F32,
        2 => DType::I32,
        3 => DType::F64,
        4 => DType::I64,
        5 => DType::U8,
        6 => DType::U16,
        7 => DType::Bool,
        8 => DType::F16,
        9 => DType::I8,
        10 => DType::I16,
        11 => DType::U32,
        12 => DType::U64,
        13 => DType::C64,
        14 => DType::C128,
        15 => DType::BF16,
        _ => return None,
    })
}

/// Padding that brings `len` up to a multiple of `align` (a power of two).
pub(crate) fn pad_to(len: u64, align: u64) -> u64 {
    (align - len % align) % align
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(dtype_from_code(dtype_code(d)), Some(d));
        }
        assert_eq!(dtype_from_code(0), None);
        assert_eq!(dtype_from_code(16), None);
    }
}
