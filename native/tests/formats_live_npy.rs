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

mod common;
use common::root;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tensorlane_core::formats::{self, Meta, Storage, npy};

fn seed() -> u64 {
    std::env::var("FORMATS_LIVE_SEED")
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

fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorlane-formats-live-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn generate(py: &Path, dir: &Path, seed: u64) -> Json {
    let out = Command::new(py)
        .arg(root().join("tests/python/formats_gen_npy.py"))
        .arg(dir)
        .arg(seed.to_string())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "seed {seed}: formats_gen_npy.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the generator prints JSON")
}

#[test]
fn files_written_by_numpy_read_identically() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "numpy") else {
        return;
    };
    let seed = seed();
    let dir = out_dir("npy");
    let report = generate(py, &dir, seed);
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
        let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
        let want_names: Vec<&str> = want.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, want_names, "{what}: names and order");
        for (t, w) in cat.tensors.iter().zip(want) {
            let at = format!("{what} / {}", t.name);
            assert_eq!(t.ty.name(), w["dtype"].as_str().unwrap(), "{at}: dtype");
            let shape: Vec<u64> = w["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.shape, shape, "{at}: shape");
            assert_eq!(t.nbytes(), w["nbytes"].as_u64(), "{at}: nbytes");
            let got = formats::read(cat.format.name(), t, &[&bytes[..]]).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(
                hex::encode(Sha256::digest(&got)),
                w["sha256"].as_str().unwrap(),
                "{at}: bytes"
            );
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
