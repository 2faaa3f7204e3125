//! # tensorlane-wasm
//!
//! wasm-bindgen binding of `tensorlane-core` for browsers and Node. The JavaScript facade
//! (`js/common.js`, `js/browser.js`, `js/wasm-node.js`) is the public API; this crate exports the
//! low-level functions it calls.
//!
//! ## What is copied into wasm memory
//!
//! Decoding takes the caller's bytes as a `Uint8Array` living in **JS memory** and never hands
//! back views on wasm memory (growth would detach them). It returns a descriptor with byte
//! *offsets* into the caller's buffer; `js/common.js` builds the TypedArrays over the caller's
//! `ArrayBuffer`. What crosses into wasm memory:
//!
//! * always: the first 256 bytes of each packet and sub-packet (headers, shapes), the 4-byte
//!   length prefixes and the keys of bundles;
//! * dense, uncompressed bodies: **nothing**; with an integrity footer the body is streamed
//!   through a 1 MiB scratch buffer to hash it (never held whole);
//! * sparse, quantized and string packets and compressed bodies: that (sub-)packet, copied, then
//!   decoded by the core. Decompressed bodies are copied out to a fresh JS `ArrayBuffer`
//!   (`copied: true`); every other result still points into the caller's buffer;
//! * on any error, or any packet the fast walker does not recognise, the whole input is copied
//!   once and decoded by the core, so errors are exactly the core's (message with byte offset).
//!
//! [`copied_bytes`] reports how many input bytes the last `decodeRaw` copied into wasm memory.
//!
//! Encoding copies the tensors' bytes into wasm memory once and the packet out once.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use js_sys::{Array, Uint8Array};
use tensorlane_core::wire::{self, DecodeOptions, Measure, StreamDecoder, flags};
use wasm_bindgen::prelude::*;

use tensorlane_bindings::{formats, packets, stats, write};
use tensorlane_core::formats::ReadLimits;

/// Text generation's host side: architecture, tensors, offload plan and tokenizer (`LlmModel`).
pub mod llm;

/// Bytes of each (sub-)packet read to parse its header: 10 (v4 header) + 32 * 4 (shape) + 1
/// (alignment exponent) = 139 at most for a dense packet.
const PREFIX: usize = 256;
/// Scratch size for hashing a dense body whose integrity footer is verified.
const HASH_CHUNK: usize = 1 << 20;

static COPIED: AtomicUsize = AtomicUsize::new(0);

/// The fast walker gives up; the whole input is then decoded by the core.
struct Fallback;

struct Walker<'a> {
    input: &'a Uint8Array,
    opts: &'a DecodeOptions,
    json: String,
    owned: Vec<Vec<u8>>,
}

impl Walker<'_> {
    fn read_into(&self, off: usize, buf: &mut [u8]) {
        if !buf.is_empty() {
            self.input.subarray(off as u32, (off + buf.len()) as u32).copy_to(buf);
            COPIED.fetch_add(buf.len(), Ordering::Relaxed);
        }
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read_into(off, &mut v);
        v
    }

    /// A little-endian u32 at `region_off + pos`, if it lies inside the region.
    fn u32_at(&self, region_off: usize, region_len: usize, pos: usize) -> Result<usize, Fallback> {
        if pos.checked_add(4).is_none_or(|e| e > region_len) {
            return Err(Fallback);
        }
        let mut b = [0u8; 4];
        self.read_into(region_off + pos, &mut b);
        Ok(u32::from_le_bytes(b) as usize)
    }

    /// Describes the packet at `off..off+len` of the input; returns the bytes it spans.
    fn walk(&mut self, off: usize, len: usize, depth: usize) -> Result<usize, Fallback> {
        let prefix = self.read(off, len.min(PREFIX));
        let h = wire::parse_header(&prefix).map_err(|_| Fallback)?;
        let f = h.flags;
        if f & flags::GPU_IPC_REF != 0 || depth >= wire::MAX_DEPTH {
            return Err(Fallback);
        }
        if f & flags::BUNDLE != 0 {
            return self.bundle(off, len, h, depth);
        }
        let container = flags::SPARSE_COO | flags::SPARSE_CSR | flags::SPARSE_CSC | flags::STRING | flags::RAGGED;
        if f & (container | flags::COMPRESSION) == 0 && wire::dtype_from_code(h.dtype_code).is_some() {
            return self.dense(off, len, &prefix, h);
        }
        // Sparse, quantized, string, compressed: copy this (sub-)packet and let the core decode it.
        let region = self.read(off, len);
        let opts = DecodeOptions {
            allow_trailing_bytes: true,
            ..self.opts.clone()
        };
        let d = wire::decode_with(&region, &opts).map_err(|_| Fallback)?;
        packets::describe(&mut self.json, d.packet, &region, off, &mut self.owned);
        Ok(d.len)
    }

    fn bundle(&mut self, off: usize, len: usize, h: wire::Header, depth: usize) -> Result<usize, Fallback> {
        self.json.push_str("{\"kind\":\"bundle\",\"entries\":[");
        let mut pos = h.len;
        let mut keys: Vec<String> = Vec::new();
        for i in 0..h.ndim as usize {
            let kl = self.u32_at(off, len, pos)?;
            pos += 4;
            if pos.checked_add(kl).is_none_or(|e| e > len) {
                return Err(Fallback);
            }
            let key = String::from_utf8(self.read(off + pos, kl)).map_err(|_| Fallback)?;
            pos += kl;
            if self.opts.strict_keys {
                if keys.contains(&key) {
                    return Err(Fallback);
                }
                keys.push(key.clone());
            }
            let vl = self.u32_at(off, len, pos)?;
            pos += 4;
            if pos.checked_add(vl).is_none_or(|e| e > len) {
                return Err(Fallback);
            }
            if i > 0 {
                self.json.push(',');
            }
            self.json.push('[');
            packets::json_str(&mut self.json, &key);
            self.json.push(',');
            self.walk(off + pos, vl, depth + 1)?;
            self.json.push(']');
            pos += vl;
        }
        self.json.push_str("]}");
        Ok(pos)
    }

    /// An uncompressed dense packet: validated by the core's `measure` on the header bytes; the
    /// body is never copied (only hashed through a scratch buffer when a footer is verified).
    fn dense(&mut self, off: usize, len: usize, prefix: &[u8], h: wire::Header) -> Result<usize, Fallback> {
        let end = match wire::measure(prefix).map_err(|_| Fallback)? {
            Measure::Complete(e) | Measure::Incomplete(e) => e as u64,
        };
        let dtype = wire::dtype_from_code(h.dtype_code).ok_or(Fallback)?;
        let ndim = h.ndim as usize;
        let shape_end = h.len + 4 * ndim;
        if ndim > wire::MAX_NDIM || prefix.len() < shape_end + 1 {
            return Err(Fallback);
        }
        let shape: Vec<u64> = prefix[h.len..shape_end]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64)
            .collect();
        let (align, pos) = if h.flags & flags::CUST_ALIGN != 0 {
            let e = prefix[shape_end];
            if e >= 32 {
                return Err(Fallback);
            }
            (1u64 << e, shape_end as u64 + 1)
        } else if h.flags & flags::ALIGNED != 0 {
            (64, shape_end as u64)
        } else {
            (1, shape_end as u64)
        };
        let body = pos + (align - pos % align) % align;
        let numel = tensorlane_core::tensor::numel(&shape).ok_or(Fallback)?;
        let nbytes = numel.checked_mul(dtype.itemsize() as u64).ok_or(Fallback)?;
        let foot = if h.flags & flags::INTEGRITY != 0 { 8 } else { 0 };
        if body + nbytes + foot != end || end > len as u64 {
            return Err(Fallback);
        }
        let (body, nbytes) = (body as usize, nbytes as usize);
        if foot != 0 {
            if self.opts.verify_integrity {
                let mut hasher = tensorlane_core::hash::Xxh3::new();
                let mut scratch = vec![0u8; nbytes.min(HASH_CHUNK)];
                let mut at = 0;
                while at < nbytes {
                    let n = (nbytes - at).min(HASH_CHUNK);
                    self.read_into(off + body + at, &mut scratch[..n]);
                    hasher.update(&scratch[..n]);
                    at += n;
                }
                let mut stored = [0u8; 8];
                self.read_into(off + body + nbytes, &mut stored);
                if hasher.digest() != u64::from_le_bytes(stored) {
                    return Err(Fallback);
                }
            }
        } else if self.opts.require_integrity {
            return Err(Fallback);
        }
        packets::dense_at(&mut self.json, dtype, &shape, off + body, nbytes);
        Ok(end as usize)
    }
}

fn pack(json: String, owned: Vec<Vec<u8>>) -> Array {
    let out = Array::new_with_length(owned.len() as u32 + 1);
    out.set(0, JsValue::from_str(&json));
    for (i, o) in owned.iter().enumerate() {
        out.set(i as u32 + 1, Uint8Array::from(&o[..]).into());
    }
    out
}

/// Decodes the packet in `input` (JS memory) and returns `[descriptorJson, ...ownedBuffers]`.
/// See the crate docs for what is copied. Throws the core's error message on failure.
#[wasm_bindgen(js_name = decodeRaw)]
pub fn decode_raw(input: &Uint8Array, bits: u32, max_decompressed_bytes: f64) -> Result<Array, JsError> {
    COPIED.store(0, Ordering::Relaxed);
    let opts = packets::decode_options(bits, max_decompressed_bytes);
    let total = input.length() as usize;
    let mut w = Walker {
        input,
        opts: &opts,
        json: String::new(),
        owned: Vec::new(),
    };
    if let Ok(end) = w.walk(0, total, 0)
        && (opts.allow_trailing_bytes || end == total)
    {
        return Ok(pack(w.json, w.owned));
    }
    // Slow path: the core decodes the whole input (and words any error).
    let all = input.to_vec();
    COPIED.store(all.len(), Ordering::Relaxed);
    let d = wire::decode_with(&all, &opts).map_err(|e| JsError::new(&e.to_string()))?;
    let (mut json, mut owned) = (String::new(), Vec::new());
    packets::describe(&mut json, d.packet, &all, 0, &mut owned);
    Ok(pack(json, owned))
}

/// Input bytes the last `decodeRaw` copied into wasm memory (headers, prefixes, small packets).
#[wasm_bindgen(js_name = copiedBytes)]
pub fn copied_bytes() -> f64 {
    COPIED.load(Ordering::Relaxed) as f64
}

fn buffers(bufs: &Array) -> Vec<Vec<u8>> {
    bufs.iter().map(|b| Uint8Array::new(&b).to_vec()).collect()
}

/// Encodes a plan (see `tensorlane_bindings::packets`); the buffers are copied into wasm memory, the packet out.
#[wasm_bindgen(js_name = encodeRaw)]
pub fn encode_raw(plan: &str, bufs: &Array) -> Result<Vec<u8>, JsError> {
    let owned = buffers(bufs);
    let refs: Vec<&[u8]> = owned.iter().map(|v| v.as_slice()).collect();
    packets::encode_plan(plan, &refs).map_err(|e| JsError::new(&e))
}

/// Dequantizes a quantized plan with the core's float32 arithmetic.
#[wasm_bindgen(js_name = dequantizeRaw)]
pub fn dequantize_raw(plan: &str, bufs: &Array) -> Result<Vec<f32>, JsError> {
    let owned = buffers(bufs);
    let refs: Vec<&[u8]> = owned.iter().map(|v| v.as_slice()).collect();
    packets::dequantize_plan(plan, &refs).map_err(|e| JsError::new(&e))
}

/// This build's name and version, `tensorlane X.Y.Z` (the workspace version): the inspector page
/// shows it, and the `tensorlane` binary embeds only a wasm that carries its own version string.
#[wasm_bindgen]
pub fn version() -> String {
    concat!("tensorlane ", env!("CARGO_PKG_VERSION")).to_string()
}

/// The core's sans-IO stream framer. Pushed chunks are copied into wasm memory (the framer must
/// hold partial packets); popped packets are copied out to fresh JS buffers.
#[wasm_bindgen]
pub struct RawStreamDecoder {
    inner: StreamDecoder,
}

#[wasm_bindgen]
impl RawStreamDecoder {
    /// Limits below zero (or not finite) keep the core's defaults.
    #[wasm_bindgen(constructor)]
    pub fn new(max_packet_bytes: f64, max_buffered_bytes: f64) -> RawStreamDecoder {
        RawStreamDecoder {
            inner: StreamDecoder::with_limits(packets::stream_limits(max_packet_bytes, max_buffered_bytes)),
        }
    }

    /// Adds received bytes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsError> {
        self.inner.push(chunk).map_err(|e| JsError::new(&e.to_string()))
    }

    /// The next whole packet, or `undefined`.
    #[wasm_bindgen(js_name = next)]
    pub fn next_packet(&mut self) -> Result<Option<Vec<u8>>, JsError> {
        self.inner.next_packet().map_err(|e| JsError::new(&e.to_string()))
    }

    /// Bytes held and not yet returned.
    pub fn buffered(&self) -> f64 {
        self.inner.buffered() as f64
    }
}

// ---------------------------------------------------------------------------------------------
// .zt files open as model catalogs (FormatSession); writing one:

/// Writes a `.zt` file from a plan (see `tensorlane_bindings::write::write_plan`).
#[wasm_bindgen(js_name = ztWriteRaw)]
pub fn zt_write_raw(plan: &str, bufs: &Array) -> Result<Vec<u8>, JsError> {
    let owned = buffers(bufs);
    let refs: Vec<&[u8]> = owned.iter().map(|v| v.as_slice()).collect();
    write::write_plan(plan, &refs).map_err(|e| JsError::new(&e))
}

// ---------------------------------------------------------------------------------------------
// Foreign model formats (`tensorlane_bindings::formats`, shared with the addon)

/// An open model file over the byte ranges JS fetched (see `tensorlane_bindings::formats`): `open()` and
/// `read()` return `undefined`/the result when done, and JS reads `status()` (JSON: `need` or
/// `error`) otherwise. Pieces are copied into wasm memory.
#[wasm_bindgen(js_name = FormatSession)]
pub struct FormatSession {
    inner: formats::Session,
    status: String,
}

#[wasm_bindgen(js_class = FormatSession)]
impl FormatSession {
    /// A session for a file of `size` bytes named `name` (GGUF splits are found by it; may be
    /// empty); `format` forces a format (`""`: detect).
    #[wasm_bindgen(constructor)]
    pub fn new(size: f64, name: &str, format: &str) -> Result<FormatSession, JsError> {
        let inner = formats::Session::new(size as u64, name, format).map_err(|e| JsError::new(&e))?;
        Ok(FormatSession {
            inner,
            status: String::new(),
        })
    }

    /// Registers a companion file (path relative to the opened file) and its size.
    #[wasm_bindgen(js_name = addSource)]
    pub fn add_source(&mut self, name: &str, size: f64) {
        self.inner.add_source(name, size as u64);
    }

    /// Registers companion `name` as not found (`why`: where it was looked for): the model opens,
    /// its tensors stored there fail when read.
    #[wasm_bindgen(js_name = addMissing)]
    pub fn add_missing(&mut self, name: &str, why: &str) {
        self.inner.add_missing(name, why);
    }

    /// One attempt at reading part `part` of tensor `index` (a tensor stored as parts): its
    /// decoded, digest-checked bytes (copied out), or `undefined` (see `status()`).
    #[wasm_bindgen(js_name = readPart)]
    pub fn read_part(&mut self, index: u32, part: &str, max_tensor_bytes: Option<f64>) -> Option<Vec<u8>> {
        let step = self
            .inner
            .read_part(index as usize, part, &read_limits(max_tensor_bytes));
        self.status = step.status();
        match step {
            formats::Step::Done(b) => Some(b),
            _ => None,
        }
    }

    /// One attempt at verifying the file (`formats::Session::verify`): the report JSON, or
    /// `undefined` (see `status()`).
    pub fn verify(&mut self) -> Option<String> {
        let step = self.inner.verify();
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }

    /// Adds fetched bytes of source `name` at `offset`.
    #[wasm_bindgen(js_name = addPiece)]
    pub fn add_piece(&mut self, name: &str, offset: f64, bytes: Vec<u8>, transient: bool) -> Result<(), JsError> {
        self.inner
            .add_piece(name, offset as u64, bytes, transient)
            .map_err(|e| JsError::new(&e))
    }

    /// One attempt at opening: the catalog JSON, or `undefined` (see `status()`).
    pub fn open(&mut self) -> Option<String> {
        let step = self.inner.open();
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }

    /// One attempt at reading tensor `index`: its C-order little-endian bytes (copied out), or
    /// `undefined` (see `status()`). A tensor whose whole read would allocate more than
    /// `max_tensor_bytes` (default 4 GiB, `formats::DEFAULT_MAX_TENSOR_BYTES`) fails with kind
    /// `limit` before anything is allocated.
    pub fn read(&mut self, index: u32, max_tensor_bytes: Option<f64>) -> Option<Vec<u8>> {
        let step = self.inner.read_limited(index as usize, &read_limits(max_tensor_bytes));
        self.status = step.status();
        match step {
            formats::Step::Done(b) => Some(b),
            _ => None,
        }
    }

    /// One attempt at the statistics of tensor `index` (`bins` histogram bins; a deflated or
    /// byte-swapped tensor inflated in `chunk_bytes` pieces per pass, never whole): JSON
    /// `{name, dtype, shape, summary, histogram}`, or `null` (see `status()`).
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
    pub fn status(&self) -> String {
        self.status.clone()
    }

    /// Bytes the session holds in wasm memory (header pieces plus the current read's).
    #[wasm_bindgen(js_name = heldBytes)]
    pub fn held_bytes(&self) -> f64 {
        self.inner.held_bytes() as f64
    }

    /// One attempt at reading an opened ONNX model's graph: its JSON, or `undefined` (see
    /// `status()`).
    pub fn graph(&mut self) -> Option<String> {
        let step = self.inner.graph();
        self.status = step.status();
        match step {
            formats::Step::Done(json) => Some(json),
            _ => None,
        }
    }
}

/// Dequantizes ggml blocks (GGUF) of type id `ty` to float32 (blocks copied in, values out).
#[wasm_bindgen(js_name = ggmlDequantize)]
pub fn ggml_dequantize(ty: u32, blocks: &[u8]) -> Result<Vec<f32>, JsError> {
    formats::ggml_dequantize(ty, blocks).map_err(|e| JsError::new(&e))
}

// ---------------------------------------------------------------------------------------------
// Statistics (`tensorlane_bindings::stats`, shared with the addon)

/// Pass 1 of a tensor's statistics (see `tensorlane_bindings::stats`): each pushed slice is copied
/// into wasm memory for the push only.
#[wasm_bindgen(js_name = StatsSummary)]
pub struct StatsSummary {
    inner: stats::SummaryPass,
}

#[wasm_bindgen(js_class = StatsSummary)]
impl StatsSummary {
    /// A pass over `elements` elements of `dtype` (`ggml`: a GGUF type id, or -1) stored in
    /// `bytes` bytes. Throws a core FormatError as JSON.
    #[wasm_bindgen(constructor)]
    pub fn new(dtype: &str, ggml: f64, elements: f64, bytes: f64) -> Result<StatsSummary, JsError> {
        stats::SummaryPass::new(dtype, ggml, elements, bytes)
            .map(|inner| StatsSummary { inner })
            .map_err(|e| JsError::new(&e))
    }

    /// Adds the next slice of the stored bytes (any boundaries).
    pub fn push(&mut self, bytes: &[u8]) {
        self.inner.push(bytes);
    }

    /// The summary so far (JSON).
    pub fn summary(&self) -> String {
        self.inner.summary()
    }

    /// The state so far (10 numbers), for `statsSummaryOfParts` in another Worker.
    pub fn part(&self) -> Vec<f64> {
        self.inner.part()
    }
}

/// Spans `[offset, bytes, elements, ...]` splitting `elements` elements of `dtype`/`ggml` into at
/// most `parts` parts of whole elements and blocks, for statistics in parts.
#[wasm_bindgen(js_name = statsSplit)]
pub fn stats_split(dtype: &str, ggml: f64, elements: f64, parts: u32) -> Result<Vec<f64>, JsError> {
    stats::split(dtype, ggml, elements, parts).map_err(|e| JsError::new(&e))
}

/// The summary (JSON) of `StatsSummary.part()` arrays concatenated in span order.
#[wasm_bindgen(js_name = statsSummaryOfParts)]
pub fn stats_summary_of_parts(parts: &[f64]) -> Result<String, JsError> {
    stats::summary_of_parts(parts).map_err(|e| JsError::new(&e))
}

/// Pass 2 of a tensor's statistics: the histogram of its finite values.
#[wasm_bindgen(js_name = StatsHistogram)]
pub struct StatsHistogram {
    inner: stats::HistogramPass,
}

#[wasm_bindgen(js_class = StatsHistogram)]
impl StatsHistogram {
    /// `bins` bins over pass 1's `[min, max]` (`[0, 1]` when `finite` is 0).
    #[wasm_bindgen(constructor)]
    pub fn new(
        dtype: &str,
        ggml: f64,
        elements: f64,
        finite: f64,
        min: f64,
        max: f64,
        bins: u32,
    ) -> Result<StatsHistogram, JsError> {
        stats::HistogramPass::new(dtype, ggml, elements, finite, min, max, bins)
            .map(|inner| StatsHistogram { inner })
            .map_err(|e| JsError::new(&e))
    }

    /// Adds the next slice of the stored bytes (any boundaries).
    pub fn push(&mut self, bytes: &[u8]) {
        self.inner.push(bytes);
    }

    /// The histogram (JSON: `{edges, counts}`).
    pub fn finish(&mut self) -> Result<String, JsError> {
        self.inner.finish().map_err(|e| JsError::new(&e))
    }
}

/// Two tensors compared value by value (see `tensorlane_bindings::stats::DiffPass`): each pushed
/// slice is copied into wasm memory for the push only.
#[wasm_bindgen(js_name = StatsDiff)]
pub struct StatsDiff {
    inner: stats::DiffPass,
}

#[wasm_bindgen(js_class = StatsDiff)]
impl StatsDiff {
    /// `elements` elements of `dtype_a` (`ggml_a`: a GGUF type id, or -1) stored in `bytes_a`
    /// bytes against as many of `dtype_b` in `bytes_b`. Throws a core FormatError as JSON.
    #[wasm_bindgen(constructor)]
    pub fn new(
        dtype_a: &str,
        ggml_a: f64,
        bytes_a: f64,
        dtype_b: &str,
        ggml_b: f64,
        bytes_b: f64,
        elements: f64,
    ) -> Result<StatsDiff, JsError> {
        stats::DiffPass::new(dtype_a, ggml_a, bytes_a, dtype_b, ggml_b, bytes_b, elements)
            .map(|inner| StatsDiff { inner })
            .map_err(|e| JsError::new(&e))
    }

    /// Adds the next slice of tensor A's stored bytes (any boundaries).
    #[wasm_bindgen(js_name = pushA)]
    pub fn push_a(&mut self, bytes: &[u8]) {
        self.inner.push_a(bytes);
    }

    /// Adds the next slice of tensor B's stored bytes (any boundaries).
    #[wasm_bindgen(js_name = pushB)]
    pub fn push_b(&mut self, bytes: &[u8]) {
        self.inner.push_b(bytes);
    }

    /// Adds the next slices of both tensors (the same elements; the fast path).
    pub fn push(&mut self, a: &[u8], b: &[u8]) {
        self.inner.push(a, b);
    }

    /// The comparison so far (JSON).
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
