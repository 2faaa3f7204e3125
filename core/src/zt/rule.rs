//! The rule taxonomy of `.zt` v2 (spec §13.1) and the error type every `.zt` operation returns.

use alloc::string::String;
use core::fmt;

use super::cbor::{CborError, CborRule};
use crate::source::SourceError;

/// Every way a `.zt` file can be wrong (the 26 names of the reference `ztensor::Rule` enum), plus
/// the non-rejection outcomes [`Rule::Unsupported`] and [`Rule::NotFound`], and [`Rule::Io`] for a
/// source that failed to deliver bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Shorter than magic + footer (48 bytes).
    FileTooSmall,
    /// The first 8 bytes are not the magic.
    HeaderMagic,
    /// The last 8 bytes are not the magic.
    FooterMagic,
    /// Footer version not implemented (≠ 2).
    Version,
    /// Manifest outside the data region, or a data-shard footer that does not zero offset/hash.
    ManifestBounds,
    /// Declared manifest length > 1 GiB.
    ManifestTooLarge,
    /// The manifest bytes do not hash to the footer's value.
    ManifestHash,
    /// Not well-formed (or forbidden) CBOR.
    CborSyntax,
    /// Well-formed but not deterministic CBOR.
    CborDeterminism,
    /// A CBOR map repeats a key.
    CborDuplicateKey,
    /// CBOR nesting deeper than 32.
    CborDepth,
    /// Wrong shape of the manifest: missing field, wrong type, value out of range.
    Schema,
    /// An object, part or attribute name violates the naming rules.
    Name,
    /// Rank > 64 or the element product overflows u64.
    Shape,
    /// A blob (or the manifest) offset is not a multiple of 4096 or is below 4096.
    BlobAlignment,
    /// A blob runs past its file's data region.
    BlobBounds,
    /// Two blobs in one file partially overlap.
    BlobOverlap,
    /// A part names a shard that is not in the shard table.
    ShardRef,
    /// A shard name outside `[A-Za-z0-9._-]{1,64}` (or starting with `.`).
    ShardName,
    /// Object metadata violates its layout profile.
    LayoutRule,
    /// Data-level violation (CSR/COO data rules, bool bytes, f4 odd nibble).
    LayoutData,
    /// Dense decoded size ≠ the size function of the shape.
    DenseSize,
    /// Stored bytes violate the declared encoding profile.
    Encoding,
    /// A digest is malformed at verify time, or the bytes do not hash to it.
    Digest,
    /// A resolved shard does not match its size, frame or digest.
    ShardIdentity,
    /// Two sources merged into one catalog claim the same tensor name.
    NameCollision,
    /// Not a rejection: the file is valid but this reader lacks a capability (unknown encoding,
    /// unknown digest algorithm, unknown logical type or layout on decode, part not mappable).
    Unsupported,
    /// Not a rejection: no such object, part or shard.
    NotFound,
    /// Not a rejection: the source failed to deliver bytes (the host's I/O error).
    Io,
}

impl Rule {
    /// The 26 rule names of spec §13.1, in the spec's order.
    pub const REJECTIONS: [Rule; 26] = [
        Rule::FileTooSmall,
        Rule::HeaderMagic,
        Rule::FooterMagic,
        Rule::Version,
        Rule::ManifestBounds,
        Rule::ManifestTooLarge,
        Rule::ManifestHash,
        Rule::CborSyntax,
        Rule::CborDeterminism,
        Rule::CborDuplicateKey,
        Rule::CborDepth,
        Rule::Schema,
        Rule::Name,
        Rule::Shape,
        Rule::BlobAlignment,
        Rule::BlobBounds,
        Rule::BlobOverlap,
        Rule::ShardRef,
        Rule::ShardName,
        Rule::LayoutRule,
        Rule::LayoutData,
        Rule::DenseSize,
        Rule::Encoding,
        Rule::Digest,
        Rule::ShardIdentity,
        Rule::NameCollision,
    ];

    /// The exact name (`"FileTooSmall"`, `"CborDepth"`, `"Unsupported"`, `"NotFound"`, `"Io"`).
    pub const fn name(self) -> &'static str {
        match self {
            Rule::FileTooSmall => "FileTooSmall",
            Rule::HeaderMagic => "HeaderMagic",
            Rule::FooterMagic => "FooterMagic",
            Rule::Version => "Version",
            Rule::ManifestBounds => "ManifestBounds",
            Rule::ManifestTooLarge => "ManifestTooLarge",
            Rule::ManifestHash => "ManifestHash",
            Rule::CborSyntax => "CborSyntax",
            Rule::CborDeterminism => "CborDeterminism",
            Rule::CborDuplicateKey => "CborDuplicateKey",
            Rule::CborDepth => "CborDepth",
            Rule::Schema => "Schema",
            Rule::Name => "Name",
            Rule::Shape => "Shape",
            Rule::BlobAlignment => "BlobAlignment",
            Rule::BlobBounds => "BlobBounds",
            Rule::BlobOverlap => "BlobOverlap",
            Rule::ShardRef => "ShardRef",
            Rule::ShardName => "ShardName",
            Rule::LayoutRule => "LayoutRule",
            Rule::LayoutData => "LayoutData",
            Rule::DenseSize => "DenseSize",
            Rule::Encoding => "Encoding",
            Rule::Digest => "Digest",
            Rule::ShardIdentity => "ShardIdentity",
            Rule::NameCollision => "NameCollision",
            Rule::Unsupported => "Unsupported",
            Rule::NotFound => "NotFound",
            Rule::Io => "Io",
        }
    }

    /// Parses a name returned by [`Rule::name`].
    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::REJECTIONS
            .iter()
            .chain([Rule::Unsupported, Rule::NotFound, Rule::Io].iter())
            .copied()
            .find(|r| r.name() == name)
    }

    /// True for the 26 rules that mean "this file (or part) is invalid"; false for
    /// [`Rule::Unsupported`], [`Rule::NotFound`] and [`Rule::Io`].
    pub const fn is_rejection(self) -> bool {
        !matches!(self, Rule::Unsupported | Rule::NotFound | Rule::Io)
    }

    /// What a user can do about it, in one sentence.
    pub const fn hint(self) -> &'static str {
        match self {
            Rule::FileTooSmall | Rule::FooterMagic => {
                "the file is truncated or not a .zt v2 file; a crashed append leaves no footer at EOF, re-copy or re-write it"
            }
            Rule::HeaderMagic => {
                "this is not a .zt v2 file (v1 .zt files start with ZTEN1000 and need the legacy importer)"
            }
            Rule::Version => "the file was written by a newer .zt version; upgrade the reader",
            Rule::ManifestBounds | Rule::ManifestTooLarge | Rule::ManifestHash => {
                "the footer or manifest is damaged; re-download or re-write the file"
            }
            Rule::CborSyntax | Rule::CborDeterminism | Rule::CborDuplicateKey | Rule::CborDepth => {
                "the manifest is not deterministic CBOR; the writer is not conforming, re-write the file with a conforming writer"
            }
            Rule::Schema | Rule::Name | Rule::Shape | Rule::ShardName | Rule::ShardRef => {
                "the manifest does not follow the .zt v2 schema; fix the writer that produced it"
            }
            Rule::BlobAlignment | Rule::BlobBounds | Rule::BlobOverlap => {
                "a blob reference is damaged or the file was truncated; re-write the file"
            }
            Rule::LayoutRule | Rule::DenseSize => {
                "the object's metadata contradicts its layout profile; fix the writer"
            }
            Rule::LayoutData => {
                "the tensor's data breaks its layout or logical-type rules; the tensor content is corrupt"
            }
            Rule::Encoding => "the stored bytes are not a valid instance of their encoding; the part is corrupt",
            Rule::Digest => "the bytes do not match their recorded digest; the data is corrupt, re-download it",
            Rule::ShardIdentity => {
                "the file supplied for a shard is not the one the manifest names; supply the right shard file"
            }
            Rule::NameCollision => "rename one of the tensors or open the sources separately",
            Rule::Unsupported => {
                "the file is valid but needs a capability this reader lacks; use a structural (raw) API or a newer reader"
            }
            Rule::NotFound => "check the object and part names (list them first)",
            Rule::Io => "the source failed to deliver bytes; check the file or connection and retry",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<CborRule> for Rule {
    fn from(r: CborRule) -> Rule {
        match r {
            CborRule::Syntax => Rule::CborSyntax,
            CborRule::Determinism => Rule::CborDeterminism,
            CborRule::DuplicateKey => Rule::CborDuplicateKey,
            CborRule::Depth => Rule::CborDepth,
        }
    }
}

/// A `.zt` failure: which rule (or outcome), where in the file, which object/part/shard, and what
/// was found. `Display` adds a hint on what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZtError {
    /// The rule broken, or the outcome ([`Rule::Unsupported`], [`Rule::NotFound`], [`Rule::Io`]).
    pub rule: Rule,
    /// Absolute byte offset in the file the error is about, when one is known.
    pub offset: Option<u64>,
    /// The object concerned, if any.
    pub object: Option<String>,
    /// The part concerned, if any.
    pub part: Option<String>,
    /// The shard (file) concerned, if the error is about a shard rather than the containing file.
    pub shard: Option<String>,
    /// What was found.
    pub message: String,
}

impl ZtError {
    /// An error with no location.
    pub fn new(rule: Rule, message: impl Into<String>) -> ZtError {
        ZtError {
            rule,
            offset: None,
            object: None,
            part: None,
            shard: None,
            message: message.into(),
        }
    }

    /// Sets the byte offset.
    pub fn at(mut self, offset: u64) -> ZtError {
        self.offset = Some(offset);
        self
    }

    /// Sets the object name.
    pub fn object(mut self, name: &str) -> ZtError {
        self.object = Some(name.into());
        self
    }

    /// Sets the object and part names.
    pub fn part(mut self, object: &str, part: &str) -> ZtError {
        self.object = Some(object.into());
        self.part = Some(part.into());
        self
    }

    /// Sets the shard name.
    pub fn shard(mut self, name: &str) -> ZtError {
        self.shard = Some(name.into());
        self
    }

    /// Wraps a CBOR error of the manifest that starts at `manifest_offset`.
    pub fn from_cbor(e: CborError, manifest_offset: u64) -> ZtError {
        ZtError::new(e.rule.into(), alloc::format!("manifest: {}", e.message))
            .at(manifest_offset.saturating_add(e.offset as u64))
    }

    /// Wraps a source failure (an out-of-bounds read is reported as `BlobBounds`).
    pub fn from_source(e: SourceError) -> ZtError {
        match e {
            SourceError::OutOfBounds { offset, .. } => ZtError::new(Rule::BlobBounds, alloc::format!("{e}")).at(offset),
            SourceError::Io(_) => ZtError::new(Rule::Io, alloc::format!("{e}")),
        }
    }
}

impl fmt::Display for ZtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule.name(), self.message)?;
        let mut sep = " (";
        if let Some(s) = &self.shard {
            write!(f, "{sep}shard {s:?}")?;
            sep = ", ";
        }
        match (&self.object, &self.part) {
            (Some(o), Some(p)) => {
                write!(f, "{sep}object {o:?}, part {p:?}")?;
                sep = ", ";
            }
            (Some(o), None) => {
                write!(f, "{sep}object {o:?}")?;
                sep = ", ";
            }
            _ => {}
        }
        if let Some(o) = self.offset {
            write!(f, "{sep}at byte {o}")?;
            sep = ", ";
        }
        if sep == ", " {
            f.write_str(")")?;
        }
        write!(f, "; {}", self.rule.hint())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ZtError {}

/// Shorthand for results of `.zt` operations.
pub type Result<T, E = ZtError> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in Rule::REJECTIONS
            .iter()
            .chain([Rule::Unsupported, Rule::NotFound, Rule::Io].iter())
        {
            assert_eq!(Rule::from_name(r.name()), Some(*r));
        }
        assert_eq!(Rule::REJECTIONS.len(), 26);
        assert!(!Rule::Unsupported.is_rejection());
    }

    #[test]
    fn display_says_what_where_and_what_to_do() {
        let e = ZtError::new(Rule::BlobBounds, "blob [4096, 100] runs past the data region")
            .part("w", "data")
            .at(4096);
        let s = alloc::format!("{e}");
        assert!(s.starts_with("BlobBounds: blob [4096, 100]"), "{s}");
        assert!(s.contains("object \"w\", part \"data\", at byte 4096)"), "{s}");
        assert!(s.contains("; a blob reference"), "{s}");
    }
}
