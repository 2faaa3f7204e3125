//! Live cross-check of the ONNX reader with the real `onnx` package (tests/python/formats_gen_onnx.py):
//! random dtypes and shapes stored as raw_data, typed fields, subgraph initializers and external
//! data (one file, one file per tensor) read to the bytes `onnx.load` + `numpy_helper.to_array`
//! give. The venv comes from tests/python/setup_formats_venv.sh; the test skips only when
//! `python3` is missing and `CI` is not `true`.

use tensorlane_testkit as common;

use std::path::Path;

use serde_json::Value as Json;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, Meta};

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
    common::check_tensors(&what("tensors"), &cat, want, &sources);
    for (t, w) in cat.tensors.iter().zip(want) {
        let w_what = what(&t.name);
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
    // (sorted on both sides: serde_json keeps the file's key order when a crate of the build
    // turns on its `preserve_order`, as llguidance does in the workspace's)
    let mut props: Vec<(String, Meta)> = f["metadata_props"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), Meta::Str(v.as_str().unwrap().into())))
        .collect();
    let Some(Meta::Map(mut got)) = meta("metadata_props") else {
        panic!("{}", what("metadata_props"))
    };
    got.sort_by(|a, b| a.0.cmp(&b.0));
    props.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, props, "{}", what("metadata_props"));
}

#[test]
fn onnx_files_read_to_the_reference_bytes() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "onnx") else {
        return;
    };
    let seed = common::live_seed("ONNX_LIVE_SEED", 100_000);
    let dir = common::live_dir("tensorlane-onnx-live");
    let report = common::run_json(py, "formats_gen_onnx.py", &[dir.to_str().unwrap(), &seed.to_string()]);
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
