//! Legacy `.zt` v1.2 / v0.1: the reference fixtures, hostile variants, and a mutation loop.

use crate::common;
use common::{data, f32_bytes, sha256_hex};

use ruzstd::encoding::{CompressionLevel, compress_to_vec};
use tensorlane_core::dtype::DType;
use tensorlane_core::zt::cbor::{self, Value};
use tensorlane_core::zt::legacy::{Digest, Encoding, Format, LegacyReader, LegacyVersion};
use tensorlane_core::zt::rule::Rule;

fn crc32c(b: &[u8]) -> u32 {
    crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(b)
}

fn t(s: &str) -> Value<'static> {
    Value::text(s.to_string())
}

fn map(entries: Vec<(&str, Value<'static>)>) -> Value<'static> {
    let mut m: Vec<_> = entries.into_iter().map(|(k, v)| (t(k), v)).collect();
    m.sort_by_key(|e| cbor::encode(&e.0).unwrap());
    Value::Map(m)
}

/// A component for [`build_v1`]: role, dtype, stored bytes and extra fields.
struct Comp {
    role: &'static str,
    dtype: &'static str,
    stored: Vec<u8>,
    extra: Vec<(&'static str, Value<'static>)>,
    offset_delta: i64,
}

fn comp(role: &'static str, dtype: &'static str, stored: Vec<u8>) -> Comp {
    Comp {
        role,
        dtype,
        stored,
        extra: vec![],
        offset_delta: 0,
    }
}

/// Writes a v1.2 file: objects of (name, shape, format, components).
type ObjectSpec<'a> = (&'a str, Vec<u64>, &'a str, Vec<Comp>);

fn build_v1(objects: Vec<ObjectSpec<'_>>) -> Vec<u8> {
    let mut file = b"ZTEN1000".to_vec();
    let mut objs = Vec::new();
    for (name, shape, format, comps) in objects {
        let mut cm = Vec::new();
        for c in comps {
            while !file.len().is_multiple_of(64) {
                file.push(0);
            }
            let off = (file.len() as i64 + c.offset_delta) as u64;
            file.extend_from_slice(&c.stored);
            let mut fields = vec![
                ("dtype", t(c.dtype)),
                ("offset", Value::Uint(off)),
                ("length", Value::Uint(c.stored.len() as u64)),
            ];
            fields.extend(c.extra);
            cm.push((c.role, map(fields)));
        }
        let shape = Value::Array(shape.into_iter().map(Value::Uint).collect());
        objs.push((
            name,
            map(vec![("shape", shape), ("format", t(format)), ("components", map(cm))]),
        ));
    }
    let manifest = cbor::encode(&map(vec![("version", t("1.2.0")), ("objects", map(objs))])).unwrap();
    file.extend_from_slice(&manifest);
    file.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
    file.extend_from_slice(b"ZTEN1000");
    file
}

/// Writes a v0.1 file from (entry fields, stored bytes).
type EntrySpec<'a> = (Vec<(&'a str, Value<'static>)>, Vec<u8>);

fn build_v0(entries: Vec<EntrySpec<'_>>) -> Vec<u8> {
    let mut file = b"ZTEN0001".to_vec();
    let mut arr = Vec::new();
    for (mut fields, stored) in entries {
        while !file.len().is_multiple_of(64) {
            file.push(0);
        }
        fields.push(("offset", Value::Uint(file.len() as u64)));
        fields.push(("size", Value::Uint(stored.len() as u64)));
        file.extend_from_slice(&stored);
        arr.push(map(fields));
    }
    let m = cbor::encode(&Value::Array(arr)).unwrap();
    file.extend_from_slice(&m);
    file.extend_from_slice(&(m.len() as u64).to_le_bytes());
    file
}

fn open_err(b: &[u8]) -> tensorlane_core::zt::Error {
    LegacyReader::open(b).map(|_| ()).unwrap_err()
}

#[test]
fn fixtures_read_to_manifest_entries() {
    let root = data("fixtures/v1");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("fixtures/manifest.json")).unwrap()).unwrap();
    let mut files = 0;
    let mut tensors = 0;
    for entry in std::fs::read_dir(root.join("fixtures/v1")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("zt") {
            continue;
        }
        let rel = format!("v1/{}", path.file_name().unwrap().to_str().unwrap());
        let want = manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["file"] == rel.as_str())
            .unwrap_or_else(|| panic!("{rel} not in manifest.json"));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(sha256_hex(&bytes), want["sha256"].as_str().unwrap());
        let r = LegacyReader::open(bytes.as_slice()).unwrap();
        assert_eq!(r.version(), LegacyVersion::V1_2);
        assert_eq!(r.manifest_version(), Some("1.2.0"));
        let wt = want["tensors"].as_array().unwrap();
        assert_eq!(r.objects().len(), wt.len(), "{rel}");
        for w in wt {
            let name = w["name"].as_str().unwrap();
            let o = r.object(name).unwrap();
            let shape = common::u64s(&w["shape"]);
            assert_eq!(o.shape, shape, "{rel} {name}");
            if let Some(parts) = w.get("parts").and_then(|p| p.as_object()) {
                assert_eq!(o.format.name(), w["zt_layout"].as_str().unwrap());
                assert_eq!(o.components.len(), parts.len());
                for (role, p) in parts {
                    let c = o.component(role).unwrap();
                    assert_eq!(c.dtype.name(), p["dtype"].as_str().unwrap(), "{rel} {name}.{role}");
                    let b = r.read(name, role).unwrap();
                    assert_eq!(b.len() as u64, p["nbytes"].as_u64().unwrap());
                    assert_eq!(sha256_hex(&b), p["sha256"].as_str().unwrap(), "{rel} {name}.{role}");
                    tensors += 1;
                }
            } else {
                assert_eq!(o.format, Format::Dense);
                let c = o.component("data").unwrap();
                assert_eq!(c.dtype.name(), w["dtype"].as_str().unwrap(), "{rel} {name}");
                let b = r.read(name, "data").unwrap();
                // Raw components of an in-memory file are borrowed, not copied.
                assert_eq!(
                    matches!(b, std::borrow::Cow::Borrowed(_)),
                    c.encoding == Encoding::Raw,
                    "{name}"
                );
                assert_eq!(b.len() as u64, w["nbytes"].as_u64().unwrap(), "{rel} {name}");
                assert_eq!(sha256_hex(&b), w["sha256"].as_str().unwrap(), "{rel} {name}");
                tensors += 1;
            }
        }
        files += 1;
    }
    assert_eq!((files, tensors), (2, 10));
}

#[test]
fn fixture_manifest_matches_json_and_converts() {
    let root = data("fixtures/v1");
    let bytes = std::fs::read(root.join("fixtures/v1/v1-sample.zt")).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("fixtures/v1/v1-sample.manifest.json")).unwrap()).unwrap();
    let r = LegacyReader::open(bytes.as_slice()).unwrap();
    for (name, o) in json["objects"].as_object().unwrap() {
        let c = r.object(name).unwrap().component("data").unwrap();
        let j = &o["components"]["data"];
        assert_eq!(c.offset, j["offset"].as_u64().unwrap());
        assert_eq!(c.length, j["length"].as_u64().unwrap());
        assert_eq!(
            c.uncompressed_length,
            j.get("uncompressed_length").and_then(|v| v.as_u64())
        );
        match j.get("digest").and_then(|d| d.as_str()) {
            Some(d) => assert_eq!(c.digest.as_ref(), Some(&Digest::parse(d))),
            None => assert!(c.digest.is_none()),
        }
    }
    assert_eq!(
        r.object("crc").unwrap().component("data").unwrap().digest,
        Some(Digest::Crc32c(0x7874_3A5D))
    );
    let v2 = r.to_v2().unwrap();
    assert_eq!(v2.len(), 7);
    let mask = v2.iter().find(|o| o.name == "mask").unwrap();
    assert_eq!(mask.layout, "dense");
    assert_eq!(
        (mask.parts[0].dtype, mask.parts[0].logical_type.as_deref()),
        (DType::U8, Some("bool"))
    );
    assert_eq!(&*mask.parts[0].bytes, &[1, 0, 1]);
    let z = v2.iter().find(|o| o.name == "zstd").unwrap();
    assert_eq!(z.parts[0].bytes.len(), 4000);
    let csr = LegacyReader::open(std::fs::read(root.join("fixtures/v1/v1-csr.zt")).unwrap()).unwrap();
    let v2 = csr.to_v2().unwrap();
    assert_eq!(v2[0].layout, "zt.sparse_csr/1");
    let names: Vec<_> = v2[0].parts.iter().map(|p| (p.name.as_str(), p.dtype)).collect();
    assert_eq!(
        names,
        [("indices", DType::U64), ("indptr", DType::U64), ("values", DType::F32)]
    );
    // Owned source (no slice): same bytes, copied.
    assert_eq!(&*csr.read("m", "values").unwrap(), &f32_bytes(&[1.0, 2.0, 3.0])[..]);
}

#[test]
fn digests_parse() {
    assert_eq!(Digest::parse("crc32c:0x78743A5D"), Digest::Crc32c(0x7874_3A5D));
    assert_eq!(Digest::parse("crc32c:0X78743a5d"), Digest::Crc32c(0x7874_3A5D));
    assert!(matches!(Digest::parse("crc32c:78743A5D"), Digest::Malformed(_)));
    assert!(matches!(Digest::parse("crc32c:0x78743A5"), Digest::Malformed(_)));
    assert!(matches!(Digest::parse("crc32c:0x+8743A5D"), Digest::Malformed(_)));
    assert!(matches!(Digest::parse("sha256:00"), Digest::Malformed(_)));
    assert_eq!(
        Digest::parse(&format!("sha256:{}", "A".repeat(64))),
        Digest::Sha256([0xAA; 32])
    );
    assert!(matches!(Digest::parse("md5:abc"), Digest::Other(_)));
}

fn zstd_file(stored: Vec<u8>, ulen: u64, digest: Option<String>) -> Vec<u8> {
    let mut c = comp("data", "f32", stored);
    c.extra = vec![("encoding", t("zstd")), ("uncompressed_length", Value::Uint(ulen))];
    if let Some(d) = digest {
        c.extra.push(("digest", Value::text(d)));
    }
    build_v1(vec![("z", vec![ulen / 4], "dense", vec![c])])
}

#[test]
fn built_files_read() {
    let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let mut crc = comp("data", "f32", data.clone());
    crc.extra = vec![("digest", Value::text(format!("crc32c:0x{:08x}", crc32c(&data))))];
    let mut sh = comp("data", "f32", data.clone());
    sh.extra = vec![(
        "digest",
        Value::text(format!("sha256:{}", sha256_hex(&data).to_uppercase())),
    )];
    let mut cx = comp("data", "f32", data.clone());
    cx.extra = vec![("type", t("complex64"))];
    let mut f8 = comp("data", "u8", vec![1, 2]);
    f8.extra = vec![("type", t("f8_e4m3fn"))];
    let mut unk = comp("data", "u16", vec![1, 2]);
    unk.extra = vec![("type", t("mystery")), ("digest", t("md5:whatever"))];
    let file = build_v1(vec![
        ("crc", vec![4], "dense", vec![crc]),
        ("sha", vec![2, 2], "dense", vec![sh]),
        ("cx", vec![2], "dense", vec![cx]),
        ("f8", vec![2], "dense", vec![f8]),
        ("unk", vec![1], "dense", vec![unk]),
        (
            "coo",
            vec![3, 3],
            "sparse_coo",
            vec![
                comp("values", "f32", f32_bytes(&[1.0])),
                comp("coords", "u64", vec![0; 16]),
            ],
        ),
        (
            "q",
            vec![2, 8],
            "quantized_group",
            vec![
                comp("packed_weight", "i32", vec![0; 8]),
                comp("scales", "f16", vec![0; 4]),
            ],
        ),
        ("ext", vec![], "my_format", vec![comp("blob", "u8", vec![9; 3])]),
    ]);
    let r = LegacyReader::open(file.as_slice()).unwrap();
    for o in r.objects() {
        for c in &o.components {
            r.read(&o.name, &c.role).unwrap();
        }
    }
    let v2 = r.to_v2().unwrap();
    let layouts: Vec<_> = v2.iter().map(|o| (o.name.as_str(), o.layout.as_str())).collect();
    assert_eq!(
        layouts,
        [
            ("coo", "zt.sparse_coo/1"),
            ("crc", "dense"),
            ("cx", "dense"),
            ("ext", "ztensor-v1.my_format/1"),
            ("f8", "dense"),
            ("q", "ztensor-v1.quantized_group/1"),
            ("sha", "dense"),
            ("unk", "dense")
        ]
    );
    assert_eq!(v2[2].parts[0].logical_type.as_deref(), Some("complex64"));
    assert_eq!(v2[4].parts[0].logical_type.as_deref(), Some("f8_e4m3fn"));
    assert_eq!(r.read("ext", "blob").unwrap().as_ref(), &[9, 9, 9]);
    assert_eq!(r.read("nope", "data").unwrap_err().rule, Rule::NotFound);
    assert_eq!(r.read("crc", "nope").unwrap_err().rule, Rule::NotFound);

    // zstd with a digest over the compressed bytes, several frames in one stream.
    let raw = f32_bytes(&(0..3000).map(|i| i as f32).collect::<Vec<_>>());
    let mut z = compress_to_vec(&raw[..5000], CompressionLevel::Fastest);
    z.extend(compress_to_vec(&raw[5000..], CompressionLevel::Fastest));
    let f = zstd_file(
        z.clone(),
        raw.len() as u64,
        Some(format!("crc32c:0x{:08X}", crc32c(&z))),
    );
    assert_eq!(
        &*LegacyReader::open(f.as_slice()).unwrap().read("z", "data").unwrap(),
        &raw[..]
    );

    // v0.1: dense raw, dense zstd bounded by the shape, a non-dense entry skipped.
    let z = compress_to_vec(&raw[..400], CompressionLevel::Fastest);
    let v0 = build_v0(vec![
        (
            vec![
                ("name", t("a")),
                ("dtype", t("float32")),
                ("shape", Value::Array(vec![Value::Uint(4)])),
                ("encoding", t("raw")),
            ],
            data.clone(),
        ),
        (
            vec![
                ("name", t("b")),
                ("dtype", t("float32")),
                ("shape", Value::Array(vec![Value::Uint(10), Value::Uint(10)])),
                ("encoding", t("zstd")),
                ("checksum", Value::text(format!("sha256:{}", sha256_hex(&z)))),
            ],
            z.clone(),
        ),
        (
            vec![
                ("name", t("s")),
                ("dtype", t("float32")),
                ("shape", Value::Array(vec![])),
                ("encoding", t("raw")),
                ("layout", t("sparse")),
            ],
            data.clone(),
        ),
        (
            vec![
                ("name", t("m")),
                ("dtype", t("bool")),
                ("shape", Value::Array(vec![Value::Uint(2)])),
                ("encoding", t("raw")),
                ("layout", t("dense")),
            ],
            vec![1, 0],
        ),
    ]);
    let r = LegacyReader::open(v0.as_slice()).unwrap();
    assert_eq!(r.version(), LegacyVersion::V0_1);
    assert_eq!(r.skipped(), ["s"]);
    assert_eq!(&*r.read("a", "data").unwrap(), &data[..]);
    assert_eq!(&*r.read("b", "data").unwrap(), &raw[..400]);
    assert_eq!(r.object("m").unwrap().components[0].dtype, DType::Bool);
    // v0.1 zstd larger than the shape allows: refused.
    let v0 = build_v0(vec![(
        vec![
            ("name", t("b")),
            ("dtype", t("float32")),
            ("shape", Value::Array(vec![Value::Uint(10)])),
            ("encoding", t("zstd")),
        ],
        z,
    )]);
    let e = LegacyReader::open(v0.as_slice())
        .unwrap()
        .read("b", "data")
        .unwrap_err();
    assert_eq!(e.rule, Rule::Encoding, "{e}");
}

#[test]
fn hostile_files_refused() {
    let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let good = build_v1(vec![("a", vec![4], "dense", vec![comp("data", "f32", data.clone())])]);
    LegacyReader::open(good.as_slice()).unwrap();
    let n = good.len();

    // every truncation
    for cut in 0..n {
        let e = open_err(&good[..cut]);
        assert!(!e.to_string().is_empty());
    }
    // magics
    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(open_err(&b).rule, Rule::HeaderMagic);
    let mut b = good.clone();
    b[n - 1] = b'X';
    assert_eq!(open_err(&b).rule, Rule::FooterMagic);
    // lying manifest sizes
    for (size, rule) in [
        (u64::MAX, Rule::ManifestTooLarge),
        ((1 << 30) + 1, Rule::ManifestTooLarge),
        (1 << 30, Rule::ManifestBounds),
        (n as u64 - 16 - 7, Rule::ManifestBounds),
        (n as u64 - 16 - 8, Rule::CborSyntax),
        (3, Rule::CborSyntax),
    ] {
        let mut b = good.clone();
        b[n - 16..n - 8].copy_from_slice(&size.to_le_bytes());
        let e = open_err(&b);
        assert_eq!(e.rule, rule, "size {size}: {e}");
    }
    // misaligned and out-of-bounds components
    let mut c = comp("data", "f32", data.clone());
    c.offset_delta = 4;
    let e = open_err(&build_v1(vec![("a", vec![4], "dense", vec![c])]));
    assert_eq!(e.rule, Rule::BlobAlignment, "{e}");
    assert_eq!(e.offset, Some(68));
    let mut c = comp("data", "f32", data.clone());
    c.offset_delta = 64;
    assert_eq!(
        open_err(&build_v1(vec![("a", vec![4], "dense", vec![c])])).rule,
        Rule::BlobBounds
    );
    let mut c = comp("data", "f32", data.clone());
    c.offset_delta = -64;
    assert_eq!(
        open_err(&build_v1(vec![("a", vec![4], "dense", vec![c])])).rule,
        Rule::BlobBounds
    );
    // schema
    assert_eq!(
        open_err(&build_v1(vec![(
            "a",
            vec![4],
            "dense",
            vec![comp("data", "f128", data.clone())]
        )]))
        .rule,
        Rule::Schema
    );
    assert_eq!(
        open_err(&build_v1(vec![(
            "a",
            vec![4],
            "dense",
            vec![comp("values", "f32", data.clone())]
        )]))
        .rule,
        Rule::Schema
    );
    assert_eq!(
        open_err(&build_v1(vec![(
            "a",
            vec![u64::MAX, 2],
            "dense",
            vec![comp("data", "f32", data.clone())]
        )]))
        .rule,
        Rule::Schema
    );
    let csr = vec![
        comp("values", "f32", data.clone()),
        comp("indices", "u32", vec![0; 4]),
        comp("indptr", "u64", vec![0; 24]),
    ];
    assert_eq!(
        open_err(&build_v1(vec![("m", vec![2, 3], "sparse_csr", csr)])).rule,
        Rule::Schema
    );
    let mut cx = comp("data", "f64", data.clone());
    cx.extra = vec![("type", t("complex64"))];
    assert_eq!(
        open_err(&build_v1(vec![("a", vec![1], "dense", vec![cx])])).rule,
        Rule::Schema
    );
    let mut zn = comp("data", "f32", data.clone());
    zn.extra = vec![("encoding", t("zstd"))];
    assert_eq!(
        open_err(&build_v1(vec![("a", vec![4], "dense", vec![zn])])).rule,
        Rule::Schema
    );
    // unknown encoding: opens, read is Unsupported
    let mut ue = comp("data", "f32", data.clone());
    ue.extra = vec![("encoding", t("lz4"))];
    let f = build_v1(vec![("a", vec![4], "dense", vec![ue])]);
    assert_eq!(
        LegacyReader::open(f.as_slice())
            .unwrap()
            .read("a", "data")
            .unwrap_err()
            .rule,
        Rule::Unsupported
    );

    // bad checksums
    for d in [
        format!("crc32c:0x{:08X}", crc32c(&data) ^ 1),
        format!("sha256:{}", "0".repeat(64)),
        "crc32c:0xZZZZZZZZ".to_string(),
    ] {
        let mut c = comp("data", "f32", data.clone());
        c.extra = vec![("digest", Value::text(d.clone()))];
        let f = build_v1(vec![("a", vec![4], "dense", vec![c])]);
        let e = LegacyReader::open(f.as_slice()).unwrap().read("a", "data").unwrap_err();
        assert_eq!(e.rule, Rule::Digest, "{d}: {e}");
        assert_eq!(e.offset, Some(64));
    }

    // zstd bombs and lies
    let zeros = vec![0u8; 64 << 20];
    let bomb = compress_to_vec(zeros.as_slice(), CompressionLevel::Fastest);
    let e = LegacyReader::open(zstd_file(bomb.clone(), 4000, None).as_slice())
        .unwrap()
        .read("z", "data")
        .unwrap_err();
    assert_eq!(e.rule, Rule::Encoding);
    assert!(e.message.contains("more than"), "{e}");
    let small = compress_to_vec(&data[..], CompressionLevel::Fastest);
    let e = LegacyReader::open(zstd_file(small.clone(), 17, None).as_slice())
        .unwrap()
        .read("z", "data")
        .unwrap_err();
    assert!(e.message.contains("expected 17"), "{e}");
    let e = open_err(&zstd_file(small.clone(), (32 << 30) + 4, None));
    assert_eq!(e.rule, Rule::Encoding, "{e}");
    let mut corrupt = small.clone();
    let l = corrupt.len();
    corrupt[l - 1] ^= 0xFF; // content checksum
    let e = LegacyReader::open(zstd_file(corrupt, 16, None).as_slice())
        .unwrap()
        .read("z", "data")
        .unwrap_err();
    assert!(e.message.contains("checksum"), "{e}");
    let e = LegacyReader::open(zstd_file(vec![], 0, None).as_slice())
        .unwrap()
        .read("z", "data")
        .unwrap_err();
    assert_eq!(e.rule, Rule::Encoding);
    // bool bytes other than 0/1 cannot convert to v2
    let f = build_v1(vec![("m", vec![2], "dense", vec![comp("data", "bool", vec![1, 2])])]);
    let r = LegacyReader::open(f.as_slice()).unwrap();
    assert_eq!(&*r.read("m", "data").unwrap(), &[1, 2]);
    assert_eq!(r.to_v2().unwrap_err().rule, Rule::LayoutData);
    // v0.1: too small, lying size, bad dtype
    assert_eq!(open_err(b"ZTEN0001\0\0\0").rule, Rule::FileTooSmall);
    let mut v0 = b"ZTEN0001".to_vec();
    v0.extend_from_slice(&100u64.to_le_bytes());
    assert_eq!(open_err(&v0).rule, Rule::ManifestBounds);
    let v0 = build_v0(vec![(
        vec![
            ("name", t("a")),
            ("dtype", t("complex64")),
            ("shape", Value::Array(vec![])),
            ("encoding", t("raw")),
        ],
        data,
    )]);
    assert_eq!(open_err(&v0).rule, Rule::Schema);
}

/// Deterministic mutations of the fixtures: nothing may panic, and whatever opens must read or fail cleanly.
#[test]
fn mutation_loop_never_panics() {
    let root = data("fixtures/v1");
    let mut seeds = Vec::new();
    for name in ["v1-sample.zt", "v1-csr.zt"] {
        seeds.push(std::fs::read(root.join("fixtures/v1").join(name)).unwrap());
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut opened, mut read_ok) = (0, 0);
    for i in 0..6000 {
        let mut b = seeds[i % seeds.len()].clone();
        for _ in 0..1 + next() % 4 {
            let pos = (next() % b.len() as u64) as usize;
            match next() % 6 {
                0 => b[pos] ^= 1 << (next() % 8),
                1 => b[pos] = next() as u8,
                2 => b.truncate(pos),
                3 => b.insert(pos, next() as u8),
                4 => {
                    b.remove(pos);
                }
                _ => b[pos] = [0, 0xFF, 0x7F, 0x80, 0x40][(next() % 5) as usize],
            }
            if b.is_empty() {
                break;
            }
        }
        if let Ok(r) = LegacyReader::open(b.as_slice()) {
            opened += 1;
            for o in r.objects() {
                for c in &o.components {
                    if r.read(&o.name, &c.role).is_ok() {
                        read_ok += 1;
                    }
                }
            }
            let _ = r.to_v2();
        }
    }
    assert!(opened > 100 && read_ok > 100, "opened {opened}, read {read_ok}");
}
