//! [`Model`]: a foreign model file (safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5) opened from
//! disk, with the companion files it names.
//!
//! [`Model::open`] memory-maps the file (or, feature `remote`, opens an `s3://`, `gs://`, `az://` or
//! `http(s)://` URL as a [`crate::remote::RemoteSource`] read by range; companions are then the
//! objects beside it on the same store), recognises its format by content
//! ([`tensorlane_core::formats::detect_source`]: magic bytes, and HDF5 after a user block; the
//! name is only a fallback when no content matches, so that the format's own parser explains a
//! damaged file), builds its
//! [`Catalog`] with the core parser, and opens every companion file the catalog lists
//! ([`Catalog::sources`]: safetensors shards, GGUF splits, ONNX external data) next to it. A
//! companion is resolved in the root file's folder and must stay there once symlinks are followed;
//! a missing one is refused with its name. Every byte range of the catalog is then checked
//! against the real file sizes ([`Catalog::check_ranges`]), so a short companion fails at open,
//! not in the middle of a read.
//!
//! [`Model::read`] hands out a tensor's C-order little-endian bytes, borrowed from the map when
//! [`TensorInfo::is_zero_copy`]; [`Model::dequantize`] turns ggml blocks into f32;
//! [`Model::stats`] summarises a tensor ([`tensorlane_core::stats`]).
//!
//! `.zt` v2 (with its shards), legacy `.zt` v1.2/v0.1 and Tenso packet files open the same way
//! ([`formats::zt`], [`formats::tenso`]): what only they have — a `.zt` object's layout and parts,
//! part digests, attributes — is in each tensor's attributes and in [`Catalog::checks`]; tensors
//! stored as several parts ([`formats::Storage::Parts`]: sparse, group-quantized) are read part by
//! part ([`Model::read_part`]). A `.zt` shard is found next to the root as `<stem>-<name>.zt`,
//! `<name>` or `<name>.zt` ([`formats::zt::shard_candidates`]) and checked against the root's
//! shard table (exact size, container frame); a shard that is not there leaves the root readable
//! (its tensors fail with [`ErrorKind::Companion`] when read) and is named in
//! [`Model::warnings`].
//!
//! Errors are [`crate::Error::Format`]: the core's [`FormatError`], which names the format, the
//! tensor, the byte offset and the kind of problem ([`ErrorKind`]).
//!
//! ```no_run
//! use tensorlane::model::Model;
//!
//! let m = Model::open("model.safetensors")?;
//! for t in &m.catalog().tensors {
//!     let bytes = m.read(t)?;
//!     println!("{} {} {:?}: {} bytes", t.name, t.ty.name(), t.shape, bytes.len());
//! }
//! # Ok::<(), tensorlane::Error>(())
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tensorlane_core::detect::{Format, Identified};

use tensorlane_core::formats::{self, Catalog, ElementType, ErrorKind, FormatError, ReadLimits, TensorInfo};
use tensorlane_core::source::ReadAt;
use tensorlane_core::stats::{self, StatsOptions, TensorStats};

use crate::Error;
use crate::source::Source;

/// Tensors of at least this many bytes get [`Model::stats_in_threads`] from [`Model::stats`].
const PARALLEL_STATS_BYTES: u64 = 64 << 20;

/// How [`Model::open_with`] opens a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelOptions {
    /// Limits on whole-tensor reads ([`Model::read`], [`Model::dequantize`]): a tensor whose bytes
    /// are over `limits.max_tensor_bytes` ([`formats::DEFAULT_MAX_TENSOR_BYTES`], 4 GiB, by
    /// default) is refused before anything is allocated, with an error naming the tensor, its
    /// size and the option. Streaming reads ([`Model::read_chunks`], [`Model::stats`],
    /// [`Model::verify`]) hold bounded pieces whatever the size.
    pub limits: ReadLimits,
    /// Map the files (`true`, the default: zero-copy reads) or read them with `pread` (`false`).
    ///
    /// The rule: map files that stay as they are while the model is open; read with `pread`
    /// files that may be truncated or rewritten meanwhile (a checkpoint being written, a shared
    /// folder): a truncated mapped file kills the process with SIGBUS when a vanished page is
    /// touched, while `pread` gives an error ([`ErrorKind::Truncated`], with the new size).
    pub mmap: bool,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            limits: ReadLimits::default(),
            mmap: true,
        }
    }
}

/// What [`Model::verify`] checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelVerify {
    /// Tensors read to the end (decoded, inflated, their checksums checked on the way).
    pub tensors: u64,
    /// Checksums the file declares ([`Catalog::checks`]: stored zip members' CRC-32, ONNX external
    /// data's SHA-1) that matched.
    pub checks: u64,
    /// Deflated zip members whose CRC-32 matched while they were inflated.
    pub deflated: u64,
}

/// A model file and its companions (mapped, read with `pread`, or remote), with the catalog of its
/// tensors.
#[derive(Debug)]
pub struct Model {
    path: PathBuf,
    catalog: Catalog,
    /// `sources[k]` is the file named by `catalog.sources[k]` (0: the opened file).
    sources: Vec<Source>,
    /// The resolved path of each source.
    paths: Vec<PathBuf>,
    /// Sources that were not found (a `.zt` shard missing next to its root), with why.
    missing: Vec<(usize, String)>,
    options: ModelOptions,
}

/// Whether `format` is a foreign model format (not the project's own `.zt` or Tenso, which
/// [`Model`] reads as well).
pub fn is_model_format(format: Format) -> bool {
    matches!(
        format,
        Format::Safetensors
            | Format::SafetensorsIndex
            | Format::Gguf
            | Format::PyTorch
            | Format::PyTorchLegacy
            | Format::Npy
            | Format::Npz
            | Format::Onnx
            | Format::Hdf5
    )
}

/// An I/O failure on `path`, as a [`FormatError`] of kind [`ErrorKind::Io`].
fn io_error(format: &'static str, path: &Path, e: &std::io::Error) -> FormatError {
    FormatError::new(format, ErrorKind::Io, format!("cannot read {}: {e}", path.display()))
}

/// The format a model file's name suggests (`.safetensors`, `.gguf`, `.pt`/`.pth`/`.bin`/`.ckpt`,
/// `.npy`, `.npz`, `.onnx`, `.h5`/`.hdf5`), used only when the content matches no format: the
/// parser of that format then says what is wrong with the file (a truncated header, a bad magic)
/// instead of a bare "unknown format".
pub fn format_from_name(path: &Path) -> Option<Format> {
    tensorlane_core::detect::format_from_name(path.file_name()?.to_str()?).filter(|f| is_model_format(*f))
}

/// The format of a model file: from its first bytes, else (when they match nothing) from its name
/// ([`format_from_name`]). `None` when neither tells.
///
/// The rule is the one every front end shares ([`tensorlane_core::detect::identify`]): text, raw
/// data, ONNX external data and empty files are no format, whatever their name.
pub fn model_format(path: &Path, src: &(impl ReadAt + ?Sized)) -> Option<Format> {
    match identify(path, src) {
        Ok(Identified::Format(f)) => Some(f),
        _ => None,
    }
}

/// What `path` is taken as ([`formats::identify_source`] with its file name).
pub fn identify(path: &Path, src: &(impl ReadAt + ?Sized)) -> Result<Identified, FormatError> {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    formats::identify_source(src, &name)
}

/// [`model_format`], or an error that says what the file looks like instead.
fn detect_format(path: &Path, src: &Source) -> Result<Format, FormatError> {
    match identify(path, src)? {
        Identified::Format(f) => Ok(f),
        Identified::Unrecognised(u) => Err(formats::unrecognised_error(u)),
    }
}

/// Resolves companion `rel` (as named inside the model) in `dir`, the model's folder, and checks
/// that the file it ends up at, symlinks followed, is a regular file inside `dir`.
///
/// `dir` must already be canonical. A missing file is an [`ErrorKind::Companion`] error naming
/// it; a path that leaves the folder (`..`, absolute, or a symlink pointing out) is
/// [`ErrorKind::Refused`].
pub(crate) fn resolve_companion(format: &'static str, dir: &Path, rel: &str) -> Result<PathBuf, FormatError> {
    formats::check_companion_path(format, rel)?;
    let joined = dir.join(rel);
    let canon = match joined.canonicalize() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FormatError::new(
                format,
                ErrorKind::Companion,
                format!(
                    "companion file '{rel}' is missing: the model needs {} next to it",
                    joined.display()
                ),
            ));
        }
        Err(e) => return Err(io_error(format, &joined, &e)),
    };
    if !canon.starts_with(dir) {
        return Err(FormatError::new(
            format,
            ErrorKind::Refused,
            format!(
                "companion file '{rel}' resolves to {}, outside the model's folder {} (a symbolic link?); refusing \
                 to read it",
                canon.display(),
                dir.display()
            ),
        ));
    }
    if !canon.is_file() {
        return Err(FormatError::new(
            format,
            ErrorKind::Companion,
            format!("companion file '{rel}' ({}) is not a regular file", canon.display()),
        ));
    }
    Ok(canon)
}

/// Where companions are found: the root file's canonical folder, or beside a remote root.
enum Base {
    Dir(PathBuf),
    #[cfg(feature = "remote")]
    Remote(crate::remote::RemoteSource),
}

/// Companion files opened while the catalog is built (shards, splits), kept for reading.
struct Companions {
    format: &'static str,
    base: Base,
    opened: HashMap<String, (PathBuf, Source)>,
    /// Shards opened and parsed ahead by [`Companions::prefetch`], taken by [`Companions::open_as`].
    parsed: HashMap<String, Catalog>,
    mmap: bool,
}

/// The most remote shards [`Companions::prefetch`] opens at once.
#[cfg(feature = "remote")]
const PREFETCH_AT_ONCE: usize = 16;

impl Companions {
    /// Opens companion `rel` (once) and returns its source.
    fn get(&mut self, rel: &str) -> Result<&(PathBuf, Source), FormatError> {
        if !self.opened.contains_key(rel) {
            let opened = match &self.base {
                Base::Dir(dir) => {
                    let path = resolve_companion(self.format, dir, rel)?;
                    let src = Source::open_local(&path, self.mmap).map_err(|e| io_error(self.format, &path, &e))?;
                    (path, src)
                }
                #[cfg(feature = "remote")]
                Base::Remote(root) => {
                    formats::check_companion_path(self.format, rel)?;
                    let src = root.sibling(rel).map_err(|e| {
                        FormatError::new(
                            self.format,
                            ErrorKind::Companion,
                            format!("companion file '{rel}': {e}"),
                        )
                    })?;
                    (PathBuf::from(src.url()), Source::Remote(src))
                }
            };
            self.opened.insert(rel.to_string(), opened);
        }
        Ok(&self.opened[rel])
    }

    /// Opens remote shards `rels` of `format` (already checked names) at once, [`PREFETCH_AT_ONCE`]
    /// at a time, and parses each: opening one costs a round trip (its first ranged GET), so a set
    /// of N shards lists in about one round trip instead of N. Local files are opened as asked
    /// (no round trip to hide). A shard that fails here is left for [`Companions::open_as`], which
    /// opens it again and reports the error.
    fn prefetch(&mut self, format: Format, rels: &[&str]) {
        #[cfg(feature = "remote")]
        if let Base::Remote(root) = &self.base {
            let todo: Vec<&str> = rels.iter().copied().filter(|r| !self.opened.contains_key(*r)).collect();
            for batch in todo.chunks(PREFETCH_AT_ONCE) {
                let done: Vec<_> = std::thread::scope(|s| {
                    let jobs: Vec<_> = batch
                        .iter()
                        .map(|&rel| {
                            s.spawn(move || {
                                let src = Source::Remote(root.sibling(rel).ok()?);
                                let cat = formats::open_as(format, &src).ok()?;
                                Some((rel, src, cat))
                            })
                        })
                        .collect();
                    jobs.into_iter().filter_map(|j| j.join().ok().flatten()).collect()
                });
                for (rel, src, cat) in done {
                    let url = match &src {
                        Source::Remote(r) => PathBuf::from(r.url()),
                        _ => PathBuf::from(rel),
                    };
                    self.opened.insert(rel.to_string(), (url, src));
                    self.parsed.insert(rel.to_string(), cat);
                }
            }
        }
        #[cfg(not(feature = "remote"))]
        let _ = (format, rels);
    }

    /// Opens companion `rel` as `format` on its own (a shard or a split).
    fn open_as(&mut self, format: Format, rel: &str) -> Result<Catalog, FormatError> {
        if let Some(cat) = self.parsed.remove(rel) {
            return Ok(cat);
        }
        let (path, src) = self.get(rel)?;
        formats::open_as(format, src).map_err(|mut e| {
            e.message = format!("{} (in {})", e.message, path.display());
            e
        })
    }
}

/// Resolves the shards of a `.zt` v2 root: each of [`Catalog::sources`] (a shard name) becomes the
/// first of [`formats::zt::shard_candidates`] that exists next to the root, and is checked against
/// the root's shard table ([`tensorlane_core::zt::reader::Reader::with_shard`]: exact size, a
/// valid container frame). A shard that is not found is returned (index, message) instead.
fn zt_shards(
    path: &Path,
    root: &Source,
    catalog: &mut Catalog,
    companions: &mut Companions,
) -> Result<Vec<(usize, String)>, FormatError> {
    use tensorlane_core::zt::reader::Reader;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut missing = Vec::new();
    let mut found = Vec::new();
    for k in 1..catalog.sources.len() {
        let shard = catalog.sources[k].clone();
        let candidates = formats::zt::shard_candidates(&file_name, &shard);
        match candidates.iter().find(|c| companions.get(c).is_ok()) {
            Some(rel) => {
                found.push((shard, rel.clone()));
                catalog.sources[k] = rel.clone();
            }
            None => missing.push((
                k,
                format!(
                    "shard {shard:?} of {}: no file found next to it (looked for {}); its tensors cannot be read",
                    path.display(),
                    candidates.join(", ")
                ),
            )),
        }
    }
    let mut reader = Reader::open(root).map_err(formats::zt::error)?;
    for (shard, rel) in &found {
        let (p, src) = &companions.opened[rel];
        reader = reader.with_shard(shard, src).map_err(|e| {
            let mut e = formats::zt::error(e);
            e.message = format!("{} (file {})", e.message, p.display());
            e
        })?;
    }
    Ok(missing)
}

impl Model {
    /// Opens the model file at `path` and every companion file it names (see the module docs).
    /// `path` may be a URL (feature `remote`: `s3://`, `gs://`, `az://`, `http(s)://`), opened with
    /// [`crate::remote::default_options`].
    pub fn open(path: impl AsRef<Path>) -> Result<Model, Error> {
        Model::open_with(path, &ModelOptions::default())
    }

    /// [`open`](Self::open) with options: limits on whole-tensor reads, and whether to map the
    /// files or read them with `pread` ([`ModelOptions`]).
    pub fn open_with(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Model, Error> {
        let path = path.as_ref();
        let root = Source::open_with(path, options.mmap)
            .map_err(|e| FormatError::new("formats", ErrorKind::Io, e.to_string().replace("read failed: ", "")))?;
        Ok(Model::catalogue(path, root, *options)?)
    }

    /// Like [`open`](Self::open), for a file the caller has already opened (to detect its
    /// format, say): `root` is the map (or remote source) of `path`, which is used for its name and
    /// folder only.
    pub fn from_source(path: impl AsRef<Path>, root: impl Into<Source>) -> Result<Model, Error> {
        Ok(Model::catalogue(path.as_ref(), root.into(), ModelOptions::default())?)
    }

    /// [`from_source`](Self::from_source) with the core's error type.
    fn catalogue(path: &Path, root: Source, options: ModelOptions) -> Result<Model, FormatError> {
        let format = detect_format(path, &root)?;
        let name = format.name();
        let base = match &root {
            #[cfg(feature = "remote")]
            Source::Remote(r) => Base::Remote(r.clone()),
            _ => {
                let parent = path
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                Base::Dir(parent.canonicalize().map_err(|e| io_error(name, parent, &e))?)
            }
        };
        let mut companions = Companions {
            format: name,
            base,
            opened: HashMap::new(),
            parsed: HashMap::new(),
            mmap: options.mmap,
        };
        let mut catalog = match format {
            Format::SafetensorsIndex => {
                // The shards are named by the index: remote ones are all opened at once first.
                let companions = std::cell::RefCell::new(&mut companions);
                formats::safetensors::open_index_prefetched(
                    &root,
                    &mut |shards| companions.borrow_mut().prefetch(Format::Safetensors, shards),
                    &mut |shard| companions.borrow_mut().open_as(Format::Safetensors, shard),
                )?
            }
            Format::Gguf => {
                let first = formats::open_as(Format::Gguf, &root)?;
                let file_name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                formats::gguf::open_splits(first, &file_name, &mut |part| companions.open_as(Format::Gguf, part))?
            }
            other => formats::open_as(other, &root)?,
        };
        let mut missing = Vec::new();
        if format == Format::Zt {
            missing = zt_shards(path, &root, &mut catalog, &mut companions)?;
        }
        let mut sources = vec![root];
        let mut paths = vec![path.to_path_buf()];
        for (k, rel) in catalog.sources.iter().enumerate().skip(1) {
            if missing.iter().any(|(m, _)| *m == k) {
                paths.push(PathBuf::from(rel));
                sources.push(Source::Mapped(crate::source::MmapSource::empty()));
                continue;
            }
            let (p, s) = companions.get(rel)?;
            paths.push(p.clone());
            sources.push(s.clone());
        }
        let mut sizes: Vec<u64> = sources.iter().map(ReadAt::size).collect();
        for (k, _) in &missing {
            sizes[*k] = u64::MAX;
        }
        catalog.check_ranges(&sizes)?;
        Ok(Model {
            path: path.to_path_buf(),
            catalog,
            sources,
            paths,
            missing,
            options,
        })
    }

    /// Whether every file of the model (the opened one, shards, companions) is still what it
    /// was when it was opened ([`Source::check_unchanged`]): an error naming the first one that
    /// was written in place, truncated or extended since. Passes that read a model (hashes,
    /// statistics, verification, conversion) call it at their end, so a result computed from a
    /// mix of two versions is never reported as the file's.
    pub fn check_unchanged(&self) -> Result<(), Error> {
        for (k, src) in self.sources.iter().enumerate() {
            if self.missing.iter().any(|(m, _)| *m == k) {
                continue;
            }
            src.check_unchanged().map_err(|e| {
                Error::Format(FormatError::new(
                    self.catalog.format.name(),
                    ErrorKind::Io,
                    format!("{}: {e}", self.paths[k].display()),
                ))
            })?;
        }
        Ok(())
    }

    /// Source `k` of [`Catalog::sources`] (0: the opened file), or `None` when there is none or
    /// it was not found (a missing `.zt` shard): what a caller reads itself, as the JS addon runs
    /// the `.zt` container's deep verify over the root and its shards.
    pub fn source(&self, k: usize) -> Option<&Source> {
        if self.missing.iter().any(|(m, _)| *m == k) {
            return None;
        }
        self.sources.get(k)
    }

    /// What was noticed while opening and did not stop it: a `.zt` shard not found next to its
    /// root (its tensors fail when read).
    pub fn warnings(&self) -> Vec<String> {
        self.missing.iter().map(|(_, w)| w.clone()).collect()
    }

    /// Whether source `k` ([`Catalog::sources`]) was not found (a `.zt` shard missing next to its
    /// root: [`Model::warnings`] says why).
    pub fn is_missing(&self, k: usize) -> bool {
        self.missing.iter().any(|(m, _)| *m == k)
    }

    /// A [`ErrorKind::Companion`] error when `t` reads from a source that was not found.
    fn check_present(&self, t: &TensorInfo) -> Result<(), FormatError> {
        for (source, _, _) in t.storage.stored_ranges() {
            if let Some((_, why)) = self.missing.iter().find(|(k, _)| *k == source) {
                return Err(
                    FormatError::new(self.catalog.format.name(), ErrorKind::Companion, why.clone())
                        .tensor(t.name.clone()),
                );
            }
        }
        Ok(())
    }

    /// The bytes of part `part` of a tensor stored as several parts ([`formats::Storage::Parts`]:
    /// a `.zt` sparse or group-quantized object, a Tenso sparse or quantized packet), decoded and
    /// checked like [`read`](Self::read), under the same limits.
    pub fn read_part(&self, t: &TensorInfo, part: &str) -> Result<Cow<'_, [u8]>, Error> {
        self.check_present(t)?;
        let refs: Vec<&Source> = self.sources.iter().collect();
        Ok(formats::read_part(
            self.catalog.format.name(),
            t,
            part,
            &refs,
            &self.catalog.checks,
            &self.options.limits,
        )?)
    }

    /// The options the model was opened with.
    pub fn options(&self) -> &ModelOptions {
        &self.options
    }

    /// Sets the limits on whole-tensor reads (see [`ModelOptions::limits`]).
    pub fn set_limits(&mut self, limits: ReadLimits) {
        self.options.limits = limits;
    }

    /// The path the model was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format of the opened file.
    pub fn format(&self) -> Format {
        self.catalog.format
    }

    /// Every tensor and the file-level metadata.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The files read, in [`Catalog::sources`] order (0: the opened file), as resolved, with their
    /// sizes.
    pub fn sources(&self) -> impl Iterator<Item = (&Path, u64)> {
        self.paths
            .iter()
            .map(PathBuf::as_path)
            .zip(self.sources.iter().map(ReadAt::size))
    }

    /// The tensor's bytes in C order, little-endian (see [`formats::read_limited`]): borrowed from
    /// the map when [`TensorInfo::is_zero_copy`], otherwise decoded (inflated, gathered, swapped).
    /// A tensor over [`ModelOptions::limits`] is refused ([`ErrorKind::Limit`]) before anything is
    /// allocated; a zip member's CRC-32 and an ONNX external file's SHA-1 are checked where the
    /// tensor covers the checked range ([`formats::read_limited`]).
    pub fn read(&self, t: &TensorInfo) -> Result<Cow<'_, [u8]>, Error> {
        self.check_present(t)?;
        let refs: Vec<&Source> = self.sources.iter().collect();
        Ok(formats::read_limited(
            self.catalog.format.name(),
            t,
            &refs,
            &self.catalog.checks,
            &self.options.limits,
        )?)
    }

    /// Streams the tensor's bytes (as [`read`](Self::read) gives them) to `sink` in pieces of at
    /// most `chunk` bytes ([`formats::read_chunks`]): memory stays bounded for ranges and deflated
    /// members whatever their size; checksums are checked on the way (a mismatch is an error
    /// after the last piece).
    pub fn read_chunks(
        &self,
        t: &TensorInfo,
        chunk: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), FormatError>,
    ) -> Result<(), Error> {
        self.check_present(t)?;
        let refs: Vec<&Source> = self.sources.iter().collect();
        Ok(formats::read_chunks(
            self.catalog.format.name(),
            t,
            &refs,
            &self.catalog.checks,
            &self.options.limits,
            chunk,
            sink,
        )?)
    }

    /// Reads every tensor to the end in bounded pieces (every deflated member's CRC-32 is checked
    /// on the way) and checks every checksum the file declares ([`Catalog::checks`]).
    /// `progress(done, total)` counts bytes of tensors.
    pub fn verify(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<ModelVerify, Error> {
        let refs: Vec<&Source> = self.sources.iter().collect();
        let format = self.catalog.format.name();
        let mut out = ModelVerify::default();
        for c in &self.catalog.checks {
            if let Some((_, why)) = self.missing.iter().find(|(k, _)| *k == c.source) {
                return Err(FormatError::new(format, ErrorKind::Companion, format!("{}: {why}", c.what)).into());
            }
            formats::check_integrity(format, c, &refs)?;
            out.checks += 1;
        }
        let total: u64 = self.catalog.tensors.iter().filter_map(TensorInfo::nbytes).sum();
        let mut done = 0u64;
        for t in &self.catalog.tensors {
            if let formats::Storage::Parts(p) = &t.storage {
                for part in &p.parts {
                    let bytes = self.read_part(t, &part.name)?;
                    done += bytes.len() as u64;
                    progress(done, total);
                }
                out.tensors += 1;
                continue;
            }
            self.read_chunks(t, 1 << 20, &mut |p| {
                done += p.len() as u64;
                progress(done, total);
                Ok(())
            })?;
            out.tensors += 1;
            if matches!(t.storage, formats::Storage::Deflate { crc32: Some(_), .. }) {
                out.deflated += 1;
            }
        }
        Ok(out)
    }

    /// Reads every tensor of `tensors` (tensors of this model's catalog) and hands its C-order
    /// bytes (as [`read`](Self::read) gives them) to `f`, in storage order (by file, then offset);
    /// the first error, from a read or from `f`, stops it.
    ///
    /// Local files are read one tensor at a time from the map (zero-copy). Remote files
    /// ([`crate::remote`]) are read in one pipeline: the byte ranges of all the tensors are
    /// coalesced (tensors that follow each other, with gaps of up to 1 MiB, become one run), runs
    /// are cut into [`crate::remote::RemoteOptions::part_size`] parts, and
    /// [`crate::remote::RemoteOptions::concurrency`] parts stay in flight across tensors and across
    /// the shards of a set while `f` runs. Memory held: the parts in flight plus the tensor being
    /// handed out. Call it from a blocking thread (not from inside an async task).
    pub fn for_each_tensor<'t>(
        &self,
        tensors: &[&'t TensorInfo],
        mut f: impl FnMut(&'t TensorInfo, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        #[cfg(feature = "remote")]
        if self.sources.iter().any(|s| matches!(s, Source::Remote(_))) {
            return self.for_each_remote(tensors, f);
        }
        let mut order = tensors.to_vec();
        order.sort_by_key(|t| extent(t).map_or((usize::MAX, 0), |(s, r)| (s, r.start)));
        for t in order {
            f(t, &self.read(t)?)?;
        }
        Ok(())
    }

    #[cfg(feature = "remote")]
    fn for_each_remote<'t>(
        &self,
        tensors: &[&'t TensorInfo],
        mut f: impl FnMut(&'t TensorInfo, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        use crate::remote::{RemoteSource, split};
        use futures::StreamExt;
        const GAP: u64 = 1 << 20;
        let remote = |s: usize| match self.sources.get(s) {
            Some(Source::Remote(r)) => Some(r),
            _ => None,
        };
        // The remote byte range each tensor needs, in storage order.
        let mut order: Vec<(&'t TensorInfo, Option<Extent>)> = tensors
            .iter()
            .map(|t| (*t, extent(t).filter(|(s, r)| r.end > r.start && remote(*s).is_some())))
            .collect();
        order.sort_by_key(|(_, e)| e.as_ref().map_or((usize::MAX, 0), |(s, r)| (*s, r.start)));
        // Coalesced runs, cut into parts; each tensor's first and last part.
        let Some(first) = order.iter().find_map(|(_, e)| e.as_ref()) else {
            for (t, _) in order {
                f(t, &self.read(t)?)?;
            }
            return Ok(());
        };
        let opts = remote(first.0).map(RemoteSource::options).cloned().unwrap_or_default();
        let mut runs: Vec<(usize, std::ops::Range<u64>)> = Vec::new();
        for (_, e) in &order {
            if let Some((s, r)) = e {
                match runs.last_mut() {
                    Some((rs, run)) if rs == s && r.start >= run.start && r.start <= run.end + GAP => {
                        run.end = run.end.max(r.end)
                    }
                    _ => runs.push((*s, r.clone())),
                }
            }
        }
        let mut parts: Vec<(usize, std::ops::Range<u64>)> = Vec::new();
        for (s, run) in &runs {
            parts.extend(split(run.clone(), opts.part_size).into_iter().map(|p| (*s, p)));
        }
        let fetches: Vec<_> = parts
            .iter()
            .map(|(s, r)| remote(*s).expect("runs are remote").fetch_chunks(r.clone()))
            .collect();
        let (tx, mut rx) = tokio::sync::mpsc::channel(opts.concurrency);
        let n = opts.concurrency;
        crate::remote::spawn(async move {
            let mut stream = futures::stream::iter(fetches).buffered(n);
            while let Some(part) = stream.next().await {
                let failed = part.is_err();
                if tx.send(part).await.is_err() || failed {
                    break;
                }
            }
        });
        // Each part as the body chunks it arrived in; joined into one buffer only when a tensor
        // inside it needs a contiguous view, and a tensor across parts is copied straight from
        // the chunks: every byte is copied once on its way to `f` (none for a one-chunk part).
        let mut received: std::collections::VecDeque<(usize, Vec<bytes::Bytes>)> = Default::default();
        let mut next = 0usize;
        let mut joined = Vec::new();
        for (t, e) in order {
            let Some((s, r)) = e else {
                f(t, &self.read(t)?)?;
                continue;
            };
            // Parts are in storage order, as are the tensors: find the first part that covers r.
            let a = received.front().map_or(next, |(i, _)| *i);
            let a = (a..parts.len())
                .find(|&i| parts[i].0 == s && parts[i].1.end > r.start)
                .expect("a tensor's range lies in a run");
            let b = (a..parts.len())
                .find(|&i| parts[i].1.end >= r.end)
                .expect("a tensor's range lies in a run");
            while next <= b {
                let part = rx
                    .blocking_recv()
                    .ok_or_else(|| {
                        FormatError::new(
                            self.catalog.format.name(),
                            ErrorKind::Io,
                            "the remote reader stopped".to_string(),
                        )
                    })?
                    .map_err(|e| {
                        FormatError::new(self.catalog.format.name(), ErrorKind::Io, e.to_string())
                            .tensor(t.name.clone())
                    })?;
                received.push_back((next, part));
                next += 1;
            }
            while received.front().is_some_and(|(i, _)| *i < a) {
                received.pop_front();
            }
            let start = parts[a].1.start;
            let window: &[u8] = if a == b {
                let part = &mut received[0].1;
                if part.len() > 1 {
                    *part = vec![crate::remote::concat(std::mem::take(part))];
                }
                part.first().map_or(&[], |c| c)
            } else {
                joined.clear();
                for (_, p) in received.iter().take(b - a + 1) {
                    for c in p {
                        joined.extend_from_slice(c);
                    }
                }
                &joined
            };
            let views: Vec<Windowed<'_>> = self
                .sources
                .iter()
                .enumerate()
                .map(|(k, base)| Windowed {
                    base,
                    window: (k == s).then_some((start, window)),
                })
                .collect();
            let refs: Vec<&Windowed<'_>> = views.iter().collect();
            let bytes = formats::read(self.catalog.format.name(), t, &refs)?;
            f(t, &bytes)?;
        }
        Ok(())
    }

    /// Requests and bytes sent and received so far for a remote model (its file and companions);
    /// `None` for a local one.
    #[cfg(feature = "remote")]
    pub fn remote_counters(&self) -> Option<&crate::remote::Counters> {
        match self.sources.first() {
            Some(Source::Remote(r)) => Some(r.counters()),
            _ => None,
        }
    }

    /// Count, min, max, mean, std, special values and histogram of tensor `t`
    /// ([`stats::tensor_stats`]: read from the map in [`StatsOptions::chunk_bytes`] pieces, two
    /// passes; `progress(done, total)` after each piece, `total` being twice its byte size).
    pub fn stats(
        &self,
        t: &TensorInfo,
        opts: &StatsOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<TensorStats, Error> {
        if t.nbytes().is_some_and(|n| n >= PARALLEL_STATS_BYTES) {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
            if threads > 1
                && let Some(s) = self.stats_in_threads(t, opts, threads, progress)?
            {
                return Ok(s);
            }
        }
        let refs: Vec<&Source> = self.sources.iter().collect();
        Ok(stats::tensor_stats(
            self.catalog.format.name(),
            t,
            &refs,
            opts,
            progress,
        )?)
    }

    /// [`Model::stats`] with each pass in spans ([`stats::split`]) on `threads` threads, merged
    /// ([`stats::StatsPart`], [`stats::HistogramAccumulator::merge`]): counts, min, max and the
    /// histogram as one pass gives them, mean and std to rounding. Only for a tensor stored as-is
    /// in a local file (mapped or read with pread); `None` for any other, and for a tensor
    /// [`stats::tensor_stats`] would refuse (which then says why). [`Model::stats`] uses it for
    /// tensors of 64 MiB or more when the machine has more than one core.
    pub fn stats_in_threads(
        &self,
        t: &TensorInfo,
        opts: &StatsOptions,
        threads: usize,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Option<TensorStats>, Error> {
        use std::sync::atomic::{AtomicU64, Ordering};
        use tensorlane_core::stats::{Histogram, HistogramAccumulator, Stats, StatsError, StatsPart};
        let format = self.catalog.format.name();
        let formats::Storage::Range { source, offset, len } = t.storage else {
            return Ok(None);
        };
        let (Some(numel), Some(nbytes), Some(src)) = (t.numel(), t.nbytes(), self.sources.get(source)) else {
            return Ok(None);
        };
        #[cfg(feature = "remote")]
        if matches!(src, Source::Remote(_)) {
            return Ok(None);
        }
        if !t.arrangement.is_native()
            || len != nbytes
            || opts.bins == 0
            || opts.bins > stats::MAX_BINS
            || tensorlane_core::source::check_range(offset, len, src.size()).is_err()
            || Stats::new(t.ty).is_err()
        {
            return Ok(None);
        }
        let Some(spans) = stats::split(t.ty, numel, threads.max(1)) else {
            return Ok(None);
        };
        let total = nbytes.saturating_mul(2);
        let unit = Stats::new(t.ty).map_or(1, |s| s.unit_bytes());
        let chunk = ((opts.chunk_bytes / unit).max(1) * unit) as u64;
        let done = AtomicU64::new(0);
        let fail = |e: tensorlane_core::source::SourceError| FormatError::source(format, e).tensor(t.name.clone());
        // Runs `each(k, span k)` on every span in its own thread, reporting progress from this one.
        let run = |progress: &mut dyn FnMut(u64, u64),
                   each: &(dyn Fn(usize, &stats::Span) -> Result<(), FormatError> + Sync)| {
            std::thread::scope(|scope| {
                let handles: Vec<_> = spans
                    .iter()
                    .enumerate()
                    .map(|(k, sp)| scope.spawn(move || each(k, sp)))
                    .collect();
                while !handles.iter().all(|h| h.is_finished()) {
                    progress(done.load(Ordering::Relaxed), total);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(FormatError::new(format, ErrorKind::Io, "a statistics thread failed")
                                .tensor(t.name.clone()))
                        })
                    })
                    .collect::<Result<Vec<()>, FormatError>>()
            })
        };
        // The bytes of one span, chunk by chunk, to `feed`.
        let read = |sp: &stats::Span, feed: &mut dyn FnMut(&[u8])| -> Result<(), FormatError> {
            let mut buf = Vec::new();
            let mut at = 0u64;
            while at < sp.bytes {
                let n = (sp.bytes - at).min(chunk);
                let pos = offset + sp.offset + at;
                if let Some(s) = src.slice(pos, n) {
                    feed(s);
                } else {
                    buf.resize(n as usize, 0);
                    src.read_at(pos, &mut buf).map_err(fail)?;
                    feed(&buf);
                }
                at += n;
                done.fetch_add(n, Ordering::Relaxed);
            }
            Ok(())
        };
        let parts: Vec<std::sync::Mutex<StatsPart>> =
            spans.iter().map(|_| std::sync::Mutex::new(StatsPart::EMPTY)).collect();
        run(progress, &|k, sp| {
            let Ok(st) = Stats::new(t.ty) else { return Ok(()) };
            let mut st = st.with_elements(sp.elements);
            read(sp, &mut |b| st.push(b))?;
            *parts[k].lock().unwrap_or_else(|p| p.into_inner()) = st.part();
            Ok(())
        })?;
        let summary = parts
            .iter()
            .map(|p| *p.lock().unwrap_or_else(|p| p.into_inner()))
            .fold(StatsPart::EMPTY, |a, p| a.merge(&p))
            .summary();
        done.store(nbytes, Ordering::Relaxed);
        let histogram = match HistogramAccumulator::from_summary(t.ty, &summary, opts.bins) {
            Ok(base) if summary.finite > 0 => {
                let hists: Vec<std::sync::Mutex<Option<HistogramAccumulator>>> =
                    spans.iter().map(|_| std::sync::Mutex::new(None)).collect();
                run(progress, &|k, sp| {
                    let mut h = base.clone().with_elements(sp.elements);
                    read(sp, &mut |b| h.push(b))?;
                    *hists[k].lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
                    Ok(())
                })?;
                let mut all = hists
                    .into_iter()
                    .filter_map(|h| h.into_inner().unwrap_or_else(|p| p.into_inner()));
                let mut first = all.next().unwrap_or(base);
                for h in all {
                    first.merge(&h);
                }
                first.finish()
            }
            Ok(base) => base.finish(),
            Err(StatsError::NarrowRange { .. }) => Histogram::single(&summary),
            Err(e) => return Err(e.to_format_error(format).tensor(t.name.clone()).into()),
        };
        progress(total, total);
        Ok(Some(TensorStats {
            name: t.name.clone(),
            dtype: t.ty.name().into(),
            shape: t.shape.clone(),
            summary,
            histogram,
        }))
    }

    /// A ggml tensor's values as f32 ([`formats::ggml::dequantize`] of its blocks). Other element
    /// types are refused ([`ErrorKind::Unsupported`]); so is a tensor whose f32 values would be
    /// over [`ModelOptions::limits`] ([`ErrorKind::Limit`], before anything is allocated).
    pub fn dequantize(&self, t: &TensorInfo) -> Result<Vec<f32>, Error> {
        match t.ty {
            ElementType::Ggml(g) => {
                let values = t.numel().ok_or_else(|| {
                    FormatError::new(
                        self.catalog.format.name(),
                        ErrorKind::Overflow,
                        "its size overflows 64 bits",
                    )
                    .tensor(t.name.clone())
                })?;
                self.options
                    .limits
                    .check(self.catalog.format.name(), &t.name, values.saturating_mul(4))?;
                let blocks = self.read(t)?;
                Ok(formats::ggml::dequantize(g, &blocks).map_err(|e| e.tensor(t.name.clone()))?)
            }
            other => Err(FormatError::new(
                self.catalog.format.name(),
                ErrorKind::Unsupported,
                format!("{} is not a ggml block type; read its bytes instead", other.name()),
            )
            .tensor(t.name.clone())
            .into()),
        }
    }
}

/// A source index and a byte range in it.
type Extent = (usize, std::ops::Range<u64>);

/// The stored byte range a tensor's read touches: `(source, range)`; `None` for bytes decoded at
/// open or gathered from chunks.
fn extent(t: &TensorInfo) -> Option<Extent> {
    use formats::Storage;
    match &t.storage {
        Storage::Range { source, offset, len } => Some((*source, *offset..offset.checked_add(*len)?)),
        Storage::Deflate {
            source,
            offset,
            compressed,
            ..
        } => Some((*source, *offset..offset.checked_add(*compressed)?)),
        _ => None,
    }
}

/// A source with a window of its bytes already fetched: reads inside the window are served (and
/// sliced) from it, others go to the source.
#[cfg(feature = "remote")]
struct Windowed<'a> {
    base: &'a Source,
    window: Option<(u64, &'a [u8])>,
}

#[cfg(feature = "remote")]
impl ReadAt for Windowed<'_> {
    fn size(&self) -> u64 {
        self.base.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), tensorlane_core::source::SourceError> {
        match self.slice(offset, buf.len() as u64) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => self.base.read_at(offset, buf),
        }
    }
    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let (start, w) = self.window?;
        let at = offset.checked_sub(start)?;
        let end = at.checked_add(len)?;
        w.get(usize::try_from(at).ok()?..usize::try_from(end).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tl-model-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }

    #[test]
    fn companions_stay_in_the_folder() {
        let d = temp("companions");
        let model = d.join("m");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("w.data"), b"1234").unwrap();
        std::fs::write(d.join("secret.bin"), b"secret").unwrap();
        assert_eq!(
            resolve_companion("onnx", &model, "w.data").unwrap(),
            model.join("w.data")
        );
        let e = resolve_companion("onnx", &model, "missing.data").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Companion);
        assert!(e.message.contains("missing.data"), "{e}");
        let e = resolve_companion("onnx", &model, "../secret.bin").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Refused);
        std::fs::create_dir_all(model.join("sub")).unwrap();
        let e = resolve_companion("onnx", &model, "sub").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Companion, "{e}");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(d.join("secret.bin"), model.join("link.data")).unwrap();
            let e = resolve_companion("onnx", &model, "link.data").unwrap_err();
            assert_eq!(e.kind, ErrorKind::Refused, "{e}");
            assert!(e.message.contains("outside"), "{e}");
            // A link that stays inside is followed.
            std::os::unix::fs::symlink(model.join("w.data"), model.join("inside.data")).unwrap();
            assert_eq!(
                resolve_companion("onnx", &model, "inside.data").unwrap(),
                model.join("w.data")
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The core's error inside a refusal (model errors are always [`Error::Format`]).
    fn format_err(r: Result<Model, Error>) -> FormatError {
        match r {
            Err(Error::Format(e)) => e,
            other => panic!("expected a format error, got {other:?}"),
        }
    }

    #[test]
    fn refuses_what_is_not_a_model() {
        let d = temp("refuse");
        let p = d.join("x.txt");
        std::fs::write(&p, b"hello, world").unwrap();
        let e = format_err(Model::open(&p));
        assert_eq!(e.kind, ErrorKind::Unsupported);
        // Text is text whatever its name (the shared rule, detect::identify) ...
        let p = d.join("x.bin");
        std::fs::write(&p, b"hello, world").unwrap();
        let e = format_err(Model::open(&p));
        assert!(e.format == "formats" && e.message.contains("plain text"), "{e}");
        // ... but a binary file no content matches goes to the parser its name gives, which
        // explains the refusal.
        let p = d.join("x.pt");
        std::fs::write(&p, b"\xfc\x01\x02\x03").unwrap();
        let e = format_err(Model::open(&p));
        assert_eq!(e.format, "pt", "{e}");
        let e = format_err(Model::open(d.join("nope.safetensors")));
        assert_eq!(e.kind, ErrorKind::Io);
        let z = d.join("a.zt");
        let mut w = tensorlane_core::zt::writer::Writer::new(Vec::new(), Default::default()).unwrap();
        w.add("a", tensorlane_core::DType::U8, &[1], &[1]).unwrap();
        std::fs::write(&z, w.finish().unwrap().sink).unwrap();
        // The project's own container is a model like any other.
        let m = Model::open(&z).unwrap();
        assert_eq!(m.format(), Format::Zt);
        assert_eq!(m.read(m.catalog().get("a").unwrap()).unwrap().as_ref(), &[1]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
