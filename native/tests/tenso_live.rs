//! Live cross-check with the real tenso 0.24.0 from PyPI (tests/python/).
//!
//! * `tenso_packets_decode_in_tensorlane`: tenso_gen.py writes random packets of every kind;
//!   tensorlane decodes each to exactly what the manifest says, re-encodes it to tenso's bytes, and
//!   reproduces tenso's `QuantizedTensor.quantize` packets byte for byte from the same float32 input.
//! * `tensorlane_packets_load_in_tenso`: tensorlane writes random packets of every kind (dtypes,
//!   ranks, integrity, compression, alignments, quantize(), strings, uncompressed bundles, sparse);
//!   tenso_check.py loads them with tenso and checks values, tenso's own quantize() bytes and
//!   tenso's re-encoding.
//! * `compressed_bundles_and_sparse_integrity`: a bundle encoded with `compress` decodes in
//!   tensorlane but tenso refuses it (tenso's bug, spec §9.4/§21.1); with
//!   `compress_in_containers: false` tenso reads it. Sparse components with integrity footers
//!   (`sparse_integrity: true`, spec §21.12) are checked against tenso too.
//!
//! The venv comes from tests/python/setup_venv.sh (tests/.venv, pinned versions). The tests skip
//! only when `python3` is missing and `CI` is not `true`; in CI every setup failure fails.

use common::root;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use tensorlane_testkit as common;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tensorlane_core::wire::{
    self, Bundle, EncodeOptions, Packet, QDType, QuantizeParams, Quantized, Sparse, SparseFormat, Strings,
};
use tensorlane_core::{DType, Tensor};

// ---------------------------------------------------------------------------------------------
// Environment

fn venv_python() -> Option<&'static Path> {
    common::venv_python("setup_venv.sh", "tenso")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tenso_live").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run_py(py: &Path, script: &str, args: &[&Path]) -> (bool, String) {
    let out = Command::new(py)
        .arg(root().join("tests/python").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn f32_hex(v: &[f32]) -> String {
    hex::encode(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

// ---------------------------------------------------------------------------------------------
// Comparing a decoded packet with a manifest expectation

fn check(e: &Value, p: &Packet<'_>, path: &str, errs: &mut Vec<String>) {
    let kind = e["kind"].as_str().unwrap_or("?");
    if kind != p.kind_name() {
        errs.push(format!("{path}: kind {} != expected {kind}", p.kind_name()));
        return;
    }
    match p {
        Packet::Dense(t) => check_dense(e, t, path, errs),
        Packet::Bundle(b) => {
            let want = e["entries"].as_array().unwrap();
            let got: Vec<&str> = b.entries.iter().map(|(k, _)| k.as_ref()).collect();
            let keys: Vec<&str> = want.iter().map(|kv| kv[0].as_str().unwrap()).collect();
            if got != keys {
                errs.push(format!("{path}: keys {got:?} != expected {keys:?}"));
                return;
            }
            for ((k, v), kv) in b.entries.iter().zip(want) {
                check(&kv[1], v, &format!("{path}[{k:?}]"), errs);
            }
        }
        Packet::Sparse(s) => {
            if s.format.name() != e["format"] {
                errs.push(format!(
                    "{path}: format {} != expected {}",
                    s.format.name(),
                    e["format"]
                ));
            }
            if json!(s.shape) != e["shape"] {
                errs.push(format!("{path}: shape {:?} != expected {}", s.shape, e["shape"]));
            }
            for ((c, ce), n) in s
                .components
                .iter()
                .zip(e["components"].as_array().unwrap())
                .zip(s.format.component_names())
            {
                check_dense(ce, c, &format!("{path}.{n}"), errs);
            }
        }
        Packet::Quantized(q) => {
            let got = [
                ("qdtype", json!(q.qdtype.name())),
                ("shape", json!(q.shape)),
                ("scheme", json!(q.scheme.name())),
                ("axis", json!(q.axis)),
                ("group_size", json!(q.group_size)),
                ("scales_hex", json!(f32_hex(&q.scales))),
                ("zero_points_hex", json!(f32_hex(&q.zero_points))),
                ("data_hex", json!(hex::encode(&q.data))),
            ];
            for (k, v) in got {
                if v != e[k] {
                    errs.push(format!("{path}: {k} {v} != expected {}", e[k]));
                }
            }
            if let Some(want) = e.get("dequantized_sha256") {
                match q.dequantize() {
                    Ok(d) => {
                        let b: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
                        if json!(sha(&b)) != *want {
                            errs.push(format!("{path}: dequantize() differs from tenso's"));
                        }
                    }
                    Err(err) => errs.push(format!("{path}: dequantize() failed: {err}")),
                }
            }
        }
        Packet::Strings(s) => {
            let want: Vec<&str> = e["strings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            if s.len() != want.len() {
                errs.push(format!("{path}: {} strings != expected {}", s.len(), want.len()));
                return;
            }
            for (i, w) in want.iter().enumerate() {
                match s.get_str(i) {
                    Some(Ok(g)) if g == *w => {}
                    other => errs.push(format!("{path}[{i}]: {other:?} != expected {w:?}")),
                }
            }
        }
    }
}

fn check_dense(e: &Value, t: &Tensor<'_>, path: &str, errs: &mut Vec<String>) {
    if t.dtype().name() != e["dtype"] {
        errs.push(format!("{path}: dtype {} != expected {}", t.dtype().name(), e["dtype"]));
    } else if json!(t.shape()) != e["shape"] {
        errs.push(format!("{path}: shape {:?} != expected {}", t.shape(), e["shape"]));
    } else if json!(sha(t.data())) != e["sha256"] {
        let mut msg = format!("{path}: data differs (sha256)");
        if let Some(h) = e["hex"].as_str() {
            let want = hex::decode(h).unwrap();
            let k = want.iter().zip(t.data()).position(|(a, b)| a != b);
            let _ = write!(msg, "; first differing byte {k:?} of {}", want.len());
        }
        errs.push(msg);
    }
}

fn options(o: &Value) -> EncodeOptions {
    EncodeOptions {
        alignment: o["alignment"].as_u64().unwrap_or(64),
        integrity: o["integrity"].as_bool().unwrap_or(false),
        compress: o["compress"].as_bool().unwrap_or(false),
        ..EncodeOptions::default()
    }
}

fn qparams(scheme: &str, axis: i64, group_size: u32) -> QuantizeParams {
    match scheme {
        "per_tensor" => QuantizeParams::PerTensor,
        "per_channel" => QuantizeParams::PerChannel { axis },
        "per_group" => QuantizeParams::PerGroup { group_size },
        s => panic!("unknown scheme {s}"),
    }
}

// ---------------------------------------------------------------------------------------------
// tenso -> tensorlane

#[test]
fn tenso_packets_decode_in_tensorlane() {
    let Some(py) = venv_python() else { return };
    let dir = scratch("from_tenso");
    let (ok, out) = run_py(py, "tenso_gen.py", &[&dir]);
    assert!(ok, "tenso_gen.py failed:\n{out}");
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let cases = manifest["cases"].as_array().unwrap();
    let (mut decode_fail, mut reencode_fail, mut quant_fail) = (Vec::new(), Vec::new(), Vec::new());
    let (mut quant_checked, mut kinds) = (0, std::collections::BTreeMap::<String, usize>::new());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        *kinds.entry(case["kind"].as_str().unwrap().to_string()).or_default() += 1;
        let bytes = std::fs::read(dir.join(case["file"].as_str().unwrap())).unwrap();
        let packet = match wire::decode(&bytes) {
            Ok(p) => p,
            Err(e) => {
                decode_fail.push(format!("{name}: tensorlane cannot decode tenso's packet: {e}"));
                continue;
            }
        };
        let mut errs = Vec::new();
        check(case, &packet, name, &mut errs);
        decode_fail.extend(errs);
        // tensorlane re-encodes tenso's packets to the same bytes, given the same options
        let opts = options(&case["options"]);
        match wire::encode(&packet, &opts) {
            Ok(b) if b == bytes => {}
            Ok(b) => reencode_fail.push(format!(
                "{name}: re-encoded to other bytes (len {} vs {}, first difference at {:?})",
                b.len(),
                bytes.len(),
                b.iter().zip(&bytes).position(|(x, y)| x != y)
            )),
            Err(e) => reencode_fail.push(format!("{name}: re-encode failed: {e}")),
        }
        // tensorlane's quantize() of tenso's float32 input gives tenso's exact packet
        if let Some(qin) = case.get("quantize_input") {
            quant_checked += 1;
            let x: Vec<f32> = hex::decode(qin["hex"].as_str().unwrap())
                .unwrap()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let shape: Vec<u64> = serde_json::from_value(qin["shape"].clone()).unwrap();
            let qd = QDType::from_name(qin["qdtype"].as_str().unwrap()).unwrap();
            let params = qparams(
                qin["scheme"].as_str().unwrap(),
                qin["axis"].as_i64().unwrap(),
                qin["group_size"].as_u64().unwrap() as u32,
            );
            match Quantized::quantize(&x, &shape, qd, params) {
                Ok(q) => {
                    let mine = wire::encode(&Packet::from(q.clone()), &options(&qin["options"])).unwrap();
                    if mine != bytes {
                        let mut why = Vec::new();
                        check(case, &Packet::from(q), "", &mut why);
                        quant_fail.push(format!(
                            "{name}: quantize() bytes differ from tenso's: {}",
                            why.join("; ")
                        ));
                    }
                }
                Err(e) => quant_fail.push(format!("{name}: quantize() failed: {e}")),
            }
        }
    }
    eprintln!(
        "tenso -> tensorlane: {} packets {kinds:?}; decode mismatches {}, re-encode mismatches {}, quantize() \
         mismatches {}/{quant_checked}",
        cases.len(),
        decode_fail.len(),
        reencode_fail.len(),
        quant_fail.len()
    );
    let mut all = decode_fail;
    all.extend(reencode_fail);
    all.extend(quant_fail);
    assert!(
        all.is_empty(),
        "{} mismatches against tenso 0.24.0:\n{}",
        all.len(),
        all.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// tensorlane -> tenso

/// SplitMix64: a tiny deterministic generator (no dependency, same stream everywhere).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn normalish(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() - 2.0
    }
}

fn random_tensor(rng: &mut Rng, dtype: DType, shape: &[u64], low_entropy: bool) -> Tensor<'static> {
    let n = shape.iter().product::<u64>() as usize * dtype.itemsize();
    let mut data = rng.bytes(n);
    if low_entropy {
        // few distinct element patterns, so LZ4 actually compresses
        let s = dtype.itemsize();
        let pats: Vec<Vec<u8>> = (0..3).map(|_| rng.bytes(s)).collect();
        for c in data.chunks_exact_mut(s) {
            c.copy_from_slice(&pats[rng.below(3) as usize]);
        }
    }
    if dtype == DType::Bool {
        data.iter_mut().for_each(|b| *b &= 1);
    }
    Tensor::new(dtype, shape.to_vec(), data).unwrap()
}

fn dense_expect(t: &Tensor<'_>) -> Value {
    let mut e = json!({"kind": "dense", "dtype": t.dtype().name(), "shape": t.shape(), "sha256": sha(t.data())});
    if t.nbytes() <= 4096 {
        e["hex"] = json!(hex::encode(t.data()));
    }
    e
}

fn expect(p: &Packet<'_>) -> Value {
    match p {
        Packet::Dense(t) => dense_expect(t),
        Packet::Bundle(b) => {
            json!({"kind": "bundle", "entries": b.entries.iter().map(|(k, v)| json!([k, expect(v)])).collect::<Vec<_>>()})
        }
        Packet::Sparse(s) => json!({"kind": "sparse", "format": s.format.name(), "shape": s.shape,
            "components": s.components.iter().map(dense_expect).collect::<Vec<_>>()}),
        Packet::Quantized(q) => json!({"kind": "quantized", "qdtype": q.qdtype.name(), "shape": q.shape,
            "scheme": q.scheme.name(), "axis": q.axis, "group_size": q.group_size,
            "scales_hex": f32_hex(&q.scales), "zero_points_hex": f32_hex(&q.zero_points),
            "data_hex": hex::encode(&q.data),
            "dequantized_sha256": sha(&q.dequantize().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())}),
        Packet::Strings(s) => json!({"kind": "string",
            "strings": (0..s.len()).map(|i| s.get_str(i).unwrap().unwrap().to_string()).collect::<Vec<_>>()}),
    }
}

struct Out {
    dir: PathBuf,
    cases: Vec<Value>,
}

impl Out {
    fn add(&mut self, name: &str, p: &Packet<'_>, o: &EncodeOptions, extra: Value) -> Vec<u8> {
        let bytes = wire::encode(p, o).unwrap_or_else(|e| panic!("{name}: encode failed: {e}"));
        // every packet tensorlane writes must decode in tensorlane to the same value
        let back =
            wire::decode(&bytes).unwrap_or_else(|e| panic!("{name}: tensorlane cannot decode its own packet: {e}"));
        let mut errs = Vec::new();
        check(&expect(p), &back, name, &mut errs);
        assert!(errs.is_empty(), "round trip in tensorlane: {errs:?}");
        std::fs::write(self.dir.join(format!("{name}.tenso")), &bytes).unwrap();
        let mut case = expect(p);
        case["name"] = json!(name);
        case["file"] = json!(format!("{name}.tenso"));
        case["options"] = json!({"alignment": o.alignment, "integrity": o.integrity, "compress": o.compress});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                case[k] = v;
            }
        }
        self.cases.push(case);
        bytes
    }

    fn write_manifest(&self) {
        let m = json!({"producer": "tensorlane-core (native/tests/tenso_live.rs)", "cases": self.cases});
        std::fs::write(self.dir.join("manifest.json"), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    }
}

fn opts(alignment: u64, integrity: bool, compress: bool) -> EncodeOptions {
    EncodeOptions {
        alignment,
        integrity,
        compress,
        ..EncodeOptions::default()
    }
}

fn random_strings(rng: &mut Rng, n: usize) -> Vec<String> {
    const ALPHABET: &[char] = &[
        'a', 'Z', '0', ' ', '\t', '\n', '\0', 'é', 'ß', 'ñ', '€', '日', '本', '🦀', '🐍', '"', '\\',
    ];
    (0..n)
        .map(|_| {
            let len = rng.below(24) as usize;
            (0..len)
                .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
                .collect()
        })
        .collect()
}

fn random_sparse(
    rng: &mut Rng,
    format: SparseFormat,
    rows: u64,
    cols: u64,
    dtype: DType,
    idx: DType,
) -> Sparse<'static> {
    // distinct coordinates in C order (CSR) or column order (CSC)
    let mut coords: Vec<(u64, u64)> = (0..rows)
        .flat_map(|r| (0..cols).map(move |c| (r, c)))
        .filter(|_| rng_hit(rng))
        .collect();
    if format == SparseFormat::Csc {
        coords.sort_by_key(|&(r, c)| (c, r));
    }
    let nnz = coords.len() as u64;
    let data = random_tensor(rng, dtype, &[nnz], false);
    let ints = |v: Vec<u64>| -> Tensor<'static> {
        let n = v.len() as u64;
        let b: Vec<u8> = v
            .iter()
            .flat_map(|&x| {
                if idx == DType::I64 {
                    (x as i64).to_le_bytes().to_vec()
                } else {
                    (x as i32).to_le_bytes().to_vec()
                }
            })
            .collect();
        Tensor::new(idx, vec![n], b).unwrap()
    };
    let components = match format {
        SparseFormat::Coo => {
            let mut c = coords.clone();
            // COO keeps wire order: shuffle a little and duplicate one coordinate
            if c.len() > 2 {
                let last = c.len() - 1;
                c.swap(0, last);
                c[1] = c[0];
            }
            [
                data,
                ints(c.iter().map(|x| x.0).collect()),
                ints(c.iter().map(|x| x.1).collect()),
            ]
        }
        SparseFormat::Csr | SparseFormat::Csc => {
            let major = if format == SparseFormat::Csr { rows } else { cols };
            let mut ptr = vec![0u64; major as usize + 1];
            for &(r, c) in &coords {
                ptr[(if format == SparseFormat::Csr { r } else { c }) as usize + 1] += 1;
            }
            for i in 1..ptr.len() {
                ptr[i] += ptr[i - 1];
            }
            let ind = coords
                .iter()
                .map(|&(r, c)| if format == SparseFormat::Csr { c } else { r })
                .collect();
            [data, ints(ind), ints(ptr)]
        }
    };
    let s = Sparse {
        format,
        shape: vec![rows, cols],
        components,
    };
    s.validate().unwrap();
    s
}

fn rng_hit(rng: &mut Rng) -> bool {
    rng.below(10) < 3
}

const QDTYPES: [QDType; 4] = [QDType::QInt8, QDType::QUInt8, QDType::QInt4, QDType::QUInt4];

fn gen_tensorlane_packets(out: &mut Out) {
    let mut rng = Rng(0x7E45_0024);
    let shapes: [&[u64]; 8] = [&[], &[5], &[3, 4], &[2, 3, 2], &[1, 2, 1, 3], &[0], &[2, 0, 3], &[4, 0]];
    let aligns = [64u64, 1, 2, 8, 16, 32, 128, 256, 4096];
    let mut k = 0usize;
    // dense: every dtype x ranks 0..4 (with empty dims) x rotating options
    for dt in DType::ALL {
        for shape in shapes {
            let o = opts(aligns[k % aligns.len()], k % 3 == 1, k % 4 >= 2);
            let t = random_tensor(&mut rng, dt, shape, o.compress && k % 8 < 4);
            let name = format!(
                "tl_dense_{}_{}_a{}{}{}",
                dt.name(),
                dims(shape),
                o.alignment,
                flag(o.integrity, "_int"),
                flag(o.compress, "_lz4")
            );
            out.add(&name, &Packet::Dense(t), &o, json!({"byte_exact": true}));
            k += 1;
        }
    }
    // larger bodies, multi-block LZ4 frames, incompressible data stored raw (skip_incompressible)
    let big = random_tensor(&mut rng, DType::F32, &[1 << 18], false);
    out.add(
        "tl_dense_float32_1mib_int",
        &Packet::Dense(big.clone()),
        &opts(64, true, false),
        json!({"byte_exact": true}),
    );
    let semi = random_tensor(&mut rng, DType::F64, &[700_000], true);
    out.add(
        "tl_dense_float64_5_6mb_lz4_int_a128",
        &Packet::Dense(semi),
        &opts(128, true, true),
        json!({"byte_exact": true}),
    );
    let o = EncodeOptions {
        skip_incompressible: true,
        ..opts(64, true, true)
    };
    let raw = random_tensor(&mut rng, DType::U8, &[100_000], false);
    let b = out.add("tl_dense_uint8_skip_incompressible", &Packet::Dense(raw), &o, json!({}));
    assert_eq!(
        u16::from_le_bytes([b[5], b[6]]) & wire::flags::COMPRESSION,
        0,
        "skip_incompressible kept COMPRESSION"
    );

    // quantize(): tenso quantizes the same float32 input and must produce the same packet
    let qshapes: [&[u64]; 4] = [&[4, 6], &[3, 5], &[2, 3, 5], &[9]];
    for qd in QDTYPES {
        for shape in qshapes {
            let mut params = vec![("per_tensor", 0i64, 0u32)];
            params.extend((0..shape.len() as i64).map(|a| ("per_channel", a, 0)));
            params.extend([("per_group", 0, 5), ("per_group", 0, 4)]);
            for (scheme, axis, gs) in params {
                let n = shape.iter().product::<u64>() as usize;
                let (scale, offset) = (rng.unit() * 40.0 + 0.01, rng.unit() * 10.0 - 5.0);
                let mut x: Vec<f32> = (0..n).map(|_| rng.normalish() * scale + offset).collect();
                if k.is_multiple_of(5) {
                    x.iter_mut().for_each(|v| *v = v.abs());
                }
                let o = [(64, false), (64, true), (8, false), (256, true)][k % 4];
                let o = opts(o.0, o.1, false);
                k += 1;
                let q = Quantized::quantize(&x, shape, qd, qparams(scheme, axis, gs)).unwrap();
                let name = format!(
                    "tl_quant_{}_{scheme}_{}_ax{axis}_g{gs}_a{}{}",
                    qd.name(),
                    dims(shape),
                    o.alignment,
                    flag(o.integrity, "_int")
                );
                let qin = json!({"shape": shape, "hex": f32_hex(&x), "qdtype": qd.name(), "scheme": scheme, "axis": axis,
                    "group_size": gs, "options": {"alignment": o.alignment, "integrity": o.integrity, "compress": false}});
                out.add(
                    &name,
                    &Packet::from(q),
                    &o,
                    json!({"quantize_input": qin, "byte_exact": true}),
                );
            }
        }
        let x = [2.5f32; 6];
        let q = Quantized::quantize(&x, &[2, 3], qd, QuantizeParams::PerTensor).unwrap();
        let qin = json!({"shape": [2, 3], "hex": f32_hex(&x), "qdtype": qd.name(), "scheme": "per_tensor", "axis": 0,
            "group_size": 0, "options": {"alignment": 64, "integrity": false, "compress": false}});
        out.add(
            &format!("tl_quant_{}_const", qd.name()),
            &Packet::from(q),
            &opts(64, false, false),
            json!({"quantize_input": qin}),
        );
    }

    // strings
    for (i, n) in [0usize, 1, 7, 250].into_iter().enumerate() {
        let items = random_strings(&mut rng, n);
        for integrity in [false, true] {
            let p = Packet::Strings(Strings::from_items(&items));
            out.add(
                &format!("tl_string_{n}_{i}{}", flag(integrity, "_int")),
                &p,
                &opts(64, integrity, false),
                json!({"byte_exact": true}),
            );
        }
    }
    let long = vec!["x".repeat(70_000), String::new(), "ünï".into()];
    out.add(
        "tl_string_long",
        &Packet::Strings(Strings::from_items(&long)),
        &opts(64, false, false),
        json!({"byte_exact": true}),
    );

    // sparse
    let sparse_cases = [
        (SparseFormat::Coo, 5, 7, DType::F32, DType::I32),
        (SparseFormat::Csr, 6, 4, DType::F64, DType::I32),
        (SparseFormat::Csc, 3, 9, DType::I64, DType::I32),
        (SparseFormat::Coo, 4, 4, DType::C64, DType::I64),
        (SparseFormat::Csr, 8, 8, DType::I8, DType::I64),
        (SparseFormat::Csc, 5, 5, DType::Bool, DType::I64),
        (SparseFormat::Csr, 1, 1, DType::U16, DType::I32),
    ];
    for (f, r, c, dt, idx) in sparse_cases {
        let s = random_sparse(&mut rng, f, r, c, dt, idx);
        out.add(
            &format!("tl_sparse_{}_{}_{r}x{c}_{}", f.name(), dt.name(), idx.name()),
            &Packet::from(s),
            &opts(64, false, false),
            json!({}),
        );
    }

    // bundles (no compression inside: tenso cannot read compressed leaves)
    let q = Quantized::quantize(
        &(0..12).map(|i| i as f32 * 0.3 - 1.0).collect::<Vec<_>>(),
        &[3, 4],
        QDType::QInt4,
        QuantizeParams::PerChannel { axis: 1 },
    )
    .unwrap();
    let inner = Bundle::new()
        .with("deep", Packet::Dense(random_tensor(&mut rng, DType::U16, &[5], false)))
        .with("c", Packet::Dense(random_tensor(&mut rng, DType::C128, &[2], false)));
    let nested = Bundle::new()
        .with(
            "layer0",
            Packet::Bundle(
                Bundle::new()
                    .with("w", Packet::Dense(random_tensor(&mut rng, DType::F16, &[2, 3], false)))
                    .with("b", Packet::Dense(random_tensor(&mut rng, DType::F64, &[], false))),
            ),
        )
        .with(
            "layer1",
            Packet::Bundle(
                Bundle::new()
                    .with("inner", Packet::Bundle(inner))
                    .with("quant", Packet::from(q)),
            ),
        )
        .with("", Packet::Dense(random_tensor(&mut rng, DType::I8, &[3], false)))
        .with(
            "ключ ✓",
            Packet::Dense(random_tensor(&mut rng, DType::BF16, &[2, 2], false)),
        )
        .with("empty", Packet::Bundle(Bundle::new()));
    for o in [
        opts(64, false, false),
        opts(64, true, false),
        opts(16, false, false),
        opts(1, true, false),
    ] {
        let name = format!("tl_bundle_nested_a{}{}", o.alignment, flag(o.integrity, "_int"));
        out.add(&name, &Packet::Bundle(nested.clone()), &o, json!({"byte_exact": true}));
    }
    let with_sparse = Bundle::new()
        .with(
            "m",
            Packet::from(random_sparse(&mut rng, SparseFormat::Csr, 4, 5, DType::F32, DType::I32)),
        )
        .with("x", Packet::Dense(random_tensor(&mut rng, DType::U64, &[3], false)));
    out.add(
        "tl_bundle_with_sparse",
        &Packet::Bundle(with_sparse),
        &opts(64, false, false),
        json!({}),
    );
    out.add(
        "tl_bundle_empty",
        &Packet::Bundle(Bundle::new()),
        &opts(64, false, false),
        json!({"byte_exact": true}),
    );
}

fn dims(shape: &[u64]) -> String {
    if shape.is_empty() {
        "scalar".into()
    } else {
        shape.iter().map(u64::to_string).collect::<Vec<_>>().join("x")
    }
}

fn flag(on: bool, s: &str) -> &str {
    if on { s } else { "" }
}

fn run_check(py: &Path, dir: &Path) -> (bool, String, Value) {
    let (ok, text) = run_py(py, "tenso_check.py", &[dir, Path::new("--quiet")]);
    let results = std::fs::read(dir.join("results.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (ok, text, results)
}

#[test]
fn tensorlane_packets_load_in_tenso() {
    let Some(py) = venv_python() else { return };
    let dir = scratch("to_tenso");
    let mut out = Out {
        dir: dir.clone(),
        cases: Vec::new(),
    };
    gen_tensorlane_packets(&mut out);
    out.write_manifest();
    let (ok, text, results) = run_check(py, &dir);
    eprintln!("{text}");
    assert!(
        ok,
        "tenso 0.24.0 does not read tensorlane's packets as described:\n{text}"
    );
    assert_eq!(results["failed"], json!(0));
    assert_eq!(results["passed"], json!(out.cases.len()));
}

// ---------------------------------------------------------------------------------------------
// The compressed-bundle bug and sparse integrity

#[test]
fn compressed_bundles_and_sparse_integrity() {
    let Some(py) = venv_python() else { return };
    let dir = scratch("containers");
    let mut out = Out {
        dir: dir.clone(),
        cases: Vec::new(),
    };
    let mut rng = Rng(0xB0D1E);
    let zeros = Tensor::new(DType::F32, vec![256], vec![0u8; 1024]).unwrap();
    let b = Bundle::new()
        .with("a", Packet::Dense(zeros))
        .with(
            "b",
            Packet::Bundle(Bundle::new().with("c", Packet::Dense(random_tensor(&mut rng, DType::I32, &[64], true)))),
        )
        .with(
            "s",
            Packet::from(random_sparse(&mut rng, SparseFormat::Coo, 4, 4, DType::F32, DType::I32)),
        );
    let p = Packet::Bundle(b);

    // compress=True (tenso's bytes): tensorlane reads it, tenso 0.24.0 cannot (spec §9.4, §21.1)
    let compressed = out.add(
        "tl_bundle_compressed",
        &p,
        &opts(64, true, true),
        json!({"tenso_error": "Unsupported or unknown dtype code: 0"}),
    );
    let Packet::Bundle(back) = wire::decode(&compressed).unwrap() else {
        panic!("not a bundle")
    };
    assert_eq!(
        back,
        match &p {
            Packet::Bundle(b) => b.clone(),
            _ => unreachable!(),
        }
    );
    let leaf = &compressed[10 + 4 + 1 + 4..];
    assert_eq!(
        u16::from_le_bytes([leaf[5], leaf[6]]) & wire::flags::COMPRESSION,
        wire::flags::COMPRESSION,
        "leaf 'a' is not compressed"
    );

    // compress_in_containers: false — the leaves stay plain and tenso reads the bundle
    let o = EncodeOptions {
        compress_in_containers: false,
        ..opts(64, true, true)
    };
    let plain = out.add("tl_bundle_compress_not_in_containers", &p, &o, json!({}));
    assert_ne!(plain, compressed);

    // sparse components with integrity footers (opt-in, spec §21.12)
    for f in [SparseFormat::Coo, SparseFormat::Csr, SparseFormat::Csc] {
        let s = random_sparse(&mut rng, f, 6, 5, DType::F64, DType::I32);
        let o = EncodeOptions {
            sparse_integrity: true,
            ..opts(64, true, false)
        };
        let bytes = out.add(
            &format!("tl_sparse_{}_integrity", f.name()),
            &Packet::from(s),
            &o,
            json!({"probe": true}),
        );
        let first = &bytes[10 + 8 + 4..];
        assert_ne!(
            u16::from_le_bytes([first[5], first[6]]) & wire::flags::INTEGRITY,
            0,
            "component has no INTEGRITY flag"
        );
        // a flipped body byte in the first component: both tensorlane and tenso must refuse it
        let mut bad = bytes.clone();
        bad[10 + 8 + 4 + 64] ^= 0xFF;
        assert!(
            wire::decode(&bad).is_err(),
            "tensorlane accepted a corrupted sparse component"
        );
        let name = format!("tl_sparse_{}_integrity_corrupted", f.name());
        std::fs::write(dir.join(format!("{name}.tenso")), &bad).unwrap();
        let mut case = out.cases.last().unwrap().clone();
        case["name"] = json!(name);
        case["file"] = json!(format!("{name}.tenso"));
        case["tenso_error"] = json!("Integrity check failed");
        case.as_object_mut().unwrap().remove("probe");
        out.cases.push(case);
    }
    out.write_manifest();
    let (ok, text, results) = run_check(py, &dir);
    eprintln!("{text}");
    assert!(ok, "{text}");
    let probes: Vec<(String, bool, Value)> = results["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().unwrap().ends_with("_integrity"))
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["ok"].as_bool().unwrap(),
                c["error"].clone(),
            )
        })
        .collect();
    assert_eq!(probes.len(), 3);
    for (name, ok, err) in &probes {
        eprintln!(
            "sparse_integrity finding: {name}: {}",
            if *ok {
                "tenso 0.24.0 reads it".to_string()
            } else {
                format!("tenso refuses it: {err}")
            }
        );
    }
    // Finding with tenso 0.24.0: sparse components with INTEGRITY footers are read by tenso, and
    // tenso verifies them (the corrupted variants above are refused with an XXH3 mismatch).
    assert!(
        probes.iter().all(|p| p.1),
        "tenso 0.24.0 no longer reads sparse_integrity packets: {probes:?}"
    );
}
