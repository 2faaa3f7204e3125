//! Why a write was refused: [`WriteRule`] and [`WriteError`].

use alloc::string::{String, ToString};
use core::fmt;

use super::sink::SinkError;

/// Which rule a refused write broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteRule {
    /// An object, part or attribute name breaks §5 (empty, > 1024 bytes, U+0000, not NFC when
    /// canonical), or repeats an existing name.
    Name,
    /// Rank > 64 or the element count overflows u64.
    Shape,
    /// The manifest would break the §4 schema (attributes not a map, a logical type on the wrong
    /// dtype, a malformed digest, ...).
    Schema,
    /// The object breaks its layout profile's metadata rules (§7).
    LayoutRule,
    /// A dense object's byte count does not match its shape and type.
    DenseSize,
    /// A shard name breaks §5, or a part names an unregistered shard.
    Shard,
    /// Canonical form forbids this (encodings, shards, sha256 digests, other alignments, append).
    Canonical,
    /// Canonical form places blobs as objects arrive, so names must ascend.
    Order,
    /// The API was used out of order (streaming state, wrong chunk sizes).
    Usage,
    /// The manifest would exceed 1 GiB.
    ManifestTooLarge,
    /// The file being appended to is not a `.zt` v2 file with a manifest.
    Existing,
    /// The sink failed.
    Io,
    /// A capability this build lacks.
    Unsupported,
}

/// A refused or failed write: which rule, where (object and part), and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError {
    /// The rule.
    pub rule: WriteRule,
    /// The object concerned, if any.
    pub object: Option<String>,
    /// The part concerned, if any.
    pub part: Option<String>,
    /// What happened and, where it helps, what to do about it.
    pub message: String,
}

impl WriteError {
    pub(super) fn new(rule: WriteRule, message: impl Into<String>) -> Self {
        WriteError {
            rule,
            object: None,
            part: None,
            message: message.into(),
        }
    }
    pub(super) fn at(mut self, object: &str) -> Self {
        if self.object.is_none() {
            self.object = Some(object.to_string());
        }
        self
    }
    pub(super) fn part(mut self, part: &str) -> Self {
        if self.part.is_none() {
            self.part = Some(part.to_string());
        }
        self
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ".zt write refused ({:?})", self.rule)?;
        if let Some(o) = &self.object {
            write!(f, " object {o:?}")?;
        }
        if let Some(p) = &self.part {
            write!(f, " part {p:?}")?;
        }
        write!(f, ": {}", self.message)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for WriteError {}

impl From<SinkError> for WriteError {
    fn from(e: SinkError) -> Self {
        WriteError::new(WriteRule::Io, e.0)
    }
}

pub(super) type Res<T> = core::result::Result<T, WriteError>;
