//! The `tensorlane` binary on the foreign model formats, against `tests/data/fixtures/manifest.json`:
//!
//! * `read_fixtures_inspect_like_the_manifest`: `inspect --json --hash` of every `read` fixture
//!   lists exactly the manifest's tensors (names in order, dtype, shape, nbytes, sha256); the
//!   table prints too.
//! * `reject_fixtures_fail_with_the_reason`: every `reject` fixture exits non-zero, prints nothing
//!   on stdout and a format error (format, kind) on stderr; the companion refusals that `Model`
//!   itself makes (ONNX external data outside the folder or past its end) are named.
//! * `convert_fixtures_to_zt_and_safetensors`: every readable fixture converts to `.zt` (read back
//!   with tensorlane's `.zt` reader) and to `.safetensors` (read back with the `safetensors` crate
//!   and with tensorlane), with identical bytes; ggml blocks stay blocks in `.zt`
//!   (`gguf.<type>/1`) and dequantize to the manifest's float32 with `--dequantize`.
//! * `companions_missing_or_escaping_are_refused`: ONNX external data that is missing, or a
//!   symlink leading out of the model's folder, is refused with the file's name.
//! * `gguf_splits_are_joined_from_the_first_file`: hand-built `-0000N-of-00002.gguf` splits read
//!   and convert as one model from the first file; a missing split is named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tensorlane_testkit as common;

use serde_json::Value;
use sha2::{Digest, Sha256};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");
const KINDS: [&str; 16] = [
    "truncated",
    "header-too-large",
    "syntax",
    "unsupported-version",
    "unsupported",
    "out-of-bounds",
    "overlap",
    "gap",
    "size-mismatch",
    "duplicate",
    "overflow",
    "limit",
    "refused",
    "companion",
    "checksum",
    "io",
];

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn p(x: &Path) -> &str {
    x.to_str().unwrap()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-cli-formats-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fixtures folder and the manifest entries of the model formats.
fn manifest() -> (PathBuf, Vec<Value>) {
    let dir = common::data("fixtures");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let files = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| common::MODEL_FORMATS.contains(&f["format"].as_str().unwrap()))
        .cloned()
        .collect();
    (dir, files)
}

fn shape(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect()
}

#[test]
fn read_fixtures_inspect_like_the_manifest() {
    let (dir, files) = manifest();
    let mut checked = 0;
    for f in files.iter().filter(|f| f["expect"] == "read") {
        let file = f["file"].as_str().unwrap();
        let path = dir.join(file);
        let out = run(&["inspect", "--json", "--hash", p(&path)]);
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let got = r["tensors"].as_array().unwrap();
        let want = f["tensors"].as_array().unwrap();
        let names = |v: &[Value]| {
            v.iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(got), names(want), "{file}: tensor names in order");
        for (g, w) in got.iter().zip(want) {
            let what = format!("{file} / {}", w["name"]);
            assert_eq!(g["dtype"], w["dtype"], "{what}: dtype");
            assert_eq!(shape(&g["shape"]), shape(&w["shape"]), "{what}: shape");
            assert_eq!(g["nbytes"], w["nbytes"], "{what}: nbytes");
            assert_eq!(g["sha256"], w["sha256"], "{what}: sha256");
            let quantized = w["quantized"].as_bool().unwrap_or(false);
            assert_eq!(g["kind"], if quantized { "quantized" } else { "dense" }, "{what}: kind");
        }
        assert_eq!(r["bytes"].as_u64(), f["size"].as_u64(), "{file}: size");
        // The human table names every tensor.
        let out = run(&["inspect", p(&path)]);
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        let table = String::from_utf8_lossy(&out.stdout);
        for n in names(want) {
            assert!(table.contains(&n), "{file}: {n} missing from the table:\n{table}");
        }
        checked += 1;
    }
    eprintln!("read fixtures: {checked} checked");
}

#[test]
fn reject_fixtures_fail_with_the_reason() {
    let (dir, files) = manifest();
    // Refusals `Model` makes itself, with the error kind it must give.
    let own: BTreeMap<&str, &str> = [
        ("onnx/hostile/external-path-traversal.onnx", "refused"),
        ("onnx/hostile/external-out-of-bounds.onnx", "out-of-bounds"),
    ]
    .into();
    let mut checked = 0;
    for f in files.iter().filter(|f| f["expect"] == "reject") {
        let file = f["file"].as_str().unwrap();
        let format = f["format"].as_str().unwrap();
        let out = run(&["inspect", "--json", "--hash", p(&dir.join(file))]);
        let msg = stderr(&out);
        // 2: invalid; 1: valid but beyond this reader (an unknown version, an unsupported dtype).
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{file}: must be refused: {msg}"
        );
        assert!(out.stdout.is_empty(), "{file}: printed a report");
        let kind = KINDS
            .iter()
            .find(|k| msg.contains(&format!("[{k}]")))
            .unwrap_or_else(|| panic!("{file}: no error kind in {msg:?}"));
        assert!(msg.contains(format), "{file}: the format is not named: {msg}");
        if let Some(want) = own.get(file) {
            assert_eq!(kind, want, "{file}: {msg}");
        }
        checked += 1;
    }
    eprintln!("reject fixtures: {checked} checked");
}

/// sha256 of bytes as lowercase hex.
fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// The NumPy name of a safetensors dtype.
fn st_numpy(d: safetensors::Dtype) -> &'static str {
    use safetensors::Dtype as D;
    match d {
        D::BOOL => "bool",
        D::F4 => "float4_e2m1fn",
        D::U8 => "uint8",
        D::I8 => "int8",
        D::F8_E5M2 => "float8_e5m2",
        D::F8_E4M3 => "float8_e4m3fn",
        D::F8_E8M0 => "float8_e8m0fnu",
        D::F8_E4M3FNUZ => "float8_e4m3fnuz",
        D::F8_E5M2FNUZ => "float8_e5m2fnuz",
        D::I16 => "int16",
        D::U16 => "uint16",
        D::F16 => "float16",
        D::BF16 => "bfloat16",
        D::I32 => "int32",
        D::U32 => "uint32",
        D::F32 => "float32",
        D::C64 => "complex64",
        D::F64 => "float64",
        D::I64 => "int64",
        D::U64 => "uint64",
        other => panic!("unexpected dtype {other:?}"),
    }
}

/// `(dtype, shape, sha256)` per name, as the manifest expects them after conversion: quantized
/// tensors as float32 when dequantized.
fn expected(f: &Value, dequantized: bool) -> BTreeMap<String, (String, Vec<u64>, String)> {
    f["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_string();
            if dequantized && t["quantized"].as_bool().unwrap_or(false) {
                let d = &t["dequantized"];
                (
                    name,
                    (
                        "float32".into(),
                        shape(&d["shape"]),
                        d["sha256"].as_str().unwrap().into(),
                    ),
                )
            } else {
                let dtype = t["dtype"].as_str().unwrap().into();
                (name, (dtype, shape(&t["shape"]), t["sha256"].as_str().unwrap().into()))
            }
        })
        .collect()
}

/// What tensorlane's `inspect --json --hash` reports for a converted file, in the same form
/// (a `gguf.<type>/1` object: the ggml type, its `data` part's hash).
fn reported(path: &Path) -> BTreeMap<String, (String, Vec<u64>, String)> {
    let out = run(&["inspect", "--json", "--hash", p(path)]);
    assert!(out.status.success(), "{}: {}", path.display(), stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    r["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_string();
            let layout = t["layout"].as_str().unwrap_or("dense");
            let entry = match layout.strip_prefix("gguf.").and_then(|l| l.strip_suffix("/1")) {
                Some(ty) => {
                    let part = &t["parts"][0];
                    (
                        ty.to_ascii_uppercase(),
                        shape(&t["shape"]),
                        part["sha256"].as_str().unwrap().into(),
                    )
                }
                None => (
                    t["dtype"].as_str().unwrap().into(),
                    shape(&t["shape"]),
                    t["sha256"].as_str().unwrap_or("").into(),
                ),
            };
            (name, entry)
        })
        .collect()
}

/// The same, read with the `safetensors` crate.
fn read_with_safetensors_crate(path: &Path) -> BTreeMap<String, (String, Vec<u64>, String)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            let shape = v.shape().iter().map(|&d| d as u64).collect();
            (n, (st_numpy(v.dtype()).to_string(), shape, sha(v.data())))
        })
        .collect()
}

#[test]
fn convert_fixtures_to_zt_and_safetensors() {
    let (dir, files) = manifest();
    let tmp = temp_dir("convert");
    let mut checked = 0;
    let (mut blocks, mut dequantized) = (0, 0);
    for f in files.iter().filter(|f| f["expect"] == "read") {
        let file = f["file"].as_str().unwrap();
        let src = dir.join(file);
        let quantized = f["tensors"].as_array().unwrap().iter().any(|t| t["quantized"] == true);
        let (zt, st) = (tmp.join("out.zt"), tmp.join("out.safetensors"));
        // .zt: ggml blocks stay blocks where the .zt gguf layouts have the type.
        let out = run(&["convert", p(&src), p(&zt)]);
        let zt_dequantized = !out.status.success();
        if zt_dequantized {
            let msg = stderr(&out);
            assert!(quantized && msg.contains("--dequantize"), "{file} -> .zt: {msg}");
            assert_eq!(
                out.status.code(),
                Some(1),
                "{file}: valid input the target cannot represent"
            );
            assert!(!zt.exists(), "{file}: a refused conversion left a file");
            let out = run(&["convert", "--dequantize", p(&src), p(&zt)]);
            assert!(out.status.success(), "{file} -> .zt --dequantize: {}", stderr(&out));
            dequantized += 1;
        } else if quantized {
            blocks += 1;
        }
        assert!(
            run(&["verify", "--canonical", p(&zt)]).status.success(),
            "{file}: .zt not canonical"
        );
        assert_eq!(reported(&zt), expected(f, zt_dequantized), "{file} -> .zt");

        // .safetensors: ggml blocks need --dequantize.
        let mut args = vec!["convert", p(&src), p(&st)];
        if quantized {
            let out = run(&args);
            // Valid input the target cannot represent: exit 1 (the tool's exit-code rule).
            assert_eq!(out.status.code(), Some(1), "{file} -> .safetensors must refuse blocks");
            assert!(stderr(&out).contains("--dequantize"), "{file}: {}", stderr(&out));
            assert!(!st.exists(), "{file}: a refused conversion left a file");
            args.insert(1, "--dequantize");
        }
        let out = run(&args);
        assert!(out.status.success(), "{file} -> .safetensors: {}", stderr(&out));
        let want = expected(f, quantized);
        assert_eq!(
            read_with_safetensors_crate(&st),
            want,
            "{file} -> .safetensors (safetensors crate)"
        );
        assert_eq!(reported(&st), want, "{file} -> .safetensors (tensorlane)");
        // And back from .zt to safetensors: the same tensors.
        let st2 = tmp.join("again.safetensors");
        let out = run(&["convert", p(&zt), p(&st2)]);
        if zt_dequantized || !quantized {
            assert!(out.status.success(), "{file} -> .zt -> .safetensors: {}", stderr(&out));
            assert_eq!(
                read_with_safetensors_crate(&st2),
                expected(f, zt_dequantized),
                "{file} -> .zt -> .safetensors"
            );
        } else {
            assert_eq!(
                out.status.code(),
                Some(1),
                "{file}: gguf blocks have no safetensors form"
            );
        }
        for x in [&zt, &st, &st2] {
            let _ = std::fs::remove_file(x);
        }
        checked += 1;
    }
    eprintln!("conversions: {checked} checked");
    assert!(
        blocks > 0 && dequantized > 0,
        "gguf: {blocks} kept as blocks, {dequantized} dequantized"
    );
    // A file the safetensors library wrote comes back byte for byte.
    let lib = dir.join("safetensors/dtypes.safetensors");
    let out = run(&["convert", p(&lib), p(&tmp.join("d.safetensors"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(tmp.join("d.safetensors")).unwrap(),
        std::fs::read(&lib).unwrap(),
        "safetensors -> safetensors is the library's own bytes"
    );
    // The target comes from --to over the extension.
    let out = run(&["convert", "--to", "safetensors", p(&lib), p(&tmp.join("d.bin"))]);
    assert!(out.status.success(), "{}", stderr(&out));
    read_with_safetensors_crate(&tmp.join("d.bin"));
    let out = run(&["convert", p(&lib), p(&tmp.join("d.tenso"))]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not supported"), "{}", stderr(&out));
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn companions_missing_or_escaping_are_refused() {
    let (dir, _) = manifest();
    let tmp = temp_dir("companions");
    let model = tmp.join("model");
    std::fs::create_dir_all(&model).unwrap();
    let onnx = model.join("external.onnx");
    std::fs::copy(dir.join("onnx/external.onnx"), &onnx).unwrap();
    // Missing: refused, naming the file.
    let out = run(&["inspect", p(&onnx)]);
    let msg = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(
        msg.contains("external.onnx.data") && msg.contains("[companion]"),
        "{msg}"
    );
    // A symlink that leads out of the model's folder: refused.
    let outside = tmp.join("external.onnx.data");
    std::fs::copy(dir.join("onnx/external.onnx.data"), &outside).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&outside, model.join("external.onnx.data")).unwrap();
        let out = run(&["inspect", p(&onnx)]);
        let msg = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{msg}");
        assert!(msg.contains("outside") && msg.contains("[refused]"), "{msg}");
        std::fs::remove_file(model.join("external.onnx.data")).unwrap();
    }
    // In place: it reads.
    std::fs::rename(&outside, model.join("external.onnx.data")).unwrap();
    let out = run(&["inspect", "--json", "--hash", p(&onnx)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["sources"][0]["name"], "external.onnx.data", "{r}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A little GGUF v3 file: `split.no` / `split.count` metadata and f32 tensors of 8 values each.
fn gguf_split(no: u16, count: u16, tensors: &[(&str, [f32; 8])]) -> Vec<u8> {
    let s = |b: &mut Vec<u8>, t: &str| {
        b.extend_from_slice(&(t.len() as u64).to_le_bytes());
        b.extend_from_slice(t.as_bytes());
    };
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&2u64.to_le_bytes());
    for (key, v) in [("split.no", no), ("split.count", count)] {
        s(&mut b, key);
        b.extend_from_slice(&2u32.to_le_bytes()); // UINT16
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (i, (name, _)) in tensors.iter().enumerate() {
        s(&mut b, name);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&8u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // F32
        b.extend_from_slice(&(32 * i as u64).to_le_bytes());
    }
    b.resize(b.len().next_multiple_of(32), 0);
    for (_, v) in tensors {
        b.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    }
    b
}

#[test]
fn gguf_splits_are_joined_from_the_first_file() {
    let tmp = temp_dir("splits");
    let first = tmp.join("m-00001-of-00002.gguf");
    let second = tmp.join("m-00002-of-00002.gguf");
    let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let b = [-1.0f32; 8];
    std::fs::write(&first, gguf_split(0, 2, &[("a", a)])).unwrap();
    std::fs::write(&second, gguf_split(1, 2, &[("b", b)])).unwrap();
    let out = run(&["inspect", "--json", "--hash", p(&first)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bytes = |v: &[f32; 8]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    assert_eq!(r["tensors"][0]["name"], "a");
    assert_eq!(r["tensors"][0]["sha256"], sha(&bytes(&a)));
    assert_eq!(r["tensors"][1]["name"], "b");
    assert_eq!(r["tensors"][1]["sha256"], sha(&bytes(&b)));
    assert_eq!(r["tensors"][1]["source"], "m-00002-of-00002.gguf");
    assert_eq!(r["sources"][0]["name"], "m-00002-of-00002.gguf");
    // Converted as one model.
    let st = tmp.join("joined.safetensors");
    let out = run(&["convert", p(&first), p(&st)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got = read_with_safetensors_crate(&st);
    assert_eq!(got["a"].2, sha(&bytes(&a)));
    assert_eq!(got["b"].2, sha(&bytes(&b)));
    // A missing split is named.
    std::fs::remove_file(&second).unwrap();
    let out = run(&["inspect", p(&first)]);
    let msg = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{msg}");
    assert!(
        msg.contains("m-00002-of-00002.gguf") && msg.contains("[companion]"),
        "{msg}"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}
