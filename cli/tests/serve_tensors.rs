//! `tensorlane serve` under tight process limits (issue 25), as a real process on 127.0.0.1:
//! `/models` over 300 models under `ulimit -n 128` (a listing opens, reads and closes each file),
//! 8 parallel `/tensors/` of a 128 MiB tensor under `ulimit -v` 2 GB (packets are streamed: head,
//! body read in pieces, footer), `--max-tensor-bytes` and `--max-memory` refusals (413), packets
//! byte-identical to the encoder's for every fixture tensor, and WebSocket close codes (1009 for
//! a message over the limit, 1002 for a protocol error) seen by a raw client.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_core::formats::ElementType;
use tensorlane_core::wire::{self, EncodeOptions, Packet};
use tensorlane_core::{DType, Tensor};
use tensorlane_testkit as common;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

/// A `tensorlane serve` process started by `sh -c 'ulimit ...; exec tensorlane serve ...'`,
/// killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    /// Starts the server with `ulimit` options `limits` (e.g. `-n 128`) and `args`, and waits (at
    /// most 60 s) for the URL it prints.
    fn start(limits: &str, args: &[&str]) -> Served {
        let mut script = format!("ulimit {limits} && exec \"$0\" serve --bind 127.0.0.1:0");
        for (i, _) in args.iter().enumerate() {
            script.push_str(&format!(" \"${}\"", i + 1));
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg(BIN)
            .args(args)
            .env_remove("TENSORLANE_TOKEN")
            // glibc's per-thread arenas reserve 64 MiB of address space each, up to 8 per core:
            // two keep an address-space limit meaning the same on a 2-core and a 64-core machine.
            .env("MALLOC_ARENA_MAX", "2")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh starts");
        let addr = tensorlane_testkit::servers::served_addr(&mut child, "tensorlane serve");
        Served { child, addr }
    }

    /// Whether the server process is still running.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, lower-case headers, and the body (read whole unless a `body` sink took it).
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// Sends `GET path` on a new connection and reads the head; the body (of `Content-Length`
/// bytes) goes to `sink` in pieces. An error: the connection failed or the body was short.
fn get_with(addr: SocketAddr, path: &str, sink: &mut dyn FnMut(&[u8])) -> std::io::Result<Answer> {
    let s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut r = BufReader::with_capacity(1 << 20, s);
    r.get_mut()
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = HashMap::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l)?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: u64 = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("{path}: no Content-Length ({status})")))?;
    let mut left = len;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = r.read(&mut buf[..(left.min(1 << 20) as usize)])?;
        if n == 0 {
            return Err(std::io::Error::other(format!(
                "{path}: the body ended {left} bytes short of {len}"
            )));
        }
        sink(&buf[..n]);
        left -= n as u64;
    }
    Ok(Answer {
        status,
        headers,
        body: Vec::new(),
    })
}

/// [`get_with`], the body kept.
fn get(addr: SocketAddr, path: &str) -> Answer {
    let mut body = Vec::new();
    let mut a = get_with(addr, path, &mut |p| body.extend_from_slice(p)).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    a.body = body;
    a
}

/// A fresh scratch folder for `tag`.
fn scratch(tag: &str) -> PathBuf {
    common::live_dir(&format!("serve-tensors-{tag}"))
}

/// Writes a safetensors file of one tensor `name` (`dtype`, `shape`) whose data is `data` (or,
/// when `data` is `None`, `len` bytes of a sparse hole with `marks` written at their offsets).
fn safetensors(
    path: &Path,
    name: &str,
    dtype: &str,
    shape: &[u64],
    len: u64,
    data: Option<&[u8]>,
    marks: &[(u64, &[u8])],
) {
    let header = serde_json::json!({ name: { "dtype": dtype, "shape": shape, "data_offsets": [0, len] } }).to_string();
    let mut h = header.into_bytes();
    while !(h.len() + 8).is_multiple_of(8) {
        h.push(b' ');
    }
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&h).unwrap();
    let base = 8 + h.len() as u64;
    match data {
        Some(d) => f.write_all(d).unwrap(),
        None => f.set_len(base + len).unwrap(),
    }
    for (at, bytes) in marks {
        use std::os::unix::fs::FileExt;
        f.write_all_at(bytes, base + at).unwrap();
    }
}

/// 300 models under `ulimit -n 128`: every listing lists all of them (no "Too many open files"),
/// and files and packets are still served after several listings (the descriptors of a listing
/// are closed, and the cache of open models is bounded).
#[test]
fn models_listing_closes_its_files_under_a_low_descriptor_limit() {
    let dir = scratch("fds");
    let models = dir.join("many");
    std::fs::create_dir_all(&models).unwrap();
    for i in 0..300u32 {
        let data: Vec<u8> = (0..16u32).flat_map(|k| (i * 16 + k).to_le_bytes()).collect();
        safetensors(
            &models.join(format!("m{i:03}.safetensors")),
            "w",
            "U32",
            &[16],
            64,
            Some(&data),
            &[],
        );
    }
    let mut s = Served::start("-n 128", &[models.to_str().unwrap()]);
    for round in 0..4 {
        let a = get(s.addr, "/models");
        assert_eq!(a.status, 200, "listing {round}");
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["errors"], serde_json::json!([]), "listing {round}: {}", v["errors"]);
        assert_eq!(v["models"].as_array().unwrap().len(), 300, "listing {round}");
        // Packets from many models in between (each model is opened and cached, the cache bounded).
        for i in (round * 75..round * 75 + 75).step_by(3) {
            let p = get(s.addr, &format!("/tensors/many/m{i:03}.safetensors/w"));
            assert_eq!(
                p.status,
                200,
                "/tensors of model {i}: {}",
                String::from_utf8_lossy(&p.body)
            );
            let d = wire::decode(&p.body).unwrap();
            let Packet::Dense(t) = d else { panic!("a dense packet") };
            let file = std::fs::read(models.join(format!("m{i:03}.safetensors"))).unwrap();
            assert_eq!(t.data(), &file[file.len() - 64..], "/tensors of model {i}");
        }
    }
    let f = get(s.addr, "/files/many/m299.safetensors");
    assert_eq!(f.status, 200);
    assert_eq!(f.body, std::fs::read(models.join("m299.safetensors")).unwrap());
    assert!(s.alive());
    let _ = std::fs::remove_dir_all(dir);
}

/// 8 clients fetch a 128 MiB tensor at once from a server under `ulimit -v` 2 GB (it peaks near
/// 1 GB of address space with them, in a debug build): every packet arrives whole and byte-exact,
/// and the server lives. Built whole (about twice the tensor per request: 2 GiB for 8) the server
/// aborted on a failed allocation.
#[test]
fn parallel_large_tensors_stream_under_an_address_space_limit() {
    const LEN: u64 = 128 << 20;
    let dir = scratch("big");
    let marks: [(u64, &[u8]); 3] = [(0, b"first..."), (LEN / 2 + 4, b"middle.."), (LEN - 8, b"...last.")];
    let path = dir.join("big.safetensors");
    safetensors(&path, "big", "F32", &[LEN / 4], LEN, None, &marks);
    // What the encoder makes of the same tensor: the expected packet.
    let local = Model::open(&path).unwrap();
    let info = &local.catalog().tensors[0];
    let bytes = local.read(info).unwrap();
    let t = Tensor::new(DType::F32, info.shape.clone(), &bytes[..]).unwrap();
    // (Integrity footers are checked byte for byte on the fixtures:
    // streamed_packets_are_the_encoders_bytes.)
    let want = wire::encode_parts(&t, &EncodeOptions::default()).unwrap();
    let mut s = Served::start("-v 2000000", &[dir.to_str().unwrap()]);
    let addr = s.addr;
    let mount = dir.file_name().unwrap().to_string_lossy().into_owned();
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let parts = &want;
                let mount = &mount;
                sc.spawn(move || {
                    let url = format!("/tensors/{mount}/big.safetensors/big");
                    let whole = parts.slices();
                    let (mut k, mut at) = (0usize, 0usize);
                    let mut same = true;
                    let mut got = 0u64;
                    let a = get_with(addr, &url, &mut |mut p: &[u8]| {
                        got += p.len() as u64;
                        while !p.is_empty() && k < 3 {
                            let n = (whole[k].len() - at).min(p.len());
                            same &= p[..n] == whole[k][at..at + n];
                            p = &p[n..];
                            at += n;
                            if at == whole[k].len() {
                                k += 1;
                                at = 0;
                            }
                        }
                        same &= p.is_empty();
                    })
                    .unwrap_or_else(|e| panic!("client {i}: {e}"));
                    assert_eq!(a.status, 200, "client {i}");
                    assert_eq!(got, parts.len() as u64, "client {i}: length");
                    assert!(same, "client {i}: the packet differs from the encoder's");
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert!(s.alive(), "the server died");
    drop(s);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `.npy` header for `descr` and `shape` (version 1.0, padded to 64 bytes).
fn npy_header(descr: &str, fortran: bool, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let order = if fortran { "True" } else { "False" };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {tuple}, }}");
    while !(10 + dict.len() + 1).is_multiple_of(64) {
        dict.push(' ');
    }
    dict.push('\n');
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h
}

/// `--max-tensor-bytes 1MiB`: a 4 MiB tensor is still streamed by `/tensors/` and `/ws` (never
/// held whole; over `/ws` one message in frames of 256 KiB), but one whose storage must be read
/// whole (a Fortran-order `.npy`, whose elements are gathered in memory) is refused with 413 and
/// a message naming the option, over HTTP and WebSocket alike. `--max-memory 1MiB`: the same
/// tensor could never be held, 413 naming that option; streamed ones still pass.
#[test]
fn whole_tensors_over_the_limits_are_refused_with_413() {
    let dir = scratch("limits");
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    safetensors(
        &dir.join("four.safetensors"),
        "w",
        "U8",
        &[4 << 20],
        4 << 20,
        Some(&data),
        &[],
    );
    let mut npy = npy_header("<f4", true, &[1024, 1024]);
    npy.extend_from_slice(&data);
    std::fs::write(dir.join("fortran.npy"), &npy).unwrap();
    let mount = dir.file_name().unwrap().to_string_lossy().into_owned();
    let s = Served::start("-n 1024", &["--max-tensor-bytes", "1MiB", dir.to_str().unwrap()]);
    let streamed = get(s.addr, &format!("/tensors/{mount}/four.safetensors/w"));
    assert_eq!(streamed.status, 200);
    assert_eq!(streamed.headers["content-length"], streamed.body.len().to_string());
    let Packet::Dense(t) = wire::decode(&streamed.body).unwrap() else {
        panic!("dense")
    };
    assert_eq!(t.data(), &data[..]);
    let whole = get(s.addr, &format!("/tensors/{mount}/fortran.npy/array"));
    let msg = String::from_utf8_lossy(&whole.body);
    assert_eq!(whole.status, 413, "{msg}");
    assert!(
        msg.contains("--max-tensor-bytes") && msg.contains("fortran.npy"),
        "{msg}"
    );
    let mut ws = Ws::connect(s.addr);
    let ask = |model: &str, name: &str| {
        serde_json::json!({ "model": format!("{mount}/{model}"), "tensors": [name] }).to_string()
    };
    ws.send_text(&ask("four.safetensors", "w"));
    let v: Value = serde_json::from_slice(&ws.read().1).unwrap();
    assert_eq!(v["bytes"], streamed.body.len(), "{v}");
    let (op, packet, frames) = ws.message();
    assert_eq!(op, 2);
    assert_eq!(packet, streamed.body, "the WebSocket packet is the HTTP one");
    assert!(frames >= 16, "{frames} frames: streamed in pieces");
    ws.read(); // done
    ws.send_text(&ask("fortran.npy", "array"));
    let v: Value = serde_json::from_slice(&ws.read().1).unwrap();
    assert_eq!(v["status"], 413, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--max-tensor-bytes"), "{v}");
    drop(s);
    let s = Served::start("-n 1024", &["--max-memory", "1MiB", dir.to_str().unwrap()]);
    let mut ws = Ws::connect(s.addr);
    ws.send_text(&ask("fortran.npy", "array"));
    let v: Value = serde_json::from_slice(&ws.read().1).unwrap();
    assert_eq!(v["status"], 413, "{v}");
    assert!(v["error"].as_str().unwrap().contains("--max-memory"), "{v}");
    ws.read(); // done
    ws.send_text(&ask("four.safetensors", "w"));
    ws.read();
    assert_eq!(ws.read().1, streamed.body);
    // Streamed, the same tensor fits in the same budget.
    assert_eq!(get(s.addr, &format!("/tensors/{mount}/four.safetensors/w")).status, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(dir);
}

/// Every fixture tensor's packet (and ggml tensors' dequantized packets, f32 and f16, with and
/// without integrity) is byte for byte what the encoder makes of the local read.
#[test]
fn streamed_packets_are_the_encoders_bytes() {
    let fixtures = common::data("fixtures");
    let s = Served::start("-n 1024", &[fixtures.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&get(s.addr, "/models").body).unwrap();
    let mut checked = 0;
    for m in v["models"].as_array().unwrap() {
        let id = m["id"].as_str().unwrap();
        let local = Model::open(fixtures.join(id.strip_prefix("fixtures/").unwrap())).unwrap();
        for (info, listed) in local.catalog().tensors.iter().zip(m["tensors"].as_array().unwrap()) {
            let url = listed["packet"].as_str().unwrap();
            let bodies: Vec<(String, DType, Vec<u8>)> = match info.ty {
                ElementType::Ggml(_) => {
                    let Ok(values) = local.dequantize(info) else { continue };
                    let f16: Vec<u8> = values
                        .iter()
                        .flat_map(|&x| half::f16::from_f32(x).to_bits().to_le_bytes())
                        .collect();
                    let f32: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
                    vec![
                        ("dequantize=f32".into(), DType::F32, f32),
                        ("dequantize=f16".into(), DType::F16, f16),
                    ]
                }
                ElementType::Dense(d) => match local.read(info) {
                    Ok(b) => vec![(String::new(), d, b.into_owned())],
                    Err(_) => continue,
                },
                _ => continue,
            };
            for (query, dtype, body) in bodies {
                for integrity in [false, true] {
                    let Ok(t) = Tensor::new(dtype, info.shape.clone(), &body[..]) else {
                        continue;
                    };
                    let want = wire::encode(
                        &Packet::Dense(t),
                        &EncodeOptions {
                            integrity,
                            ..EncodeOptions::default()
                        },
                    )
                    .unwrap();
                    let q = [query.as_str(), if integrity { "integrity=1" } else { "" }]
                        .into_iter()
                        .filter(|x| !x.is_empty())
                        .collect::<Vec<_>>()
                        .join("&");
                    let a = get(s.addr, &format!("{url}?{q}"));
                    assert_eq!(a.status, 200, "{url}?{q}: {}", String::from_utf8_lossy(&a.body));
                    assert!(a.body == want, "{url}?{q}: not the encoder's bytes");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} packets checked");
}

/// A raw WebSocket client: frames written and read by hand, so that a test can send what no
/// library would (a frame with a reserved bit set) and see the close frame the server answers.
struct Ws {
    s: TcpStream,
}

impl Ws {
    fn connect(addr: SocketAddr) -> Ws {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Ws { s }
    }

    /// Writes one masked frame: `first` is the FIN/RSV/opcode byte.
    fn frame(&mut self, first: u8, payload: &[u8]) {
        let mut f = vec![first];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n < 65536 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let key = [0x12, 0x34, 0x56, 0x78];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        // The server may close before it has read it all (a message over the limit).
        let _ = self.s.write_all(&f);
    }

    fn send_text(&mut self, text: &str) {
        self.frame(0x81, text.as_bytes());
    }

    /// The next frame: (FIN, opcode, payload).
    fn frame_in(&mut self) -> (bool, u8, Vec<u8>) {
        let mut h = [0u8; 2];
        self.s.read_exact(&mut h).expect("a frame from the server");
        let len = match h[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.s.read_exact(&mut b).unwrap();
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                self.s.read_exact(&mut b).unwrap();
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        let mut p = vec![0u8; len as usize];
        self.s.read_exact(&mut p).unwrap();
        (h[0] & 0x80 != 0, h[0] & 0x0f, p)
    }

    /// The next message, its frames joined: (opcode, payload, frames); a close frame is returned
    /// as it comes, even in the middle of a message.
    fn message(&mut self) -> (u8, Vec<u8>, usize) {
        let (mut fin, op, mut all) = self.frame_in();
        let mut frames = 1;
        while !fin {
            let (f, o, p) = self.frame_in();
            if o == 8 {
                return (8, p, frames + 1);
            }
            assert_eq!(o, 0, "a continuation frame");
            all.extend_from_slice(&p);
            fin = f;
            frames += 1;
        }
        (op, all, frames)
    }

    /// The next message: (opcode, payload).
    fn read(&mut self) -> (u8, Vec<u8>) {
        let (op, p, _) = self.message();
        (op, p)
    }

    /// Reads frames until a close frame: its status code.
    fn close_code(&mut self) -> u16 {
        for _ in 0..16 {
            let (op, p) = self.read();
            if op == 8 {
                assert!(p.len() >= 2, "a close frame with a status code");
                return u16::from_be_bytes([p[0], p[1]]);
            }
        }
        panic!("no close frame in 16 frames");
    }
}

/// A message over the 1 MiB limit is answered with close code 1009 (message too big), a frame
/// with a reserved bit set with 1002 (protocol error): a close frame, not a dropped connection.
/// A normal request on a new connection still works.
#[test]
fn websocket_errors_get_close_codes() {
    let fixtures = common::data("fixtures");
    let s = Served::start("-n 1024", &[fixtures.to_str().unwrap()]);
    let mut ws = Ws::connect(s.addr);
    ws.send_text(&" ".repeat((1 << 20) + 1));
    assert_eq!(ws.close_code(), 1009);
    let mut ws = Ws::connect(s.addr);
    ws.frame(0x80 | 0x40 | 0x1, b"{}");
    assert_eq!(ws.close_code(), 1002);
    let mut ws = Ws::connect(s.addr);
    ws.send_text(r#"{"model": "fixtures/sample.safetensors", "tensors": ["no.such"]}"#);
    let v: Value = serde_json::from_slice(&ws.read().1).unwrap();
    assert_eq!(v["status"], 404, "{v}");
}

/// A file rewritten in place (same size) while its tensor is streamed: the response is cut short
/// (the connection closes before `Content-Length` bytes), never a clean 200 of a mix of both
/// versions. The client pauses after 1 MiB, so the server has read at most a few MiB of 64.
#[test]
fn a_file_rewritten_while_its_tensor_is_streamed_cuts_the_response_short() {
    const LEN: u64 = 64 << 20;
    let dir = scratch("rewrite");
    let path = dir.join("t.safetensors");
    safetensors(&path, "t", "U8", &[LEN], LEN, None, &[(0, b"before..")]);
    let mount = dir.file_name().unwrap().to_string_lossy().into_owned();
    let s = Served::start("-n 1024", &[dir.to_str().unwrap()]);
    let (mut got, mut rewritten) = (0u64, false);
    let r = get_with(s.addr, &format!("/tensors/{mount}/t.safetensors/t"), &mut |p| {
        got += p.len() as u64;
        if !rewritten && got >= 1 << 20 {
            rewritten = true;
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(b"changed.", std::fs::metadata(&path).unwrap().len() - 8)
                .unwrap();
        }
    });
    assert!(rewritten);
    match r {
        Err(e) => assert!(
            e.to_string().contains("short") || e.kind() == std::io::ErrorKind::ConnectionReset,
            "{e}"
        ),
        Ok(a) => panic!("a clean {} of {got} bytes from a file rewritten meanwhile", a.status),
    }
    assert!(got < LEN, "{got} bytes");
    // Asked again, the new version is served whole.
    let again = get(s.addr, &format!("/tensors/{mount}/t.safetensors/t"));
    assert_eq!(again.status, 200);
    assert_eq!(&again.body[again.body.len() - 8..], b"changed.");
    // Over /ws: the message is cut off by a close frame 1011 whose reason names no server path.
    let mut ws = Ws::connect(s.addr);
    ws.send_text(&serde_json::json!({ "model": format!("{mount}/t.safetensors"), "tensors": ["t"] }).to_string());
    ws.read(); // {index, bytes}
    let (mut read, mut n) = (0usize, 0);
    loop {
        let (_, op, p) = ws.frame_in();
        if op == 8 {
            let code = u16::from_be_bytes([p[0], p[1]]);
            let reason = String::from_utf8_lossy(&p[2..]).into_owned();
            assert_eq!(code, 1011, "{reason}");
            assert!(!reason.contains(dir.to_str().unwrap()), "{reason}");
            break;
        }
        read += p.len();
        n += 1;
        if n == 4 {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(b"again...", 8 + 64).unwrap();
        }
        assert!(
            (read as u64) < LEN,
            "the whole message arrived from a file rewritten meanwhile"
        );
    }
    drop(s);
    let _ = std::fs::remove_dir_all(dir);
}

/// `--max-memory 2MiB` holds one streamed packet at a time (each takes 1.5 MiB of it): while a
/// client that stopped reading holds the budget, a second request waits (no answer yet, no
/// error), and it is answered 200 as soon as the first one is read to its end.
#[test]
fn a_request_over_the_memory_budget_waits_for_it() {
    const LEN: u64 = 64 << 20;
    let dir = scratch("budget");
    safetensors(&dir.join("big.safetensors"), "t", "U8", &[LEN], LEN, None, &[]);
    let small: Vec<u8> = (0..64u8).collect();
    safetensors(&dir.join("small.safetensors"), "s", "U8", &[64], 64, Some(&small), &[]);
    let mount = dir.file_name().unwrap().to_string_lossy().into_owned();
    let s = Served::start("-n 1024", &["--max-memory", "2MiB", dir.to_str().unwrap()]);
    // The first client reads 1 MiB of its packet, then stops reading.
    let mut first = TcpStream::connect(s.addr).unwrap();
    first.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        first,
        "GET /tensors/{mount}/big.safetensors/t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < 1 << 20 {
        got += first.read(&mut buf).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let (addr, url) = (s.addr, format!("/tensors/{mount}/small.safetensors/s"));
    std::thread::spawn(move || {
        let _ = tx.send(get(addr, &url));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "the second request was answered while the first held the budget"
    );
    // The first one read to its end gives its share back.
    let mut rest = 0u64;
    loop {
        let n = first.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        rest += n as u64;
    }
    assert!(got as u64 + rest > LEN, "the first packet arrived whole");
    let second = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("answered once the budget was free");
    assert_eq!(second.status, 200);
    let Packet::Dense(t) = wire::decode(&second.body).unwrap() else {
        panic!("dense")
    };
    assert_eq!(t.data(), &small[..]);
    drop(s);
    let _ = std::fs::remove_dir_all(dir);
}
