//! The CUDA executor (feature `cuda`).
//!
//! * `kernels_compile_with_nvrtc`: NVRTC compiles `llm/src/cuda/kernels.cu` and finds every
//!   entry point (needs libnvrtc on the library path — `scripts/test.sh` puts the PyPI wheel
//!   `nvidia-cuda-nvrtc-cu12` there; skipped without it outside CI).
//! * `fails_cleanly_without_a_driver`: with no NVIDIA driver, opening a session on the device is
//!   an `Error::Device` that says what is missing, never a panic.
//! * `cuda_matches_the_cpu_executor` (a machine with a GPU): per-position logits within 1e-3
//!   relative for F32 weights (the others: the top token wherever the CPU's margin is over 0.05)
//!   and 16 greedy tokens identical, for every model of tests/python/llm_gen.py; then the budget
//!   sweep of the CPU executor's test (every policy, budgets from the minimum to all-resident:
//!   the all-resident tokens and logits, the plan's streamed bytes counted). Skipped without a
//!   device unless `TENSORLANE_EXPECT_CUDA=1`.
#![cfg(feature = "cuda")]

mod common;

use std::path::Path;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_llm::{Device, Error, Options, Policy, Sampling, Session};

fn models() -> Value {
    tensorlane_testkit::llm::llm_models(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("llm_cuda"), "11")
}

fn expect_cuda() -> bool {
    std::env::var("TENSORLANE_EXPECT_CUDA").as_deref() == Ok("1")
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

#[test]
fn kernels_compile_with_nvrtc() {
    // cudarc's loader panics when libnvrtc cannot be found: that is the skip.
    let compiled = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx(tensorlane_llm::cuda_kernels()));
    let ptx = match compiled {
        Ok(r) => r.unwrap_or_else(|e| panic!("NVRTC refused llm/src/cuda/kernels.cu: {e:?}")),
        Err(_) => {
            let ci = std::env::var("CI").as_deref() == Ok("true");
            assert!(
                !ci,
                "CI=true and libnvrtc is not on the library path (scripts/test.sh sets it up)"
            );
            eprintln!("skip: libnvrtc not found");
            return;
        }
    };
    let text = ptx.to_src();
    for entry in [
        "matmul",
        "round_inputs",
        "rms_norm",
        "rope",
        "attention",
        "add_rows",
        "swiglu",
        "add",
    ] {
        assert!(
            text.contains(&format!(".entry {entry}(")),
            "no entry {entry} in the PTX"
        );
    }
}

#[test]
fn fails_cleanly_without_a_driver() {
    let m = models();
    let model = Model::open(m["models"][0]["path"].as_str().unwrap()).unwrap();
    match Session::open(&model, options(Device::Cuda)) {
        Ok(_) => eprintln!("a CUDA device is here: nothing to check"),
        Err(Error::Device(e)) => {
            assert!(!expect_cuda(), "TENSORLANE_EXPECT_CUDA=1 and no device: {e}");
            assert!(
                e.contains("cuda") && (e.contains("libcuda") || e.contains("device")),
                "{e}"
            );
        }
        Err(e) => panic!("expected a device error, got: {e}"),
    }
}

#[test]
fn cuda_matches_the_cpu_executor() {
    let manifest = models();
    for m in manifest["models"].as_array().unwrap() {
        let (name, ty, path) = (
            m["name"].as_str().unwrap(),
            m["type"].as_str().unwrap(),
            m["path"].as_str().unwrap(),
        );
        // (mixture-of-experts models are refused on the device executors: see wgpu.rs; gemma
        // too: cuda_refuses_gemma_naming_the_family)
        if ["qwen3moe-", "olmoe-", "mixtral-", "gemma"].iter().any(|f| name.starts_with(f)) {
            continue;
        }
        let model = Model::open(path).unwrap();
        let mut gpu = match Session::open(&model, options(Device::Cuda)) {
            Ok(s) => s,
            Err(Error::Device(e)) if !expect_cuda() => {
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
        let (mut max_abs, mut max_logit) = (0f32, 0f32);
        for (pos, (w, g)) in want.iter().zip(&got).enumerate() {
            for (a, b) in w.iter().zip(g) {
                max_abs = max_abs.max((a - b).abs());
                max_logit = max_logit.max(a.abs());
            }
            if common::margin(w) > 0.05 {
                assert_eq!(
                    common::argmax(w),
                    common::argmax(g),
                    "{name}: top token at position {pos}"
                );
            }
        }
        if ty == "F32" {
            assert!(max_abs <= 1e-3 * max_logit.max(1.0), "{name}: max |Δ logits| {max_abs}");
        }
        let greedy = |s: &mut Session<'_>| -> Vec<u32> {
            let sampling = Sampling {
                stop_at_eog: false,
                ..Sampling::default()
            };
            s.generate(&prompt[..8], &sampling)
                .take(16)
                .map(|t| t.unwrap().id)
                .collect()
        };
        assert_eq!(greedy(&mut cpu), greedy(&mut gpu), "{name}: greedy tokens");
        eprintln!("{name:<18} max |Δ logits| {max_abs:.2e}, 16 greedy tokens equal");
    }
    for name in ["llama-Q4_K", "llama-tied-F32"] {
        let m = manifest["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap();
        let checked = common::sweep(name, m["path"].as_str().unwrap(), Device::Cuda, &Policy::ALL, 3);
        assert!(checked >= 10, "{name}: {checked} budgets");
    }
}

/// What the CUDA executor does not compute yet is refused, naming the family and the device,
/// before a device is looked for (so without one too): each gemma model of
/// tests/python/llm_gen.py.
#[test]
fn cuda_refuses_gemma_naming_the_family() {
    let mut refused = 0;
    for m in models()["models"].as_array().unwrap() {
        let (name, family) = (m["name"].as_str().unwrap(), m["arch"].as_str().unwrap());
        if !name.starts_with("gemma") {
            continue;
        }
        let model = Model::open(m["path"].as_str().unwrap()).unwrap();
        match Session::open(&model, options(Device::Cuda)) {
            Err(Error::Device(e)) => assert!(e.contains("cuda") && e.contains(family) && e.contains("cpu"), "{name}: {e}"),
            Err(e) => panic!("{name}: expected a device error, got: {e}"),
            Ok(_) => panic!("{name}: CUDA ran gemma, which it does not compute"),
        }
        refused += 1;
    }
    assert_eq!(refused, 6);
}
