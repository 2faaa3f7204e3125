//! Files: path resolution inside a root (no `..`, no symlink out), and one file as an HTTP response
//! with `Range`, `ETag`, `Last-Modified` and the RFC 9110 conditionals.
//!
//! The `Range` header is parsed here rather than with a crate: the usual one (`http-range-header`)
//! gives one error for a malformed header and an unsatisfiable range, but RFC 9110 wants the first
//! ignored (200) and the second answered 416, and a suffix longer than the file served as the
//! whole file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use http_body::{Frame, SizeHint};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use super::Shared;

/// What identifies one version of a file: its size and modification time (ns since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    pub len: u64,
    pub mtime_ns: u128,
}

impl Stamp {
    /// The stamp of the file `meta` describes.
    pub(super) fn of(meta: &std::fs::Metadata) -> Stamp {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Stamp {
            len: meta.len(),
            mtime_ns,
        }
    }

    /// A strong entity tag: `"size-mtime"` in hex.
    fn etag(&self) -> String {
        format!("\"{:x}-{:x}\"", self.len, self.mtime_ns)
    }

    /// The modification time, whole seconds (what HTTP dates carry).
    fn modified(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_secs((self.mtime_ns / 1_000_000_000) as u64)
    }
}

/// The characters kept as they are in a URL path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `s` percent-encoded for one URL path segment (a `/` becomes `%2F`).
pub(super) fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A relative path percent-encoded segment by segment (its `/` kept).
pub(super) fn encode_path(rel: &str) -> String {
    rel.split('/').map(encode_segment).collect::<Vec<_>>().join("/")
}

/// Why a request path was refused.
#[derive(Debug)]
pub(super) enum Refusal {
    /// 400: a `..`/`.` component, a backslash, a NUL or bytes that are not UTF-8.
    Bad(String),
    /// 404: no such file, or one outside its root once symlinks are followed.
    NotFound(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Bad(m) => (StatusCode::BAD_REQUEST, m + "\n").into_response(),
            Refusal::NotFound(m) => (StatusCode::NOT_FOUND, m + "\n").into_response(),
        }
    }
}

/// Percent-decodes a URL path (once) and splits it into components, refusing `.`, `..`,
/// backslashes and NULs anywhere (also when they were percent-encoded). Empty components (`//`)
/// are dropped.
pub(super) fn components(raw: &str) -> Result<Vec<String>, Refusal> {
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| Refusal::Bad(format!("{raw}: the path is not UTF-8 once percent-decoded")))?;
    let mut out = Vec::new();
    for c in decoded.split('/') {
        if c.is_empty() {
            continue;
        }
        if c == "." || c == ".." || c.contains('\\') || c.contains('\0') {
            return Err(Refusal::Bad(format!(
                "{raw}: a path may not contain `.` or `..` components, backslashes or NULs"
            )));
        }
        out.push(c.to_string());
    }
    Ok(out)
}

/// `root` (canonical) joined with `comps`, symlinks followed, which must still lie inside `root`.
pub(super) fn locate(root: &Path, comps: &[String], shown: &str) -> Result<PathBuf, Refusal> {
    let mut p = root.to_path_buf();
    p.extend(comps);
    let canon = p
        .canonicalize()
        .map_err(|e| Refusal::NotFound(format!("{shown}: not found ({e})")))?;
    if !canon.starts_with(root) {
        // Said as "not found": whether something exists outside the root is not this server's
        // business to tell.
        return Err(Refusal::NotFound(format!(
            "{shown}: not found (it leads outside the served folder)"
        )));
    }
    Ok(canon)
}

/// `/files/{mount}/{path}`: a file under a served path.
pub(super) async fn mounted(AxState(s): AxState<Arc<Shared>>, req: Request) -> Response {
    let raw = req.uri().path().strip_prefix("/files/").unwrap_or("").to_string();
    let comps = match components(&raw) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let Some((first, rest)) = comps.split_first() else {
        return Refusal::NotFound("/files/: name a mount and a file (see /models)".into()).into_response();
    };
    let Some(mount) = s.mounts.iter().find(|m| &m.name == first) else {
        return Refusal::NotFound(format!("/files/{raw}: no mount named {first:?} (see /models)")).into_response();
    };
    let path = match locate(&mount.root, rest, &format!("/files/{raw}")) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    if let Some(only) = &mount.only
        && !only.contains(&path)
    {
        return Refusal::NotFound(format!("/files/{raw}: not found (this mount serves one model's files)"))
            .into_response();
    }
    send_file(&path, req.method(), req.headers())
}

/// The inspector's files: `/web-demo/`, `/js/`, `/wasm/pkg/` and `/tests/data/` under the web
/// root (the layout of `web-demo/serve.mjs`).
pub(super) async fn web(AxState(s): AxState<Arc<Shared>>, req: Request) -> Response {
    let raw = req.uri().path().to_string();
    let allowed = ["/web-demo/", "/js/", "/wasm/pkg/", "/tests/data/"];
    if raw == "/web-demo" {
        return Redirect::permanent("/web-demo/").into_response();
    }
    let Some(web) = &s.web else {
        return Refusal::NotFound(format!(
            "{raw}: not found (no web inspector is served; the data is under /models and /files/)"
        ))
        .into_response();
    };
    if !allowed.iter().any(|p| raw.starts_with(p)) {
        return Refusal::NotFound(format!(
            "{raw}: not found (this server has /web-demo/, /js/, /wasm/pkg/, /tests/data/, /files/, /models, \
             /tensors/ and /ws)"
        ))
        .into_response();
    }
    let comps = match components(&raw) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let mut path = match locate(web, &comps, &raw) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    if path.is_dir() {
        if !raw.ends_with('/') {
            return Redirect::permanent(&format!("{raw}/")).into_response();
        }
        path.push("index.html");
    }
    send_file(&path, req.method(), req.headers())
}

/// The media type for a file name (as `web-demo/serve.mjs` sends them).
fn content_type(path: &Path) -> &'static str {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "wasm" => "application/wasm",
        "css" => "text/css",
        "png" => "image/png",
        "md" | "txt" | "ts" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ranged {
    /// No usable range (absent, malformed, another unit, or several ranges): the whole file.
    Whole,
    /// Bytes `start..end` (end exclusive, `start < end <= size`).
    Part(u64, u64),
    /// Nothing of the file is in the range: 416.
    Unsatisfiable,
}

/// Parses a `Range` header value for a file of `size` bytes (see the module docs of `serve`).
pub(super) fn parse_range(value: &str, size: u64) -> Ranged {
    let v = value.trim();
    let Some(spec) = v.get(..6).filter(|u| u.eq_ignore_ascii_case("bytes=")).map(|_| &v[6..]) else {
        return Ranged::Whole;
    };
    let specs: Vec<&str> = spec.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let [one] = specs.as_slice() else {
        return Ranged::Whole;
    };
    let Some((a, b)) = one.split_once('-') else {
        return Ranged::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if a.is_empty() {
        if !digits(b) {
            return Ranged::Whole;
        }
        // A suffix too long for u64 is longer than any file.
        let n = b.parse::<u64>().unwrap_or(u64::MAX);
        if n == 0 || size == 0 {
            return Ranged::Unsatisfiable;
        }
        return Ranged::Part(size - n.min(size), size);
    }
    if !digits(a) || !(b.is_empty() || digits(b)) {
        return Ranged::Whole;
    }
    let first = a.parse::<u64>().unwrap_or(u64::MAX);
    let last = if b.is_empty() {
        None
    } else {
        Some(b.parse::<u64>().unwrap_or(u64::MAX))
    };
    if last.is_some_and(|l| l < first) {
        return Ranged::Whole; // invalid: ignored, as RFC 9110 §14.1.1 says
    }
    if first >= size {
        return Ranged::Unsatisfiable;
    }
    let end = last.map_or(size, |l| l.saturating_add(1).min(size));
    Ranged::Part(first, end)
}

/// Whether entity tag `tag` is in the `If-None-Match`/`If-Match` list `list` (`weak`: W/ tags
/// compare by their opaque part).
fn tag_listed(list: &str, tag: &str, weak: bool) -> bool {
    list.split(',').map(str::trim).any(|t| {
        if t == "*" {
            return true;
        }
        match t.strip_prefix("W/") {
            Some(w) => weak && w == tag,
            None => t == tag,
        }
    })
}

/// Header `name` as text, if present and visible ASCII.
fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// A response with no body but the validators.
fn bare(status: StatusCode, etag: &str, modified: &str) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(modified) {
        h.insert(header::LAST_MODIFIED, v);
    }
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    r
}

/// Ranges up to this many bytes are read with one `pread` before the response starts; longer
/// ones are streamed in chunks of this size ([`FileBody`]), so a response holds at most one chunk.
pub(super) const CHUNK: usize = 256 << 10;

/// Reads `len` bytes of `file` at `offset` with `pread` (no map: a file truncated meanwhile gives
/// an error, never SIGBUS). Fewer bytes than asked (the file shrank) is an error.
fn read_chunk(file: &File, offset: u64, len: usize) -> std::io::Result<Bytes> {
    let mut buf = vec![0u8; len];
    crate::source::read_exact_at(file, &mut buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            std::io::Error::new(
                e.kind(),
                format!("the file shrank: {len} bytes at offset {offset} are no longer there"),
            )
        } else {
            e
        }
    })?;
    Ok(Bytes::from(buf))
}

/// A response body read from an open file in [`CHUNK`]-sized `pread`s on tokio's blocking pool,
/// one chunk at a time (the next is read when the socket has taken the last). A read error or a
/// short read (the file was truncated) ends the body with an error, which makes the server abort
/// the connection: the client sees fewer bytes than `Content-Length` said, and the server goes on.
struct FileBody {
    file: Arc<File>,
    /// The next byte to read.
    pos: u64,
    /// One past the last byte to send.
    end: u64,
    /// The chunk being read.
    pending: Option<tokio::task::JoinHandle<std::io::Result<Bytes>>>,
}

impl HttpBody for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if this.pending.is_none() {
            if this.pos >= this.end {
                return Poll::Ready(None);
            }
            let (file, pos) = (this.file.clone(), this.pos);
            let len = (this.end - pos).min(CHUNK as u64) as usize;
            this.pending = Some(tokio::task::spawn_blocking(move || read_chunk(&file, pos, len)));
        }
        let Some(task) = this.pending.as_mut() else {
            return Poll::Ready(None);
        };
        let done = std::task::ready!(Pin::new(task).poll(cx));
        this.pending = None;
        match done.map_err(std::io::Error::other).and_then(|r| r) {
            Ok(b) => {
                this.pos += b.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Err(e) => {
                this.pos = this.end; // nothing more after an error
                Poll::Ready(Some(Err(e)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.pos >= self.end
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.end.saturating_sub(self.pos))
    }
}

/// One file as a response to `method` with request headers `h`.
pub(super) fn send_file(path: &Path, method: &Method, h: &HeaderMap) -> Response {
    let shown = || path.display().to_string();
    // One open file for the metadata and the reads: the validators describe the bytes sent.
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => return Refusal::NotFound(format!("{}: {e}", shown())).into_response(),
    };
    let meta = match file.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Refusal::NotFound(format!("{}: not a file", shown())).into_response(),
        Err(e) => return Refusal::NotFound(format!("{}: {e}", shown())).into_response(),
    };
    let stamp = Stamp::of(&meta);
    let etag = stamp.etag();
    let modified = httpdate::fmt_http_date(stamp.modified());
    let size = stamp.len;

    // RFC 9110 §13.2.2: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since, If-Range.
    if let Some(im) = header_str(h, header::IF_MATCH) {
        if !tag_listed(im, &etag, false) {
            return bare(StatusCode::PRECONDITION_FAILED, &etag, &modified);
        }
    } else if let Some(ius) = header_str(h, header::IF_UNMODIFIED_SINCE).and_then(|d| httpdate::parse_http_date(d).ok())
        && stamp.modified() > ius
    {
        return bare(StatusCode::PRECONDITION_FAILED, &etag, &modified);
    }
    if let Some(inm) = header_str(h, header::IF_NONE_MATCH) {
        if tag_listed(inm, &etag, true) {
            return bare(StatusCode::NOT_MODIFIED, &etag, &modified);
        }
    } else if let Some(ims) = header_str(h, header::IF_MODIFIED_SINCE).and_then(|d| httpdate::parse_http_date(d).ok())
        && stamp.modified() <= ims
    {
        return bare(StatusCode::NOT_MODIFIED, &etag, &modified);
    }
    let range_applies = *method == Method::GET
        && match header_str(h, header::IF_RANGE) {
            None => true,
            // An entity tag must match strongly; a date must be exactly the Last-Modified.
            Some(t) if t.starts_with('"') || t.starts_with("W/") => t == etag,
            Some(d) => d == modified,
        };
    let ranged = match header_str(h, header::RANGE) {
        Some(r) if range_applies => parse_range(r, size),
        _ => Ranged::Whole,
    };
    let (status, start, end) = match ranged {
        Ranged::Whole => (StatusCode::OK, 0, size),
        Ranged::Part(a, b) => (StatusCode::PARTIAL_CONTENT, a, b),
        Ranged::Unsatisfiable => {
            let mut r = bare(StatusCode::RANGE_NOT_SATISFIABLE, &etag, &modified);
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
            return r;
        }
    };
    let len = end - start;
    let body = if *method == Method::HEAD || len == 0 {
        Body::empty()
    } else if len <= CHUNK as u64 {
        // Small: one read now, so that a file that shrank since its metadata is a clean 503.
        match read_chunk(&file, start, len as usize) {
            Ok(b) => Body::from(b),
            Err(e) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("{}: the file changed while it was read ({e}); retry\n", shown()),
                )
                    .into_response();
            }
        }
    } else {
        Body::new(FileBody {
            file: Arc::new(file),
            pos: start,
            end,
            pending: None,
        })
    };
    let mut r = bare(status, &etag, &modified);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(path)));
    r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{}/{size}", end - 1))
    {
        r.headers_mut().insert(header::CONTENT_RANGE, v);
    }
    *r.body_mut() = body;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use Ranged::*;
        assert_eq!(parse_range("bytes=0-9", 100), Part(0, 10));
        assert_eq!(parse_range("bytes=90-", 100), Part(90, 100));
        assert_eq!(parse_range("bytes=90-1000", 100), Part(90, 100));
        assert_eq!(parse_range("bytes=-10", 100), Part(90, 100));
        assert_eq!(parse_range("bytes=-1000", 100), Part(0, 100));
        assert_eq!(parse_range("bytes=-0", 100), Unsatisfiable);
        assert_eq!(parse_range("bytes=100-", 100), Unsatisfiable);
        assert_eq!(parse_range("bytes=99999999999999999999999-", 100), Unsatisfiable);
        assert_eq!(parse_range("bytes=0-0", 0), Unsatisfiable);
        assert_eq!(parse_range("bytes=5-2", 100), Whole);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Whole);
        assert_eq!(parse_range("items=0-1", 100), Whole);
        assert_eq!(parse_range("bytes=a-b", 100), Whole);
        assert_eq!(parse_range("BYTES=1-1", 100), Part(1, 2));
    }

    #[test]
    fn refuses_dot_components() {
        assert!(components("a/../b").is_err());
        assert!(components("a/%2e%2e/b").is_err());
        assert!(components("a/%2E%2E%2Fb").is_err());
        assert!(components("a\\b").is_err());
        assert!(components("a/./b").is_err());
        assert_eq!(components("a//b/").unwrap(), vec!["a", "b"]);
        assert_eq!(encode_path("x y/z%"), "x%20y/z%25");
    }
}
