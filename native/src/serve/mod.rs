//! `serve` (feature `serve`): a read-only HTTP and WebSocket server for model files and the web
//! inspector, the library behind `tensorlane serve`.
//!
//! # URL layout
//!
//! | path | what |
//! |---|---|
//! | `/` | a redirect to `/web-demo/` (with a web root), else a small JSON index |
//! | `/web-demo/`, `/js/`, `/wasm/pkg/`, `/tests/data/` | the inspector's files under [`Config::web`] (a checkout: the layout of `web-demo/serve.mjs`), else those of [`Config::assets`] from memory (no `/tests/data/`) |
//! | `/files/{mount}/{path}` | the files under each served path ([`Config::paths`]) |
//! | `/models` | JSON: every model under the served paths, with its file's `url`, format and tensors |
//! | `/tensors/{model}/{name}` | one tensor as a Tenso packet (`?dequantize=f32\|f16`, `?integrity=1`) |
//! | `/ws` | WebSocket: a JSON request names tensors, each comes back as a binary Tenso packet |
//! | `/v1/…` | the routes of [`Server::with_api`] (`tensorlane serve --model`: tensorlane-llm's OpenAI-compatible API), `POST` allowed |
//!
//! A served *directory* is mounted under its own name (`serve models/` → `/files/models/…`), with
//! everything below it. A served *file* is mounted under its folder's name and exposes only itself
//! and the companion files its model names (safetensors shards, GGUF splits, ONNX external data).
//! Two mounts with the same name get `-2`, `-3`, … appended.
//!
//! # Files
//!
//! `GET` and `HEAD` with `Accept-Ranges: bytes`, `Content-Length`, a strong `ETag` (the file's
//! identity, [`crate::source::FileId`]: size, modification time, inode and status-change time, so
//! that a file rewritten in place or replaced gets a new one even at the same size) and
//! `Last-Modified`. Conditions are evaluated in RFC 9110 §13.2.2 order:
//! `If-Match` / `If-Unmodified-Since` (412), `If-None-Match` / `If-Modified-Since` (304), then
//! `Range` with `If-Range` (an `If-Range` that does not match the current ETag or date sends the
//! whole file with 200). `Range` accepts one range: `bytes=a-b`, open-ended `bytes=a-` and suffix
//! `bytes=-n` (a suffix longer than the file is the whole file, as 206); a range starting at or
//! past the end is answered 416 with `Content-Range: bytes */size`. **Several ranges** in one
//! request are answered with the whole file (200), which RFC 9110 §14.2 allows: no multipart
//! bodies. A malformed `Range` header is ignored (200), as the RFC says.
//!
//! Bodies are read with `pread`, never from a memory map, so that a file truncated or rewritten
//! while it is served cannot kill the server with SIGBUS. A range of up to 256 KiB is read in one
//! go before the response starts (a file that shrank meanwhile is answered 503, retry); a longer
//! one is streamed in 256 KiB chunks, one chunk in memory per response, and a file that shrinks
//! under it ends that response early: the connection is closed before `Content-Length` bytes were
//! sent, which every HTTP client reports as a short body. Every chunk read checks the file's
//! identity again, so a file rewritten in place while its body is sent (same size, new
//! modification or status-change time) is cut off the same way, never finished under its old
//! `ETag` with a mix of both versions (a short range that changed before the answer started is
//! a `503`, retry). A rewrite within the file system's timestamp tick that keeps the size is not
//! detectable. Bytes the page cache holds are read on
//! the connection's own thread (on Linux `preadv2` with `RWF_NOWAIT`, which never waits for the
//! disk); the rest on tokio's blocking pool, so a cold file does not stall other connections.
//! Chunk buffers are reused (at most 8 MiB of them are kept).
//! Every request opens the file anew and takes its validators (`ETag`, `Last-Modified`) from the
//! open file, so a file replaced on disk is answered from its new version. Each served folder is
//! held open from the start: a request is opened beneath it (on Linux in one `openat2` call with
//! `RESOLVE_BENEATH`), so a folder renamed or replaced while the server runs is still the one
//! served.
//!
//! CORS: every origin may `GET`/`HEAD`, send `Range`, `If-Range`, `If-None-Match`,
//! `If-Modified-Since` and `Authorization`, and read `Content-Range`, `Content-Length`, `ETag`,
//! `Accept-Ranges` and `Last-Modified` (`Access-Control-Expose-Headers`). The `/v1/` API of
//! [`Server::with_api`] admits the origins of [`Config::api_origins`] only (loopback pages by
//! default), and answers every error under `/v1/` as an OpenAI error object (JSON).
//!
//! # Safety of the server
//!
//! Read-only (only `GET`, `HEAD`, `OPTIONS`; `POST` only under `/v1/` with [`Server::with_api`]). Paths are percent-decoded once, then any `..`, `.`,
//! backslash or NUL component is refused (400), and the file reached after following symlinks must
//! lie inside its mount (else 404, as for a missing file). An optional bearer token
//! ([`Config::token`]) guards everything but the inspector's own code (`/`, `/web-demo/`, `/js/`,
//! `/wasm/`): `Authorization: Bearer TOKEN`, or `?token=TOKEN` where a header cannot be set (a
//! browser's WebSocket); the scheme is matched without regard to case (`bearer` works), and the
//! token is compared as SHA-256 digests in constant time, so neither its bytes nor its length
//! show in the answer's timing.
//!
//! # Connections
//!
//! At most [`Config::max_connections`] connections are served at once; one more is answered at
//! once with `503 Service Unavailable` and `Retry-After: 1`, then closed (never left waiting in
//! the kernel's backlog). A connection that holds a slot without using it is closed:
//! - a new connection must send its first request head within [`Config::header_timeout`]
//!   (default 10 s), and a later request its head within that of its first byte;
//! - a kept-alive connection with no request in flight is closed after
//!   [`Config::idle_timeout`] (default 30 s) of silence, as is one whose client takes none of
//!   the response for that long.
//!
//! A request in flight (its handler runs, or its body is being sent to a client that reads it)
//! is never cut by these, and a WebSocket has neither.
//!
//! Error bodies name what was asked by its URL path (`/files/models/a.safetensors`), never by
//! the server's own path to it.
//!
//! ```no_run
//! # async fn f() -> Result<(), tensorlane::Error> {
//! use tensorlane::serve::{Config, Server};
//! let config = Config { paths: vec!["models".into()], ..Config::default() };
//! let server = Server::bind(config).await?;
//! println!("http://{}/models", server.local_addr());
//! server.run(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(()) }
//! ```

mod files;
mod listener;
mod models;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State as AxState};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use tower_http::cors::{Any, CorsLayer};

use crate::Error;

/// What to serve and how.
#[derive(Clone, Debug)]
pub struct Config {
    /// The address to listen on (default `127.0.0.1:8080`; port 0 picks a free port). The library
    /// binds what it is given; `tensorlane serve` refuses a non-loopback address unless a token
    /// or `--public` is given.
    pub bind: SocketAddr,
    /// Model files and folders to serve (see the module docs for their URLs).
    pub paths: Vec<PathBuf>,
    /// The folder holding `web-demo/`, `js/`, `wasm/pkg/` and `tests/data/` (a checkout), or
    /// `None` to serve [`Config::assets`] (or no inspector when that is empty).
    pub web: Option<PathBuf>,
    /// The inspector compiled into the program (the `tensorlane` binary embeds its own): served
    /// from memory, with content types, strong ETags, `Cache-Control: no-cache` and ranges, when
    /// [`Config::web`] is `None`. Empty: none.
    pub assets: &'static [Asset],
    /// A bearer token every data request must carry, or `None` for none.
    pub token: Option<String>,
    /// The most connections served at once (default 512); one more is answered `503` at once.
    pub max_connections: usize,
    /// How long a connection may take to send a request head (default 10 s; `None` or zero: no
    /// limit). See the module docs, *Connections*.
    pub header_timeout: Option<std::time::Duration>,
    /// How long a kept-alive connection may stay idle between requests, and a client may take
    /// none of a response (default 30 s; `None` or zero: no limit).
    pub idle_timeout: Option<std::time::Duration>,
    /// The most bytes of tensor data `/tensors/` and `/ws` hold in memory at once, all requests
    /// together (default [`DEFAULT_MAX_MEMORY`], 1 GiB): a streamed packet (`/tensors/`, or a
    /// `/ws` message sent in frames) takes 1.5 MiB of it, plus the tensor's bytes when its storage
    /// can only be read whole. A request that does not fit waits up to 20 s for others to finish,
    /// then is answered `503` with `Retry-After`; one that never could is answered `413`.
    pub max_memory: u64,
    /// The most bytes one tensor may take where it must be held whole (a storage that cannot be
    /// read in pieces, such as a strided or gathered layout): over it, `413` (default
    /// [`tensorlane_core::formats::DEFAULT_MAX_TENSOR_BYTES`], 4 GiB). Streamed packets are not
    /// limited by it.
    pub max_tensor_bytes: u64,
    /// The origins whose pages may call the `/v1/` API of [`Server::with_api`] (CORS): an exact
    /// origin (`https://app.example`), one with any port (`http://localhost:*`, which also takes
    /// none), or `*` for every origin. A request under `/v1/` from another origin is refused
    /// with `403`, and its preflight too; a page of this server itself (an `Origin` that is
    /// `http://` and the request's `Host`, an IP address) may always. Default
    /// [`DEFAULT_API_ORIGINS`]: loopback pages only. The other routes stay open to every origin.
    pub api_origins: Vec<String>,
}

/// [`Config::api_origins`]'s default: pages served from this machine's loopback addresses.
pub const DEFAULT_API_ORIGINS: [&str; 3] = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"];

/// [`Config::max_memory`]'s default: 1 GiB.
pub const DEFAULT_MAX_MEMORY: u64 = 1 << 30;

/// [`Config::header_timeout`]'s default.
pub const DEFAULT_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`Config::idle_timeout`]'s default.
pub const DEFAULT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            paths: Vec::new(),
            web: None,
            assets: &[],
            token: None,
            max_connections: 512,
            header_timeout: Some(DEFAULT_HEADER_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_memory: DEFAULT_MAX_MEMORY,
            max_tensor_bytes: tensorlane_core::formats::DEFAULT_MAX_TENSOR_BYTES,
            api_origins: DEFAULT_API_ORIGINS.iter().map(|o| o.to_string()).collect(),
        }
    }
}

/// One file of an inspector compiled into the program ([`Config::assets`]).
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    /// Its URL path without the leading `/`: `web-demo/index.html`, `js/browser.js`,
    /// `wasm/pkg/tensorlane_wasm_bg.wasm`, … (only `web-demo/`, `js/` and `wasm/` are served).
    pub path: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
    /// Its strong entity tag, quoted (`"…"`), for example a hash of the bytes: it must change
    /// whenever the bytes do.
    pub etag: &'static str,
}

/// A served path: a folder (everything below it) or one model file's folder, restricted to the
/// file and its companions.
#[derive(Debug)]
struct Mount {
    /// The first URL segment after `/files/`.
    name: String,
    /// The folder, canonical.
    root: PathBuf,
    /// For a file mount: the canonical files it exposes.
    only: Option<Vec<PathBuf>>,
    /// `root` held open (`None` where it cannot be opened): requests are opened beneath it (see
    /// `files::open_under`).
    dir: Option<std::fs::File>,
}

/// The state every handler shares.
#[derive(Debug)]
struct Shared {
    mounts: Vec<Mount>,
    web: Option<PathBuf>,
    /// `web` held open, as [`Mount::dir`].
    web_dir: Option<std::fs::File>,
    /// [`Config::assets`].
    assets: &'static [Asset],
    /// The SHA-256 of [`Config::token`].
    token: Option<[u8; 32]>,
    /// Models opened so far, by canonical path, with the (size, mtime) they were opened at.
    models: Mutex<HashMap<PathBuf, (files::Stamp, Arc<crate::model::Model>)>>,
    /// [`Config::max_memory`] and [`Config::max_tensor_bytes`].
    limits: models::Limits,
}

/// A bound server, ready to [`run`](Server::run).
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    max_connections: usize,
    timeouts: listener::Timeouts,
    /// [`Server::with_api`]'s routes.
    api: Option<Router>,
    /// [`Config::api_origins`].
    api_origins: Arc<Vec<String>>,
}

/// An I/O error on `path` doing `op`.
fn io_err(op: &'static str, path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// A folder's last component as a URL segment (`"root"` when it has none).
fn mount_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().replace(['/', '\\', '%', '?', '#'], "_"))
        .filter(|n| !n.is_empty() && n != "." && n != "..")
        .unwrap_or_else(|| "root".to_string())
}

impl Server {
    /// Checks the paths (each must exist; a file must open as a model, so that its companions are
    /// known), binds the listener and returns the server.
    pub async fn bind(config: Config) -> Result<Server, Error> {
        let mut mounts: Vec<Mount> = Vec::new();
        for p in &config.paths {
            let canon = p.canonicalize().map_err(|e| io_err("serve", p, e))?;
            let (root, only) = if canon.is_dir() {
                (canon, None)
            } else {
                let options = crate::model::ModelOptions {
                    mmap: false,
                    ..crate::model::ModelOptions::default()
                };
                let model = crate::model::Model::open_with(&canon, &options)?;
                let only: Vec<PathBuf> = model.sources().map(|(p, _)| p.to_path_buf()).collect();
                let dir = canon
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("/"));
                (dir, Some(only))
            };
            let base = mount_name(&root);
            let mut name = base.clone();
            let mut k = 2;
            while mounts.iter().any(|m| m.name == name) {
                name = format!("{base}-{k}");
                k += 1;
            }
            let dir = std::fs::File::open(&root).ok();
            mounts.push(Mount { name, root, only, dir });
        }
        let web = match &config.web {
            Some(w) => Some(
                w.canonicalize()
                    .map_err(|e| io_err("serve the web inspector from", w, e))?,
            ),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(config.bind)
            .await
            .map_err(|e| io_err("bind", Path::new(&config.bind.to_string()), e))?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                mounts,
                web_dir: web.as_ref().and_then(|w| std::fs::File::open(w).ok()),
                web,
                assets: config.assets,
                token: config.token.filter(|t| !t.is_empty()).map(|t| digest(t.as_bytes())),
                models: Mutex::new(HashMap::new()),
                limits: models::Limits::new(config.max_memory, config.max_tensor_bytes),
            }),
            max_connections: config.max_connections.max(1),
            timeouts: listener::Timeouts {
                header: config.header_timeout.filter(|d| !d.is_zero()),
                idle: config.idle_timeout.filter(|d| !d.is_zero()),
            },
            api: None,
            api_origins: Arc::new(config.api_origins),
        })
    }

    /// Adds `api`'s routes, all under `/v1/` (an OpenAI-compatible API: tensorlane-llm's
    /// `openai::router`), beside the file routes and behind the same token guard; they alone
    /// may take `POST`.
    pub fn with_api(mut self, api: Router) -> Server {
        self.api = Some(api);
        self
    }

    /// The address the server listens on (with the real port when [`Config::bind`] asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// The URL of each mount: `(path given, URL prefix)`, in [`Config::paths`] order.
    pub fn mounts(&self) -> Vec<(PathBuf, String)> {
        self.shared
            .mounts
            .iter()
            .map(|m| (m.root.clone(), format!("/files/{}/", files::encode_segment(&m.name))))
            .collect()
    }

    /// Serves until `shutdown` completes, then stops accepting and lets the requests in flight
    /// finish.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
        let addr = self.local_addr();
        let app = router(self.shared, self.api, self.api_origins);
        let listener = listener::Bounded::new(self.listener, self.max_connections, self.timeouts);
        let app = app
            .layer(middleware::from_fn(track))
            .into_make_service_with_connect_info::<Tracked>();
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|e| io_err("serve", Path::new(&addr.to_string()), e))
    }
}

/// The routes (and `api`'s, under `/v1/`), the token check and CORS. Preflights allow `POST`
/// and a `Content-Type` request header only with an `api` (a read-only server answers as
/// `npx tensorlane serve` does). With an `api`, `/v1/` is open to `api_origins` only
/// ([`api_cors`]) and every error under it is an OpenAI error object ([`api_errors`]).
fn router(shared: Arc<Shared>, api: Option<Router>, api_origins: Arc<Vec<String>>) -> Router {
    let mut methods = vec![Method::GET, Method::HEAD, Method::OPTIONS];
    let mut headers = vec![
        header::RANGE,
        header::IF_RANGE,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_MATCH,
        header::IF_UNMODIFIED_SINCE,
        header::AUTHORIZATION,
    ];
    if api.is_some() {
        methods.push(Method::POST);
        headers.push(header::CONTENT_TYPE);
    }
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods(methods)
        .allow_headers(headers)
        .expose_headers([
            header::CONTENT_RANGE,
            header::CONTENT_LENGTH,
            header::ETAG,
            header::ACCEPT_RANGES,
            header::LAST_MODIFIED,
            header::CONTENT_TYPE,
        ])
        .max_age(std::time::Duration::from_secs(3600));
    let writable = api.is_some();
    let mut routes = Router::new()
        .route("/", get(index))
        .route("/models", get(models::list))
        .route("/tensors/{*rest}", get(models::tensor))
        .route("/ws", get(models::websocket))
        .route("/files/{*rest}", get(files::mounted).head(files::mounted))
        .fallback(files::web)
        .with_state(shared.clone());
    if let Some(api) = api {
        routes = routes.merge(api);
    }
    let routes = routes
        .layer(middleware::from_fn_with_state((shared, writable), guard))
        .layer(cors);
    if writable {
        routes
            .layer(middleware::from_fn_with_state(api_origins, api_cors))
            .layer(middleware::from_fn(api_errors))
    } else {
        routes
    }
}

/// Whether `path` is the API's (`/v1/…`).
fn is_api(path: &str) -> bool {
    path == "/v1" || path.starts_with("/v1/")
}

/// Whether `pattern` (an entry of [`Config::api_origins`]) admits `origin`: equal (ASCII case
/// ignored), `*`, or `scheme://host:*` and `origin` that with any port or none.
fn origin_matches(pattern: &str, origin: &str) -> bool {
    if pattern == "*" || pattern.eq_ignore_ascii_case(origin) {
        return true;
    }
    let Some(base) = pattern.strip_suffix(":*") else {
        return false;
    };
    let (Some(head), Some(rest)) = (origin.get(..base.len()), origin.get(base.len()..)) else {
        return false;
    };
    head.eq_ignore_ascii_case(base)
        && (rest.is_empty()
            || rest
                .strip_prefix(':')
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
}

/// Whether `origin` is this server's own page: `http://` and the request's `Host`, which names
/// an IP address (a host name could be anyone's, rebound to this address).
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    if !rest.eq_ignore_ascii_case(host) {
        return false;
    }
    let name = match host.rsplit_once(':') {
        Some((n, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !n.ends_with(':') => n,
        _ => host,
    };
    let name = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
    name.parse::<std::net::IpAddr>().is_ok()
}

/// CORS of the `/v1/` API: a request whose `Origin` [`Config::api_origins`] does not admit (and
/// that is not this server's own page) is answered `403`, preflight or not, before anything
/// runs; an admitted one gets its origin back in `Access-Control-Allow-Origin` (with `Vary:
/// Origin`) where the server-wide layer wrote `*`. Other paths pass untouched.
async fn api_cors(AxState(origins): AxState<Arc<Vec<String>>>, req: Request, next: Next) -> Response {
    if !is_api(req.uri().path()) {
        return next.run(req).await;
    }
    let any = origins.iter().any(|o| o == "*");
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .map(|o| o.to_str().map(str::to_string).unwrap_or_default());
    if let Some(o) = &origin {
        let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok());
        if !origins.iter().any(|p| origin_matches(p, o)) && !same_origin(o, host) {
            return (
                StatusCode::FORBIDDEN,
                format!(
                    "pages from the origin {o:?} may not use this API (it admits {}): start the server \
                     with --cors-origin {o} to allow them",
                    origins.join(", ")
                ),
            )
                .into_response();
        }
    }
    let mut r = next.run(req).await;
    if !any {
        let h = r.headers_mut();
        match origin.and_then(|o| HeaderValue::from_str(&o).ok()) {
            Some(o) => {
                h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
                h.append(header::VARY, HeaderValue::from_static("origin"));
            }
            None => {
                h.remove(header::ACCESS_CONTROL_ALLOW_ORIGIN);
            }
        }
    }
    r
}

/// Every error under `/v1/` that is not JSON yet (the token guard's `401`, `403`, `404`, `405`,
/// ...) as an OpenAI error object, `{"error": {"message", "type", "param", "code"}}`, its status
/// and other headers (`WWW-Authenticate`, `Allow`, `Retry-After`) kept.
async fn api_errors(req: Request, next: Next) -> Response {
    if !is_api(req.uri().path()) {
        return next.run(req).await;
    }
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let r = next.run(req).await;
    let status = r.status();
    let json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || json {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10).await.unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    let (kind, code) = match status {
        StatusCode::UNAUTHORIZED => ("invalid_request_error", Some("invalid_api_key")),
        StatusCode::FORBIDDEN => ("invalid_request_error", Some("origin_not_allowed")),
        StatusCode::NOT_FOUND => ("invalid_request_error", Some("unknown_url")),
        StatusCode::METHOD_NOT_ALLOWED => ("invalid_request_error", Some("method_not_allowed")),
        StatusCode::REQUEST_TIMEOUT => ("invalid_request_error", Some("timeout")),
        StatusCode::PAYLOAD_TOO_LARGE => ("invalid_request_error", Some("request_too_large")),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("invalid_request_error", Some("unsupported_media_type")),
        StatusCode::TOO_MANY_REQUESTS => ("rate_limit_error", Some("rate_limit_exceeded")),
        s if s.is_server_error() => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    if status == StatusCode::NOT_FOUND {
        message = format!(
            "no such route: {method} {path} (this API serves /v1/models, /v1/completions and /v1/chat/completions)"
        );
    } else if message.is_empty() {
        message = match status {
            StatusCode::METHOD_NOT_ALLOWED => format!("{method} is not allowed on {path}"),
            s => s.canonical_reason().unwrap_or("error").to_string(),
        };
    }
    let body = serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// `/`: to the inspector (the query kept: a shared `/?url=…&tensor=…` link), or (without one) a
/// JSON pointer to `/models`.
async fn index(AxState(s): AxState<Arc<Shared>>, uri: axum::http::Uri) -> Response {
    if s.web.is_some() || !s.assets.is_empty() {
        let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
        Redirect::temporary(&format!("/web-demo/{query}")).into_response()
    } else {
        axum::Json(serde_json::json!({
            "models": "/models",
            "note": "no web inspector is served (start with --web DIR, a tensorlane checkout)",
        }))
        .into_response()
    }
}

/// Whether `path` is the inspector's own code, which the token does not guard.
fn is_public(path: &str) -> bool {
    path == "/" || ["/web-demo/", "/js/", "/wasm/"].iter().any(|p| path.starts_with(p)) || path == "/web-demo"
}

/// The SHA-256 of `bytes`.
fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Whether `given` is the token whose digest is `token`: the digests are compared in time
/// independent of where they differ, and hashing `given` takes time that depends on `given` alone,
/// so the token's length does not show either.
fn same_secret(given: &[u8], token: &[u8; 32]) -> bool {
    digest(given).iter().zip(token).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credentials of an `Authorization: Bearer TOKEN` header, the scheme in any case (RFC 9110
/// §11.1).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// The connection a request came on (`ConnectInfo`), for [`track`].
#[derive(Clone, Debug)]
struct Tracked(Arc<listener::Track>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, listener::Bounded>> for Tracked {
    fn connect_info(stream: axum::serve::IncomingStream<'_, listener::Bounded>) -> Tracked {
        Tracked(stream.io().track())
    }
}

/// A response body that ends its request's [`listener::Busy`] when it is dropped (sent whole,
/// or abandoned).
struct TrackedBody {
    inner: axum::body::Body,
    _busy: listener::Busy,
}

impl http_body::Body for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Tells the request's connection that a request is in flight until its response body is
/// dropped (the connection's header and idle deadlines are off meanwhile), and that it switched
/// protocols on a `101`.
async fn track(req: Request, next: Next) -> Response {
    let Some(conn) = req
        .extensions()
        .get::<axum::extract::ConnectInfo<Tracked>>()
        .map(|c| c.0.0.clone())
    else {
        return next.run(req).await;
    };
    let busy = conn.begin();
    let r = next.run(req).await;
    if r.status() == StatusCode::SWITCHING_PROTOCOLS {
        conn.upgraded();
    }
    r.map(|inner| axum::body::Body::new(TrackedBody { inner, _busy: busy }))
}

/// Refuses methods other than GET/HEAD/OPTIONS (405; `POST` passes under `/v1/` when
/// `writable`: an API is mounted) and, with a token, requests without it (401).
async fn guard(AxState((s, writable)): AxState<(Arc<Shared>, bool)>, req: Request, next: Next) -> Response {
    let m = req.method();
    let api_post = writable && m == Method::POST && req.uri().path().starts_with("/v1/");
    if m != Method::GET && m != Method::HEAD && m != Method::OPTIONS && !api_post {
        let mut r = (
            StatusCode::METHOD_NOT_ALLOWED,
            "this server is read-only: GET, HEAD and OPTIONS only\n",
        )
            .into_response();
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, OPTIONS"));
        return r;
    }
    if let Some(token) = &s.token
        && m != Method::OPTIONS
        && !is_public(req.uri().path())
    {
        let sent = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        let query = req.uri().query().and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("token="))
                .map(|v| percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned())
        });
        let ok = sent.is_some_and(|b| same_secret(b.as_bytes(), token))
            || query.is_some_and(|q| same_secret(q.as_bytes(), token));
        if !ok {
            let mut r = (
                StatusCode::UNAUTHORIZED,
                "this server needs its token: send `Authorization: Bearer TOKEN` (or ?token=TOKEN)\n",
            )
                .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(req).await
}

/// Binds `config` on a new multi-thread tokio runtime, calls `ready` with the bound server (to
/// print its address), and serves until Ctrl-C (SIGINT) or SIGTERM, then lets requests in flight
/// finish.
pub fn run_until_ctrl_c(config: Config, ready: impl FnOnce(&Server)) -> Result<(), Error> {
    run_until_ctrl_c_with(config, None, ready)
}

/// [`run_until_ctrl_c`] with [`Server::with_api`]'s routes when `api` is given.
pub fn run_until_ctrl_c_with(config: Config, api: Option<Router>, ready: impl FnOnce(&Server)) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| io_err("start the server's runtime", Path::new("tokio"), e))?;
    rt.block_on(async move {
        let mut server = Server::bind(config).await?;
        if let Some(api) = api {
            server = server.with_api(api);
        }
        ready(&server);
        server.run(stop_signal()).await
    })
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM. A signal that cannot be watched never
/// completes (the process is then stopped by being killed).
async fn stop_signal() {
    let int = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = int => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_in_any_case() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BeArEr   abc  "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearerabc"), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn api_origins() {
        for (pattern, origin, ok) in [
            ("http://localhost:*", "http://localhost:5173", true),
            ("http://localhost:*", "http://localhost", true),
            ("http://localhost:*", "HTTP://LOCALHOST:1", true),
            ("http://localhost:*", "http://localhost:", false),
            ("http://localhost:*", "http://localhost.evil.test", false),
            ("http://localhost:*", "http://localhost:80.evil.test", false),
            ("http://localhost:*", "https://localhost:443", false),
            ("http://[::1]:*", "http://[::1]:8080", true),
            ("https://app.example", "https://app.example", true),
            ("https://app.example", "https://app.example:444", false),
            ("*", "null", true),
        ] {
            assert_eq!(origin_matches(pattern, origin), ok, "{pattern} {origin}");
        }
        assert!(same_origin("http://192.168.1.5:8080", Some("192.168.1.5:8080")));
        assert!(same_origin("http://[fe80::1]:8080", Some("[fe80::1]:8080")));
        assert!(same_origin("http://10.0.0.1", Some("10.0.0.1")));
        // a host name could be an attacker's, rebound to this address
        assert!(!same_origin("http://evil.test:8080", Some("evil.test:8080")));
        assert!(!same_origin("https://10.0.0.1:8080", Some("10.0.0.1:8080")));
        assert!(!same_origin("http://10.0.0.1:8080", Some("10.0.0.2:8080")));
        assert!(!same_origin("http://10.0.0.1:8080", None));
    }

    #[test]
    fn secrets_compare_by_digest() {
        let token = digest(b"s3cret");
        assert!(same_secret(b"s3cret", &token));
        for other in [&b"s3cre"[..], b"s3crett", b"S3CRET", b""] {
            assert!(!same_secret(other, &token), "{other:?}");
        }
    }
}
