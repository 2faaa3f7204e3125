//! Decode throughput of the batch engine at several batch sizes, without HTTP:
//! `cargo run -p tensorlane-llm --example batch_bench -- MODEL THREADS TOKENS BATCH...`
//! (`BUDGET=bytes` in the environment: a weight budget, as `serve --budget`).
use std::time::Instant;

use tensorlane::model::Model;
use tensorlane_llm::batch::{Engine, EngineOptions, Event, Request};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args[2].parse()?;
    let tokens: usize = args[3].parse()?;
    let batches: Vec<usize> = args[4..].iter().map(|b| b.parse()).collect::<Result<_, _>>()?;
    let engine = Engine::start(
        Model::open(&args[1])?,
        EngineOptions {
            context: Some(512),
            threads: Some(threads),
            max_batch: batches.iter().copied().max().unwrap_or(1),
            max_queue: 0,
            // BUDGET=bytes: stream what the offload plan does not keep resident.
            budget: std::env::var("BUDGET").ok().and_then(|b| b.parse().ok()),
            cache_type: None,
        },
    )?;
    let prompt = engine.tokenizer().encode("the tensor data model", true);
    for &n in &batches {
        let before = engine.metrics();
        let start = Instant::now();
        let rxs: Vec<_> = (0..n)
            .map(|_| {
                let mut r = Request::new(prompt.clone(), tokens);
                r.sampling.stop_at_eog = false;
                engine.submit(r)
            })
            .collect::<Result<_, _>>()?;
        for mut rx in rxs {
            while let Some(e) = rx.blocking_recv() {
                if matches!(e, Event::Done(_) | Event::Failed(_)) {
                    break;
                }
            }
        }
        let m = engine.metrics();
        let s = start.elapsed().as_secs_f64();
        let decoded = m.decoded_tokens - before.decoded_tokens;
        println!(
            "batch {n}: {decoded} tokens in {} steps, {s:.2} s, {:.1} tokens/s",
            m.steps - before.steps,
            decoded as f64 / s
        );
    }
    Ok(())
}
