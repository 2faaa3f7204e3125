//! Shared by the integration tests of `tensorlane` (native) and `tensorlane-cli`: the repository
//! root, the test data folder, CI detection, the pinned Python venv a setup script builds, and the
//! pieces every live cross-check repeats (seed, scratch folder, running a generator, comparing a
//! catalog). A crate of its own, so that both crates' tests use one copy (`use
//! tensorlane_testkit as common;`).
#![deny(missing_docs)]

pub mod bombs;
pub mod llm;
pub mod servers;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tensorlane_core::formats::{self, Catalog};

/// The repository root (`TENSORLANE_ROOT` overrides it).
pub fn root() -> PathBuf {
    match std::env::var_os("TENSORLANE_ROOT") {
        Some(r) => PathBuf::from(r),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf(),
    }
}

/// `true` under CI, where a missing prerequisite is a failure, never a skip.
pub fn in_ci() -> bool {
    matches!(
        std::env::var("CI").as_deref(),
        Ok("true") | Ok("1") | Ok("TRUE") | Ok("True")
    )
}

/// A folder of the repository's test data (`tests/data/<sub>`, see its README for where each
/// file came from). The data is part of the repository, so a missing folder is a failure.
pub fn data(sub: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(sub);
    assert!(
        dir.is_dir(),
        "{} is missing (it is part of the repository: is the checkout complete?)",
        dir.display()
    );
    dir
}

enum Setup {
    Ready(PathBuf),
    NoPython(String),
    Failed(String),
}

fn setup(script: &str) -> Setup {
    let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    match Command::new(&py).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Setup::NoPython(format!(
                "`{py} --version` failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Err(e) => return Setup::NoPython(format!("`{py}` cannot be run: {e}")),
    }
    let script = root().join("tests/python").join(script);
    let out = match Command::new("bash").arg(&script).output() {
        Ok(o) => o,
        Err(e) => return Setup::Failed(format!("cannot run {}: {e}", script.display())),
    };
    if !out.status.success() {
        return Setup::Failed(format!(
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(p) if Path::new(p).exists() => Setup::Ready(PathBuf::from(p)),
        other => Setup::Failed(format!(
            "{} printed no python path (last line {other:?})",
            script.display()
        )),
    }
}

/// The python of the venv that `tests/python/<script>` builds (once per script and test binary),
/// or `None` when the test must be skipped: no python3 and not in CI. Any other failure panics.
pub fn venv_python(script: &str, what: &str) -> Option<&'static Path> {
    static SETUPS: OnceLock<Mutex<HashMap<String, &'static Setup>>> = OnceLock::new();
    let setup_of = {
        let mut map = SETUPS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *map.entry(script.to_string())
            .or_insert_with(|| Box::leak(Box::new(setup(script))))
    };
    match setup_of {
        Setup::Ready(p) => Some(p),
        Setup::NoPython(why) if !in_ci() => {
            eprintln!("SKIPPED: the {what} live cross-check needs python3 ({why})");
            None
        }
        Setup::NoPython(why) | Setup::Failed(why) => {
            panic!(
                "{what} live cross-check setup failed{}: {why}",
                if in_ci() { " (CI=true)" } else { "" }
            )
        }
    }
}

/// The manifest formats (`tests/data/fixtures/manifest.json`) that `Model` reads and `convert`
/// converts.
pub const MODEL_FORMATS: [&str; 8] = [
    "safetensors",
    "safetensors-index",
    "gguf",
    "npy",
    "npz",
    "pt",
    "onnx",
    "hdf5",
];

/// The seed in the environment variable `var`, when it is set to a number.
pub fn env_seed(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|s| s.parse().ok())
}

/// A live cross-check's seed: `var` when set (to replay a failure), else the clock's seconds
/// modulo `range`.
pub fn live_seed(var: &str, range: u64) -> u64 {
    env_seed(var).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            % range
    })
}

/// A fresh, empty scratch folder `<temp>/<prefix>-<pid>` (whatever was there is removed).
pub fn live_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_script(py: &Path, script: &str, args: &[&str]) -> Output {
    Command::new(py)
        .arg(root().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"))
}

/// Runs `tests/python/<script> <args>` with `py`; returns its stdout then its stderr, and panics
/// with both when it fails.
pub fn run_python(py: &Path, script: &str, args: &[&str]) -> String {
    let out = run_script(py, script, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} {args:?} failed:\n{text}");
    text
}

/// Runs `tests/python/<script> <args>` with `py` and parses its stdout as JSON; panics with its
/// stderr when it fails, and when it prints no JSON.
pub fn run_json(py: &Path, script: &str, args: &[&str]) -> Json {
    let out = run_script(py, script, args);
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{script} {args:?} printed no JSON: {e}"))
}

/// Lowercase hex sha256 of `b`.
pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// A reported tensor's `shape` array.
pub fn json_shape(w: &Json) -> Vec<u64> {
    w["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect()
}

/// The catalog lists exactly the reported tensors' names, in the same order.
pub fn check_names(what: &str, cat: &Catalog, want: &[Json]) {
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    let want_names: Vec<&str> = want.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, want_names, "{what}: names and order");
}

/// Compares a catalog with a generator's tensors (`{name, dtype, shape, sha256[, nbytes]}`, in
/// order): names and order, dtype name, shape, the bytes `formats::read` gives (sha256) and their
/// count (`TensorInfo::nbytes`, and the reported `nbytes` where there is one). `sources` are the
/// catalog's sources.
pub fn check_tensors(what: &str, cat: &Catalog, want: &[Json], sources: &[&[u8]]) {
    check_names(what, cat, want);
    for (t, w) in cat.tensors.iter().zip(want) {
        let at = format!("{what} / {}", t.name);
        assert_eq!(t.ty.name(), w["dtype"].as_str().unwrap(), "{at}: dtype");
        assert_eq!(t.shape, json_shape(w), "{at}: shape");
        if let Some(n) = w.get("nbytes") {
            assert_eq!(t.nbytes(), n.as_u64(), "{at}: nbytes");
        }
        let bytes = formats::read(cat.format.name(), t, sources).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(t.nbytes(), Some(bytes.len() as u64), "{at}: nbytes read");
        assert_eq!(
            sha256_hex(&bytes),
            w["sha256"].as_str().unwrap(),
            "{at}: bytes ({:?})",
            t.attributes
        );
    }
}

/// Every file under `dir` (recursively), as sorted paths relative to it.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}
