//! Remote sources: model and `.zt` files on object stores (`s3://`, `gs://`, `az://`) and plain
//! HTTP(S) servers, read by byte range through the [`object_store`] crate (feature `remote`, on by
//! default; the Node addon builds without it).
//!
//! A [`RemoteSource`] is a [`ReadAt`] like a memory map, so every reader of the core (model
//! formats, `.zt`, Tenso) runs on it unchanged: [`crate::model::Model::open`] and
//! [`crate::source::Source::open`] take a URL wherever they take a path.
//!
//! # What a read costs
//!
//! * Opening sends one `GET` of the first [`RemoteOptions::first_read`] bytes (64 KiB): its
//!   `Content-Range` gives the object's length and its `ETag` pins the version for every later
//!   request. (An empty object, which cannot be ranged, costs a `HEAD` instead.)
//! * Small reads (headers, tables: up to [`RemoteOptions::small_read`]) go through a read-ahead
//!   cache: a miss fetches at least as much as the previous miss, doubled (64 KiB, 128 KiB, ...,
//!   up to 8 MiB), so a parser that walks a header in small steps costs a few requests, not one per
//!   field. A safetensors or GGUF header of < 64 KiB is listed with one request.
//! * Larger reads fetch exactly their range, split into parts of [`RemoteOptions::part_size`]
//!   (8 MiB) with up to [`RemoteOptions::concurrency`] (16) in flight.
//! * [`crate::model::Model::for_each_tensor`] reads many tensors: their ranges are coalesced
//!   (adjacent tensors become one run), runs are split into parts, and one pipeline keeps
//!   `concurrency` parts in flight across tensors and across the shards of a set.
//!
//! # Consistency
//!
//! Every request carries `If-Match: <ETag of the first response>` and every response is checked:
//! its `Content-Range` must be the range asked for, its total length the object's length, its
//! `ETag` the pinned one and its body exactly as long as the range. An object replaced while it is
//! read is therefore an error ([`SourceError::Io`] naming the URL), never a mix of two versions.
//! Transient failures (5xx, connection resets, timeouts) are retried with exponential backoff by
//! `object_store`'s [`RetryConfig`] ([`RemoteOptions::max_retries`], [`RemoteOptions::retry_timeout`]).
//!
//! # Configuration
//!
//! From the standard environment of each store (`AmazonS3Builder::from_env`: `AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, ...; `GOOGLE_*` for `gs://`; `AZURE_*` for `az://`), then the key/value
//! pairs of [`RemoteOptions::options`] (the same keys, lower-case, e.g. `aws_endpoint_url`,
//! `allow_http`, `timeout`), which win. [`RemoteOptions::from_env`] also reads
//! `TENSORLANE_REMOTE_PART_SIZE`, `TENSORLANE_REMOTE_CONCURRENCY` and
//! `TENSORLANE_REMOTE_MAX_RETRIES`.
//!
//! # Blocking
//!
//! The API is synchronous, like the local one: a private multi-threaded tokio runtime (started on
//! first use, shared by every remote source) runs the requests and the calling thread waits.
//! Call it from a blocking thread; from async code, use `tokio::task::spawn_blocking` (a call
//! made on an async worker thread works but stalls that worker while it waits).

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig, WriteMultipart,
};
use tensorlane_core::source::{ReadAt, SourceError, check_range};
use url::Url;

/// The URL schemes a remote source understands.
pub const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "http", "https"];

/// Whether `location` is a URL of a remote source (`s3://`, `gs://`, `az://`, `http(s)://`, ...)
/// rather than a local path.
pub fn is_url(location: &str) -> bool {
    location
        .split_once("://")
        .is_some_and(|(scheme, _)| SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
}

/// How remote objects are reached and read. [`Default`] is the documented defaults;
/// [`RemoteOptions::from_env`] adds `TENSORLANE_REMOTE_*` overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteOptions {
    /// Bytes per ranged `GET` of a large read (default 8 MiB).
    pub part_size: u64,
    /// Parts in flight at once (default 16).
    pub concurrency: usize,
    /// Bytes fetched by the first request, which also learns the length and ETag (default 64 KiB).
    pub first_read: u64,
    /// Reads up to this many bytes go through the read-ahead cache (default 256 KiB).
    pub small_read: u64,
    /// Retries of one request on 5xx, resets and timeouts (default 10).
    pub max_retries: usize,
    /// Give up retrying a request after this long (default 3 minutes).
    pub retry_timeout: Duration,
    /// Store configuration, as `object_store` config keys (`aws_endpoint_url`, `allow_http`,
    /// `timeout`, ...); applied after the environment.
    pub options: Vec<(String, String)>,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            part_size: 8 << 20,
            concurrency: 16,
            first_read: 64 << 10,
            small_read: 256 << 10,
            max_retries: 10,
            retry_timeout: Duration::from_secs(180),
            options: Vec::new(),
        }
    }
}

impl RemoteOptions {
    /// The defaults, with `TENSORLANE_REMOTE_PART_SIZE` (bytes), `TENSORLANE_REMOTE_CONCURRENCY`
    /// and `TENSORLANE_REMOTE_MAX_RETRIES` applied when set. A value that does not parse is an
    /// error naming the variable.
    pub fn from_env() -> Result<Self, SourceError> {
        let mut o = RemoteOptions::default();
        let var = |name: &str| -> Result<Option<u64>, SourceError> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| SourceError::Io(format!("{name}={v:?} is not a whole number"))),
                Err(_) => Ok(None),
            }
        };
        if let Some(v) = var("TENSORLANE_REMOTE_PART_SIZE")? {
            o.part_size = v;
        }
        if let Some(v) = var("TENSORLANE_REMOTE_CONCURRENCY")? {
            o.concurrency = v as usize;
        }
        if let Some(v) = var("TENSORLANE_REMOTE_MAX_RETRIES")? {
            o.max_retries = v as usize;
        }
        o.check()?;
        Ok(o)
    }

    /// Checks the numbers: part size 4 KiB to 1 GiB, concurrency 1 to 1024.
    pub fn check(&self) -> Result<(), SourceError> {
        if self.part_size < 4096 || self.part_size > 1 << 30 {
            return Err(SourceError::Io(format!(
                "part size {} is out of range: use 4 KiB to 1 GiB",
                self.part_size
            )));
        }
        if self.concurrency == 0 || self.concurrency > 1024 {
            return Err(SourceError::Io(format!(
                "concurrency {} is out of range: use 1 to 1024",
                self.concurrency
            )));
        }
        Ok(())
    }

    fn retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

static DEFAULT_OPTIONS: OnceLock<RemoteOptions> = OnceLock::new();

/// Sets the options that [`crate::source::Source::open`] and [`crate::model::Model::open`] use
/// for URLs (a program's flags, say); the first call wins. Unset, they use
/// [`RemoteOptions::from_env`].
pub fn set_default_options(opts: RemoteOptions) -> Result<(), SourceError> {
    opts.check()?;
    let _ = DEFAULT_OPTIONS.set(opts);
    Ok(())
}

/// The options set by [`set_default_options`], else [`RemoteOptions::from_env`].
pub fn default_options() -> Result<RemoteOptions, SourceError> {
    match DEFAULT_OPTIONS.get() {
        Some(o) => Ok(o.clone()),
        None => RemoteOptions::from_env(),
    }
}

/// Requests and bytes a source (and the sources opened beside it) has sent and received.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    /// Requests sent (each `GET` or `HEAD`; retries inside `object_store` are not counted).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// Body bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    fn add(&self, bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// The one tokio runtime of every remote source.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8)))
            .thread_name("tensorlane-remote")
            .enable_all()
            .build()
            .expect("cannot start the tokio runtime of the remote sources")
    })
}

/// Runs `fut` on the remote runtime and waits for it on this thread (any thread: a std channel,
/// not `block_on`, so a caller on another runtime's worker does not panic).
pub(crate) fn wait<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the remote runtime dropped a task")
}

/// Spawns `fut` on the remote runtime (it runs while the caller goes on).
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    runtime().spawn(fut);
}

/// A store and the options it was built with, shared by the sources opened beside each other.
#[derive(Debug)]
struct Store {
    store: Arc<dyn ObjectStore>,
    opts: RemoteOptions,
    counters: Arc<Counters>,
}

/// An object on a remote store, read by range. Cloning shares the connection pool, the cache and
/// the counters.
#[derive(Clone)]
pub struct RemoteSource {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<Store>,
    /// The URL as given (for messages and companions).
    url: Url,
    path: ObjPath,
    size: u64,
    etag: Option<String>,
    cache: Mutex<Cache>,
}

impl fmt::Debug for RemoteSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteSource")
            .field("url", &self.inner.url.as_str())
            .field("size", &self.inner.size)
            .field("etag", &self.inner.etag)
            .finish()
    }
}

/// Read-ahead segments of small reads.
#[derive(Default)]
struct Cache {
    segments: Vec<(u64, Bytes)>,
    next_len: u64,
    held: u64,
}

const CACHE_MAX: u64 = 32 << 20;
const READAHEAD_MAX: u64 = 8 << 20;

fn io(url: &Url, what: impl fmt::Display) -> SourceError {
    SourceError::Io(format!("{url}: {what}"))
}

fn store_error(url: &Url, e: object_store::Error) -> SourceError {
    match e {
        object_store::Error::Precondition { .. } => io(
            url,
            "the object changed while it was being read (its ETag no longer matches the one seen at open); \
             open it again",
        ),
        object_store::Error::NotFound { .. } => io(url, "no such object (404)"),
        other => io(url, other),
    }
}

/// Builds the store for `url` (its scheme picks the kind) from the environment and `opts`.
fn build_store(url: &Url, opts: &RemoteOptions) -> Result<(Arc<dyn ObjectStore>, ObjPath), SourceError> {
    let bad = |e: object_store::Error| io(url, format!("cannot configure the store: {e}"));
    let bad_key = |k: &str| io(url, format!("unknown store option {k:?}"));
    let scheme = url.scheme().to_ascii_lowercase();
    let (store, path): (Arc<dyn ObjectStore>, ObjPath) = match scheme.as_str() {
        "s3" | "s3a" => {
            let mut b = AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .with_retry(opts.retry());
            for (k, v) in &opts.options {
                b = b.with_config(k.to_ascii_lowercase().parse().map_err(|_| bad_key(k))?, v);
            }
            (Arc::new(b.build().map_err(bad)?), object_path(url)?)
        }
        "gs" => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(opts.retry());
            for (k, v) in &opts.options {
                b = b.with_config(k.to_ascii_lowercase().parse().map_err(|_| bad_key(k))?, v);
            }
            (Arc::new(b.build().map_err(bad)?), object_path(url)?)
        }
        "az" | "azure" | "abfs" | "abfss" => {
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .with_retry(opts.retry());
            for (k, v) in &opts.options {
                b = b.with_config(k.to_ascii_lowercase().parse().map_err(|_| bad_key(k))?, v);
            }
            (Arc::new(b.build().map_err(bad)?), object_path(url)?)
        }
        "http" | "https" => {
            let origin = url.origin().ascii_serialization();
            let mut b = HttpBuilder::new().with_url(origin).with_retry(opts.retry());
            for (k, v) in &opts.options {
                let key: ClientConfigKey = k.to_ascii_lowercase().parse().map_err(|_| bad_key(k))?;
                b = b.with_config(key, v);
            }
            let path = ObjPath::from_url_path(url.path()).map_err(|e| io(url, e))?;
            (Arc::new(b.build().map_err(bad)?), path)
        }
        other => {
            return Err(io(
                url,
                format!("unsupported scheme {other:?} (use one of {SCHEMES:?})"),
            ));
        }
    };
    Ok((store, path))
}

/// The object path of a store URL (`s3://bucket/a/b` → `a/b`).
fn object_path(url: &Url) -> Result<ObjPath, SourceError> {
    let path = ObjPath::from_url_path(url.path()).map_err(|e| io(url, e))?;
    if path.as_ref().is_empty() {
        return Err(io(url, "names a bucket, not an object"));
    }
    Ok(path)
}

fn parse_url(location: &str) -> Result<Url, SourceError> {
    Url::parse(location).map_err(|e| SourceError::Io(format!("{location}: not a valid URL: {e}")))
}

impl RemoteSource {
    /// Opens the object at `url` with `opts`: one request, which learns its length and ETag and
    /// caches its first bytes.
    pub fn open(url: &str, opts: &RemoteOptions) -> Result<RemoteSource, SourceError> {
        opts.check()?;
        let url = parse_url(url)?;
        let (store, path) = build_store(&url, opts)?;
        let store = Arc::new(Store {
            store,
            opts: opts.clone(),
            counters: Arc::new(Counters::default()),
        });
        RemoteSource::open_in(store, url, path)
    }

    /// Opens `rel` (a name inside the model: `shard-00001.safetensors`, `sub/w.data`) in the same
    /// folder as this object, on the same store and connection pool. `rel` must already be checked
    /// to stay in the folder ([`tensorlane_core::formats::check_companion_path`]).
    pub fn sibling(&self, rel: &str) -> Result<RemoteSource, SourceError> {
        let url = self
            .inner
            .url
            .join(rel)
            .map_err(|e| io(&self.inner.url, format!("cannot resolve {rel:?} beside it: {e}")))?;
        let path = ObjPath::from_url_path(url.path()).map_err(|e| io(&url, e))?;
        RemoteSource::open_in(self.inner.store.clone(), url, path)
    }

    fn open_in(store: Arc<Store>, url: Url, path: ObjPath) -> Result<RemoteSource, SourceError> {
        let first = store.opts.first_read.max(1);
        let (s, p, u) = (store.clone(), path.clone(), url.clone());
        let (size, etag, head) = wait(async move {
            let opts = GetOptions {
                range: Some(GetRange::Bounded(0..first)),
                ..Default::default()
            };
            match s.store.get_opts(&p, opts).await {
                Ok(r) => {
                    let (size, etag, range) = (r.meta.size, r.meta.e_tag.clone(), r.range.clone());
                    let body = r.bytes().await.map_err(|e| store_error(&u, e))?;
                    s.counters.add(body.len() as u64);
                    if range.start != 0 || body.len() as u64 != range.end || range.end > size {
                        return Err(io(
                            &u,
                            format!(
                                "the server answered bytes {range:?} of {size} with a {}-byte body for a request \
                                 of bytes 0..{first}",
                                body.len()
                            ),
                        ));
                    }
                    Ok((size, etag, body))
                }
                Err(e) => {
                    // An empty object cannot be ranged (416): ask for its metadata instead.
                    let meta = s.store.head(&p).await.map_err(|_| store_error(&u, e))?;
                    s.counters.add(0);
                    if meta.size != 0 {
                        return Err(io(
                            &u,
                            "the server refused a range request for bytes 0.. of a non-empty object",
                        ));
                    }
                    Ok((0, meta.e_tag, Bytes::new()))
                }
            }
        })?;
        let mut cache = Cache {
            next_len: store.opts.first_read.max(1),
            ..Default::default()
        };
        if !head.is_empty() {
            cache.held = head.len() as u64;
            cache.segments.push((0, head));
        }
        Ok(RemoteSource {
            inner: Arc::new(Inner {
                store,
                url,
                path,
                size,
                etag,
                cache: Mutex::new(cache),
            }),
        })
    }

    /// The URL the object was opened from.
    pub fn url(&self) -> &str {
        self.inner.url.as_str()
    }

    /// The ETag seen at open, which every later request must match (`None`: the server sends
    /// none, and only lengths are checked).
    pub fn etag(&self) -> Option<&str> {
        self.inner.etag.as_deref()
    }

    /// The options the source was opened with.
    pub fn options(&self) -> &RemoteOptions {
        &self.inner.store.opts
    }

    /// Requests and bytes of this source and of every source opened beside it ([`Self::sibling`]).
    pub fn counters(&self) -> &Counters {
        &self.inner.store.counters
    }

    /// Fetches `range` (one request), checked against the pinned length and ETag.
    pub(crate) fn fetch(&self, range: Range<u64>) -> impl Future<Output = Result<Bytes, SourceError>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.fetch(range).await.map(concat) }
    }

    /// [`RemoteSource::fetch`] without joining the body's chunks (as the HTTP client received
    /// them, in order, `range.end - range.start` bytes in all): a caller that copies the bytes
    /// somewhere anyway copies them once instead of twice.
    pub(crate) fn fetch_chunks(
        &self,
        range: Range<u64>,
    ) -> impl Future<Output = Result<Vec<Bytes>, SourceError>> + Send + 'static {
        let inner = self.inner.clone();
        async move { inner.fetch(range).await }
    }

    /// Fetches `range` split into parts with up to `concurrency` in flight; the parts in order.
    fn fetch_parts(&self, range: Range<u64>) -> Result<Vec<Bytes>, SourceError> {
        let o = &self.inner.store.opts;
        let parts = split(range, o.part_size);
        let me = self.clone();
        let n = o.concurrency;
        wait(async move {
            futures::stream::iter(parts.into_iter().map(|r| me.fetch(r)))
                .buffered(n)
                .try_collect::<Vec<Bytes>>()
                .await
        })
    }

    fn cached(&self, offset: u64, buf: &mut [u8]) -> bool {
        let cache = self.inner.cache.lock().unwrap_or_else(|p| p.into_inner());
        let end = offset + buf.len() as u64;
        for (start, b) in &cache.segments {
            if *start <= offset && end <= start + b.len() as u64 {
                let at = (offset - start) as usize;
                buf.copy_from_slice(&b[at..at + buf.len()]);
                return true;
            }
        }
        false
    }
}

/// The chunks of a body as one buffer: the chunk itself when there is one (no copy).
pub(crate) fn concat(mut chunks: Vec<Bytes>) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut out = Vec::with_capacity(chunks.iter().map(Bytes::len).sum());
    for c in &chunks {
        out.extend_from_slice(c);
    }
    out.into()
}

impl Inner {
    /// One ranged `GET`, checked against the length and ETag seen at open and the range asked
    /// for; the body's chunks as received.
    async fn fetch(self: Arc<Self>, range: Range<u64>) -> Result<Vec<Bytes>, SourceError> {
        let url = &self.url;
        let want = range.end - range.start;
        let opts = GetOptions {
            if_match: self.etag.clone(),
            range: Some(GetRange::Bounded(range.clone())),
            ..Default::default()
        };
        let r = self
            .store
            .store
            .get_opts(&self.path, opts)
            .await
            .map_err(|e| store_error(url, e))?;
        if r.meta.size != self.size {
            return Err(io(
                url,
                format!(
                    "the object is now {} bytes, not the {} seen at open: it was replaced; open it again",
                    r.meta.size, self.size
                ),
            ));
        }
        if self.etag.is_some() && r.meta.e_tag != self.etag {
            return Err(io(
                url,
                format!(
                    "the response's ETag {:?} is not the {:?} seen at open: the object was replaced; open it again",
                    r.meta.e_tag, self.etag
                ),
            ));
        }
        if r.range != range {
            return Err(io(
                url,
                format!("asked for bytes {range:?}, the server sent {:?}", r.range),
            ));
        }
        let mut body = r.into_stream();
        let mut chunks = Vec::new();
        let mut got = 0u64;
        while let Some(c) = body.next().await {
            let c = c.map_err(|e| store_error(url, e))?;
            got += c.len() as u64;
            if got > want {
                break;
            }
            chunks.push(c);
        }
        self.store.counters.add(got);
        if got != want {
            let received = if got > want {
                format!("more than {want}")
            } else {
                got.to_string()
            };
            return Err(io(
                url,
                format!("asked for {want} bytes at offset {}, received {received}", range.start),
            ));
        }
        Ok(chunks)
    }
}

/// `range` cut into pieces of at most `part` bytes.
pub(crate) fn split(range: Range<u64>, part: u64) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let end = range.end.min(at + part);
        out.push(at..end);
        at = end;
    }
    out
}

impl ReadAt for RemoteSource {
    fn size(&self) -> u64 {
        self.inner.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        let len = buf.len() as u64;
        check_range(offset, len, self.inner.size)?;
        if len == 0 || self.cached(offset, buf) {
            return Ok(());
        }
        let o = &self.inner.store.opts;
        if len > o.small_read {
            let mut at = 0usize;
            for part in self.fetch_parts(offset..offset + len)? {
                buf[at..at + part.len()].copy_from_slice(&part);
                at += part.len();
            }
            return Ok(());
        }
        // A small read: fetch ahead, growing while misses keep coming.
        let ahead = {
            let mut c = self.inner.cache.lock().unwrap_or_else(|p| p.into_inner());
            let ahead = c.next_len.max(len);
            c.next_len = (c.next_len * 2).min(READAHEAD_MAX);
            ahead
        };
        let end = (offset + ahead).min(self.inner.size);
        let seg = wait(self.fetch(offset..end))?;
        buf.copy_from_slice(&seg[..buf.len()]);
        let mut c = self.inner.cache.lock().unwrap_or_else(|p| p.into_inner());
        c.held += seg.len() as u64;
        c.segments.push((offset, seg));
        while c.held > CACHE_MAX && c.segments.len() > 1 {
            let (_, old) = c.segments.remove(0);
            c.held -= old.len() as u64;
        }
        Ok(())
    }
}

/// Uploads the local file `from` to `url` as a multipart upload of `part_size` parts
/// (`concurrency` in flight): the object appears only when the upload completes, and a failed
/// upload is aborted, leaving no object. Returns the bytes uploaded.
pub fn upload_file(from: &std::path::Path, url: &str, opts: &RemoteOptions) -> Result<u64, SourceError> {
    opts.check()?;
    let url = parse_url(url)?;
    let (store, path) = build_store(&url, opts)?;
    let mut file = std::fs::File::open(from).map_err(|e| io(&url, format!("cannot read {}: {e}", from.display())))?;
    let part = opts.part_size.max(5 << 20) as usize;
    let conc = opts.concurrency;
    let from_name = from.display().to_string();
    wait(async move {
        let upload = store.put_multipart(&path).await.map_err(|e| store_error(&url, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, part);
        let mut total = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match std::io::Read::read(&mut file, &mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    let _ = w.abort().await;
                    return Err(io(&url, format!("cannot read {from_name}: {e}")));
                }
            };
            if let Err(e) = w.wait_for_capacity(conc).await {
                return Err(store_error(&url, e));
            }
            w.write(&buf[..n]);
            total += n as u64;
        }
        w.finish().await.map_err(|e| store_error(&url, e))?;
        Ok(total)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_parts() {
        assert!(is_url("s3://b/k.safetensors"));
        assert!(is_url("HTTPS://h/x"));
        assert!(!is_url("model.safetensors"));
        assert!(!is_url("C:\\x"));
        assert!(!is_url("file:///x"));
        assert_eq!(split(0..10, 4), vec![0..4, 4..8, 8..10]);
        assert!(split(5..5, 4).is_empty());
        let bad = RemoteOptions {
            concurrency: 0,
            ..Default::default()
        };
        assert!(bad.check().is_err());
        let e = RemoteSource::open("s3://bucket/", &RemoteOptions::default()).unwrap_err();
        assert!(e.to_string().contains("bucket"), "{e}");
    }
}
