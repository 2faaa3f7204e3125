//! The one error type of the `.zt` layer: reading `.zt` v2 files (and their CBOR manifests and
//! encoded parts), reading legacy v1/v0 files, and writing.

use alloc::string::{String, ToString};
use core::fmt;

use super::rule::Rule;
use crate::source::SourceError;

/// What the failed operation was doing: it decides how the error reads and which hint it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Reading or verifying a `.zt` v2 file, its manifest CBOR or an encoded part.
    Read,
    /// Reading a legacy `.zt` v1/v0 file.
    ReadLegacy,
    /// Writing a `.zt` file: the [`writer`](super::writer) refused a request, or its sink failed.
    Write,
}

/// A `.zt` failure: which rule (or outcome) was broken, by which operation, where in the file
/// (byte offset), which object/part/shard, and what was found. `Display` says what to do.
///
/// Offsets are absolute file offsets, except for errors of the stand-alone decoders
/// ([`cbor::decode`](super::cbor::decode): within the CBOR input; [`seekable`](super::seekable):
/// within the stored bytes of the part), which the readers shift to the file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Error {
    /// The rule broken, or the outcome ([`Rule::Unsupported`], [`Rule::NotFound`], [`Rule::Io`]).
    pub rule: Rule,
    /// What the failed operation was doing.
    pub op: Op,
    /// Byte offset the error is about, when one is known.
    pub offset: Option<u64>,
    /// The object concerned, if any.
    pub object: Option<String>,
    /// The part (legacy: component) concerned, if any.
    pub part: Option<String>,
    /// The shard (file) concerned, if the error is about a shard rather than the containing file.
    pub shard: Option<String>,
    /// What was found (or refused) and, where it helps, what to do about it.
    pub message: String,
}

impl Error {
    /// A reading error with no location.
    pub fn new(rule: Rule, message: impl Into<String>) -> Error {
        Error {
            rule,
            op: Op::Read,
            offset: None,
            object: None,
            part: None,
            shard: None,
            message: message.into(),
        }
    }

    /// A legacy-format reading error, at `offset` when one applies.
    pub fn legacy(rule: Rule, offset: Option<u64>, message: impl Into<String>) -> Error {
        Error {
            op: Op::ReadLegacy,
            offset,
            ..Error::new(rule, message)
        }
    }

    /// A refused write.
    pub fn write(rule: Rule, message: impl Into<String>) -> Error {
        Error {
            op: Op::Write,
            ..Error::new(rule, message)
        }
    }

    /// A [`Sink`](super::writer::Sink) that failed to take, give back or drop bytes: what a sink
    /// implementation returns ([`Rule::Io`] while writing).
    pub fn sink(message: impl Into<String>) -> Error {
        Error::write(Rule::Io, message)
    }

    /// Sets the byte offset.
    pub fn at(mut self, offset: u64) -> Error {
        self.offset = Some(offset);
        self
    }

    /// Moves the byte offset by `by` (an offset within a manifest or a part becomes a file
    /// offset).
    pub fn shifted(mut self, by: u64) -> Error {
        self.offset = self.offset.map(|o| o.saturating_add(by));
        self
    }

    /// Sets the object name.
    pub fn object(mut self, name: &str) -> Error {
        self.object = Some(name.into());
        self
    }

    /// Sets the object and part names.
    pub fn part(mut self, object: &str, part: &str) -> Error {
        self.object = Some(object.into());
        self.part = Some(part.into());
        self
    }

    /// Sets the shard name.
    pub fn shard(mut self, name: &str) -> Error {
        self.shard = Some(name.into());
        self
    }

    /// Sets the object name unless one is set already (an error unwinding through an object).
    pub fn in_object(mut self, name: &str) -> Error {
        if self.object.is_none() {
            self.object = Some(name.to_string());
        }
        self
    }

    /// Sets the part name unless one is set already.
    pub fn in_part(mut self, name: &str) -> Error {
        if self.part.is_none() {
            self.part = Some(name.to_string());
        }
        self
    }

    /// A CBOR error of the manifest that starts at `manifest_offset`: its offset (within the
    /// CBOR) becomes a file offset and the message says it is the manifest's.
    pub fn from_cbor(e: Error, manifest_offset: u64) -> Error {
        let offset = manifest_offset.saturating_add(e.offset.unwrap_or(0));
        Error {
            message: alloc::format!("manifest: {}", e.message),
            ..e.at(offset)
        }
    }

    /// Wraps a source failure (an out-of-bounds read is reported as `BlobBounds`).
    pub fn from_source(e: SourceError) -> Error {
        match e {
            SourceError::OutOfBounds { offset, .. } => Error::new(Rule::BlobBounds, alloc::format!("{e}")).at(offset),
            SourceError::Io(_) => Error::new(Rule::Io, alloc::format!("{e}")),
        }
    }

    /// True when the file (or part, or request) is invalid; false for the outcomes
    /// [`Rule::Unsupported`], [`Rule::NotFound`] and [`Rule::Io`] (see [`Rule::is_rejection`]).
    pub fn is_rejection(&self) -> bool {
        self.rule.is_rejection()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Op::Read => {
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
            Op::ReadLegacy => {
                write!(f, "legacy .zt {}: {}", self.rule.name(), self.message)?;
                if let Some(o) = self.offset {
                    write!(f, " (at byte {o})")?;
                }
                Ok(())
            }
            Op::Write => {
                write!(f, ".zt write refused ({})", self.rule.name())?;
                if let Some(o) = &self.object {
                    write!(f, " object {o:?}")?;
                }
                if let Some(p) = &self.part {
                    write!(f, " part {p:?}")?;
                }
                write!(f, ": {}", self.message)
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Shorthand for results of `.zt` operations.
pub type Result<T, E = Error> = core::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_says_what_where_and_what_to_do() {
        let e = Error::new(Rule::BlobBounds, "blob [4096, 100] runs past the data region")
            .part("w", "data")
            .at(4096);
        let s = alloc::format!("{e}");
        assert!(s.starts_with("BlobBounds: blob [4096, 100]"), "{s}");
        assert!(s.contains("object \"w\", part \"data\", at byte 4096)"), "{s}");
        assert!(s.contains("; a blob reference"), "{s}");
    }

    #[test]
    fn each_operation_reads_as_itself() {
        let e = Error::legacy(Rule::Schema, Some(12), "no objects map");
        assert_eq!(alloc::format!("{e}"), "legacy .zt Schema: no objects map (at byte 12)");
        let e = Error::write(Rule::Order, "b before a")
            .in_object("a")
            .in_object("ignored");
        assert_eq!(
            alloc::format!("{e}"),
            ".zt write refused (Order) object \"a\": b before a"
        );
        let e = Error::sink("disk full");
        assert_eq!((e.rule, e.op), (Rule::Io, Op::Write));
    }

    #[test]
    fn cbor_offsets_become_file_offsets() {
        let e = Error::new(Rule::CborSyntax, "truncated").at(5);
        let e = Error::from_cbor(e, 1000);
        assert_eq!(e.offset, Some(1005));
        assert_eq!(e.message, "manifest: truncated");
    }
}
