//! `/models` (the models under the served paths, as JSON), `/tensors/{model}/{name}` (one tensor
//! as a Tenso packet) and `/ws` (many tensors over a WebSocket).
//!
//! A model's id is its URL path below `/files/` (`models/llama.gguf`); `/tensors/` takes the id
//! and the tensor name joined by `/` (either may be percent-encoded; the id ends at the first
//! prefix that is a model file).
//!
//! The WebSocket takes one JSON text message per request:
//!
//! ```json
//! {"tensors": [{"model": "models/llama.gguf", "name": "blk.0.attn_q.weight"}, "token_embd.weight"],
//!  "model": "models/llama.gguf", "dequantize": "f32", "integrity": true}
//! ```
//!
//! (a bare string names a tensor of the request's `model`), and answers, in order, for each tensor
//! a text message `{"index", "model", "name", "bytes"}` followed by one binary message, the Tenso
//! packet, or a text message `{"index", "model", "name", "status", "error"}`; then
//! `{"done": true, "sent", "failed"}`. Each message is sent only once the one before it has been
//! flushed to the socket, so a slow reader slows the server instead of filling its memory. A
//! packet is one binary message sent in frames of up to 256 KiB as it is read from the file (as
//! `/tensors/` streams it); a read that fails midway (the file changed) closes the WebSocket with
//! 1011 and the reason. A request over 1 MiB is answered with close 1009, a protocol error with
//! 1002.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State as AxState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use http_body::{Frame as BodyFrame, SizeHint};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use tensorlane_core::DType;
use tensorlane_core::formats::ggml::{self, GgmlType};
use tensorlane_core::formats::{Codec, ElementType, ReadLimits, Storage, TensorInfo};
use tensorlane_core::wire::EncodeOptions;
use tensorlane_core::zt::format::LogicalType;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_tungstenite::WebSocketStream;
use tungstenite::Message;
use tungstenite::handshake::derive_accept_key;
use tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tungstenite::protocol::frame::{CloseFrame, Frame};
use tungstenite::protocol::{Role, WebSocketConfig};

use super::files::{self, Refusal, Stamp};
use super::{Mount, Shared};
use crate::model::{Model, ModelOptions};
use crate::wire::{self, BodyHash};

/// The most files looked at below one served folder, and how deep.
const MAX_FILES: usize = 100_000;
const MAX_DEPTH: usize = 32;

/// Every candidate model file (by name: `.safetensors`, `.gguf`, …, `.zt`, `.tenso`) of a mount, as
/// `(id, canonical path)`, sorted by id. Symlinks are followed only to files inside the mount.
fn candidates(m: &Mount) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    if let Some(only) = &m.only {
        // The model file itself (not its shards and splits, which it lists).
        if let Some(p) = only.first()
            && let Ok(rel) = p.strip_prefix(&m.root)
        {
            out.push((format!("{}/{}", m.name, rel.to_string_lossy()), p.clone()));
        }
        return out;
    }
    let mut stack = vec![(m.root.clone(), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            seen += 1;
            if seen > MAX_FILES {
                break;
            }
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((p, depth + 1));
                }
                continue;
            }
            // Every format Model opens by its name: the model formats, `.zt` and Tenso files.
            let named = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(tensorlane_core::detect::format_from_name);
            if named.is_none() {
                continue;
            }
            let Ok(canon) = p.canonicalize() else { continue };
            if !canon.starts_with(&m.root) || !canon.is_file() {
                continue;
            }
            let Ok(rel) = p.strip_prefix(&m.root) else { continue };
            out.push((format!("{}/{}", m.name, rel.to_string_lossy()), canon));
        }
    }
    out.sort();
    out
}

/// The most files the models kept open for `/tensors/` and `/ws` hold open in all (one descriptor
/// each: the model file, its shards and companions). Past it, models no request is using are
/// closed first.
const MAX_OPEN_FILES: usize = 64;

impl Shared {
    /// Opens the model at canonical `path` with `pread` (not a map: a served file may be
    /// truncated or rewritten while the server runs, which must be an error for that request,
    /// not SIGBUS for the process), under the whole-tensor limit.
    fn open_model(&self, path: &Path) -> Result<Model, String> {
        let options = ModelOptions {
            mmap: false,
            limits: ReadLimits {
                max_tensor_bytes: self.limits.max_tensor_bytes,
            },
        };
        Model::open_with(path, &options).map_err(|e| e.to_string())
    }

    /// The cached model of `path` when it was opened at `stamp`.
    fn cached(&self, path: &Path, stamp: Stamp) -> Option<Arc<Model>> {
        let cache = self.models.lock().ok()?;
        let (s, m) = cache.get(path)?;
        (*s == stamp).then(|| m.clone())
    }

    /// The model at canonical `path`, opened once per version of the file and kept open for the
    /// next request (at most [`MAX_OPEN_FILES`] files held open by the cache).
    fn model(&self, path: &Path) -> Result<Arc<Model>, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let stamp = Stamp::of(&meta);
        if let Some(m) = self.cached(path, stamp) {
            return Ok(m);
        }
        let m = Arc::new(self.open_model(path)?);
        if let Ok(mut cache) = self.models.lock() {
            cache.insert(path.to_path_buf(), (stamp, m.clone()));
            let files =
                |c: &HashMap<PathBuf, (Stamp, Arc<Model>)>| c.values().map(|(_, m)| m.sources().count()).sum::<usize>();
            while files(&cache) > MAX_OPEN_FILES && cache.len() > 1 {
                // Idle models first (only the cache holds them), never the one just opened.
                let victim = cache
                    .iter()
                    .filter(|(p, _)| p.as_path() != path)
                    .min_by_key(|(_, (_, m))| Arc::strong_count(m))
                    .map(|(p, _)| p.clone());
                match victim {
                    Some(v) => cache.remove(&v),
                    None => break,
                };
            }
        }
        Ok(m)
    }

    /// The model at canonical `path` for a listing: the cached one when it is current, else
    /// opened, read and closed again (a listing of many models never holds their files open).
    fn listed_model(&self, path: &Path) -> Result<Arc<Model>, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(m) = self.cached(path, Stamp::of(&meta)) {
            return Ok(m);
        }
        Ok(Arc::new(self.open_model(path)?))
    }

    /// `message` with each served folder's path on this machine replaced by its URL
    /// (`/files/{mount}`): what is sent to a client names files by their URLs, never by the
    /// server's own paths.
    fn scrub(&self, message: &str) -> String {
        let mut out = message.to_string();
        for m in &self.mounts {
            let root = m.root.to_string_lossy();
            if root.len() > 1 {
                out = out.replace(root.as_ref(), &format!("/files/{}", files::encode_segment(&m.name)));
            }
        }
        out
    }

    /// The URL of canonical file `path`, if a mount serves it.
    fn url_of(&self, path: &Path) -> Option<String> {
        self.mounts.iter().find_map(|m| {
            let rel = path.strip_prefix(&m.root).ok()?;
            if let Some(only) = &m.only
                && !only.iter().any(|o| o == path)
            {
                return None;
            }
            Some(format!(
                "/files/{}/{}",
                files::encode_segment(&m.name),
                files::encode_path(&rel.to_string_lossy())
            ))
        })
    }

    /// Resolves `/tensors/` path `rest` (decoded) to a model and a tensor name.
    fn find(&self, rest: &str) -> Result<(String, Arc<Model>, String), Refusal> {
        let comps = files::components(rest)?;
        let Some((first, tail)) = comps.split_first() else {
            return Err(Refusal::NotFound(
                "/tensors/: name a model and a tensor (see /models)".into(),
            ));
        };
        let Some(mount) = self.mounts.iter().find(|m| &m.name == first) else {
            return Err(Refusal::NotFound(format!(
                "/tensors/{rest}: no mount named {first:?} (see /models)"
            )));
        };
        let mut p = mount.root.clone();
        for (i, c) in tail.iter().enumerate() {
            p.push(c);
            if p.is_file() {
                let canon = files::locate(&mount.root, &tail[..=i], rest)?;
                if let Some(only) = &mount.only
                    && only.first() != Some(&canon)
                {
                    return Err(Refusal::NotFound(format!(
                        "/tensors/{rest}: not a model this server lists"
                    )));
                }
                let name = tail[i + 1..].join("/");
                if name.is_empty() {
                    return Err(Refusal::NotFound(format!(
                        "/tensors/{rest}: name a tensor after the model"
                    )));
                }
                let id = std::iter::once(first.as_str())
                    .chain(tail[..=i].iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join("/");
                let model = self
                    .model(&canon)
                    .map_err(|e| Refusal::NotFound(format!("{id}: cannot be opened as a model: {}", self.scrub(&e))))?;
                return Ok((id, model, name));
            }
        }
        Err(Refusal::NotFound(format!(
            "/tensors/{rest}: no model file on this path (see /models)"
        )))
    }
}

/// One tensor's entry in `/models`; a tensor stored as parts (a `.zt` sparse object, a Tenso
/// sparse packet) lists each part's URL and byte range under `parts`.
fn tensor_json(t: &TensorInfo, source_urls: &[Option<String>], packet_url: String) -> Value {
    let mut v = stored_json(t, source_urls, packet_url.clone());
    if let Storage::Parts(p) = &t.storage {
        v["layout"] = json!(p.layout);
        v["parts"] = p
            .parts
            .iter()
            .map(|part| {
                let one = TensorInfo {
                    name: part.name.clone(),
                    storage: part.storage.clone(),
                    ..t.clone()
                };
                let mut j = stored_json(&one, source_urls, packet_url.clone());
                j["dtype"] = json!(part.type_name);
                j["nbytes"] = json!(part.len);
                for k in ["shape", "zero_copy", "packet"] {
                    j.as_object_mut().map(|o| o.remove(k));
                }
                j
            })
            .collect();
    }
    v
}

/// The storage fields of a tensor's `/models` entry.
fn stored_json(t: &TensorInfo, source_urls: &[Option<String>], packet_url: String) -> Value {
    let (source, range, stored) = match &t.storage {
        Storage::Range { source, offset, len } => (Some(*source), Some([*offset, offset + len]), "range"),
        Storage::Deflate {
            source,
            offset,
            compressed,
            ..
        } => (Some(*source), Some([*offset, offset + compressed]), "deflate"),
        Storage::Encoded {
            source, offset, len, ..
        } => (Some(*source), Some([*offset, offset + len]), "encoded"),
        Storage::Inline(_) => (None, None, "inline"),
        Storage::Hdf5Chunked(_) => (Some(0), None, "hdf5-chunked"),
        Storage::Parts(_) => (None, None, "parts"),
    };
    json!({
        "name": t.name,
        "dtype": t.ty.name(),
        "shape": t.shape,
        "nbytes": t.nbytes(),
        "storage": stored,
        "url": source.and_then(|s| source_urls.get(s).cloned().flatten()),
        "byte_range": range,
        "zero_copy": t.is_zero_copy(),
        "packet": packet_url,
    })
}

/// `GET /models`.
pub(super) async fn list(AxState(s): AxState<Arc<Shared>>) -> Response {
    let listed = tokio::task::spawn_blocking(move || {
        let mut models = Vec::new();
        let mut errors = Vec::new();
        for m in &s.mounts {
            for (id, path) in candidates(m) {
                match s.listed_model(&path) {
                    Ok(model) => {
                        let urls: Vec<Option<String>> = model.sources().map(|(p, _)| s.url_of(p)).collect();
                        let sources: Vec<Value> = model
                            .sources()
                            .zip(&urls)
                            .map(|((_, size), url)| json!({ "url": url, "size": size }))
                            .collect();
                        let base = format!("/tensors/{}/", files::encode_path(&id));
                        let tensors: Vec<Value> = model
                            .catalog()
                            .tensors
                            .iter()
                            .map(|t| tensor_json(t, &urls, format!("{base}{}", files::encode_path(&t.name))))
                            .collect();
                        models.push(json!({
                            "id": id,
                            "url": urls.first().cloned().flatten(),
                            "format": model.format().name(),
                            "sources": sources,
                            "tensors": tensors,
                        }));
                    }
                    Err(e) => errors.push(json!({ "id": id, "error": s.scrub(&e) })),
                }
            }
        }
        json!({ "models": models, "errors": errors })
    })
    .await;
    match listed {
        Ok(v) => Json(v).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("listing failed: {e}\n")).into_response(),
    }
}

/// `?dequantize=f32|f16&integrity=1`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct PacketQuery {
    dequantize: Option<String>,
    integrity: Option<String>,
}

/// What a packet is made with.
#[derive(Clone, Copy, Debug)]
struct PacketOptions {
    /// `Some(DType::F32 | DType::F16)`: ggml blocks dequantized to that type.
    dequantize: Option<DType>,
    integrity: bool,
}

fn dequantize_option(v: Option<&str>) -> Result<Option<DType>, String> {
    match v {
        None | Some("") => Ok(None),
        Some("f32" | "float32") => Ok(Some(DType::F32)),
        Some("f16" | "float16") => Ok(Some(DType::F16)),
        Some(o) => Err(format!("dequantize={o}: use f32 or f16")),
    }
}

/// The piece size packets are read, hashed and sent in.
const CHUNK: usize = 256 << 10;
/// What one streamed response holds at most, counted against the budget: the piece being read,
/// the one held back until the next is read, the pieces queued for the connection ([`QUEUED`])
/// and the one being written, with room to spare.
const STREAM_BYTES: u64 = 6 * CHUNK as u64;
/// Pieces queued between the reading thread and the connection.
const QUEUED: usize = 2;
/// Stored ggml bytes dequantized at a time (a whole number of blocks below it).
const DEQUANTIZE_CHUNK: u64 = 64 << 10;
/// How long a request waits for its share of [`Config::max_memory`](super::Config::max_memory)
/// before it is answered 503.
const BUDGET_WAIT: Duration = Duration::from_secs(20);

/// The memory budget of `/tensors` and `/ws` ([`Config::max_memory`](super::Config::max_memory))
/// and the whole-tensor limit ([`Config::max_tensor_bytes`](super::Config::max_tensor_bytes)).
///
/// Every packet request reserves what it will hold before it reads anything: a streamed
/// response or WebSocket message [`STREAM_BYTES`], plus the tensor's bytes when its storage
/// cannot be read in pieces (a strided or gathered layout is read whole). A request that does not fit waits
/// (at most [`BUDGET_WAIT`], then 503 with `Retry-After`) for others to finish; one that could
/// never fit is refused (413).
#[derive(Debug)]
pub(super) struct Limits {
    /// Permits are KiB.
    budget: Arc<Semaphore>,
    /// The budget in bytes.
    max_memory: u64,
    /// The most bytes one tensor held whole may take.
    max_tensor_bytes: u64,
}

/// A share of the budget, given back when dropped.
struct Reserved(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Limits {
    /// A budget of `max_memory` bytes (at least 1 MiB) and the whole-tensor limit.
    pub(super) fn new(max_memory: u64, max_tensor_bytes: u64) -> Limits {
        let max_memory = max_memory.max(1 << 20);
        let kib = (max_memory >> 10)
            .min(Semaphore::MAX_PERMITS as u64)
            .min(u64::from(u32::MAX));
        Limits {
            budget: Arc::new(Semaphore::new(kib as usize)),
            max_memory: kib << 10,
            max_tensor_bytes,
        }
    }

    /// Reserves `bytes` of the budget for `what`: waits for it at most [`BUDGET_WAIT`].
    async fn reserve(&self, bytes: u64, what: &str) -> Result<Reserved, Failure> {
        if bytes > self.max_memory {
            return Err(Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{what}: needs {bytes} bytes in memory at once, over this server's --max-memory of {} bytes; \
                     read it from the file URL with Range requests, or start the server with a larger --max-memory",
                    self.max_memory
                ),
            ));
        }
        let kib = bytes.div_ceil(1024).max(1) as u32;
        match tokio::time::timeout(BUDGET_WAIT, self.budget.clone().acquire_many_owned(kib)).await {
            Ok(Ok(p)) => Ok(Reserved(Some(p))),
            Ok(Err(_)) | Err(_) => Err(Failure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{what}: the server's --max-memory ({} bytes) is taken by other requests; retry shortly",
                    self.max_memory
                ),
            )),
        }
    }
}

/// An answer other than a packet: a status and a message.
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    fn new(status: StatusCode, message: String) -> Failure {
        Failure { status, message }
    }

    fn into_response(self) -> Response {
        let mut r = (self.status, self.message + "\n").into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Failure {
        match r {
            Refusal::Bad(m) => Failure::new(StatusCode::BAD_REQUEST, m),
            Refusal::NotFound(m) => Failure::new(StatusCode::NOT_FOUND, m),
        }
    }
}

/// How a packet's body is made.
#[derive(Clone, Copy, Debug)]
enum BodyKind {
    /// The tensor's bytes as [`Model::read_chunks`] gives them.
    Stored,
    /// ggml blocks of type `.0` dequantized to `.1` (F32 or F16), a few blocks at a time.
    Dequantized(GgmlType, DType),
}

/// A packet ready to be produced: everything checked, nothing read yet.
struct Plan {
    model: Arc<Model>,
    /// Index of the tensor in the model's catalog.
    index: usize,
    /// `model id: tensor name`, for messages.
    what: String,
    head: Vec<u8>,
    body_len: u64,
    kind: BodyKind,
    integrity: bool,
    /// Whether the storage can only be read whole (the reader holds `stored` bytes at once).
    whole: bool,
    /// The tensor's stored bytes.
    stored: u64,
}

impl Plan {
    /// The packet's length.
    fn len(&self) -> u64 {
        self.head.len() as u64 + self.body_len + if self.integrity { 8 } else { 0 }
    }

    fn tensor(&self) -> &TensorInfo {
        &self.model.catalog().tensors[self.index]
    }

    /// What the reading holds whole besides the pieces in flight: the stored bytes when the storage
    /// cannot be read in pieces.
    fn held_whole(&self) -> u64 {
        if self.whole { self.stored } else { 0 }
    }

    /// Produces the body in pieces (each at most about [`CHUNK`] bytes) for `sink`, then checks
    /// that no file of the model changed while it was read. Runs on a blocking thread.
    fn body(&self, sink: &mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
        let t = self.tensor();
        let mut stop: Option<String> = None;
        let mut feed = |p: &[u8]| -> Result<(), tensorlane_core::formats::FormatError> {
            sink(p).map_err(|e| {
                stop = Some(e.clone());
                tensorlane_core::formats::FormatError::new("serve", tensorlane_core::formats::ErrorKind::Io, e)
            })
        };
        let read = match self.kind {
            BodyKind::Stored => self.model.read_chunks(t, CHUNK, &mut feed),
            BodyKind::Dequantized(g, to) => {
                let (block, size) = (g.block_size().unwrap_or(1).max(1), g.type_size().unwrap_or(1).max(1));
                let per = (DEQUANTIZE_CHUNK / size).max(1) * size;
                let mut pending: Vec<u8> = Vec::with_capacity(per as usize);
                let mut values: Vec<f32> = Vec::new();
                let mut out: Vec<u8> = Vec::new();
                let mut convert = |blocks: &[u8],
                                   feed: &mut dyn FnMut(&[u8]) -> Result<(), tensorlane_core::formats::FormatError>|
                 -> Result<(), tensorlane_core::formats::FormatError> {
                    let n = (blocks.len() as u64 / size * block) as usize;
                    values.resize(n, 0.0);
                    ggml::dequantize_into(g, blocks, &mut values)?;
                    out.clear();
                    if to == DType::F16 {
                        out.extend(
                            values
                                .iter()
                                .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()),
                        );
                    } else {
                        out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
                    }
                    feed(&out)
                };
                let r = self.model.read_chunks(t, per as usize, &mut |p| {
                    let mut p = p;
                    while !p.is_empty() {
                        let take = (per as usize - pending.len()).min(p.len());
                        pending.extend_from_slice(&p[..take]);
                        p = &p[take..];
                        if pending.len() == per as usize {
                            convert(&pending, &mut feed)?;
                            pending.clear();
                        }
                    }
                    Ok(())
                });
                match r {
                    Ok(()) if !pending.is_empty() => convert(&pending, &mut feed).map_err(crate::Error::from),
                    other => other,
                }
            }
        };
        if let Some(e) = stop {
            return Err(e);
        }
        read.map_err(|e| format!("{}: {e}", self.what))?;
        self.model.check_unchanged().map_err(|e| format!("{}: {e}", self.what))
    }
}

/// Whether [`Model::read_chunks`] reads `t` in bounded pieces (ranges, deflated zip members,
/// `.zt` zstd-seekable parts) rather than whole.
fn read_in_pieces(t: &TensorInfo) -> bool {
    t.arrangement.view.is_none()
        && matches!(
            t.storage,
            Storage::Range { .. }
                | Storage::Deflate { .. }
                | Storage::Encoded {
                    codec: Codec::ZstdSeekable,
                    ..
                }
        )
}

/// Checks tensor `name` of `model` and says how its packet is made, without reading it.
fn plan(model: Arc<Model>, id: &str, name: &str, opts: PacketOptions, limits: &Limits) -> Result<Plan, Failure> {
    let Some(index) = model.catalog().tensors.iter().position(|t| t.name == name) else {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("{id}: no tensor named {name:?} (see /models)"),
        ));
    };
    let t = &model.catalog().tensors[index];
    let what = format!("{id}: {name}");
    let refuse = |m: String| Failure::new(StatusCode::UNPROCESSABLE_ENTITY, format!("{what}: {m}"));
    if let Storage::Parts(p) = &t.storage {
        let names: Vec<&str> = p.parts.iter().map(|x| x.name.as_str()).collect();
        return Err(refuse(format!(
            "it is stored in layout {} as the parts {}, which no one Tenso dense packet carries: read the parts from \
             the file URL with Range requests (their offsets are in /models)",
            p.layout,
            names.join(", ")
        )));
    }
    let numel = t
        .numel()
        .ok_or_else(|| refuse("its element count overflows 64 bits".into()))?;
    let stored = t.nbytes().ok_or_else(|| refuse("its size overflows 64 bits".into()))?;
    let (dtype, kind) = match (t.ty, opts.dequantize) {
        (ElementType::Ggml(g), Some(to)) => {
            if !ggml::can_dequantize(g) {
                return Err(refuse(format!(
                    "{} blocks cannot be dequantized: read the raw blocks from the file URL with a Range request",
                    g.name()
                )));
            }
            (to, BodyKind::Dequantized(g, to))
        }
        (ElementType::Ggml(g), None) => {
            return Err(refuse(format!(
                "{} blocks have no Tenso dtype: ask for ?dequantize=f32 or ?dequantize=f16, or read the raw blocks \
                 from the file URL with a Range request",
                g.name()
            )));
        }
        (ty, _) => {
            let dtype = match ty {
                ElementType::Dense(d) => d,
                ElementType::Logical(LogicalType::Bool) => DType::Bool,
                ElementType::Logical(LogicalType::Complex64) => DType::C64,
                ElementType::Logical(LogicalType::Complex128) => DType::C128,
                other => {
                    return Err(refuse(format!(
                        "{} has no Tenso dtype: read its bytes from the file URL with a Range request (byte_range in \
                         /models)",
                        other.name()
                    )));
                }
            };
            (dtype, BodyKind::Stored)
        }
    };
    let body_len = numel
        .checked_mul(dtype.itemsize() as u64)
        .ok_or_else(|| refuse("its size overflows 64 bits".into()))?;
    if matches!(kind, BodyKind::Stored) && body_len != stored {
        return Err(refuse(format!(
            "{} bytes are stored where {numel} {dtype:?} elements take {body_len}",
            stored
        )));
    }
    let eo = EncodeOptions {
        integrity: opts.integrity,
        ..EncodeOptions::default()
    };
    let head = wire::dense_head(dtype, &t.shape, &eo).map_err(|e| refuse(format!("cannot encode: {e}")))?;
    let whole = !read_in_pieces(t);
    if whole && stored > limits.max_tensor_bytes {
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{what}: its storage can only be read whole ({stored} bytes), over this server's --max-tensor-bytes of \
                 {} bytes; read it from the file URL with Range requests, or raise --max-tensor-bytes",
                limits.max_tensor_bytes
            ),
        ));
    }
    Ok(Plan {
        model,
        index,
        what,
        head,
        body_len,
        kind,
        integrity: opts.integrity,
        whole,
        stored,
    })
}

/// A streamed packet: pieces from the reading thread, the budget share held until the body
/// is dropped. An error from the reader ends the body early: the connection is closed before
/// `Content-Length` bytes were sent, which every client reports as a short body.
struct Streamed {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    remaining: u64,
    _reserved: Reserved,
}

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, std::io::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => {
                self.remaining = self.remaining.saturating_sub(b.len() as u64);
                Poll::Ready(Some(Ok(BodyFrame::data(b))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(Some(Err(std::io::Error::other("the packet ended before its length")))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// Starts producing `plan`'s packet on a blocking thread: head, the body in pieces, footer.
fn stream(plan: Plan, reserved: Reserved) -> Streamed {
    let (tx, rx) = mpsc::channel(QUEUED);
    let remaining = plan.len();
    tokio::task::spawn_blocking(move || {
        let send = |b: Bytes| tx.blocking_send(Ok(b)).map_err(|_| "the client went away".to_string());
        let run = || -> Result<(), String> {
            send(Bytes::from(plan.head.clone()))?;
            let mut hash = BodyHash::new();
            let mut sent = 0u64;
            // Each piece is sent once the next one was read, and the last only after the check
            // that the files did not change: a change found at the end still cuts the body short.
            let mut held: Option<Bytes> = None;
            plan.body(&mut |p| {
                if plan.integrity {
                    hash.update(p);
                }
                sent += p.len() as u64;
                match held.replace(Bytes::copy_from_slice(p)) {
                    Some(b) => send(b),
                    None => Ok(()),
                }
            })?;
            if sent != plan.body_len {
                return Err(format!(
                    "{}: {sent} body bytes were read where {} were expected",
                    plan.what, plan.body_len
                ));
            }
            if let Some(b) = held {
                send(b)?;
            }
            if plan.integrity {
                send(Bytes::copy_from_slice(&hash.finish()))?;
            }
            Ok(())
        };
        if let Err(e) = run() {
            let _ = tx.blocking_send(Err(std::io::Error::other(e)));
        }
    });
    Streamed {
        rx,
        remaining,
        _reserved: reserved,
    }
}

/// `GET /tensors/{model}/{name}`: the packet streamed (head, the body read from the file in
/// pieces, footer) under the server's memory budget.
pub(super) async fn tensor(AxState(s): AxState<Arc<Shared>>, Query(q): Query<PacketQuery>, req: Request) -> Response {
    let rest = req.uri().path().strip_prefix("/tensors/").unwrap_or("").to_string();
    let dequantize = match dequantize_option(q.dequantize.as_deref()) {
        Ok(d) => d,
        Err(m) => return (StatusCode::BAD_REQUEST, m + "\n").into_response(),
    };
    let opts = PacketOptions {
        dequantize,
        integrity: matches!(q.integrity.as_deref(), Some("1" | "true" | "yes")),
    };
    let s2 = s.clone();
    let planned = tokio::task::spawn_blocking(move || {
        let (id, model, name) = s2.find(&rest)?;
        plan(model, &id, &name, opts, &s2.limits)
    })
    .await
    .unwrap_or_else(|e| {
        Err(Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding failed: {e}"),
        ))
    });
    let plan = match planned {
        Ok(p) => p,
        Err(f) => return f.into_response(),
    };
    // A budget smaller than the pieces in flight still lets one stream through at a time.
    let need = STREAM_BYTES.min(s.limits.max_memory) + plan.held_whole();
    let reserved = match s.limits.reserve(need, &plan.what).await {
        Ok(r) => r,
        Err(f) => return f.into_response(),
    };
    let len = plan.len();
    let mut r = Response::new(Body::new(stream(plan, reserved)));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// A WebSocket request (see the module docs).
#[derive(Debug, Deserialize)]
struct WsRequest {
    #[serde(default)]
    model: Option<String>,
    tensors: Vec<WsItem>,
    #[serde(default)]
    dequantize: Option<String>,
    #[serde(default)]
    integrity: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WsItem {
    Name(String),
    Full { model: String, name: String },
}

/// Plans one WebSocket answer and reserves its share of the budget: [`STREAM_BYTES`] (the
/// packet is streamed as one fragmented message) plus, for a storage read whole, its bytes.
async fn plan_message(s: &Arc<Shared>, rest: String, opts: PacketOptions) -> Result<(Plan, Reserved), Failure> {
    let s2 = s.clone();
    let plan = tokio::task::spawn_blocking(move || {
        let (id, model, name) = s2.find(&rest)?;
        plan(model, &id, &name, opts, &s2.limits)
    })
    .await
    .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding failed: {e}")))??;
    let need = STREAM_BYTES.min(s.limits.max_memory) + plan.held_whole();
    let reserved = s.limits.reserve(need, &plan.what).await?;
    Ok((plan, reserved))
}

/// The server's side of an upgraded connection.
type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Whether header `name` lists `token` (comma-separated, any case).
fn lists(h: &axum::http::HeaderMap, name: header::HeaderName, token: &str) -> bool {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// `GET /ws`: the WebSocket handshake (RFC 6455 §4.2), done here rather than by axum's
/// extractor so that a packet can be sent as one message in several frames (a piece of the
/// file each) instead of one frame that holds it whole.
pub(super) async fn websocket(AxState(s): AxState<Arc<Shared>>, mut req: Request) -> Response {
    let h = req.headers();
    let bad = |m: &str| (StatusCode::BAD_REQUEST, format!("/ws: {m}\n")).into_response();
    if !lists(h, header::UPGRADE, "websocket") {
        return bad("not a WebSocket handshake: send `Upgrade: websocket` (a WebSocket client does)");
    }
    if !lists(h, header::CONNECTION, "upgrade") {
        return bad("not a WebSocket handshake: send `Connection: Upgrade`");
    }
    if h.get(header::SEC_WEBSOCKET_VERSION).and_then(|v| v.to_str().ok()) != Some("13") {
        let mut r = bad("WebSocket version 13 only (Sec-WebSocket-Version: 13)");
        r.headers_mut()
            .insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return r;
    }
    let Some(key) = h
        .get(header::SEC_WEBSOCKET_KEY)
        .map(|k| derive_accept_key(k.as_bytes()))
    else {
        return bad("the handshake has no Sec-WebSocket-Key");
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            "/ws: this connection cannot be upgraded (HTTP/1.1 only)\n",
        )
            .into_response();
    };
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut config = WebSocketConfig::default();
        config.max_message_size = Some(MAX_REQUEST);
        config.max_frame_size = Some(MAX_REQUEST);
        let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
        session(s, socket).await;
    });
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&key) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    r
}

/// The largest request message (and frame) a WebSocket client may send.
const MAX_REQUEST: usize = 1 << 20;

/// Sends a JSON text message; `false` when the peer is gone.
async fn send_json(socket: &mut Socket, v: Value) -> bool {
    socket.send(Message::text(v.to_string())).await.is_ok()
}

/// Sends a close frame with `code` and `reason` (cut to the 123 bytes a close frame carries).
async fn close(socket: &mut Socket, code: CloseCode, reason: &str) {
    let mut reason = reason.to_string();
    while reason.len() > 123 {
        reason.pop();
    }
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

/// Sends `plan`'s packet as one binary message in frames of a piece each: `false` when the peer
/// is gone, or when reading failed (a file changed, a read error), which closes the connection
/// with 1011 and the reason in the middle of the message (a client sees the message cut off).
async fn send_packet(s: &Shared, socket: &mut Socket, plan: Plan, reserved: Reserved) -> bool {
    let mut body = stream(plan, reserved);
    let mut first = true;
    loop {
        match body.rx.recv().await {
            Some(Ok(b)) => {
                body.remaining = body.remaining.saturating_sub(b.len() as u64);
                let fin = body.remaining == 0;
                let op = OpCode::Data(if first { Data::Binary } else { Data::Continue });
                first = false;
                if socket.send(Message::Frame(Frame::message(b, op, fin))).await.is_err() {
                    return false;
                }
                if fin {
                    return true;
                }
            }
            Some(Err(e)) => {
                close(socket, CloseCode::Error, &s.scrub(&e.to_string())).await;
                return false;
            }
            None => {
                close(socket, CloseCode::Error, "the packet ended before its length").await;
                return false;
            }
        }
    }
}

/// The close code for a failed read of the peer's messages: 1009 for a message over the limit,
/// 1002 for a protocol error (a reserved bit, a bad opcode, an unmasked frame, …), 1007 for text
/// that is not UTF-8; `None` when the connection itself failed (nothing can be sent).
fn close_for(e: &tungstenite::Error) -> Option<(CloseCode, String)> {
    use tungstenite::Error as E;
    match e {
        E::Capacity(c) => Some((CloseCode::Size, format!("{c}: requests are at most 1 MiB"))),
        E::Protocol(p) => Some((CloseCode::Protocol, p.to_string())),
        E::Utf8(m) => Some((CloseCode::Invalid, format!("a text message is not UTF-8: {m}"))),
        _ => None,
    }
}

/// Answers the requests of one WebSocket, one after the other.
async fn session(s: Arc<Shared>, mut socket: Socket) {
    loop {
        let msg = match socket.next().await {
            None => return,
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                if let Some((code, reason)) = close_for(&e) {
                    close(&mut socket, code, &reason).await;
                }
                return;
            }
        };
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(_) => return,
            Message::Binary(_) => {
                if !send_json(&mut socket, json!({ "error": "send a JSON text request, not binary" })).await {
                    return;
                }
                continue;
            }
            _ => continue,
        };
        let req: WsRequest = match serde_json::from_str(text.as_str()) {
            Ok(r) => r,
            Err(e) => {
                let m = format!(
                    "the request is not {{\"tensors\": [{{\"model\", \"name\"}} or name, ...], \"model\"?, \"dequantize\"?, \
                     \"integrity\"?}}: {e}"
                );
                if !send_json(&mut socket, json!({ "error": m })).await {
                    return;
                }
                continue;
            }
        };
        let dequantize = match dequantize_option(req.dequantize.as_deref()) {
            Ok(d) => d,
            Err(m) => {
                if !send_json(&mut socket, json!({ "error": m })).await {
                    return;
                }
                continue;
            }
        };
        let opts = PacketOptions {
            dequantize,
            integrity: req.integrity,
        };
        let (mut sent, mut failed) = (0u64, 0u64);
        for (index, item) in req.tensors.into_iter().enumerate() {
            let (model, name) = match item {
                WsItem::Full { model, name } => (model, name),
                WsItem::Name(name) => (req.model.clone().unwrap_or_default(), name),
            };
            let rest = format!("{}/{}", files::encode_path(&model), files::encode_path(&name));
            let ok = match plan_message(&s, rest, opts).await {
                Ok((plan, reserved)) => {
                    sent += 1;
                    send_json(
                        &mut socket,
                        json!({ "index": index, "model": model, "name": name, "bytes": plan.len() }),
                    )
                    .await
                        && send_packet(&s, &mut socket, plan, reserved).await
                }
                Err(f) => {
                    failed += 1;
                    send_json(
                        &mut socket,
                        json!({ "index": index, "model": model, "name": name, "status": f.status.as_u16(), "error": f.message }),
                    )
                    .await
                }
            };
            if !ok {
                return;
            }
        }
        if !send_json(&mut socket, json!({ "done": true, "sent": sent, "failed": failed })).await {
            return;
        }
    }
}
