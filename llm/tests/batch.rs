//! Continuous batching ([`tensorlane_llm::batch`]) against single sessions: on random-weight
//! models (tests/python/serve_models.py, F32, F16, Q8_0, Q4_K llama and F32 qwen2), sequences
//! of different prompt lengths decoded together, joining and leaving the batch at different
//! steps, each get exactly the greedy tokens [`Session::generate`] gives them alone; seeded
//! sampling is reproducible; log-probabilities equal the log-softmax of [`Session::logits`];
//! a dropped receiver frees its place; a full queue is refused; bad requests are refused; under
//! a budget a step streams the same bytes for one sequence or four, and joining prompts share the
//! step's pass.
//!
//! Needs tests/.venv-serve (`scripts/setup.sh`, or `bash tests/python/setup_serve_venv.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_llm::batch::{Engine, EngineOptions, Event, Finish, Request, SubmitError};
use tensorlane_llm::{CacheType, Options, Sampling, Session};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Writes the models once per test binary run.
fn models() -> &'static Value {
    static MODELS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    MODELS.get_or_init(|| {
        let py = root().join("tests/.venv-serve/bin/python");
        assert!(
            py.exists(),
            "{} is missing: run scripts/setup.sh (or bash tests/python/setup_serve_venv.sh)",
            py.display()
        );
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("batch_models");
        let o = Command::new(py)
            .arg(root().join("tests/python/serve_models.py"))
            .arg(&out)
            .current_dir(root().join("tests/python"))
            .output()
            .expect("run tests/python/serve_models.py");
        assert!(
            o.status.success(),
            "serve_models.py failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("serve_models.py prints JSON")
    })
}

fn path(name: &str) -> String {
    models()["models"][name].as_str().unwrap().to_string()
}

const CONTEXT: usize = 128;

fn engine(name: &str, max_batch: usize, max_queue: usize) -> Engine {
    Engine::start(
        Model::open(path(name)).unwrap(),
        EngineOptions {
            context: Some(CONTEXT),
            threads: Some(2),
            max_batch,
            max_queue,
            budget: None,
            // f32: the batching is checked against Session to 1e-4; an f16 cache rounds the
            // products' last-bit differences between the two paths on
            cache_type: Some(CacheType::F32),
        },
    )
    .unwrap()
}

/// Session::generate's greedy tokens (at most `n`, ending at an end-of-generation token).
fn solo(model: &Model, prompt: &[u32], n: usize, sampling: &Sampling) -> Vec<u32> {
    let mut s = Session::open(
        model,
        Options {
            context: Some(CONTEXT),
            threads: Some(2),
            cache_type: Some(CacheType::F32),
            ..Options::default()
        },
    )
    .unwrap();
    s.generate(prompt, sampling).take(n).map(|t| t.unwrap().id).collect()
}

/// Every event of a receiver: the tokens and the end.
fn drain(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
) -> (Vec<tensorlane_llm::batch::TokenEvent>, Finish, usize) {
    let mut tokens = Vec::new();
    while let Some(e) = rx.blocking_recv() {
        match e {
            Event::Token(t) => tokens.push(t),
            Event::Done(d) => {
                assert_eq!(d.completion_tokens, tokens.len());
                return (tokens, d.finish, d.prompt_tokens);
            }
            Event::Failed(e) => panic!("sequence failed: {e}"),
        }
    }
    panic!("the receiver closed without Done");
}

const PROMPTS: &[&str] = &[
    "hello world",
    "the tensor data model is",
    "a",
    "once upon a time in the theater of the world there was a tensor",
    "123 4567 89",
];

#[test]
fn batched_decode_gives_each_sequence_its_solo_tokens() {
    for name in ["llama-F32", "llama-F16", "llama-Q8_0", "llama-Q4_K", "qwen2-F32"] {
        let model = Model::open(path(name)).unwrap();
        // max_batch 4 (the four-input kernels run) with 5 requests: one waits and joins when the
        // first one leaves (their lengths differ), so sequences join and leave between steps.
        let eng = engine(name, 4, 8);
        let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| eng.tokenizer().encode(p, true)).collect();
        let lens = [24, 9, 17, 30, 5];
        let rxs: Vec<_> = prompts
            .iter()
            .zip(lens)
            .map(|(p, n)| eng.submit(Request::new(p.clone(), n)).unwrap())
            .collect();
        for ((rx, p), n) in rxs.into_iter().zip(&prompts).zip(lens) {
            let (got, finish, prompt_tokens) = drain(rx);
            let got: Vec<u32> = got.iter().map(|t| t.id).collect();
            let want = solo(&model, p, n, &Sampling::default());
            assert_eq!(got, want, "{name}: prompt {p:?}");
            assert_eq!(prompt_tokens, p.len());
            let eog = want.last().is_some_and(|&t| eng.tokenizer().is_eog(t));
            assert_eq!(finish, if eog { Finish::Eog } else { Finish::Length });
        }
        let m = eng.metrics();
        assert!(
            m.steps > 0 && m.decoded_tokens > m.steps,
            "{name}: no step had several sequences: {m:?}"
        );
        assert_eq!(m.in_flight, 0);
        eprintln!("{name}: {m:?}");
    }
}

#[test]
fn seeded_sampling_and_logprobs_match_a_session() {
    let name = "llama-F32";
    let model = Model::open(path(name)).unwrap();
    let eng = engine(name, 4, 4);
    let prompt = eng.tokenizer().encode("the tensor data model", true);
    let sampling = Sampling {
        temperature: 0.9,
        top_p: 0.95,
        seed: 42,
        ..Sampling::default()
    };
    let mut req = Request::new(prompt.clone(), 20);
    req.sampling = sampling.clone();
    req.logprobs = Some(3);
    // A greedy neighbour in the same batch changes nothing.
    let other = eng
        .submit(Request::new(eng.tokenizer().encode("hello", true), 20))
        .unwrap();
    let (got, _, _) = drain(eng.submit(req).unwrap());
    drop(drain(other));
    let ids: Vec<u32> = got.iter().map(|t| t.id).collect();
    assert_eq!(ids, solo(&model, &prompt, 20, &sampling));

    let mut s = Session::open(
        &model,
        Options {
            context: Some(CONTEXT),
            threads: Some(2),
            cache_type: Some(CacheType::F32),
            ..Options::default()
        },
    )
    .unwrap();
    let all: Vec<u32> = prompt.iter().chain(&ids).copied().collect();
    let logits = s.logits(&all).unwrap();
    let mut worst = 0f64;
    for (j, t) in got.iter().enumerate() {
        let row = &logits[prompt.len() - 1 + j];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let ln: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        let lp = |id: u32| row[id as usize] as f64 - max - ln;
        worst = worst.max((lp(t.id) - t.logprob.unwrap() as f64).abs());
        assert_eq!(t.top.len(), 3);
        for w in t.top.windows(2) {
            assert!(w[0].1 >= w[1].1, "top log-probabilities are sorted");
        }
        for &(id, p) in &t.top {
            worst = worst.max((lp(id) - p as f64).abs());
        }
    }
    eprintln!("largest log-probability difference to Session::logits: {worst:e}");
    assert!(worst < 1e-4, "log-probabilities differ from Session::logits by {worst}");
}

#[test]
fn cancel_frees_the_slot_full_queue_and_bad_requests_are_refused() {
    let eng = engine("llama-F32", 1, 1);
    let p = eng.tokenizer().encode("hello world", true);
    let long = || Request::new(p.clone(), CONTEXT - p.len());
    let mut first = eng.submit(long()).unwrap();
    // Wait until it runs, then fill the one queue place; a third is refused.
    assert!(matches!(first.blocking_recv(), Some(Event::Token(_))));
    let queued = eng.submit(Request::new(p.clone(), 3)).unwrap();
    assert!(matches!(
        eng.submit(long()),
        Err(SubmitError::QueueFull { max_queue: 1 })
    ));
    // Dropping the running sequence's receiver lets the queued one run to its end.
    drop(first);
    let (toks, finish, _) = drain(queued);
    assert_eq!((toks.len(), finish), (3, Finish::Length));
    assert_eq!(eng.metrics().in_flight, 0);

    let vocab = eng.info().hparams.n_vocab as u32;
    for (req, what) in [
        (Request::new(vec![], 4), "empty"),
        (Request::new(vec![vocab], 4), "outside the vocabulary"),
        (Request::new(p.clone(), 0), "at least 1"),
        (Request::new(p.clone(), CONTEXT), "positions are needed"),
        (Request::new(vec![1; CONTEXT], 1), "positions are needed"),
    ] {
        match eng.submit(req) {
            Err(SubmitError::Invalid(e)) => assert!(e.to_string().contains(what), "{e}"),
            other => panic!("expected a refusal ({what}), got {other:?}"),
        }
    }
    let mut r = Request::new(p.clone(), 2);
    r.sampling.top_p = 0.0;
    assert!(matches!(eng.submit(r), Err(SubmitError::Invalid(_))));
    // Still serving.
    assert_eq!(drain(eng.submit(Request::new(p, 2)).unwrap()).0.len(), 2);
}

#[test]
fn under_a_budget_each_step_streams_the_same_bytes_for_the_whole_batch() {
    let name = "llama-Q8_0";
    let model_path = path(name);
    let options = |budget| EngineOptions {
        context: Some(CONTEXT),
        threads: Some(2),
        max_batch: 4,
        max_queue: 4,
        budget: Some(budget),
        cache_type: Some(CacheType::F32),
    };
    // A budget too small names the smallest that works.
    let err = Engine::start(Model::open(&model_path).unwrap(), options(1))
        .unwrap_err()
        .to_string();
    let min: u64 = err
        .split("accepts is ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no minimum in {err:?}"));
    let eng = Engine::start(Model::open(&model_path).unwrap(), options(min)).unwrap();
    let per_step = eng.info().streamed_bytes;
    assert!(per_step > 0, "the minimum budget streams nothing");
    let model = Model::open(&model_path).unwrap();
    let prompts: Vec<Vec<u32>> = PROMPTS[..4].iter().map(|p| eng.tokenizer().encode(p, true)).collect();
    // One sequence alone, then four together: the bytes streamed per step are the same.
    let (alone, _, _) = drain(eng.submit(Request::new(prompts[0].clone(), 6)).unwrap());
    assert_eq!(eng.metrics().streamed_last, per_step);
    let rxs: Vec<_> = prompts
        .iter()
        .map(|p| eng.submit(Request::new(p.clone(), 6)).unwrap())
        .collect();
    for (rx, p) in rxs.into_iter().zip(&prompts) {
        let got: Vec<u32> = drain(rx).0.iter().map(|t| t.id).collect();
        assert_eq!(
            got,
            solo(&model, p, 6, &Sampling::default()),
            "budgeted batch vs a resident session"
        );
    }
    let m = eng.metrics();
    assert_eq!(m.streamed_last, per_step);
    assert_eq!(alone.len(), 6);
    // The prompts of requests that join share a pass with the others' decode rows: fewer passes
    // over (streams of) the weights than one per decode step plus one per prompt.
    assert!(m.passes < m.steps + 5, "every prompt had a pass of its own: {m:?}");
    eprintln!("budget {min} bytes: {per_step} bytes streamed per step, for 1 or 4 sequences");
}

/// Gemma in a continuous batch (tests/python/llm_gen.py's gemma3 and gemma2: sliding window 8,
/// soft-capping): sequences of different lengths, joining and leaving between steps, each get
/// the greedy tokens a session of their own gives, so every row's window is taken over its own
/// sequence's positions.
#[test]
fn gemma_batched_decode_gives_each_sequence_its_solo_tokens() {
    let m = tensorlane_testkit::llm::llm_models(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("batch_gemma"), "5");
    for name in ["gemma3-F32", "gemma2-Q8_0"] {
        let path = tensorlane_testkit::llm::llm_model(&m, name);
        let model = Model::open(&path).unwrap();
        let eng = Engine::start(
            Model::open(&path).unwrap(),
            EngineOptions {
                context: Some(CONTEXT),
                threads: Some(2),
                max_batch: 4,
                max_queue: 8,
                budget: None,
                cache_type: Some(CacheType::F32),
            },
        )
        .unwrap();
        let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| eng.tokenizer().encode(p, true)).collect();
        let lens = [24, 9, 17, 30, 5];
        let rxs: Vec<_> = prompts
            .iter()
            .zip(lens)
            .map(|(p, n)| eng.submit(Request::new(p.clone(), n)).unwrap())
            .collect();
        for ((rx, p), n) in rxs.into_iter().zip(&prompts).zip(lens) {
            let got: Vec<u32> = drain(rx).0.iter().map(|t| t.id).collect();
            assert_eq!(got, solo(&model, p, n, &Sampling::default()), "{name}: prompt {p:?}");
        }
        assert!(eng.metrics().decoded_tokens > eng.metrics().steps, "{name}: no step had several sequences");
    }
}

/// A mixture-of-experts model (llm_gen.py's qwen3moe and mixtral) batched: each sequence's
/// tokens are its solo ones, although the rows of a step that route to the same expert are
/// computed together (each as alone) and the rows of different sequences pick different experts.
#[test]
fn batched_mixture_of_experts_gives_each_sequence_its_solo_tokens() {
    let models = tensorlane_testkit::llm::llm_models(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("batch_moe"), "5");
    for name in ["qwen3moe-Q8_0", "mixtral-F32"] {
        let path = tensorlane_testkit::llm::llm_model(&models, name);
        let model = Model::open(&path).unwrap();
        let eng = Engine::start(
            Model::open(&path).unwrap(),
            EngineOptions {
                context: Some(CONTEXT),
                threads: Some(2),
                max_batch: 4,
                max_queue: 8,
                budget: None,
                cache_type: Some(CacheType::F32),
            },
        )
        .unwrap();
        let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| eng.tokenizer().encode(p, true)).collect();
        let lens = [20, 9, 14, 24, 5];
        let rxs: Vec<_> = prompts
            .iter()
            .zip(lens)
            .map(|(p, n)| eng.submit(Request::new(p.clone(), n)).unwrap())
            .collect();
        for ((rx, p), n) in rxs.into_iter().zip(&prompts).zip(lens) {
            let (got, _, _) = drain(rx);
            let got: Vec<u32> = got.iter().map(|t| t.id).collect();
            assert_eq!(got, solo(&model, p, n, &Sampling::default()), "{name}: prompt {p:?}");
        }
        let m = eng.metrics();
        assert!(m.decoded_tokens > m.steps, "{name}: no step had several sequences: {m:?}");
    }
}
