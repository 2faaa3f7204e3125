//! Live cross-check of `tensorlane convert` with the reference libraries (tests/python/
//! formats_convert_check.py):
//!
//! * sources: random `.safetensors` (written by `safetensors.numpy`), `.npy` and `.npz` (numpy)
//!   files with random shapes and dtypes (seeded; `FORMATS_LIVE_SEED` repeats a run), and every
//!   readable fixture of `tests/data/fixtures/manifest.json` in a model format;
//! * each is converted to `.safetensors` (ggml blocks with `--dequantize`) and to `.zt` (ggml blocks
//!   as `gguf.<type>/1`, or dequantized where the .zt layouts lack the type);
//! * the `safetensors` library (0.8.0, `deserialize` and `safe_open(numpy)`) and `ztensor` 2.1.2
//!   (`open`, `tobytes`, `verify(deep=True)`) read every tensor back with the same dtype, shape and
//!   sha256 as the source.
//!
//! The venvs come from tests/python/setup_formats_venv.sh and setup_zt_venv.sh. The test skips
//! only when `python3` is missing and `CI` is not `true`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use tensorlane_testkit as common;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
/// The converter's cross-check script (tests/python/).
const CHECK: &str = "formats_convert_check.py";

/// Runs `tensorlane convert`; `Err(stderr)` when it fails.
fn convert(args: &[&str]) -> Result<(), String> {
    let out = Command::new(BIN)
        .arg("convert")
        .args(args)
        .output()
        .expect("the binary runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A source file and the tensors (name -> {dtype, shape, sha256}) it holds.
struct Source {
    path: PathBuf,
    label: String,
    tensors: BTreeMap<String, Value>,
    /// Dequantized forms of ggml tensors (name -> {dtype: float32, shape, sha256}).
    dequantized: BTreeMap<String, Value>,
}

fn fixture_sources() -> Vec<Source> {
    let dir = common::data("fixtures");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for f in m["files"].as_array().unwrap() {
        if f["expect"] != "read" || !common::MODEL_FORMATS.contains(&f["format"].as_str().unwrap()) {
            continue;
        }
        let file = f["file"].as_str().unwrap();
        let (mut tensors, mut dequantized) = (BTreeMap::new(), BTreeMap::new());
        for t in f["tensors"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap().to_string();
            let e = |t: &Value, dtype: &Value| json!({"dtype": dtype, "shape": t["shape"], "sha256": t["sha256"]});
            tensors.insert(name.clone(), e(t, &t["dtype"]));
            if t["quantized"] == true {
                dequantized.insert(name, e(&t["dequantized"], &json!("float32")));
            }
        }
        out.push(Source {
            path: dir.join(file),
            label: file.to_string(),
            tensors,
            dequantized,
        });
    }
    out
}

#[test]
fn converted_files_read_back_in_safetensors_and_ztensor() {
    let Some(py_formats) = common::venv_python("setup_formats_venv.sh", "safetensors") else {
        return;
    };
    let Some(py_zt) = common::venv_python("setup_zt_venv.sh", "ztensor") else {
        return;
    };
    let tmp = common::live_dir("tl-formats-convert-live");
    let gen_dir = tmp.join("gen");
    std::fs::create_dir_all(&gen_dir).unwrap();
    let seed = common::live_seed("FORMATS_LIVE_SEED", 100_000);
    eprintln!("FORMATS_LIVE_SEED={seed}");
    let generated = common::run_json(
        py_formats,
        CHECK,
        &["gen", gen_dir.to_str().unwrap(), &seed.to_string()],
    );
    let mut sources: Vec<Source> = generated["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| Source {
            path: PathBuf::from(f["path"].as_str().unwrap()),
            label: f["path"].as_str().unwrap().to_string(),
            tensors: f["tensors"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            dequantized: BTreeMap::new(),
        })
        .collect();
    sources.extend(fixture_sources());

    let (mut st_files, mut zt_files) = (Vec::new(), Vec::new());
    for (i, s) in sources.iter().enumerate() {
        let src = s.path.to_str().unwrap();
        let quantized = !s.dequantized.is_empty();
        let with = |deq: bool| -> BTreeMap<String, Value> {
            let mut t = s.tensors.clone();
            if deq {
                t.extend(s.dequantized.clone());
            }
            t
        };
        let st = tmp.join(format!("{i}.safetensors"));
        let mut args = vec![src, st.to_str().unwrap()];
        if quantized {
            args.insert(0, "--dequantize");
        }
        convert(&args).unwrap_or_else(|e| panic!("{} -> .safetensors: {e}", s.label));
        st_files.push(json!({"path": st, "tensors": with(quantized)}));

        let zt = tmp.join(format!("{i}.zt"));
        let zt_deq = match convert(&[src, zt.to_str().unwrap()]) {
            Ok(()) => false,
            Err(e) if quantized && e.contains("--dequantize") => {
                convert(&["--dequantize", src, zt.to_str().unwrap()])
                    .unwrap_or_else(|e| panic!("{} -> .zt --dequantize: {e}", s.label));
                true
            }
            Err(e) => panic!("{} -> .zt: {e}", s.label),
        };
        zt_files.push(json!({"path": zt, "tensors": with(zt_deq)}));
    }
    assert!(sources.len() >= 8, "only {} sources", sources.len());
    for (mode, files, py) in [("safetensors", &st_files, py_formats), ("zt", &zt_files, py_zt)] {
        let expect = tmp.join(format!("expect-{mode}.json"));
        std::fs::write(&expect, serde_json::to_vec(&json!({ "files": files })).unwrap()).unwrap();
        let text = common::run_python(py, CHECK, &[mode, expect.to_str().unwrap()]);
        eprintln!("{}", text.lines().last().unwrap_or_default());
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}
