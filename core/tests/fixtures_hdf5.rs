//! HDF5 reader against the shared fixtures (h5py-written, libver earliest and latest), hand-built
//! hostile files (one named test per attack), and property tests (mutated fixtures never panic).

mod common;

use common::{check_catalog, fixtures};
use tensorlane_core::formats::{self, Catalog, Meta, hdf5};

fn open(bytes: &[u8]) -> Catalog {
    hdf5::open(bytes).unwrap_or_else(|e| panic!("open: {e}"))
}

fn meta_json(m: &Meta) -> serde_json::Value {
    use serde_json::Value as J;
    match m {
        Meta::Null => J::Null,
        Meta::Bool(b) => J::Bool(*b),
        Meta::Int(i) => J::from(*i),
        Meta::UInt(u) => J::from(*u),
        Meta::Float(f) => J::from(*f),
        Meta::Str(s) => J::String(s.clone()),
        Meta::Bytes(b) => J::from(b.clone()),
        Meta::List(l) => J::Array(l.iter().map(meta_json).collect()),
        Meta::Map(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), meta_json(v))).collect()),
    }
}

/// JSON equality with floats compared to a relative 1e-12 (serde_json's default float parsing is
/// not exactly round-trip).
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (J::Array(x), J::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn assert_same(got: Option<serde_json::Value>, want: Option<&serde_json::Value>, what: &str) {
    let ok = match (&got, want) {
        (Some(g), Some(w)) => same(g, w),
        (None, None) => true,
        _ => false,
    };
    assert!(ok, "{what}: got {got:?}, want {want:?}");
}

#[test]
fn every_hdf5_fixture_reads_as_the_manifest_says() {
    let Some(fxs) = fixtures(&["hdf5"]) else { return };
    assert_eq!(fxs.len(), 4);
    for fx in &fxs {
        assert_eq!(fx.expect(), "read", "{}", fx.file());
        let bytes = fx.bytes();
        let cat = open(&bytes);
        check_catalog(fx, &cat, &[&bytes[..]]);
        // Skipped datasets are reported, never returned as tensors.
        for s in fx.entry["skipped"].as_array().into_iter().flatten() {
            let name = s["name"].as_str().unwrap();
            assert!(cat.get(name).is_none(), "{}: {name} must be skipped", fx.file());
            assert!(
                cat.skipped.iter().any(|(n, _)| n == name),
                "{}: {name} not reported",
                fx.file()
            );
        }
        // Per-tensor layout details and attributes.
        for w in fx.entry["tensors"].as_array().unwrap() {
            let t = cat.get(w["name"].as_str().unwrap()).unwrap();
            let attr = |k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| meta_json(v));
            for k in ["stored_dtype", "layout", "chunks", "maxshape", "filters", "attributes"] {
                assert_same(attr(k), w.get(k), &format!("{} / {}: {k}", fx.file(), t.name));
            }
        }
        // Root attributes are the metadata; group attributes are `<group>/<name>`.
        let meta = |k: &str| cat.metadata.iter().find(|(n, _)| n == k).map(|(_, v)| meta_json(v));
        for (k, v) in fx.entry["attributes"].as_object().into_iter().flatten() {
            assert_same(meta(k), Some(v), &format!("{}: root attribute {k}", fx.file()));
        }
        for (g, attrs) in fx.entry["group_attributes"].as_object().into_iter().flatten() {
            for (k, v) in attrs.as_object().unwrap() {
                assert_same(
                    meta(&format!("{g}/{k}")),
                    Some(v),
                    &format!("{}: {g} attribute {k}", fx.file()),
                );
            }
        }
        // Opening reads no tensor data: the catalog is the same through the generic entry point.
        assert_eq!(formats::open(&bytes[..]).unwrap(), cat);
    }
}
