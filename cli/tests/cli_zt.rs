//! The `tensorlane` binary on `.zt`: `inspect`, `verify` and `convert` over every `.zt` fixture
//! (`tests/data/fixtures`, v2 and `v1/`), the conformance corpus (`tests/data/conformance/zt`) and
//! the Tenso golden vectors (`tests/data/vectors/tenso`).

use common::data;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tensorlane_testkit as common;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn inspect_json(path: &Path) -> Value {
    let out = run(&["inspect", "--json", "--hash", p(path)]);
    assert!(
        out.status.success(),
        "inspect {} failed: {}",
        path.display(),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-cli-zt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn zt_entries(fixtures: &Path) -> Vec<Value> {
    let m: Value = serde_json::from_str(&std::fs::read_to_string(fixtures.join("manifest.json")).unwrap()).unwrap();
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["format"] == "zt" || f["format"] == "zt-v1")
        .cloned()
        .collect()
}

/// Checks an inspect report against the manifest's tensors (names in order, dtype, shape, sha256;
/// per part for non-dense objects). Returns the number of digests compared.
fn check_tensors(report: &Value, expected: &[Value], ctx: &str) -> usize {
    let got = report["tensors"].as_array().unwrap();
    let names: Vec<&str> = got.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let want: Vec<&str> = expected.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, want, "{ctx}: object names");
    let mut n = 0;
    for (g, w) in got.iter().zip(expected) {
        let name = w["name"].as_str().unwrap();
        assert_eq!(g["shape"], w["shape"], "{ctx} {name}: shape");
        if w["dtype"].is_string() {
            assert_eq!(g["dtype"], w["dtype"], "{ctx} {name}: dtype");
            assert_eq!(g["nbytes"], w["nbytes"], "{ctx} {name}: nbytes");
            assert_eq!(g["sha256"], w["sha256"], "{ctx} {name}: sha256");
            n += 1;
        }
        if let Some(parts) = w["parts"].as_object() {
            let gp = g["parts"].as_array().unwrap();
            assert_eq!(gp.len(), parts.len(), "{ctx} {name}: parts");
            for (pn, pw) in parts {
                let pg = gp
                    .iter()
                    .find(|x| x["name"] == pn.as_str())
                    .unwrap_or_else(|| panic!("{ctx} {name}: no part {pn}"));
                assert_eq!(pg["dtype"], pw["dtype"], "{ctx} {name}.{pn}: dtype");
                assert_eq!(pg["nbytes"], pw["nbytes"], "{ctx} {name}.{pn}: nbytes");
                assert_eq!(pg["sha256"], pw["sha256"], "{ctx} {name}.{pn}: sha256");
                let logical = pw["logical"].as_str();
                assert_eq!(pg["type"].as_str(), logical, "{ctx} {name}.{pn}: logical type");
                n += 1;
            }
        }
    }
    n
}

#[test]
fn fixtures_inspect_like_the_manifest() {
    let dir = data("fixtures");
    let entries = zt_entries(&dir);
    assert_eq!(entries.len(), 11, "9 .zt v2 and 2 v1 fixtures");
    let mut digests = 0;
    for e in &entries {
        let file = dir.join(e["file"].as_str().unwrap());
        let r = inspect_json(&file);
        let ctx = file.display().to_string();
        assert_eq!(r["format"], e["format"], "{ctx}");
        assert_eq!(r["bytes"], e["size"], "{ctx}");
        assert_eq!(r["packets"], 0, "{ctx}");
        match e["expect"].as_str().unwrap() {
            "read" => digests += check_tensors(&r, e["tensors"].as_array().unwrap(), &ctx),
            "no-tensors" => {
                assert_eq!(r["tensors"].as_array().unwrap().len(), 0, "{ctx}");
                assert_eq!(r["zt"]["data_shard"], true, "{ctx}");
            }
            other => panic!("{ctx}: unexpected expectation {other}"),
        }
        // The table form works too.
        let out = run(&["inspect", p(&file)]);
        assert!(out.status.success(), "{ctx}: {}", stderr(&out));
    }
    assert!(digests >= 30, "{digests}");
}

#[test]
fn sharded_inspect_resolves_shards_next_to_the_root() {
    let dir = data("fixtures");
    let r = inspect_json(&dir.join("sharded.zt"));
    let shards = r["zt"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2);
    for s in shards {
        let f = s["file"].as_str().unwrap();
        assert!(
            f.ends_with(&format!("sharded-{}.zt", s["name"].as_str().unwrap())),
            "{f}"
        );
    }
    let w = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "layer.weight")
        .unwrap();
    assert_eq!(w["parts"][0]["shard"], "00001");
    assert!(r.get("warnings").is_none(), "{r}");
    // Without its shards next to it the root still inspects; the parts are reported unhashed.
    let tmp = temp_dir("lonely");
    let root = tmp.join("sharded.zt");
    std::fs::copy(dir.join("sharded.zt"), &root).unwrap();
    let r = inspect_json(&root);
    assert_eq!(r["warnings"].as_array().unwrap().len(), 4, "{r}");
    let out = run(&["verify", "--deep", p(&root)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("no file found"), "{}", stderr(&out));
    // A shard that resolves to the wrong file is a ShardIdentity rejection.
    std::fs::copy(dir.join("sharded-00001.zt"), tmp.join("sharded-data.zt")).unwrap();
    std::fs::copy(dir.join("sharded-00001.zt"), tmp.join("sharded-00001.zt")).unwrap();
    let out = run(&["verify", "--deep", p(&root)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("ShardIdentity"), "{}", stderr(&out));
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn fixtures_verify_deep_and_canonical() {
    let dir = data("fixtures");
    let canonical = [
        "basic-canonical.zt",
        "basic-canonical-numpy-shim.zt",
        "profiles-csr-quant-mx.zt",
        "from-safetensors.zt",
        "sharded-00001.zt",
    ];
    let not_canonical = [
        ("compressed-zstd-seekable.zt", "rule 4"),
        ("appended.zt", "rule"),
        ("sharded.zt", "rule 6"),
        ("sharded-data.zt", "rule 1"),
        ("v1/v1-sample.zt", "legacy"),
        ("v1/v1-csr.zt", "legacy"),
    ];
    for e in zt_entries(&dir) {
        let f = dir.join(e["file"].as_str().unwrap());
        let out = run(&["verify", "--deep", p(&f)]);
        assert!(out.status.success(), "{}: {}", f.display(), stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("ok"), "{}", f.display());
    }
    let out = run(&["verify", "--deep", p(&dir.join("sharded.zt"))]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 shard file digests verified"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for f in canonical {
        let out = run(&["verify", "--canonical", p(&dir.join(f))]);
        assert!(out.status.success(), "{f} is canonical: {}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("canonical"), "{f}");
    }
    for (f, why) in not_canonical {
        let out = run(&["verify", "--canonical", "--deep", p(&dir.join(f))]);
        assert_eq!(out.status.code(), Some(2), "{f} is not canonical");
        let msg = stderr(&out);
        assert!(msg.contains("Canonical") && msg.contains(why), "{f}: {msg}");
    }
}

#[test]
fn conformance_corpus() {
    let dir = data("conformance/zt");
    let ex: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("expectations.json")).unwrap()).unwrap();
    let cases = ex["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 76);
    let (mut valid, mut rejected) = (0, 0);
    for c in cases {
        let file = dir.join(c["file"].as_str().unwrap());
        let expect = c["expect"].as_str().unwrap();
        let ctx = format!("{} ({expect})", file.display());
        let verify = run(&["verify", p(&file)]);
        if let Some(rule) = expect.strip_prefix("reject:") {
            // verify names the rule (and where), with exit 2.
            assert_eq!(verify.status.code(), Some(2), "{ctx}: {}", stderr(&verify));
            let msg = stderr(&verify);
            assert!(msg.contains(&format!(": {rule}: ")), "{ctx}: {msg}");
            if c["op"] != "open" {
                assert!(
                    msg.contains(&format!("object {:?}", c["object"].as_str().unwrap())),
                    "{ctx}: {msg}"
                );
                assert!(msg.contains("at byte"), "{ctx}: {msg}");
                // The image itself is valid: inspect lists it.
                inspect_json(&file);
            } else {
                let inspect = run(&["inspect", "--json", p(&file)]);
                assert_eq!(inspect.status.code(), Some(2), "{ctx}");
                if rule != "FileTooSmall" {
                    assert!(
                        stderr(&inspect).contains(&format!(": {rule}: ")),
                        "{ctx}: {}",
                        stderr(&inspect)
                    );
                }
            }
            rejected += 1;
        } else {
            // valid/ inspects (and hashes) fine.
            let r = inspect_json(&file);
            assert_eq!(r["format"], "zt", "{ctx}");
            assert_eq!(
                r["zt"]["data_shard"].as_bool().unwrap_or(false),
                expect == "data_shard",
                "{ctx}"
            );
            let code = verify.status.code();
            match file.file_stem().unwrap().to_str().unwrap() {
                // Metadata-valid only (§17.3): its filler bytes break the f4 odd-nibble rule.
                "f4-packed-odd-count" => assert!(code == Some(2) && stderr(&verify).contains("LayoutData"), "{ctx}"),
                // Valid, but the encoding is unknown: not a rejection.
                "view-unknown-encoding-refused" => {
                    assert!(code == Some(1) && stderr(&verify).contains("Unsupported"), "{ctx}")
                }
                _ => assert_eq!(code, Some(0), "{ctx}: {}", stderr(&verify)),
            }
            valid += 1;
        }
    }
    assert_eq!((valid, rejected), (19, 57));
}

#[test]
fn convert_v1_to_v2_is_canonical_and_keeps_the_data() {
    let dir = data("fixtures");
    let tmp = temp_dir("v1");
    for e in zt_entries(&dir).iter().filter(|e| e["format"] == "zt-v1") {
        let src = dir.join(e["file"].as_str().unwrap());
        let out_path = tmp.join("out.zt");
        let out = run(&["convert", p(&src), p(&out_path)]);
        assert!(out.status.success(), "{}: {}", src.display(), stderr(&out));
        let v = run(&["verify", "--canonical", "--deep", p(&out_path)]);
        assert!(v.status.success(), "{}: {}", src.display(), stderr(&v));
        let r = inspect_json(&out_path);
        assert_eq!(r["format"], "zt");
        let ctx = format!("{} -> v2", src.display());
        // The v2 file holds the same data; v1 layout names become v2 ids.
        let got = r["tensors"].as_array().unwrap();
        for w in e["tensors"].as_array().unwrap() {
            let g = got.iter().find(|t| t["name"] == w["name"]).unwrap();
            assert_eq!(g["shape"], w["shape"], "{ctx}");
            if w["dtype"].is_string() {
                assert_eq!(g["dtype"], w["dtype"], "{ctx}");
                assert_eq!(g["sha256"], w["sha256"], "{ctx}");
            } else {
                assert_eq!(g["layout"], "zt.sparse_csr/1", "{ctx}");
                for (pn, pw) in w["parts"].as_object().unwrap() {
                    let pg = g["parts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|x| x["name"] == pn.as_str())
                        .unwrap();
                    assert_eq!(pg["sha256"], pw["sha256"], "{ctx} {pn}");
                }
            }
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// name -> (dtype, shape, sha256) of every dense tensor of an inspect report.
fn dense_map(r: &Value) -> Vec<(String, Value, Value, Value)> {
    let mut v: Vec<_> = r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["dtype"].clone(),
                t["shape"].clone(),
                t["sha256"].clone(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn convert_tenso_to_zt_and_back() {
    let dir = data("vectors/tenso");
    let tmp = temp_dir("tenso");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tenso"))
        .collect();
    files.sort();
    let (mut round_trips, mut refused, mut csr) = (0, 0, 0);
    for f in &files {
        let zt = tmp.join("x.zt");
        let back = tmp.join("x.tenso");
        let out = run(&["convert", p(f), p(&zt)]);
        if !out.status.success() {
            // COO/CSC sparse, quantized (without --quantized) and string packets have no .zt form
            // here, and an empty bundle key is no .zt name: a clear refusal of valid input (exit 1).
            assert_eq!(out.status.code(), Some(1), "{}: {}", f.display(), stderr(&out));
            let msg = stderr(&out);
            assert!(
                msg.contains("dense tensors") || msg.contains("refused (Name)") || msg.contains("--quantized"),
                "{}: {msg}",
                f.display()
            );
            refused += 1;
            continue;
        }
        let v = run(&["verify", "--canonical", p(&zt)]);
        assert!(v.status.success(), "{}: {}", f.display(), stderr(&v));
        let z = inspect_json(&zt);
        if let Some(s) = z["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["layout"] == "zt.sparse_csr/1")
        {
            // A CSR matrix becomes zt.sparse_csr/1 with the packet's components as its parts
            // (Tenso's `data` is the layout's `values`); Tenso bundles hold no such object.
            let a = inspect_json(f);
            let packet = a["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == s["name"])
                .unwrap();
            for (component, part) in [("data", "values"), ("indices", "indices"), ("indptr", "indptr")] {
                let sha = |v: &Value, key: &str, name: &str| {
                    v[key].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()["sha256"].clone()
                };
                assert_eq!(
                    sha(packet, "parts", if component == "data" { "values" } else { component }),
                    sha(s, "parts", part),
                    "{}: {component}",
                    f.display()
                );
            }
            csr += 1;
            continue;
        }
        let out = run(&["convert", p(&zt), p(&back)]);
        assert!(out.status.success(), "{}: {}", f.display(), stderr(&out));
        let (a, z, b) = (inspect_json(f), inspect_json(&zt), inspect_json(&back));
        assert_eq!(dense_map(&a), dense_map(&b), "{}: packet -> zt -> packet", f.display());
        assert_eq!(dense_map(&a), dense_map(&z), "{}: packet -> zt", f.display());
        round_trips += 1;
    }
    assert!(round_trips >= 20, "{round_trips} round trips");
    assert!(refused >= 1, "{refused} refusals");
    assert!(csr >= 2, "{csr} CSR matrices converted");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn convert_zt_to_tenso_and_back() {
    let dir = data("fixtures");
    let tmp = temp_dir("zt");
    for f in [
        "basic-canonical.zt",
        "compressed-zstd-seekable.zt",
        "appended.zt",
        "sharded.zt",
        "from-safetensors.zt",
    ] {
        let src = dir.join(f);
        let (t, z) = (tmp.join("a.tenso"), tmp.join("b.zt"));
        let out = run(&["convert", p(&src), p(&t)]);
        assert!(out.status.success(), "{f}: {}", stderr(&out));
        let out = run(&["convert", p(&t), p(&z)]);
        assert!(out.status.success(), "{f}: {}", stderr(&out));
        assert!(run(&["verify", "--canonical", p(&z)]).status.success(), "{f}");
        assert_eq!(dense_map(&inspect_json(&src)), dense_map(&inspect_json(&z)), "{f}");
        assert_eq!(dense_map(&inspect_json(&src)), dense_map(&inspect_json(&t)), "{f}");
    }
    // .zt -> canonical .zt keeps every object, attributes included.
    let out = run(&[
        "convert",
        "--to",
        "zt",
        p(&dir.join("compressed-zstd-seekable.zt")),
        p(&tmp.join("c.zt")),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run(&["verify", "--canonical", p(&tmp.join("c.zt"))]).status.success());
    // What Tenso cannot hold is refused with a clear message, and nothing is left behind.
    let out = run(&[
        "convert",
        p(&dir.join("profiles-csr-quant-mx.zt")),
        p(&tmp.join("p.tenso")),
    ]);
    assert_eq!(out.status.code(), Some(1), "valid input the target cannot represent");
    assert!(
        stderr(&out).contains("zt.sparse_csr/1") && stderr(&out).contains("dense"),
        "{}",
        stderr(&out)
    );
    assert!(!tmp.join("p.tenso").exists());
    // The input format comes from the magic, not the name.
    let disguised = tmp.join("model.tenso");
    std::fs::copy(dir.join("basic-canonical.zt"), &disguised).unwrap();
    assert_eq!(inspect_json(&disguised)["format"], "zt");
    std::fs::remove_dir_all(&tmp).unwrap();
}
