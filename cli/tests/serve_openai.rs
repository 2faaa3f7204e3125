//! `tensorlane serve --model`: the OpenAI-compatible API checked with the official `openai`
//! Python client (tests/python/serve_openai_check.py, in tests/.venv-serve) and, when
//! tests/serve/node_modules is installed, the `openai` npm client (tests/serve/check.mjs).
//!
//! The expectations come from the library and from `tensorlane run`: greedy completions and chat
//! replies (streamed and not) equal to `Session::generate` of the same prompt tokens and to
//! `tensorlane run --json`; `logprobs` equal to the log-softmax of `Session::logits`; seeded
//! sampling equal to a session with the same sampling. The scripts also check stop strings,
//! token-id prompts, usage, error objects (invalid JSON, unknown model, `max_tokens` beyond the
//! context, a prompt too long, a body too large, chat without a template), concurrent clients
//! (all complete or 429 past the queue), and that a client that disconnects frees its slot.
//!
//! `thirty_two_clients_for_a_while` is the load check: 32 clients on loopback for
//! `TENSORLANE_SERVE_SOAK_S` seconds (20 by default), streamed and not, some leaving mid-stream
//! or while queued; every answer is complete, well-formed and the solo greedy text, or a 429
//! error object past the queue, and afterwards every slot and queue place is free again.
//!
//! Needs tests/.venv-serve (`scripts/setup.sh` or `bash tests/python/setup_serve_venv.sh`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tensorlane::model::Model;
use tensorlane_llm::{Options, Sampling, Session};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
const CONTEXT: usize = 128;
/// The plain model's server: long enough that a request runs for seconds (the disconnect checks).
const PLAIN_CONTEXT: usize = 4096;

/// The tests that load the two cores or time things run one at a time (the disconnect checks
/// expect a freed slot within seconds; the load check keeps 32 clients busy).
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn venv_python() -> PathBuf {
    let py = root().join("tests/.venv-serve/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup.sh (or bash tests/python/setup_serve_venv.sh)",
        py.display()
    );
    py
}

/// A `tensorlane serve --model` process, killed when dropped.
struct Served {
    child: Child,
    addr: SocketAddr,
}

impl Served {
    fn start(model: &str, context: usize, args: &[&str]) -> Served {
        let mut child = Command::new(BIN)
            .args(["serve", "--model", model, "--bind", "127.0.0.1:0", "--context"])
            .arg(context.to_string())
            .args(["--threads", "2", "--cache-type", "f32"])
            .args(args)
            .env_remove("TENSORLANE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let addr = tensorlane_testkit::servers::served_addr(&mut child, "tensorlane serve --model");
        Served { child, addr }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the models once per test binary run (the tests run in parallel).
fn models() -> &'static Value {
    static MODELS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    MODELS.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve_openai_models");
        let o = Command::new(venv_python())
            .arg(root().join("tests/python/serve_models.py"))
            .arg(&out)
            .current_dir(root().join("tests/python"))
            .output()
            .expect("run tests/python/serve_models.py");
        assert!(
            o.status.success(),
            "serve_models.py: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    })
}

fn session(model: &Model) -> Session<'_> {
    Session::open(
        model,
        Options {
            context: Some(CONTEXT),
            threads: Some(2),
            // the servers below keep f32 caches too: their log-probabilities are checked against
            // these to 1e-4, and an f16 cache rounds the two paths' last-bit differences on
            cache_type: Some(tensorlane_llm::CacheType::F32),
            ..Options::default()
        },
    )
    .unwrap()
}

/// Generated ids and their text (the pieces joined, end-of-generation tokens as nothing).
fn generate(s: &mut Session<'_>, prompt: &[u32], n: usize, sampling: &Sampling) -> (Vec<u32>, String) {
    let ids: Vec<u32> = s.generate(prompt, sampling).take(n).map(|t| t.unwrap().id).collect();
    let bytes: Vec<u8> = ids
        .iter()
        .filter(|&&t| !s.tokenizer().is_eog(t))
        .flat_map(|&t| s.tokenizer().piece(t))
        .collect();
    (ids, String::from_utf8_lossy(&bytes).into_owned())
}

/// Log-softmax of a row in f64.
fn log_softmax(l: &[f32]) -> Vec<f64> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let ln: f64 = l.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
    l.iter().map(|&x| x as f64 - max - ln).collect()
}

/// Status line of one raw HTTP/1.1 request to `addr`.
fn status(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_string()
}

#[test]
fn the_token_guards_the_api() {
    let m = models();
    let path = m["models"]["llama-F32"].as_str().unwrap().to_string();
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--model",
            &path,
            "--bind",
            "127.0.0.1:0",
            "--context",
            "64",
            "--threads",
            "1",
        ])
        .env("TENSORLANE_TOKEN", "sesame")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let served = Served {
        addr: line
            .trim()
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .unwrap()
            .parse()
            .unwrap(),
        child,
    };
    let body = r#"{"prompt": "hello", "max_tokens": 2}"#;
    let auth = "Authorization: Bearer sesame\r\n";
    assert!(status(served.addr, "GET", "/v1/models", "", "").contains(" 401 "));
    assert!(status(served.addr, "POST", "/v1/completions", "", body).contains(" 401 "));
    assert!(status(served.addr, "GET", "/v1/models", auth, "").contains(" 200 "));
    assert!(status(served.addr, "POST", "/v1/completions", auth, body).contains(" 200 "));
    // POST stays refused outside /v1/.
    assert!(status(served.addr, "POST", "/models", auth, "").contains(" 405 "));
}

/// `response_format` (five JSON schemas, json_object, streamed) and `tools` (required, a named
/// function, streamed, a round trip, none, refusals) with the official `openai` client, every
/// reply validated with `jsonschema` (tests/python/serve_structured_check.py); then LangChain's
/// `ChatOpenAI` `.bind_tools` and `.with_structured_output` against the same server
/// (tests/python/serve_langchain_check.py).
#[test]
fn structured_output_and_tool_calls_with_the_openai_client() {
    let _serial = serial();
    let m = models();
    let tools_path = m["models"]["tools-F32"].as_str().unwrap().to_string();
    let chat_path = m["models"]["chat-F32"].as_str().unwrap().to_string();
    let tools = Served::start(&tools_path, 2048, &["--max-batch", "2"]);
    let chat = Served::start(&chat_path, CONTEXT, &[]);
    let (tools_url, chat_url) = (format!("http://{}", tools.addr), format!("http://{}", chat.addr));
    python_check(
        "serve_structured_check.py",
        &[&tools_url, &chat_url],
        "structured output and tools (openai, jsonschema from PyPI)",
    );
    // The same server through LangChain's ChatOpenAI (langchain-openai from PyPI, unmodified).
    python_check(
        "serve_langchain_check.py",
        &[&tools_url],
        "bind_tools and with_structured_output (langchain-openai from PyPI)",
    );
}

/// Runs `tests/python/SCRIPT ARGS…` with the serve venv; fails with its output unless it exits 0,
/// and prints its lines and `what`'s time.
fn python_check(script: &str, args: &[&str], what: &str) {
    let start = std::time::Instant::now();
    let o = Command::new(venv_python())
        .arg(root().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{what}: {:.1} s", start.elapsed().as_secs_f64());
}

#[test]
fn openai_clients_against_serve_model() {
    let _serial = serial();
    let m = models();
    let chat_path = m["models"]["chat-F32"].as_str().unwrap().to_string();
    let plain_path = m["models"]["llama-F32"].as_str().unwrap().to_string();
    let model = Model::open(&chat_path).unwrap();
    let mut s = session(&model);
    let tok = s.tokenizer().clone();
    let greedy = Sampling::default();

    // Completions: greedy, with the log-probabilities of every generated token.
    let prompt_text = "hello world";
    let prompt = tok.encode(prompt_text, true);
    let n = 12;
    let (ids, text) = generate(&mut s, &prompt, n, &greedy);
    let all: Vec<u32> = prompt.iter().chain(&ids).copied().collect();
    let logits = s.logits(&all).unwrap();
    let logprobs: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(j, &id)| {
            let lp = log_softmax(&logits[prompt.len() - 1 + j]);
            let mut top: Vec<f64> = lp.clone();
            top.sort_by(|a, b| b.total_cmp(a));
            json!({"token": lp[id as usize], "top": &top[..5]})
        })
        .collect();

    // `tensorlane run` prints the same tokens.
    let run = Command::new(BIN)
        .args(["run", &chat_path, "--prompt", prompt_text, "--json", "--threads", "2", "--cache-type", "f32"])
        .args(["--max-new-tokens", &n.to_string(), "--context", &CONTEXT.to_string()])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "tensorlane run: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let run: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(run["tokens"], json!(ids), "tensorlane run and Session::generate differ");
    assert_eq!(run["text"], json!(text));

    // Chat: the template rendered by hand (serve_models.py's), then a greedy reply.
    let rendered = "<s>[be brief]\nuser: hello there\nassistant:";
    let chat_prompt = tensorlane_llm::openai::chat_prompt(&tok, rendered);
    assert_eq!(chat_prompt[0], tok.vocab().bos.unwrap());
    assert_eq!(chat_prompt.iter().filter(|&&t| Some(t) == tok.vocab().bos).count(), 1);
    let (chat_ids, chat_text) = generate(&mut s, &chat_prompt, 10, &greedy);

    // Seeded sampling.
    let warm = Sampling {
        temperature: 0.8,
        top_p: 0.9,
        seed: 1234,
        ..Sampling::default()
    };
    let (_, seeded_text) = generate(&mut s, &prompt, n, &warm);

    // The concurrency check's prompt, greedy (every concurrent answer must be this).
    let long = tok.encode("the tensor data model", true);
    let (_, long_text) = generate(&mut s, &long, 96, &greedy);

    let expect = json!({
        "model": "chat-F32.gguf",
        "plain_model": "llama-F32.gguf",
        "context": CONTEXT,
        "plain_context": PLAIN_CONTEXT,
        "prompt": prompt_text,
        "prompt_ids": prompt,
        "max_tokens": n,
        "text": text,
        "logprobs": logprobs,
        "chat": {"system": "be brief", "user": "hello there", "prompt_tokens": chat_prompt.len(),
                 "max_tokens": 10, "ids": chat_ids, "text": chat_text},
        "seeded": {"seed": 1234, "temperature": 0.8, "top_p": 0.9, "text": seeded_text},
        "long": {"prompt": "the tensor data model", "max_tokens": 96, "text": long_text},
    });
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let expect_path = dir.join("serve_openai_expect.json");
    std::fs::write(&expect_path, serde_json::to_vec_pretty(&expect).unwrap()).unwrap();

    // max_batch 2 and max_queue 2: at most four requests in flight; a model without a chat
    // template, with one slot and no queue, for the disconnect checks.
    let chat = Served::start(&chat_path, CONTEXT, &["--max-batch", "2", "--max-queue", "2"]);
    let plain = Served::start(&plain_path, PLAIN_CONTEXT, &["--max-batch", "1", "--max-queue", "0"]);
    let urls = [format!("http://{}", chat.addr), format!("http://{}", plain.addr)];

    let start = std::time::Instant::now();
    let o = Command::new(venv_python())
        .arg(root().join("tests/python/serve_openai_check.py"))
        .args(&urls)
        .arg(&expect_path)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.status.success(),
        "serve_openai_check.py failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("openai (PyPI) checks: {:.1} s", start.elapsed().as_secs_f64());

    // The npm client, where tests/serve/node_modules is installed (scripts/setup.sh does).
    let npm = root().join("tests/serve");
    if npm.join("node_modules/openai").exists() {
        let start = std::time::Instant::now();
        let o = Command::new("node")
            .arg(npm.join("check.mjs"))
            .args(&urls)
            .arg(&expect_path)
            .output()
            .expect("node runs");
        assert!(
            o.status.success(),
            "tests/serve/check.mjs failed:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!("openai (npm) checks: {:.1} s", start.elapsed().as_secs_f64());
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tests/serve/node_modules is missing in CI: scripts/setup.sh installs it (npm ci --prefix tests/serve)"
        );
        eprintln!("tests/serve/node_modules is missing: the npm client's checks did not run");
    }
}

/// One HTTP/1.1 answer read to its end.
struct Reply {
    status: u16,
    /// Header names lowercased.
    headers: Vec<(String, String)>,
    /// The body, de-chunked.
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends a JSON POST to `addr` (the connection closed after the answer).
fn send_post(addr: SocketAddr, path: &str, body: &str) -> std::io::Result<std::net::TcpStream> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    Ok(s)
}

/// Parses a whole HTTP/1.1 answer (status line, headers, a body by length or chunked).
fn parse_reply(raw: &[u8]) -> Result<Reply, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|e| format!("headers: {e}"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        let mut body = Vec::new();
        let mut at = 0;
        loop {
            let nl = rest[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("a chunk size line without its end")?;
            let size_text = std::str::from_utf8(&rest[at..at + nl]).map_err(|e| e.to_string())?;
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("bad chunk size {size_text:?}"))?;
            at += nl + 2;
            if size == 0 {
                break;
            }
            if rest.len() < at + size + 2 || &rest[at + size..at + size + 2] != b"\r\n" {
                return Err(format!("a chunk of {size} bytes cut short (the answer is incomplete)"));
            }
            body.extend_from_slice(&rest[at..at + size]);
            at += size + 2;
        }
        body
    } else {
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .ok_or("neither chunked nor a content-length")?;
        if rest.len() != len {
            return Err(format!("content-length {len} but {} body bytes", rest.len()));
        }
        rest.to_vec()
    };
    Ok(Reply { status, headers, body })
}

/// A generation the load check asks for and the answer it must get.
struct Case {
    prompt: &'static str,
    max_tokens: usize,
    prompt_tokens: usize,
    text: String,
    generated: usize,
}

/// What one request of the load check came to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Outcome {
    Complete,
    Busy,
    LeftMidStream,
    LeftEarly,
}

/// Checks a 429's body: an OpenAI error object.
fn check_busy(r: &Reply) -> Result<Outcome, String> {
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("429 body is not JSON: {e}"))?;
    let e = &v["error"];
    if e["message"].is_string() && e["type"].is_string() && e["code"] == "rate_limit_exceeded" {
        Ok(Outcome::Busy)
    } else {
        Err(format!("429 without an error object: {v}"))
    }
}

/// One request of the load check: `mode` 0 leaves once the first token arrived, 1 leaves right
/// after sending, 2-3 wait for the whole answer, others stream it.
fn load_request(addr: SocketAddr, case: &Case, mode: usize) -> Result<Outcome, String> {
    use std::io::Read;
    let stream = mode == 0 || mode >= 4;
    let body =
        json!({"prompt": case.prompt, "max_tokens": case.max_tokens, "temperature": 0, "stream": stream}).to_string();
    let mut s = send_post(addr, "/v1/completions", &body).map_err(|e| format!("connect/send: {e}"))?;
    if mode == 1 {
        return Ok(Outcome::LeftEarly);
    }
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if mode == 0 && raw.starts_with(b"HTTP/1.1 200") && raw.windows(7).any(|w| w == b"data: {") {
            return Ok(Outcome::LeftMidStream); // dropping the socket leaves mid-stream
        }
    }
    let r = parse_reply(&raw)?;
    match r.status {
        429 => return check_busy(&r),
        200 => {}
        s => return Err(format!("status {s}: {}", String::from_utf8_lossy(&r.body))),
    }
    let bad = |what: String| Err(format!("{what} (prompt {:?})", case.prompt));
    if !stream {
        let v: Value = serde_json::from_slice(&r.body).map_err(|e| format!("body is not JSON: {e}"))?;
        let c = &v["choices"][0];
        let want_finish = if case.generated < case.max_tokens {
            "stop"
        } else {
            "length"
        };
        if v["object"] != "text_completion" || c["text"] != case.text.as_str() || c["finish_reason"] != want_finish {
            return bad(format!(
                "answer {v} is not the solo greedy {:?} ({want_finish})",
                case.text
            ));
        }
        let u = &v["usage"];
        if u["prompt_tokens"] != case.prompt_tokens || u["completion_tokens"] != case.generated {
            return bad(format!("usage {u}"));
        }
        return Ok(Outcome::Complete);
    }
    if !r
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        return bad(format!("streamed with content-type {:?}", r.header("content-type")));
    }
    let text = String::from_utf8(r.body).map_err(|e| format!("events are not UTF-8: {e}"))?;
    let events: Vec<&str> = text
        .split("\n\n")
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.starts_with(':'))
        .collect();
    let Some((last, chunks)) = events.split_last() else {
        return bad("no events".into());
    };
    if *last != "data: [DONE]" {
        return bad(format!("the stream ends with {last:?}, not data: [DONE]"));
    }
    let (mut got, mut id, mut finish) = (String::new(), None, None);
    for e in chunks {
        let v: Value = e
            .strip_prefix("data: ")
            .and_then(|d| serde_json::from_str(d).ok())
            .ok_or_else(|| format!("event {e:?} is not data: JSON"))?;
        if finish.is_some() {
            return bad(format!("an event after the finish: {v}"));
        }
        if v["object"] != "text_completion" || id.get_or_insert_with(|| v["id"].clone()) != &v["id"] {
            return bad(format!("chunk {v} (object, or an id other than the first chunk's)"));
        }
        let c = &v["choices"][0];
        got.push_str(c["text"].as_str().ok_or_else(|| format!("chunk without text: {v}"))?);
        if !c["finish_reason"].is_null() {
            finish = Some(c["finish_reason"].clone());
        }
    }
    let want_finish = if case.generated < case.max_tokens {
        "stop"
    } else {
        "length"
    };
    if got != case.text || finish != Some(json!(want_finish)) {
        return bad(format!(
            "streamed {got:?} ({finish:?}), not the solo greedy {:?} ({want_finish})",
            case.text
        ));
    }
    Ok(Outcome::Complete)
}

#[test]
fn thirty_two_clients_for_a_while() {
    let _serial = serial();
    let secs: f64 = match std::env::var("TENSORLANE_SERVE_SOAK_S") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("TENSORLANE_SERVE_SOAK_S={s:?}: give seconds, e.g. 20")),
        Err(_) => 20.0,
    };
    const CLIENTS: usize = 32;
    const MAX_BATCH: usize = 4;
    const MAX_QUEUE: usize = 8;
    let m = models();
    let path = m["models"]["llama-F32"].as_str().unwrap().to_string();
    let model = Model::open(&path).unwrap();
    let mut s = session(&model);
    let tok = s.tokenizer().clone();
    let cases: Vec<Case> = [("hello world", 6), ("the tensor data model", 14), ("a", 24)]
        .into_iter()
        .map(|(prompt, max_tokens)| {
            let ids = tok.encode(prompt, true);
            let (ids_out, text) = generate(&mut s, &ids, max_tokens, &Sampling::default());
            Case {
                prompt,
                max_tokens,
                prompt_tokens: ids.len(),
                text,
                generated: ids_out.len(),
            }
        })
        .collect();
    let cases = Arc::new(cases);
    let served = Served::start(
        &path,
        CONTEXT,
        &[
            "--max-batch",
            &MAX_BATCH.to_string(),
            "--max-queue",
            &MAX_QUEUE.to_string(),
        ],
    );
    let addr = served.addr;

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (cases, barrier) = (cases.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut out: Vec<(Outcome, Option<String>)> = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let case = &cases[(c + i) % cases.len()];
                    match load_request(addr, case, (c * 7 + i * 3) % 10) {
                        Ok(o) => {
                            if o == Outcome::Busy {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            out.push((o, None));
                        }
                        Err(e) => out.push((Outcome::Complete, Some(format!("client {c}, request {i}: {e}")))),
                    }
                    i += 1;
                }
                out
            })
        })
        .collect();
    let mut tally = std::collections::HashMap::<Outcome, usize>::new();
    let mut failures = Vec::new();
    for t in clients {
        for (o, failure) in t.join().expect("a client thread panicked") {
            match failure {
                Some(f) => failures.push(f),
                None => *tally.entry(o).or_default() += 1,
            }
        }
    }
    let ran = start.elapsed().as_secs_f64();
    assert!(
        failures.is_empty(),
        "{} bad answers, the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let n = |o| tally.get(&o).copied().unwrap_or(0);
    eprintln!(
        "{CLIENTS} clients for {ran:.1} s: {} complete, {} answered 429, {} left mid-stream, {} left right after sending",
        n(Outcome::Complete),
        n(Outcome::Busy),
        n(Outcome::LeftMidStream),
        n(Outcome::LeftEarly)
    );
    assert!(n(Outcome::Complete) >= CLIENTS, "too few complete answers: {tally:?}");
    assert!(
        n(Outcome::Busy) > 0,
        "32 clients against 4 slots and 8 queue places got no 429: {tally:?}"
    );
    assert!(n(Outcome::LeftMidStream) > 0, "no client left mid-stream: {tally:?}");

    // Every place is free again (the clients that left hold none): max_batch + max_queue
    // requests at once all run, within a few seconds of the last client.
    let retry_until = Instant::now() + Duration::from_secs(10);
    loop {
        let burst: Vec<_> = (0..MAX_BATCH + MAX_QUEUE)
            .map(|i| {
                let cases = cases.clone();
                std::thread::spawn(move || load_request(addr, &cases[i % cases.len()], 2))
            })
            .collect();
        let results: Vec<_> = burst.into_iter().map(|t| t.join().unwrap()).collect();
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            panic!("after the load: {e}");
        }
        if results.iter().all(|r| *r == Ok(Outcome::Complete)) {
            break;
        }
        assert!(
            Instant::now() < retry_until,
            "10 s after the load, {} of {} requests at once still got 429: a place was not freed",
            results.iter().filter(|r| **r == Ok(Outcome::Busy)).count(),
            MAX_BATCH + MAX_QUEUE
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
