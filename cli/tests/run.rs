//! `tensorlane run`: the tokens it prints are the library's (tensorlane-llm, itself checked against
//! llama.cpp in llm/tests/llama_reference.rs), `--json`'s shape, the summary, and bad input (an
//! unsupported architecture, a missing or misshapen tensor, an unknown token id, a prompt longer
//! than the context, a device not implemented, a budget below the plan's minimum): a message
//! naming what was wrong and the tool's exit code, never a panic; under a budget the same tokens,
//! with the plan's bytes streamed per token.
//!
//! The models are tests/python/llm_gen.py's (gguf-py in tests/.venv-formats: `scripts/setup.sh`);
//! without the venv the test fails saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_llm::{Options, Sampling, Session};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn models() -> &'static Value {
    static MODELS: OnceLock<Value> = OnceLock::new();
    MODELS.get_or_init(|| {
        let py = root().join("tests/.venv-formats/bin/python");
        assert!(
            py.exists(),
            "{} is missing: run scripts/setup.sh (or bash tests/python/setup_formats_venv.sh)",
            py.display()
        );
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_run_models");
        let o = Command::new(py)
            .arg(root().join("tests/python/llm_gen.py"))
            .arg(&out)
            .arg("11")
            .output()
            .expect("run tests/python/llm_gen.py");
        assert!(o.status.success(), "llm_gen.py: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    })
}

fn model(name: &str) -> String {
    let m = models();
    m["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .map(|x| x["path"].as_str().unwrap().to_string())
        .or_else(|| m["broken"][name].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no model {name}"))
}

fn run(args: &[&str]) -> Output {
    let o = Command::new(BIN)
        .arg("run")
        .args(args)
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "tensorlane run panicked: {err}");
    o
}

#[test]
fn generates_the_library_tokens() {
    for name in ["llama-Q8_0", "qwen2-F16", "llama-Q4_K"] {
        let path = model(name);
        let o = run(&[
            &path,
            "--tokens",
            "1,300,301,302",
            "--max-new-tokens",
            "12",
            "--threads",
            "2",
            "--json",
        ]);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["prompt_tokens"], serde_json::json!([1, 300, 301, 302]));

        let m = Model::open(&path).unwrap();
        let mut s = Session::open(&m, Options::default()).unwrap();
        let lib: Vec<_> = s
            .generate(&[1, 300, 301, 302], &Sampling::default())
            .take(12)
            .map(Result::unwrap)
            .collect();
        let want: Vec<u32> = lib.iter().map(|t| t.id).collect();
        let pieces: Vec<u8> = lib.iter().flat_map(|t| t.piece.clone()).collect();
        let got: Vec<u32> = v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got, want, "{name}");
        assert_eq!(v["text"].as_str().unwrap(), String::from_utf8_lossy(&pieces), "{name}");
        let st = &v["stats"];
        assert_eq!(st["prefill_tokens"], 4);
        assert_eq!(st["decode_tokens"].as_u64().unwrap() as usize, got.len() - 1);
        assert!(st["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
        assert!(st["weight_bytes"].as_u64().unwrap() > 100_000);

        // Text mode prints the same bytes, then the summary on stderr.
        let o = run(&[&path, "--tokens", "1 300 301 302", "--max-new-tokens", "12"]);
        assert!(o.status.success());
        // (the bytes of the pieces as they are: random weights pick byte tokens that are no UTF-8)
        assert_eq!(o.stdout, [&pieces[..], b"\n"].concat(), "{name}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("prefill: 4 tokens") && err.contains("tokens/s"), "{err}");
    }

    // Under a budget the tokens are the same and the weights stream: the bytes copied in per
    // token are the plan's, for the scheduler and a baseline.
    let path = model("llama-Q8_0");
    let full = run(&[&path, "--tokens", "1,300,301", "--max-new-tokens", "8", "--json"]);
    let full: Value = serde_json::from_slice(&full.stdout).unwrap();
    for policy in ["scheduler", "sync-jit"] {
        let o = run(&[
            &path,
            "--tokens",
            "1,300,301",
            "--max-new-tokens",
            "8",
            "--budget",
            "1700KiB",
            "--policy",
            policy,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["tokens"], full["tokens"], "{policy}");
        let st = &v["stats"];
        assert_eq!(st["policy"], policy);
        assert!(st["plan_streamed_bytes_per_token"].as_u64().unwrap() > 0, "{st}");
        assert_eq!(st["streamed_bytes_per_token"], st["plan_streamed_bytes_per_token"]);
        assert_eq!(
            st["streamed_bytes_total"].as_u64().unwrap(),
            8 * st["plan_streamed_bytes_per_token"].as_u64().unwrap(),
            "{st}"
        );
        assert_eq!(
            st["resident_bytes"].as_u64().unwrap() + st["plan_streamed_bytes_per_token"].as_u64().unwrap(),
            st["weight_bytes"].as_u64().unwrap()
        );
        for key in ["h2d_gbps", "link_gbps", "floor_s", "t_over_floor", "sim_pcie4_forward_s"] {
            assert!(st[key].as_f64().unwrap() > 0.0, "{key}: {st}");
        }
    }
    // The summary in text mode.
    let o = run(&[&path, "--tokens", "1,300,301", "--max-new-tokens", "4", "--budget", "1700KiB"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("T/floor") && err.contains("GB/s achieved"), "{err}");

    // --prompt is tokenized with the model's vocabulary, BOS first; sampling with a seed repeats.
    let path = model("llama-F32");
    let sample = |seed: &str| {
        let o = run(&[
            &path,
            "--prompt",
            "hello world",
            "--max-new-tokens",
            "10",
            "--temperature",
            "1.5",
            "--top-k",
            "50",
            "--top-p",
            "0.9",
            "--seed",
            seed,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let a = sample("5");
    assert_eq!(a["prompt_tokens"][0], 1, "BOS first");
    assert_eq!(
        a["tokens"],
        sample("5")["tokens"],
        "the same seed draws the same tokens"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let good = model("llama-F32");
    let (bad_arch, missing, misshapen) = (model("bad-arch"), model("missing-tensor"), model("misshapen-tensor"));
    let cases: &[(Vec<&str>, i32, &[&str])] = &[
        (
            vec![&bad_arch, "--tokens", "1"],
            1,
            &["gptj", "supported: llama, mistral, qwen2, qwen3"],
        ),
        (
            vec![&missing, "--tokens", "1"],
            2,
            &["blk.1.ffn_up.weight", "missing", "[512, 256]"],
        ),
        (
            vec![&misshapen, "--tokens", "1"],
            2,
            &["blk.0.attn_k.weight", "[128, 128]", "expected [128, 256]"],
        ),
        (vec![&good, "--tokens", "1,99999"], 1, &["token id 99999", "vocabulary"]),
        (vec![&good, "--tokens", "1,x"], 1, &["'x' is not a token id"]),
        (
            vec![&good, "--tokens", "1,2,3,4,5", "--context", "4"],
            1,
            &["5 positions", "holds 4"],
        ),
        (
            vec![&good, "--prompt", "hello", "--device", "wgpu"],
            1,
            &["--device wgpu", "cpu"],
        ),
        (
            vec![&good, "--prompt", "hello", "--device", "cuda"],
            1,
            &["--device cuda", "`cuda` feature", "cpu"],
        ),
        (
            vec![&good, "--prompt", "hello", "--budget", "1KiB"],
            1,
            &["--budget 1.0 KiB", "KV cache", "smallest budget the scheduler policy accepts is"],
        ),
        (vec![&good, "--prompt", "hello", "--top-p", "0"], 1, &["top-p"]),
        (vec![&good], 1, &["--prompt"]),
        (
            vec!["/nonexistent/model.gguf", "--tokens", "1"],
            1,
            &["/nonexistent/model.gguf"],
        ),
    ];
    for (args, code, needles) in cases {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(*code), "{args:?}: {err}");
        for n in *needles {
            assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
        }
    }
}

/// MODEL is any file `Model` opens, local or by URL: a `.zt` converted from the GGUF (its
/// key/values and vocabulary travel in `source_metadata`), the GGUF and the Hugging Face copy
/// (sharded: an index and two shards; config.json and tokenizer.json fetched beside it) served
/// by nginx over HTTP Range: the same greedy tokens as the local GGUF, and as its HF copy.
#[test]
fn runs_zt_files_and_urls() {
    let gguf = model("llama-tied-F32");
    // The HF copy of llama-tied-F32 is sharded: two shards and model.safetensors.index.json.
    let hf = models()["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "llama-tied-F32")
        .and_then(|x| x["hf"].as_str())
        .map(PathBuf::from)
        .expect("llm_gen.py writes the HF copy of llama-tied-F32");
    let hf_dir = hf.parent().unwrap().to_path_buf();
    let index = hf.file_name().unwrap().to_str().unwrap().to_string();
    assert!(index.ends_with(".index.json"), "{index}");
    let tokens = |path: &str| -> Value {
        let o = run(&[
            path,
            "--prompt",
            "Hello world, the tensor",
            "--max-new-tokens",
            "10",
            "--json",
            "--remote-option",
            "allow_http=true",
        ]);
        assert!(o.status.success(), "{path}: {}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["tokens"].clone()
    };
    let want = tokens(&gguf);

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_run_zt");
    std::fs::create_dir_all(&dir).unwrap();
    let zt = dir.join("llama-tied-F32.zt");
    let _ = std::fs::remove_file(&zt);
    let o = Command::new(BIN)
        .args(["convert", &gguf, zt.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(tokens(zt.to_str().unwrap()), want, ".zt converted from the GGUF");

    // One folder served by nginx: the GGUF and the HF copy's files.
    let www = dir.join("www");
    let _ = std::fs::remove_dir_all(&www);
    std::fs::create_dir_all(www.join("hf")).unwrap();
    std::fs::copy(&gguf, www.join("model.gguf")).unwrap();
    for e in std::fs::read_dir(&hf_dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), www.join("hf").join(e.file_name())).unwrap();
    }
    let hf_local = tokens(www.join("hf").join(&index).to_str().unwrap());
    assert_eq!(hf_local, tokens(hf.to_str().unwrap()), "the copied HF folder");
    let Some(nginx) = tensorlane_testkit::servers::Nginx::start(&www) else {
        return;
    };
    assert_eq!(tokens(&format!("{}/model.gguf", nginx.base)), want, "GGUF by URL");
    assert_eq!(tokens(&format!("{}/hf/{index}", nginx.base)), hf_local, "sharded safetensors by URL");
}

/// The README's example: the bundled sample under the README's budget streams weights and gives
/// the all-resident tokens.
#[test]
fn the_readme_sample_runs_under_its_budget() {
    let sample = root().join("tests/data/llm/tiny-llama-Q4_K.gguf");
    let s = sample.to_str().unwrap();
    let args = |budget: Option<&str>| {
        let mut a = vec![s, "--prompt", "Once upon a time", "--max-new-tokens", "16", "--json"];
        if let Some(b) = budget {
            a.extend(["--budget", b]);
        }
        let o = run(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let (all, budgeted) = (args(None), args(Some("1300KiB")));
    assert_eq!(all["tokens"], budgeted["tokens"]);
    assert!(budgeted["stats"]["streamed_bytes_per_token"].as_u64().unwrap() > 0, "{budgeted}");
}

/// `run --chat` on the real SmolLM2-135M-Instruct (scripts/setup.sh fetches it): one turn with
/// --prompt answers through the model's template; turns piped on standard input keep the KV
/// cache (the second evaluates only its new tokens); a model without a template says so.
#[test]
fn run_chat_talks_to_a_real_model() {
    let smollm2 = tensorlane_testkit::llm::smollm2();
    let path = smollm2.to_str().unwrap();
    let o = run(&[path, "--chat", "--prompt", "What is the capital of Germany?", "--max-new-tokens", "16"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Berlin"), "{text}");

    let mut child = Command::new(BIN)
        .args(["run", path, "--chat", "--json", "--max-new-tokens", "16", "--system", "Answer in one sentence."])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is the capital of Germany?\nAnd of France?\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let turns: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(turns.len(), 2, "{turns:?}");
    let (t0, t1) = (&turns[0], &turns[1]);
    assert_eq!(t0["prompt_tokens"], t0["evaluated_prompt_tokens"]);
    let (p0, p1, e1) = (
        t0["prompt_tokens"].as_u64().unwrap(),
        t1["prompt_tokens"].as_u64().unwrap(),
        t1["evaluated_prompt_tokens"].as_u64().unwrap(),
    );
    assert!(p1 - e1 >= p0, "turn 2 evaluated {e1} of {p1} tokens; turn 1's {p0} were in the cache");
    // (What a 135M model answers the second time is its own business: it has text.)
    assert!(!t1["text"].as_str().unwrap().trim().is_empty(), "{t1}");

    let o = run(&[&model("llama-Q8_0"), "--chat", "--prompt", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no chat template"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A mixture-of-experts model (llm_gen.py's qwen3moe-Q8_0: 8 experts, 2 per token) runs: its
/// tokens are the library's; under a budget the tokens are the same and `--json` reports per
/// token the bytes of the experts the router picked, fewer than the plan's every-expert figure;
/// on wgpu it is refused naming the family and the device (exit 1).
#[test]
fn runs_a_mixture_of_experts_and_streams_its_routed_experts() {
    let path = model("qwen3moe-Q8_0");
    let m = Model::open(&path).unwrap();
    let mut s = Session::open(&m, Options { threads: Some(2), ..Options::default() }).unwrap();
    let want: Vec<u32> = s
        .generate(&[1, 300, 301], &Sampling { stop_at_eog: false, ..Sampling::default() })
        .take(8)
        .map(|t| t.unwrap().id)
        .collect();
    let o = run(&[&path, "--tokens", "1,300,301", "--max-new-tokens", "8", "--threads", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let full: Value = serde_json::from_slice(&o.stdout).unwrap();
    let got: Vec<u32> = full["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    assert_eq!(got[..], want[..got.len()]);
    let o = run(&[&path, "--tokens", "1,300,301", "--max-new-tokens", "8", "--threads", "2", "--budget", "2MiB", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tokens"], full["tokens"]);
    let st = &v["stats"];
    let (plan, streamed) = (
        st["plan_streamed_bytes_per_token"].as_u64().unwrap(),
        st["streamed_bytes_per_token"].as_u64().unwrap(),
    );
    assert!(streamed > 0 && streamed < plan, "{st}");
    let o = Command::new(BIN)
        .args(["run", &path, "--tokens", "1", "--device", "wgpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("qwen3moe") && err.contains("wgpu"), "{err}");
}

/// `run --json-schema FILE` (and `--grammar FILE`): the real SmolLM2's reply is JSON that follows
/// the schema (unconstrained it answers in prose), every turn of a chat too; a schema that is not
/// JSON, or one the engine cannot compile, is a usage error (exit 1) naming the flag and the file.
#[test]
fn run_json_schema_constrains_the_reply() {
    let smollm2 = tensorlane_testkit::llm::smollm2();
    let path = smollm2.to_str().unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run_json_schema");
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("city.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
            "country": {"enum": ["France", "Germany", "Italy"]}},
            "required": ["city", "country"], "additionalProperties": false}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let o = run(&[path, "--chat", "--prompt", "Name a city in Germany.", "--json-schema", schema, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let reply: Value = serde_json::from_str(out["text"].as_str().unwrap()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(reply["country"], "Germany", "{reply}");
    assert!(reply["city"].as_str().is_some_and(|c| !c.is_empty()), "{reply}");

    let lark = dir.join("yes_no.lark");
    std::fs::write(&lark, "start: (\"yes\" | \"no\") \".\"\n").unwrap();
    let o = run(&[path, "--chat", "--prompt", "Is water wet?", "--grammar", lark.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.trim_end() == "yes." || text.trim_end() == "no.", "{text:?}");

    let not_json = dir.join("bad.json");
    std::fs::write(&not_json, "{type: object").unwrap();
    let o = run(&[path, "--prompt", "x", "--json-schema", not_json.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--json-schema"), "{}", String::from_utf8_lossy(&o.stderr));
    let bad_ref = dir.join("bad_ref.json");
    std::fs::write(&bad_ref, r##"{"$ref": "#/$defs/nowhere"}"##).unwrap();
    let o = run(&[path, "--prompt", "x", "--json-schema", bad_ref.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `run --trace FILE` writes the forward passes as a Chrome/Perfetto trace in the format of
/// `offload sim --trace` (the CPU's tracks, a pass per prompt and per generated token but the
/// last, products named after their matrices) and says where; a GPU-free model on `--device
/// cpu` is all it needs.
#[test]
fn run_trace_writes_the_forward_passes() {
    let dir = std::env::temp_dir().join(format!("tensorlane-run-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.json");
    let m = model("llama-Q8_0");
    let o = run(&[&m, "--tokens", "1,300,301", "--max-new-tokens", "3", "--trace", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("trace: "), "{}", String::from_utf8_lossy(&o.stderr));
    let (trace, tracks) = tensorlane_testkit::llm::read_trace(&path);
    let events = trace["traceEvents"].as_array().unwrap();
    assert_eq!(tracks, ["forward passes", "layers", "compute", "copies", "disk waits", "disk reads"]);
    let passes = events.iter().filter(|e| e["cat"] == "forward passes").count();
    assert_eq!(passes, 3, "the prompt, then two of the three tokens");
    assert!(events.iter().any(|e| e["cat"] == "compute" && e["name"] == "blk.0.attn_q.weight"));
    std::fs::remove_dir_all(&dir).unwrap();
}
