//! The wire layer's one error type.

use alloc::string::String;
use core::fmt;

/// What was wrong with a packet (or with a request to encode one).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The buffer ends before a field the packet declares (tenso: `Packet too short`).
    TooShort {
        /// Bytes needed from the start of the buffer.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// The first four bytes are not `TNSO` (tenso: `Invalid tenso packet`).
    BadMagic([u8; 4]),
    /// Version other than 3 or 4 (tenso: `Unsupported protocol version: N`).
    UnsupportedVersion(u8),
    /// A dense dtype code that has no fixed element size (tenso: `Unsupported or unknown dtype code: N`).
    UnknownDType(u8),
    /// More than 32 dimensions (tenso: `Packet exceeds maximum dimensions`).
    TooManyDims(usize),
    /// More than 10^9 elements, or an element count that overflows (tenso: `Packet exceeds maximum elements`).
    TooManyElements,
    /// The XXH3 footer does not match (tenso: `Integrity check failed: XXH3 mismatch`).
    IntegrityMismatch {
        /// Footer value on the wire.
        stored: u64,
        /// Hash of the bytes received.
        computed: u64,
    },
    /// The receiver requires integrity footers and this packet has none.
    IntegrityRequired,
    /// The LZ4 frame is malformed (tenso: `LZ4 frame decompression failed`).
    Lz4(String),
    /// The decompressed size differs from what the shape declares.
    DecompressedSize {
        /// Bytes the shape declares.
        expected: u64,
        /// Bytes the frame produced (or declares), at least.
        actual: u64,
    },
    /// Nesting deeper than 64 containers (tenso: `Malformed tenso packet`).
    TooDeep,
    /// A custom alignment exponent of 64 or more (tenso: `Malformed tenso packet`).
    BadAlignExponent(u8),
    /// String offsets are not 0-based, are decreasing, or run past the payload.
    BadStringOffsets(String),
    /// A bundle key is not valid UTF-8 (tenso misreports this as "too many entries").
    InvalidKey,
    /// A duplicate bundle key, refused because strict keys were requested.
    DuplicateKey(String),
    /// A packet kind tensorlane does not decode (GPU IPC reference, RAGGED, BYTES, legacy v2).
    Unsupported(String),
    /// A sparse container whose components are inconsistent.
    Sparse(String),
    /// Quantization metadata that cannot describe the tensor.
    Quant(String),
    /// Bytes after the packet, refused because trailing bytes were disallowed.
    TrailingBytes(u64),
    /// A size above a configured limit (decompression cap, stream buffer bound, ...).
    LimitExceeded {
        /// What was too large.
        what: &'static str,
        /// The declared or required size.
        size: u64,
        /// The limit in force.
        limit: u64,
    },
    /// An encode request the wire format cannot represent.
    Encode(String),
}

/// A wire error: what was wrong, at which byte offset of the buffer given to the decoder, and
/// inside which bundle entry or sparse component.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Error {
    kind: ErrorKind,
    offset: u64,
    path: String,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, offset: usize) -> Self {
        Error {
            kind,
            offset: offset as u64,
            path: String::new(),
        }
    }

    pub(crate) fn encode(msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::Encode(msg.into()), 0)
    }

    /// Prefixes the path with a bundle key or component name (used while unwinding).
    pub(crate) fn within(mut self, segment: &str) -> Self {
        if self.path.is_empty() {
            self.path = String::from(segment);
        } else {
            let mut p = String::from(segment);
            p.push('/');
            p.push_str(&self.path);
            self.path = p;
        }
        self
    }

    pub(crate) fn shifted(mut self, by: impl Into<u64>) -> Self {
        self.offset += by.into();
        self
    }

    /// What was wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// Byte offset, from the start of the buffer that was decoded, of the field at fault.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bundle keys and sparse component names leading to the fault (`"model/layer0/data"`);
    /// empty at top level.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The text tenso 0.24.0 raises for the same fault, where there is one.
    pub fn tenso_message(&self) -> Option<String> {
        use alloc::format;
        Some(match &self.kind {
            ErrorKind::TooShort { .. } => "Packet too short".into(),
            ErrorKind::BadMagic(_) => "Invalid tenso packet".into(),
            ErrorKind::UnsupportedVersion(v) => format!("Unsupported protocol version: {v}"),
            ErrorKind::UnknownDType(c) => format!("Unsupported or unknown dtype code: {c}"),
            ErrorKind::TooManyDims(_) => "Packet exceeds maximum dimensions".into(),
            ErrorKind::TooManyElements => "Packet exceeds maximum elements".into(),
            ErrorKind::IntegrityMismatch { .. } => "Integrity check failed: XXH3 mismatch".into(),
            ErrorKind::Lz4(_) => "LZ4 frame decompression failed".into(),
            ErrorKind::TooDeep | ErrorKind::BadAlignExponent(_) | ErrorKind::BadStringOffsets(_) => {
                "Malformed tenso packet".into()
            }
            _ => return None,
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match &self.kind {
            TooShort { needed, available } => write!(
                f,
                "packet too short: needs {needed} bytes, buffer has {available}; the packet was truncated, or its length fields are wrong"
            ),
            BadMagic(m) => write!(
                f,
                "not a tenso packet: magic is {:02x} {:02x} {:02x} {:02x}, expected 54 4e 53 4f (\"TNSO\")",
                m[0], m[1], m[2], m[3]
            ),
            UnsupportedVersion(2) => f.write_str(
                "unsupported protocol version 2 (tenso 0.10.x); tenso 0.24 refuses it too; decode with DecodeOptions::allow_v2 to read it with the v3 rules",
            ),
            UnsupportedVersion(v) => write!(f, "unsupported protocol version {v}; tensorlane reads versions 3 and 4"),
            UnknownDType(c) => write!(
                f,
                "unsupported or unknown dtype code {c} for a dense tensor; codes 1..=15 are dense dtypes"
            ),
            TooManyDims(n) => write!(f, "packet declares {n} dimensions; the format allows at most 32"),
            TooManyElements => f.write_str(
                "packet declares more than 1000000000 elements (or the product overflows); the format allows at most 10^9",
            ),
            IntegrityMismatch { stored, computed } => write!(
                f,
                "integrity check failed: footer says XXH3 {stored:#018x}, body hashes to {computed:#018x}; the bytes were corrupted in transit"
            ),
            IntegrityRequired => f.write_str(
                "packet carries no integrity footer, and this receiver requires one; have the sender enable integrity",
            ),
            Lz4(why) => write!(f, "LZ4 frame decompression failed: {why}"),
            DecompressedSize { expected, actual } => write!(
                f,
                "compressed body decodes to {actual} bytes (at least) but the shape declares {expected}; the packet is inconsistent"
            ),
            TooDeep => f.write_str("containers nested deeper than 64 levels"),
            BadAlignExponent(e) => write!(f, "custom alignment exponent {e} is out of range (must be below 64)"),
            BadStringOffsets(why) => write!(f, "malformed string tensor: {why}"),
            InvalidKey => f.write_str("bundle key is not valid UTF-8"),
            DuplicateKey(k) => write!(f, "duplicate bundle key {k:?} (strict keys requested)"),
            Unsupported(what) => write!(f, "unsupported packet kind: {what}"),
            Sparse(why) => write!(f, "inconsistent sparse tensor: {why}"),
            Quant(why) => write!(f, "invalid quantized tensor: {why}"),
            TrailingBytes(n) => write!(
                f,
                "{n} bytes follow the packet, and trailing bytes were disallowed; pass exactly one packet"
            ),
            LimitExceeded { what, size, limit } => write!(
                f,
                "{what} of {size} bytes exceeds the limit of {limit} (DecodeOptions::max_decompressed_bytes; CLI: \
                 --max-tensor-bytes); raise the limit if the sender is trusted"
            ),
            Encode(why) => write!(f, "cannot encode: {why}"),
        }?;
        if !matches!(self.kind, Encode(_)) {
            write!(f, " (at byte {}", self.offset)?;
            if !self.path.is_empty() {
                write!(f, ", in {:?}", self.path)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Result alias for the wire layer.
pub type Result<T, E = Error> = core::result::Result<T, E>;
