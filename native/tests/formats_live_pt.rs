//! Live cross-check of the PyTorch reader against CPython's own pickler.
//!
//! torch is too large to install for tests, so tests/python/formats_gen_pt.py stands in for
//! `torch.save` the way the format is defined: `pickle.Pickler` with a storage `persistent_id`,
//! over objects that reduce to `torch._utils._rebuild_tensor_v2/_v3` and `_rebuild_parameter`.
//! It writes random nested checkpoints (every supported dtype, views at offsets, transposed and
//! strided, shared storages, Parameters, plain values) at pickle protocols 1 to 5, in the zip and
//! the legacy layout, little- and big-endian, and reports the expected C-order bytes (numpy).
//! The real torch files are covered by the fixtures in `tests/data` (core/tests/all/fixtures_pt.rs).
//!
//! The venv comes from tests/python/setup_formats_venv.sh (numpy, ml_dtypes). The test skips only
//! when `python3` is missing and `CI` is not `true`.

use tensorlane_core::formats::{self, Meta};
use tensorlane_testkit as common;

#[test]
fn checkpoints_written_by_cpython_pickle_read_back() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "PyTorch (pickle)") else {
        return;
    };
    let dir = common::live_dir("tensorlane-pt-live");
    let seed = common::env_seed("PT_LIVE_SEED").unwrap_or(20260);
    let files = common::run_json(py, "formats_gen_pt.py", &[dir.to_str().unwrap(), &seed.to_string()]);
    let mut tensors = 0;
    let mut protocols = std::collections::BTreeSet::new();
    for f in files.as_array().unwrap() {
        let path = f["file"].as_str().unwrap();
        let what = format!("{path} (seed {seed}, {} protocol {})", f["variant"], f["protocol"]);
        let bytes = std::fs::read(path).unwrap();
        let cat = formats::pt::open(&bytes[..]).unwrap_or_else(|e| panic!("{what}: {e}"));
        // Detection knows legacy files by the protocol-2 magic torch writes; a protocol-1 legacy
        // file starts with a text LONG instead, and is opened as PyTorch explicitly.
        if !(f["variant"] == "legacy" && f["protocol"] == 1) {
            assert_eq!(formats::open(&bytes[..]).as_ref(), Ok(&cat), "{what}: detected");
        }
        let meta = |k: &str| cat.metadata.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(
            meta("variant"),
            Some(Meta::Str(f["variant"].as_str().unwrap().into())),
            "{what}"
        );
        assert_eq!(
            meta("byteorder"),
            Some(Meta::Str(f["byteorder"].as_str().unwrap().into())),
            "{what}"
        );
        let want = f["tensors"].as_array().unwrap();
        common::check_tensors(&what, &cat, want, &[&bytes[..]]);
        for (t, w) in cat.tensors.iter().zip(want) {
            let tw = format!("{what} / {}", t.name);
            let param = t
                .attributes
                .iter()
                .any(|(k, v)| k == "parameter" && *v == Meta::Bool(true));
            assert_eq!(param, w["parameter"].as_bool().unwrap(), "{tw}: parameter");
            tensors += 1;
        }
        // Plain values come back under non_tensor_values.
        let values = f["values"].as_object().unwrap();
        if !values.is_empty() {
            let Some(Meta::Map(got)) = meta("non_tensor_values") else {
                panic!("{what}: no non_tensor_values")
            };
            assert_eq!(got.len(), values.len(), "{what}");
            for (k, v) in &got {
                let w = &values[k];
                let same = match v {
                    Meta::Null => w.is_null(),
                    Meta::Bool(b) => w.as_bool() == Some(*b),
                    Meta::Int(i) => w.as_i64() == Some(*i),
                    Meta::Float(x) => w.as_f64() == Some(*x),
                    Meta::Str(s) => w.as_str() == Some(s),
                    _ => false,
                };
                assert!(same, "{what}: value {k} = {v:?}, expected {w}");
            }
        }
        protocols.insert(f["protocol"].as_u64().unwrap());
    }
    assert!(tensors > 50, "only {tensors} tensors checked");
    assert_eq!(protocols.len(), 5, "every protocol 1-5 is exercised");
    let _ = std::fs::remove_dir_all(&dir);
}
