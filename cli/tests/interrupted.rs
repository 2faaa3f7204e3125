//! An interrupted `convert` leaves nothing behind: SIGINT and SIGTERM remove the unfinished
//! output (`.<name>.<pid>.<nanos>.partial` beside it) before the process ends with 128 + the
//! signal; a SIGKILLed convert's leftover is removed by the next write into that folder.
//!
//! The input is a sparse 1 GiB safetensors file (four 256 MiB f32 tensors of zeros, no disk
//! used for them), so a convert runs long enough to be caught mid-write.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

fn dir(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("interrupted-{tag}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A safetensors file of `n` f32 tensors `[rows, 1024]` of zeros, sparse.
fn sparse_safetensors(path: &Path, n: usize, rows: u64) {
    let bytes = rows * 1024 * 4;
    let mut header = serde_json::Map::new();
    for i in 0..n as u64 {
        header.insert(
            format!("t{i}"),
            serde_json::json!({"dtype": "F32", "shape": [rows, 1024], "data_offsets": [i * bytes, (i + 1) * bytes]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    std::fs::write(path, &out).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(out.len() as u64 + n as u64 * bytes).unwrap();
}

fn partials(d: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".partial"))
        .collect()
}

/// Starts `convert IN OUT` and waits (at most 60 s) for its temporary output to appear.
fn convert_until_partial(d: &Path) -> Child {
    let input = d.join("in.safetensors");
    sparse_safetensors(&input, 4, 1 << 16);
    let mut child = Command::new(BIN)
        .args(["convert", input.to_str().unwrap(), d.join("out.zt").to_str().unwrap()])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while partials(d).is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "convert ended before its temporary output was seen"
        );
        assert!(start.elapsed() < Duration::from_secs(60), "no temporary output within 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    child
}

fn kill(child: &Child, signal: &str) {
    let ok = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn sigterm_and_sigint_remove_the_unfinished_output() {
    for (signal, code) in [("-TERM", 143), ("-INT", 130)] {
        let d = dir(&signal[1..]);
        let mut child = convert_until_partial(&d);
        kill(&child, signal);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{signal}: {status:?}");
        assert_eq!(partials(&d), Vec::<PathBuf>::new(), "{signal}: the temporary output is left");
        assert!(!d.join("out.zt").exists(), "{signal}: a half output was published");
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn a_sigkilled_converts_leftover_is_removed_by_the_next_write() {
    let d = dir("KILL");
    let mut child = convert_until_partial(&d);
    kill(&child, "-KILL");
    let _ = child.wait();
    let left = partials(&d);
    assert_eq!(left.len(), 1, "SIGKILL cannot be caught: its temporary output stays, once");
    // The next convert into the folder finds the dead process's file and removes it.
    let small = d.join("small.safetensors");
    sparse_safetensors(&small, 1, 4);
    let o = Command::new(BIN)
        .args(["convert", small.to_str().unwrap(), d.join("small.zt").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(partials(&d), Vec::<PathBuf>::new(), "the stale {left:?} is still there");
    let _ = std::fs::remove_dir_all(&d);
}
