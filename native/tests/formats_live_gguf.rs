//! Live cross-check of the GGUF reader and ggml dequantization with the gguf Python package
//! (0.19.0, pinned in tests/python/formats_requirements.txt).
//!
//! `tests/python/formats_gen_gguf.py` writes, from a seed, a file with every type
//! `gguf.quants` can dequantize (quantized from float32 where the package can quantize, random
//! blocks for every block type), plain tensors and metadata of every value type; the same file as
//! GGUF v2; a big-endian file; a split set. It reports each tensor's stored-bytes sha256 and the
//! sha256 of `gguf.quants.dequantize`'s float32 output. Here every file is opened (splits through
//! `gguf::open_splits`), every tensor's bytes and every metadata value must match, and
//! `ggml::dequantize` must be bit-identical to the package.
//!
//! The seed is `GGUF_LIVE_SEED` or the clock (printed, so a failure can be replayed). The venv
//! comes from tests/python/setup_formats_venv.sh (`TENSORLANE_FORMATS_VENV` overrides its path);
//! the test skips only when `python3` is missing and `CI` is not `true`.

use tensorlane_testkit as common;

use common::sha256_hex as sha;
use std::path::Path;

use serde_json::Value as Json;
use tensorlane_core::formats::ggml::{self, GgmlType};
use tensorlane_core::formats::{self, Catalog, ElementType, ErrorKind, FormatError, Meta, gguf};

/// A reported metadata value (`{type, value[, bits]}`, arrays with `item_type`) as [`Meta`].
fn meta_of(e: &Json) -> Meta {
    let ty = e["type"].as_str().unwrap();
    let v = &e["value"];
    match ty {
        "UINT8" | "UINT16" | "UINT32" | "UINT64" => Meta::UInt(v.as_u64().unwrap()),
        "INT8" | "INT16" | "INT32" | "INT64" => Meta::Int(v.as_i64().unwrap()),
        "FLOAT32" | "FLOAT64" => Meta::Float(f64::from_bits(e["bits"].as_u64().unwrap())),
        "BOOL" => Meta::Bool(v.as_bool().unwrap()),
        "STRING" => Meta::Str(v.as_str().unwrap().into()),
        "ARRAY" => {
            let item = e["item_type"].as_str().unwrap();
            Meta::List(
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| {
                        if x.is_object() {
                            meta_of(x)
                        } else {
                            meta_of(&serde_json::json!({"type": item, "value": x}))
                        }
                    })
                    .collect(),
            )
        }
        other => panic!("unknown type {other}"),
    }
}

fn type_by_name(name: &str) -> GgmlType {
    GgmlType(
        ggml::TYPES
            .iter()
            .find(|e| e.1 == name)
            .unwrap_or_else(|| panic!("no ggml type {name}"))
            .0,
    )
}

fn open(dir: &Path, file: &str) -> Result<Catalog, FormatError> {
    let bytes = std::fs::read(dir.join(file)).unwrap();
    let cat = gguf::open(&bytes)?;
    gguf::open_splits(cat, file, &mut |name| {
        let b = std::fs::read(dir.join(name))
            .map_err(|e| FormatError::new("gguf", ErrorKind::Companion, format!("{name}: {e}")))?;
        gguf::open(&b)
    })
}

#[test]
fn gguf_package_files_read_and_dequantize_identically() {
    let Some(py) = common::venv_python("setup_formats_venv.sh", "gguf") else {
        return;
    };
    let seed = common::live_seed("GGUF_LIVE_SEED", 1_000_000);
    eprintln!("GGUF_LIVE_SEED={seed}");
    let dir = common::live_dir("tensorlane-gguf-live");
    let report = common::run_json(py, "formats_gen_gguf.py", &[dir.to_str().unwrap(), &seed.to_string()]);
    let mut dequantized = std::collections::BTreeSet::new();
    for f in report["files"].as_array().unwrap() {
        let file = f["file"].as_str().unwrap();
        let what = |s: &str| format!("seed {seed}, {file}: {s}");
        let cat = open(&dir, file).unwrap_or_else(|e| panic!("{}", what(&e.to_string())));
        let sources: Vec<Vec<u8>> = cat
            .sources
            .iter()
            .map(|s| std::fs::read(dir.join(if s.is_empty() { file } else { s })).unwrap())
            .collect();
        let srcs: Vec<&[u8]> = sources.iter().map(|s| &s[..]).collect();
        if let Some(n) = f["split_count"].as_u64() {
            assert_eq!(cat.sources.len() as u64, n, "{}", what("split sources"));
        }
        if let Some(meta) = f["metadata"].as_object() {
            assert_eq!(cat.metadata.len(), meta.len(), "{}", what("metadata count"));
            for (k, e) in meta {
                let got = &cat
                    .metadata
                    .iter()
                    .find(|(n, _)| n == k)
                    .unwrap_or_else(|| panic!("{}", what(k)))
                    .1;
                assert_eq!(got, &meta_of(e), "{}", what(k));
            }
        }
        let want = f["tensors"].as_array().unwrap();
        common::check_names(&what("tensors"), &cat, want);
        for (t, w) in cat.tensors.iter().zip(want) {
            let what = |s: &str| format!("seed {seed}, {file} / {}: {s}", t.name);
            let ty = type_by_name(w["ggml_type"].as_str().unwrap());
            assert_eq!(t.shape, common::json_shape(w), "{}", what("shape"));
            match t.ty {
                ElementType::Ggml(g) => assert_eq!(g, ty, "{}", what("type")),
                other => assert_eq!(other.name(), ElementType::Dense(dense(ty)).name(), "{}", what("type")),
            }
            let raw = formats::read("gguf", t, &srcs).unwrap_or_else(|e| panic!("{}", what(&e.to_string())));
            assert_eq!(sha(&raw), w["sha256"].as_str().unwrap(), "{}", what("stored bytes"));
            if let Some(d) = w["dequantized_sha256"].as_str() {
                let out = ggml::dequantize(ty, &raw).unwrap_or_else(|e| panic!("{}", what(&e.to_string())));
                let bytes: Vec<u8> = out.iter().flat_map(|x| x.to_le_bytes()).collect();
                assert_eq!(
                    sha(&bytes),
                    d,
                    "{}",
                    what("dequantized f32 differs from gguf.quants.dequantize")
                );
                dequantized.insert(ty.name());
            }
        }
    }
    // Every block type the package dequantizes was covered.
    for name in [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "TQ1_0", "TQ2_0", "IQ2_XXS",
        "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "MXFP4", "NVFP4", "F32", "F16",
        "BF16",
    ] {
        assert!(dequantized.contains(name), "seed {seed}: {name} was not cross-checked");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn dense(ty: GgmlType) -> tensorlane_core::DType {
    use tensorlane_core::DType;
    match ty.name() {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F64" => DType::F64,
        "I8" => DType::I8,
        "I16" => DType::I16,
        "I32" => DType::I32,
        "I64" => DType::I64,
        other => panic!("{other} is not dense"),
    }
}
