//! Replays the saved corpus of every fuzz target (`fuzz/corpus/NAME/*`: seeds from tests/data,
//! hand-made plans and every input a fuzzing campaign found) through the same function libFuzzer
//! runs, on stable, so that a fixed finding stays fixed without a fuzzer.

use std::path::{Path, PathBuf};

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus").join(name)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (every target has a saved corpus)", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

#[test]
fn every_target_has_a_corpus_and_every_input_replays_without_panicking() {
    let mut total = 0;
    for (name, body) in tensorlane_fuzz_targets::TARGETS {
        let inputs = files(&corpus_dir(name));
        assert!(!inputs.is_empty(), "fuzz/corpus/{name} is empty");
        for path in &inputs {
            let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // A panic names the input: rerun it with `cargo +nightly fuzz run NAME PATH`.
            eprintln!("replay {name} {}", path.display());
            body(&data);
        }
        total += inputs.len();
    }
    assert!(total >= tensorlane_fuzz_targets::TARGETS.len());
}

#[test]
fn every_cargo_fuzz_binary_is_a_target_here() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).expect("fuzz/Cargo.toml");
    let bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "tensorlane-fuzz")
        .collect();
    let names: Vec<&str> = tensorlane_fuzz_targets::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        bins, names,
        "fuzz/Cargo.toml's [[bin]]s and TARGETS must list the same targets in order"
    );
    for n in &names {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../fuzz_targets/{n}.rs"));
        let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        assert!(
            text.contains(&format!("tensorlane_fuzz_targets::{n}(")),
            "{} must call tensorlane_fuzz_targets::{n}",
            src.display()
        );
    }
}
