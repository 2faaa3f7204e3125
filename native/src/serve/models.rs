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
//! flushed to the socket, so a slow reader slows the server instead of filling its memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, Request, State as AxState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tensorlane_core::formats::{ElementType, Storage, TensorInfo};
use tensorlane_core::wire::{self, EncodeOptions};
use tensorlane_core::zt::format::LogicalType;
use tensorlane_core::{DType, Tensor};

use super::files::{self, Refusal, Stamp};
use super::{Mount, Shared};
use crate::model::{Model, ModelOptions};

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

impl Shared {
    /// The model at canonical `path`, opened once per version of the file.
    fn model(&self, path: &Path) -> Result<Arc<Model>, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let stamp = Stamp::of(&meta);
        if let Ok(cache) = self.models.lock()
            && let Some((s, m)) = cache.get(path)
            && *s == stamp
        {
            return Ok(m.clone());
        }
        // pread, not a map: a served file may be truncated or rewritten while the server runs,
        // which must be an error for that request, not SIGBUS for the process.
        let options = ModelOptions {
            mmap: false,
            ..ModelOptions::default()
        };
        let m = Arc::new(Model::open_with(path, &options).map_err(|e| e.to_string())?);
        if let Ok(mut cache) = self.models.lock() {
            cache.insert(path.to_path_buf(), (stamp, m.clone()));
        }
        Ok(m)
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
                    .map_err(|e| Refusal::NotFound(format!("{id}: cannot be opened as a model: {e}")))?;
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
                match s.model(&path) {
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
                    Err(e) => errors.push(json!({ "id": id, "error": e })),
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

/// Tensor `name` of `model` as one Tenso packet: (status, bytes or message).
fn packet(model: &Model, id: &str, name: &str, opts: PacketOptions) -> Result<Vec<u8>, (StatusCode, String)> {
    let Some(t) = model.catalog().tensors.iter().find(|t| t.name == name) else {
        return Err((
            StatusCode::NOT_FOUND,
            format!("{id}: no tensor named {name:?} (see /models)"),
        ));
    };
    let fail = |e: crate::Error| (StatusCode::INTERNAL_SERVER_ERROR, format!("{id}: {name}: {e}"));
    let refuse = |m: String| (StatusCode::UNPROCESSABLE_ENTITY, format!("{id}: {name}: {m}"));
    if let Storage::Parts(p) = &t.storage {
        let names: Vec<&str> = p.parts.iter().map(|x| x.name.as_str()).collect();
        return Err(refuse(format!(
            "it is stored in layout {} as the parts {}, which no one Tenso dense packet carries: read the parts from \
             the file URL with Range requests (their offsets are in /models)",
            p.layout,
            names.join(", ")
        )));
    }
    let shape = t.shape.clone();
    let tensor: Tensor<'_> = match (t.ty, opts.dequantize) {
        (ElementType::Ggml(_), Some(to)) => {
            let values = model.dequantize(t).map_err(fail)?;
            let r = if to == DType::F16 {
                let bits: Vec<u8> = values
                    .iter()
                    .flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes())
                    .collect();
                Tensor::new(DType::F16, shape, bits)
            } else {
                Tensor::from_values(shape, &values)
            };
            r.map_err(|e| refuse(e.to_string()))?
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
            let bytes = model.read(t).map_err(fail)?;
            Tensor::new(dtype, shape, bytes).map_err(|e| refuse(e.to_string()))?
        }
    };
    let eo = EncodeOptions {
        integrity: opts.integrity,
        ..EncodeOptions::default()
    };
    let parts = wire::encode_parts(&tensor, &eo).map_err(|e| refuse(format!("cannot encode: {e}")))?;
    let mut out = Vec::with_capacity(parts.len());
    out.extend_from_slice(&parts.head);
    out.extend_from_slice(&parts.body);
    out.extend_from_slice(&parts.footer);
    Ok(out)
}

/// `GET /tensors/{model}/{name}`.
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
    let done = tokio::task::spawn_blocking(move || {
        let (id, model, name) = s.find(&rest).map_err(|r| Box::new(r.into_response()))?;
        packet(&model, &id, &name, opts).map_err(|(st, m)| Box::new((st, m + "\n").into_response()))
    })
    .await;
    match done {
        Ok(Ok(bytes)) => {
            let mut r = bytes.into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            r
        }
        Ok(Err(r)) => *r,
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("encoding failed: {e}\n")).into_response(),
    }
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

/// `GET /ws`.
pub(super) async fn websocket(AxState(s): AxState<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(1 << 20)
        .on_upgrade(move |socket| session(s, socket))
}

/// Sends a JSON text message; `false` when the peer is gone.
async fn send_json(socket: &mut WebSocket, v: Value) -> bool {
    socket.send(Message::Text(v.to_string().into())).await.is_ok()
}

async fn session(s: Arc<Shared>, mut socket: WebSocket) {
    while let Some(Ok(msg)) = socket.recv().await {
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
            let s2 = s.clone();
            let rest = format!("{}/{}", files::encode_path(&model), files::encode_path(&name));
            let built = tokio::task::spawn_blocking(move || {
                let (id, m, n) = s2.find(&rest).map_err(|r| match r {
                    Refusal::Bad(m) => (StatusCode::BAD_REQUEST, m),
                    Refusal::NotFound(m) => (StatusCode::NOT_FOUND, m),
                })?;
                packet(&m, &id, &n, opts)
            })
            .await
            .unwrap_or_else(|e| Err((StatusCode::INTERNAL_SERVER_ERROR, format!("encoding failed: {e}"))));
            let ok = match built {
                Ok(bytes) => {
                    sent += 1;
                    send_json(
                        &mut socket,
                        json!({ "index": index, "model": model, "name": name, "bytes": bytes.len() }),
                    )
                    .await
                        && socket.send(Message::Binary(bytes.into())).await.is_ok()
                }
                Err((status, m)) => {
                    failed += 1;
                    send_json(
                        &mut socket,
                        json!({ "index": index, "model": model, "name": name, "status": status.as_u16(), "error": m }),
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
