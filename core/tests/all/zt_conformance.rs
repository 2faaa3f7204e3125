//! `.zt` v2 reader conformance: the 76-case corpus (spec §17), the v2 fixtures (§19.1) and a
//! mutation pass over the valid files (§17.4). The data lives in `tests/data` (see its README).

use crate::common;
use common::{data, sha256_hex};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tensorlane_core::zt::Error;
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::rule::Rule;
use tensorlane_core::zt::validate::{Image, validate};

fn outcome<T>(r: Result<T, Error>, ok: &str) -> String {
    match r {
        Ok(_) => ok.to_string(),
        Err(e) if e.rule == Rule::Unsupported => "unsupported".into(),
        Err(e) if e.rule == Rule::NotFound => "not_found".into(),
        Err(e) => format!("reject:{}", e.rule.name()),
    }
}

fn run_case(bytes: &[u8], op: &str, object: &str, part: &str) -> String {
    match op {
        "open" => match validate(bytes) {
            Ok(Image::Model(_)) => "valid".into(),
            Ok(Image::DataShard) => "data_shard".into(),
            Err(e) => outcome::<()>(Err(e), ""),
        },
        _ => {
            let r = match Reader::open(bytes) {
                Ok(r) => r,
                Err(e) => return format!("open failed: {e}"),
            };
            match op {
                "view" => outcome(r.view(object, part), "valid"),
                "verify" => outcome(r.verify_part(object, part), "valid"),
                "read_csr" => outcome(r.read_csr(object), "valid"),
                other => format!("unknown op {other}"),
            }
        }
    }
}

#[test]
fn corpus_76_cases() {
    let root = data("conformance/zt/expectations.json");
    let dir = root.join("conformance/zt");
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expectations.json")).unwrap()).unwrap();
    let cases = exp["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 76);
    let mut per_op: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let mut failures = Vec::new();
    for c in cases {
        let file = c["file"].as_str().unwrap();
        let op = c["op"].as_str().unwrap();
        let (object, part) = (c["object"].as_str().unwrap(), c["part"].as_str().unwrap());
        let expect = c["expect"].as_str().unwrap();
        let bytes = std::fs::read(dir.join(file)).unwrap();
        assert_eq!(bytes.len() as u64, c["size"].as_u64().unwrap(), "{file}");
        let got = run_case(&bytes, op, object, part);
        let e = per_op.entry(op.to_string()).or_default();
        e.1 += 1;
        if got == expect {
            e.0 += 1;
        } else {
            let detail = match op {
                "open" => validate(bytes.as_slice())
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
                _ => String::new(),
            };
            failures.push(format!(
                "{file} {op}({object}/{part}): expected {expect}, got {got} {detail}"
            ));
        }
    }
    for (op, (pass, total)) in &per_op {
        eprintln!("corpus {op}: {pass}/{total}");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The six reject/ files that open and fail only at a later operation (spec §17.3) must open.
#[test]
fn later_operation_rejects_open_cleanly() {
    let root = data("conformance/zt/expectations.json");
    let dir = root.join("conformance/zt/reject");
    for f in [
        "verify-digest-mismatch.zt",
        "bool-invalid-byte.zt",
        "f4-nonzero-odd-nibble.zt",
        "csr-indptr-not-zero-based.zt",
        "csr-index-out-of-cols.zt",
        "csr-row-not-increasing.zt",
    ] {
        let b = std::fs::read(dir.join(f)).unwrap();
        assert!(validate(b.as_slice()).is_ok(), "{f}");
    }
    // f4-packed-odd-count is only metadata-valid: verify fails on its 0xab filler.
    let b = std::fs::read(root.join("conformance/zt/valid/f4-packed-odd-count.zt")).unwrap();
    let r = Reader::open(b.as_slice()).unwrap();
    let obj = r.objects().next().unwrap().to_string();
    assert_eq!(r.verify_part(&obj, "data").unwrap_err().rule, Rule::LayoutData);
}

fn fixture_manifest(root: &Path) -> Vec<serde_json::Value> {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("fixtures/manifest.json")).unwrap()).unwrap();
    m["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["format"] == "zt")
        .cloned()
        .collect()
}

fn zt_dtype_name(numpy: &str) -> (&'static str, Option<&'static str>) {
    match numpy {
        "float32" => ("f32", None),
        "float64" => ("f64", None),
        "float16" => ("f16", None),
        "bfloat16" => ("bf16", None),
        "int8" => ("i8", None),
        "int16" => ("i16", None),
        "int32" => ("i32", None),
        "int64" => ("i64", None),
        "uint8" => ("u8", None),
        "uint16" => ("u16", None),
        "uint32" => ("u32", None),
        "uint64" => ("u64", None),
        "bool" => ("u8", Some("bool")),
        other => panic!("unexpected dtype {other}"),
    }
}

fn open_with_shards<'a>(root: &Path, file: &str, bytes: &'a [u8], store: &'a [(String, Vec<u8>)]) -> Reader<&'a [u8]> {
    let mut r = Reader::open(bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
    let names: Vec<String> = r.shard_table().map(|t| t.keys().cloned().collect()).unwrap_or_default();
    let _ = root;
    for n in names {
        let src = store.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_slice()).unwrap();
        r = r
            .with_shard(&n, src)
            .unwrap_or_else(|e| panic!("{file}: shard {n}: {e}"));
    }
    r
}

#[test]
fn fixtures_read_to_manifest() {
    let root = data("conformance/zt/expectations.json");
    let files = fixture_manifest(&root);
    assert_eq!(files.len(), 9, "fixtures/manifest.json lists 9 .zt v2 files");
    let mut checked = 0;
    for f in &files {
        let file = f["file"].as_str().unwrap();
        let bytes = std::fs::read(root.join("fixtures").join(file)).unwrap();
        assert_eq!(sha256_hex(&bytes), f["sha256"].as_str().unwrap(), "{file}");
        // Shards resolved positionally: <stem>-<name>.zt next to <stem>.zt.
        let stem = file.trim_end_matches(".zt");
        let mut store = Vec::new();
        if let Ok(Image::Model(m)) = validate(bytes.as_slice()) {
            for n in m.shards.iter().flat_map(|t| t.keys()) {
                store.push((
                    n.clone(),
                    std::fs::read(root.join("fixtures").join(format!("{stem}-{n}.zt"))).unwrap(),
                ));
            }
        }
        let r = open_with_shards(&root, file, &bytes, &store);
        if f["expect"] == "no-tensors" {
            assert!(r.is_data_shard(), "{file}");
            continue;
        }
        let tensors = f["tensors"].as_array().unwrap();
        let names: Vec<&str> = r.objects().collect();
        let want: Vec<&str> = tensors.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, want, "{file}");
        for t in tensors {
            let name = t["name"].as_str().unwrap();
            let o = r.object(name).unwrap();
            let shape = common::u64s(&t["shape"]);
            assert_eq!(o.shape, shape, "{file} {name}");
            assert_eq!(o.layout, t["zt_layout"].as_str().unwrap(), "{file} {name}");
            let parts: Vec<(String, String, Option<String>, u64, String)> = if let Some(ps) = t["parts"].as_object() {
                ps.iter()
                    .map(|(pn, p)| {
                        let (d, _) = zt_dtype_name(p["dtype"].as_str().unwrap());
                        let l = p["logical"].as_str().map(String::from);
                        (
                            pn.clone(),
                            d.to_string(),
                            l,
                            p["nbytes"].as_u64().unwrap(),
                            p["sha256"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            } else {
                let (d, l) = zt_dtype_name(t["dtype"].as_str().unwrap());
                vec![(
                    "data".into(),
                    d.into(),
                    l.map(String::from),
                    t["nbytes"].as_u64().unwrap(),
                    t["sha256"].as_str().unwrap().into(),
                )]
            };
            for (pn, dtype, logical, nbytes, sha) in parts {
                let p = r.part(name, &pn).unwrap();
                assert_eq!(
                    tensorlane_core::zt::format::dtype_zt_name(p.dtype),
                    Some(dtype.as_str()),
                    "{file} {name}/{pn}"
                );
                assert_eq!(p.logical, logical, "{file} {name}/{pn}");
                let data = r.read(name, &pn).unwrap_or_else(|e| panic!("{file} {name}/{pn}: {e}"));
                assert_eq!(data.len() as u64, nbytes, "{file} {name}/{pn}");
                assert_eq!(sha256_hex(&data), sha, "{file} {name}/{pn}");
                // Raw parts are zero-copy; encoded parts refuse a view.
                match p.encoding {
                    None => assert_eq!(r.view(name, &pn).unwrap(), &data[..], "{file} {name}/{pn}"),
                    Some(_) => assert_eq!(r.view(name, &pn).unwrap_err().rule, Rule::Unsupported),
                }
                assert!(
                    r.verify_part(name, &pn)
                        .unwrap_or_else(|e| panic!("{file} {name}/{pn}: {e}")),
                    "{file} {name}/{pn} has a digest"
                );
                checked += 1;
            }
            r.check_object(name).unwrap_or_else(|e| panic!("{file} {name}: {e}"));
        }
        let rep = r.verify().unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(rep.unresolved.is_empty(), "{file}");
        assert_eq!(rep.shards_checked as usize, store.len(), "{file}");
    }
    eprintln!("fixture parts checked: {checked}");
    assert!(checked >= 25);
}

#[test]
fn fixture_details() {
    let root = data("conformance/zt/expectations.json");
    let fx = |f: &str| std::fs::read(root.join("fixtures").join(f)).unwrap();
    // profiles: CSR assembles, quant_group and mx pass the stricter profile checks.
    let b = fx("profiles-csr-quant-mx.zt");
    let r = Reader::open(b.as_slice()).unwrap();
    let csr = r.read_csr("csr").unwrap();
    assert_eq!((csr.rows, csr.cols), (2, 3));
    assert_eq!(csr.indptr, [0, 2, 3]);
    assert_eq!(csr.indices, [0, 2, 1]);
    let q = tensorlane_core::zt::layout::quant_group_params(r.object("q4").unwrap()).unwrap();
    assert_eq!(
        (q.bits, q.group_size, q.axis, q.per_word, q.zero_value),
        (4, 8, 1, 8, Some(8))
    );
    assert_eq!(
        tensorlane_core::zt::layout::mx_params(r.object("mx").unwrap())
            .unwrap()
            .0,
        32
    );
    assert_eq!(r.verify().unwrap().parts_digest_checked, 7);
    // basic-canonical: attributes, bool tensor, tied blob.
    let b = fx("basic-canonical.zt");
    let r = Reader::open(b.as_slice()).unwrap();
    assert_eq!(
        r.attributes().unwrap().get("producer").unwrap().as_text(),
        Some("research")
    );
    assert_eq!(
        r.locate("embed.weight", "data").unwrap().offset,
        r.locate("tied.weight", "data").unwrap().offset
    );
    let mask = r.tensor("mask").unwrap();
    assert_eq!(mask.bool_values().unwrap(), [true, false, true]);
    assert!(mask.is_view());
    // sharded: without shards the image opens, locate names the shard, read is Unsupported.
    let b = fx("sharded.zt");
    let r = Reader::open(b.as_slice()).unwrap();
    let loc = r.locate("layer.weight", "data").unwrap();
    assert_eq!((loc.shard, loc.offset, loc.length), (Some("00001"), 65536, 64));
    assert_eq!(r.read("layer.weight", "data").unwrap_err().rule, Rule::Unsupported);
    let rep = r.verify().unwrap();
    assert_eq!(rep.unresolved.len(), 2);
    // A wrong shard file is ShardIdentity (size), a same-size impostor fails verify_shard.
    let data = fx("sharded-data.zt");
    let e = Reader::open(b.as_slice())
        .unwrap()
        .with_shard("00001", data.as_slice())
        .unwrap_err();
    assert_eq!(e.rule, Rule::ShardIdentity);
    let mut impostor = data.clone();
    impostor[4096] ^= 1;
    let r = Reader::open(b.as_slice())
        .unwrap()
        .with_shard("data", impostor.as_slice())
        .unwrap();
    assert_eq!(r.verify_shard("data").unwrap_err().rule, Rule::ShardIdentity);
    // NotFound.
    assert_eq!(r.object("nope").unwrap_err().rule, Rule::NotFound);
    assert_eq!(r.part("layer.bias", "nope").unwrap_err().rule, Rule::NotFound);
}

/// xorshift64* — deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Exercises every read path of an image that may be hostile; must never panic.
fn exercise(bytes: &[u8]) -> Option<Rule> {
    let r = match Reader::open(bytes) {
        Ok(r) => r,
        Err(e) => return Some(e.rule),
    };
    let objects: Vec<String> = r.objects().map(String::from).collect();
    for o in &objects {
        let _ = r.check_object(o);
        let parts: Vec<String> = r.object(o).unwrap().parts.keys().cloned().collect();
        for p in &parts {
            let _ = r.view(o, p);
            let _ = r.locate(o, p);
            // Bound the work a mutated decoded_length can ask for.
            if r.part(o, p).unwrap().decoded_size() <= 256 << 10 {
                let _ = r.verify_part(o, p);
            }
        }
        if r.object(o)
            .unwrap()
            .parts
            .values()
            .all(|p| p.decoded_size() <= 256 << 10)
        {
            let _ = r.read_csr(o);
            let _ = r.read_coo(o);
            let _ = r.tensor(o);
        }
    }
    None
}

/// Rewrites the footer's manifest hash to match the (possibly mutated) manifest bytes.
fn rehash(b: &mut [u8]) -> bool {
    let n = b.len();
    if n < 48 {
        return false;
    }
    let f = n - 40;
    let off = u64::from_le_bytes(b[f..f + 8].try_into().unwrap());
    let len = u64::from_le_bytes(b[f + 8..f + 16].try_into().unwrap());
    match off.checked_add(len) {
        Some(end) if len > 0 && end <= f as u64 => {
            let h = tensorlane_core::zt::format::xxh3_64(&b[off as usize..end as usize]);
            b[f + 16..f + 24].copy_from_slice(&h.to_le_bytes());
            true
        }
        _ => false,
    }
}

fn mutation_inputs(root: &Path) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for d in [root.join("conformance/zt/valid"), root.join("fixtures")] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "zt"))
            .collect();
        names.sort();
        for p in names {
            v.push(std::fs::read(p).unwrap());
        }
    }
    v
}

#[test]
fn mutation_smoke() {
    let root = data("conformance/zt/expectations.json");
    let inputs = mutation_inputs(&root);
    assert!(inputs.len() >= 25);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let started = Instant::now();
    let iterations = 60_000;
    let mut rejected = 0usize;
    let mut rehashed = 0usize;
    let mut deep: std::collections::BTreeMap<Rule, usize> = Default::default();
    for i in 0..iterations {
        let src = &inputs[rng.below(inputs.len())];
        let mut b = src.clone();
        // Aim most mutations at the interesting bytes: header, footer and manifest.
        let hot = |rng: &mut Rng, len: usize| -> usize {
            if len == 0 {
                return 0;
            }
            match rng.below(4) {
                0 => rng.below(len),
                1 => rng.below(len.min(64)),
                _ => {
                    let tail = len.min(2048);
                    len - 1 - rng.below(tail)
                }
            }
        };
        match i % 5 {
            0 | 1 => {
                for _ in 0..1 + rng.below(4) {
                    let at = hot(&mut rng, b.len());
                    if at < b.len() {
                        b[at] ^= 1 << rng.below(8);
                    }
                }
            }
            2 => {
                let at = hot(&mut rng, b.len());
                if at < b.len() {
                    b[at] = rng.next() as u8;
                }
            }
            3 => {
                let n = rng.below(b.len() + 1);
                b.truncate(n);
            }
            _ => {
                // splice: a chunk of another input pasted over this one
                let other = &inputs[rng.below(inputs.len())];
                let len = 1 + rng.below(256);
                let from = rng.below(other.len().saturating_sub(len).max(1));
                let at = hot(&mut rng, b.len());
                for k in 0..len {
                    if at + k < b.len() && from + k < other.len() {
                        b[at + k] = other[from + k];
                    }
                }
            }
        }
        if exercise(&b).is_some() {
            rejected += 1;
        }
        // Half the time, recompute the footer's manifest hash so the mutation reaches the CBOR
        // decoder, the schema walk and the blob/layout checks instead of stopping at ManifestHash.
        if i % 2 == 0 && rehash(&mut b) {
            rehashed += 1;
            if let Some(r) = exercise(&b) {
                *deep.entry(r).or_default() += 1;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "mutation pass too slow at {i}"
        );
    }
    eprintln!(
        "mutation_smoke: {iterations} mutations, {rejected} rejected at open, {:?}",
        started.elapsed()
    );
    eprintln!("mutation_smoke: {rehashed} re-hashed variants, rejections by rule: {deep:?}");
    assert!(rejected > iterations / 10);
}
