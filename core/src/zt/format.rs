//! L0 of `.zt` v2: magic, the 40-byte footer, alignment and limits; plus the name, digest and dtype
//! vocabularies the manifest uses (spec §2, §5, §6).

use crate::dtype::DType;

use super::rule::Rule;
use super::{Error, Result};

/// The 8-byte magic at both ends of a v2 file: `\x89ZT2\r\n\x1a\n`.
pub const MAGIC: [u8; 8] = [0x89, b'Z', b'T', b'2', 0x0D, 0x0A, 0x1A, 0x0A];
/// Footer length in bytes.
pub const FOOTER_LEN: u64 = 40;
/// Smallest valid file: magic + footer (a bare data shard).
pub const MIN_FILE_SIZE: u64 = 48;
/// The footer `version` this reader implements.
pub const VERSION: u32 = 2;
/// Every blob offset is a multiple of this and at least this.
pub const ALIGNMENT: u64 = 4096;
/// Canonical (and default) blob placement.
pub const CANONICAL_ALIGNMENT: u64 = 65536;
/// Largest manifest accepted (exactly 2^30 is allowed).
pub const MAX_MANIFEST_LEN: u64 = 1 << 30;
/// Largest shape rank.
pub const MAX_RANK: usize = 64;
/// Longest object, part or attribute name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;
/// Longest shard name, in bytes.
pub const MAX_SHARD_NAME_LEN: usize = 64;
/// The one encoding profile this crate knows.
pub const ENCODING_ZSTD_SEEKABLE: &str = "zt.zstd-seekable/1";

/// The 40-byte footer at EOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Absolute offset of the manifest blob (0 for a data shard).
    pub manifest_offset: u64,
    /// Manifest length (0 for a data shard).
    pub manifest_length: u64,
    /// XXH3-64 (seed 0) of the manifest bytes (0 for a data shard).
    pub manifest_hash: u64,
    /// Format version (2).
    pub version: u32,
    /// Written 0, ignored on read.
    pub reserved: u32,
}

impl Footer {
    /// Parses the 40 footer bytes, checking the trailing magic (`FooterMagic`); the version is
    /// left to the caller (the validator checks it next, in spec order).
    pub fn parse(bytes: &[u8; 40]) -> Result<Footer> {
        if bytes[32..40] != MAGIC {
            return Err(Error::new(
                Rule::FooterMagic,
                "the last 8 bytes are not the .zt v2 magic",
            ));
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let u32_at = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[i..i + 4]);
            u32::from_le_bytes(b)
        };
        Ok(Footer {
            manifest_offset: u64_at(0),
            manifest_length: u64_at(8),
            manifest_hash: u64_at(16),
            version: u32_at(24),
            reserved: u32_at(28),
        })
    }

    /// The 40 footer bytes.
    pub fn to_bytes(&self) -> [u8; 40] {
        let mut out = [0u8; 40];
        out[0..8].copy_from_slice(&self.manifest_offset.to_le_bytes());
        out[8..16].copy_from_slice(&self.manifest_length.to_le_bytes());
        out[16..24].copy_from_slice(&self.manifest_hash.to_le_bytes());
        out[24..28].copy_from_slice(&self.version.to_le_bytes());
        out[28..32].copy_from_slice(&self.reserved.to_le_bytes());
        out[32..40].copy_from_slice(&MAGIC);
        out
    }
}

/// XXH3-64 with seed 0, as the footer's `manifest_hash` and `xxh3:` digests use it.
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    crate::hash::xxh3_64(bytes)
}

/// True when `offset` is a valid blob offset (a multiple of 4096, at least 4096).
pub const fn offset_aligned(offset: u64) -> bool {
    offset >= ALIGNMENT && offset.is_multiple_of(ALIGNMENT)
}

/// Checks an object, part or top-level attribute name (§5): non-empty, ≤ 1024 bytes, no U+0000.
pub fn check_name(name: &str, what: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::new(Rule::Name, alloc::format!("{what} name is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::new(
            Rule::Name,
            alloc::format!("{what} name is {} bytes long (at most {MAX_NAME_LEN})", name.len()),
        ));
    }
    if name.contains('\0') {
        return Err(Error::new(
            Rule::Name,
            alloc::format!("{what} name {name:?} contains U+0000"),
        ));
    }
    Ok(())
}

/// Checks a shard name (§5): 1–64 bytes of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn check_shard_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SHARD_NAME_LEN
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            Rule::ShardName,
            alloc::format!("shard name {name:?} is not 1-64 bytes of [A-Za-z0-9._-] without a leading '.'"),
        ))
    }
}

/// Splits a digest `"<algo>:<hex>"` after checking its syntax (§4): `algo` is `[a-z0-9]+`, hex is
/// `[0-9a-f]+`. A malformed digest is a `Schema` error.
pub fn parse_digest(digest: &str) -> Result<(&str, &str)> {
    let bad = || {
        Error::new(
            Rule::Schema,
            alloc::format!("digest {digest:?} is not \"<algo>:<lowercase hex>\""),
        )
    };
    let (algo, hex) = digest.split_once(':').ok_or_else(bad)?;
    if algo.is_empty() || !algo.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        return Err(bad());
    }
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(bad());
    }
    Ok((algo, hex))
}

/// The 12 storage dtypes of §6.1 by their `.zt` names (`"f32"`, `"bf16"`, `"u8"`, ...).
pub fn dtype_from_zt(name: &str) -> Option<DType> {
    Some(match name {
        "f64" => DType::F64,
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "i64" => DType::I64,
        "i32" => DType::I32,
        "i16" => DType::I16,
        "i8" => DType::I8,
        "u64" => DType::U64,
        "u32" => DType::U32,
        "u16" => DType::U16,
        "u8" => DType::U8,
        _ => return None,
    })
}

/// The `.zt` name of a storage dtype, or `None` for dtypes `.zt` does not store (bool, complex:
/// those are logical types over u8 / f32 / f64).
pub fn dtype_zt_name(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F64 => "f64",
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::I16 => "i16",
        DType::I8 => "i8",
        DType::U64 => "u64",
        DType::U32 => "u32",
        DType::U16 => "u16",
        DType::U8 => "u8",
        _ => return None,
    })
}

/// A registered logical type (§6.2, Appendix A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogicalType {
    /// `bool` over u8; bytes 0 or 1.
    Bool,
    /// `f8_e4m3fn` (OCP/NVIDIA FP8) over u8.
    F8E4M3Fn,
    /// `f8_e5m2` (OCP FP8) over u8.
    F8E5M2,
    /// `f8_e4m3fnuz` (AMD FP8) over u8.
    F8E4M3Fnuz,
    /// `f8_e5m2fnuz` (AMD FP8) over u8.
    F8E5M2Fnuz,
    /// `f8_e8m0` (OCP MX scale exponent) over u8.
    F8E8M0,
    /// `f4_e2m1` (OCP MXFP4 element) over u8, two per byte, low nibble first.
    F4E2M1,
    /// `complex64` over f32 (interleaved re, im).
    Complex64,
    /// `complex128` over f64 (interleaved re, im).
    Complex128,
}

impl LogicalType {
    /// Every registered logical type.
    pub const ALL: [LogicalType; 9] = [
        LogicalType::Bool,
        LogicalType::F8E4M3Fn,
        LogicalType::F8E5M2,
        LogicalType::F8E4M3Fnuz,
        LogicalType::F8E5M2Fnuz,
        LogicalType::F8E8M0,
        LogicalType::F4E2M1,
        LogicalType::Complex64,
        LogicalType::Complex128,
    ];

    /// The registry id (`"bool"`, `"f4_e2m1"`, `"complex64"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            LogicalType::Bool => "bool",
            LogicalType::F8E4M3Fn => "f8_e4m3fn",
            LogicalType::F8E5M2 => "f8_e5m2",
            LogicalType::F8E4M3Fnuz => "f8_e4m3fnuz",
            LogicalType::F8E5M2Fnuz => "f8_e5m2fnuz",
            LogicalType::F8E8M0 => "f8_e8m0",
            LogicalType::F4E2M1 => "f4_e2m1",
            LogicalType::Complex64 => "complex64",
            LogicalType::Complex128 => "complex128",
        }
    }

    /// Looks up a registry id; `None` for an unknown (structural) logical type.
    pub fn from_name(name: &str) -> Option<LogicalType> {
        LogicalType::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// The storage dtype this type pins, in every layout.
    pub const fn dtype(self) -> DType {
        match self {
            LogicalType::Complex64 => DType::F32,
            LogicalType::Complex128 => DType::F64,
            _ => DType::U8,
        }
    }

    /// Decoded bytes for `n` logical elements (`None` on overflow).
    pub fn size(self, n: u64) -> Option<u64> {
        match self {
            LogicalType::F4E2M1 => Some(n / 2 + n % 2),
            LogicalType::Complex64 => n.checked_mul(8),
            LogicalType::Complex128 => n.checked_mul(16),
            _ => Some(n),
        }
    }
}

/// The type of a part's elements: its logical type when registered, else its storage dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// A plain storage dtype (no `type` field).
    Plain(DType),
    /// A registered logical type.
    Logical(LogicalType),
    /// An unknown logical type: structural only, no size function.
    Unknown,
}

impl ElementType {
    /// Decoded bytes for `n` elements: `None` for an unknown logical type or on overflow.
    pub fn size(self, n: u64) -> Option<u64> {
        match self {
            ElementType::Plain(d) => n.checked_mul(d.itemsize() as u64),
            ElementType::Logical(t) => t.size(n),
            ElementType::Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip() {
        let f = Footer {
            manifest_offset: 4096,
            manifest_length: 7,
            manifest_hash: 9,
            version: 2,
            reserved: 0,
        };
        assert_eq!(Footer::parse(&f.to_bytes()).unwrap(), f);
    }

    #[test]
    fn names() {
        assert!(check_name("a", "object").is_ok());
        assert_eq!(check_name("", "object").unwrap_err().rule, Rule::Name);
        assert_eq!(check_name("a\0", "object").unwrap_err().rule, Rule::Name);
        assert!(check_name(&"x".repeat(1024), "object").is_ok());
        assert!(check_name(&"x".repeat(1025), "object").is_err());
        for bad in ["", ".a", "a/b", "../x", "a b"] {
            assert_eq!(check_shard_name(bad).unwrap_err().rule, Rule::ShardName, "{bad}");
        }
        assert!(check_shard_name(&"a".repeat(64)).is_ok());
        assert!(check_shard_name(&"a".repeat(65)).is_err());
        assert!(check_shard_name("00001").is_ok());
    }

    #[test]
    fn digests() {
        assert_eq!(parse_digest("xxh3:00ff").unwrap(), ("xxh3", "00ff"));
        for bad in ["xxh3", "xxh3:", ":00", "XXH3:00", "xxh3:00FF", "sha-256:00"] {
            assert_eq!(parse_digest(bad).unwrap_err().rule, Rule::Schema, "{bad}");
        }
    }
}
