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
//! Needs tests/.venv-serve (`scripts/setup.sh` or `bash tests/python/setup_serve_venv.sh`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use tensorlane::model::Model;
use tensorlane_llm::{Options, Sampling, Session};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
const CONTEXT: usize = 128;
/// The plain model's server: long enough that a request runs for seconds (the disconnect checks).
const PLAIN_CONTEXT: usize = 4096;

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
            .args(["--threads", "2"])
            .args(args)
            .env_remove("TENSORLANE_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("tensorlane serve --model printed no URL within 60 s");
        };
        let host = line
            .trim()
            .strip_prefix("http://")
            .and_then(|r| r.split('/').next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Served {
            child,
            addr: host.parse().unwrap(),
        }
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
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
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

#[test]
fn openai_clients_against_serve_model() {
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
        .args(["run", &chat_path, "--prompt", prompt_text, "--json", "--threads", "2"])
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
