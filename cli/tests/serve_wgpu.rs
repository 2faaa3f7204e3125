//! `tensorlane serve --model M --device wgpu` (a build with the `wgpu` feature): two concurrent
//! greedy `/v1/completions` requests, decoded together on the wgpu executor, each answer the
//! same text as `tensorlane run --device wgpu` prints for that prompt. On the random-weight
//! llama Q8_0 model tests/python/llm_gen.py writes; few tokens (a pass costs about a second on
//! lavapipe).
//!
//! Runs on whatever adapter exists (Mesa lavapipe on CPU-only machines). Without an adapter the
//! test skips with a message, except under `CI=true`, where that fails. Needs
//! tests/.venv-formats (`scripts/setup.sh`).
#![cfg(feature = "wgpu")]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
const CONTEXT: &str = "64";
const TOKENS: usize = 4;

/// llm_gen.py's llama Q8_0 model.
fn model() -> String {
    let models =
        tensorlane_testkit::llm::llm_models(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve_wgpu_models"), "11");
    tensorlane_testkit::llm::llm_model(&models, "llama-Q8_0")
}

/// A `tensorlane serve` process, killed when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The JSON body of one POST to `addr` (the connection closed after the answer; a body by
/// length or chunked).
fn post(addr: SocketAddr, path: &str, body: &Value) -> Value {
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(300))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP answer");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{}", String::from_utf8_lossy(&raw));
    let mut rest = &raw[end + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").expect("a chunk size");
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16).unwrap();
            if size == 0 {
                break out;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + size]);
            rest = &rest[nl + 4 + size..];
        }
    } else {
        rest.to_vec()
    };
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)))
}

#[test]
fn serve_on_wgpu_answers_what_run_on_wgpu_prints() {
    let t = std::time::Instant::now();
    let path = model();
    let prompts = ["hello world", "the tensor data model is"];
    let mut want = Vec::new();
    for p in prompts {
        let run = Command::new(BIN)
            .args(["run", &path, "--prompt", p, "--json", "--device", "wgpu"])
            .args(["--max-new-tokens", &TOKENS.to_string(), "--context", CONTEXT])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        if !run.status.success() && stderr.contains("no adapter") {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and no wgpu adapter: {stderr}"
            );
            eprintln!("skip: {stderr}");
            return;
        }
        assert!(run.status.success(), "tensorlane run --device wgpu: {stderr}");
        let run: Value = serde_json::from_slice(&run.stdout).unwrap();
        assert!(
            run["text"].as_str().is_some_and(|t| !t.is_empty()),
            "{p:?}: no text: {run}"
        );
        want.push(run["text"].clone());
    }
    let run_s = t.elapsed().as_secs_f64();

    let mut child = Command::new(BIN)
        .args(["serve", "--model", &path, "--bind", "127.0.0.1:0", "--device", "wgpu"])
        .args(["--context", CONTEXT, "--max-batch", "2"])
        .env_remove("TENSORLANE_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let addr = tensorlane_testkit::servers::served_addr(&mut child, "tensorlane serve --model --device wgpu");
    let _served = Served(child);
    let id = Path::new(&path).file_name().unwrap().to_string_lossy().into_owned();
    // Both requests at once: they decode together.
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| {
                let body = json!({"model": id, "prompt": p, "max_tokens": TOKENS, "temperature": 0});
                s.spawn(move || post(addr, "/v1/completions", &body))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((answer, want), p) in answers.iter().zip(&want).zip(prompts) {
        assert_eq!(&answer["choices"][0]["text"], want, "{p:?}: {answer}");
        assert!(
            answer["usage"]["completion_tokens"].as_u64().is_some_and(|n| n >= 1),
            "{answer}"
        );
    }
    eprintln!(
        "serve --device wgpu: 2 concurrent completions equal tensorlane run --device wgpu (run {run_s:.1} s, serve {:.1} s)",
        t.elapsed().as_secs_f64() - run_s
    );
}
