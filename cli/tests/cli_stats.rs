//! `tensorlane stats`: known values (worked out by hand as NumPy computes them: float64, ddof 0,
//! `numpy.histogram(range=(min, max))`), the same numbers from `.zt` as from the model it was
//! converted from, GGUF blocks against their dequantized float32 copy, the JSON shape, and the
//! exit codes for a missing tensor and a refused file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tensorlane_testkit as common;

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_tensorlane");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tl-cli-stats-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `w`: float32 [2, 4] = 1, 2, 3, 4, NaN, +Inf, -Inf, 0; `b`: bfloat16 [3] = 1, -2.5, 0.
fn known(dir: &Path) -> PathBuf {
    let w: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b: Vec<u8> = [0x3F80u16, 0xC020, 0x0000]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let views = vec![
        ("w", TensorView::new(Dtype::F32, vec![2, 4], &w).unwrap()),
        ("b", TensorView::new(Dtype::BF16, vec![3], &b).unwrap()),
    ];
    let p = dir.join("known.safetensors");
    std::fs::write(&p, safetensors::serialize(views, None).unwrap()).unwrap();
    p
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stats --json prints JSON")
}

fn expected() -> Value {
    json!([
        {"name": "w", "dtype": "float32", "shape": [2, 4], "count": 8,
         "min": 0.0, "max": 4.0, "mean": 2.0, "std": 2.0f64.sqrt(),
         "zeros": 1, "nan": 1, "pos_inf": 1, "neg_inf": 1,
         "histogram": {"edges": [0.0, 1.0, 2.0, 3.0, 4.0], "counts": [1, 1, 1, 2]}},
        {"name": "b", "dtype": "bfloat16", "shape": [3], "count": 3,
         "min": -2.5, "max": 1.0, "mean": -0.5, "std": (6.5f64 / 3.0).sqrt(),
         "zeros": 1, "nan": 0, "pos_inf": 0, "neg_inf": 0,
         "histogram": {"edges": [-2.5, -1.625, -0.75, 0.125, 1.0], "counts": [1, 0, 1, 1]}}
    ])
}

/// Equal, with floats compared to 1e-12 relative (the sums are exact here, `std` one sqrt).
fn assert_close(got: &Value, want: &Value, at: &str) {
    match (got, want) {
        (Value::Number(g), Value::Number(w)) if w.is_f64() || g.is_f64() => {
            let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{at}: {g} != {w}");
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{at}: length");
            for (i, (g, w)) in g.iter().zip(w).enumerate() {
                assert_close(g, w, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(g), Value::Object(w)) => {
            let gk: Vec<_> = g.keys().collect();
            let wk: Vec<_> = w.keys().collect();
            assert_eq!(gk, wk, "{at}: keys");
            for (k, w) in w {
                assert_close(&g[k], w, &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(got, want, "{at}"),
    }
}

#[test]
fn known_values_as_numpy_computes_them() {
    let d = scratch("known");
    let p = known(&d);
    let got = json_of(&run(&["stats", p.to_str().unwrap(), "w", "b", "--bins", "4", "--json"]));
    assert_close(&got, &expected(), "stats");
    // Names choose and order: one name, one object.
    let got = json_of(&run(&["stats", p.to_str().unwrap(), "b", "--bins", "4", "--json"]));
    assert_close(&got, &Value::Array(vec![expected()[1].clone()]), "stats b");
    // No names: every tensor, each once.
    let all = json_of(&run(&["stats", p.to_str().unwrap(), "--json"]));
    let mut names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b", "w"]);
    // The default is 64 bins.
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .all(|t| t["histogram"]["counts"].as_array().unwrap().len() == 64)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn table_has_one_row_per_tensor_and_a_sparkline() {
    let d = scratch("table");
    let p = known(&d);
    let out = run(&["stats", p.to_str().unwrap(), "w", "b", "--bins", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].ends_with("HISTOGRAM"),
        "{text}"
    );
    // w: counts 1, 1, 1, 2 (scaled to the fullest bin); b: 1, 0, 1, 1 (an empty bin is a dot).
    assert!(lines[1].starts_with("w ") && lines[1].ends_with("▄▄▄█"), "{text}");
    assert!(lines[2].starts_with("b ") && lines[2].ends_with("█·██"), "{text}");
    assert!(lines[1].contains("1.414214"), "std of w: {text}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn zt_gives_the_numbers_of_the_model_it_came_from() {
    let d = scratch("zt");
    let p = known(&d);
    let zt = d.join("known.zt");
    let out = run(&["convert", p.to_str().unwrap(), zt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = json_of(&run(&[
        "stats",
        zt.to_str().unwrap(),
        "w",
        "b",
        "--bins",
        "4",
        "--json",
    ]));
    assert_close(&got, &expected(), "stats of the .zt");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn gguf_blocks_match_their_dequantized_copy() {
    let d = scratch("gguf");
    let gguf = common::data("fixtures").join("gguf/tiny-llama.gguf");
    let st = d.join("deq.safetensors");
    let out = run(&["convert", gguf.to_str().unwrap(), st.to_str().unwrap(), "--dequantize"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Without --dequantize the blocks stay blocks in .zt (gguf.<type>/1): the same numbers again.
    let zt = d.join("blocks.zt");
    let out = run(&["convert", gguf.to_str().unwrap(), zt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in ["blk.0.attn_q.weight", "token_embd.weight"] {
        let z = json_of(&run(&["stats", zt.to_str().unwrap(), name, "--json"]));
        let q = json_of(&run(&["stats", gguf.to_str().unwrap(), name, "--json"]));
        let f = json_of(&run(&["stats", st.to_str().unwrap(), name, "--json"]));
        assert_eq!(z, q, "{name}: the .zt gguf object and the GGUF tensor");
        let (q, f) = (&q[0], &f[0]);
        assert_eq!(f["dtype"], "float32");
        assert_ne!(q["dtype"], "float32", "{name} is block-quantized in the GGUF file");
        for k in [
            "shape",
            "count",
            "min",
            "max",
            "zeros",
            "nan",
            "pos_inf",
            "neg_inf",
            "histogram",
        ] {
            assert_eq!(q[k], f[k], "{name}.{k}");
        }
        for k in ["mean", "std"] {
            let (a, b) = (q[k].as_f64().unwrap(), f[k].as_f64().unwrap());
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1e-30), "{name}.{k}: {a} vs {b}");
        }
        let counts: u64 = q["histogram"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(counts, q["count"].as_u64().unwrap(), "{name}: every value is in a bin");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn json_shape() {
    let d = scratch("shape");
    let p = known(&d);
    let got = json_of(&run(&["stats", p.to_str().unwrap(), "--json", "--bins", "3"]));
    let arr = got.as_array().expect("an array, one object per tensor");
    assert_eq!(arr.len(), 2);
    for t in arr {
        let mut keys: Vec<&str> = t.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        let mut want = [
            "name",
            "dtype",
            "shape",
            "count",
            "min",
            "max",
            "mean",
            "std",
            "zeros",
            "nan",
            "pos_inf",
            "neg_inf",
            "histogram",
        ];
        want.sort();
        assert_eq!(keys, want);
        let h = &t["histogram"];
        assert_eq!(h["edges"].as_array().unwrap().len(), 4);
        assert_eq!(h["counts"].as_array().unwrap().len(), 3);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn missing_tensor_and_bad_bins_exit_1_invalid_files_exit_2() {
    let d = scratch("errors");
    let p = known(&d);
    // Usage (a tensor the file does not have, a bin count out of range): exit 1.
    let out = run(&["stats", p.to_str().unwrap(), "w", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing printed for a partial selection");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"nope\""), "{err}");

    let out = run(&["stats", p.to_str().unwrap(), "--bins", "0"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));

    // A safetensors header that claims more bytes than the file has.
    let bad = d.join("bad.safetensors");
    std::fs::write(&bad, [0xff, 0, 0, 0, 0, 0, 0, 0, b'{', b'}']).unwrap();
    let out = run(&["stats", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));

    let out = run(&["stats", d.join("absent.safetensors").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "a file that cannot be read is I/O");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn legacy_zt_gives_the_numbers_of_its_v2_conversion() {
    let d = scratch("legacy");
    let v1 = common::data("fixtures").join("v1/v1-sample.zt");
    let v2 = d.join("v2.zt");
    let out = run(&["convert", v1.to_str().unwrap(), v2.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let a = json_of(&run(&["stats", v1.to_str().unwrap(), "--json", "--bins", "5"]));
    let b = json_of(&run(&["stats", v2.to_str().unwrap(), "--json", "--bins", "5"]));
    assert!(!a.as_array().unwrap().is_empty());
    assert_eq!(a, b);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn objects_stats_cannot_read_are_left_out_or_refused_when_named() {
    let f = common::data("fixtures").join("profiles-csr-quant-mx.zt");
    let out = run(&["stats", f.to_str().unwrap(), "--json"]);
    let all = json_of(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(all.as_array().unwrap().iter().all(|t| t["name"] != "csr"), "{all}");
    assert!(err.contains("\"csr\"") && err.contains("left out"), "{err}");
    let out = run(&["stats", f.to_str().unwrap(), "csr"]);
    assert_eq!(out.status.code(), Some(1), "a valid object stats cannot read");
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"csr\""));
}

/// Issue 21: a `.zt` converted from a safetensors file is the same model through the one path:
/// `stats --json` and `inspect --json --hash` give the same tensors, dtypes, shapes, bytes and
/// statistics on both (the `.zt` lists its objects in name order, so both are compared by name).
#[test]
fn a_zt_converted_from_safetensors_reads_like_the_safetensors_file() {
    let d = scratch("same-model");
    for st in [
        common::data("fixtures").join("sample.safetensors"),
        common::data("fixtures").join("safetensors/dtypes.safetensors"),
    ] {
        let zt = d.join("same.zt");
        let out = run(&["convert", st.to_str().unwrap(), zt.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let by_name = |v: Value| {
            let mut rows = v.as_array().unwrap().clone();
            rows.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            rows
        };
        let stats = |f: &Path| by_name(json_of(&run(&["stats", f.to_str().unwrap(), "--json", "--bins", "16"])));
        let (a, b) = (stats(&st), stats(&zt));
        assert!(!a.is_empty(), "{}", st.display());
        assert_eq!(a, b, "{}: stats", st.display());
        let inspect = |f: &Path| {
            let r = json_of(&run(&["inspect", "--json", "--hash", f.to_str().unwrap()]));
            by_name(r["tensors"].clone())
                .into_iter()
                .map(|t| json!([t["name"], t["kind"], t["dtype"], t["shape"], t["nbytes"], t["sha256"]]))
                .collect::<Vec<_>>()
        };
        let (a, b) = (inspect(&st), inspect(&zt));
        assert!(
            a.iter().all(|t| t[5].is_string()),
            "{}: every tensor hashed",
            st.display()
        );
        assert_eq!(a, b, "{}: inspect", st.display());
        std::fs::remove_file(&zt).unwrap();
    }
    std::fs::remove_dir_all(&d).unwrap();
}
