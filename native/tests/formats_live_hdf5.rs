//! Live cross-check of the HDF5 reader with h5py 3.16 (HDF5 2.0): tests/python/formats_gen_hdf5.py
//! writes random files (every numeric dtype in both byte orders, 0-d and empty shapes, contiguous,
//! compact and chunked layouts with every chunk index h5py writes, gzip/shuffle/fletcher32, fill
//! values, nested and dense groups, attributes, user blocks) with libver 'earliest' and 'latest',
//! and reports what h5py reads back; every tensor must read with the same name, order, dtype,
//! shape and sha256, and the attributes must match. The same files, mutated, never make the
//! reader panic.
//!
//! The seed is `HDF5_LIVE_SEED` or the clock (printed). The venv comes from
//! tests/python/setup_formats_venv.sh; the test skips only when `python3` is missing and `CI` is
//! not `true`.

use tensorlane_testkit as common;

use std::path::Path;

use serde_json::Value as Json;
use tensorlane_core::formats::{self, Meta, hdf5};

fn meta_json(m: &Meta) -> Json {
    match m {
        Meta::Null => Json::Null,
        Meta::Bool(b) => Json::Bool(*b),
        Meta::Int(i) => Json::from(*i),
        Meta::UInt(u) => Json::from(*u),
        Meta::Float(f) => Json::from(*f),
        Meta::Str(s) => Json::String(s.clone()),
        Meta::Bytes(b) => Json::from(b.clone()),
        Meta::List(l) => Json::Array(l.iter().map(meta_json).collect()),
        Meta::Map(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), meta_json(v))).collect()),
    }
}

/// JSON equality, floats to a relative 1e-12 (serde_json's float parsing is not round-trip exact).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (Json::Array(x), Json::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Checks one generated file; returns `layout[+filters]` of each tensor, for the summary.
fn check_file(dir: &Path, f: &Json) -> Vec<String> {
    let name = f["file"].as_str().unwrap();
    let bytes = std::fs::read(dir.join(name)).unwrap();
    let cat = hdf5::open(&bytes[..]).unwrap_or_else(|e| panic!("{name}: open: {e}"));
    let want = f["tensors"].as_array().unwrap();
    common::check_tensors(name, &cat, want, &[&bytes[..]]);
    for (t, w) in cat.tensors.iter().zip(want) {
        let what = format!("{name} / {}", t.name);
        let attrs = t
            .attributes
            .iter()
            .find(|(k, _)| k == "attributes")
            .map(|(_, v)| meta_json(v));
        match (attrs, w.get("attributes")) {
            (None, None) => {}
            (Some(a), Some(b)) => assert!(same(&a, b), "{what}: attributes {a} vs {b}"),
            (a, b) => panic!("{what}: attributes {a:?} vs {b:?}"),
        }
    }
    for s in f["skipped"].as_array().unwrap() {
        let s = s.as_str().unwrap();
        assert!(
            cat.skipped.iter().any(|(n, _)| n == s),
            "{name}: {s} not listed as skipped"
        );
    }
    let meta = |k: &str| cat.metadata.iter().find(|(n, _)| n == k).map(|(_, v)| meta_json(v));
    for (k, v) in f["attributes"].as_object().unwrap() {
        let got = meta(k).unwrap_or_else(|| panic!("{name}: root attribute {k} missing"));
        assert!(same(&got, v), "{name}: root attribute {k}: {got} vs {v}");
    }
    for (g, attrs) in f["group_attributes"].as_object().unwrap() {
        for (k, v) in attrs.as_object().unwrap() {
            let got = meta(&format!("{g}/{k}")).unwrap_or_else(|| panic!("{name}: {g} attribute {k} missing"));
            assert!(same(&got, v), "{name}: {g} attribute {k}: {got} vs {v}");
        }
    }
    let attr = |t: &formats::TensorInfo, k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| meta_json(v));
    cat.tensors
        .iter()
        .map(|t| {
            format!(
                "{}{}",
                attr(t, "layout").unwrap(),
                attr(t, "filters").map(|f| f.to_string()).unwrap_or_default()
            )
        })
        .collect()
}

/// Mutated copies of each generated file (`HDF5_LIVE_MUTATIONS` overrides).
const MUTATIONS: usize = 25;

#[test]
fn h5py_files_read_back_identically() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "h5py") else {
        return;
    };
    let seed = common::live_seed("HDF5_LIVE_SEED", 100_000);
    eprintln!("HDF5_LIVE_SEED={seed}");
    let dir = common::live_dir("tensorlane-hdf5-live");
    let report = common::run_json(py, "formats_gen_hdf5.py", &[dir.to_str().unwrap(), &seed.to_string()]);
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 4);
    let mut seen = std::collections::BTreeMap::new();
    for f in files {
        for k in check_file(&dir, f) {
            *seen.entry(k).or_insert(0) += 1;
        }
    }
    eprintln!(
        "h5py {} / HDF5 {}: tensors per layout: {seen:?}",
        report["h5py"], report["hdf5"]
    );
    // The same files with a few bytes changed: opening and reading never panics or hangs.
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    for f in files {
        let clean = std::fs::read(dir.join(f["file"].as_str().unwrap())).unwrap();
        let n: usize = std::env::var("HDF5_LIVE_MUTATIONS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(MUTATIONS);
        for _ in 0..n {
            let mut b = clean.clone();
            for _ in 0..1 + next() % 4 {
                let at = next() % b.len();
                b[at] = next() as u8;
            }
            if let Ok(cat) = hdf5::open(&b[..]) {
                for t in &cat.tensors {
                    let _ = formats::read("hdf5", t, &[&b[..]]);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
