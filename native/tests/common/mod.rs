//! Shared by the integration tests: the repository root, the shared reference folder, CI
//! detection, and the pinned Python venv a setup script builds (live cross-checks).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

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

/// A folder of the shared reference data (`../shared/<sub>`); in CI its absence fails the test,
/// elsewhere it skips with a message.
pub fn shared(sub: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared").join(sub);
    if dir.is_dir() {
        return Some(dir);
    }
    if in_ci() {
        panic!("{} is missing; CI must have the shared reference data", dir.display());
    }
    eprintln!(
        "skipping: {} not found (set CI=true to make this a failure)",
        dir.display()
    );
    None
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
