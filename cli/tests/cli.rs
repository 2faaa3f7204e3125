//! The `tensorlane` binary against tenso 0.24.0's golden vectors in `tests/data/vectors/tenso`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tensorlane_testkit as common;

use serde_json::Value;
use sha2::{Digest, Sha256};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
fn vectors() -> PathBuf {
    common::data("vectors/tenso")
}

fn tenso_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tenso"))
        .collect();
    v.sort();
    v
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn sidecar(p: &Path) -> Value {
    let text = std::fs::read_to_string(p.with_extension("json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn inspect_json(p: &Path) -> Value {
    let out = run(&["inspect", "--json", "--hash", p.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{} failed: {}",
        p.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sha_hex(hex_str: &str) -> String {
    hex::encode(Sha256::digest(hex::decode(hex_str).unwrap()))
}

/// Part `name` of tensor `t` of a report.
fn part<'a>(t: &'a Value, name: &str) -> &'a Value {
    t["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{}: no part {name} in {t}", t["name"]))
}

/// Checks one expected value (from a sidecar) against the report's tensor called `name`.
/// Returns how many tensors were checked.
fn check(expected: &Value, name: &str, report: &Value, file: &Path) -> usize {
    let find = || {
        report["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{}: no tensor named {name:?} in {report}", file.display()))
    };
    let ctx = format!("{} [{name}]", file.display());
    match expected["type"].as_str().unwrap() {
        "bundle" => expected["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let key = e["key"].as_str().unwrap();
                let sub = if name == "#0" {
                    key.to_string()
                } else {
                    format!("{name}/{key}")
                }; // "#0": the root
                check(&e["value"], &sub, report, file)
            })
            .sum(),
        "ndarray" => {
            let t = find();
            assert_eq!(t["kind"], "dense", "{ctx}");
            assert_eq!(t["dtype"], expected["dtype"], "{ctx}");
            assert_eq!(t["shape"], expected["shape"], "{ctx}");
            assert_eq!(t["nbytes"], expected["nbytes"], "{ctx}");
            assert_eq!(t["sha256"], expected["data_sha256"], "{ctx}");
            1
        }
        "sparse" => {
            let t = find();
            assert_eq!(t["kind"], "sparse", "{ctx}");
            assert_eq!(t["attributes"]["sparse_format"], expected["format"], "{ctx}");
            assert_eq!(t["shape"], expected["shape"], "{ctx}");
            let names = expected["component_names"].as_array().unwrap();
            let comps = expected["components"].as_array().unwrap();
            assert_eq!((names.len(), t["parts"].as_array().unwrap().len()), (3, 3), "{ctx}");
            for (n, e) in names.iter().zip(comps) {
                // The wire's `data` component is the layout's `values` part.
                let c = part(
                    t,
                    match n.as_str().unwrap() {
                        "data" => "values",
                        other => other,
                    },
                );
                assert_eq!(c["dtype"], e["dtype"], "{ctx}");
                assert_eq!(c["shape"], e["shape"], "{ctx}");
                assert_eq!(c["sha256"], e["data_sha256"], "{ctx}");
            }
            1
        }
        "quantized" => {
            let t = find();
            assert_eq!(t["kind"], "quantized", "{ctx}");
            let a = &t["attributes"];
            assert_eq!(a["qdtype"], expected["qdtype"], "{ctx}");
            assert_eq!(t["shape"], expected["shape"], "{ctx}");
            assert_eq!(a["scheme"], expected["scheme"], "{ctx}");
            assert_eq!(a["axis"], expected["axis_wire"], "{ctx}");
            assert_eq!(a["group_size"], expected["group_size"], "{ctx}");
            assert_eq!(a["num_scales"], expected["num_scales"], "{ctx}");
            assert_eq!(
                part(t, "data")["sha256"].as_str().unwrap(),
                sha_hex(expected["packed_hex"].as_str().unwrap()),
                "{ctx}"
            );
            1
        }
        "string" => {
            let t = find();
            assert_eq!(t["kind"], "string", "{ctx}");
            assert_eq!(t["attributes"]["count"], expected["count"], "{ctx}");
            assert_eq!(t["shape"], serde_json::json!([expected["count"]]), "{ctx}");
            let payload: String = expected["strings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            let p = part(t, "payload");
            assert_eq!(p["nbytes"], payload.len(), "{ctx}");
            assert_eq!(t["attributes"]["payload_bytes"], payload.len(), "{ctx}");
            assert_eq!(
                p["sha256"].as_str().unwrap(),
                hex::encode(Sha256::digest(payload.as_bytes())),
                "{ctx}"
            );
            1
        }
        other => panic!("{ctx}: unexpected sidecar type {other}"),
    }
}

fn check_folder(dir: &Path) -> (usize, usize) {
    let files = tenso_files(dir);
    assert!(!files.is_empty(), "no vectors in {}", dir.display());
    let mut tensors = 0;
    for f in &files {
        let report = inspect_json(f);
        assert_eq!(report["format"], "tenso");
        assert_eq!(report["packets"], 1, "{}", f.display());
        assert_eq!(report["bytes"], std::fs::metadata(f).unwrap().len());
        let side = sidecar(f);
        tensors += check(&side["expected"], "#0", &report, f);
        // The table form works too.
        let out = run(&["inspect", f.to_str().unwrap()]);
        assert!(out.status.success(), "{}", f.display());
        assert!(String::from_utf8_lossy(&out.stdout).contains("tenso file"));
    }
    (files.len(), tensors)
}

#[test]
fn golden_vectors_inspect_and_hash() {
    let dir = vectors();
    let (files, tensors) = check_folder(&dir);
    assert!(files >= 90, "only {files} top-level vectors");
    assert!(tensors >= files, "{tensors} tensors checked");
}

#[test]
fn decode_only_vectors_inspect() {
    let dir = vectors();
    let (files, _) = check_folder(&dir.join("decode_only"));
    assert!(files >= 9);
    let r = inspect_json(&dir.join("decode_only/v4_trailing_garbage.tenso"));
    assert_eq!(r["metadata"]["trailing_bytes"], 8);
}

#[test]
fn invalid_vectors_fail_with_exit_2() {
    let dir = vectors();
    let files = tenso_files(&dir.join("invalid"));
    assert!(files.len() >= 20);
    for f in &files {
        let stem = f.file_stem().unwrap().to_str().unwrap();
        let out = run(&["inspect", "--json", "--hash", f.to_str().unwrap()]);
        if stem == "compressed_bundle_emitted_by_tenso" {
            // tenso cannot read its own compressed bundles; tensorlane can.
            assert!(out.status.success(), "{stem}: {}", String::from_utf8_lossy(&out.stderr));
            let r: Value = serde_json::from_slice(&out.stdout).unwrap();
            let t = r["tensors"].as_array().unwrap();
            assert!(
                !t.is_empty() && t.iter().all(|t| t["attributes"]["compressed"] == true),
                "{r}"
            );
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "{stem} should fail with exit 2");
        assert!(out.stdout.is_empty(), "{stem}: nothing on stdout");
        let msg = String::from_utf8_lossy(&out.stderr);
        assert!(msg.starts_with("error: "), "{stem}: {msg}");
        assert!(msg.contains("file byte"), "{stem}: no offset in {msg}");
        if stem == "version_2_tenso_0_10" {
            assert!(msg.contains("version 2"), "{msg}");
        }
        if stem == "bundle_bad_utf8_key" || stem == "integrity_mismatch" || stem == "bad_magic" {
            assert!(msg.len() > 30, "{msg}");
        }
    }
}

#[test]
fn error_names_the_entry_path() {
    let dir = vectors();
    let mut bytes = std::fs::read(dir.join("bundle_integrity.tenso")).unwrap();
    let n = bytes.len();
    bytes[n - 9] ^= 0x55; // last body byte of the last entry
    let tmp = std::env::temp_dir().join(format!("tensorlane-cli-path-{}.tenso", std::process::id()));
    std::fs::write(&tmp, &bytes).unwrap();
    // The listing reads headers; the footer is checked where the body is read.
    for args in [&["inspect", "--hash"][..], &["verify"]] {
        let out = run(&[args, &[tmp.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let msg = String::from_utf8_lossy(&out.stderr);
        assert!(msg.contains("entry path: "), "{args:?}: {msg}");
        assert!(msg.contains("integrity"), "{args:?}: {msg}");
    }
    std::fs::remove_file(&tmp).ok();
}

#[test]
fn stream_files_list_every_packet() {
    let dir = vectors();
    let parts = [
        "dtype_float32.tenso",
        "bundle_nested.tenso",
        "sparse_csr_f64.tenso",
        "string_integrity.tenso",
    ];
    let mut bytes = Vec::new();
    for p in parts {
        bytes.extend(std::fs::read(dir.join(p)).unwrap());
    }
    let tmp = std::env::temp_dir().join(format!("tensorlane-cli-stream-{}.tenso", std::process::id()));
    std::fs::write(&tmp, &bytes).unwrap();
    let r = inspect_json(&tmp);
    std::fs::remove_file(&tmp).ok();
    assert_eq!(r["packets"], 4);
    let names: Vec<&str> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "#0");
    assert!(names.contains(&"#1/weights/w1"), "{names:?}");
    assert!(names.contains(&"#2") && names.contains(&"#3"), "{names:?}");
    let expected = sidecar(&dir.join("dtype_float32.tenso"));
    assert_eq!(r["tensors"][0]["sha256"], expected["expected"]["data_sha256"]);
}

#[test]
fn demo_and_sample() {
    let tmp = std::env::temp_dir().join(format!("tensorlane-cli-demo-{}.tenso", std::process::id()));
    let out = run(&["demo", "--json", "--hash", "--out", tmp.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    for k in ["dense", "quantized", "sparse", "string"] {
        assert!(kinds.contains(&k), "{kinds:?}");
    }
    // The written file inspects the same.
    let again = inspect_json(&tmp);
    std::fs::remove_file(&tmp).ok();
    assert_eq!(again["tensors"], r["tensors"]);
    let out = run(&["inspect", "--sample"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("weight_q"));
}

#[test]
fn unreadable_and_empty_files() {
    let out = run(&["inspect", "/nonexistent/tensorlane/x.tenso"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
    let tmp = std::env::temp_dir().join(format!("tensorlane-cli-empty-{}.tenso", std::process::id()));
    std::fs::write(&tmp, b"").unwrap();
    let out = run(&["inspect", tmp.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(&tmp, b"TNSO\x04\x01\x00\x01\x01\x00\xff\xff\xff\x00").unwrap();
    let out = run(&["inspect", tmp.to_str().unwrap()]);
    std::fs::remove_file(&tmp).ok();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("too short"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn each_subcommand_help_has_its_own_description() {
    let help = |cmd: &str| {
        let out = run(&[cmd, "--help"]);
        assert!(out.status.success(), "{cmd} --help: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let offload = help("offload");
    assert!(
        offload.starts_with("Plan, simulate and hazard-check streaming a model bigger than the GPU budget"),
        "{offload}"
    );
    assert!(!offload.contains("bundled sample"), "{offload}");
    let demo = help("demo");
    assert!(demo.starts_with("Write the bundled sample packet"), "{demo}");
}
