//! # tensorlane-node
//!
//! N-API binding (napi-rs 3) for Node.js. The JavaScript facade (`js/common.js`, `js/node.js`) is
//! the public API; this crate exports the low-level functions it calls.
//!
//! Decoding borrows the caller's `Uint8Array`/`Buffer` for the duration of the call (no copy),
//! decodes it with the core and returns a descriptor with byte offsets into that buffer; the
//! facade builds TypedArray views on the caller's `ArrayBuffer`. Only bodies the core had to
//! produce (decompressed) come back as new buffers, moved (not copied) into external buffers.
//! The descriptor code is shared with the wasm backend (`tensorlane_bindings`), so both backends
//! describe every packet identically.
//!
//! A model file opened from a path is the native host's work ([`ModelFile`] over
//! `tensorlane::model::Model`): opened once with pread (a file truncated underneath is an error,
//! not SIGBUS), companions resolved and checked, tensors decoded and summarised (`Model::stats`). Bytes and Blobs go
//! through the byte-range session both backends share (`tensorlane_bindings::formats`).

#![deny(clippy::all)]

mod llm;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use tensorlane_core::wire::{self, StreamDecoder};

use tensorlane::model::Model;
use tensorlane_bindings::{formats, packets, stats, write};
use tensorlane_core::formats::{ErrorKind, FormatError, ReadLimits, TensorInfo};

fn err(msg: impl Into<String>) -> Error {
    Error::from_reason(msg.into())
}

/// A descriptor (JSON) and the buffers the decoder produced itself.
#[napi(object)]
pub struct RawDecoded {
    /// The packet's description: kinds, dtypes, shapes and byte offsets into the input
    /// (built by `tensorlane_bindings::packets`, read by `js/common.js`).
    pub json: String,
    /// Bytes the decoder had to produce itself (decompressed bodies), referenced by index.
    pub owned: Vec<Buffer>,
}

/// Decodes the packet in `input` without copying it.
#[napi(js_name = "decodeRaw")]
pub fn decode_raw(input: &[u8], bits: u32, max_decompressed_bytes: f64) -> Result<RawDecoded> {
    let opts = packets::decode_options(bits, max_decompressed_bytes);
    let d = wire::decode_with(input, &opts).map_err(|e| err(e.to_string()))?;
    let (mut json, mut owned) = (String::new(), Vec::new());
    packets::describe(&mut json, d.packet, input, 0, &mut owned);
    Ok(RawDecoded {
        json,
        owned: owned.into_iter().map(Buffer::from).collect(),
    })
}

/// Always 0: the addon reads the caller's bytes in place.
#[napi(js_name = "copiedBytes")]
pub fn copied_bytes() -> f64 {
    0.0
}

/// Encodes a plan (see `tensorlane_bindings::packets`), reading the buffers in place.
#[napi(js_name = "encodeRaw")]
pub fn encode_raw(plan: String, bufs: Vec<Uint8Array>) -> Result<Buffer> {
    let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
    packets::encode_plan(&plan, &refs).map(Buffer::from).map_err(err)
}

/// Dequantizes a quantized plan with the core's float32 arithmetic.
#[napi(js_name = "dequantizeRaw")]
pub fn dequantize_raw(plan: String, bufs: Vec<Uint8Array>) -> Result<Float32Array> {
    let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
    packets::dequantize_plan(&plan, &refs)
        .map(Float32Array::new)
        .map_err(err)
}

/// The core's sans-IO stream framer.
#[napi(js_name = "RawStreamDecoder")]
pub struct RawStreamDecoder {
    inner: StreamDecoder,
}

#[napi]
impl RawStreamDecoder {
    /// Limits below zero (or not finite) keep the core's defaults.
    #[napi(constructor)]
    pub fn new(max_packet_bytes: f64, max_buffered_bytes: f64) -> Self {
        RawStreamDecoder {
            inner: StreamDecoder::with_limits(packets::stream_limits(max_packet_bytes, max_buffered_bytes)),
        }
    }

    /// Adds received bytes (copied into the framer's buffer).
    #[napi]
    pub fn push(&mut self, chunk: &[u8]) -> Result<()> {
        self.inner.push(chunk).map_err(|e| err(e.to_string()))
    }

    /// The next whole packet, or `null`.
    #[napi(js_name = "next")]
    pub fn next_packet(&mut self) -> Result<Option<Buffer>> {
        self.inner
            .next_packet()
            .map(|p| p.map(Buffer::from))
            .map_err(|e| err(e.to_string()))
    }

    /// Bytes held and not yet returned.
    #[napi]
    pub fn buffered(&self) -> f64 {
        self.inner.buffered() as f64
    }
}

// ---------------------------------------------------------------------------------------------
// .zt files open as model catalogs (FormatSession, ModelFile); writing one:

/// Writes a `.zt` file from a plan (see `tensorlane_bindings::write::write_plan`).
#[napi(js_name = "ztWriteRaw")]
pub fn zt_write_raw(plan: String, bufs: Vec<Uint8Array>) -> Result<Buffer> {
    let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
    write::write_plan(&plan, &refs).map(Buffer::from).map_err(err)
}

/// Reads the file at `path` into an owned Buffer with positioned reads (`pread`), in pieces of
/// 16 MiB: what JS opens by path unless it asks for a mapping (`{mmap: true}`). A file over
/// `max_bytes` is refused before anything is allocated, naming the file and the options; a file
/// truncated while it is read is an error saying so, never SIGBUS (nothing is mapped), and so is
/// one written in place meanwhile (its identity — size, modification and status-change times,
/// inode — at the end is not the one at open: [`tensorlane::source::Source::check_unchanged`]).
#[napi(js_name = "readFile")]
pub fn read_file(path: String, max_bytes: f64) -> Result<Buffer> {
    use tensorlane_core::source::{ReadAt as _, SourceError};
    let src =
        tensorlane::source::Source::open_local(&path, false).map_err(|e| err(format!("cannot open {path}: {e}")))?;
    let len = src.size();
    if len as f64 > max_bytes {
        return Err(err(format!(
            "Limit: {path} is {len} bytes, over the {max_bytes} bytes allowed by maxTensorBytes: a file opened by \
             path is read into memory; raise maxTensorBytes if the machine has the memory, or pass {{mmap: true}} \
             to map it instead (the file must then stay as it is while the reader lives)"
        )));
    }
    let data = tensorlane::source::read_whole(&src).map_err(|e| match e {
        // FileSource's error for a file that is shorter than when it was opened.
        SourceError::OutOfBounds { size, .. } if size < len => err(format!(
            "{path} changed while it was read: {size} bytes now, {len} when it was opened (truncated or \
             rewritten in place); open it again once nothing writes to it"
        )),
        SourceError::OutOfBounds { .. } => err(format!("Limit: {path} is {len} bytes, too large to read here")),
        other => err(format!("cannot read {path}: {other}")),
    })?;
    src.check_unchanged().map_err(|e| match e {
        SourceError::Io(m) => err(format!("{path}: {m}")),
        other => err(format!("{path}: {other}")),
    })?;
    Ok(Buffer::from(data))
}

/// Maps the file at `path` and returns it as an external Buffer over the mapping (no copy; the
/// mapping lives as long as the Buffer): only when JS asks for it (`{mmap: true}`; by default
/// paths are read with [`read_file`]). The mapping is private copy-on-write, so a write from JS
/// never reaches the file. Files under 64 KiB are read instead. There is no guard a mapping
/// handed to JS can have against truncation: a file truncated while the Buffer lives kills the
/// process with SIGBUS when a missing page is touched (see the SAFETY note), so the caller
/// promises that the file is published (written beside and renamed), never rewritten in place.
#[napi(js_name = "mapFile")]
pub fn map_file<'env>(env: &'env Env, path: String) -> Result<BufferSlice<'env>> {
    let file = std::fs::File::open(&path).map_err(|e| err(format!("cannot open {path}: {e}")))?;
    let len = file
        .metadata()
        .map_err(|e| err(format!("cannot stat {path}: {e}")))?
        .len();
    if len < 65536 {
        let data = std::fs::read(&path).map_err(|e| err(format!("cannot read {path}: {e}")))?;
        return BufferSlice::from_data(env, data);
    }
    // SAFETY: a private (copy-on-write) mapping: writes through it stay in this process. The
    // rule for handing a mapping to JS: the file must stay as it is while the Buffer lives (a
    // published .zt is written beside and renamed into place, never rewritten in place, so a
    // reader's mapping keeps the old inode). A file truncated underneath makes a later access
    // raise SIGBUS, which no reader can turn into an error short of a signal handler; callers
    // whose files may change read them instead (`ModelFile` uses pread, `open(blob)` reads ranges).
    let mut map =
        unsafe { memmap2::MmapOptions::new().map_copy(&file) }.map_err(|e| err(format!("cannot map {path}: {e}")))?;
    let ptr = map.as_mut_ptr();
    let n = map.len();
    // SAFETY: `ptr` points at `n` bytes owned by `map`, which the finaliser drops only when the
    // Buffer is collected.
    unsafe { BufferSlice::from_external(env, ptr, n, map, |_, m| drop(m)) }
}

// ---------------------------------------------------------------------------------------------
// Every model format, .zt and Tenso included (`tensorlane_bindings::formats`, shared with the wasm backend)

/// An open model file over the byte ranges JS fetched (see `tensorlane_bindings::formats`): `open()` and
/// `read()` return `null` unless done, and JS reads `status()` (JSON: `need` or
/// `error`) then. Pieces are copied into the session.
#[napi(js_name = "FormatSession")]
pub struct FormatSession {
    inner: formats::Session,
    status: String,
}

#[napi]
impl FormatSession {
    /// A session for a file of `size` bytes named `name` (GGUF splits are found by it; may be
    /// empty); `format` forces a format (`""`: detect).
    #[napi(constructor)]
    pub fn new(size: f64, name: String, format: String) -> Result<Self> {
        let inner = formats::Session::new(size as u64, &name, &format).map_err(err)?;
        Ok(FormatSession {
            inner,
            status: String::new(),
        })
    }

    /// Registers a companion file (path relative to the opened file) and its size.
    #[napi(js_name = "addSource")]
    pub fn add_source(&mut self, name: String, size: f64) {
        self.inner.add_source(&name, size as u64);
    }

    /// Registers companion `name` as not found (`why`: where it was looked for): the model opens,
    /// its tensors stored there fail when read.
    #[napi(js_name = "addMissing")]
    pub fn add_missing(&mut self, name: String, why: String) {
        self.inner.add_missing(&name, &why);
    }

    /// One attempt at reading part `part` of tensor `index` (a tensor stored as parts): its
    /// decoded, digest-checked bytes, or `null` (see `status()`).
    #[napi(js_name = "readPart")]
    pub fn read_part(&mut self, index: u32, part: String, max_tensor_bytes: Option<f64>) -> Option<Buffer> {
        let step = self
            .inner
            .read_part(index as usize, &part, &read_limits(max_tensor_bytes));
        self.status = step.status();
        match step {
            formats::Step::Done(b) => Some(Buffer::from(b)),
            _ => None,
        }
    }

    /// One attempt at verifying the file (`formats::Session::verify`): the report JSON, or `null`.
    #[napi]
    pub fn verify(&mut self) -> Option<String> {
        let step = self.inner.verify();
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }

    /// Adds fetched bytes of source `name` at `offset` (copied).
    #[napi(js_name = "addPiece")]
    pub fn add_piece(&mut self, name: String, offset: f64, bytes: &[u8], transient: bool) -> Result<()> {
        self.inner
            .add_piece(&name, offset as u64, bytes.to_vec(), transient)
            .map_err(err)
    }

    /// One attempt at opening: the catalog JSON, or `null` (see `status()`).
    #[napi]
    pub fn open(&mut self) -> Option<String> {
        let step = self.inner.open();
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }

    /// One attempt at reading tensor `index`: its C-order little-endian bytes, or `null` (see
    /// `status()`). A tensor whose whole read would allocate more than `max_tensor_bytes`
    /// (default 4 GiB) fails with kind `limit` before anything is allocated.
    #[napi]
    pub fn read(&mut self, index: u32, max_tensor_bytes: Option<f64>) -> Option<Buffer> {
        let step = self.inner.read_limited(index as usize, &read_limits(max_tensor_bytes));
        self.status = step.status();
        match step {
            formats::Step::Done(b) => Some(Buffer::from(b)),
            _ => None,
        }
    }

    /// One attempt at the statistics of tensor `index` (`bins` histogram bins; a deflated or
    /// byte-swapped tensor inflated in `chunk_bytes` pieces per pass, never whole): JSON
    /// `{name, dtype, shape, summary, histogram}`, or `null` (see `status()`).
    #[napi]
    pub fn stats(&mut self, index: u32, bins: u32, chunk_bytes: f64) -> Option<String> {
        let step = self.inner.stats(
            index as usize,
            bins as usize,
            chunk_bytes.clamp(1.0, (64u64 << 20) as f64) as usize,
        );
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }

    /// What the last `open()`/`read()` came to (JSON).
    #[napi]
    pub fn status(&self) -> String {
        self.status.clone()
    }

    /// Bytes the session holds (header pieces plus the current read's).
    #[napi(js_name = "heldBytes")]
    pub fn held_bytes(&self) -> f64 {
        self.inner.held_bytes() as f64
    }

    /// One attempt at reading an opened ONNX model's graph: its JSON, or `null` (see `status()`).
    #[napi]
    pub fn graph(&mut self) -> Option<String> {
        let step = self.inner.graph();
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }
}

/// The graph of the ONNX model in `bytes` (a whole file, e.g. mapped), as JSON; throws a core
/// FormatError as JSON.
#[napi(js_name = "onnxGraph")]
pub fn onnx_graph(bytes: &[u8]) -> Result<String> {
    formats::onnx_graph_of_bytes(bytes).map_err(err)
}

/// Dequantizes ggml blocks (GGUF) of type id `ty` to float32.
#[napi(js_name = "ggmlDequantize")]
pub fn ggml_dequantize(ty: u32, blocks: &[u8]) -> Result<Float32Array> {
    formats::ggml_dequantize(ty, blocks).map(Float32Array::new).map_err(err)
}

// ---------------------------------------------------------------------------------------------
// Model files opened from a path: the native host's `tensorlane::model::Model`

/// A thrown error whose message is a core [`FormatError`] as JSON (`js/formats.js` revives it).
fn format_err(e: &FormatError) -> Error {
    err(formats::error_json(e).to_string())
}

/// A native host error as the same JSON: the parser's own [`FormatError`] when it is one, an
/// I/O-kind error with the host's message otherwise.
fn model_err(e: &tensorlane::Error) -> Error {
    match e {
        tensorlane::Error::Format(f) => format_err(f),
        other => format_err(&FormatError::new("formats", ErrorKind::Io, other.to_string())),
    }
}

/// A model file opened from a path by the native host ([`tensorlane::model::Model`]): mapped
/// once, parsed in place (no fetch-and-retry rounds, nothing copied into a session), companions
/// resolved in the model's folder with symbolic links followed and checked, every byte range
/// checked against the real file sizes at open.
#[napi(js_name = "ModelFile")]
pub struct ModelFile {
    model: Option<Model>,
}

impl ModelFile {
    /// After a pass that read the model: an error naming the first file of the model that is no
    /// longer what it was at open (written in place, truncated, extended:
    /// [`Model::check_unchanged`]), so that a result read from a mix of two versions is never
    /// returned. The identity at open is the "before"; a rewrite within the file system's
    /// timestamp granularity that keeps the size is not detectable.
    fn unchanged(m: &Model) -> Result<()> {
        m.check_unchanged().map_err(|e| model_err(&e))
    }

    fn model(&self) -> Result<&Model> {
        self.model.as_ref().ok_or_else(|| {
            format_err(&FormatError::new(
                "formats",
                ErrorKind::Io,
                "the model was closed; open it again to read tensors",
            ))
        })
    }

    fn tensor(&self, index: u32) -> Result<(&Model, &TensorInfo)> {
        let m = self.model()?;
        let t = m.catalog().tensors.get(index as usize).ok_or_else(|| {
            format_err(&FormatError::new(
                m.format().name(),
                ErrorKind::OutOfBounds,
                format!("no tensor #{index} (the model has {})", m.catalog().tensors.len()),
            ))
        })?;
        Ok((m, t))
    }
}

#[napi]
impl ModelFile {
    /// Opens the model at `path` (any format: `.zt` with the shards found next to it, legacy
    /// `.zt` and Tenso files too) and its companions. Throws a core `FormatError` as JSON; kind
    /// `unsupported` for content no format matches, which `js/formats.js` then words itself.
    #[napi(constructor)]
    pub fn new(path: String) -> Result<Self> {
        // Read with pread, not mapped: every read here copies into a new Buffer anyway, and a
        // model file truncated or rewritten while it is open (a long-running server, a checkpoint
        // being written) then gives an error instead of killing Node with SIGBUS.
        let opts = tensorlane::model::ModelOptions {
            mmap: false,
            ..Default::default()
        };
        let model = Model::open_with(&path, &opts).map_err(|e| model_err(&e))?;
        Ok(ModelFile { model: Some(model) })
    }

    /// The catalog as JSON (the same as the byte-range session gives: `formats::catalog_json_string`).
    #[napi]
    pub fn catalog(&self) -> Result<String> {
        Ok(formats::catalog_json_string(self.model()?.catalog()))
    }

    /// The files read, as resolved, in catalog source order (0: the opened file).
    #[napi(js_name = "sourcePaths")]
    pub fn source_paths(&self) -> Result<Vec<String>> {
        Ok(self
            .model()?
            .sources()
            .map(|(p, _)| p.to_string_lossy().into_owned())
            .collect())
    }

    /// Tensor `index`'s C-order little-endian bytes: decoded (inflated, gathered, byte-swapped)
    /// straight from the map and moved into the Buffer. Zero-copy tensors are better viewed on a
    /// mapping of their source (`mapFile`); asked for here, their bytes are copied. A tensor
    /// over `max_tensor_bytes` (default 4 GiB) is refused (kind `limit`) before allocating.
    #[napi]
    pub fn read(&mut self, index: u32, max_tensor_bytes: Option<f64>) -> Result<Buffer> {
        if let Some(m) = self.model.as_mut() {
            m.set_limits(read_limits(max_tensor_bytes));
        }
        let (m, t) = self.tensor(index)?;
        let bytes = m.read(t).map_err(|e| model_err(&e))?.into_owned();
        ModelFile::unchanged(m)?;
        Ok(Buffer::from(bytes))
    }

    /// The bytes of part `part` of tensor `index` (a tensor stored as parts: a `.zt` sparse or
    /// group-quantized object), decoded and checked against its digest (`Model::read_part`).
    #[napi(js_name = "readPart")]
    pub fn read_part(&mut self, index: u32, part: String, max_tensor_bytes: Option<f64>) -> Result<Buffer> {
        if let Some(m) = self.model.as_mut() {
            m.set_limits(read_limits(max_tensor_bytes));
        }
        let (m, t) = self.tensor(index)?;
        let bytes = m.read_part(t, &part).map_err(|e| model_err(&e))?.into_owned();
        ModelFile::unchanged(m)?;
        Ok(Buffer::from(bytes))
    }

    /// Verifies the file as `FormatSession.verify` does: a `.zt` v2 file by the container's deep
    /// verify with every shard that was found, any other by `Model::verify` (every checksum,
    /// every tensor read). JSON report.
    #[napi]
    pub fn verify(&self) -> Result<String> {
        let m = self.model()?;
        let n = m.catalog().tensors.len();
        if m.format() == tensorlane_core::detect::Format::Zt {
            let root = m.source(0).ok_or_else(|| err("the model has no source"))?;
            let table = tensorlane_core::zt::reader::Reader::open(root)
                .map_err(|e| format_err(&tensorlane_core::formats::zt::error(e)))?;
            let names: Vec<String> = table
                .shard_table()
                .map(|t| t.keys().cloned().collect())
                .unwrap_or_default();
            let shards = names
                .into_iter()
                .enumerate()
                .filter_map(|(i, name)| m.source(i + 1).map(|s| (name, s)))
                .collect();
            let reader = formats::zt_with_shards(root, shards).map_err(|e| format_err(&e))?;
            let report = formats::zt_verify_json(&reader, n)
                .map(|j| j.to_string())
                .map_err(|e| format_err(&e));
            // A file changed while it was verified: that, not what the mix looked like.
            ModelFile::unchanged(m)?;
            return report;
        }
        let v = m.verify(&mut |_, _| {});
        ModelFile::unchanged(m)?;
        let v = v.map_err(|e| model_err(&e))?;
        Ok(format!(
            r#"{{"format":"{}","checks":{},"tensors":{}}}"#,
            m.format().name(),
            v.checks,
            v.tensors
        ))
    }

    /// What opening noticed and did not stop it (a `.zt` shard not found next to its root).
    #[napi]
    pub fn warnings(&self) -> Result<Vec<String>> {
        Ok(self.model()?.warnings())
    }

    /// Unmaps the files (tensors already returned stay valid); later calls throw.
    #[napi]
    pub fn close(&mut self) {
        self.model = None;
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics (`tensorlane_bindings::stats`, shared with the wasm backend)

#[napi]
impl ModelFile {
    /// Statistics of tensor `index` by the native host ([`Model::stats`]: two passes over the
    /// map in `chunk_bytes` pieces, or over the decoded tensor), as JSON `{name, dtype, shape,
    /// summary, histogram}`. `progress(done, total)` after each piece (`total`: twice the
    /// tensor's bytes); an exception it throws stops nothing but is thrown afterwards.
    #[napi]
    pub fn stats(
        &self,
        index: u32,
        bins: u32,
        chunk_bytes: f64,
        progress: Option<Function<'_, FnArgs<(f64, f64)>, ()>>,
    ) -> Result<String> {
        let (m, t) = self.tensor(index)?;
        let opts = tensorlane_core::stats::StatsOptions {
            bins: bins as usize,
            chunk_bytes: if chunk_bytes >= 1.0 {
                chunk_bytes.min(usize::MAX as f64) as usize
            } else {
                tensorlane_core::stats::StatsOptions::default().chunk_bytes
            },
        };
        let mut failed = None;
        let mut report = |done: u64, total: u64| {
            if let (Some(f), None) = (&progress, &failed) {
                failed = f.call(FnArgs::from((done as f64, total as f64))).err();
            }
        };
        let s = m.stats(t, &opts, &mut report);
        ModelFile::unchanged(m)?;
        let s = s.map_err(|e| model_err(&e))?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(stats::tensor_stats_json(&s).to_string())
    }
}

/// Pass 1 of a tensor's statistics (see `tensorlane_bindings::stats`); pushed slices are read in
/// place.
#[napi(js_name = "StatsSummary")]
pub struct StatsSummary {
    inner: stats::SummaryPass,
}

#[napi]
impl StatsSummary {
    /// A pass over `elements` elements of `dtype` (`ggml`: a GGUF type id, or -1) stored in
    /// `bytes` bytes. Throws a core FormatError as JSON.
    #[napi(constructor)]
    pub fn new(dtype: String, ggml: f64, elements: f64, bytes: f64) -> Result<Self> {
        stats::SummaryPass::new(&dtype, ggml, elements, bytes)
            .map(|inner| StatsSummary { inner })
            .map_err(err)
    }

    /// Adds the next slice of the stored bytes (any boundaries).
    #[napi]
    pub fn push(&mut self, bytes: &[u8]) {
        self.inner.push(bytes);
    }

    /// The summary so far (JSON).
    #[napi]
    pub fn summary(&self) -> String {
        self.inner.summary()
    }

    /// The state so far (10 numbers), for `statsSummaryOfParts` in another thread.
    #[napi]
    pub fn part(&self) -> Float64Array {
        Float64Array::new(self.inner.part())
    }
}

/// Spans `[offset, bytes, elements, ...]` splitting `elements` elements of `dtype`/`ggml` into at
/// most `parts` parts of whole elements and blocks, for statistics in parts.
#[napi(js_name = "statsSplit")]
pub fn stats_split(dtype: String, ggml: f64, elements: f64, parts: u32) -> Result<Float64Array> {
    stats::split(&dtype, ggml, elements, parts)
        .map(Float64Array::new)
        .map_err(err)
}

/// The summary (JSON) of `StatsSummary.part()` arrays concatenated in span order.
#[napi(js_name = "statsSummaryOfParts")]
pub fn stats_summary_of_parts(parts: Float64Array) -> Result<String> {
    stats::summary_of_parts(&parts).map_err(err)
}

/// Pass 2 of a tensor's statistics: the histogram of its finite values.
#[napi(js_name = "StatsHistogram")]
pub struct StatsHistogram {
    inner: stats::HistogramPass,
}

#[napi]
impl StatsHistogram {
    /// `bins` bins over pass 1's `[min, max]` (`[0, 1]` when `finite` is 0).
    #[napi(constructor)]
    pub fn new(dtype: String, ggml: f64, elements: f64, finite: f64, min: f64, max: f64, bins: u32) -> Result<Self> {
        stats::HistogramPass::new(&dtype, ggml, elements, finite, min, max, bins)
            .map(|inner| StatsHistogram { inner })
            .map_err(err)
    }

    /// Adds the next slice of the stored bytes (any boundaries).
    #[napi]
    pub fn push(&mut self, bytes: &[u8]) {
        self.inner.push(bytes);
    }

    /// The histogram (JSON: `{edges, counts}`).
    #[napi]
    pub fn finish(&mut self) -> Result<String> {
        self.inner.finish().map_err(err)
    }
}

/// Two tensors compared value by value (see `tensorlane_bindings::stats::DiffPass`); pushed
/// slices are read in place.
#[napi(js_name = "StatsDiff")]
pub struct StatsDiff {
    inner: stats::DiffPass,
}

#[napi]
impl StatsDiff {
    /// `elements` elements of `dtype_a` (`ggml_a`: a GGUF type id, or -1) stored in `bytes_a`
    /// bytes against as many of `dtype_b` in `bytes_b`. Throws a core FormatError as JSON.
    #[napi(constructor)]
    pub fn new(
        dtype_a: String,
        ggml_a: f64,
        bytes_a: f64,
        dtype_b: String,
        ggml_b: f64,
        bytes_b: f64,
        elements: f64,
    ) -> Result<Self> {
        stats::DiffPass::new(&dtype_a, ggml_a, bytes_a, &dtype_b, ggml_b, bytes_b, elements)
            .map(|inner| StatsDiff { inner })
            .map_err(err)
    }

    /// Adds the next slice of tensor A's stored bytes (any boundaries).
    #[napi(js_name = "pushA")]
    pub fn push_a(&mut self, bytes: &[u8]) {
        self.inner.push_a(bytes);
    }

    /// Adds the next slice of tensor B's stored bytes (any boundaries).
    #[napi(js_name = "pushB")]
    pub fn push_b(&mut self, bytes: &[u8]) {
        self.inner.push_b(bytes);
    }

    /// Adds the next slices of both tensors (the same elements; the fast path).
    #[napi]
    pub fn push(&mut self, a: &[u8], b: &[u8]) {
        self.inner.push(a, b);
    }

    /// The comparison so far (JSON).
    #[napi]
    pub fn diff(&self) -> String {
        self.inner.diff()
    }
}

/// The whole-tensor read limits for a JS `maxTensorBytes` (`None`: the core's default, 4 GiB).
fn read_limits(max_tensor_bytes: Option<f64>) -> ReadLimits {
    match max_tensor_bytes {
        // JS checks it is a non-negative safe integer; `as` saturates anything else.
        Some(n) => ReadLimits {
            max_tensor_bytes: n as u64,
        },
        None => Default::default(),
    }
}
