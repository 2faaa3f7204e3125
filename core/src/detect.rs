//! Which format a file is in, from its first bytes (never from its name).

/// A file format tensorlane can recognise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// Tenso packets (`TNSO`), one or several back to back.
    Tenso,
    /// `.zt` v2 (`\x89ZT2\r\n\x1a\n`).
    Zt,
    /// Legacy `.zt` v1.2 (`ZTEN1000`).
    ZtV1,
    /// Legacy `.zt` v0.1 (`ZTEN0001`).
    ZtV0,
}

impl Format {
    /// A short lowercase name: `"tenso"`, `"zt"`, `"zt-v1"`, `"zt-v0"`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tenso => "tenso",
            Format::Zt => "zt",
            Format::ZtV1 => "zt-v1",
            Format::ZtV0 => "zt-v0",
        }
    }
}

/// The `.zt` v2 magic (PNG style).
pub use crate::zt::format::MAGIC as ZT_MAGIC;

/// Recognises a format from the first bytes of a file (16 are plenty).
pub fn detect(head: &[u8]) -> Option<Format> {
    if head.starts_with(&ZT_MAGIC) {
        Some(Format::Zt)
    } else if head.starts_with(b"ZTEN1000") {
        Some(Format::ZtV1)
    } else if head.starts_with(b"ZTEN0001") {
        Some(Format::ZtV0)
    } else if head.starts_with(&crate::wire::MAGIC) {
        Some(Format::Tenso)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics() {
        assert_eq!(detect(b"\x89ZT2\r\n\x1a\n...."), Some(Format::Zt));
        assert_eq!(detect(b"ZTEN1000"), Some(Format::ZtV1));
        assert_eq!(detect(b"ZTEN0001xx"), Some(Format::ZtV0));
        assert_eq!(detect(b"TNSO\x04"), Some(Format::Tenso));
        assert_eq!(detect(b"PK\x03\x04"), None);
        assert_eq!(detect(b""), None);
    }
}
