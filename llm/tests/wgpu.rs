//! The wgpu executor against the CPU executor, on the random-weight models
//! tests/python/llm_gen.py writes (llama in F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, tied
//! embeddings, mistral, qwen2 with biases and rotate-half rope, qwen3 with per-head Q/K norms, byte-level BPE vocabularies, and
//! the Hugging Face safetensors copies with rotate-half rope; the BPE models' GGUF copies are
//! skipped, see below): per-position logits over a
//! 40-token prompt (two batches of the device executor) within 1e-3 relative for F32 weights
//! (the others: the top token wherever the CPU's margin is over 0.05), and 16 greedy tokens
//! identical. The figures are printed (`--nocapture`).
//!
//! Runs on whatever adapter exists (Mesa lavapipe on CPU-only machines). Without an adapter the
//! test skips with a message, except under `CI=true`, where that fails. Needs
//! tests/.venv-formats (`scripts/setup.sh`).
#![cfg(feature = "wgpu")]

mod common;

use std::path::Path;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_llm::{Device, Error, Options, Sampling, Session};

/// Writes the models with tests/python/llm_gen.py (once per test binary run) and returns its
/// JSON.
fn models() -> &'static Value {
    static MODELS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    MODELS.get_or_init(generate)
}

fn generate() -> Value {
    tensorlane_testkit::llm::llm_models(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("llm_wgpu"), "11")
}

fn options(device: Device) -> Options {
    Options {
        device,
        context: Some(96),
        // The devices keep f32 caches: the CPU side too, so only the kernels differ.
        cache_type: Some(tensorlane_llm::CacheType::F32),
        ..Options::default()
    }
}

fn greedy(s: &mut Session<'_>, prompt: &[u32]) -> (Vec<u32>, f64) {
    let ids: Vec<u32> = s
        .generate(
            prompt,
            &Sampling {
                stop_at_eog: false,
                ..Sampling::default()
            },
        )
        .take(16)
        .map(|t| t.unwrap().id)
        .collect();
    (ids, s.stats().decode_tokens_per_s())
}

#[test]
fn wgpu_matches_the_cpu_executor() {
    let manifest = models();
    let mut paths: Vec<(String, String, String)> = Vec::new();
    for m in manifest["models"].as_array().unwrap() {
        let (name, ty) = (m["name"].as_str().unwrap(), m["type"].as_str().unwrap());
        // (the mixture-of-experts models are refused: wgpu_refuses_mixture_of_experts; gemma
        // too: wgpu_refuses_gemma_naming_the_family_and_device)
        if is_moe(name) || name.starts_with("gemma") {
            continue;
        }
        // The byte-level BPE models differ from llama-F32 and qwen2-F32 only in their
        // vocabularies, which the device executor never sees (it takes token ids): their GGUF
        // copies would repeat those two runs (seconds of lavapipe each). qwen2-bpe-F32's Hugging
        // Face copy is still run below.
        if !name.contains("-bpe") {
            paths.push((name.into(), ty.into(), m["path"].as_str().unwrap().into()));
        }
        if let Some(hf) = m["hf"].as_str() {
            paths.push((format!("{name}-hf"), ty.into(), hf.into()));
        }
    }
    for (name, ty, path) in paths {
        let model = Model::open(&path).unwrap();
        let mut gpu = match Session::open(&model, options(Device::Wgpu)) {
            Ok(s) => s,
            Err(Error::Device(e)) if e.contains("no adapter") => {
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("CI=true and no wgpu adapter: {e}");
                }
                eprintln!("skip: {e}");
                return;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let mut cpu = Session::open(&model, options(Device::Cpu)).unwrap();
        let vocab = cpu.hparams().n_vocab as u32;
        let prompt: Vec<u32> = (0..40u32).map(|i| (i * 37 + 5) % vocab).collect();

        let want = cpu.logits(&prompt).unwrap();
        let got = gpu.logits(&prompt).unwrap();
        assert_eq!(want.len(), got.len(), "{name}");
        let (mut max_abs, mut max_logit, mut checked) = (0f32, 0f32, 0);
        for (pos, (w, g)) in want.iter().zip(&got).enumerate() {
            for (a, b) in w.iter().zip(g) {
                max_abs = max_abs.max((a - b).abs());
                max_logit = max_logit.max(a.abs());
            }
            if common::margin(w) > 0.05 {
                checked += 1;
                assert_eq!(
                    common::argmax(w),
                    common::argmax(g),
                    "{name}: top token at position {pos}"
                );
            }
        }
        if ty == "F32" {
            assert!(
                max_abs <= 1e-3 * max_logit.max(1.0),
                "{name}: max |Δ logits| {max_abs} over 1e-3 of {max_logit}"
            );
        }
        let (want_ids, cpu_tps) = greedy(&mut cpu, &prompt[..8]);
        let (got_ids, gpu_tps) = greedy(&mut gpu, &prompt[..8]);
        assert_eq!(want_ids, got_ids, "{name}: greedy tokens");
        eprintln!(
            "{name:<18} max |Δ logits| {max_abs:.2e} (max |logit| {max_logit:.1}), top-1 equal at {checked}/{} \
             positions, 16 greedy tokens equal; decode {cpu_tps:.1} tok/s cpu, {gpu_tps:.1} tok/s wgpu",
            want.len()
        );
    }
}

/// The budget sweep of the CPU executor's test on the wgpu device: each matrix's resident rows
/// in buffers of their own, the streamed rows written into the plan's ring before each use; the
/// same tokens and logits as all-resident, the plan's bytes counted. Every policy at its minimum
/// (where it streams the most) on a Q8_0 model (34-byte blocks: queue writes padded to 4 bytes);
/// the scheduler at its minimum on tied embeddings (the output product streams the embedding).
/// Fewer budgets than the CPU executor's sweep (every policy from its minimum to all-resident,
/// `llama_reference.rs`): a session costs seconds of shader compilation on lavapipe.
#[test]
fn budgets_stream_the_plans_bytes_on_wgpu() {
    let manifest = models();
    for (name, policies, budgets) in [
        ("llama-Q8_0", &tensorlane_llm::Policy::ALL[..], 1),
        ("llama-tied-F32", &[tensorlane_llm::Policy::Scheduler][..], 1),
    ] {
        let m = manifest["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap();
        let path = m["path"].as_str().unwrap();
        if let Err(Error::Device(e)) = Session::open(&Model::open(path).unwrap(), options(Device::Wgpu)) {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true and no wgpu adapter: {e}");
            }
            eprintln!("skip: {e}");
            return;
        }
        let checked = common::sweep(name, path, Device::Wgpu, policies, budgets);
        assert!(checked as u64 >= budgets, "{name}: only {checked} budgets checked");
    }
}

/// Whether `name` is one of llm_gen.py's mixture-of-experts models.
fn is_moe(name: &str) -> bool {
    ["qwen3moe-", "olmoe-", "mixtral-"].iter().any(|f| name.starts_with(f))
}

/// The wgpu executor has no expert kernels yet: every mixture-of-experts model (qwen3moe,
/// olmoe, mixtral) is refused on it with an error that names the family and the device (and
/// says the cpu runs it), before any device is looked for; the CPU executor opens the same
/// file.
#[test]
fn wgpu_refuses_mixture_of_experts() {
    let mut refused = 0;
    for m in models()["models"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        if !is_moe(name) {
            continue;
        }
        let model = Model::open(m["path"].as_str().unwrap()).unwrap();
        let family = name.split('-').next().unwrap();
        let family = if family == "mixtral" { "llama" } else { family };
        match Session::open(&model, options(Device::Wgpu)) {
            Err(e @ Error::Device(_)) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(family) && msg.contains("wgpu") && msg.contains("mixture-of-experts") && msg.contains("cpu"),
                    "{name}: {msg}"
                );
            }
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: a mixture-of-experts model was opened on wgpu"),
        }
        Session::open(&model, options(Device::Cpu)).unwrap_or_else(|e| panic!("{name} on the cpu: {e}"));
        refused += 1;
    }
    assert_eq!(refused, 9);
}

/// phi3 under a budget on wgpu: the fused attn_qkv and ffn_up are bound as row parts, each its
/// own plan entry, so at the scheduler's minimum (well below half the model) rows of them are
/// streamed through the ring and the tokens and logits are all-resident's, the plan's bytes
/// counted (`common::sweep`).
#[test]
fn phi3_budget_streams_the_plans_bytes_on_wgpu() {
    let m = models()["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "phi3-Q8_0")
        .expect("llm_gen.py writes phi3-Q8_0");
    let path = m["path"].as_str().unwrap();
    if let Err(Error::Device(e)) = Session::open(&Model::open(path).unwrap(), options(Device::Wgpu)) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true and no wgpu adapter: {e}");
        }
        eprintln!("skip: {e}");
        return;
    }
    let checked = common::sweep("phi3-Q8_0", path, Device::Wgpu, &[tensorlane_llm::Policy::Scheduler], 1);
    assert_eq!(checked, 1);
}

/// What the wgpu executor does not compute yet is refused, naming the family and the device,
/// before an adapter is looked for (so with none too): each gemma model (GGUF and Hugging Face
/// copies), and the engine of continuous batching on wgpu.
#[test]
fn wgpu_refuses_gemma_naming_the_family_and_device() {
    let mut refused = 0;
    for m in models()["models"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        if !name.starts_with("gemma") {
            continue;
        }
        let family = m["arch"].as_str().unwrap();
        for path in [m["path"].as_str(), m["gemma_hf"].as_str()].into_iter().flatten() {
            let model = Model::open(path).unwrap();
            match Session::open(&model, options(Device::Wgpu)) {
                Err(Error::Device(e)) => {
                    assert!(e.contains("wgpu") && e.contains(family) && e.contains("cpu"), "{name}: {e}");
                }
                Err(e) => panic!("{name}: expected a device error, got: {e}"),
                Ok(_) => panic!("{name}: wgpu ran gemma, which it does not compute"),
            }
            let engine = tensorlane_llm::batch::Engine::start_on(
                Model::open(path).unwrap(),
                tensorlane_llm::batch::EngineOptions::default(),
                Device::Wgpu,
            );
            match engine {
                Err(Error::Device(e)) => assert!(e.contains("wgpu") && e.contains(family), "{name}: {e}"),
                Err(e) => panic!("{name}: expected a device error, got: {e}"),
                Ok(_) => panic!("{name}: the wgpu engine ran gemma"),
            }
            refused += 1;
        }
    }
    assert_eq!(refused, 8, "six gemma GGUFs and two Hugging Face copies");
}
