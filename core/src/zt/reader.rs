//! [`Reader`]: a validated `.zt` v2 file over any [`ReadAt`] source.
//!
//! Opening validates the image (spec §13) and reads only the magic, the footer and the manifest.
//! Part bytes are read on demand: [`Reader::view`] borrows them (raw local parts of an in-memory
//! source; never a copy), [`Reader::read`] borrows or returns an owned, decoded copy.
//!
//! Shards are resolved by the caller (names carry no location): supply them with
//! [`Reader::with_shard`] / [`Reader::with_shards`]; each is checked for its exact size and a valid
//! container frame (`ShardIdentity`), and [`Reader::verify_shard`] checks its whole-file digest.

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::cbor::Value;
use super::format::{ENCODING_ZSTD_SEEKABLE, ElementType, parse_digest};
use super::layout::{self, Profiles, check_layout};
use super::manifest::{Manifest, Object, Part, ShardEntry};
use super::rule::Rule;
use super::validate::{Image, fetch, validate};
use super::verify;
use super::{Error, Result};
use crate::dtype::DType;
use crate::source::ReadAt;
use crate::tensor::Tensor;

/// Where a part's stored bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location<'r> {
    /// The shard holding them; `None` = the containing file.
    pub shard: Option<&'r str>,
    /// Absolute offset in that file.
    pub offset: u64,
    /// Stored length.
    pub length: u64,
    /// True when the stored bytes are encoded (decoded size differs, never zero-copy).
    pub encoded: bool,
}

/// An assembled `zt.sparse_csr/1` object whose data rules hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Csr<'r> {
    /// Row count `R`.
    pub rows: u64,
    /// Column count `C`.
    pub cols: u64,
    /// `R + 1` row pointers.
    pub indptr: Vec<u64>,
    /// `nnz` column indices.
    pub indices: Vec<u64>,
    /// The values' decoded bytes (little-endian elements).
    pub values: Cow<'r, [u8]>,
    /// The values' storage dtype.
    pub values_dtype: DType,
    /// The values' element type (an unknown logical type must not be interpreted).
    pub values_type: ElementType,
}

/// An assembled `zt.sparse_coo/1` object whose data rules hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Coo<'r> {
    /// Dense shape.
    pub shape: Vec<u64>,
    /// Number of stored elements.
    pub nnz: u64,
    /// Coordinates, structure-of-arrays: dimension `d` of element `i` is `coords[d * nnz + i]`.
    pub coords: Vec<u64>,
    /// The values' decoded bytes.
    pub values: Cow<'r, [u8]>,
    /// The values' storage dtype.
    pub values_dtype: DType,
    /// The values' element type.
    pub values_type: ElementType,
}

/// What [`Reader::verify`] checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Parts whose digest matched.
    pub parts_digest_checked: u64,
    /// Parts without a digest (content rules still checked).
    pub parts_without_digest: u64,
    /// Shards whose whole-file digest matched.
    pub shards_checked: u64,
    /// `(object, part)` pairs not checked because they live in a shard that was not supplied.
    pub unresolved: Vec<(String, String)>,
}

/// A validated `.zt` v2 file.
pub struct Reader<S> {
    source: S,
    manifest: Option<Manifest>,
    shards: BTreeMap<String, S>,
}

impl<S: core::fmt::Debug> core::fmt::Debug for Reader<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reader")
            .field("source", &self.source)
            .field("manifest", &self.manifest)
            .field("shards", &self.shards.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn not_found(msg: String) -> Error {
    Error::new(Rule::NotFound, msg)
}

impl<S: ReadAt> Reader<S> {
    /// Validates `source` (all of spec §13, shards unresolved) and keeps its manifest. A data
    /// shard opens too, with no objects ([`Reader::is_data_shard`]).
    pub fn open(source: S) -> Result<Reader<S>> {
        let manifest = validate(&source)?.into_manifest();
        Ok(Reader {
            source,
            manifest,
            shards: BTreeMap::new(),
        })
    }

    /// The underlying source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Gives the source back (and the supplied shard sources).
    pub fn into_parts(self) -> (S, BTreeMap<String, S>) {
        (self.source, self.shards)
    }

    /// True for a manifest-less data shard.
    pub fn is_data_shard(&self) -> bool {
        self.manifest.is_none()
    }

    /// The validated manifest (`None` for a data shard).
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// Object names in bytewise order.
    pub fn objects(&self) -> impl Iterator<Item = &str> + '_ {
        self.manifest.iter().flat_map(|m| m.objects.keys().map(|s| s.as_str()))
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.manifest.as_ref().map_or(0, |m| m.objects.len())
    }

    /// True when there are no objects.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// File attributes (a CBOR map with text keys), if any.
    pub fn attributes(&self) -> Option<&Value<'static>> {
        self.manifest.as_ref()?.attributes.as_ref()
    }

    /// The shard table, if the manifest has one.
    pub fn shard_table(&self) -> Option<&BTreeMap<String, ShardEntry>> {
        self.manifest.as_ref()?.shards.as_ref()
    }

    /// One object (`NotFound` if absent).
    pub fn object(&self, name: &str) -> Result<&Object> {
        self.manifest
            .as_ref()
            .and_then(|m| m.objects.get(name))
            .ok_or_else(|| not_found(alloc::format!("no object {name:?}")).object(name))
    }

    /// One part (`NotFound` if the object or part is absent).
    pub fn part(&self, object: &str, part: &str) -> Result<&Part> {
        self.object(object)?
            .parts
            .get(part)
            .ok_or_else(|| not_found(alloc::format!("object {object:?} has no part {part:?}")).part(object, part))
    }

    /// Supplies the source of shard `name` after checking its identity: it must be in the shard
    /// table (`NotFound`), have exactly the declared size and a valid container frame
    /// (`ShardIdentity`). The whole-file digest is checked by [`Reader::verify_shard`].
    pub fn with_shard(mut self, name: &str, source: S) -> Result<Reader<S>> {
        let entry = self
            .shard_table()
            .and_then(|t| t.get(name))
            .ok_or_else(|| not_found(alloc::format!("the shard table has no shard {name:?}")).shard(name))?;
        if source.size() != entry.size {
            return Err(Error::new(
                Rule::ShardIdentity,
                alloc::format!(
                    "the supplied file is {} bytes; the shard table says {}",
                    source.size(),
                    entry.size
                ),
            )
            .shard(name));
        }
        if let Err(e) = validate(&source) {
            return Err(Error::new(
                Rule::ShardIdentity,
                alloc::format!("the supplied file is not a valid .zt image: {e}"),
            )
            .shard(name));
        }
        self.shards.insert(name.into(), source);
        Ok(self)
    }

    /// [`Reader::with_shard`] for each `(name, source)`.
    pub fn with_shards(mut self, shards: impl IntoIterator<Item = (String, S)>) -> Result<Reader<S>> {
        for (n, s) in shards {
            self = self.with_shard(&n, s)?;
        }
        Ok(self)
    }

    /// The supplied source of shard `name`, if any.
    pub fn shard_source(&self, name: &str) -> Option<&S> {
        self.shards.get(name)
    }

    /// Checks the whole-file digest of a supplied shard (`ShardIdentity` on mismatch,
    /// `Unsupported` for an unknown algorithm, `NotFound` when not supplied).
    pub fn verify_shard(&self, name: &str) -> Result<()> {
        let entry = self
            .shard_table()
            .and_then(|t| t.get(name))
            .ok_or_else(|| not_found(alloc::format!("the shard table has no shard {name:?}")).shard(name))?;
        let src = self
            .shards
            .get(name)
            .ok_or_else(|| not_found(alloc::format!("shard {name:?} was not supplied")).shard(name))?;
        let (algo, _) = parse_digest(&entry.digest).map_err(|e| e.shard(name))?;
        let got = verify::digest_source(algo, src).map_err(|e| e.shard(name))?;
        if got != entry.digest {
            return Err(Error::new(
                Rule::ShardIdentity,
                alloc::format!("the file hashes to {got}, the shard table says {}", entry.digest),
            )
            .shard(name));
        }
        Ok(())
    }

    /// Completes an error that names an object and part but no byte offset with the part's blob
    /// offset, so the message says where to look.
    pub fn with_location(&self, mut e: Error) -> Error {
        if e.offset.is_none()
            && let (Some(o), Some(p)) = (&e.object, &e.part)
            && let Ok(l) = self.locate(o, p)
        {
            e.offset = Some(l.offset);
        }
        e
    }

    /// Where a part's stored bytes are (shard name, offset, length): what a caller needs to
    /// resolve a part in another file itself.
    pub fn locate(&self, object: &str, part: &str) -> Result<Location<'_>> {
        let p = self.part(object, part)?;
        Ok(Location {
            shard: p.shard.as_deref(),
            offset: p.blob.offset,
            length: p.blob.length,
            encoded: p.encoding.is_some(),
        })
    }

    fn store(&self, object: &str, part: &str, p: &Part) -> Result<&S> {
        match &p.shard {
            None => Ok(&self.source),
            Some(s) => self.shards.get(s).ok_or_else(|| {
                Error::new(
                    Rule::Unsupported,
                    alloc::format!("the part lives in shard {s:?}, which was not supplied (Reader::with_shard)"),
                )
                .part(object, part)
                .shard(s)
            }),
        }
    }

    /// A zero-copy view of a raw part's bytes. `Unsupported` when the part is encoded, lives in
    /// an unsupplied shard, or the source is not in memory: this never copies.
    pub fn view(&self, object: &str, part: &str) -> Result<&[u8]> {
        let p = self.part(object, part)?;
        if let Some(e) = &p.encoding {
            return Err(Error::new(
                Rule::Unsupported,
                alloc::format!("the part is stored under encoding {e:?}; encoded parts are never zero-copy (use read)"),
            )
            .part(object, part));
        }
        let src = self.store(object, part, p)?;
        src.slice(p.blob.offset, p.blob.length).ok_or_else(|| {
            Error::new(
                Rule::Unsupported,
                "the source is not in memory, so the part cannot be mapped (use read)",
            )
            .part(object, part)
        })
    }

    /// The stored (possibly encoded) bytes of a part, borrowed when possible.
    pub fn read_stored(&self, object: &str, part: &str) -> Result<Cow<'_, [u8]>> {
        let p = self.part(object, part)?;
        let src = self.store(object, part, p)?;
        fetch(src, p.blob.offset, p.blob.length).map_err(|e| e.part(object, part))
    }

    /// The decoded bytes of a part: borrowed for raw parts of in-memory sources, otherwise owned
    /// (read, or decoded from `zt.zstd-seekable/1`). `Unsupported` for an unknown encoding.
    /// Structural: logical types are not interpreted here.
    pub fn read(&self, object: &str, part: &str) -> Result<Cow<'_, [u8]>> {
        let p = self.part(object, part)?;
        match p.encoding.as_deref() {
            None => self.read_stored(object, part),
            Some(ENCODING_ZSTD_SEEKABLE) => {
                let stored = self.read_stored(object, part)?;
                let n = p.decoded_length.unwrap_or(0);
                super::seekable::decode(&stored, n)
                    .map(Cow::Owned)
                    .map_err(|e| e.part(object, part).shifted(p.blob.offset))
            }
            Some(e) => {
                Err(Error::new(Rule::Unsupported, alloc::format!("encoding {e:?} is not supported")).part(object, part))
            }
        }
    }

    /// The decoded bytes of a part, handed to `f` in order in pieces of at most
    /// [`super::seekable::MAX_FRAME_DECODED`] (16 MiB): a `zt.zstd-seekable/1` part frame by
    /// frame, a raw part in reads of that size (borrowed from an in-memory source). Memory is
    /// bounded by one piece, whatever `decoded_length` declares. Errors as [`Reader::read`];
    /// `f`'s error stops the walk and is returned.
    pub fn read_chunks(&self, object: &str, part: &str, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        const PIECE: u64 = super::seekable::MAX_FRAME_DECODED as u64;
        let p = self.part(object, part)?;
        let src = self.store(object, part, p)?;
        match p.encoding.as_deref() {
            None => {
                let mut at = 0;
                while at < p.blob.length {
                    let n = (p.blob.length - at).min(PIECE);
                    let piece = fetch(src, p.blob.offset + at, n).map_err(|e| e.part(object, part))?;
                    f(&piece)?;
                    at += n;
                }
                Ok(())
            }
            Some(ENCODING_ZSTD_SEEKABLE) => {
                let n = p.decoded_length.unwrap_or(0);
                // `f`'s own errors pass through unchanged; the decoder's are located in the file.
                let mut own = None;
                let r = super::seekable::for_each_frame_at(src, p.blob.offset, p.blob.length, n, &mut |b| {
                    f(b).map_err(|e| {
                        own = Some(e);
                        Error::new(Rule::Unsupported, "stopped")
                    })
                });
                match (r, own) {
                    (_, Some(e)) => Err(e),
                    (Ok(()), None) => Ok(()),
                    (Err(e), None) => Err(e.part(object, part).shifted(p.blob.offset)),
                }
            }
            Some(e) => {
                Err(Error::new(Rule::Unsupported, alloc::format!("encoding {e:?} is not supported")).part(object, part))
            }
        }
    }

    /// Checks an object against its layout profile, covering every profile of spec §7 (open
    /// covers only `dense` and `zt.sparse_csr/1`, like the reference).
    pub fn check_object(&self, object: &str) -> Result<&Object> {
        let o = self.object(object)?;
        check_layout(object, o, Profiles::All)?;
        Ok(o)
    }

    /// Verifies one part: its logical-type content rules, then its digest (over decoded bytes).
    /// Returns whether a digest was present and matched. `LayoutData`, `Digest`, `Encoding`, or
    /// `Unsupported` (unknown encoding or digest algorithm, unsupplied shard).
    pub fn verify_part(&self, object: &str, part: &str) -> Result<bool> {
        let o = self.object(object)?;
        let p = self.part(object, part)?;
        if !verify::has_content_rules(p) {
            // Only a digest to check: hashed piece by piece (Reader::read_chunks), never whole.
            let Some(d) = &p.digest else {
                self.read_chunks(object, part, &mut |_| Ok(()))?;
                return Ok(false);
            };
            let mut h = match verify::digest_hasher(d) {
                Ok(h) => h,
                Err(e) => {
                    // The bytes' own errors first, as when they are read whole.
                    self.read_chunks(object, part, &mut |_| Ok(()))?;
                    return Err(e.part(object, part));
                }
            };
            self.read_chunks(object, part, &mut |b| {
                h.update(b);
                Ok(())
            })?;
            return verify::check_digest_of(d, h.finish())
                .map(|_| true)
                .map_err(|e| e.part(object, part));
        }
        let bytes = self.read(object, part)?;
        verify::check_content(&o.layout, o.elements(), p, &bytes).map_err(|e| e.part(object, part))?;
        match &p.digest {
            None => Ok(false),
            Some(d) => verify::check_digest(d, &bytes)
                .map(|_| true)
                .map_err(|e| e.part(object, part)),
        }
    }

    /// Verifies an object: its layout profile (all of §7), every part, then the layout's data
    /// rules (CSR, COO). Returns how many parts had a matching digest.
    pub fn verify_object(&self, object: &str) -> Result<u64> {
        let o = self.check_object(object)?;
        let mut n = 0;
        for p in o.parts.keys() {
            n += self.verify_part(object, p)? as u64;
        }
        match o.layout.as_str() {
            layout::SPARSE_CSR => {
                self.read_csr(object)?;
            }
            layout::SPARSE_COO => {
                self.read_coo(object)?;
            }
            _ => {}
        }
        Ok(n)
    }

    /// Deep verify: every object ([`Reader::verify_object`]) and every supplied shard's digest.
    /// Parts in shards that were not supplied are listed in the report, not failed.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut r = VerifyReport::default();
        for (name, o) in self.manifest.iter().flat_map(|m| m.objects.iter()) {
            let missing: Vec<&String> = o
                .parts
                .iter()
                .filter(|(_, p)| p.shard.as_ref().is_some_and(|s| !self.shards.contains_key(s)))
                .map(|(n, _)| n)
                .collect();
            if !missing.is_empty() {
                check_layout(name, o, Profiles::All)?;
                for pn in missing {
                    r.unresolved.push((name.clone(), pn.clone()));
                }
                continue;
            }
            let checked = self.verify_object(name)?;
            r.parts_digest_checked += checked;
            r.parts_without_digest += o.parts.len() as u64 - checked;
        }
        for name in self.shards.keys() {
            self.verify_shard(name)?;
            r.shards_checked += 1;
        }
        Ok(r)
    }

    /// Assembles a `zt.sparse_csr/1` object and checks its data rules (§7.2, `LayoutData`).
    /// `Unsupported` when the object has another layout.
    pub fn read_csr(&self, object: &str) -> Result<Csr<'_>> {
        let o = self.object(object)?;
        if o.layout != layout::SPARSE_CSR {
            return Err(Error::new(
                Rule::Unsupported,
                alloc::format!("layout {:?} is not {}", o.layout, layout::SPARSE_CSR),
            )
            .object(object));
        }
        let (rows, cols, w, _) = layout::check_csr(o).map_err(|e| e.object(object))?;
        let indptr = verify::read_indices(&self.read(object, "indptr")?, w);
        let indices = verify::read_indices(&self.read(object, "indices")?, w);
        verify::check_csr_data(rows, cols, &indptr, &indices).map_err(|e| e.object(object))?;
        let values = self.read(object, "values")?;
        let vp = self.part(object, "values")?;
        Ok(Csr {
            rows,
            cols,
            indptr,
            indices,
            values,
            values_dtype: vp.dtype,
            values_type: vp.element_type(),
        })
    }

    /// Assembles a `zt.sparse_coo/1` object and checks its data rules (§7.3, `LayoutData`).
    /// `Unsupported` when the object has another layout.
    pub fn read_coo(&self, object: &str) -> Result<Coo<'_>> {
        let o = self.object(object)?;
        if o.layout != layout::SPARSE_COO {
            return Err(Error::new(
                Rule::Unsupported,
                alloc::format!("layout {:?} is not {}", o.layout, layout::SPARSE_COO),
            )
            .object(object));
        }
        let (w, nnz) = layout::check_coo(o).map_err(|e| e.object(object))?;
        let coords = verify::read_indices(&self.read(object, "coords")?, w);
        verify::check_coo_data(&o.shape, &coords).map_err(|e| e.object(object))?;
        let values = self.read(object, "values")?;
        let vp = self.part(object, "values")?;
        Ok(Coo {
            shape: o.shape.clone(),
            nnz,
            coords,
            values,
            values_dtype: vp.dtype,
            values_type: vp.element_type(),
        })
    }

    /// A `dense` object as a [`Tensor`] (borrowed when possible). The element type must map onto
    /// a [`DType`]: plain dtypes, `bool`, `complex64`, `complex128`; FP8/FP4 and unknown logical
    /// types are `Unsupported` here (use [`Reader::read`] for their raw bytes). `bool` bytes are
    /// checked (`LayoutData`).
    pub fn tensor(&self, object: &str) -> Result<Tensor<'_>> {
        let o = self.object(object)?;
        if o.layout != layout::DENSE {
            return Err(
                Error::new(Rule::Unsupported, alloc::format!("layout {:?} is not dense", o.layout)).object(object),
            );
        }
        let p = self.part(object, "data")?;
        let dtype = match p.element_type() {
            ElementType::Plain(d) => d,
            ElementType::Logical(super::format::LogicalType::Bool) => DType::Bool,
            ElementType::Logical(super::format::LogicalType::Complex64) => DType::C64,
            ElementType::Logical(super::format::LogicalType::Complex128) => DType::C128,
            ElementType::Logical(t) => {
                return Err(Error::new(
                    Rule::Unsupported,
                    alloc::format!("logical type {} has no tensor dtype; read its raw bytes", t.name()),
                )
                .part(object, "data"));
            }
            ElementType::Unknown => {
                return Err(Error::new(
                    Rule::Unsupported,
                    alloc::format!(
                        "unknown logical type {:?}: refusing to interpret it",
                        p.logical.as_deref().unwrap_or("")
                    ),
                )
                .part(object, "data"));
            }
        };
        let bytes = self.read(object, "data")?;
        verify::check_content(&o.layout, o.elements(), p, &bytes).map_err(|e| e.part(object, "data"))?;
        Tensor::new(dtype, o.shape.clone(), bytes)
            .map_err(|e| Error::new(Rule::DenseSize, alloc::format!("{e:?}")).part(object, "data"))
    }
}

/// Validates an in-memory image (the corpus's `open`): `Ok(Image::DataShard)` for a data shard.
pub fn validate_bytes(bytes: &[u8]) -> Result<Image> {
    validate(bytes)
}
