//! The hosted session (`tensorlane_llm::hosted`: the CPU executor over bytes a host hands in, what
//! the browser's wasm device runs) against [`Session`] on the same file: the same greedy tokens
//! and the same logits bit for bit, everything resident and under a plan whose streamed bytes are
//! read through a `ReadAt` at each pass (random-weight GGUFs of tests/python/llm_gen.py); a failed read is an error naming
//! the tensor and leaves the KV cache as it was.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;
use tensorlane::model::Model;
use tensorlane_core::formats::Storage;
use tensorlane_llm::arch::Spec;
use tensorlane_llm::hosted::HostedSession;
use tensorlane_llm::{CacheType, Options, Policy, Sampling, Session};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn models() -> &'static Value {
    static MODELS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    MODELS.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("llm_hosted");
        let o = Command::new(root().join("tests/.venv-formats/bin/python"))
            .arg(root().join("tests/python/llm_gen.py"))
            .arg(&out)
            .arg("5")
            .output()
            .expect("run tests/python/llm_gen.py (scripts/setup.sh makes its venv)");
        assert!(
            o.status.success(),
            "llm_gen.py failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("llm_gen.py prints JSON")
    })
}

fn path_of(name: &str) -> String {
    models()["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} not generated"))["path"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The file the reader serves, and the reads it served `(offset, len)`.
static FILE: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static READS: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());
static FAIL: Mutex<bool> = Mutex::new(false);

fn read_at(offset: u64, out: &mut [u8]) -> Result<(), String> {
    if *FAIL.lock().unwrap() {
        return Err("the network went away".into());
    }
    let f = FILE.lock().unwrap();
    let s = usize::try_from(offset).map_err(|e| e.to_string())?;
    let src = f.get(s..s + out.len()).ok_or("read past the end")?;
    out.copy_from_slice(src);
    READS.lock().unwrap().push((offset, out.len()));
    Ok(())
}

/// The tests share the reader's statics: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Opens `path` hosted, with the resident bytes of `budget`'s plan (none: everything resident),
/// as the browser does: each tensor's bytes (or resident prefix) read from the file and handed in.
fn hosted(path: &str, budget: Option<u64>, context: usize) -> HostedSession {
    let bytes = std::fs::read(path).unwrap();
    let model = Model::open(path).unwrap();
    let catalog = model.catalog().clone();
    let spec = Spec::from_catalog(&catalog).unwrap();
    let resident = budget.map(|b| {
        // The matrices in the session's order, as LlmModel (wasm/src/llm.rs) describes them.
        let mut names = vec![spec.token_embd.name.clone()];
        for l in &spec.layers {
            names.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down].map(|t| t.name.clone()));
        }
        if catalog.get(&spec.output.name).is_some() {
            names.push(spec.output.name.clone());
        }
        let described: Vec<(String, usize, usize, u64)> = names
            .iter()
            .map(|n| {
                let t = catalog.get(n).unwrap();
                let len = match t.storage {
                    Storage::Range { len, .. } => len,
                    _ => unreachable!(),
                };
                (n.clone(), t.shape[0] as usize, t.shape[1] as usize, len)
            })
            .collect();
        let vector_bytes: u64 = catalog
            .tensors
            .iter()
            .filter(|t| t.shape.len() == 1)
            .map(|t| 4 * t.shape[0])
            .sum();
        let d: Vec<(&str, usize, usize, u64)> = described.iter().map(|(n, r, c, b)| (n.as_str(), *r, *c, *b)).collect();
        let b = tensorlane_llm::plan::compile_described(
            "m",
            &spec,
            &d,
            vector_bytes,
            b,
            context,
            CacheType::F16,
            Policy::Scheduler,
        )
        .unwrap();
        b.resident()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<std::collections::HashMap<_, _>>()
    });
    *FILE.lock().unwrap() = bytes.clone();
    HostedSession::open(
        &catalog,
        &|n| resident.as_ref().and_then(|r| r.get(n).copied()),
        &mut |_, offset, len| Ok(bytes[offset as usize..(offset + len) as usize].to_vec()),
        read_at,
        context,
        CacheType::F16,
    )
    .unwrap()
}

fn session(model: &Model, budget: Option<u64>) -> Session<'_> {
    Session::open(
        model,
        Options {
            context: Some(64),
            budget,
            // one thread, as the hosted session: a prompt's F16/F32 product groups rows by
            // four within each thread's share, so its last bits depend on the thread count
            threads: Some(1),
            ..Options::default()
        },
    )
    .unwrap()
}

#[test]
fn hosted_logits_equal_the_sessions_resident_and_streamed() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    *FAIL.lock().unwrap() = false;
    let prompt = [1u32, 300, 45, 120, 77];
    for name in ["llama-Q4_K", "llama-Q8_0", "qwen2-F16", "qwen3-Q8_0", "llama-tied-F32"] {
        let path = path_of(name);
        let model = Model::open(&path).unwrap();
        let min = Session::minimum_budget(
            &model,
            &Options {
                context: Some(64),
                ..Options::default()
            },
        )
        .unwrap()
        .unwrap_or(0);
        let weights = session(&model, None).stats().weight_bytes;
        for budget in [None, Some(min.max(weights * 2 / 5))] {
            let mut s = session(&model, budget);
            let mut h = hosted(&path, budget, 64);
            READS.lock().unwrap().clear();
            // Greedy tokens: the prompt in one pass (the last position's logits), then one pass
            // per token, as Session::generate runs them.
            let want: Vec<u32> = s
                .generate(&prompt, &Sampling::default())
                .take(6)
                .map(|t| t.unwrap().id)
                .collect();
            let mut sampler = Sampling::default().sampler();
            let mut got = vec![sampler.pick(&h.forward(&prompt).unwrap()).unwrap()];
            while got.len() < 6 {
                let logits = h.forward(&got[got.len() - 1..]).unwrap();
                got.push(sampler.pick(&logits).unwrap());
            }
            assert_eq!(got, want, "{name} {budget:?}: greedy tokens");
            let passes = 6;
            let read: usize = READS.lock().unwrap().iter().map(|r| r.1).sum();
            assert_eq!(
                read as u64,
                passes * h.streamed_bytes(),
                "{name}: the plan's streamed bytes read at each pass"
            );
            // One position: the same product path both ways, so the same logits bit for bit.
            h.reset();
            let want = s.logits(&prompt[..1]).unwrap().pop().unwrap();
            let got = h.forward(&prompt[..1]).unwrap();
            assert!(
                want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} {budget:?}: logits differ"
            );
            match budget {
                None => assert_eq!(h.streamed_bytes(), 0),
                Some(_) => assert!(h.streamed_bytes() > h.stored_bytes() / 2, "{name}: over half streamed"),
            }
        }
    }
}

#[test]
fn a_failed_read_names_the_tensor_and_keeps_the_cache() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = path_of("llama-Q8_0");
    let model = Model::open(&path).unwrap();
    let min = Session::minimum_budget(
        &model,
        &Options {
            context: Some(64),
            ..Options::default()
        },
    )
    .unwrap()
    .unwrap();
    let mut h = hosted(&path, Some(min), 64);
    *FAIL.lock().unwrap() = false;
    let first = h.forward(&[1, 2, 3]).unwrap();
    *FAIL.lock().unwrap() = true;
    let e = h.forward(&[4]).unwrap_err().to_string();
    *FAIL.lock().unwrap() = false;
    assert!(
        e.contains("reading the streamed bytes of blk.0.") && e.contains("the network went away"),
        "{e}"
    );
    assert_eq!(h.positions(), 3, "the failed pass left the cache as it was");
    let again = h.forward(&[4]).unwrap();
    h.reset();
    let redo = h.forward(&[1, 2, 3]).unwrap();
    assert_eq!(first, redo);
    assert!(again.iter().all(|v| v.is_finite()));
    // Errors on input, not panics: an id outside the vocabulary, a full context, no tokens.
    assert!(
        h.forward(&[100_000])
            .unwrap_err()
            .to_string()
            .contains("outside the vocabulary")
    );
    assert!(h.forward(&[]).is_err());
    assert!(
        h.forward(&[1; 64])
            .unwrap_err()
            .to_string()
            .contains("context holds 64")
    );
}

/// A mixture-of-experts model (llm_gen.py's qwen3moe-F32: stacked expert tensors) is refused
/// hosted, naming its first stacked expert tensor: the hosted executor does not cut one into
/// experts yet (the native cpu executor does), as it does not split phi3's fused tensors.
#[test]
fn hosted_refuses_a_mixture_of_experts_naming_its_expert_tensor() {
    let path = path_of("qwen3moe-F32");
    let bytes = std::fs::read(&path).unwrap();
    let catalog = Model::open(&path).unwrap().catalog().clone();
    let opened = HostedSession::open(
        &catalog,
        &|_| None,
        &mut |_, offset, len| Ok(bytes[offset as usize..(offset + len) as usize].to_vec()),
        read_at,
        16,
        CacheType::F16,
    );
    match opened {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("blk.0.ffn_gate_exps.weight") && msg.contains("mixture of experts"), "{msg}");
        }
        Ok(_) => panic!("a mixture-of-experts model was opened hosted"),
    }
}
