//! `tensorlane serve` against hostile or careless clients and files changed underneath, as a real
//! process on loopback with a raw HTTP/1.1 client (every wait bounded): idle and slow connections
//! are closed after the header and idle timeouts while a slow download is not; past
//! `--max-connections` a fast `503` with `Retry-After`; a non-loopback `--bind` needs `--token` or
//! `--public`; the bearer scheme in any case; error bodies without server paths; a file rewritten
//! in place while it is sent cuts the body off; the `ETag` follows the file's identity;
//! `--max-connections` held to the open-file limit. With `--model` (the OpenAI-compatible API,
//! the bundled sample model): random response ids, control-token text in chat messages kept text,
//! OpenAI error objects for every error under `/v1/`, a body timeout (408) and an early 413, the
//! exact context check, CORS for loopback pages only unless `--cors-origin`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tensorlane_testkit as common;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

/// A `tensorlane serve` process, killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    /// Starts `tensorlane serve ARGS` (ARGS name `--bind`) and waits (at most 60 s) for the URL
    /// it prints.
    fn start(args: &[&str]) -> Served {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(args)
            .env_remove("TENSORLANE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let addr = tensorlane_testkit::servers::served_addr(&mut child, &format!("tensorlane serve {args:?}"));
        Served { child, addr }
    }

    /// Serves `dir` on a free loopback port with `extra` flags.
    fn dir(dir: &Path, extra: &[&str]) -> Served {
        let d = dir.to_str().unwrap();
        let mut args = vec![d, "--bind", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Served::start(&args)
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh scratch folder of its own for each call.
fn scratch(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    common::live_dir(&format!("hardening-{tag}-{n}"))
}

/// A folder holding `small.bin` (1000 bytes) and an empty folder `sub/`.
fn small_dir(tag: &str) -> PathBuf {
    let d = scratch(tag);
    std::fs::write(d.join("small.bin"), (0..1000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    d
}

/// The URL path of `name` in the mount of `dir`.
fn url(dir: &Path, name: &str) -> String {
    format!("/files/{}/{name}", dir.file_name().unwrap().to_str().unwrap())
}

/// A response head: status and lower-case headers.
struct Head {
    status: u16,
    headers: HashMap<String, String>,
}

impl Head {
    fn h(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
    fn len(&self) -> usize {
        self.h("content-length").parse().expect("a Content-Length")
    }
}

/// Sends `GET path` (or `method`) with `headers` on `s`, keeping the connection alive.
fn send(s: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)]) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).expect("the request is sent");
}

/// Reads a response head from `r`.
fn read_head(r: &mut impl BufRead) -> Head {
    let mut line = String::new();
    r.read_line(&mut line).expect("a status line");
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = HashMap::new();
    loop {
        line.clear();
        r.read_line(&mut line).expect("a header line");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').expect("a header");
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    Head { status, headers }
}

/// One whole request on `s`: the head and the body (by its Content-Length; none for HEAD).
fn request(s: &mut BufReader<TcpStream>, method: &str, path: &str, headers: &[(&str, &str)]) -> (Head, Vec<u8>) {
    send(s.get_mut(), method, path, headers);
    let head = read_head(s);
    let mut body = vec![0; if method == "HEAD" { 0 } else { head.len() }];
    s.read_exact(&mut body).expect("the whole body");
    (head, body)
}

/// A one-off request on a new connection.
fn once(served: &Served, method: &str, path: &str, headers: &[(&str, &str)]) -> (Head, Vec<u8>) {
    request(&mut BufReader::new(served.connect()), method, path, headers)
}

/// How long until the server closes `s` (EOF or reset), reading and dropping anything it sends;
/// `None` when it is still open after `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(t.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return None,
            Err(_) => return Some(t.elapsed()),
        }
        if t.elapsed() > limit {
            return None;
        }
    }
}

/// 8 connections that send nothing no longer hold `--max-connections 8` beyond the header
/// timeout, a slow (slowloris) head is cut at it too, and a request after it is served.
#[test]
fn idle_and_slow_connections_closed_after_the_header_timeout() {
    let dir = small_dir("idle");
    let served = Served::dir(&dir, &["--max-connections", "8", "--header-timeout", "1s"]);
    let started = Instant::now();
    let mut idle: Vec<TcpStream> = (0..7).map(|_| served.connect()).collect();
    // The eighth sends a head one byte at a time, never finishing it.
    let mut slow = served.connect();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let writer = {
        let mut s = slow.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..30 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(b"X").is_err() {
                    break;
                }
            }
        })
    };
    for s in idle.iter_mut().chain(std::iter::once(&mut slow)) {
        let after = closed_within(s, Duration::from_secs(8)).map(|_| started.elapsed());
        let after = after.expect("an idle or slow connection is still open 8 s past a 1 s header timeout");
        assert!(
            after >= Duration::from_millis(900) && after < Duration::from_secs(8),
            "closed after {after:?}, with a 1 s header timeout"
        );
    }
    let _ = writer.join();
    let (head, body) = once(&served, "GET", &url(&dir, "small.bin"), &[]);
    assert_eq!(head.status, 200);
    assert_eq!(body.len(), 1000);
}

/// A kept-alive connection is closed after the idle timeout (not before), while a download that
/// takes longer than both timeouts, to a client reading slowly, is not cut.
#[test]
fn idle_timeout_closes_kept_alive_connections_but_not_slow_downloads() {
    let dir = small_dir("keepalive");
    // Larger than loopback's socket buffers, so that the server is still sending it.
    let big: Vec<u8> = (0..(24u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    let served = Served::dir(&dir, &["--header-timeout", "1s", "--idle-timeout", "1s"]);

    let mut c = BufReader::new(served.connect());
    let (head, _) = request(&mut c, "GET", &url(&dir, "small.bin"), &[]);
    assert_eq!(head.status, 200);
    std::thread::sleep(Duration::from_millis(400));
    let (head, _) = request(&mut c, "GET", &url(&dir, "small.bin"), &[]);
    assert_eq!(
        head.status, 200,
        "a connection idle for less than the timeout still serves"
    );
    let t = Instant::now();
    let gone = closed_within(c.get_mut(), Duration::from_secs(5)).map(|_| t.elapsed());
    let gone = gone.expect("a kept-alive connection is still open 5 s past a 1 s idle timeout");
    assert!(
        gone >= Duration::from_millis(900),
        "closed after {gone:?}, with a 1 s idle timeout"
    );

    // 24 MiB read 256 KiB every 40 ms: about 4 s, longer than both timeouts.
    let mut d = BufReader::new(served.connect());
    send(d.get_mut(), "GET", &url(&dir, "big.bin"), &[]);
    let head = read_head(&mut d);
    assert_eq!(head.status, 200);
    let t = Instant::now();
    let mut got = Vec::with_capacity(big.len());
    let mut buf = vec![0u8; 256 << 10];
    while got.len() < big.len() {
        std::thread::sleep(Duration::from_millis(40));
        let want = buf.len().min(big.len() - got.len());
        if let Err(e) = d.read_exact(&mut buf[..want]) {
            panic!("the slow download was cut at {} of {} bytes: {e}", got.len(), big.len());
        }
        got.extend_from_slice(&buf[..want]);
    }
    assert!(
        t.elapsed() > Duration::from_secs(2),
        "the download was not slow: {:?}",
        t.elapsed()
    );
    assert!(got == big, "the slow download's bytes differ");
}

/// Past `--max-connections` the extra clients get `503` with `Retry-After` at once, while the
/// served ones go on; a slot freed is served again.
#[test]
fn past_max_connections_a_fast_503() {
    let dir = small_dir("busy");
    let served = Served::dir(&dir, &["--max-connections", "4"]);
    let path = url(&dir, "small.bin");
    let mut held: Vec<BufReader<TcpStream>> = (0..4)
        .map(|_| {
            let mut c = BufReader::new(served.connect());
            assert_eq!(request(&mut c, "GET", &path, &[]).0.status, 200);
            c
        })
        .collect();
    let extra: Vec<_> = (0..6)
        .map(|_| {
            let s = served.connect();
            let path = path.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                let mut r = BufReader::new(s);
                send(r.get_mut(), "GET", &path, &[]);
                let head = read_head(&mut r);
                (head.status, head.h("retry-after").to_string(), t.elapsed())
            })
        })
        .collect();
    for e in extra {
        let (status, retry, took) = e.join().expect("an extra client got an answer within 10 s");
        assert_eq!(status, 503, "a client past --max-connections");
        assert_eq!(retry, "1");
        assert!(took < Duration::from_secs(3), "the 503 took {took:?}");
    }
    for c in &mut held {
        let (head, body) = request(c, "GET", &path, &[]);
        assert_eq!((head.status, body.len()), (200, 1000), "a served client goes on");
    }
    drop(held.pop());
    let t = Instant::now();
    loop {
        let (head, _) = once(&served, "GET", &path, &[]);
        if head.status == 200 {
            break;
        }
        assert_eq!(head.status, 503);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "a freed slot was not served again within 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `tensorlane serve ARGS` and waits at most 20 s for it to exit; `None` when it is still
/// running (it serves).
fn exits(args: &[&str]) -> Option<(i32, String)> {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .env_remove("TENSORLANE_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return Some((status.code().unwrap_or(-1), err));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// A non-loopback `--bind` is refused without `--token` or `--public`, with a message naming
/// both; with either it serves.
#[test]
fn public_bind_needs_a_token_or_public() {
    let dir = small_dir("public");
    let d = dir.to_str().unwrap();
    for bind in ["0.0.0.0:0", "[::]:0"] {
        let (code, err) = exits(&[d, "--bind", bind]).expect("a public bind without a token is refused");
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(bind.trim_end_matches(":0")) && err.contains("--token") && err.contains("--public"),
            "the refusal names the address and both ways out: {err}"
        );
    }
    let open = Served::start(&[d, "--bind", "0.0.0.0:0", "--public"]);
    assert_eq!(once(&open, "GET", &url(&dir, "small.bin"), &[]).0.status, 200);
    let guarded = Served::start(&[d, "--bind", "0.0.0.0:0", "--token", "t0k"]);
    assert_eq!(once(&guarded, "GET", &url(&dir, "small.bin"), &[]).0.status, 401);
}

/// The bearer scheme is matched in any case; a wrong, shorter or longer token is refused.
#[test]
fn bearer_scheme_in_any_case() {
    let dir = small_dir("bearer");
    let served = Served::dir(&dir, &["--token", "s3cret"]);
    let path = url(&dir, "small.bin");
    for ok in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"] {
        assert_eq!(
            once(&served, "GET", &path, &[("Authorization", ok)]).0.status,
            200,
            "{ok}"
        );
    }
    for bad in [
        "Bearer s3cre",
        "Bearer s3crett",
        "Bearer S3CRET",
        "Basic s3cret",
        "bearers3cret",
        "",
    ] {
        assert_eq!(
            once(&served, "GET", &path, &[("Authorization", bad)]).0.status,
            401,
            "{bad:?}"
        );
    }
}

/// Error bodies name the URL path asked for, never the server's path to the file.
#[test]
fn error_bodies_show_no_server_paths() {
    let dir = small_dir("paths");
    let served = Served::dir(&dir, &[]);
    let abs = dir.canonicalize().unwrap();
    for (path, status) in [
        (url(&dir, "sub"), 404),
        (url(&dir, "nope.bin"), 404),
        (url(&dir, "%2e%2e/x"), 400),
    ] {
        let (head, body) = once(&served, "GET", &path, &[]);
        let text = String::from_utf8_lossy(&body);
        assert_eq!(head.status, status, "{path}: {text}");
        assert!(
            !text.contains(abs.to_str().unwrap()) && !text.contains(dir.to_str().unwrap()),
            "{path}: the body shows the server's path: {text}"
        );
        if status == 404 {
            assert!(text.contains(&path), "{path}: the body names the URL: {text}");
        }
    }
}

/// A file rewritten in place (same size) while its body is sent: the body is cut off (fewer bytes
/// than `Content-Length`, then the connection ends).
#[test]
fn rewritten_while_sent_is_cut_off() {
    let dir = scratch("rewrite");
    let file = dir.join("big.bin");
    let size: u64 = 64 << 20;
    std::fs::File::create(&file).unwrap().set_len(size).unwrap(); // sparse: zeros
    let served = Served::dir(&dir, &[]);
    let mut c = BufReader::new(served.connect());
    send(c.get_mut(), "GET", &url(&dir, "big.bin"), &[]);
    let head = read_head(&mut c);
    assert_eq!((head.status, head.len() as u64), (200, size));
    let mut got = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    while got < 2 << 20 {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n as u64;
    }
    // Let the server fill the socket buffers and park, then rewrite a range in place in a later
    // timestamp tick.
    std::thread::sleep(Duration::from_millis(300));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.write_all_at(&[0xAB; 4096], size - (8 << 20)).unwrap();
    }
    assert_eq!(std::fs::metadata(&file).unwrap().len(), size);
    c.get_mut().set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let end = loop {
        match c.read(&mut buf) {
            Ok(0) => break "EOF",
            Ok(n) => got += n as u64,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the body neither ended nor was cut within 20 s ({got} of {size} bytes)")
            }
            Err(_) => break "reset",
        }
        if got >= size {
            break "complete";
        }
    };
    assert!(
        got < size,
        "a body of a file rewritten while it was sent came through whole ({end}); it must be cut off"
    );
}

/// The `ETag` follows the file's identity: a same-size file put in place by a rename, or a
/// rewrite in place with its modification time put back, gets a new one (and `If-None-Match`
/// with the old one is a 200, not a 304).
#[test]
fn etag_follows_the_file_identity() {
    let dir = small_dir("etag");
    let path = url(&dir, "small.bin");
    let file = dir.join("small.bin");
    let served = Served::dir(&dir, &[]);
    let etag = || once(&served, "HEAD", &path, &[]).0.h("etag").to_string();
    let first = etag();
    assert!(first.starts_with('"'), "{first}");
    assert_eq!(etag(), first, "an unchanged file keeps its ETag");
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();

    // The same size and modification time, another inode.
    let next = dir.join("small.next");
    std::fs::write(&next, vec![7u8; 1000]).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&next)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    std::fs::rename(&next, &file).unwrap();
    let second = etag();
    assert_ne!(
        second, first,
        "a file replaced by one of the same size and mtime got the old ETag"
    );
    let (head, body) = once(&served, "GET", &path, &[("If-None-Match", &first)]);
    assert_eq!((head.status, body), (200, vec![7u8; 1000]));

    // Rewritten in place, its modification time put back: the status-change time moved.
    std::thread::sleep(Duration::from_millis(20));
    {
        let f = std::fs::File::options().write(true).open(&file).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[9u8; 10], 0).unwrap();
        f.set_modified(mtime).unwrap();
    }
    let third = etag();
    assert_ne!(
        third, second,
        "a file rewritten in place with its mtime put back kept its ETag"
    );
}

/// A client that asks for a large body and takes none of it is closed after the idle timeout:
/// it reads what the socket buffers held, then the end, well short of `Content-Length`.
#[test]
fn a_client_that_stops_reading_is_closed() {
    let dir = scratch("stall");
    let size: u64 = 48 << 20;
    std::fs::File::create(dir.join("big.bin"))
        .unwrap()
        .set_len(size)
        .unwrap();
    let served = Served::dir(&dir, &["--idle-timeout", "1s", "--max-connections", "1"]);
    let mut c = BufReader::new(served.connect());
    send(c.get_mut(), "GET", &url(&dir, "big.bin"), &[]);
    let head = read_head(&mut c);
    assert_eq!((head.status, head.len() as u64), (200, size));
    std::thread::sleep(Duration::from_secs(3));
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n as u64,
        }
        assert!(got < size, "a client that read nothing for 3 s got the whole body");
    }
    // Its slot (the only one) is free again (the permit goes a moment after the socket).
    let t = Instant::now();
    while once(&served, "HEAD", &url(&dir, "big.bin"), &[]).0.status != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the stalled client's slot was not freed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// The OpenAI-compatible API of `serve --model`, against the bundled sample model.

/// The bundled sample model (a 400-token SentencePiece vocabulary with `<s>` and `</s>`).
fn sample_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/llm/tiny-llama-Q4_K.gguf")
}

/// `tensorlane serve --model MODEL` on a free loopback port (one thread; 64 positions unless
/// `extra` says) with `extra` flags.
fn serve_model(model: &Path, extra: &[&str]) -> Served {
    let m = model.to_str().unwrap();
    let mut args = vec!["--model", m, "--bind", "127.0.0.1:0", "--threads", "1"];
    if !extra.contains(&"--context") {
        args.extend(["--context", "64"]);
    }
    args.extend_from_slice(extra);
    Served::start(&args)
}

/// Sends `method path` with `body` and `headers` (`Content-Type: application/json` unless one
/// is given) on a new connection; the answer's head and body.
fn call(served: &Served, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> (Head, Vec<u8>) {
    let mut s = BufReader::new(served.connect());
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        req += "Content-Type: application/json\r\n";
    }
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "\r\n";
    req += body;
    s.get_mut().write_all(req.as_bytes()).expect("the request is sent");
    let head = read_head(&mut s);
    let mut out = vec![0; if method == "HEAD" { 0 } else { head.len() }];
    s.read_exact(&mut out).expect("the whole body");
    (head, out)
}

/// A JSON answer's body.
fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)))
}

/// Asserts that an answer is an OpenAI error object with `status`, served as JSON.
fn assert_api_error(head: &Head, body: &[u8], status: u16, what: &str) -> serde_json::Value {
    assert_eq!(head.status, status, "{what}: {}", String::from_utf8_lossy(body));
    assert!(
        head.h("content-type").starts_with("application/json"),
        "{what}: content-type {:?}",
        head.h("content-type")
    );
    let v = json(body);
    let e = &v["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()) && e["type"].is_string(),
        "{what}: {v}"
    );
    for key in ["param", "code"] {
        assert!(e.get(key).is_some(), "{what}: no {key} in {v}");
    }
    v
}

/// Response ids are `cmpl-` / `chatcmpl-` and 24 random letters and digits: five requests with
/// the same seed get five different ids (they were the seed mixed with the clock and a heap
/// address).
#[test]
fn api_response_ids_are_random() {
    let served = serve_model(&sample_model(), &[]);
    let mut ids = std::collections::HashSet::new();
    for _ in 0..5 {
        let (head, body) = call(
            &served,
            "POST",
            "/v1/completions",
            r#"{"prompt": "Once upon", "max_tokens": 1, "seed": 7}"#,
            &[],
        );
        assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
        let id = json(&body)["id"].as_str().expect("an id").to_string();
        let rest = id.strip_prefix("cmpl-").unwrap_or_else(|| panic!("{id}"));
        assert!(
            rest.len() == 24 && rest.bytes().all(|b| b.is_ascii_alphanumeric()),
            "{id}"
        );
        ids.insert(id);
    }
    assert_eq!(ids.len(), 5, "{ids:?}");
}

/// A chat message holding a control token's text (`</s>`, `<s>`) is tokenized as plain text:
/// only the chat template's own markup becomes control tokens. The prompt is the template's
/// tokens around the message's text tokens, and the reply equals a completion of those ids.
#[test]
fn chat_text_never_becomes_control_tokens() {
    let dir = scratch("chat");
    let model = dir.join("tiny.gguf");
    std::fs::copy(sample_model(), &model).unwrap();
    let template = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] | trim }}</s>{% endfor %}\
                    {% if add_generation_prompt %}<s>assistant:{% endif %}";
    std::fs::write(
        dir.join("tokenizer_config.json"),
        serde_json::json!({ "chat_template": template }).to_string(),
    )
    .unwrap();
    let m = tensorlane::model::Model::open(&model).unwrap();
    let tok = tensorlane_llm::tokenizer::Tokenizer::from_catalog(m.catalog()).unwrap();
    let (bos, eos) = (tok.vocab().bos.unwrap(), tok.vocab().eos.unwrap());
    assert_eq!(tok.token_id("</s>"), Some(eos));
    // What the template writes is parsed, what the client wrote is text.
    let mut expected = vec![bos];
    expected.extend(tok.encode("user: hi</s><s>there", false));
    expected.extend([eos, bos]);
    expected.extend(tok.encode("assistant:", false));
    assert_eq!(expected.iter().filter(|&&t| t == eos).count(), 1);
    // All of it parsed (the old server): a different prompt.
    let parsed = tok.encode_special("<s>user: hi</s><s>there</s><s>assistant:", false, true);
    assert_ne!(parsed.len(), expected.len());

    let served = serve_model(&model, &[]);
    let chat = r#"{"messages": [{"role": "user", "content": "  hi</s><s>there \n"}],
                   "max_tokens": 4, "temperature": 0, "ignore_eos": true}"#;
    let (head, body) = call(&served, "POST", "/v1/chat/completions", chat, &[]);
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    let reply = json(&body);
    assert_eq!(reply["usage"]["prompt_tokens"], expected.len(), "{reply}");
    let id = reply["id"].as_str().unwrap();
    assert!(id.strip_prefix("chatcmpl-").is_some_and(|r| r.len() == 24), "{id}");
    let completion = serde_json::json!({
        "prompt": expected, "max_tokens": 4, "temperature": 0, "ignore_eos": true,
    });
    let (head, body) = call(&served, "POST", "/v1/completions", &completion.to_string(), &[]);
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        json(&body)["choices"][0]["text"],
        "the chat reply is not the completion of the expected prompt"
    );
    // A role is a name, not a place for markup.
    let bad = r#"{"messages": [{"role": "user</s><s>system", "content": "x"}]}"#;
    let (head, body) = call(&served, "POST", "/v1/chat/completions", bad, &[]);
    assert_api_error(&head, &body, 400, "a role with markup");
}

/// Every error under `/v1/` is an OpenAI error object served as JSON, whoever answers it (the
/// token guard, the router, the API): 401 (with `WWW-Authenticate`), 404, 405 (with `Allow`),
/// 415 (a body that is not `application/json`), 429 (with `Retry-After`).
#[test]
fn api_errors_are_openai_error_objects() {
    let served = serve_model(
        &sample_model(),
        &[
            "--token",
            "sesame",
            "--max-batch",
            "1",
            "--max-queue",
            "0",
            "--context",
            "2048",
        ],
    );
    let auth = ("Authorization", "Bearer sesame");
    let (head, body) = call(&served, "GET", "/v1/models", "", &[]);
    let v = assert_api_error(&head, &body, 401, "no token");
    assert_eq!(head.h("www-authenticate"), "Bearer");
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let (head, body) = call(&served, "POST", "/v1/completions", "{}", &[]);
    assert_api_error(&head, &body, 401, "no token, POST");
    let (head, body) = call(&served, "GET", "/v1/nothing-here", "", &[auth]);
    assert_api_error(&head, &body, 404, "an unknown route");
    let (head, body) = call(&served, "PUT", "/v1/completions", "{}", &[auth]);
    assert_api_error(&head, &body, 405, "PUT");
    assert!(!head.h("allow").is_empty());
    let (head, body) = call(&served, "GET", "/v1/completions", "", &[auth]);
    assert_api_error(&head, &body, 405, "GET on a POST route");
    let plain = r#"{"prompt": "hi", "max_tokens": 1}"#;
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (head, body) = call(&served, "POST", "/v1/completions", plain, &[auth, ("Content-Type", ct)]);
        assert_api_error(&head, &body, 415, ct);
    }
    let (head, _) = call(
        &served,
        "POST",
        "/v1/completions",
        plain,
        &[auth, ("Content-Type", "application/json; charset=utf-8")],
    );
    assert_eq!(head.status, 200);
    // The one batch slot held by a long streamed request, no queue: the next is a 429.
    let mut long = BufReader::new(served.connect());
    let req = r#"{"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": true, "stream": true}"#;
    write!(
        long.get_mut(),
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{req}",
        req.len()
    )
    .unwrap();
    assert_eq!(read_head(&mut long).status, 200);
    let mut line = String::new();
    while !line.starts_with("data: {") {
        line.clear();
        long.read_line(&mut line).expect("a streamed chunk");
    }
    let (head, body) = call(&served, "POST", "/v1/completions", plain, &[auth]);
    let v = assert_api_error(&head, &body, 429, "a full queue");
    assert_eq!(head.h("retry-after"), "1", "{v}");
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
}

/// A request head followed by only part of its body is answered 408 once `--body-timeout` has
/// passed, and the connection closed (it was held forever); a `Content-Length` over the body
/// limit is answered 413 at once, before any of the body is read.
#[test]
fn api_body_timeout_and_size() {
    let served = serve_model(&sample_model(), &["--body-timeout", "1s"]);
    let mut s = BufReader::new(served.connect());
    let started = Instant::now();
    s.get_mut()
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"prompt\":",
        )
        .unwrap();
    let head = read_head(&mut s);
    let waited = started.elapsed();
    let mut body = vec![0; head.len()];
    s.read_exact(&mut body).unwrap();
    assert_api_error(&head, &body, 408, "a partial body");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "answered after {waited:?} with a 1 s body timeout"
    );
    assert!(
        closed_within(s.get_mut(), Duration::from_secs(3)).is_some(),
        "the connection stays open after the 408"
    );

    let mut s = BufReader::new(served.connect());
    let started = Instant::now();
    s.get_mut()
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 1000000000000\r\n\r\n",
        )
        .unwrap();
    let head = read_head(&mut s);
    let waited = started.elapsed();
    let mut body = vec![0; head.len()];
    s.read_exact(&mut body).unwrap();
    assert_api_error(&head, &body, 413, "Content-Length 10^12");
    assert!(waited < Duration::from_millis(900), "413 after {waited:?}");
    // Still serving.
    let (head, _) = call(
        &served,
        "POST",
        "/v1/completions",
        r#"{"prompt": "hi", "max_tokens": 1}"#,
        &[],
    );
    assert_eq!(head.status, 200);
}

/// The context holds the prompt and every token asked for, exactly: with 64 positions, 63
/// prompt tokens and `max_tokens` 1 are served, one more either way is refused.
#[test]
fn api_context_check_is_exact() {
    let served = serve_model(&sample_model(), &[]);
    let ask = |prompt: usize, max: usize| {
        let body = serde_json::json!({"prompt": vec![5; prompt], "max_tokens": max, "temperature": 0});
        call(&served, "POST", "/v1/completions", &body.to_string(), &[])
    };
    for (prompt, max) in [(63, 1), (62, 2), (1, 63)] {
        let (head, body) = ask(prompt, max);
        assert_eq!(head.status, 200, "{prompt} + {max}: {}", String::from_utf8_lossy(&body));
        assert_eq!(json(&body)["usage"]["total_tokens"], 64);
    }
    for (prompt, max) in [(63, 2), (64, 1), (1, 64)] {
        let (head, body) = ask(prompt, max);
        let v = assert_api_error(&head, &body, 400, &format!("{prompt} + {max}"));
        assert_eq!(v["error"]["code"], "context_length_exceeded");
    }
}

/// Pages of other origins may not call `/v1/` unless `--cors-origin` admits them (403, the
/// preflight too); loopback pages may, and get their origin back; the file routes stay open to
/// every origin; `--cors-origin '*'` opens the API.
#[test]
fn api_cors_admits_loopback_pages_only_by_default() {
    let served = serve_model(&sample_model(), &[]);
    let body = r#"{"prompt": "hi", "max_tokens": 1}"#;
    let preflight = |s: &Served, origin: &str| {
        call(
            s,
            "OPTIONS",
            "/v1/completions",
            "",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "content-type, authorization"),
            ],
        )
    };
    for evil in [
        "http://evil.test",
        "https://127.0.0.1.evil.test",
        "http://localhost.evil.test:80",
        "null",
    ] {
        let (head, b) = call(&served, "POST", "/v1/completions", body, &[("Origin", evil)]);
        assert_api_error(&head, &b, 403, evil);
        assert_eq!(head.h("access-control-allow-origin"), "", "{evil}");
        assert_eq!(preflight(&served, evil).0.status, 403, "{evil}");
    }
    let own = format!("http://{}", served.addr);
    for page in [
        "http://localhost:5173",
        "http://127.0.0.1:3000",
        "http://[::1]:8000",
        "http://localhost",
        own.as_str(),
    ] {
        let (head, b) = call(&served, "POST", "/v1/completions", body, &[("Origin", page)]);
        assert_eq!(head.status, 200, "{page}: {}", String::from_utf8_lossy(&b));
        assert_eq!(head.h("access-control-allow-origin"), page);
        let (head, _) = preflight(&served, page);
        assert_eq!(head.status, 200, "{page}");
        assert_eq!(head.h("access-control-allow-origin"), page);
        assert!(
            head.h("access-control-allow-headers")
                .to_ascii_lowercase()
                .contains("content-type")
        );
    }
    // No Origin (not a browser): served, no CORS grant.
    let (head, _) = call(&served, "POST", "/v1/completions", body, &[]);
    assert_eq!((head.status, head.h("access-control-allow-origin")), (200, ""));
    // The file routes: every origin, as before.
    let (head, _) = call(&served, "GET", "/models", "", &[("Origin", "http://evil.test")]);
    assert_eq!((head.status, head.h("access-control-allow-origin")), (200, "*"));

    let listed = serve_model(
        &sample_model(),
        &[
            "--cors-origin",
            "https://app.example",
            "--cors-origin",
            "http://dev.test:*",
        ],
    );
    for ok in ["https://app.example", "http://dev.test:8080", "http://dev.test"] {
        assert_eq!(preflight(&listed, ok).0.status, 200, "{ok}");
    }
    for no in [
        "http://localhost:5173",
        "https://app.example:444",
        "http://app.example",
        "https://dev.test:1",
    ] {
        assert_eq!(preflight(&listed, no).0.status, 403, "{no}");
    }
    let open = serve_model(&sample_model(), &["--cors-origin", "*"]);
    let (head, _) = call(
        &open,
        "POST",
        "/v1/completions",
        body,
        &[("Origin", "http://evil.test")],
    );
    assert_eq!((head.status, head.h("access-control-allow-origin")), (200, "*"));
    let (code, err) = exits(&["--model", "x.gguf", "--cors-origin", "evil.test"]).expect("refused");
    assert!(code != 0 && err.contains("is not an origin"), "{code}: {err}");
}

/// `--max-connections` above what the open-file limit leaves room for is lowered to it, with a
/// warning (each connection takes a descriptor; the server would otherwise fail to accept).
#[cfg(target_os = "linux")]
#[test]
fn max_connections_held_to_the_open_file_limit() {
    let dir = small_dir("nofile");
    let cmd = format!(
        "ulimit -n 200 && exec '{BIN}' serve '{}' --bind 127.0.0.1:0 --max-connections 5000",
        dir.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &cmd])
        .env_remove("TENSORLANE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let addr = tensorlane_testkit::servers::served_addr(&mut child, "tensorlane serve under ulimit -n 200");
    let served = Served { child, addr };
    assert_eq!(once(&served, "GET", &url(&dir, "small.bin"), &[]).0.status, 200);
    let mut served = served;
    let _ = served.child.kill();
    let mut err = String::new();
    served.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(
        err.contains("--max-connections 5000 lowered to 136") && err.contains("ulimit -n"),
        "{err}"
    );
}

/// `logit_bias` is honoured (+100 on one token makes greedy decoding pick it every time, -100 on
/// the greedy choice moves it elsewhere) and checked (ids outside the vocabulary, values outside
/// [-100, 100]: 400 naming it); `tools` and `tool_choice` on /v1/completions (they are chat's),
/// the legacy `functions` and an unknown `response_format` are refused with a 400 that names
/// them, never ignored; a JSON `response_format` is honoured (cli/tests/serve_openai.rs checks
/// its replies).
#[test]
fn api_logit_bias_honoured_and_unimplemented_fields_refused() {
    let served = serve_model(&sample_model(), &[]);
    let complete = |extra: serde_json::Value| {
        let mut body = serde_json::json!({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logprobs": 1});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        call(&served, "POST", "/v1/completions", &body.to_string(), &[])
    };
    let tokens = |body: &[u8]| -> Vec<String> {
        json(body)["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    let (head, plain) = complete(serde_json::json!({}));
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&plain));
    let (head, forced) = complete(serde_json::json!({"logit_bias": {"300": 100}}));
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&forced));
    let forced = tokens(&forced);
    assert_eq!(forced.len(), 4);
    assert!(forced.iter().all(|t| *t == forced[0]), "one token, forced each time: {forced:?}");
    assert_ne!(forced, tokens(&plain), "the bias changed the text");
    for bad in [
        serde_json::json!({"logit_bias": {"999999": 5}}),
        serde_json::json!({"logit_bias": {"3": 101}}),
        serde_json::json!({"logit_bias": {"x": 1}}),
        serde_json::json!({"logit_bias": [1, 2]}),
    ] {
        let (head, body) = complete(bad.clone());
        let v = assert_api_error(&head, &body, 400, &bad.to_string());
        assert_eq!(v["error"]["param"], "logit_bias", "{v}");
    }
    let tool = serde_json::json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    for (extra, param) in [
        (serde_json::json!({"tools": tool}), "tools"),
        (serde_json::json!({"tool_choice": "required"}), "tool_choice"),
        (serde_json::json!({"functions": [{"name": "f"}]}), "functions"),
        (serde_json::json!({"response_format": {"type": "yaml"}}), "response_format"),
    ] {
        let (head, body) = complete(extra.clone());
        let v = assert_api_error(&head, &body, 400, &extra.to_string());
        assert_eq!(v["error"]["param"], param, "{v}");
    }
    let (head, body) = complete(serde_json::json!({"response_format": {"type": "json_object"}, "max_tokens": 2}));
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
    // What changes nothing is accepted: no tools, tool_choice none, a text response format.
    let (head, body) = complete(serde_json::json!({"tools": [], "tool_choice": "none", "response_format": {"type": "text"}}));
    assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
}

/// Tokenizing (and template rendering, grammar compiling) runs on the blocking pool, not on the
/// async workers: while four ~1 MB prompts are tokenized, `GET /v1/models` answers in a fraction
/// of the time one of them takes (on the async workers it waited behind them: 1.3 s).
#[test]
fn big_prompts_do_not_hold_the_async_workers() {
    let served = serve_model(&sample_model(), &[]);
    let prompt = "the tensor data model of the world ".repeat(28_000);
    let body = serde_json::json!({"prompt": prompt, "max_tokens": 1}).to_string();
    assert!(body.len() < 1 << 20, "under the 1 MiB body limit");
    // One alone: tokenized, then refused (it does not fit the 64 positions).
    let t = Instant::now();
    let (head, b) = call(&served, "POST", "/v1/completions", &body, &[]);
    let alone = t.elapsed();
    assert_api_error(&head, &b, 400, "a prompt beyond the context");
    eprintln!("one ~1 MB prompt alone: {alone:?}");
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| call(&served, "POST", "/v1/completions", &body, &[]));
        }
        std::thread::sleep(alone / 4);
        let t = Instant::now();
        let (head, _) = call(&served, "GET", "/v1/models", "", &[]);
        let models = t.elapsed();
        assert_eq!(head.status, 200);
        eprintln!("GET /v1/models beside four of them: {models:?}");
        assert!(
            models < alone / 2,
            "GET /v1/models took {models:?} while four prompts were tokenized (one alone takes {alone:?})"
        );
    });
}
