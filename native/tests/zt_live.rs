//! Live cross-check of the `.zt` writer with the real ztensor 2.1.2 from PyPI (tests/python/).
//!
//! * `canonical_bytes_match_ztensor_and_ztensor_files_read`: zt_gen.py writes random objects of
//!   every dtype, logical type and layout profile with ztensor, canonically and not (zstd-seekable
//!   parts, 4096 alignment, reverse insertion). (a) tensorlane's canonical file of the same tensors
//!   is byte-identical to ztensor's; (c) tensorlane's reader opens both ztensor files and reads every
//!   part with the expected bytes, digests verify, and the content digest (§11) is the same for both.
//! * `tensorlane_files_open_in_ztensor`: (b) tensorlane writes canonical, non-canonical (4096,
//!   compressed, sha256 digests), streamed, appended and sharded files; zt_check.py opens each with
//!   ztensor, compares every part's bytes and runs `verify(deep=True)`.
//! * `fixtures_reproduce_byte_for_byte` (no Python): the reference's own fixture files
//!   (`basic-canonical.zt`, `appended.zt`) are reproduced byte for byte.
//!
//! The venv comes from tests/python/setup_zt_venv.sh (tests/.venv-zt, pinned). The Python tests skip
//! only when `python3` is missing and `CI` is not `true`; in CI every setup failure fails.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use tensorlane_testkit as common;

use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};
use tensorlane::zt_write::{ZtFile, add_compressed, shard_path};
use tensorlane_core::DType;
use tensorlane_core::zt::cbor::Value;
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::writer::{DigestAlgo, ObjectSpec, Options, PartDecl, PartSpec, Writer, content_digest};

/// A fresh scratch folder for one test.
fn live_dir(tag: &str) -> PathBuf {
    common::live_dir(&format!("tensorlane-zt-live-{tag}"))
}

fn venv_python() -> Option<&'static Path> {
    common::venv_python("setup_zt_venv.sh", "ztensor")
}

/// JSON (as zt_gen.py writes attributes) to a CBOR value.
fn cbor_of(j: &Json) -> Value<'static> {
    match j {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::Uint(u)
            } else if let Some(i) = n.as_i64() {
                Value::Neg((-(i + 1)) as u64)
            } else {
                Value::Float(n.as_f64().unwrap())
            }
        }
        Json::String(s) => Value::Text(Cow::Owned(s.clone())),
        Json::Array(a) => Value::Array(a.iter().map(cbor_of).collect()),
        Json::Object(m) => Value::Map(
            m.iter()
                .map(|(k, v)| (Value::Text(Cow::Owned(k.clone())), cbor_of(v)))
                .collect(),
        ),
    }
}

fn dtype_of(zt: &str) -> DType {
    tensorlane_core::zt::format::dtype_from_zt(zt).unwrap_or_else(|| panic!("unknown dtype {zt}"))
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

struct GenObject {
    name: String,
    spec: ObjectSpec,
    /// (part name, dtype, logical, bytes)
    parts: Vec<(String, DType, Option<String>, Vec<u8>)>,
}

fn load_gen(manifest: &Json) -> Vec<GenObject> {
    let order = manifest["order"].as_array().unwrap();
    order
        .iter()
        .map(|n| {
            let name = n.as_str().unwrap().to_string();
            let o = &manifest["objects"][&name];
            let shape: Vec<u64> = o["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            let mut spec = ObjectSpec::new(&shape, o["layout"].as_str().unwrap());
            if !o["attributes"].is_null() {
                spec = spec.attributes(cbor_of(&o["attributes"]));
            }
            let parts = o["parts"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(p, v)| {
                    (
                        p.clone(),
                        dtype_of(v["dtype"].as_str().unwrap()),
                        v["logical"].as_str().map(str::to_string),
                        hex::decode(v["hex"].as_str().unwrap()).unwrap(),
                    )
                })
                .collect();
            GenObject { name, spec, parts }
        })
        .collect()
}

fn part_specs(o: &GenObject) -> Vec<PartSpec<'_>> {
    o.parts
        .iter()
        .map(|(p, d, l, b)| {
            let s = PartSpec::new(p.clone(), *d, b);
            match l {
                Some(l) => s.logical(l.clone()),
                None => s,
            }
        })
        .collect()
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    format!("lengths {} vs {}, first difference at byte {i}", a.len(), b.len())
}

#[test]
fn canonical_bytes_match_ztensor_and_ztensor_files_read() {
    let Some(py) = venv_python() else { return };
    let dir = live_dir("gen");
    let seed = common::live_seed("ZT_LIVE_SEED", 100_000);
    common::run_python(py, "zt_gen.py", &[dir.to_str().unwrap(), &seed.to_string()]);
    let manifest: Json = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let objects = load_gen(&manifest);

    // (a) byte-identical canonical file.
    let theirs = std::fs::read(dir.join("canonical.zt")).unwrap();
    let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
    w.set_attributes(cbor_of(&manifest["attributes"])).unwrap();
    for o in &objects {
        w.add_object(&o.name, &o.spec, &part_specs(o))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let ours = w.finish().unwrap();
    assert!(
        ours.sink == theirs,
        "seed {seed}: tensorlane's canonical file differs from ztensor's: {}",
        first_difference(&ours.sink, &theirs)
    );
    // The same through the file writer (publish) and through streaming.
    let path = dir.join("ours.zt");
    let mut f = ZtFile::publish(&path, Options::default()).unwrap();
    f.set_attributes(cbor_of(&manifest["attributes"])).unwrap();
    for o in &objects {
        let decls: Vec<PartDecl> = o
            .parts
            .iter()
            .map(|(p, d, l, b)| {
                let x = PartDecl::new(p.clone(), *d, b.len() as u64);
                match l {
                    Some(l) => x.logical(l.clone()),
                    None => x,
                }
            })
            .collect();
        f.begin_object(&o.name, &o.spec, &decls).unwrap();
        let mut sorted: Vec<_> = o.parts.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (p, _, _, b) in sorted {
            f.begin_part(p).unwrap();
            for c in b.chunks(10_000) {
                f.write_chunk(c).unwrap();
            }
            f.end_part().unwrap();
        }
        f.end_object().unwrap();
    }
    f.finish().unwrap();
    assert!(
        std::fs::read(&path).unwrap() == theirs,
        "seed {seed}: streamed canonical file differs from ztensor's"
    );

    // (c) ztensor's files read by tensorlane.
    let mut ids = Vec::new();
    for file in ["canonical.zt", "noncanonical.zt"] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let r = Reader::open(bytes.as_slice()).unwrap_or_else(|e| panic!("{file}: {e}"));
        for o in &objects {
            for (p, _, _, b) in &o.parts {
                let got = r
                    .read(&o.name, p)
                    .unwrap_or_else(|e| panic!("{file} {}/{p}: {e}", o.name));
                assert!(got.as_ref() == b.as_slice(), "{file} {}/{p}: bytes differ", o.name);
            }
        }
        let report = r.verify().unwrap_or_else(|e| panic!("{file}: verify: {e}"));
        let nparts: usize = objects.iter().map(|o| o.parts.len()).sum();
        assert_eq!(report.parts_digest_checked as usize, nparts, "{file}");
        let footer = &bytes[bytes.len() - 40..];
        let (mo, ml) = (
            u64::from_le_bytes(footer[..8].try_into().unwrap()) as usize,
            u64::from_le_bytes(footer[8..16].try_into().unwrap()) as usize,
        );
        ids.push(content_digest(&bytes[mo..mo + ml], DigestAlgo::Sha256).unwrap());
    }
    assert_eq!(
        ids[0], ids[1],
        "the content digest must not depend on placement or encoding"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn expect_entry(path: &Path, objects: &[GenObject], attributes: Option<&Json>) -> Json {
    let mut objs = serde_json::Map::new();
    for o in objects {
        let mut parts = serde_json::Map::new();
        for (p, d, l, b) in &o.parts {
            let (dt, lt) = tensorlane_core::zt::writer::storage_of(*d, l.as_deref()).unwrap();
            parts.insert(p.clone(), json!({"dtype": dt, "logical": lt, "sha256": sha256_hex(b)}));
        }
        objs.insert(
            o.name.clone(),
            json!({"layout": o.spec.layout, "shape": o.spec.shape, "parts": parts}),
        );
    }
    json!({"path": path, "attributes": attributes, "objects": objs})
}

fn random_objects(seed: u64) -> Vec<GenObject> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let all = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::Bool,
        DType::C64,
        DType::C128,
    ];
    let mut out = Vec::new();
    for (i, d) in all.iter().enumerate() {
        let rank = (next() % 4) as usize;
        let shape: Vec<u64> = (0..rank).map(|_| next() % 5 + 1).collect();
        let n: u64 = shape.iter().product();
        let bytes: Vec<u8> = if *d == DType::Bool {
            (0..n).map(|_| (next() & 1) as u8).collect()
        } else {
            (0..n as usize * d.itemsize()).map(|_| next() as u8).collect()
        };
        out.push(GenObject {
            name: format!("t{i:02}.{}", d.name()),
            spec: ObjectSpec::dense(&shape),
            parts: vec![("data".into(), *d, None, bytes)],
        });
    }
    let big: Vec<u8> = (0..300_000u32).flat_map(|v| ((v % 13) as f32).to_le_bytes()).collect();
    out.push(GenObject {
        name: "z.big".into(),
        spec: ObjectSpec::dense(&[300_000]),
        parts: vec![("data".into(), DType::F32, None, big.clone())],
    });
    out.push(GenObject {
        name: "z.tied".into(),
        spec: ObjectSpec::dense(&[300_000]),
        parts: vec![("data".into(), DType::F32, None, big)],
    });
    let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    out.push(GenObject {
        name: "z.csr".into(),
        spec: ObjectSpec::new(&[2, 3], "zt.sparse_csr/1"),
        parts: vec![
            ("indices".into(), DType::U32, None, u32s(&[0, 2, 1])),
            ("indptr".into(), DType::U32, None, u32s(&[0, 2, 3])),
            (
                "values".into(),
                DType::F32,
                None,
                [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect(),
            ),
        ],
    });
    out.push(GenObject {
        name: "z.f8".into(),
        spec: ObjectSpec::dense(&[4]).attributes(Value::Map(vec![(Value::text("scale"), Value::Float(0.25))])),
        parts: vec![("data".into(), DType::U8, Some("f8_e4m3fn".into()), vec![1, 2, 3, 4])],
    });
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[test]
fn tensorlane_files_open_in_ztensor() {
    let Some(py) = venv_python() else { return };
    let dir = live_dir("check");
    let objects = random_objects(common::live_seed("ZT_LIVE_SEED", 100_000));
    let attrs = json!({"producer": "tensorlane", "n": 3});
    let mut files = Vec::new();

    // Canonical, published.
    let p = dir.join("canonical.zt");
    let mut w = ZtFile::publish(&p, Options::default()).unwrap();
    w.set_attributes(cbor_of(&attrs)).unwrap();
    for o in &objects {
        w.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
    }
    w.finish().unwrap();
    files.push(expect_entry(&p, &objects, Some(&attrs)));

    // Non-canonical: 4096 alignment, reverse order, dense tensors compressed.
    let p = dir.join("noncanonical.zt");
    let mut w = ZtFile::create(&p, Options::non_canonical().alignment(4096)).unwrap();
    for o in objects.iter().rev() {
        if o.spec.layout == "dense" && o.parts[0].3.len() >= 64 {
            add_compressed(&mut w, &o.name, o.parts[0].1, &o.spec.shape, &o.parts[0].3).unwrap();
        } else {
            w.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
        }
    }
    w.finish().unwrap();
    files.push(expect_entry(&p, &objects, None));

    // sha256 part digests.
    let p = dir.join("sha256.zt");
    let mut w = ZtFile::create(&p, Options::non_canonical().digest(DigestAlgo::Sha256)).unwrap();
    for o in &objects {
        w.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
    }
    w.finish().unwrap();
    files.push(expect_entry(&p, &objects, None));

    // Appended: two generations.
    let p = dir.join("appended.zt");
    let (first, second) = objects.split_at(objects.len() / 2);
    let mut w = ZtFile::create(&p, Options::non_canonical().alignment(4096)).unwrap();
    for o in first {
        w.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
    }
    w.finish().unwrap();
    let before = std::fs::read(&p).unwrap();
    let mut w = ZtFile::append(&p, Options::non_canonical()).unwrap();
    for o in second {
        w.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
    }
    w.finish().unwrap();
    assert_eq!(
        &std::fs::read(&p).unwrap()[..before.len()],
        &before[..],
        "append must not change old bytes"
    );
    files.push(expect_entry(&p, &objects, None));

    // Sharded: half the objects in an ordinary .zt shard next to the root, referenced by offset.
    let p = dir.join("sharded.zt");
    let sp = shard_path(&p, "00001");
    let mut s = ZtFile::publish(&sp, Options::default()).unwrap();
    for o in second {
        s.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
    }
    let shard = s.finish().unwrap();
    let shard_manifest =
        tensorlane_core::zt::cbor::decode(&shard.manifest, tensorlane_core::zt::cbor::Mode::Deterministic).unwrap();
    let mut w = ZtFile::publish(&p, Options::non_canonical()).unwrap();
    w.add_shard_file("00001", &sp, DigestAlgo::Sha256).unwrap();
    for o in first {
        w.add_object(&o.name, &o.spec, &part_specs(o)).unwrap();
    }
    for o in second {
        let parts: Vec<PartSpec<'_>> = o
            .parts
            .iter()
            .map(|(pn, d, l, _)| {
                let e = shard_manifest
                    .get("objects")
                    .unwrap()
                    .get(&o.name)
                    .unwrap()
                    .get("parts")
                    .unwrap()
                    .get(pn)
                    .unwrap();
                let blob = e.get("blob").unwrap().as_array().unwrap();
                let mut s = PartSpec::external(
                    pn.clone(),
                    *d,
                    "00001",
                    blob[0].as_u64().unwrap(),
                    blob[1].as_u64().unwrap(),
                    e.get("digest").and_then(Value::as_text).map(str::to_string),
                );
                if let Some(l) = l {
                    s = s.logical(l.clone());
                }
                s
            })
            .collect();
        w.add_object(&o.name, &o.spec, &parts).unwrap();
    }
    w.finish().unwrap();
    files.push(expect_entry(&p, &objects, None));

    let expect = dir.join("expect.json");
    std::fs::write(&expect, serde_json::to_vec_pretty(&json!({"files": files})).unwrap()).unwrap();
    let report = common::run_python(py, "zt_check.py", &[expect.to_str().unwrap()]);
    eprintln!("{report}");
    assert_eq!(report.lines().filter(|l| l.starts_with("ok ")).count(), 5, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fixtures_reproduce_byte_for_byte() {
    let fx = common::data("fixtures");
    // basic-canonical.zt (spec §19.1).
    let le16 = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let f32s: Vec<u8> = (0..6).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
    w.set_attributes(cbor_of(
        &json!({"producer": "research", "n": 6, "pi": 3.5, "neg": -42, "nested": {"list": [1, 2.5, null, true]}}),
    ))
    .unwrap();
    w.add("a.bf16", DType::BF16, &[4], &le16(&[0x3F80, 0xC000, 0x3F00, 0x4049]))
        .unwrap();
    w.add("b.f16", DType::F16, &[3], &le16(&[0x3800, 0xBE00, 0x7BFF]))
        .unwrap();
    w.add("embed.weight", DType::F32, &[2, 3], &f32s).unwrap();
    w.add("int8.q", DType::I8, &[5], &[0x80, 0xFF, 0, 1, 127]).unwrap();
    w.add("mask", DType::Bool, &[3], &[1, 0, 1]).unwrap();
    w.add("tied.weight", DType::F32, &[2, 3], &f32s).unwrap();
    let done = w.finish().unwrap();
    assert!(
        done.sink == std::fs::read(fx.join("basic-canonical.zt")).unwrap(),
        "basic-canonical.zt: {}",
        first_difference(&done.sink, &std::fs::read(fx.join("basic-canonical.zt")).unwrap())
    );
    assert_eq!(
        content_digest(&done.manifest, DigestAlgo::Sha256).unwrap(),
        "sha256:8eaa4f8e5f542fc992e6a83bec6695f2ab56391dc0ac8162a8f33736bc88de12"
    );

    // appended.zt: a 4096-aligned first generation, then an append.
    let dir = live_dir("fixtures");
    let p = dir.join("appended.zt");
    let mut w = ZtFile::create(&p, Options::non_canonical().alignment(4096)).unwrap();
    w.add(
        "first",
        DType::F32,
        &[4],
        &[1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    assert_eq!(w.finish().unwrap().size, 8332);
    let mut w = ZtFile::append(&p, Options::non_canonical()).unwrap();
    w.add(
        "second",
        DType::I64,
        &[2],
        &[5i64, 6].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    w.finish().unwrap();
    assert_eq!(
        std::fs::read(&p).unwrap(),
        std::fs::read(fx.join("appended.zt")).unwrap(),
        "appended.zt"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
