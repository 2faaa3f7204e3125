//! `tensorlane serve` as a real process on 127.0.0.1 (a free port): Range and conditional requests
//! checked with `curl`, path traversal and symlinks out of the root refused, the bearer token,
//! `/models` against the fixtures' manifest, `/tensors/` packets decoded and compared with the
//! local read, the bundled sample and a clean stop on SIGINT, and a bounded load test (64
//! concurrent keep-alive clients for a few seconds, every byte checked, zero errors).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_core::formats::ElementType;
use tensorlane_core::wire::{self, Packet};
use tensorlane_testkit as common;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

/// A `tensorlane serve` process, killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    /// Starts `tensorlane serve ARGS --bind 127.0.0.1:0 --web ROOT` and waits (at most 60 s) for
    /// the URL it prints.
    fn start(args: &[&str], env: &[(&str, &str)]) -> Served {
        let root = common::root();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .args(args)
            .args(["--bind", "127.0.0.1:0", "--web"])
            .arg(&root)
            .env_remove("TENSORLANE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("the binary starts");
        let addr = common::servers::served_addr(&mut child, "tensorlane serve");
        Served { child, addr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh scratch folder of its own for each call (tests and curl calls run in parallel).
fn scratch(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    common::live_dir(&format!("{tag}-{n}"))
}

/// A curl answer: status, lower-case headers, body.
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    fn h(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// Runs `curl -s --path-as-is ARGS URL` and parses what it wrote.
fn curl(args: &[&str], url: &str) -> Answer {
    let dir = scratch("serve-curl");
    let (hf, bf) = (dir.join("headers"), dir.join("body"));
    let out = Command::new("curl")
        .args(["-s", "--path-as-is", "--max-time", "30", "-D"])
        .arg(&hf)
        .arg("-o")
        .arg(&bf)
        .args(args)
        .arg(url)
        .output()
        .expect("curl runs (apt install curl)");
    assert!(
        out.status.success(),
        "curl {args:?} {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read_to_string(&hf).unwrap();
    let body = std::fs::read(&bf).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    // The last block of headers (after any 1xx).
    let block = head.trim_end().rsplit("\r\n\r\n").next().unwrap();
    let mut lines = block.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer { status, headers, body }
}

/// A keep-alive HTTP/1.1 client over std's TcpStream (the load test and the packet checks).
struct Client {
    r: BufReader<TcpStream>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client { r: BufReader::new(s) }
    }

    /// GET `path` with extra header lines; (status, headers, body).
    fn get(&mut self, path: &str, extra: &str) -> std::io::Result<(u16, HashMap<String, String>, Vec<u8>)> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n");
        self.r.get_mut().write_all(req.as_bytes())?;
        let mut status_line = String::new();
        self.r.read_line(&mut status_line)?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
        let mut headers = HashMap::new();
        loop {
            let mut l = String::new();
            self.r.read_line(&mut l)?;
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let n: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other("no content-length"))?;
        let mut body = vec![0; n];
        self.r.read_exact(&mut body)?;
        Ok((status, headers, body))
    }
}

/// A folder with `data.bin` (10 000 bytes of a known pattern) and a symlink pointing out of it.
fn range_dir() -> (PathBuf, Vec<u8>) {
    let dir = scratch("serve-range");
    let served = dir.join("served");
    std::fs::create_dir_all(served.join("sub")).unwrap();
    let data: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(served.join("data.bin"), &data).unwrap();
    std::fs::write(dir.join("secret.txt"), b"outside the root").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), served.join("out-link")).unwrap();
    std::os::unix::fs::symlink(dir.join("served/data.bin"), served.join("sub/in-link")).unwrap();
    // Relative symlinks: one staying inside the root, one leading out of it.
    std::os::unix::fs::symlink("../data.bin", served.join("sub/rel-in-link")).unwrap();
    std::os::unix::fs::symlink("../../secret.txt", served.join("sub/rel-out-link")).unwrap();
    // A FIFO: opening it for reading must not wait for a writer.
    let fifo = Command::new("mkfifo").arg(served.join("fifo")).status().unwrap();
    assert!(fifo.success(), "mkfifo");
    (served, data)
}

#[test]
fn ranges_and_conditions_with_curl() {
    let (dir, data) = range_dir();
    let s = Served::start(&[dir.to_str().unwrap()], &[]);
    let u = s.url("/files/served/data.bin");

    let full = curl(&[], &u);
    assert_eq!(full.status, 200);
    assert_eq!(full.body, data);
    assert_eq!(full.h("content-length"), "10000");
    assert_eq!(full.h("accept-ranges"), "bytes");
    let etag = full.h("etag").to_string();
    let modified = full.h("last-modified").to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "a strong ETag: {etag}");
    assert!(!modified.is_empty());

    let cases: [(&str, u16, &str, std::ops::Range<usize>); 7] = [
        ("bytes=100-199", 206, "bytes 100-199/10000", 100..200),
        ("bytes=-500", 206, "bytes 9500-9999/10000", 9500..10_000),
        ("bytes=-20000", 206, "bytes 0-9999/10000", 0..10_000),
        ("bytes=9000-", 206, "bytes 9000-9999/10000", 9000..10_000),
        ("bytes=9990-20000", 206, "bytes 9990-9999/10000", 9990..10_000),
        ("bytes=0-0", 206, "bytes 0-0/10000", 0..1),
        // Several ranges: the whole file (documented).
        ("bytes=0-1,5-6", 200, "", 0..10_000),
    ];
    for (range, status, content_range, want) in cases {
        let a = curl(&["-H", &format!("Range: {range}")], &u);
        assert_eq!(a.status, status, "{range}");
        assert_eq!(a.h("content-range"), content_range, "{range}");
        assert_eq!(a.body, &data[want.clone()], "{range}");
        assert_eq!(a.h("content-length"), want.len().to_string(), "{range}");
    }
    for past in ["bytes=10000-", "bytes=20000-20010", "bytes=-0"] {
        let a = curl(&["-H", &format!("Range: {past}")], &u);
        assert_eq!(a.status, 416, "{past}");
        assert_eq!(a.h("content-range"), "bytes */10000", "{past}");
        assert!(a.body.is_empty());
    }
    // A malformed Range is ignored.
    assert_eq!(curl(&["-H", "Range: bytes=5-2"], &u).status, 200);

    // If-Range: a stale ETag sends the whole file; the current one (or the date) the range.
    let stale = curl(&["-H", "Range: bytes=0-9", "-H", "If-Range: \"0-0\""], &u);
    assert_eq!((stale.status, stale.body.len()), (200, 10_000));
    let fresh = curl(&["-H", "Range: bytes=0-9", "-H", &format!("If-Range: {etag}")], &u);
    assert_eq!((fresh.status, &fresh.body[..]), (206, &data[..10]));
    let by_date = curl(&["-H", "Range: bytes=0-9", "-H", &format!("If-Range: {modified}")], &u);
    assert_eq!(by_date.status, 206);
    let weak = curl(&["-H", "Range: bytes=0-9", "-H", &format!("If-Range: W/{etag}")], &u);
    assert_eq!(weak.status, 200, "If-Range compares strongly");

    // If-None-Match / If-Modified-Since: 304 with the validators and no body.
    for h in [
        format!("If-None-Match: {etag}"),
        format!("If-None-Match: \"x\", W/{etag}"),
        "If-None-Match: *".to_string(),
        format!("If-Modified-Since: {modified}"),
    ] {
        let a = curl(&["-H", &h], &u);
        assert_eq!(a.status, 304, "{h}");
        assert_eq!(a.h("etag"), etag);
        assert!(a.body.is_empty());
    }
    assert_eq!(curl(&["-H", "If-None-Match: \"other\""], &u).status, 200);
    assert_eq!(curl(&["-H", "If-Match: \"other\""], &u).status, 412);
    assert_eq!(curl(&["-H", &format!("If-Match: {etag}")], &u).status, 200);

    // HEAD: the length, no body.
    let head = curl(&["-I"], &u);
    assert_eq!((head.status, head.h("content-length")), (200, "10000"));
    // (curl -I writes the headers, not a body, to -o.)
    assert!(!head.body.windows(16).any(|w| w == &data[..16]));

    // CORS: a preflight for a Range request, and the headers a page may read.
    let pre = curl(
        &[
            "-X",
            "OPTIONS",
            "-H",
            "Origin: http://example.test",
            "-H",
            "Access-Control-Request-Method: GET",
            "-H",
            "Access-Control-Request-Headers: range, if-range, authorization",
        ],
        &u,
    );
    assert_eq!(pre.status, 200);
    assert_eq!(pre.h("access-control-allow-origin"), "*");
    let allowed = pre.h("access-control-allow-headers").to_ascii_lowercase();
    for h in ["range", "if-range", "authorization"] {
        assert!(allowed.contains(h), "preflight allows {h}: {allowed}");
    }
    assert!(pre.h("access-control-allow-methods").contains("GET"));
    let cors = curl(&["-H", "Origin: http://example.test", "-H", "Range: bytes=0-3"], &u);
    assert_eq!(cors.h("access-control-allow-origin"), "*");
    let exposed = cors.h("access-control-expose-headers").to_ascii_lowercase();
    for h in ["content-range", "content-length", "etag", "accept-ranges"] {
        assert!(exposed.contains(h), "exposes {h}: {exposed}");
    }

    // Read-only.
    assert_eq!(curl(&["-X", "POST", "-d", "x"], &u).status, 405);
    assert_eq!(curl(&["-X", "PUT", "-d", "x"], &u).status, 405);
    assert_eq!(curl(&["-X", "DELETE"], &u).status, 405);
}

#[test]
fn traversal_and_symlinks_refused() {
    let (dir, data) = range_dir();
    let s = Served::start(&[dir.to_str().unwrap()], &[]);
    for bad in [
        "/files/served/../secret.txt",
        "/files/served/%2e%2e/secret.txt",
        "/files/served/%2E%2E%2Fsecret.txt",
        "/files/served/sub/..%2f..%2fsecret.txt",
        "/files/served/..%5csecret.txt",
        "/web-demo/../Cargo.toml",
        "/web-demo/%2e%2e/Cargo.toml",
        "/tests/data/%2e%2e/%2e%2e/Cargo.toml",
    ] {
        let a = curl(&[], &s.url(bad));
        assert_eq!(a.status, 400, "{bad} refused");
        assert!(!String::from_utf8_lossy(&a.body).contains("outside the root"), "{bad}");
    }
    // A symlink out of the root is not served; one inside it is.
    let out = curl(&[], &s.url("/files/served/out-link"));
    assert_eq!(out.status, 404);
    assert!(!String::from_utf8_lossy(&out.body).contains("outside the root"));
    let inside = curl(&[], &s.url("/files/served/sub/in-link"));
    assert_eq!((inside.status, inside.body), (200, data.clone()));
    assert_eq!(curl(&[], &s.url("/files/served/sub/rel-out-link")).status, 404);
    let rel = curl(&["-H", "Range: bytes=10-19"], &s.url("/files/served/sub/rel-in-link"));
    assert_eq!((rel.status, &rel.body[..]), (206, &data[10..20]));
    // Neither a folder nor a FIFO is a file (and the FIFO does not hang the request).
    assert_eq!(curl(&[], &s.url("/files/served/sub")).status, 404);
    assert_eq!(curl(&["--max-time", "5"], &s.url("/files/served/fifo")).status, 404);
    // Only the inspector's folders of the checkout are served.
    for hidden in [
        "/Cargo.toml",
        "/target/",
        "/.git/HEAD",
        "/cli/src/main.rs",
        "/files/nope/x",
    ] {
        assert_eq!(curl(&[], &s.url(hidden)).status, 404, "{hidden}");
    }
    assert_eq!(curl(&[], &s.url("/web-demo/")).status, 200);
    assert_eq!(curl(&[], &s.url("/js/browser.js")).status, 200);
    // The wasm build exists once scripts/build-js.sh has run (after the Rust tests in a fresh clone).
    if common::root().join("wasm/pkg/tensorlane_wasm.js").is_file() {
        assert_eq!(curl(&[], &s.url("/wasm/pkg/tensorlane_wasm.js")).status, 200);
    }
    assert_eq!(curl(&[], &s.url("/tests/data/fixtures/manifest.json")).status, 200);
}

#[test]
fn token_guards_the_data() {
    let (dir, _) = range_dir();
    for (args, env) in [
        (vec![dir.to_str().unwrap(), "--token", "s3cret"], vec![]),
        (vec![dir.to_str().unwrap()], vec![("TENSORLANE_TOKEN", "s3cret")]),
    ] {
        let s = Served::start(&args, &env);
        for p in [
            "/models",
            "/files/served/data.bin",
            "/tests/data/fixtures/manifest.json",
        ] {
            let no = curl(&[], &s.url(p));
            assert_eq!(no.status, 401, "{p}");
            assert_eq!(no.h("www-authenticate"), "Bearer");
            assert_eq!(curl(&["-H", "Authorization: Bearer wrong"], &s.url(p)).status, 401);
            assert_eq!(
                curl(&["-H", "Authorization: Bearer s3cret"], &s.url(p)).status,
                200,
                "{p}"
            );
            assert_eq!(curl(&[], &s.url(&format!("{p}?token=s3cret"))).status, 200, "{p}");
        }
        // The inspector's code needs no token; a preflight carries none.
        assert_eq!(curl(&[], &s.url("/web-demo/")).status, 200);
        let pre = curl(
            &[
                "-X",
                "OPTIONS",
                "-H",
                "Origin: http://x.test",
                "-H",
                "Access-Control-Request-Method: GET",
            ],
            &s.url("/models"),
        );
        assert_eq!(pre.status, 200);
    }
}

fn fixtures_manifest() -> Value {
    serde_json::from_slice(&std::fs::read(common::data("fixtures").join("manifest.json")).unwrap()).unwrap()
}

/// The manifest's foreign model formats (`.zt` files: `zt_models_list_their_tensors_and_parts`).
const MODEL_FORMATS: [&str; 8] = [
    "safetensors",
    "safetensors-index",
    "gguf",
    "pt",
    "npy",
    "npz",
    "onnx",
    "hdf5",
];

#[test]
fn models_match_the_manifest_and_tensors_the_local_read() {
    let fixtures = common::data("fixtures");
    let s = Served::start(&[fixtures.to_str().unwrap()], &[]);
    let listed = curl(&[], &s.url("/models"));
    assert_eq!(listed.status, 200);
    assert_eq!(listed.h("content-type"), "application/json");
    let v: Value = serde_json::from_slice(&listed.body).unwrap();
    let models: HashMap<&str, &Value> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m))
        .collect();
    let errors: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    let manifest = fixtures_manifest();
    let mut client = Client::connect(s.addr);
    let (mut checked_files, mut checked_tensors, mut ranges) = (0, 0, 0);
    for f in manifest["files"].as_array().unwrap() {
        let format = f["format"].as_str().unwrap();
        if !MODEL_FORMATS.contains(&format) {
            continue;
        }
        let id = format!("fixtures/{}", f["file"].as_str().unwrap());
        match f["expect"].as_str().unwrap() {
            "reject" => {
                assert!(
                    errors.contains(&id.as_str()),
                    "{id}: a file the manifest rejects is listed as an error"
                );
                continue;
            }
            "read" => {}
            _ => continue,
        }
        let m = models.get(id.as_str()).unwrap_or_else(|| panic!("{id} is not listed"));
        let want_format = if format == "pt" {
            m["format"].as_str().unwrap()
        } else {
            format
        };
        assert_eq!(m["format"], want_format, "{id}");
        let url = m["url"].as_str().unwrap();
        assert_eq!(url, format!("/files/{}", id.replace(' ', "%20")), "{id}");
        let local = Model::open(fixtures.join(f["file"].as_str().unwrap())).unwrap();
        let listed_tensors: HashMap<&str, &Value> = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t))
            .collect();
        for want in f["tensors"].as_array().unwrap() {
            let name = want["name"].as_str().unwrap();
            let t = listed_tensors
                .get(name)
                .unwrap_or_else(|| panic!("{id}: {name} not listed"));
            assert_eq!(t["dtype"], want["dtype"], "{id}: {name}");
            assert_eq!(t["shape"], want["shape"], "{id}: {name}");
            assert_eq!(t["nbytes"], want["nbytes"], "{id}: {name}");
            let sha = want["sha256"].as_str().unwrap();
            // The byte range of a zero-copy tensor holds exactly its bytes.
            let r = &t["byte_range"];
            let (a, b) = (r[0].as_u64().unwrap_or(0), r[1].as_u64().unwrap_or(0));
            if t["zero_copy"] == true && b > a {
                let src = t["url"].as_str().unwrap();
                let (st, _, body) = client.get(src, &format!("Range: bytes={a}-{}\r\n", b - 1)).unwrap();
                assert_eq!(st, 206, "{id}: {name}");
                assert_eq!(common::sha256_hex(&body), sha, "{id}: {name}: bytes at byte_range");
                ranges += 1;
            }
            // The packet: decoded, it is the local read (dequantized for ggml blocks).
            let info = local.catalog().tensors.iter().find(|x| x.name == name).unwrap();
            let packet = t["packet"].as_str().unwrap();
            let (status, _, body) = if matches!(info.ty, ElementType::Ggml(_)) {
                let (st, _, msg) = client.get(packet, "").unwrap();
                assert_eq!(st, 422, "{id}: {name}: ggml blocks need ?dequantize");
                assert!(String::from_utf8_lossy(&msg).contains("dequantize"));
                client.get(&format!("{packet}?dequantize=f32&integrity=1"), "").unwrap()
            } else {
                client.get(&format!("{packet}?integrity=1"), "").unwrap()
            };
            let tenso_dtype = !t["dtype"].as_str().unwrap().starts_with("float8") && t["dtype"] != "float4_e2m1fn";
            if !tenso_dtype {
                assert_eq!(status, 422, "{id}: {name}: no Tenso dtype");
                continue;
            }
            assert_eq!(status, 200, "{id}: {name}: {}", String::from_utf8_lossy(&body));
            let p = wire::decode(&body).unwrap_or_else(|e| panic!("{id}: {name}: {e}"));
            let Packet::Dense(d) = p else {
                panic!("{id}: {name}: not dense")
            };
            assert!(body.len() > d.data().len() + 8, "an integrity footer was asked for");
            assert_eq!(d.shape(), info.shape.as_slice(), "{id}: {name}");
            if let ElementType::Ggml(_) = info.ty {
                let want: Vec<u8> = local
                    .dequantize(info)
                    .unwrap()
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                assert_eq!(d.data(), &want[..], "{id}: {name}: dequantized");
            } else {
                assert_eq!(common::sha256_hex(d.data()), sha, "{id}: {name}: packet body");
                assert_eq!(d.data(), &local.read(info).unwrap()[..], "{id}: {name}");
            }
            checked_tensors += 1;
        }
        checked_files += 1;
    }
    eprintln!("/models: {checked_files} model files, {checked_tensors} packets, {ranges} byte ranges checked");
    assert!(checked_files >= 30, "{checked_files} model files checked");
    assert!(
        checked_tensors >= 100 && ranges >= 50,
        "{checked_tensors} packets, {ranges} ranges"
    );

    // f16 dequantization, a missing tensor, a bad option.
    let gguf = "/tensors/fixtures/sample.gguf";
    let local = Model::open(fixtures.join("sample.gguf")).unwrap();
    let q = local
        .catalog()
        .tensors
        .iter()
        .find(|t| matches!(t.ty, ElementType::Ggml(g) if g.name().starts_with('Q')))
        .expect("sample.gguf has a quantized tensor");
    let (st, _, body) = client.get(&format!("{gguf}/{}?dequantize=f16", q.name), "").unwrap();
    assert_eq!(st, 200);
    let Packet::Dense(d) = wire::decode(&body).unwrap() else {
        panic!()
    };
    assert_eq!(d.dtype(), tensorlane_core::DType::F16);
    let want: Vec<u8> = local
        .dequantize(q)
        .unwrap()
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
        .collect();
    assert_eq!(d.data(), &want[..]);
    assert_eq!(client.get(&format!("{gguf}/no.such.tensor"), "").unwrap().0, 404);
    assert_eq!(
        client.get(&format!("{gguf}/{}?dequantize=q8", q.name), "").unwrap().0,
        400
    );
    assert_eq!(client.get("/tensors/fixtures/no-such.gguf/x", "").unwrap().0, 404);
}

#[test]
fn bundled_sample_and_clean_stop() {
    let s = Served::start(&[], &[]);
    let index = curl(&[], &s.url("/"));
    assert_eq!(index.status, 307);
    assert_eq!(index.h("location"), "/web-demo/");
    // A shared link keeps its query through the redirects (issue 26).
    let shared = curl(&[], &s.url("/?url=%2Ffiles%2Fx&tensor=w"));
    assert_eq!(shared.h("location"), "/web-demo/?url=%2Ffiles%2Fx&tensor=w");
    let folder = curl(&[], &s.url("/web-demo?url=%2Ffiles%2Fx"));
    assert_eq!(folder.h("location"), "/web-demo/?url=%2Ffiles%2Fx");
    let v: Value = serde_json::from_slice(&curl(&[], &s.url("/models")).body).unwrap();
    let m = &v["models"][0];
    assert_eq!(m["id"], "sample/sample.safetensors");
    let names: Vec<&str> = m["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // `weight` is the sample packet's ramp.
    let w = curl(&[], &s.url("/tensors/sample/sample.safetensors/weight"));
    let Packet::Dense(d) = wire::decode(&w.body).unwrap() else {
        panic!()
    };
    let want: Vec<f32> = (0..64 * 32).map(|i| ((i % 97) as f32 - 48.0) / 64.0).collect();
    assert_eq!(d.to_values::<f32>().unwrap(), want);
    // The whole sample packet is there too.
    let tenso = curl(&[], &s.url("/files/sample/sample.tenso"));
    assert!(matches!(wire::decode(&tenso.body).unwrap(), Packet::Bundle(_)));

    // SIGINT: the server stops by itself, exits 0 and removes the sample.
    let mut s = s;
    let sample_dir = std::env::temp_dir().join(format!("tensorlane-serve-{}", s.child.id()));
    assert!(sample_dir.exists());
    let killed = Command::new("kill")
        .args(["-INT", &s.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no stop within 20 s of SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(!sample_dir.exists(), "the sample folder is removed");
    assert!(TcpStream::connect(s.addr).is_err(), "nothing listens any more");
}

#[test]
fn load_64_clients_zero_errors() {
    let dir = scratch("serve-load");
    let file: Vec<u8> = (0..4u32 << 20).map(|i| (i ^ (i >> 11)) as u8).collect();
    std::fs::write(dir.join("big.bin"), &file).unwrap();
    let s = Served::start(&[dir.to_str().unwrap(), "--max-connections", "128"], &[]);
    let name = dir.file_name().unwrap().to_str().unwrap().to_string();
    let path = format!("/files/{name}/big.bin");
    let file = std::sync::Arc::new(file);
    let deadline = Instant::now() + Duration::from_secs(6);
    let workers: Vec<_> = (0..64u64)
        .map(|k| {
            let (file, path, addr) = (file.clone(), path.clone(), s.addr);
            std::thread::spawn(move || -> Result<(u64, u64), String> {
                let mut c = Client::connect(addr);
                let (mut n, mut bytes) = (0u64, 0u64);
                let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                while Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let len = 1 + (x % (256 << 10)) as usize;
                    let start = ((x >> 20) as usize) % (file.len() - len);
                    let (st, h, body) = c
                        .get(&path, &format!("Range: bytes={start}-{}\r\n", start + len - 1))
                        .map_err(|e| format!("client {k}, request {n}: {e}"))?;
                    if st != 206 || body != file[start..start + len] || !h.contains_key("content-range") {
                        return Err(format!("client {k}, request {n}: status {st}, {} bytes", body.len()));
                    }
                    n += 1;
                    bytes += len as u64;
                }
                Ok((n, bytes))
            })
        })
        .collect();
    let mut errors = Vec::new();
    let (mut total, mut bytes) = (0, 0);
    for w in workers {
        match w.join().unwrap() {
            Ok((n, b)) => {
                total += n;
                bytes += b;
            }
            Err(e) => errors.push(e),
        }
    }
    assert!(errors.is_empty(), "{} errors, first: {}", errors.len(), errors[0]);
    assert!(total >= 64, "every client got answers ({total} requests)");
    eprintln!(
        "load: 64 clients, {total} range requests, {} MiB, zero errors",
        bytes >> 20
    );
    drop(s);
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// Issue 15: a served file truncated in the middle of a large ranged download ends that download
/// short (the server reads with `pread`, never from a map, so no SIGBUS), and the same process
/// goes on serving the file's new version correctly.
#[test]
fn truncated_mid_download_server_survives() {
    let dir = scratch("serve-trunc");
    let big: Vec<u8> = (0..(48u32 << 20)).map(|i| (i ^ (i >> 9)) as u8).collect();
    let file = dir.join("big.bin");
    std::fs::write(&file, &big).unwrap();
    let mut s = Served::start(&[dir.to_str().unwrap()], &[]);
    let name = dir.file_name().unwrap().to_str().unwrap().to_string();
    let path = format!("/files/{name}/big.bin");

    // A ranged request for 40 MiB, read slowly enough that the truncation lands mid-body.
    let (start, len) = (4usize << 20, 40usize << 20);
    let mut sock = TcpStream::connect(s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes={start}-{}\r\n\r\n",
        start + len - 1
    );
    sock.write_all(req.as_bytes()).unwrap();
    let mut r = BufReader::new(sock);
    let mut head = String::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if l.trim_end().is_empty() {
            break;
        }
        head.push_str(&l);
    }
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains(&format!("content-length: {len}")),
        "{head}"
    );
    let mut got = vec![0u8; 1 << 20];
    r.read_exact(&mut got).unwrap();
    assert_eq!(got, big[start..start + (1 << 20)]);

    // Cut the file to 6 MiB while most of the body is still to come, then drain what is left.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(6 << 20)
        .unwrap();
    let mut rest = Vec::new();
    let end = r.read_to_end(&mut rest);
    let total = got.len() + rest.len();
    assert!(
        total < len,
        "the cut response is short ({total} of {len} bytes; read ended with {end:?})"
    );
    // What did arrive is the file's bytes, never anything else.
    got.extend_from_slice(&rest);
    assert_eq!(
        got,
        big[start..start + total],
        "the bytes sent before the cut are the file's"
    );

    // The process is alive and answers the next requests from the file as it is now.
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "the server process is still running"
    );
    let now = curl(&["-H", "Range: bytes=0-99"], &s.url(&path));
    assert_eq!(now.status, 206);
    assert_eq!(now.h("content-range"), format!("bytes 0-99/{}", 6 << 20));
    assert_eq!(now.body, big[..100]);
    let past = curl(&["-H", "Range: bytes=10485760-"], &s.url(&path));
    assert_eq!(past.status, 416, "the old length is gone");
    let whole = curl(&[], &s.url(&path));
    assert_eq!((whole.status, whole.body.len()), (200, 6 << 20));
    assert_eq!(whole.body, big[..6 << 20]);
    assert!(
        s.child.try_wait().unwrap().is_none(),
        "the server process is still running"
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `.zt` files are models too: `/models` lists every `.zt` of the fixtures; a dense tensor's packet
/// is its local read; a tensor stored as parts (`zt.sparse_csr/1`, ...) lists each part's byte
/// range, which holds the part's stored bytes, and its packet is refused with 422, saying why.
#[test]
fn zt_models_list_their_tensors_and_parts() {
    let fixtures = common::data("fixtures");
    let s = Served::start(&[fixtures.to_str().unwrap()], &[]);
    let v: Value = serde_json::from_slice(&curl(&[], &s.url("/models")).body).unwrap();
    let mut client = Client::connect(s.addr);
    let (mut files, mut packets, mut parts) = (0, 0, 0);
    for m in v["models"].as_array().unwrap() {
        if m["format"] != "zt" {
            continue;
        }
        let rel = m["id"].as_str().unwrap().strip_prefix("fixtures/").unwrap();
        let local = Model::open(fixtures.join(rel)).unwrap();
        for t in m["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            let info = local.catalog().get(name).unwrap_or_else(|| panic!("{rel}: {name}"));
            let packet = t["packet"].as_str().unwrap();
            if let Some(listed) = t["parts"].as_array() {
                let (st, _, msg) = client.get(packet, "").unwrap();
                assert_eq!(st, 422, "{rel}: {name}: a parts tensor is no one packet");
                assert!(String::from_utf8_lossy(&msg).contains("parts"), "{rel}: {name}");
                for p in listed {
                    let r = &p["byte_range"];
                    let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                    let (st, _, body) = client
                        .get(p["url"].as_str().unwrap(), &format!("Range: bytes={a}-{}\r\n", b - 1))
                        .unwrap();
                    assert_eq!(st, 206, "{rel}: {name}");
                    if p["storage"] == "range" {
                        let want = local.read_part(info, p["name"].as_str().unwrap()).unwrap();
                        assert_eq!(body, want.as_ref(), "{rel}: {name}: part {}", p["name"]);
                    }
                    parts += 1;
                }
                continue;
            }
            let (status, _, body) = client.get(packet, "").unwrap();
            if status == 422 {
                continue; // ggml blocks without ?dequantize, float8: as for every format
            }
            assert_eq!(status, 200, "{rel}: {name}: {}", String::from_utf8_lossy(&body));
            let Packet::Dense(d) = wire::decode(&body).unwrap() else {
                panic!("{rel}: {name}: not dense")
            };
            assert_eq!(d.data(), &local.read(info).unwrap()[..], "{rel}: {name}");
            packets += 1;
        }
        files += 1;
    }
    eprintln!("/models: {files} .zt files, {packets} packets, {parts} parts checked");
    assert!(
        files >= 5 && packets >= 10 && parts >= 3,
        "{files} files, {packets} packets, {parts} parts"
    );
}
