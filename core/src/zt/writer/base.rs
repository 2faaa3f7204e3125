//! The [`Writer`] itself: its state, creation and accessors.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::hash::Xxh3;

use crate::zt::cbor::Value;
use crate::zt::format::{ALIGNMENT as ALIGN_FLOOR, CANONICAL_ALIGNMENT as ALIGN_CANONICAL, MAGIC};

use super::digest::{DigestAlgo, Hasher};
use super::sink::Sink;
use super::spec::{ObjectSpec, Options, PartDecl};
use crate::zt::Error;
use crate::zt::rule::Rule;

/// A part of the object being streamed.
pub(super) struct StreamPart {
    pub(super) decl: PartDecl,
    pub(super) dtype: &'static str,
    pub(super) logical: Option<String>,
    /// Set once begun: (position before padding, blob offset).
    pub(super) start: Option<(u64, u64)>,
    pub(super) written: u64,
    pub(super) done: Option<(u64, String)>, // (offset, digest)
}

pub(super) struct Stream {
    pub(super) name: String,
    pub(super) spec: ObjectSpec,
    pub(super) parts: Vec<StreamPart>,
    pub(super) current: Option<usize>,
    pub(super) hasher: Option<Hasher>,
    pub(super) dedup_hasher: Option<Xxh3>,
}

/// Writes one `.zt` file into a [`Sink`]. See the [module docs](super).
pub struct Writer<S: Sink> {
    pub(super) sink: S,
    pub(super) opts: Options,
    pub(super) align: u64,
    pub(super) objects: BTreeMap<String, Value<'static>>,
    pub(super) shards: BTreeMap<String, (u64, String)>,
    pub(super) attributes: Option<Value<'static>>,
    /// (xxh3-64, length) → offsets of blobs written in this session.
    pub(super) dedup: BTreeMap<(u64, u64), Vec<u64>>,
    pub(super) last_object: Option<String>,
    pub(super) stream: Option<Stream>,
    pub(super) appending: bool,
    /// The xxh3-64 of the next part's bytes (address, length, hash), from [`Writer::add_prehashed`].
    pub(super) prehashed: Option<(usize, usize, u64)>,
}

impl<S: Sink> fmt::Debug for Writer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("options", &self.opts)
            .field("align", &self.align)
            .field("objects", &self.objects.len())
            .finish()
    }
}

impl<S: Sink> Writer<S> {
    /// Starts a new file in an empty `sink` (writes the magic).
    pub fn new(mut sink: S, opts: Options) -> crate::zt::Result<Self> {
        let align = Self::check_options(&opts)?;
        if sink.position() != 0 {
            return Err(Error::write(
                Rule::Usage,
                format!(
                    "a new file needs an empty sink, this one is at {}; use Writer::append to add to a file",
                    sink.position()
                ),
            ));
        }
        sink.write_all(&MAGIC)?;
        Ok(Writer {
            sink,
            opts,
            align,
            objects: BTreeMap::new(),
            shards: BTreeMap::new(),
            attributes: None,
            dedup: BTreeMap::new(),
            last_object: None,
            stream: None,
            appending: false,
            prehashed: None,
        })
    }

    pub(super) fn check_options(opts: &Options) -> crate::zt::Result<u64> {
        if opts.canonical {
            if let Some(a) = opts.alignment.filter(|&a| a != ALIGN_CANONICAL) {
                return Err(Error::write(
                    Rule::Canonical,
                    format!("canonical form places blobs at 65536, not {a}; use Options::non_canonical() to choose"),
                ));
            }
            if opts.digest != DigestAlgo::Xxh3 {
                return Err(Error::write(
                    Rule::Canonical,
                    "canonical form requires xxh3 part digests; use Options::non_canonical() for sha256",
                ));
            }
        }
        let a = opts.alignment.unwrap_or(ALIGN_CANONICAL);
        if !a.is_power_of_two() || a < ALIGN_FLOOR {
            return Err(Error::write(
                Rule::Usage,
                format!("alignment must be a power of two >= 4096, got {a}"),
            ));
        }
        Ok(a)
    }

    /// The alignment blobs are placed at.
    pub fn alignment(&self) -> u64 {
        self.align
    }

    /// The sink being written (read-only: its settings, never its bytes).
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Bytes written so far (the sink's position).
    pub fn position(&self) -> u64 {
        self.sink.position()
    }
}
