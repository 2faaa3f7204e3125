//! Live cross-check of the `.npy` / `.npz` reader with NumPy 2.4.6 (tests/python/).
//!
//! formats_gen_npy.py writes random arrays with `np.save` (every numeric dtype, little- and
//! big-endian, C and Fortran order, 0-d and zero-size), `np.lib.format.write_array` with format
//! versions 1.0, 2.0 and 3.0, `np.savez` (stored members) and `np.savez_compressed` (deflated
//! members); it reports each array's C-order little-endian bytes as a sha256 and the header as
//! NumPy parses it. tensorlane's reader must find the same tensors, dtypes, shapes, bytes and
//! header attributes.
//!
//! The venv comes from tests/python/setup_formats_venv.sh (pinned). The test skips only when
//! `python3` is missing and `CI` is not `true`. `FORMATS_LIVE_SEED` fixes the seed.

use tensorlane_core::formats::{self, Meta, Storage, npy};
use tensorlane_testkit as common;

#[test]
fn files_written_by_numpy_read_identically() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "numpy") else {
        return;
    };
    let seed = common::live_seed("FORMATS_LIVE_SEED", 100_000);
    let dir = common::live_dir("tensorlane-formats-live-npy");
    let report = common::run_json(py, "formats_gen_npy.py", &[dir.to_str().unwrap(), &seed.to_string()]);
    let files = report["files"].as_array().unwrap();
    assert!(files.len() >= 17);
    for f in files {
        let path = f["path"].as_str().unwrap();
        let what = format!("seed {seed}: {path}");
        let bytes = std::fs::read(path).unwrap();
        let npz = f["npz"].as_bool().unwrap();
        let cat = if npz {
            npy::open_npz(&bytes[..])
        } else {
            npy::open(&bytes[..])
        }
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(
            formats::open(&bytes[..]).as_ref(),
            Ok(&cat),
            "{what}: detected and opened"
        );
        let want = f["tensors"].as_array().unwrap();
        common::check_tensors(&what, &cat, want, &[&bytes[..]]);
        for (t, w) in cat.tensors.iter().zip(want) {
            let at = format!("{what} / {}", t.name);
            let attr = |k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            for k in ["stored_dtype", "header_version", "member", "zip_method"] {
                if let Some(v) = w[k].as_str() {
                    assert_eq!(attr(k), Some(Meta::Str(v.into())), "{at}: {k}");
                }
            }
            assert_eq!(
                attr("fortran_order"),
                Some(Meta::Bool(w["fortran_order"].as_bool().unwrap())),
                "{at}: fortran_order"
            );
            let deflated = w["zip_method"] == "deflate";
            assert_eq!(matches!(t.storage, Storage::Deflate { .. }), deflated, "{at}: storage");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
