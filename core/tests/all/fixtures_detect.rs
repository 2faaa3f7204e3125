//! `detect` recognises every fixture of `tests/data/fixtures/` by its content (the file name is
//! never consulted): the format the manifest names, for valid and hostile files alike.

use crate::common;

use tensorlane_core::detect::{HEAD_LEN, detect};

#[test]
fn every_fixture_is_detected_by_content() {
    let all = [
        "safetensors",
        "safetensors-index",
        "gguf",
        "pt",
        "npy",
        "npz",
        "onnx",
        "hdf5",
        "zt",
        "zt-v1",
    ];
    let fixtures = common::fixtures(&all);
    let mut checked = 0;
    for fx in &fixtures {
        let bytes = fx.bytes();
        let head = &bytes[..bytes.len().min(HEAD_LEN)];
        let got = detect(head).map(|f| f.name());
        let want = match fx.entry["format"].as_str().unwrap() {
            // Legacy PyTorch files (pickles, not zips) are a format of their own to the detector.
            "pt" if !bytes.starts_with(b"PK") => "pt-legacy",
            f => f,
        };
        // A truncated safetensors file (shorter than its length field) has nothing to detect.
        if fx.expect() == "reject" && bytes.len() < 9 {
            assert_eq!(got, None, "{}", fx.file());
            continue;
        }
        assert_eq!(got, Some(want), "{}: detected as {got:?}", fx.file());
        checked += 1;
    }
    assert!(checked > 70, "only {checked} fixtures checked");
}
