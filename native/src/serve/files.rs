//! Files: path resolution inside a root (no `..`, no symlink out), and one file as an HTTP response
//! with `Range`, `ETag`, `Last-Modified` and the RFC 9110 conditionals; the inspector's files from a
//! web root on disk or, compiled into the program ([`super::Asset`]), from memory with the same
//! conditionals and ranges.
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
use crate::source::FileId;

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
}

/// A strong entity tag for one version of a file, from its identity ([`FileId`]: size,
/// modification time, inode and status-change time) in hex: a file rewritten in place (new
/// mtime and ctime) or replaced by another (new inode) gets a new one, even at the same size and
/// with its old modification time put back.
fn etag_of(id: &FileId) -> String {
    format!(
        "\"{:x}-{:x}-{:x}-{:x}\"",
        id.len,
        id.mtime_ns.max(0),
        id.ino,
        id.ctime_ns.max(0)
    )
}

/// The modification time of `id`, whole seconds (what HTTP dates carry), within what an HTTP date
/// can say (1970 to the end of 9999).
fn modified_of(id: &FileId) -> SystemTime {
    /// 9999-12-31T23:59:59Z.
    const LAST: i128 = 253_402_300_799;
    let secs = (id.mtime_ns / 1_000_000_000).clamp(0, LAST) as u64;
    UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

/// The error for a file whose identity is no longer `was`: it was rewritten or replaced while
/// it was read.
fn changed(was: &FileId, now: &FileId) -> std::io::Error {
    let why = match was.check(now) {
        Err(e) => e.to_string(),
        Ok(()) => "the file changed while it was read".into(),
    };
    std::io::Error::other(why)
}

/// Checks that `file` is still the version `id` describes (an `fstat`).
fn unchanged(file: &File, id: &FileId) -> std::io::Result<()> {
    let now = FileId::of(file)?;
    if now == *id { Ok(()) } else { Err(changed(id, &now)) }
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

/// Opens `path` to read it, without blocking on a FIFO or a device (`O_NONBLOCK`, which regular
/// files ignore): what it is gets checked once it is open.
fn open_read(path: &Path) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(target_os = "linux")]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_NONBLOCK);
    o.open(path)
}

/// `comps` (relative) opened under the folder `dir` with `openat2(RESOLVE_BENEATH)`: one system
/// call, in which the kernel refuses any step out of `dir` (`..`, an absolute symlink, a symlink
/// leading out) with `EXDEV`.
#[cfg(target_os = "linux")]
fn open_beneath(dir: &File, comps: &[String]) -> std::io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let rel: PathBuf = if comps.is_empty() {
        PathBuf::from(".")
    } else {
        comps.iter().collect()
    };
    let name = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    /// `struct open_how` of `<linux/openat2.h>` (its first version, 24 bytes; `libc`'s is
    /// non-exhaustive).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2(2) reads `name` (a NUL-terminated string that outlives the call) and `how`
    // (an initialised `open_how`, `#[repr(C)]`, whose size is passed with it); `dir` is an open descriptor
    // borrowed for the call. Nothing else is touched.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("openat2 returned no descriptor"))?;
    // SAFETY: `fd` was just returned by the kernel for this call and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// `root` (canonical) joined with `comps`, opened, provided that the file reached after following
/// symlinks lies inside `root`; with the path it was reached by (for messages and the media type).
///
/// On Linux, with `dir` (the root held open), one `openat2(RESOLVE_BENEATH)` does it. What that
/// refuses or cannot do (an absolute symlink, even one pointing inside the root; an old kernel;
/// a seccomp filter) goes the portable way: [`locate`] (`realpath`, a lookup per component, which
/// cost about 13% of the server's CPU time on 4 KiB ranges) and then an open of the canonical path.
pub(super) fn open_under(
    root: &Path,
    dir: Option<&File>,
    comps: &[String],
    shown: &str,
) -> Result<(File, PathBuf), Refusal> {
    #[cfg(target_os = "linux")]
    if let Some(dir) = dir {
        match open_beneath(dir, comps) {
            Ok(f) => {
                let mut p = root.to_path_buf();
                p.extend(comps);
                return Ok((f, p));
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Err(Refusal::NotFound(format!("{shown}: not found ({e})")));
            }
            Err(_) => {} // EXDEV, ENOSYS, EPERM, ELOOP, …: decided below
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = dir;
    let canon = locate(root, comps, shown)?;
    let f = open_read(&canon).map_err(|e| Refusal::NotFound(format!("{shown}: not found ({e})")))?;
    Ok((f, canon))
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
    let shown = || format!("/files/{raw}");
    let opened = match &mount.only {
        // A file mount serves a list of canonical paths: compare the canonical one.
        Some(only) => locate(&mount.root, rest, &shown()).and_then(|path| {
            if !only.contains(&path) {
                return Err(Refusal::NotFound(format!(
                    "/files/{raw}: not found (this mount serves one model's files)"
                )));
            }
            let f = open_read(&path).map_err(|e| Refusal::NotFound(format!("{}: not found ({e})", shown())))?;
            Ok((f, path))
        }),
        None => open_under(&mount.root, mount.dir.as_ref(), rest, &shown()),
    };
    match opened {
        Ok((file, path)) => send_file(file, &path, &shown(), req.method(), req.headers()).await,
        Err(r) => r.into_response(),
    }
}

/// The inspector's files: `/web-demo/`, `/js/`, `/wasm/pkg/` and `/tests/data/` under the web
/// root (the layout of `web-demo/serve.mjs`).
pub(super) async fn web(AxState(s): AxState<Arc<Shared>>, req: Request) -> Response {
    let raw = req.uri().path().to_string();
    let allowed = ["/web-demo/", "/js/", "/wasm/pkg/", "/tests/data/"];
    if raw == "/web-demo" {
        return Redirect::permanent(&format!(
            "/web-demo/{}",
            req.uri().query().map(|q| format!("?{q}")).unwrap_or_default()
        ))
        .into_response();
    }
    if s.web.is_none() && !s.assets.is_empty() {
        return embedded(s.assets, &raw, req.method(), req.headers());
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
    let mut comps = match components(&raw) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let (mut file, mut path) = match open_under(web, s.web_dir.as_ref(), &comps, &raw) {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        if !raw.ends_with('/') {
            return Redirect::permanent(&format!("{raw}/")).into_response();
        }
        comps.push("index.html".into());
        (file, path) = match open_under(web, s.web_dir.as_ref(), &comps, &raw) {
            Ok(o) => o,
            Err(r) => return r.into_response(),
        };
    }
    send_file(file, &path, &raw, req.method(), req.headers()).await
}

/// The inspector compiled into the program: `raw` (a request path) looked up in `assets` (paths
/// under `web-demo/`, `js/` and `wasm/pkg/`; a folder's `index.html` for a path ending in `/`) and
/// sent from memory with its content type, its `ETag`, `Cache-Control: no-cache` (revalidate, then
/// 304) and the same conditionals and ranges as a file.
fn embedded(assets: &[super::Asset], raw: &str, method: &Method, h: &HeaderMap) -> Response {
    let comps = match components(raw) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let key = comps.join("/");
    let find = |k: &str| assets.iter().find(|a| a.path == k);
    let public = ["web-demo", "js", "wasm"].contains(&comps.first().map_or("", String::as_str));
    let found = if !public {
        None
    } else if raw.ends_with('/') {
        find(&format!("{key}/index.html"))
    } else if let Some(a) = find(&key) {
        Some(a)
    } else if find(&format!("{key}/index.html")).is_some() {
        return Redirect::permanent(&format!("{raw}/")).into_response();
    } else {
        None
    };
    let Some(asset) = found else {
        return Refusal::NotFound(format!(
            "{raw}: not found (this server's inspector is compiled into it: /web-demo/, /js/ and /wasm/pkg/; \
             the data is under /files/, /models, /tensors/ and /ws)"
        ))
        .into_response();
    };
    let size = asset.bytes.len() as u64;
    let (status, start, end) = match decide(method, h, asset.etag, None, size) {
        Ok(d) => d,
        Err(r) => return *r,
    };
    let mut r = bare(status, asset.etag, None);
    let body = if *method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(Bytes::from_static(&asset.bytes[start as usize..end as usize]))
    };
    finish(&mut r, content_type(Path::new(asset.path)), start, end, size);
    *r.body_mut() = body;
    r
}

/// The headers every `200`/`206` response carries besides the validators: content type and
/// length, `Cache-Control: no-cache` (a client may keep the body but revalidates it each time) and,
/// for a part, `Content-Range`.
fn finish(r: &mut Response, content_type: &'static str, start: u64, end: u64, size: u64) {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if r.status() == StatusCode::PARTIAL_CONTENT
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{}/{size}", end - 1))
    {
        r.headers_mut().insert(header::CONTENT_RANGE, v);
    }
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
        "css" => "text/css; charset=utf-8",
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

/// A response with no body but the validators (`modified`: the `Last-Modified` date, which bytes
/// compiled into the program do not have).
fn bare(status: StatusCode, etag: &str, modified: Option<&str>) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    if let Some(v) = modified.and_then(|m| HeaderValue::from_str(m).ok()) {
        h.insert(header::LAST_MODIFIED, v);
    }
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    r
}

/// Ranges up to this many bytes are read before the response starts; longer ones are streamed in
/// chunks of this size ([`FileBody`]), so a response holds at most one chunk.
pub(super) const CHUNK: usize = 256 << 10;

/// Reads under this size use a fresh `Vec` (small allocations come from the heap, cheaply);
/// larger ones a [`CHUNK`]-sized buffer from [`POOL`].
const SMALL: usize = 64 << 10;

/// The most [`CHUNK`]-sized buffers kept for reuse (8 MiB). A fresh buffer of that size is a new
/// `mmap` from the allocator: zeroing it faults in 64 pages, which cost about a fifth of the
/// server's CPU time on 1 MiB ranges before buffers were reused.
const POOL_MAX: usize = 32;

/// Read buffers of [`CHUNK`] bytes, returned by [`Pooled`] when the socket is done with them.
static POOL: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// A read buffer and how much of it holds data; given back to [`POOL`] when dropped (that is,
/// once hyper has written the `Bytes` made from it).
struct Pooled {
    buf: Vec<u8>,
    len: usize,
}

impl Pooled {
    /// A buffer for `len` bytes: from the pool (or a new one) for large reads, a fresh `Vec` for
    /// small ones.
    fn take(len: usize) -> Pooled {
        let buf = if (SMALL..=CHUNK).contains(&len) {
            POOL.lock()
                .ok()
                .and_then(|mut p| p.pop())
                .unwrap_or_else(|| vec![0; CHUNK])
        } else {
            vec![0; len]
        };
        Pooled { buf, len }
    }

    /// The bytes to fill.
    fn space(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if self.buf.len() == CHUNK
            && let Ok(mut p) = POOL.lock()
            && p.len() < POOL_MAX
        {
            p.push(std::mem::take(&mut self.buf));
        }
    }
}

/// The error for a file that ended before `offset + len`.
fn shrank(offset: u64, len: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("the file shrank: {len} bytes at offset {offset} are no longer there"),
    )
}

/// Reads into `buf` from `offset` as far as the page cache has the bytes, without waiting for the
/// disk (`preadv2` with `RWF_NOWAIT`); the number of bytes read (0 when nothing was cached or the
/// kernel cannot do it). An end of file is an error: the file shrank.
#[cfg(all(target_os = "linux", any(target_env = "gnu", target_env = "musl")))]
fn read_cached(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let at = i64::try_from(offset + done as u64).map_err(|_| shrank(offset, buf.len()))?;
        // SAFETY: `iov` describes `rest`, memory this function borrows mutably for the call;
        // `file` is an open descriptor. The kernel writes at most `iov_len` bytes there.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
        match n {
            0 => return Err(shrank(offset + done as u64, buf.len() - done)),
            n if n > 0 => done += n as usize,
            // EAGAIN (not cached), EOPNOTSUPP, EINVAL (an old kernel), …: the blocking read decides.
            _ => break,
        }
    }
    Ok(done)
}

/// Elsewhere nothing is read without blocking.
#[cfg(not(all(target_os = "linux", any(target_env = "gnu", target_env = "musl"))))]
fn read_cached(_file: &File, _offset: u64, _buf: &mut [u8]) -> std::io::Result<usize> {
    Ok(0)
}

/// `pread`s until `buf` is full (the file ending first is an error: it shrank).
fn read_blocking(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
    crate::source::read_exact_at(file, buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            shrank(offset, buf.len())
        } else {
            e
        }
    })
}

/// What [`start_read`] got: the bytes, or a read finishing on tokio's blocking pool.
enum Started {
    Done(Bytes),
    Pending(tokio::task::JoinHandle<std::io::Result<Bytes>>),
}

/// Reads `len` bytes of `file` at `offset` with `pread` (never a map: a file truncated meanwhile
/// is an error, not SIGBUS). What the page cache holds is read at once on this thread; the rest
/// (bytes on disk) on tokio's blocking pool, so a cold file does not stall the other connections.
/// After the read the file's identity must still be `id` (else an error: the bytes may mix two
/// versions).
fn start_read(file: &Arc<File>, id: FileId, offset: u64, len: usize) -> std::io::Result<Started> {
    let mut buf = Pooled::take(len);
    let got = read_cached(file, offset, buf.space())?;
    if got == len {
        unchanged(file, &id)?;
        return Ok(Started::Done(Bytes::from_owner(buf)));
    }
    let file = file.clone();
    Ok(Started::Pending(tokio::task::spawn_blocking(move || {
        read_blocking(&file, offset + got as u64, &mut buf.space()[got..])?;
        unchanged(&file, &id)?;
        Ok(Bytes::from_owner(buf))
    })))
}

/// [`start_read`] to the end.
async fn read_range(file: &Arc<File>, id: FileId, offset: u64, len: usize) -> std::io::Result<Bytes> {
    match start_read(file, id, offset, len)? {
        Started::Done(b) => Ok(b),
        Started::Pending(task) => task.await.map_err(std::io::Error::other)?,
    }
}

/// A response body read from an open file [`CHUNK`] bytes at a time ([`start_read`]), the next
/// chunk read when the socket has taken the last. A read error, a short read (the file was
/// truncated) or a changed identity (the file was rewritten in place) ends the body with an
/// error, which makes the server abort the connection: the client sees fewer bytes than
/// `Content-Length` said, never a clean end, and the server goes on.
struct FileBody {
    file: Arc<File>,
    /// The file's identity when the response started (its `ETag`).
    id: FileId,
    /// The next byte to read.
    pos: u64,
    /// One past the last byte to send.
    end: u64,
    /// The chunk being read on the blocking pool.
    pending: Option<tokio::task::JoinHandle<std::io::Result<Bytes>>>,
}

impl FileBody {
    /// The frame for a finished read of the chunk at `pos`.
    fn frame(&mut self, read: std::io::Result<Bytes>) -> Option<Result<Frame<Bytes>, std::io::Error>> {
        match read {
            Ok(b) => {
                self.pos += b.len() as u64;
                Some(Ok(Frame::data(b)))
            }
            Err(e) => {
                self.pos = self.end; // nothing more after an error
                Some(Err(e))
            }
        }
    }
}

impl HttpBody for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        if let Some(task) = this.pending.as_mut() {
            let done = std::task::ready!(Pin::new(task).poll(cx));
            this.pending = None;
            return Poll::Ready(this.frame(done.map_err(std::io::Error::other).and_then(|r| r)));
        }
        if this.pos >= this.end {
            return Poll::Ready(None);
        }
        let len = (this.end - this.pos).min(CHUNK as u64) as usize;
        match start_read(&this.file, this.id, this.pos, len) {
            Ok(Started::Done(b)) => Poll::Ready(this.frame(Ok(b))),
            Err(e) => Poll::Ready(this.frame(Err(e))),
            Ok(Started::Pending(mut task)) => match Pin::new(&mut task).poll(cx) {
                Poll::Ready(done) => Poll::Ready(this.frame(done.map_err(std::io::Error::other).and_then(|r| r))),
                Poll::Pending => {
                    this.pending = Some(task);
                    Poll::Pending
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.pos >= self.end
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.end.saturating_sub(self.pos))
    }
}

/// The RFC 9110 §13.2.2 evaluation for a body of `size` bytes with entity tag `etag` and (for a
/// file) its `Last-Modified` date, as text and as a time: `If-Match`, `If-Unmodified-Since`
/// (412), `If-None-Match`, `If-Modified-Since` (304), then `Range` with `If-Range`. The status
/// (200 or 206) and the bytes `start..end` to send, or the finished 304/412/416 response (boxed:
/// it is large, and rare).
fn decide(
    method: &Method,
    h: &HeaderMap,
    etag: &str,
    modified: Option<(&str, SystemTime)>,
    size: u64,
) -> Result<(StatusCode, u64, u64), Box<Response>> {
    let shown = modified.map(|(m, _)| m);
    let time = modified.map(|(_, t)| t);
    if let Some(im) = header_str(h, header::IF_MATCH) {
        if !tag_listed(im, etag, false) {
            return Err(Box::new(bare(StatusCode::PRECONDITION_FAILED, etag, shown)));
        }
    } else if let Some(ius) = header_str(h, header::IF_UNMODIFIED_SINCE).and_then(|d| httpdate::parse_http_date(d).ok())
        && time.is_some_and(|t| t > ius)
    {
        return Err(Box::new(bare(StatusCode::PRECONDITION_FAILED, etag, shown)));
    }
    if let Some(inm) = header_str(h, header::IF_NONE_MATCH) {
        if tag_listed(inm, etag, true) {
            return Err(Box::new(bare(StatusCode::NOT_MODIFIED, etag, shown)));
        }
    } else if let Some(ims) = header_str(h, header::IF_MODIFIED_SINCE).and_then(|d| httpdate::parse_http_date(d).ok())
        && time.is_some_and(|t| t <= ims)
    {
        return Err(Box::new(bare(StatusCode::NOT_MODIFIED, etag, shown)));
    }
    let range_applies = *method == Method::GET
        && match header_str(h, header::IF_RANGE) {
            None => true,
            // An entity tag must match strongly; a date must be exactly the Last-Modified.
            Some(t) if t.starts_with('"') || t.starts_with("W/") => t == etag,
            Some(d) => shown == Some(d),
        };
    let ranged = match header_str(h, header::RANGE) {
        Some(r) if range_applies => parse_range(r, size),
        _ => Ranged::Whole,
    };
    match ranged {
        Ranged::Whole => Ok((StatusCode::OK, 0, size)),
        Ranged::Part(a, b) => Ok((StatusCode::PARTIAL_CONTENT, a, b)),
        Ranged::Unsatisfiable => {
            let mut r = bare(StatusCode::RANGE_NOT_SATISFIABLE, etag, shown);
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
            Err(Box::new(r))
        }
    }
}

/// The open file `file` (reached by `path`, which gives its media type; asked for as `shown`, the
/// URL path that error bodies name) as a response to `method` with request headers `h`.
///
/// The validators come from the file's identity at this open ([`FileId`]); every chunk read
/// checks it again, and a file that changed is a `503` (before the answer starts) or an aborted
/// body (after).
pub(super) async fn send_file(file: File, path: &Path, shown: &str, method: &Method, h: &HeaderMap) -> Response {
    // One open file for the metadata and the reads: the validators describe the bytes sent.
    let id = match file.metadata() {
        Ok(m) if m.is_file() => match FileId::of(&file) {
            Ok(id) => id,
            Err(e) => return Refusal::NotFound(format!("{shown}: {e}")).into_response(),
        },
        Ok(_) => return Refusal::NotFound(format!("{shown}: not a file")).into_response(),
        Err(e) => return Refusal::NotFound(format!("{shown}: {e}")).into_response(),
    };
    let etag = etag_of(&id);
    let modified = httpdate::fmt_http_date(modified_of(&id));
    let size = id.len;

    let (status, start, end) = match decide(method, h, &etag, Some((&modified, modified_of(&id))), size) {
        Ok(d) => d,
        Err(r) => return *r,
    };
    let len = end - start;
    let body = if *method == Method::HEAD || len == 0 {
        Body::empty()
    } else if len <= CHUNK as u64 {
        // Small: one read now, so that a file that shrank or changed since its metadata is a
        // clean 503.
        match read_range(&Arc::new(file), id, start, len as usize).await {
            Ok(b) => Body::from(b),
            Err(e) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("{shown}: the file changed while it was read ({e}); retry\n"),
                )
                    .into_response();
            }
        }
    } else {
        Body::new(FileBody {
            file: Arc::new(file),
            id,
            pos: start,
            end,
            pending: None,
        })
    };
    let mut r = bare(status, &etag, Some(&modified));
    finish(&mut r, content_type(path), start, end, size);
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

    /// An inspector of two files, as the `tensorlane` binary embeds its own.
    static ASSETS: &[super::super::Asset] = &[
        super::super::Asset {
            path: "web-demo/index.html",
            bytes: b"<p>hello</p>",
            etag: "\"c-1\"",
        },
        super::super::Asset {
            path: "wasm/pkg/x.wasm",
            bytes: b"\0asm\x01\0\0\0",
            etag: "\"8-2\"",
        },
    ];

    fn ask(path: &str, method: Method, headers: &[(header::HeaderName, &str)]) -> Response {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        embedded(ASSETS, path, &method, &h)
    }

    #[test]
    fn embedded_assets() {
        let get = |r: &Response, k: header::HeaderName| r.headers().get(k).map(|v| v.to_str().unwrap().to_string());
        let page = ask("/web-demo/", Method::GET, &[]);
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(
            get(&page, header::CONTENT_TYPE).as_deref(),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(get(&page, header::ETAG).as_deref(), Some("\"c-1\""));
        assert_eq!(get(&page, header::CACHE_CONTROL).as_deref(), Some("no-cache"));
        assert_eq!(get(&page, header::CONTENT_LENGTH).as_deref(), Some("12"));
        assert_eq!(get(&page, header::LAST_MODIFIED), None);
        assert_eq!(ask("/web-demo/index.html", Method::HEAD, &[]).status(), StatusCode::OK);
        let wasm = ask("/wasm/pkg/x.wasm", Method::GET, &[(header::RANGE, "bytes=1-3")]);
        assert_eq!(wasm.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(get(&wasm, header::CONTENT_TYPE).as_deref(), Some("application/wasm"));
        assert_eq!(get(&wasm, header::CONTENT_RANGE).as_deref(), Some("bytes 1-3/8"));
        let past = ask("/wasm/pkg/x.wasm", Method::GET, &[(header::RANGE, "bytes=8-")]);
        assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(get(&past, header::CONTENT_RANGE).as_deref(), Some("bytes */8"));
        let same = [(header::IF_NONE_MATCH, "\"c-1\"")];
        assert_eq!(
            ask("/web-demo/index.html", Method::GET, &same).status(),
            StatusCode::NOT_MODIFIED
        );
        let other = [(header::IF_MATCH, "\"zz\"")];
        assert_eq!(
            ask("/web-demo/index.html", Method::GET, &other).status(),
            StatusCode::PRECONDITION_FAILED
        );
        // A folder without its slash is redirected; what is not there, or not the inspector's, is 404.
        let dir = ask("/web-demo", Method::GET, &[]);
        assert_eq!(dir.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(get(&dir, header::LOCATION).as_deref(), Some("/web-demo/"));
        assert_eq!(
            ask("/web-demo/nope.js", Method::GET, &[]).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(ask("/tests/data/x", Method::GET, &[]).status(), StatusCode::NOT_FOUND);
        assert_eq!(
            ask("/web-demo/%2e%2e/x", Method::GET, &[]).status(),
            StatusCode::BAD_REQUEST
        );
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
