//! Every model format (safetensors, GGUF, PyTorch, NumPy, ONNX, HDF5, `.zt` v2 and legacy, Tenso
//! packet files) for both JavaScript backends, so that `open()` lists and reads every format
//! identically on both, through the core's one [`Catalog`].
//!
//! ## Sparse sources and the "need" protocol
//!
//! The JavaScript layer (`js/formats.js`) does the I/O. A [`Session`] holds, per file, only the
//! byte ranges ("pieces") JS has fetched so far. A parser runs over these sparse sources; when it
//! asks for bytes that are not there, [`Sparse`] records the first missing range and fails the
//! read. Whatever the parser then returns (error or not), the session reports
//! `{"need": {"source", "offset", "len"}}` instead; JS fetches that range (from a `Blob`, a file
//! descriptor or a buffer), adds it with [`Session::add_piece`] and runs the step again. A
//! companion file (safetensors shard, GGUF split, ONNX external data) that JS has not registered
//! yet is asked for the same way, with `"register": true`; a `.zt` shard, named by the root's shard
//! table, comes with the file names it may have (`"candidates"`, [`formats::zt::shard_candidates`]),
//! and one that cannot be found is registered as missing ([`Session::add_missing`]): the root
//! still lists, its tensors in that shard fail when read. So a 50 GB file lists by reading only
//! its header-like bytes, in a bounded number of rounds (JS grows sequential reads
//! geometrically).
//!
//! Pieces fetched to open a file stay for the life of the session (they are the header bytes);
//! pieces fetched to read one tensor are *transient* and dropped when that read ends.

use std::cell::{Cell, RefCell};

use serde_json::{Map, Value as J, json};
use tensorlane_core::detect::{Format, Identified};
use tensorlane_core::formats::{
    self, Catalog, ElementType, ErrorKind, FormatError, Meta, ReadLimits, Storage, TensorInfo,
};
use tensorlane_core::source::{ReadAt, SourceError, check_range};

/// One file of which only some ranges are loaded.
pub struct Sparse {
    name: String,
    size: u64,
    /// Disjoint, non-adjacent ranges `(offset, bytes)`, sorted by offset.
    pieces: Vec<(u64, Vec<u8>)>,
    /// Pieces for the current tensor read only.
    transient: Vec<(u64, Vec<u8>)>,
    /// The first range asked for that was not loaded.
    miss: Cell<Option<(u64, u64)>>,
    /// Why the file is not there (a `.zt` shard not found): reads from it fail with this.
    missing: Option<String>,
}

/// Adds `(offset, bytes)` to sorted, disjoint `pieces`, merging with every piece it overlaps or
/// touches (so that a read spanning two fetches is served from one slice).
fn insert_piece(pieces: &mut Vec<(u64, Vec<u8>)>, offset: u64, bytes: Vec<u8>) {
    let end = offset + bytes.len() as u64;
    let touching = |&(o, ref b): &(u64, Vec<u8>)| o <= end && offset <= o + b.len() as u64;
    let first = pieces.iter().position(touching);
    let Some(first) = first else {
        let at = pieces.partition_point(|(o, _)| *o < offset);
        pieces.insert(at, (offset, bytes));
        return;
    };
    let last = pieces.iter().rposition(touching).unwrap_or(first);
    let start = pieces[first].0.min(offset);
    let stop = (pieces[last].0 + pieces[last].1.len() as u64).max(end);
    let mut merged = vec![0u8; (stop - start) as usize];
    for (o, b) in pieces.drain(first..=last) {
        let at = (o - start) as usize;
        merged[at..at + b.len()].copy_from_slice(&b);
    }
    let at = (offset - start) as usize;
    merged[at..at + bytes.len()].copy_from_slice(&bytes);
    pieces.insert(first, (start, merged));
}

fn find(pieces: &[(u64, Vec<u8>)], offset: u64, end: u64) -> Option<&[u8]> {
    pieces.iter().find_map(|(o, b)| {
        (offset >= *o && end <= o + b.len() as u64).then(|| &b[(offset - o) as usize..(end - o) as usize])
    })
}

impl Sparse {
    fn new(name: &str, size: u64) -> Sparse {
        Sparse {
            name: name.to_string(),
            size,
            pieces: Vec::new(),
            transient: Vec::new(),
            miss: Cell::new(None),
            missing: None,
        }
    }
}

impl ReadAt for Sparse {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        let len = buf.len() as u64;
        check_range(offset, len, self.size)?;
        match self.slice(offset, len) {
            Some(s) => {
                buf.copy_from_slice(s);
                Ok(())
            }
            None => {
                if self.miss.get().is_none() {
                    self.miss.set(Some((offset, len)));
                }
                Err(SourceError::Io(format!(
                    "bytes [{offset}, +{len}) of '{}' are not loaded yet",
                    self.name
                )))
            }
        }
    }

    fn slice(&self, offset: u64, len: u64) -> Option<&[u8]> {
        check_range(offset, len, self.size).ok()?;
        if len == 0 {
            return Some(&[]);
        }
        let end = offset + len;
        find(&self.pieces, offset, end).or_else(|| find(&self.transient, offset, end))
    }
}

/// What a step of the session came to.
pub enum Step<T> {
    /// Finished.
    Done(T),
    /// Bytes `[offset, offset + len)` of `source` are needed (`register`: the source itself is
    /// not known yet; JS must add it with its size first).
    Need {
        /// Source name (`""` is the opened file; others are companion paths).
        source: String,
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u64,
        /// The source is not registered yet.
        register: bool,
        /// For a source to register: the file names it may have, in order (a `.zt` shard);
        /// empty when `source` is the name.
        candidates: Vec<String>,
    },
    /// The format refused the file.
    Failed(FormatError),
}

impl<T> Step<T> {
    /// The step as JSON (`Done` gives `{"done": true}`; its value travels separately).
    pub fn status(&self) -> String {
        match self {
            Step::Done(_) => json!({ "done": true }).to_string(),
            Step::Need {
                source,
                offset,
                len,
                register,
                candidates,
            } => json!({ "need": {
                "source": source, "offset": offset, "len": len, "register": register, "candidates": candidates,
            } })
            .to_string(),
            Step::Failed(e) => json!({ "error": error_json(e) }).to_string(),
        }
    }
}

/// A [`FormatError`] as JSON: `{format, kind, offset, tensor, key, message, display}`.
pub fn error_json(e: &FormatError) -> J {
    json!({
        "format": e.format,
        "kind": e.kind.name(),
        "offset": e.offset,
        "tensor": e.tensor,
        "key": e.key,
        "message": e.message,
        "display": e.to_string(),
    })
}

/// The format a name selects (`open(src, {format})`): the names [`Format::name`] gives.
pub fn format_from_name(name: &str) -> Option<Format> {
    Some(match name {
        "safetensors" => Format::Safetensors,
        "safetensors-index" => Format::SafetensorsIndex,
        "gguf" => Format::Gguf,
        "pt" => Format::PyTorch,
        "pt-legacy" => Format::PyTorchLegacy,
        "npy" => Format::Npy,
        "npz" => Format::Npz,
        "onnx" => Format::Onnx,
        "hdf5" => Format::Hdf5,
        "zt" => Format::Zt,
        "zt-v1" => Format::ZtV1,
        "zt-v0" => Format::ZtV0,
        "tenso" => Format::Tenso,
        _ => return None,
    })
}

/// An open (or opening) file with its companions, over sparse sources.
pub struct Session {
    name: String,
    forced: Option<Format>,
    /// `sources[0]` is the opened file (name `""`); companions follow in registration order.
    sources: Vec<Sparse>,
    catalog: Option<Catalog>,
}

impl Session {
    /// A session for a file of `size` bytes called `name` (its file name, which GGUF splits are
    /// named after; may be empty); `format` forces a format (`""`: detect by content).
    pub fn new(size: u64, name: &str, format: &str) -> Result<Session, String> {
        let forced = if format.is_empty() {
            None
        } else {
            Some(format_from_name(format).ok_or_else(|| format!("unknown format {format:?}"))?)
        };
        Ok(Session {
            name: name.to_string(),
            forced,
            sources: vec![Sparse::new("", size)],
            catalog: None,
        })
    }

    /// Registers companion file `name` (a path relative to the opened file's folder) of `size` bytes.
    pub fn add_source(&mut self, name: &str, size: u64) {
        if self.source(name).is_none() {
            self.sources.push(Sparse::new(name, size));
        }
    }

    /// Registers companion `name` as not found (`why` says where it was looked for, what to pass):
    /// the model still opens, and reading a tensor stored there fails with
    /// [`ErrorKind::Companion`] and `why` (as `tensorlane::model::Model` does for a `.zt` shard).
    pub fn add_missing(&mut self, name: &str, why: &str) {
        if self.source(name).is_none() {
            let mut s = Sparse::new(name, 0);
            s.missing = Some(why.to_string());
            self.sources.push(s);
        }
    }

    /// Adds fetched bytes of source `name` at `offset` (`transient`: for the current read only).
    pub fn add_piece(&mut self, name: &str, offset: u64, bytes: Vec<u8>, transient: bool) -> Result<(), String> {
        let s = self
            .sources
            .iter_mut()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("no source named {name:?}"))?;
        if check_range(offset, bytes.len() as u64, s.size).is_err() {
            return Err(format!("piece [{offset}, +{}) lies outside {name:?}", bytes.len()));
        }
        insert_piece(if transient { &mut s.transient } else { &mut s.pieces }, offset, bytes);
        Ok(())
    }

    /// Bytes held for the opened file and its companions (header pieces; transient ones included).
    pub fn held_bytes(&self) -> u64 {
        self.sources
            .iter()
            .flat_map(|s| s.pieces.iter().chain(&s.transient))
            .map(|(_, b)| b.len() as u64)
            .sum()
    }

    fn source(&self, name: &str) -> Option<&Sparse> {
        self.sources.iter().find(|s| s.name == name)
    }

    fn clear_misses(&self) {
        for s in &self.sources {
            s.miss.set(None);
        }
    }

    /// The first recorded miss, as a step.
    fn missed<T>(&self) -> Option<Step<T>> {
        self.sources.iter().find_map(|s| {
            s.miss.get().map(|(offset, len)| Step::Need {
                source: s.name.clone(),
                offset,
                len,
                register: false,
                candidates: Vec::new(),
            })
        })
    }

    fn register<T>(name: &str) -> Step<T> {
        Step::Need {
            source: name.to_string(),
            offset: 0,
            len: 0,
            register: true,
            candidates: Vec::new(),
        }
    }

    /// Runs one attempt of `f`: what it needs first when it missed bytes; transient pieces are
    /// dropped once it is done or failed.
    fn attempt<T>(&mut self, f: impl FnOnce(&Self) -> Step<T>) -> Step<T> {
        self.clear_misses();
        let step = f(self);
        let step = self.missed().unwrap_or(step);
        if !matches!(step, Step::Need { .. }) {
            for s in &mut self.sources {
                s.transient.clear();
            }
        }
        step
    }

    /// The size `check_ranges` sees for catalog source `name` (a missing one holds every range).
    fn size_of(&self, name: &str) -> u64 {
        self.source(name)
            .map_or(0, |s| if s.missing.is_some() { u64::MAX } else { s.size })
    }

    /// A [`ErrorKind::Companion`] error when `storage` reads from a source registered as missing.
    fn check_present(&self, cat: &Catalog, t: &TensorInfo, storage: &Storage) -> Result<(), FormatError> {
        for (k, _, _) in storage.stored_ranges() {
            let why = cat
                .sources
                .get(k)
                .and_then(|n| self.source(n))
                .and_then(|s| s.missing.as_ref());
            if let Some(why) = why {
                return Err(
                    FormatError::new(cat.format.name(), ErrorKind::Companion, why.clone()).tensor(t.name.clone())
                );
            }
        }
        Ok(())
    }

    /// The `.zt` v2 root validated again with every shard that was found supplied
    /// ([`tensorlane_core::zt::reader::Reader::with_shard`]: exact size and a valid container
    /// frame, as `Model::open` checks them).
    fn zt_reader(&self, cat: &Catalog) -> Result<ZtReader<&Sparse>, FormatError> {
        let shards = cat.sources.iter().skip(1).filter_map(|name| {
            let src = self.source(name).filter(|s| s.missing.is_none())?;
            Some((name.clone(), src))
        });
        zt_with_shards(&self.sources[0], shards.collect())
    }

    /// One attempt at opening: the catalog as JSON, or what is needed first.
    pub fn open(&mut self) -> Step<String> {
        self.clear_misses();
        let step = self.try_open();
        if let Some(need) = self.missed() {
            return need;
        }
        match step {
            Step::Done(cat) => {
                // Every companion the catalog names must be known (its size, at least) so that its
                // ranges are checked now, not when a tensor is read.
                if let Some(name) = cat.sources.iter().skip(1).find(|n| self.source(n).is_none()) {
                    let mut need = Self::register(name);
                    if let (Format::Zt, Step::Need { candidates, .. }) = (cat.format, &mut need) {
                        *candidates = formats::zt::shard_candidates(&self.name, name).to_vec();
                    }
                    return need;
                }
                // A .zt shard is checked against the root's shard table first (its size says more
                // than a range past its end).
                if cat.format == Format::Zt && cat.sources.len() > 1 {
                    let checked = self.zt_reader(&cat).map(|_| ());
                    if let Some(need) = self.missed() {
                        return need;
                    }
                    if let Err(e) = checked {
                        return Step::Failed(e);
                    }
                }
                let sizes: Vec<u64> = cat.sources.iter().map(|n| self.size_of(n)).collect();
                if let Err(e) = cat.check_ranges(&sizes) {
                    return Step::Failed(e);
                }
                let out = catalog_json_string(&cat);
                self.catalog = Some(cat);
                Step::Done(out)
            }
            Step::Need {
                source,
                offset,
                len,
                register,
                candidates,
            } => Step::Need {
                source,
                offset,
                len,
                register,
                candidates,
            },
            Step::Failed(e) => Step::Failed(e),
        }
    }

    fn try_open(&self) -> Step<Catalog> {
        let main = &self.sources[0];
        let format = match self.forced {
            Some(f) => f,
            // The rule the CLI uses too (tensorlane_core::detect::identify).
            None => match formats::identify_source(main, &self.name) {
                Ok(Identified::Format(f)) => f,
                Ok(Identified::Unrecognised(u)) => {
                    let e = formats::unrecognised_error(u);
                    let mut fail = FormatError::new(
                        "formats",
                        e.kind,
                        format!("{}; pass {{format}} to force one", e.message),
                    );
                    // Raw data the .zt reader has something to say about (as the CLI asks it): it
                    // ends with the .zt magic (a damaged header), or is too short for any .zt.
                    let size = main.size();
                    let ends_zt = size >= 8
                        && formats::bytes_at("zt", main, size - 8, 8)
                            .is_ok_and(|b| *b == tensorlane_core::zt::format::MAGIC);
                    if u == tensorlane_core::detect::Unrecognised::RawData && (ends_zt || size < 48) {
                        match formats::zt::open(main) {
                            Ok(c) => return Step::Done(c),
                            Err(z) => fail.message = format!("{}; read as .zt: {}", fail.message, z.message),
                        }
                    }
                    return Step::Failed(fail);
                }
                Err(e) => return Step::Failed(e),
            },
        };
        // A companion asked for by a multi-file reader that JS has not registered yet.
        let unknown: RefCell<Option<String>> = RefCell::new(None);
        let result = match format {
            Format::SafetensorsIndex => {
                formats::safetensors::open_index(main, &mut |n| self.open_part(n, Format::Safetensors, &unknown))
            }
            Format::Gguf => formats::gguf::open(main).and_then(|first| {
                formats::gguf::open_splits(first, &self.name, &mut |n| self.open_part(n, Format::Gguf, &unknown))
            }),
            f => formats::open_as(f, main),
        };
        if let Some(name) = unknown.into_inner() {
            return Self::register(&name);
        }
        match result {
            Ok(c) => Step::Done(c),
            Err(e) => Step::Failed(e),
        }
    }

    /// Opens companion `name` as `format` for a multi-file reader (shards, splits); an unknown
    /// companion is noted in `unknown` so that JS registers it and the step runs again.
    fn open_part(&self, name: &str, format: Format, unknown: &RefCell<Option<String>>) -> Result<Catalog, FormatError> {
        let fmt = format.name();
        formats::check_companion_path(fmt, name)?;
        match self.source(name) {
            Some(src) => formats::open_as(format, src),
            None => {
                unknown.borrow_mut().get_or_insert_with(|| name.to_string());
                Err(FormatError::new(
                    fmt,
                    ErrorKind::Companion,
                    format!("companion file '{name}' is not loaded"),
                ))
            }
        }
    }

    /// The opened catalog (`None` until [`Session::open`] has returned it): what runtimes built
    /// on the reader describe the model from (the browser's text generation, `tensorlane-wasm`).
    pub fn opened_catalog(&self) -> Option<&Catalog> {
        self.catalog.as_ref()
    }

    /// The opened catalog.
    fn catalog(&self) -> Result<&Catalog, FormatError> {
        self.catalog
            .as_ref()
            .ok_or_else(|| FormatError::new("formats", ErrorKind::Io, "the file is not open"))
    }

    /// One attempt at reading tensor `index` (C-order, little-endian bytes) under the default
    /// [`ReadLimits`] (see [`Session::read_limited`]).
    pub fn read(&mut self, index: usize) -> Step<Vec<u8>> {
        self.read_limited(index, &ReadLimits::default())
    }

    /// One attempt at reading tensor `index` (C-order, little-endian bytes): a tensor whose whole
    /// read would allocate more than `limits.max_tensor_bytes` fails with [`ErrorKind::Limit`]
    /// (naming the tensor, the size and the option) before anything is inflated or gathered
    /// ([`formats::read_limited`]). Transient pieces are dropped once the read is done or failed.
    pub fn read_limited(&mut self, index: usize, limits: &ReadLimits) -> Step<Vec<u8>> {
        self.attempt(|s| s.try_read(index, limits))
    }

    /// One attempt at reading part `part` of tensor `index`, a tensor stored as several parts (a
    /// `.zt` sparse or group-quantized object): its decoded bytes, checked against the part's
    /// digest ([`formats::read_part`]), under `limits`.
    pub fn read_part(&mut self, index: usize, part: &str, limits: &ReadLimits) -> Step<Vec<u8>> {
        self.attempt(|s| {
            let (cat, t, srcs) = match s.tensor_sources(index) {
                Ok(x) => x,
                Err(step) => return step,
            };
            if let Storage::Parts(p) = &t.storage
                && let Some(found) = p.parts.iter().find(|x| x.name == part)
                && let Err(e) = s.check_present(cat, t, &found.storage)
            {
                return Step::Failed(e);
            }
            match formats::read_part(cat.format.name(), t, part, &srcs, &cat.checks, limits) {
                Ok(b) => Step::Done(b.into_owned()),
                Err(e) => Step::Failed(e),
            }
        })
    }

    /// One attempt at verifying the whole file: a `.zt` v2 file by its own deep verify (every
    /// rule, layout profile and part digest, every shard found; `{format, checks, tensors,
    /// partsDigestChecked, partsWithoutDigest, shardsChecked, unresolved: [[object, part]],
    /// dataShard}`), any other format by every checksum it carries ([`Catalog::checks`]) and every
    /// tensor (and part) read in full (`{format, checks, tensors}`).
    pub fn verify(&mut self) -> Step<String> {
        self.attempt(|s| match s.try_verify() {
            Ok(j) => Step::Done(j.to_string()),
            Err(e) => Step::Failed(e),
        })
    }

    fn try_verify(&self) -> Result<J, FormatError> {
        let cat = self.catalog()?;
        let format = cat.format.name();
        if cat.format == Format::Zt {
            return zt_verify_json(&self.zt_reader(cat)?, cat.tensors.len());
        }
        let srcs: Vec<&Sparse> = cat.sources.iter().filter_map(|n| self.source(n)).collect();
        if srcs.len() != cat.sources.len() {
            return Err(FormatError::new(
                format,
                ErrorKind::Companion,
                "a companion file is not loaded",
            ));
        }
        for c in &cat.checks {
            if let Some(why) = srcs.get(c.source).and_then(|s| s.missing.as_ref()) {
                return Err(FormatError::new(
                    format,
                    ErrorKind::Companion,
                    format!("{}: {why}", c.what),
                ));
            }
            formats::check_integrity(format, c, &srcs)?;
        }
        let limits = ReadLimits::default();
        for t in &cat.tensors {
            self.check_present(cat, t, &t.storage)?;
            match &t.storage {
                Storage::Parts(p) => {
                    for part in &p.parts {
                        formats::read_part(format, t, &part.name, &srcs, &cat.checks, &limits)?;
                    }
                }
                _ => formats::read_chunks(format, t, &srcs, &cat.checks, &limits, 1 << 20, &mut |_| Ok(()))?,
            }
        }
        Ok(json!({ "format": format, "checks": cat.checks.len(), "tensors": cat.tensors.len() }))
    }

    /// One attempt at the statistics of tensor `index` ([`tensorlane_core::stats::tensor_stats`]:
    /// a deflated or byte-swapped tensor is inflated in `chunk_bytes` pieces per pass, never held
    /// whole, so a member that declares a huge array costs memory by the piece, not by its size),
    /// as the JSON of [`crate::stats::tensor_stats_json`], or what is needed first. Transient
    /// pieces are dropped once done or failed.
    pub fn stats(&mut self, index: usize, bins: usize, chunk_bytes: usize) -> Step<String> {
        self.attempt(|s| s.try_stats(index, bins, chunk_bytes))
    }

    fn try_stats(&self, index: usize, bins: usize, chunk_bytes: usize) -> Step<String> {
        let (cat, t, srcs) = match self.tensor_sources(index) {
            Ok(x) => x,
            Err(step) => return step,
        };
        let opts = tensorlane_core::stats::StatsOptions {
            bins,
            chunk_bytes: chunk_bytes.max(1),
        };
        match tensorlane_core::stats::tensor_stats(cat.format.name(), t, &srcs, &opts, &mut |_, _| {}) {
            Ok(s) => Step::Done(crate::stats::tensor_stats_json(&s).to_string()),
            Err(e) => Step::Failed(e),
        }
    }

    /// The catalog, tensor `index` and the sources it reads, or the step that stops the read.
    #[allow(clippy::type_complexity)]
    fn tensor_sources<T>(&self, index: usize) -> Result<(&Catalog, &TensorInfo, Vec<&Sparse>), Step<T>> {
        let cat = self.catalog().map_err(Step::Failed)?;
        let Some(t) = cat.tensors.get(index) else {
            return Err(Step::Failed(FormatError::new(
                cat.format.name(),
                ErrorKind::OutOfBounds,
                format!("no tensor #{index}"),
            )));
        };
        let mut srcs = Vec::with_capacity(cat.sources.len());
        for name in &cat.sources {
            match self.source(name) {
                Some(s) => srcs.push(s),
                None => return Err(Self::register(name)),
            }
        }
        if !matches!(t.storage, Storage::Parts(_)) {
            self.check_present(cat, t, &t.storage).map_err(Step::Failed)?;
        }
        Ok((cat, t, srcs))
    }

    fn try_read(&self, index: usize, limits: &ReadLimits) -> Step<Vec<u8>> {
        let (cat, t, srcs) = match self.tensor_sources(index) {
            Ok(x) => x,
            Err(step) => return step,
        };
        match formats::read_limited(cat.format.name(), t, &srcs, &cat.checks, limits) {
            Ok(b) => Step::Done(b.into_owned()),
            Err(e) => Step::Failed(e),
        }
    }
}

impl Session {
    /// One attempt at reading the graph of an opened ONNX model ([`graph_json`]), or what is
    /// needed first. Other formats have no graph (`unsupported`).
    pub fn graph(&mut self) -> Step<String> {
        self.clear_misses();
        let step = match self.catalog() {
            Err(e) => Step::Failed(e),
            Ok(cat) if cat.format != Format::Onnx => Step::Failed(FormatError::new(
                cat.format.name(),
                ErrorKind::Unsupported,
                "only ONNX models have a computation graph",
            )),
            Ok(_) => match formats::onnx_graph::read_graph(&self.sources[0]) {
                Ok(g) => Step::Done(graph_json(&g).to_string()),
                Err(e) => Step::Failed(e),
            },
        };
        self.missed().unwrap_or(step)
    }
}

use tensorlane_core::zt::reader::Reader as ZtReader;

/// A `.zt` v2 root validated with the shards that were found (`(shard name, source)`), each
/// checked by [`ZtReader::with_shard`] (exact size, a valid container frame); errors as the
/// catalog's ([`formats::zt::error`]: the rule's name leads the message).
pub fn zt_with_shards<S: ReadAt>(root: S, shards: Vec<(String, S)>) -> Result<ZtReader<S>, FormatError> {
    ZtReader::open(root)
        .and_then(|r| r.with_shards(shards))
        .map_err(formats::zt::error)
}

/// The `.zt` deep verify ([`ZtReader::verify`]: every rule, layout profile, part digest and
/// supplied shard's digest) as the JSON `verify()` gives: `{format, checks, tensors,
/// partsDigestChecked, partsWithoutDigest, shardsChecked, unresolved: [[object, part]], dataShard}`.
pub fn zt_verify_json<S: ReadAt>(reader: &ZtReader<S>, tensors: usize) -> Result<J, FormatError> {
    let r = reader
        .verify()
        .map_err(|e| formats::zt::error(reader.with_location(e)))?;
    Ok(json!({
        "format": "zt",
        "checks": r.parts_digest_checked + r.shards_checked,
        "tensors": tensors,
        "partsDigestChecked": r.parts_digest_checked,
        "partsWithoutDigest": r.parts_without_digest,
        "shardsChecked": r.shards_checked,
        "unresolved": r.unresolved.iter().map(|(o, p)| [o, p]).collect::<Vec<_>>(),
        "dataShard": reader.is_data_shard(),
    }))
}

/// The graph of the ONNX model in `bytes` (a whole file in memory, e.g. a mapped one) as
/// [`graph_json`]; errors are a [`FormatError`] as JSON.
pub fn onnx_graph_of_bytes(bytes: &[u8]) -> Result<String, String> {
    formats::onnx_graph::read_graph(bytes)
        .map(|g| graph_json(&g).to_string())
        .map_err(|e| error_json(&e).to_string())
}

/// An ONNX [`formats::onnx_graph::Graph`] as JSON: `{name, ir_version, producer_name,
/// producer_version, opset_import: {domain: version}, inputs, outputs: [{name, elem_type, shape}],
/// initializers: [name], nodes: [{name, op_type, domain, inputs, outputs, attributes: [{name, kind,
/// summary}]}]}`; `elem_type` is the ONNX name (`FLOAT`), `shape` a list of numbers and symbolic
/// names (`null` for an unknown dimension) or `null` when not given.
pub fn graph_json(g: &formats::onnx_graph::Graph) -> J {
    use formats::onnx_graph::{Dim, ValueInfo, elem_type_name};
    let vi = |v: &ValueInfo| {
        json!({
            "name": v.name,
            "elem_type": elem_type_name(v.elem_type),
            "shape": v.shape.as_ref().map(|s| s.iter().map(|d| match d {
                Dim::Value(n) => json!(n),
                Dim::Param(p) => json!(p),
                Dim::Unknown => J::Null,
            }).collect::<Vec<_>>()),
        })
    };
    let opsets: Map<String, J> = g.opset_import.iter().map(|(d, v)| (d.clone(), json!(v))).collect();
    json!({
        "name": g.name,
        "ir_version": g.ir_version,
        "producer_name": g.producer_name,
        "producer_version": g.producer_version,
        "opset_import": opsets,
        "inputs": g.inputs.iter().map(vi).collect::<Vec<_>>(),
        "outputs": g.outputs.iter().map(vi).collect::<Vec<_>>(),
        "initializers": g.initializers,
        "nodes": g.nodes.iter().map(|n| json!({
            "name": n.name, "op_type": n.op_type, "domain": n.domain,
            "inputs": n.inputs, "outputs": n.outputs,
            "attributes": n.attributes.iter().map(|a| json!({"name": a.name, "kind": a.kind, "summary": a.summary})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Dequantizes ggml blocks of type `ty` (GGUF) to f32.
pub fn ggml_dequantize(ty: u32, blocks: &[u8]) -> Result<Vec<f32>, String> {
    formats::ggml::dequantize(formats::ggml::GgmlType(ty), blocks).map_err(|e| error_json(&e).to_string())
}

// ---------------------------------------------------------------------------------------------
// Catalog -> JSON (read by js/formats.js)

/// An integer as a JSON number when JavaScript holds it exactly, else `{"$bigint": "..."}`.
fn int_json(v: i128) -> J {
    const SAFE: i128 = (1 << 53) - 1;
    if (-SAFE..=SAFE).contains(&v) {
        J::from(v as i64)
    } else {
        json!({ "$bigint": v.to_string() })
    }
}

/// A [`Meta`] value as JSON: big integers, non-finite floats and bytes as tagged objects
/// (`{"$bigint"}`, `{"$float"}`, `{"$bytes": hex}`), which `js/formats.js` revives.
pub fn meta_json(m: &Meta) -> J {
    match m {
        Meta::Null => J::Null,
        Meta::Bool(b) => J::Bool(*b),
        Meta::Int(i) => int_json(i128::from(*i)),
        Meta::UInt(u) => int_json(i128::from(*u)),
        Meta::Float(f) => serde_json::Number::from_f64(*f).map_or_else(
            || {
                let s = if f.is_nan() {
                    "nan"
                } else if *f > 0.0 {
                    "inf"
                } else {
                    "-inf"
                };
                json!({ "$float": s })
            },
            J::Number,
        ),
        Meta::Str(s) => J::String(s.clone()),
        Meta::Bytes(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            json!({ "$bytes": hex })
        }
        Meta::List(l) => J::Array(l.iter().map(meta_json).collect()),
        Meta::Map(kv) => pairs_json(kv),
    }
}

fn pairs_json(kv: &[(String, Meta)]) -> J {
    // Keys keep file order; a repeated key keeps its last value, as JSON objects do.
    let mut m = Map::new();
    for (k, v) in kv {
        m.insert(k.clone(), meta_json(v));
    }
    J::Object(m)
}

fn storage_json(t: &TensorInfo, sources: &[String]) -> J {
    let name = |i: &usize| sources.get(*i).cloned().unwrap_or_default();
    match &t.storage {
        Storage::Range { source, offset, len } => {
            json!({ "kind": "range", "source": name(source), "offset": offset, "length": len })
        }
        Storage::Deflate {
            source,
            offset,
            compressed,
            inflated,
            skip,
            len,
            ..
        } => json!({
            "kind": "deflate", "source": name(source), "offset": offset, "length": compressed,
            "inflated": inflated, "skip": skip, "tensorLength": len,
        }),
        Storage::Inline(b) => json!({ "kind": "inline", "length": b.len() }),
        Storage::Hdf5Chunked(c) => json!({ "kind": "chunked", "source": name(&c.source) }),
        Storage::Encoded {
            source,
            offset,
            len,
            decoded,
            codec,
        } => json!({
            "kind": "encoded", "source": name(source), "offset": offset, "length": len,
            "decoded": decoded, "codec": codec.name(),
        }),
        Storage::Parts(p) => json!({
            "kind": "parts",
            "layout": p.layout,
            "parts": p.parts.iter().map(|part| {
                let mut j = json!({
                    "name": part.name,
                    "dtype": part.ty.map(|t| t.name()).unwrap_or(part.type_name.as_str()),
                    "type": part.type_name,
                    "length": part.len,
                });
                let s = TensorInfo { storage: part.storage.clone(), ..t.clone() };
                j["storage"] = storage_json(&s, sources);
                j
            }).collect::<Vec<_>>(),
        }),
    }
}

fn tensor_json(t: &TensorInfo, sources: &[String]) -> J {
    let mut o = json!({
        "name": t.name,
        "dtype": t.ty.name(),
        "shape": t.shape,
        "nbytes": t.nbytes(),
        "storage": storage_json(t, sources),
        "zeroCopy": t.is_zero_copy(),
        "bigEndian": t.arrangement.big_endian,
        "view": t.arrangement.view.as_ref().map(|v| json!({ "offset": v.offset, "strides": v.strides })),
        "attributes": pairs_json(&t.attributes),
    });
    if let ElementType::Ggml(g) = t.ty {
        o["ggml"] = json!({
            "type": g.0,
            "name": g.name(),
            "quantized": g.is_quantized(),
            "blockSize": g.block_size(),
            "typeSize": g.type_size(),
        });
    }
    o
}

/// The catalog as JSON: `{format, tensors: [...], metadata: {...}, skipped: [{name, reason}],
/// sources: [...]}`. [`catalog_json_string`] writes the same text without building the value
/// (what the backends hand to JS).
pub fn catalog_json(cat: &Catalog) -> J {
    json!({
        "format": cat.format.name(),
        "tensors": cat.tensors.iter().map(|t| tensor_json(t, &cat.sources)).collect::<Vec<_>>(),
        "metadata": pairs_json(&cat.metadata),
        "skipped": cat.skipped.iter().map(|(n, r)| json!({ "name": n, "reason": r })).collect::<Vec<_>>(),
        "sources": cat.sources,
    })
}

/// `s` as a JSON string literal (serde_json's escaping) appended to `out`.
fn put_str(out: &mut String, s: &str) {
    // Serialising a string cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// `v` (a number or null) appended to `out`.
fn put_opt(out: &mut String, v: Option<u64>) {
    match v {
        Some(v) => out.push_str(&v.to_string()),
        None => out.push_str("null"),
    }
}

fn put_u64s(out: &mut String, v: &[u64]) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&x.to_string());
    }
    out.push(']');
}

/// [`tensor_json`]`(t).to_string()` appended to `out`, keys in the same (sorted) order, without
/// building a map per tensor.
fn put_tensor(out: &mut String, t: &TensorInfo, sources: &[String]) {
    let source = |i: &usize| sources.get(*i).map_or("", String::as_str);
    out.push_str("{\"attributes\":");
    if t.attributes.is_empty() {
        out.push_str("{}");
    } else {
        out.push_str(&pairs_json(&t.attributes).to_string());
    }
    out.push_str(if t.arrangement.big_endian {
        ",\"bigEndian\":true"
    } else {
        ",\"bigEndian\":false"
    });
    out.push_str(",\"dtype\":");
    put_str(out, t.ty.name());
    if let ElementType::Ggml(g) = t.ty {
        out.push_str(",\"ggml\":{\"blockSize\":");
        put_opt(out, g.block_size());
        out.push_str(",\"name\":");
        put_str(out, g.name());
        out.push_str(if g.is_quantized() {
            ",\"quantized\":true"
        } else {
            ",\"quantized\":false"
        });
        out.push_str(",\"type\":");
        out.push_str(&g.0.to_string());
        out.push_str(",\"typeSize\":");
        put_opt(out, g.type_size());
        out.push('}');
    }
    out.push_str(",\"name\":");
    put_str(out, &t.name);
    out.push_str(",\"nbytes\":");
    put_opt(out, t.nbytes());
    out.push_str(",\"shape\":");
    put_u64s(out, &t.shape);
    out.push_str(",\"storage\":");
    match &t.storage {
        Storage::Range { source: s, offset, len } => {
            out.push_str("{\"kind\":\"range\",\"length\":");
            out.push_str(&len.to_string());
            out.push_str(",\"offset\":");
            out.push_str(&offset.to_string());
            out.push_str(",\"source\":");
            put_str(out, source(s));
            out.push('}');
        }
        // Rare storages: through the value form.
        _ => out.push_str(&storage_json(t, sources).to_string()),
    }
    out.push_str(",\"view\":");
    match &t.arrangement.view {
        Some(v) => {
            out.push_str("{\"offset\":");
            out.push_str(&v.offset.to_string());
            out.push_str(",\"strides\":");
            put_u64s(out, &v.strides);
            out.push('}');
        }
        None => out.push_str("null"),
    }
    out.push_str(if t.is_zero_copy() {
        ",\"zeroCopy\":true}"
    } else {
        ",\"zeroCopy\":false}"
    });
}

/// [`catalog_json`]`(cat).to_string()`, written straight into one string: listing 100k tensors
/// through per-tensor JSON maps took seconds (see BENCHMARKS.md, "Listing many tensors").
pub fn catalog_json_string(cat: &Catalog) -> String {
    let mut out = String::with_capacity(256 + 200 * cat.tensors.len());
    out.push_str("{\"format\":");
    put_str(&mut out, cat.format.name());
    out.push_str(",\"metadata\":");
    out.push_str(&pairs_json(&cat.metadata).to_string());
    out.push_str(",\"skipped\":[");
    for (i, (n, r)) in cat.skipped.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        put_str(&mut out, n);
        out.push_str(",\"reason\":");
        put_str(&mut out, r);
        out.push('}');
    }
    out.push_str("],\"sources\":[");
    for (i, s) in cat.sources.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        put_str(&mut out, s);
    }
    out.push_str("],\"tensors\":[");
    for (i, t) in cat.tensors.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        put_tensor(&mut out, t, &cat.sources);
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_merge_when_they_touch_or_overlap() {
        let mut p = Vec::new();
        insert_piece(&mut p, 10, vec![1, 2]);
        insert_piece(&mut p, 0, vec![9]);
        insert_piece(&mut p, 12, vec![3, 4]);
        assert_eq!(p, vec![(0, vec![9]), (10, vec![1, 2, 3, 4])]);
        insert_piece(&mut p, 1, vec![7; 10]);
        assert_eq!(p, vec![(0, vec![9, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2, 3, 4])]);
    }

    /// Drives a session the way `js/formats.js` does, but fetching exactly the missing ranges
    /// (the worst case for rounds). Companions come from `dir`.
    fn drive_open(bytes: &[u8], dir: &std::path::Path, name: &str) -> (Step<String>, Session, usize) {
        let mut s = Session::new(bytes.len() as u64, name, "").unwrap();
        for round in 0..10_000 {
            match s.open() {
                Step::Need {
                    source,
                    offset,
                    len,
                    register,
                    candidates,
                } => {
                    let file = if source.is_empty() {
                        bytes.to_vec()
                    } else {
                        match std::fs::read(resolve(dir, name, &source)) {
                            Ok(f) => f,
                            Err(e) if !candidates.is_empty() => {
                                s.add_missing(&source, &e.to_string());
                                continue;
                            }
                            Err(e) => panic!("{source}: {e}"),
                        }
                    };
                    if register {
                        s.add_source(&source, file.len() as u64);
                    } else {
                        let piece = file[offset as usize..(offset + len) as usize].to_vec();
                        s.add_piece(&source, offset, piece, false).unwrap();
                    }
                }
                done => return (done, s, round),
            }
        }
        panic!("no end");
    }

    /// The file of catalog source `source` of the model `name` in `dir`: a `.zt` shard by its
    /// candidate names, any other companion by its own.
    fn resolve(dir: &std::path::Path, name: &str, source: &str) -> std::path::PathBuf {
        let shard = formats::zt::shard_candidates(name, source)
            .into_iter()
            .map(|c| dir.join(c))
            .find(|p| p.is_file());
        shard
            .filter(|_| name.ends_with(".zt"))
            .unwrap_or_else(|| dir.join(source))
    }

    #[test]
    fn every_fixture_opens_over_exactly_the_ranges_it_asks_for() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/fixtures");
        let manifest = std::fs::read_to_string(root.join("manifest.json"))
            .unwrap_or_else(|e| panic!("{}: {e}", root.join("manifest.json").display()));
        let manifest: J = serde_json::from_str(&manifest).unwrap();
        let mut opened = 0;
        for e in manifest["files"].as_array().unwrap() {
            let file = e["file"].as_str().unwrap();
            if e["expect"] == "companion" {
                continue;
            }
            let path = root.join(file);
            let dir = path.parent().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            // .zt shards are found by the root's file name; other files open from bytes alone.
            let name = if file.ends_with(".zt") {
                path.file_name().unwrap().to_str().unwrap()
            } else {
                ""
            };
            let (step, mut s, _) = drive_open(&bytes, dir, name);
            match step {
                Step::Done(_) if e["expect"] == "reject" => {
                    // Refused when a tensor is read (a view past its storage, ...), not at open.
                    let n = s.catalog.as_ref().unwrap().tensors.len();
                    let refused = (0..n).any(|i| {
                        loop {
                            match s.read(i) {
                                Step::Need {
                                    source, offset, len, ..
                                } => {
                                    let data = if source.is_empty() {
                                        bytes.clone()
                                    } else {
                                        std::fs::read(resolve(dir, name, &source)).unwrap()
                                    };
                                    let piece = data[offset as usize..(offset + len) as usize].to_vec();
                                    s.add_piece(&source, offset, piece, true).unwrap();
                                }
                                Step::Failed(_) => break true,
                                _ => break false,
                            }
                        }
                    });
                    assert!(refused, "{file}: opened and read, but the manifest says reject");
                }
                Step::Done(json) => {
                    assert!(
                        e["expect"] == "read" || e["expect"] == "no-tensors",
                        "{file}: opened, but the manifest says {}",
                        e["expect"]
                    );
                    // The direct writer gives the value form's value. (Not compared as text: a
                    // crate of the build may turn on serde_json's `preserve_order`, as llguidance
                    // does in the workspace's, and the two then order keys differently; the
                    // text is parsed with `float_roundtrip`, so every number must be exact.)
                    assert_eq!(
                        serde_json::from_str::<J>(&json).unwrap(),
                        catalog_json(s.catalog.as_ref().unwrap()),
                        "{file}"
                    );
                    let cat: J = serde_json::from_str(&json).unwrap();
                    let names: Vec<&str> = cat["tensors"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["name"].as_str().unwrap())
                        .collect();
                    let want: Vec<&str> = e["tensors"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["name"].as_str().unwrap())
                        .collect();
                    assert_eq!(names, want, "{file}");
                    // Every tensor reads to the bytes a whole-file read gives.
                    let srcs: Vec<Vec<u8>> = cat["sources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| match n.as_str().unwrap() {
                            "" => bytes.clone(),
                            n => std::fs::read(resolve(dir, name, n)).unwrap(),
                        })
                        .collect();
                    let whole = s.catalog.clone().unwrap();
                    let refs: Vec<&[u8]> = srcs.iter().map(|v| v.as_slice()).collect();
                    for (i, t) in whole.tensors.iter().enumerate() {
                        if matches!(t.storage, Storage::Parts(_)) {
                            continue; // read part by part (tests/js/zt.test.mjs)
                        }
                        let want = formats::read(whole.format.name(), t, &refs).unwrap().into_owned();
                        let got = loop {
                            match s.read(i) {
                                Step::Done(b) => break b,
                                Step::Need {
                                    source, offset, len, ..
                                } => {
                                    let k = whole.sources.iter().position(|n| *n == source).unwrap();
                                    let piece = srcs[k][offset as usize..(offset + len) as usize].to_vec();
                                    s.add_piece(&source, offset, piece, true).unwrap();
                                }
                                _ => panic!("{file} / {}: read failed", t.name),
                            }
                        };
                        assert_eq!(got, want, "{file} / {}", t.name);
                    }
                    assert!(s.sources.iter().all(|x| x.transient.is_empty()));
                    opened += 1;
                }
                Step::Failed(err) if err.message.contains("not yet implemented") => {}
                Step::Failed(err) => assert_eq!(e["expect"], "reject", "{file}: {err}"),
                Step::Need { .. } => unreachable!(),
            }
        }
        assert!(opened > 0);
    }

    #[test]
    fn a_missing_range_is_recorded_once_and_reported() {
        let mut s = Sparse::new("", 100);
        insert_piece(&mut s.pieces, 0, vec![0; 10]);
        let mut b = [0u8; 4];
        assert!(s.read_at(2, &mut b).is_ok());
        assert!(matches!(s.read_at(8, &mut b), Err(SourceError::Io(_))));
        assert!(s.read_at(50, &mut b).is_err());
        assert_eq!(s.miss.get(), Some((8, 4)));
        assert!(matches!(s.read_at(98, &mut b), Err(SourceError::OutOfBounds { .. })));
        assert_eq!(s.slice(100, 0), Some(&[][..]));
    }
}
