//! The rule taxonomy of `.zt` v2 (spec §13.1), with the outcomes and the writer's own refusals,
//! carried by the `.zt` layer's one error type, [`Error`](super::Error).

use core::fmt;

/// Every way a `.zt` file can be wrong (the 26 names of the reference `ztensor::Rule` enum), plus
/// the non-rejection outcomes [`Rule::Unsupported`] and [`Rule::NotFound`], [`Rule::Io`] for a
/// source (or sink) that failed, and the writer's refusals of a request ([`Rule::Canonical`],
/// [`Rule::Order`], [`Rule::Usage`], [`Rule::Existing`]). Legacy v1/v0 files are judged by the same
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    /// Not a rejection: the source failed to deliver bytes, or the sink to take them (the host's
    /// I/O error).
    Io,
    /// Writing: canonical form (§10) forbids the request (encodings, shards, sha256 digests, other
    /// alignments, append, unreferenced blobs).
    Canonical,
    /// Writing: canonical form places blobs as objects arrive, so object names must ascend.
    Order,
    /// Writing: the API was used out of order (streaming state, wrong chunk sizes).
    Usage,
    /// Writing: the file being appended to is not a `.zt` v2 file with a manifest.
    Existing,
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
            Rule::Canonical => "Canonical",
            Rule::Order => "Order",
            Rule::Usage => "Usage",
            Rule::Existing => "Existing",
        }
    }

    /// The outcomes and the writer's refusals, which are not among [`Rule::REJECTIONS`].
    pub const OTHERS: [Rule; 7] = [
        Rule::Unsupported,
        Rule::NotFound,
        Rule::Io,
        Rule::Canonical,
        Rule::Order,
        Rule::Usage,
        Rule::Existing,
    ];

    /// Parses a name returned by [`Rule::name`].
    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::REJECTIONS
            .iter()
            .chain(Rule::OTHERS.iter())
            .copied()
            .find(|r| r.name() == name)
    }

    /// True for the rules that mean "this file (or part, or write request) is invalid"; false for
    /// the outcomes [`Rule::Unsupported`], [`Rule::NotFound`] and [`Rule::Io`].
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
            Rule::Canonical => "canonical form forbids this; use non-canonical options to allow it",
            Rule::Order => "add objects in ascending bytewise name order, or use non-canonical options",
            Rule::Usage => "call the writer's methods in the documented order",
            Rule::Existing => "append only to a complete .zt v2 file",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in Rule::REJECTIONS.iter().chain(Rule::OTHERS.iter()) {
            assert_eq!(Rule::from_name(r.name()), Some(*r));
        }
        assert_eq!(Rule::REJECTIONS.len(), 26);
        assert!(!Rule::Unsupported.is_rejection());
    }
}
