//! Live cross-check of the ONNX reader with the real `onnx` package (tests/python/formats_gen_onnx.py):
//! random dtypes and shapes stored as raw_data, typed fields, subgraph initializers and external
//! data (one file, one file per tensor) read to the bytes `onnx.load` + `numpy_helper.to_array`
//! give. The venv comes from tests/python/setup_formats_venv.sh; the test skips only when
//! `python3` is missing and `CI` is not `true`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, Meta};

fn out_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorlane-onnx-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn seed() -> u64 {
    std::env::var("ONNX_LIVE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                % 100_000
        })
}

fn attr<'a>(t: &'a formats::TensorInfo, k: &str) -> Option<&'a Meta> {
    t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v)
}

fn check_file(dir: &Path, f: &Json, seed: u64) {
    let rel = f["path"].as_str().unwrap();
    let path = dir.join(rel);
    let what = |s: &str| format!("{rel} (seed {seed}): {s}");
    let bytes = std::fs::read(&path).unwrap();
    let cat = formats::open(&bytes[..]).unwrap_or_else(|e| panic!("{}", what(&e.to_string())));
    assert_eq!(cat.format, Format::Onnx, "{}", what("detected"));
    // Companions, relative to the model's folder, then the range check a host does.
    let mut files = vec![bytes];
    for s in &cat.sources[1..] {
        files.push(std::fs::read(path.parent().unwrap().join(s)).unwrap());
    }
    let sizes: Vec<u64> = files.iter().map(|b| b.len() as u64).collect();
    cat.check_ranges(&sizes).unwrap();
    let sources: Vec<&[u8]> = files.iter().map(|b| b.as_slice()).collect();

    let want = f["tensors"].as_array().unwrap();
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    let want_names: Vec<&str> = want.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, want_names, "{}", what("names"));
    for (t, w) in cat.tensors.iter().zip(want) {
        let w_what = what(&t.name);
        assert_eq!(t.ty.name(), w["dtype"].as_str().unwrap(), "{w_what}: dtype");
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{w_what}: shape");
        assert_eq!(t.nbytes(), w["nbytes"].as_u64(), "{w_what}: nbytes");
        let storage = w["storage"].as_str().unwrap();
        assert_eq!(
            attr(t, "storage"),
            Some(&Meta::Str(storage.into())),
            "{w_what}: storage"
        );
        assert_eq!(
            t.is_zero_copy(),
            storage == "raw_data" || storage == "external",
            "{w_what}"
        );
        if let Some(s) = w["subgraph"].as_str() {
            assert_eq!(attr(t, "subgraph"), Some(&Meta::Str(s.into())), "{w_what}: subgraph");
        }
        let data = formats::read("onnx", t, &sources).unwrap_or_else(|e| panic!("{w_what}: {e}"));
        assert_eq!(
            hex::encode(Sha256::digest(&data)),
            w["sha256"].as_str().unwrap(),
            "{w_what}: sha256"
        );
    }
    let skipped: Vec<&str> = cat.skipped.iter().map(|(n, _)| n.as_str()).collect();
    let want_skipped: Vec<&str> = f["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(skipped, want_skipped, "{}", what("skipped"));
    let meta = |k: &str| cat.metadata.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(
        meta("producer_name"),
        Some(Meta::Str(f["producer_name"].as_str().unwrap().into()))
    );
    assert_eq!(meta("ir_version"), Some(Meta::Int(f["ir_version"].as_i64().unwrap())));
    let props: Vec<(String, Meta)> = f["metadata_props"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), Meta::Str(v.as_str().unwrap().into())))
        .collect();
    let Some(Meta::Map(mut got)) = meta("metadata_props") else {
        panic!("{}", what("metadata_props"))
    };
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, props, "{}", what("metadata_props"));
}

#[test]
fn onnx_files_read_to_the_reference_bytes() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "onnx") else {
        return;
    };
    let seed = seed();
    let dir = out_dir();
    let out = Command::new(py)
        .arg(common::root().join("tests/python/formats_gen_onnx.py"))
        .arg(&dir)
        .arg(seed.to_string())
        .output()
        .expect("run formats_gen_onnx.py");
    assert!(
        out.status.success(),
        "formats_gen_onnx.py (seed {seed}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Json = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 6);
    let mut n = 0;
    for f in files {
        check_file(&dir, f, seed);
        n += f["tensors"].as_array().unwrap().len();
    }
    eprintln!(
        "onnx {}: {n} tensors in {} files match (seed {seed})",
        report["onnx"],
        files.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
