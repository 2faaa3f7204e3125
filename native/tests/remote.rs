//! Remote sources against real servers on 127.0.0.1: moto's S3 server (SigV4 checked, files
//! uploaded by boto3), Debian's nginx (plain HTTP Range), and a fault-injecting TCP proxy of this
//! test's own in front of moto (dropped connections, 503s, slow and cut responses). Every fixture
//! of tests/data/fixtures is read remotely and compared byte for byte with the local read.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tensorlane::core::formats::Storage;
use tensorlane::core::source::ReadAt;
use tensorlane::model::Model;
use tensorlane::remote::{RemoteOptions, RemoteSource};
use tensorlane::source::Source;
use tensorlane_testkit as common;
use tensorlane_testkit::servers::{Nginx, S3Server};

fn rel_str(rel: &Path) -> String {
    rel.to_str().unwrap().replace('\\', "/")
}

/// Every tensor's bytes, through `read` and through `for_each_tensor`, which must agree; a
/// tensor stored as parts (a `.zt` sparse object) by its parts (`name/part`, through `read_part`).
fn tensor_bytes(m: &Model) -> BTreeMap<String, Vec<u8>> {
    let mut one = BTreeMap::new();
    let mut parts = BTreeMap::new();
    for t in &m.catalog().tensors {
        match &t.storage {
            Storage::Parts(p) => {
                for part in &p.parts {
                    let b = m.read_part(t, &part.name).unwrap().into_owned();
                    parts.insert(format!("{}/{}", t.name, part.name), b);
                }
            }
            _ => {
                one.insert(t.name.clone(), m.read(t).unwrap().into_owned());
            }
        }
    }
    let all: Vec<_> = m
        .catalog()
        .tensors
        .iter()
        .filter(|t| !matches!(t.storage, Storage::Parts(_)))
        .collect();
    let mut many = BTreeMap::new();
    m.for_each_tensor(&all, |t, b| {
        many.insert(t.name.clone(), b.to_vec());
        Ok(())
    })
    .unwrap();
    assert_eq!(one, many, "read and for_each_tensor disagree on {}", m.path().display());
    one.extend(parts);
    one
}

/// Opens `rel` locally and at `url` (with `opts`) and checks that both agree: the whole object's
/// bytes; as a model, the same catalog and the same bytes for every tensor, or the same refusal.
fn compare(local_dir: &Path, rel: &Path, url: &str, opts: &RemoteOptions) {
    let local = local_dir.join(rel);
    let want = std::fs::read(&local).unwrap();
    let r = RemoteSource::open(url, opts).unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(r.size(), want.len() as u64, "{url}");
    assert_eq!(r.read_vec(0, r.size()).unwrap(), want, "{url}: whole-object bytes");
    // Small reads at odd places go through the read-ahead cache.
    for at in [0u64, 7, want.len() as u64 / 3, want.len() as u64 / 2]
        .into_iter()
        .filter(|&at| at <= want.len() as u64)
    {
        let n = (want.len() as u64 - at).min(100);
        assert_eq!(
            r.read_vec(at, n).unwrap(),
            &want[at as usize..(at + n) as usize],
            "{url} at {at}"
        );
    }
    assert!(r.read_vec(want.len() as u64, 1).is_err());
    let lm = Model::open(&local);
    let rm = Model::from_source(url, Source::Remote(r));
    match (lm, rm) {
        (Ok(lm), Ok(rm)) => {
            assert_eq!(lm.catalog(), rm.catalog(), "{url}: catalog");
            assert_eq!(tensor_bytes(&lm), tensor_bytes(&rm), "{url}: tensor bytes");
        }
        (Err(le), Err(re)) => match (&le, &re) {
            (tensorlane::Error::Format(l), tensorlane::Error::Format(r)) => {
                assert_eq!(l.kind, r.kind, "{url}: local {le} / remote {re}")
            }
            _ => panic!("{url}: local {le} / remote {re}"),
        },
        (l, r) => panic!(
            "{url}: local {:?} but remote {:?}",
            l.map(|_| "ok").map_err(|e| e.to_string()),
            r.map(|_| "ok").map_err(|e| e.to_string())
        ),
    }
}

fn opts(s3: &S3Server, endpoint: &str) -> RemoteOptions {
    RemoteOptions {
        options: s3.options_via(endpoint),
        ..Default::default()
    }
}

#[test]
fn s3_fixtures_read_like_local_files() {
    let fixtures = common::data("fixtures");
    let Some(s3) = S3Server::start("models", Some((&fixtures, "fixtures"))) else {
        return;
    };
    // Small parts, so that the fixtures' tensors span several parts and runs.
    let o = RemoteOptions {
        part_size: 4096,
        concurrency: 4,
        small_read: 1024,
        ..opts(&s3, &s3.endpoint)
    };
    let all = common::files_under(&fixtures);
    assert!(all.len() > 50, "{} fixtures", all.len());
    for rel in &all {
        compare(&fixtures, rel, &s3.url(&format!("fixtures/{}", rel_str(rel))), &o);
    }
    // The defaults too, on the sets with companions.
    for rel in [
        "safetensors/sharded/model.safetensors.index.json",
        "onnx/external.onnx",
        "gguf/tiny-llama.gguf",
    ] {
        compare(
            &fixtures,
            Path::new(rel),
            &s3.url(&format!("fixtures/{rel}")),
            &opts(&s3, &s3.endpoint),
        );
    }
    // A missing shard is named.
    let e = RemoteSource::open(&s3.url("fixtures/nope.safetensors"), &o).unwrap_err();
    assert!(e.to_string().contains("no such object"), "{e}");
}

#[test]
fn s3_signatures_are_checked_and_listing_is_cheap() {
    let fixtures = common::data("fixtures");
    let Some(s3) = S3Server::start("sig", Some((&fixtures, ""))) else {
        return;
    };
    let mut bad = opts(&s3, &s3.endpoint);
    for (k, v) in &mut bad.options {
        if k == "aws_secret_access_key" {
            v.push('x');
        }
    }
    let bad = RemoteOptions { max_retries: 0, ..bad };
    let e = RemoteSource::open(&s3.url("sample.safetensors"), &bad).unwrap_err();
    assert!(
        e.to_string().contains("Signature"),
        "a wrong secret must be refused: {e}"
    );

    // Listing a model: one request per file whose header fits the first read.
    for (rel, max_requests) in [
        ("sample.safetensors", 1),
        ("gguf/tiny-llama.gguf", 3),
        ("sample.gguf", 3),
        ("safetensors/sharded/model.safetensors.index.json", 3),
    ] {
        let r = RemoteSource::open(&s3.url(rel), &opts(&s3, &s3.endpoint)).unwrap();
        let m = Model::from_source(s3.url(rel), Source::Remote(r)).unwrap();
        let c = m.remote_counters().unwrap();
        let size: u64 = m.sources().map(|(_, n)| n).sum();
        eprintln!(
            "listing {rel}: {} requests, {} bytes (files: {size} bytes)",
            c.requests(),
            c.bytes()
        );
        assert!(c.requests() <= max_requests, "{rel}: {} requests", c.requests());
        assert!(c.bytes() < 1 << 20, "{rel}: {} bytes", c.bytes());
    }
}

#[test]
fn s3_object_replaced_mid_read_is_an_error() {
    let Some(s3) = S3Server::start("replace", None) else {
        return;
    };
    let o = RemoteOptions {
        part_size: 64 << 10,
        ..opts(&s3, &s3.endpoint)
    };
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("replace")
        .with_endpoint(&s3.endpoint)
        .with_access_key_id(&s3.key_id)
        .with_secret_access_key(&s3.secret)
        .with_region("us-east-1")
        .with_allow_http(true)
        .build()
        .unwrap();
    let put = |bytes: Vec<u8>| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(object_store::ObjectStoreExt::put(
            &store,
            &object_store::path::Path::from("blob.bin"),
            bytes.into(),
        ))
        .unwrap();
    };
    let old: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let new: Vec<u8> = old.iter().map(|b| b ^ 0xff).collect();
    put(old.clone());
    let r = RemoteSource::open(&s3.url("blob.bin"), &o).unwrap();
    assert_eq!(r.read_vec(100_000, 300_000).unwrap(), &old[100_000..400_000]);
    put(new.clone());
    // The same size, other bytes: every read after the swap is refused, none returns new bytes.
    for (at, n) in [(0u64, 1_000_000u64), (500_000, 200_000), (900_000, 50)] {
        match r.read_vec(at, n) {
            Ok(b) => assert_eq!(
                b,
                &old[at as usize..(at + n) as usize],
                "cached bytes must be the old ones"
            ),
            Err(e) => assert!(
                e.to_string().contains("changed") || e.to_string().contains("replaced"),
                "{e}"
            ),
        }
    }
    let e = r.read_vec(300_000, 600_000).unwrap_err();
    assert!(e.to_string().contains("open it again"), "{e}");
    // Opened again, it reads the new version.
    let r = RemoteSource::open(&s3.url("blob.bin"), &o).unwrap();
    assert_eq!(r.read_vec(0, 1_000_000).unwrap(), new);
}

/// What the proxy does to a faulty connection.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// Closes the connection after reading the request.
    Drop,
    /// Answers 503 and closes.
    Unavailable,
    /// Forwards, but holds the response for this many milliseconds first.
    Slow(u64),
    /// Forwards the response head and part of the body, then closes (a reset mid-body).
    Cut,
}

/// A TCP proxy on 127.0.0.1 in front of `upstream`: connection `i` (from 0) gets `fault` when
/// `pick(i)`, else is piped untouched. Stops when dropped.
struct Proxy {
    port: u16,
    stop: Arc<AtomicBool>,
    faults: Arc<AtomicUsize>,
    /// Connections open now, and the most open at once.
    open: Arc<(AtomicUsize, AtomicUsize)>,
}

impl Proxy {
    fn start(upstream: u16, fault: Fault, pick: fn(usize) -> bool) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let faults = Arc::new(AtomicUsize::new(0));
        let open = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let (st, fa, op) = (stop.clone(), faults.clone(), open.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let f = pick(i).then_some(fault);
                        if f.is_some() {
                            fa.fetch_add(1, Ordering::Relaxed);
                        }
                        i += 1;
                        let op = op.clone();
                        std::thread::spawn(move || {
                            let now = op.0.fetch_add(1, Ordering::SeqCst) + 1;
                            op.1.fetch_max(now, Ordering::SeqCst);
                            serve(client, upstream, f);
                            op.0.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy {
            port,
            stop,
            faults,
            open,
        }
    }

    /// The most client connections that were open at once.
    fn peak(&self) -> usize {
        self.open.1.load(Ordering::SeqCst)
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads one request head (the requests here are GET/HEAD without bodies).
fn read_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return None,
        }
        if head.len() > 64 << 10 {
            return None;
        }
    }
    Some(head)
}

fn serve(mut client: TcpStream, upstream: u16, fault: Option<Fault>) {
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    match fault {
        Some(Fault::Drop) => {
            let _ = read_head(&mut client);
        }
        Some(Fault::Unavailable) => {
            if read_head(&mut client).is_some() {
                let _ = client
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        }
        Some(Fault::Slow(ms)) => {
            std::thread::sleep(Duration::from_millis(ms));
            pipe(client, upstream, None);
        }
        Some(Fault::Cut) => pipe(client, upstream, Some(600)),
        None => pipe(client, upstream, None),
    }
}

/// Copies both ways between `client` and a new connection to `upstream`; with `limit`, closes
/// both after that many response bytes.
fn pipe(client: TcpStream, upstream: u16, limit: Option<usize>) {
    let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let (mut c1, mut u1) = (client.try_clone().unwrap(), up.try_clone().unwrap());
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c1, &mut u1);
        let _ = u1.shutdown(std::net::Shutdown::Write);
    });
    let (mut u2, mut c2) = (up, client);
    let mut sent = 0usize;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match u2.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let n = limit.map_or(n, |l| n.min(l - sent));
        if c2.write_all(&buf[..n]).is_err() {
            break;
        }
        sent += n;
        if limit.is_some_and(|l| sent >= l) {
            break;
        }
    }
    let _ = c2.shutdown(std::net::Shutdown::Both);
    let _ = u2.shutdown(std::net::Shutdown::Both);
    let _ = t.join();
}

/// The shards of a remote index are opened at once, not one after another: behind a proxy that
/// holds every response 300 ms, the shards' first reads are in flight together (two client
/// connections open at the same time; one after another they would share one kept-alive
/// connection). The listing is the same as the local one and costs the same requests.
#[test]
fn s3_index_shards_are_opened_at_once() {
    let fixtures = common::data("fixtures");
    let Some(s3) = S3Server::start("prefetch", Some((&fixtures, ""))) else {
        return;
    };
    let upstream: u16 = s3.endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(upstream, Fault::Slow(300), |_| true);
    let rel = "safetensors/sharded/model.safetensors.index.json";
    let url = s3.url(rel);
    let o = opts(&s3, &proxy.endpoint());
    let m = Model::from_source(&url, Source::Remote(RemoteSource::open(&url, &o).unwrap())).unwrap();
    let local = Model::open(fixtures.join(rel)).unwrap();
    let names = |m: &Model| m.catalog().tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&m), names(&local));
    assert_eq!(
        m.remote_counters().unwrap().requests(),
        3,
        "the index and one read per shard"
    );
    assert!(
        proxy.peak() >= 2,
        "the two shards were opened one after another (at most {} connection open at once)",
        proxy.peak()
    );
}

#[test]
fn s3_through_faults_gives_the_right_bytes_or_a_clear_error() {
    let fixtures = common::data("fixtures");
    let Some(s3) = S3Server::start("faults", Some((&fixtures, ""))) else {
        return;
    };
    let sets = [
        "safetensors/sharded/model.safetensors.index.json",
        "gguf/tiny-llama.gguf",
        "onnx/external.onnx",
        "sample.npz",
    ];
    // One request per connection, so that faults hit requests; every third connection faulty.
    for fault in [Fault::Drop, Fault::Unavailable, Fault::Slow(300), Fault::Cut] {
        let proxy = Proxy::start(s3.port, fault, |i| i % 3 == 1);
        let mut o = RemoteOptions {
            part_size: 4096,
            concurrency: 4,
            small_read: 1024,
            retry_timeout: Duration::from_secs(60),
            ..opts(&s3, &proxy.endpoint())
        };
        o.options.push(("pool_max_idle_per_host".into(), "0".into()));
        let start = Instant::now();
        for rel in sets {
            compare(&fixtures, Path::new(rel), &s3.url(rel), &o);
        }
        eprintln!(
            "{fault:?}: {} faulty connections, all bytes right, {:.1} s",
            proxy.faults.load(Ordering::Relaxed),
            start.elapsed().as_secs_f64()
        );
        assert!(proxy.faults.load(Ordering::Relaxed) > 0, "{fault:?} never injected");
    }
    // Every connection failing: a clear error in bounded time, never a hang or wrong bytes.
    for fault in [Fault::Drop, Fault::Unavailable, Fault::Slow(5_000), Fault::Cut] {
        let proxy = Proxy::start(s3.port, fault, |_| true);
        let mut o = RemoteOptions {
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
            ..opts(&s3, &proxy.endpoint())
        };
        o.options.push(("timeout".into(), "1s".into()));
        o.options.push(("pool_max_idle_per_host".into(), "0".into()));
        let start = Instant::now();
        let e = RemoteSource::open(&s3.url("sample.safetensors"), &o).unwrap_err();
        let took = start.elapsed();
        eprintln!("{fault:?} always: {e} ({:.1} s)", took.as_secs_f64());
        assert!(took < Duration::from_secs(30), "{fault:?}: {took:?}");
        assert!(
            e.to_string().contains("sample.safetensors"),
            "{fault:?}: the error names the URL: {e}"
        );
    }
}

/// A public bucket: anonymous, unsigned S3 `GetObject`s (`skip_signature`), path-style, against a
/// server no one here wrote. nginx over `tests/data` answers `GET /fixtures/KEY` with `Range` and
/// `ETag` as S3 does for a public object, so `s3://fixtures/KEY` must read like the local file.
#[test]
fn s3_public_bucket_reads_unsigned_from_nginx() {
    let fixtures = common::data("fixtures");
    let Some(nginx) = Nginx::start(fixtures.parent().unwrap()) else {
        return;
    };
    let o = RemoteOptions {
        part_size: 4096,
        concurrency: 4,
        small_read: 1024,
        options: [
            ("aws_endpoint", nginx.base.as_str()),
            ("aws_region", "us-east-1"),
            ("aws_skip_signature", "true"),
            ("aws_virtual_hosted_style_request", "false"),
            ("allow_http", "true"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
        ..Default::default()
    };
    for rel in common::files_under(&fixtures) {
        compare(&fixtures, &rel, &format!("s3://fixtures/{}", rel_str(&rel)), &o);
    }
    let e = RemoteSource::open("s3://fixtures/nope.gguf", &o).unwrap_err();
    assert!(e.to_string().contains("nope.gguf"), "{e}");
}

#[test]
fn http_source_reads_fixtures_from_nginx() {
    let fixtures = common::data("fixtures");
    let Some(nginx) = Nginx::start(&fixtures) else {
        return;
    };
    let o = RemoteOptions {
        part_size: 4096,
        concurrency: 4,
        small_read: 1024,
        options: vec![("allow_http".into(), "true".into())],
        ..Default::default()
    };
    for rel in common::files_under(&fixtures) {
        compare(&fixtures, &rel, &format!("{}/{}", nginx.base, rel_str(&rel)), &o);
    }
    let e = RemoteSource::open(&format!("{}/nope.gguf", nginx.base), &o).unwrap_err();
    assert!(e.to_string().contains("nope.gguf"), "{e}");
}
