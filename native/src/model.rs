//! [`Model`]: a foreign model file (safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5) opened from
//! disk, with the companion files it names.
//!
//! [`Model::open`] memory-maps the file, recognises its format by content
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

use tensorlane_core::detect::{Format, Identified};
use tensorlane_core::formats::{self, Catalog, ElementType, ErrorKind, FormatError, TensorInfo};
use tensorlane_core::source::ReadAt;
use tensorlane_core::stats::{self, StatsOptions, TensorStats};

use crate::Error;
use crate::source::MmapSource;

/// A model file and its companions, mapped, with the catalog of its tensors.
#[derive(Debug)]
pub struct Model {
    path: PathBuf,
    catalog: Catalog,
    /// `sources[k]` is the file named by `catalog.sources[k]` (0: the opened file).
    sources: Vec<MmapSource>,
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
///
/// The rule is the one every front end shares ([`tensorlane_core::detect::identify`]): text, raw
/// data, ONNX external data and empty files are no format, whatever their name.
pub fn model_format(path: &Path, src: &MmapSource) -> Option<Format> {
    match identify(path, src) {
        Ok(Identified::Format(f)) => Some(f),
        _ => None,
    }
}

/// What `path` is taken as ([`formats::identify_source`] with its file name).
pub fn identify(path: &Path, src: &MmapSource) -> Result<Identified, FormatError> {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    formats::identify_source(src, &name)
}

/// [`model_format`], or an error that says what the file looks like instead.
fn detect_format(path: &Path, src: &MmapSource) -> Result<Format, FormatError> {
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

/// Companion files opened while the catalog is built (shards, splits), kept for reading.
struct Companions {
    format: &'static str,
    dir: PathBuf,
    opened: HashMap<String, (PathBuf, MmapSource)>,
}

impl Companions {
    /// Maps companion `rel` (once) and returns its source.
    fn get(&mut self, rel: &str) -> Result<&(PathBuf, MmapSource), FormatError> {
        if !self.opened.contains_key(rel) {
            let path = resolve_companion(self.format, &self.dir, rel)?;
            let src = MmapSource::open(&path).map_err(|e| io_error(self.format, &path, &e))?;
            self.opened.insert(rel.to_string(), (path, src));
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
    pub fn open(path: impl AsRef<Path>) -> Result<Model, Error> {
        let path = path.as_ref();
        let root = MmapSource::open(path).map_err(|e| io_error("formats", path, &e))?;
        Model::from_source(path, root)
    }

    /// Like [`open`](Self::open), for a file the caller has already mapped (to detect its
    /// format, say): `root` is the map of `path`, which is used for its name and folder only.
    pub fn from_source(path: impl AsRef<Path>, root: MmapSource) -> Result<Model, Error> {
        Ok(Model::catalogue(path.as_ref(), root)?)
    }

    /// [`from_source`](Self::from_source) with the core's error type.
    fn catalogue(path: &Path, root: MmapSource) -> Result<Model, FormatError> {
        let format = detect_format(path, &root)?;
        let name = format.name();
        let parent = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = parent.canonicalize().map_err(|e| io_error(name, parent, &e))?;
        let mut companions = Companions {
            format: name,
            dir,
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
        let refs: Vec<&MmapSource> = self.sources.iter().collect();
        Ok(formats::read(self.catalog.format.name(), t, &refs)?)
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
        let refs: Vec<&MmapSource> = self.sources.iter().collect();
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
        let e = format_err(Model::open(&z));
        assert!(e.message.contains(".zt"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
