//! Continuous batching on the wgpu executor ([`Engine::start_on`] with [`Device::Wgpu`]) against
//! each sequence alone on wgpu ([`Session::generate`]), on the random-weight llama Q8_0 model
//! tests/python/llm_gen.py writes (its product inputs rounded to Q8_0 blocks, its 34-byte blocks
//! streamed with padded queue writes). Few tokens: a pass costs about a second on lavapipe.
//!
//! - sequences with prompts of different lengths join at different steps (a short prompt beside
//!   a decode row, so the logits rows are gathered; a 40-token prompt beside two decode rows, so
//!   the step takes two passes of `BATCH` rows and the prompt continues in the second), one
//!   waits for a place and takes the KV slot another left: every sequence gets exactly its solo
//!   greedy tokens;
//! - under a budget below the model's size, a step streams the same bytes for one sequence or
//!   four, and the tokens are still the solo ones.
//!
//! Runs on whatever adapter exists (Mesa lavapipe on CPU-only machines). Without an adapter the
//! test skips with a message, except under `CI=true`, where that fails. Needs
//! tests/.venv-formats (`scripts/setup.sh`).
#![cfg(feature = "wgpu")]

use std::path::Path;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_llm::batch::{Engine, EngineOptions, Event, Request};
use tensorlane_llm::{Device, Error, Options, Sampling, Session};
use tokio::sync::mpsc::UnboundedReceiver;

const CONTEXT: usize = 96;
/// The budget test's context: short, so that the KV caches of four sequences leave the smallest
/// budget below the model's size.
const BUDGET_CONTEXT: usize = 32;

/// The path of llm_gen.py's model `name` (the models written once per test binary run).
fn path(name: &str) -> String {
    static MODELS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let models = MODELS.get_or_init(|| {
        tensorlane_testkit::llm::llm_models(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("llm_wgpu_batch"), "11")
    });
    tensorlane_testkit::llm::llm_model(models, name)
}

/// The engine on wgpu; `None` (the test skips) when there is no adapter, outside CI.
fn engine(name: &str, context: usize, max_batch: usize, budget: Option<u64>) -> Option<Result<Engine, Error>> {
    let started = Engine::start_on(
        Model::open(path(name)).unwrap(),
        EngineOptions {
            context: Some(context),
            threads: None,
            max_batch,
            max_queue: 8,
            budget,
            cache_type: None,
        },
        Device::Wgpu,
    );
    match started {
        Err(Error::Device(e)) if e.contains("no adapter") => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true and no wgpu adapter: {e}");
            }
            eprintln!("skip: {e}");
            None
        }
        other => Some(other),
    }
}

/// The greedy tokens of each prompt alone on wgpu (one session, its cache cleared per prompt).
fn solo(name: &str, prompts: &[(Vec<u32>, usize)]) -> Vec<Vec<u32>> {
    let model = Model::open(path(name)).unwrap();
    let options = Options {
        device: Device::Wgpu,
        context: Some(CONTEXT),
        ..Options::default()
    };
    let mut s = Session::open(&model, options).unwrap();
    prompts
        .iter()
        .map(|(p, n)| {
            s.generate(p, &Sampling::default())
                .take(*n)
                .map(|t| t.unwrap().id)
                .collect()
        })
        .collect()
}

/// The next token of `rx` (panics on anything else).
fn next_token(rx: &mut UnboundedReceiver<Event>) -> u32 {
    match rx.blocking_recv() {
        Some(Event::Token(t)) => t.id,
        other => panic!("expected a token, got {other:?}"),
    }
}

/// The remaining tokens of `rx`, after `got`, up to its `Done`.
fn drain(rx: &mut UnboundedReceiver<Event>, mut got: Vec<u32>) -> Vec<u32> {
    while let Some(e) = rx.blocking_recv() {
        match e {
            Event::Token(t) => got.push(t.id),
            Event::Done(d) => {
                assert_eq!(d.completion_tokens, got.len());
                return got;
            }
            Event::Failed(e) => panic!("sequence failed: {e}"),
        }
    }
    panic!("the receiver closed without Done");
}

/// Token-id prompts of `len` tokens, different per `seed`.
fn prompt(vocab: usize, len: usize, seed: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 37 + seed * 11 + 5) % vocab as u32)
        .collect()
}

#[test]
fn batched_greedy_on_wgpu_equals_each_sequence_alone_resident_and_under_a_budget() {
    let name = "llama-Q8_0";
    let t = std::time::Instant::now();
    let Some(eng) = engine(name, CONTEXT, 3, None) else {
        return;
    };
    let eng = eng.unwrap();
    let vocab = eng.info().hparams.n_vocab;
    // (prompt, max_tokens): a 40-token prompt (over one pass of 32 rows with the decode rows
    // beside it), short ones, and a fourth that waits for a place.
    let reqs: Vec<(Vec<u32>, usize)> = vec![
        (prompt(vocab, 5, 0), 6),
        (prompt(vocab, 12, 1), 3),
        (prompt(vocab, 40, 2), 4),
        (prompt(vocab, 3, 3), 4),
    ];
    let submit = |i: usize| eng.submit(Request::new(reqs[i].0.clone(), reqs[i].1)).unwrap();
    let mut rx0 = submit(0);
    let a = vec![next_token(&mut rx0)];
    // Joins beside sequence 0's decode row (the logits of rows 0 and 12 gathered).
    let mut rx1 = submit(1);
    let b = vec![next_token(&mut rx1)];
    // Joins beside two decode rows: 42 rows, two passes.
    let mut rx2 = submit(2);
    let c = vec![next_token(&mut rx2)];
    // The batch holds three: this one takes the KV slot of one that left (sequence 1, after its
    // three tokens), waiting for it if need be.
    let mut rx3 = submit(3);
    let got = [
        drain(&mut rx0, a),
        drain(&mut rx1, b),
        drain(&mut rx2, c),
        drain(&mut rx3, Vec::new()),
    ];
    let m = eng.metrics();
    drop(eng);
    let resident_s = t.elapsed().as_secs_f64();
    assert!(
        m.steps > 0 && m.decoded_tokens > m.steps,
        "never decoded together: {m:?}"
    );
    // Sequence 0's prompt alone, and the 40-token prompt's step in two passes.
    assert!(m.passes >= m.steps + 2, "the long prompt's step made one pass: {m:?}");

    // Under a budget below the model's size (a short context, so that the plan's four KV
    // caches leave room): the short prompts (one twice) with at most 3 tokens each.
    let t_budget = std::time::Instant::now();
    // A budget too small names the smallest that works (the plan counts four KV caches).
    let err = engine(name, BUDGET_CONTEXT, 4, Some(1))
        .unwrap()
        .unwrap_err()
        .to_string();
    let min: u64 = err
        .split("accepts is ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no minimum in {err:?}"));
    let eng = engine(name, BUDGET_CONTEXT, 4, Some(min)).unwrap().unwrap();
    let info = eng.info().clone();
    let per_step = info.streamed_bytes;
    assert!(
        per_step > 0 && min < info.weight_bytes,
        "budget {min} of a {}-byte model streams {per_step}",
        info.weight_bytes
    );
    let budgeted = [0, 1, 3, 0];
    let alone = drain(&mut eng.submit(Request::new(reqs[0].0.clone(), 3)).unwrap(), Vec::new());
    assert_eq!(eng.metrics().streamed_last, per_step, "one sequence");
    let mut rxs: Vec<_> = budgeted
        .iter()
        .map(|&i| eng.submit(Request::new(reqs[i].0.clone(), 3)).unwrap())
        .collect();
    let got_budget: Vec<Vec<u32>> = rxs.iter_mut().map(|rx| drain(rx, Vec::new())).collect();
    assert_eq!(eng.metrics().streamed_last, per_step, "four sequences");
    drop(eng);
    let budget_s = t_budget.elapsed().as_secs_f64();

    let t_solo = std::time::Instant::now();
    let want = solo(name, &reqs);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "sequence {i} (prompt of {} tokens)", reqs[i].0.len());
    }
    let first3 = |i: usize| want[i].iter().take(3).copied().collect::<Vec<u32>>();
    assert_eq!(alone, first3(0), "alone under the budget vs a resident session");
    for (g, &i) in got_budget.iter().zip(&budgeted) {
        assert_eq!(
            g,
            &first3(i),
            "prompt {i} batched under the budget vs a resident session"
        );
    }
    eprintln!(
        "{name}: 4 sequences on wgpu, {} steps, {} passes: tokens equal solo ({resident_s:.1} s); budget {min} \
         bytes (model {} bytes): {per_step} bytes streamed per step for 1 or 4 sequences ({budget_s:.1} s); solo \
         sessions {:.1} s",
        m.steps,
        m.passes,
        info.weight_bytes,
        t_solo.elapsed().as_secs_f64()
    );
}

#[test]
fn kv_caches_that_cannot_fit_the_adapter_are_a_clear_error() {
    // 2^24 positions: one layer's keys of one sequence take 8 GiB, over any adapter's binding
    // limit (a u32): refused before any weight is uploaded, naming the sizes and the flags.
    let Some(started) = engine("llama-Q8_0", 1 << 24, 2, None) else {
        return;
    };
    let err = started.unwrap_err().to_string();
    for part in [
        "KV caches of 2 sequences",
        "16777216 positions",
        "max_storage_buffer_binding_size",
        "--context",
    ] {
        assert!(err.contains(part), "{part:?} not in {err:?}");
    }
}
