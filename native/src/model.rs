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
//! `.zt` and Tenso files are not models in this sense: the `.zt` reader
//! ([`tensorlane_core::zt::reader::Reader`], in the CLI through its `zt_tools`) knows their
//! layouts, parts, shards and digests, which a [`Catalog`] cannot express. [`Model::open`]
//! refuses them with a message that says so.
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

use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, Catalog, ElementType, ErrorKind, FormatError, TensorInfo};
use tensorlane_core::source::ReadAt;
use tensorlane_core::stats::{self, StatsOptions, TensorStats};

use crate::Error;
use crate::source::{MmapSource, Source};

/// A model file and its companions, mapped (or remote), with the catalog of its tensors.
#[derive(Debug)]
pub struct Model {
    path: PathBuf,
    catalog: Catalog,
    /// `sources[k]` is the file named by `catalog.sources[k]` (0: the opened file).
    sources: Vec<Source>,
    /// The resolved path of each source.
    paths: Vec<PathBuf>,
}

/// Whether `format` is one [`Model`] reads (a foreign model format, not `.zt` or Tenso).
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
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    if name.ends_with(".safetensors.index.json") {
        return Some(Format::SafetensorsIndex);
    }
    Some(match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "safetensors" => Format::Safetensors,
        "gguf" => Format::Gguf,
        "pt" | "pth" | "bin" | "ckpt" => Format::PyTorch,
        "npy" => Format::Npy,
        "npz" => Format::Npz,
        "onnx" => Format::Onnx,
        "h5" | "hdf5" => Format::Hdf5,
        _ => return None,
    })
}

/// The format of a model file: from its first bytes, else (when they match nothing) from its name
/// ([`format_from_name`]). `None` when neither tells.
pub fn model_format<S: ReadAt + ?Sized>(path: &Path, src: &S) -> Option<Format> {
    formats::detect_source(src)
        .ok()
        .flatten()
        .or_else(|| format_from_name(path))
}

/// [`model_format`], or an error that lists what is recognised.
fn detect_format<S: ReadAt + ?Sized>(path: &Path, src: &S) -> Result<Format, FormatError> {
    model_format(path, src).ok_or_else(|| {
        FormatError::new(
            "formats",
            ErrorKind::Unsupported,
            format!(
                "{}: the first bytes match no known format (safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5, .zt, \
                 Tenso)",
                path.display()
            ),
        )
    })
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
}

impl Companions {
    /// Opens companion `rel` (once) and returns its source.
    fn get(&mut self, rel: &str) -> Result<&(PathBuf, Source), FormatError> {
        if !self.opened.contains_key(rel) {
            let opened = match &self.base {
                Base::Dir(dir) => {
                    let path = resolve_companion(self.format, dir, rel)?;
                    let src = MmapSource::open(&path).map_err(|e| io_error(self.format, &path, &e))?;
                    (path, Source::Mapped(src))
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

    /// Opens companion `rel` as `format` on its own (a shard or a split).
    fn open_as(&mut self, format: Format, rel: &str) -> Result<Catalog, FormatError> {
        let (path, src) = self.get(rel)?;
        formats::open_as(format, src).map_err(|mut e| {
            e.message = format!("{} (in {})", e.message, path.display());
            e
        })
    }
}

impl Model {
    /// Opens the model file at `path` and every companion file it names (see the module docs).
    /// `path` may be a URL (feature `remote`: `s3://`, `gs://`, `az://`, `http(s)://`), opened with
    /// [`crate::remote::default_options`].
    pub fn open(path: impl AsRef<Path>) -> Result<Model, Error> {
        let path = path.as_ref();
        let root = Source::open(path)
            .map_err(|e| FormatError::new("formats", ErrorKind::Io, e.to_string().replace("read failed: ", "")))?;
        Model::from_source(path, root)
    }

    /// Like [`open`](Self::open), for a file the caller has already opened (to detect its
    /// format, say): `root` is the map (or remote source) of `path`, which is used for its name and
    /// folder only.
    pub fn from_source(path: impl AsRef<Path>, root: impl Into<Source>) -> Result<Model, Error> {
        Ok(Model::catalogue(path.as_ref(), root.into())?)
    }

    /// [`from_source`](Self::from_source) with the core's error type.
    fn catalogue(path: &Path, root: Source) -> Result<Model, FormatError> {
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
        };
        let catalog = match format {
            f if !is_model_format(f) => {
                return Err(FormatError::new(
                    name,
                    ErrorKind::Unsupported,
                    format!(
                        "{} is a {name} file, read by the .zt / Tenso readers (`tensorlane inspect` picks them), not \
                         as a foreign model format",
                        path.display()
                    ),
                ));
            }
            Format::SafetensorsIndex => {
                formats::safetensors::open_index(&root, &mut |shard| companions.open_as(Format::Safetensors, shard))?
            }
            Format::Gguf => {
                let first = formats::open_as(Format::Gguf, &root)?;
                let file_name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                formats::gguf::open_splits(first, &file_name, &mut |part| companions.open_as(Format::Gguf, part))?
            }
            other => formats::open_as(other, &root)?,
        };
        let mut sources = vec![root];
        let mut paths = vec![path.to_path_buf()];
        for rel in catalog.sources.iter().skip(1) {
            let (p, s) = companions.get(rel)?;
            paths.push(p.clone());
            sources.push(s.clone());
        }
        let sizes: Vec<u64> = sources.iter().map(ReadAt::size).collect();
        catalog.check_ranges(&sizes)?;
        Ok(Model {
            path: path.to_path_buf(),
            catalog,
            sources,
            paths,
        })
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

    /// The tensor's bytes in C order, little-endian (see [`formats::read`]): borrowed from the
    /// map when [`TensorInfo::is_zero_copy`], otherwise decoded (inflated, gathered, swapped).
    pub fn read(&self, t: &TensorInfo) -> Result<Cow<'_, [u8]>, Error> {
        let refs: Vec<&Source> = self.sources.iter().collect();
        Ok(formats::read(self.catalog.format.name(), t, &refs)?)
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
            .map(|(s, r)| remote(*s).expect("runs are remote").fetch(r.clone()))
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
        let mut received: std::collections::VecDeque<(usize, bytes::Bytes)> = Default::default();
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
                &received[0].1
            } else {
                joined.clear();
                for (_, p) in received.iter().take(b - a + 1) {
                    joined.extend_from_slice(p);
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
        let refs: Vec<&Source> = self.sources.iter().collect();
        Ok(stats::tensor_stats(
            self.catalog.format.name(),
            t,
            &refs,
            opts,
            progress,
        )?)
    }

    /// A ggml tensor's values as f32 ([`formats::ggml::dequantize`] of its blocks). Other element
    /// types are refused ([`ErrorKind::Unsupported`]).
    pub fn dequantize(&self, t: &TensorInfo) -> Result<Vec<f32>, Error> {
        match t.ty {
            ElementType::Ggml(g) => {
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
        // No content matches, but the name does: that format's parser explains the refusal.
        let p = d.join("x.bin");
        std::fs::write(&p, b"hello, world").unwrap();
        let e = format_err(Model::open(&p));
        assert_eq!(e.format, "pt", "{e}");
        let e = format_err(Model::open(d.join("nope.safetensors")));
        assert_eq!(e.kind, ErrorKind::Io);
        let z = d.join("a.zt");
        let mut w = tensorlane_core::zt::writer::Writer::new(Vec::new(), Default::default()).unwrap();
        w.add("a", tensorlane_core::DType::U8, &[1], &[1]).unwrap();
        std::fs::write(&z, w.finish().unwrap().sink).unwrap();
        let e = format_err(Model::open(&z));
        assert!(e.message.contains(".zt"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
