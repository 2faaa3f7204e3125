//! GGUF against the fixtures in `tests/data`, hand-built attacks and property tests.
//!
//! * `manifest_fixtures`: every `gguf` file of `tests/data/fixtures/manifest.json` reads to the
//!   manifest's names, dtypes, shapes and sha256 (raw blocks for quantized tensors), with the same
//!   metadata values and tensor attributes; every quantized tensor dequantizes to the manifest's
//!   `dequantized.sha256` (the output of `gguf.quants.dequantize`). Every hostile file is refused
//!   with the kind in `HOSTILE`.
//! * `attack_*`: one hand-built hostile input per known attack, with the expected `ErrorKind`.
//! * Splits, v1, big-endian, listing cost (a 2.5 GB file lists by reading its header only).
//! * Properties: mutated valid files never panic; generated files round-trip; random blocks of
//!   every ggml type dequantize without panicking.

use crate::common;

use common::{f32_bytes, sha256_hex};
use proptest::prelude::*;
use tensorlane_core::formats::ggml::{self, GgmlType};
use tensorlane_core::formats::{self, Catalog, ElementType, ErrorKind, FormatError, Meta, gguf};
use tensorlane_core::source::{ReadAt, SourceError};

/// Each hostile fixture and the kind it must be refused with.
const HOSTILE: &[(&str, ErrorKind)] = &[
    ("gguf/hostile/tensor-count-huge.gguf", ErrorKind::Limit),
    ("gguf/hostile/kv-string-length-huge.gguf", ErrorKind::Limit),
    ("gguf/hostile/kv-array-length-huge.gguf", ErrorKind::Limit),
    ("gguf/hostile/tensor-data-out-of-bounds.gguf", ErrorKind::OutOfBounds),
    ("gguf/hostile/tensor-dims-overflow.gguf", ErrorKind::Overflow),
    ("gguf/hostile/unsupported-version.gguf", ErrorKind::UnsupportedVersion),
];

/// A manifest metadata value (`{type, value}` / `{type: ARRAY, item_type, value}`) as [`Meta`].
fn meta_of(ty: &str, v: &serde_json::Value) -> Meta {
    match ty {
        "UINT8" | "UINT16" | "UINT32" | "UINT64" => Meta::UInt(v.as_u64().unwrap()),
        "INT8" | "INT16" | "INT32" | "INT64" => Meta::Int(v.as_i64().unwrap()),
        "FLOAT32" | "FLOAT64" => Meta::Float(v.as_f64().unwrap()),
        "BOOL" => Meta::Bool(v.as_bool().unwrap()),
        "STRING" => Meta::Str(v.as_str().unwrap().into()),
        other => panic!("unknown manifest type {other}"),
    }
}

fn meta_of_entry(e: &serde_json::Value) -> Meta {
    let ty = e["type"].as_str().unwrap();
    if ty != "ARRAY" {
        return meta_of(ty, &e["value"]);
    }
    let item = e["item_type"].as_str().unwrap();
    Meta::List(
        e["value"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                if item == "ARRAY" {
                    meta_of_entry(v)
                } else {
                    meta_of(item, v)
                }
            })
            .collect(),
    )
}

/// Equal, floats within 2 ulp (serde_json without `float_roundtrip` parses the manifest's
/// shortest-form doubles to a neighbour now and then).
fn same(a: &Meta, b: &Meta) -> bool {
    match (a, b) {
        (Meta::Float(x), Meta::Float(y)) => x == y || (x.to_bits() as i64 - y.to_bits() as i64).abs() <= 2,
        (Meta::List(x), Meta::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        _ => a == b,
    }
}

fn attr<'a>(t: &'a formats::TensorInfo, key: &str) -> &'a Meta {
    common::attr(t, key).unwrap_or_else(|| panic!("{}: no attribute {key}", t.name))
}

#[test]
fn manifest_fixtures() {
    let fixtures = common::fixtures(&["gguf"]);
    let (mut read, mut rejected, mut dequantized) = (0, 0, 0);
    for fx in &fixtures {
        let bytes = fx.bytes();
        match fx.expect() {
            "read" => {
                let cat = gguf::open(&bytes).unwrap_or_else(|e| panic!("{}: {e}", fx.file()));
                assert_eq!(cat.format.name(), "gguf");
                common::check_catalog(fx, &cat, &[&bytes[..]]);
                // Metadata: the same keys, each with the manifest's value.
                let want = fx.entry["metadata"].as_object().unwrap();
                assert_eq!(cat.metadata.len(), want.len(), "{}: metadata count", fx.file());
                for (k, e) in want {
                    let got = &cat
                        .metadata
                        .iter()
                        .find(|(n, _)| n == k)
                        .unwrap_or_else(|| panic!("{k}"))
                        .1;
                    assert!(same(got, &meta_of_entry(e)), "{}: metadata {k}: {got:?}", fx.file());
                }
                for (t, w) in cat.tensors.iter().zip(fx.entry["tensors"].as_array().unwrap()) {
                    let what = format!("{} / {}", fx.file(), t.name);
                    assert_eq!(
                        attr(t, "ggml_type"),
                        &Meta::Str(w["ggml_type"].as_str().unwrap().into())
                    );
                    let ne: Vec<Meta> = w["ggml_ne"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| Meta::UInt(d.as_u64().unwrap()))
                        .collect();
                    assert_eq!(attr(t, "ggml_ne"), &Meta::List(ne), "{what}");
                    assert_eq!(
                        attr(t, "data_offset"),
                        &Meta::UInt(w["data_offset"].as_u64().unwrap()),
                        "{what}"
                    );
                    if let Some(d) = w.get("dequantized") {
                        let ElementType::Ggml(ty) = t.ty else {
                            panic!("{what}: not a ggml type")
                        };
                        let raw = formats::read("gguf", t, &[&bytes[..]]).unwrap();
                        let out = ggml::dequantize(ty, &raw).unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(out.len() as u64, t.numel().unwrap(), "{what}");
                        assert_eq!(
                            sha256_hex(&f32_bytes(&out)),
                            d["sha256"].as_str().unwrap(),
                            "{what}: dequantized"
                        );
                        dequantized += 1;
                    }
                }
                read += 1;
            }
            "reject" => {
                let want = common::expected_refusal(HOSTILE, fx);
                let e = gguf::open(&bytes).expect_err(fx.file());
                assert_eq!(e.kind, want, "{}: {e}", fx.file());
                rejected += 1;
            }
            other => panic!("{}: unexpected expect {other}", fx.file()),
        }
    }
    assert_eq!(rejected, HOSTILE.len());
    assert!(read >= 4 && dequantized >= 10, "read {read}, dequantized {dequantized}");
}

// --- A small GGUF writer for hand-built inputs ---------------------------------------------------

/// Writes GGUF files field by field (little-endian unless `be`).
#[derive(Clone)]
struct Builder {
    version: u32,
    be: bool,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
    alignment: usize,
}

impl Builder {
    fn new(version: u32) -> Builder {
        Builder {
            version,
            be: false,
            kv: vec![],
            n_kv: 0,
            infos: vec![],
            n_tensors: 0,
            data: vec![],
            alignment: 32,
        }
    }

    fn int(&self, v: u64, n: usize) -> Vec<u8> {
        let b = v.to_le_bytes()[..n].to_vec();
        if self.be { b.into_iter().rev().collect() } else { b }
    }

    fn len(&self, v: u64) -> Vec<u8> {
        self.int(v, if self.version == 1 { 4 } else { 8 })
    }

    fn string(&self, s: &[u8]) -> Vec<u8> {
        let mut out = self.len(s.len() as u64);
        out.extend_from_slice(s);
        out
    }

    /// A key/value with an already encoded value.
    fn kv_raw(mut self, key: &str, ty: u32, value: &[u8]) -> Builder {
        let mut e = self.string(key.as_bytes());
        e.extend(self.int(ty.into(), 4));
        e.extend_from_slice(value);
        self.kv.extend(e);
        self.n_kv += 1;
        self
    }

    fn kv_u32(self, key: &str, v: u32) -> Builder {
        let b = self.int(v.into(), 4);
        self.kv_raw(key, 4, &b)
    }

    fn kv_str(self, key: &str, v: &str) -> Builder {
        let b = self.string(v.as_bytes());
        self.kv_raw(key, 8, &b)
    }

    /// A tensor info (`ne` fastest first) whose bytes are appended (aligned) to the data section.
    fn tensor(mut self, name: &str, ne: &[u64], ty: u32, bytes: &[u8]) -> Builder {
        let pad = self.data.len().next_multiple_of(self.alignment);
        self.data.resize(pad, 0);
        let offset = self.data.len() as u64;
        self.data.extend_from_slice(bytes);
        self.info(name, ne, ty, offset)
    }

    /// A tensor info alone.
    fn info(mut self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Builder {
        let mut e = self.string(name.as_bytes());
        e.extend(self.int(ne.len() as u64, 4));
        for &d in ne {
            e.extend(self.len(d));
        }
        e.extend(self.int(ty.into(), 4));
        e.extend(self.int(offset, 8));
        self.infos.extend(e);
        self.n_tensors += 1;
        self
    }

    fn build(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.int(self.version.into(), 4));
        out.extend(self.len(self.n_tensors));
        out.extend(self.len(self.n_kv));
        out.extend_from_slice(&self.kv);
        out.extend_from_slice(&self.infos);
        if self.n_tensors > 0 {
            out.resize(out.len().next_multiple_of(self.alignment), 0);
            out.extend_from_slice(&self.data);
        }
        out
    }
}

/// A valid file with metadata of several types and a dense and a quantized tensor.
fn valid() -> Builder {
    let q8: Vec<u8> = (0..34u8).map(|i| if i == 1 { 0x3c } else { i }).collect();
    Builder::new(3)
        .kv_str("general.architecture", "test")
        .kv_u32("test.n", 7)
        .kv_raw(
            "test.arr",
            9,
            &[4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0],
        )
        .tensor("a", &[3, 2], 0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        .tensor("q", &[32], 8, &q8)
}

fn kind(bytes: &[u8]) -> ErrorKind {
    common::refusal_kind(gguf::open(bytes))
}

#[test]
fn hand_built_file_reads() {
    let b = valid().build();
    let cat = gguf::open(&b).unwrap();
    assert_eq!(cat.metadata[1], ("test.n".into(), Meta::UInt(7)));
    assert_eq!(cat.metadata[2].1, Meta::List(vec![Meta::UInt(1), Meta::UInt(2)]));
    assert_eq!(cat.tensors[0].shape, [2, 3]);
    assert_eq!(cat.tensors[0].ty, ElementType::Dense(tensorlane_core::DType::F32));
    assert_eq!(cat.tensors[1].ty, ElementType::Ggml(GgmlType(8)));
    let raw = formats::read("gguf", &cat.tensors[0], &[&b[..]]).unwrap();
    assert!(matches!(raw, std::borrow::Cow::Borrowed(_)), "zero-copy");
    assert_eq!(&raw[..], &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[..]);
}

#[test]
fn version_1_reads() {
    let b = Builder::new(1)
        .kv_str("general.architecture", "old")
        .kv_raw("old.arr", 9, &[8, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, b'h', b'i'])
        .tensor("w", &[2, 2], 0, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]))
        .build();
    let cat = gguf::open(&b).unwrap();
    assert_eq!(cat.metadata[0].1, Meta::Str("old".into()));
    assert_eq!(cat.metadata[1].1, Meta::List(vec![Meta::Str("hi".into())]));
    assert_eq!(cat.tensors[0].shape, [2, 2]);
    assert_eq!(
        &formats::read("gguf", &cat.tensors[0], &[&b[..]]).unwrap()[..],
        &f32_bytes(&[1.0, 2.0, 3.0, 4.0])[..]
    );
}

#[test]
fn big_endian_reads_dense_and_skips_blocks() {
    let mut be = Builder::new(3);
    be.be = true;
    let vals: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let b = be
        .kv_u32("x.n", 0x0102_0304)
        .tensor("w", &[2], 0, &vals)
        .tensor("q", &[32], 2, &[0u8; 18])
        .build();
    let cat = gguf::open(&b).unwrap();
    assert_eq!(cat.metadata[0].1, Meta::UInt(0x0102_0304));
    assert_eq!(
        &formats::read("gguf", &cat.tensors[0], &[&b[..]]).unwrap()[..],
        &f32_bytes(&[1.5, -2.0])[..]
    );
    assert_eq!(cat.tensors.len(), 1);
    assert_eq!(cat.skipped[0].0, "q");
}

#[test]
fn alignment_is_honoured() {
    let mut b = Builder::new(3).kv_u32("general.alignment", 64);
    b.alignment = 64;
    let b = b
        .tensor("a", &[1], 0, &f32_bytes(&[1.0]))
        .tensor("b", &[1], 0, &f32_bytes(&[2.0]))
        .build();
    let cat = gguf::open(&b).unwrap();
    let off = |i: usize| match cat.tensors[i].storage {
        formats::Storage::Range { offset, .. } => offset,
        _ => unreachable!(),
    };
    assert_eq!((off(0) % 64, off(1) - off(0)), (0, 64));
}

// --- Attacks -----------------------------------------------------------------------------------

#[test]
fn attack_tensor_count_huge() {
    let mut b = valid();
    b.n_tensors = 1 << 62;
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
    b.n_tensors = 1 << 19; // under MAX_TENSORS but more than the file holds
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
}

#[test]
fn attack_kv_count_huge() {
    let mut b = valid();
    b.n_kv = u64::MAX;
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
}

#[test]
fn attack_key_length_huge() {
    let mut b = Builder::new(3);
    b.kv = (1u64 << 60).to_le_bytes().to_vec();
    b.n_kv = 1;
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
}

#[test]
fn attack_string_value_length_huge() {
    let b = Builder::new(3).kv_raw("s", 8, &(u64::MAX - 3).to_le_bytes());
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
}

#[test]
fn attack_array_length_huge() {
    for item in [0u32, 8, 9, 10] {
        let mut v = item.to_le_bytes().to_vec();
        v.extend((1u64 << 61).to_le_bytes());
        let b = Builder::new(3).kv_raw("a", 9, &v);
        assert_eq!(kind(&b.build()), ErrorKind::Limit, "item type {item}");
    }
}

#[test]
fn attack_array_nesting_deep() {
    // 100 nested arrays of one item each, ending in a u8.
    let mut v = vec![];
    for _ in 0..100 {
        v.extend(9u32.to_le_bytes());
        v.extend(1u64.to_le_bytes());
    }
    v.extend(0u32.to_le_bytes());
    v.extend(1u64.to_le_bytes());
    v.push(1);
    let b = Builder::new(3).kv_raw("deep", 9, &v[4..]);
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
}

fn refusal(bytes: &[u8]) -> FormatError {
    match gguf::open(bytes) {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn attack_unknown_value_types() {
    // The value of key "general.x" has type 13: the error names the key as a key, at the value.
    let b = Builder::new(3)
        .kv_str("general.name", "ok")
        .kv_raw("general.x", 13, &[0; 8]);
    let e = refusal(&b.build());
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert_eq!(e.key.as_deref(), Some("general.x"));
    assert_eq!(e.tensor, None, "a key is not a tensor: {e}");
    let value_at = (4 + 4 + 8 + 8) + (8 + 12 + 4 + 8 + 2) + (8 + 9 + 4);
    assert_eq!(e.offset, Some(value_at as u64));
    let shown = e.to_string();
    assert!(shown.contains("metadata key 'general.x'"), "{shown}");
    assert!(shown.contains("value type 13"), "{shown}");
    assert!(!shown.contains("tensor"), "{shown}");
    // An array whose item type is unknown, nested inside another array: still the key.
    let mut inner = 77u32.to_le_bytes().to_vec();
    inner.extend(0u64.to_le_bytes());
    let mut v = 9u32.to_le_bytes().to_vec();
    v.extend(1u64.to_le_bytes());
    v.extend(&inner);
    let e = refusal(&Builder::new(3).kv_raw("tokenizer.ggml.tokens", 9, &v).build());
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert_eq!(e.key.as_deref(), Some("tokenizer.ggml.tokens"));
    assert_eq!(e.tensor, None);
    assert!(e.to_string().contains("item type 77"), "{e}");
}

#[test]
fn attack_more_than_ggml_max_dims() {
    // Four dimensions is GGML_MAX_DIMS and reads.
    let b = Builder::new(3).tensor("four", &[2, 1, 1, 1], 0, &f32_bytes(&[1.0, 2.0]));
    let cat = gguf::open(&b.build()).unwrap();
    assert_eq!(cat.tensors[0].shape, [1, 1, 1, 2]);
    // Five is refused as llama.cpp refuses it, naming the tensor, n_dims, where and the rule.
    for version in [1, 3] {
        let b = Builder::new(version)
            .tensor("ok", &[2], 0, &f32_bytes(&[1.0, 2.0]))
            .tensor("blk.0.five", &[2, 1, 1, 1, 1], 0, &f32_bytes(&[1.0, 2.0]));
        let bytes = b.build();
        let e = refusal(&bytes);
        assert_eq!(e.kind, ErrorKind::Limit);
        assert_eq!(e.tensor.as_deref(), Some("blk.0.five"));
        // The offset is that of the n_dims field: right after the second tensor info's name.
        let at = e.offset.expect("an offset") as usize;
        assert_eq!(&bytes[at..at + 4], &5u32.to_le_bytes());
        assert_eq!(&bytes[at - 10..at], b"blk.0.five");
        let shown = e.to_string();
        for want in ["tensor 'blk.0.five'", "n_dims = 5", "GGML_MAX_DIMS", "at most 4"] {
            assert!(shown.contains(want), "{want:?} missing from: {shown}");
        }
    }
    // Big-endian files are held to the same rule.
    let mut b = Builder::new(3);
    b.be = true;
    let b = b.tensor("t", &[1, 1, 1, 1, 1, 1], 0, &[63, 128, 0, 0]);
    let e = refusal(&b.build());
    assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Limit, Some("t")));
}

#[test]
fn attack_duplicates() {
    let b = valid().kv_u32("test.n", 8);
    assert_eq!(kind(&b.build()), ErrorKind::Duplicate);
    let b = valid().tensor("a", &[1], 0, &f32_bytes(&[0.0]));
    assert_eq!(kind(&b.build()), ErrorKind::Duplicate);
}

#[test]
fn attack_dims() {
    let mut b = Builder::new(3).info("t", &[], 0, 0);
    // n_dims = 2**31
    let at = b.infos.len() - 16;
    b.infos[at..at + 4].copy_from_slice(&(1u32 << 31).to_le_bytes());
    assert_eq!(kind(&b.build()), ErrorKind::Limit);
    let b = Builder::new(3).info("t", &[1024, 1 << 32, 1 << 32], 0, 0);
    assert_eq!(kind(&b.build()), ErrorKind::Overflow);
    let b = Builder::new(3).info("t", &[1 << 63], 24, 0);
    assert_eq!(kind(&b.build()), ErrorKind::Overflow);
    // Elements fit, bytes do not.
    let b = Builder::new(3).info("t", &[1 << 62], 0, 0);
    assert_eq!(kind(&b.build()), ErrorKind::Overflow);
}

#[test]
fn attack_tensor_out_of_bounds() {
    let b = Builder::new(3).info("t", &[1024], 0, 0);
    assert_eq!(kind(&b.build()), ErrorKind::OutOfBounds);
    let b = valid().info("far", &[1], 0, u64::MAX - 31);
    assert_eq!(kind(&b.build()), ErrorKind::OutOfBounds);
}

#[test]
fn attack_misaligned_offset() {
    let b = valid().info("odd", &[1], 0, 4);
    assert_eq!(kind(&b.build()), ErrorKind::Syntax);
}

#[test]
fn attack_overlap() {
    let b = valid().info("alias", &[2], 0, 0);
    assert_eq!(kind(&b.build()), ErrorKind::Overlap);
}

#[test]
fn attack_bad_alignment() {
    for a in [0u32, 3, 48] {
        let b = Builder::new(3)
            .kv_u32("general.alignment", a)
            .tensor("a", &[1], 0, &f32_bytes(&[1.0]));
        assert_eq!(kind(&b.build()), ErrorKind::Syntax, "alignment {a}");
    }
    let b = Builder::new(3).kv_str("general.alignment", "32");
    assert_eq!(kind(&b.build()), ErrorKind::Syntax);
}

#[test]
fn attack_unknown_ggml_type() {
    let b = Builder::new(3).tensor("t", &[1], 4, &[0; 32]);
    assert_eq!(kind(&b.build()), ErrorKind::Unsupported);
    let b = Builder::new(3).tensor("t", &[1], 1000, &[0; 32]);
    assert_eq!(kind(&b.build()), ErrorKind::Unsupported);
}

#[test]
fn attack_partial_block() {
    // Q4_0 with 16 elements: half a block.
    let b = Builder::new(3).tensor("t", &[16, 2], 2, &[0; 36]);
    assert_eq!(kind(&b.build()), ErrorKind::SizeMismatch);
}

#[test]
fn attack_versions_and_magic() {
    for v in [0u32, 4, 99, 0x0300_0001, u32::MAX] {
        let mut b = valid().build();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert_eq!(kind(&b), ErrorKind::UnsupportedVersion, "version {v:#x}");
    }
    let mut b = valid().build();
    b[0] = b'X';
    assert_eq!(kind(&b), ErrorKind::Syntax);
}

#[test]
fn attack_invalid_utf8_names() {
    let b = Builder::new(3).kv_raw("~", 0, &[1]);
    let mut bytes = b.build();
    let at = bytes.iter().position(|&c| c == b'~').unwrap();
    bytes[at] = 0xFF;
    assert_eq!(kind(&bytes), ErrorKind::Syntax);
    let b = Builder::new(3).info("~", &[1], 0, 0);
    let mut bytes = b.build();
    let at = bytes.iter().position(|&c| c == b'~').unwrap();
    bytes[at] = 0xC0;
    assert_eq!(kind(&bytes), ErrorKind::Syntax);
}

#[test]
fn attack_every_truncation() {
    let b = valid().build();
    for n in 0..b.len() {
        let e = gguf::open(&b[..n]).expect_err("truncated");
        assert!(
            matches!(e.kind, ErrorKind::Truncated | ErrorKind::Limit | ErrorKind::OutOfBounds),
            "{n}: {e}"
        );
    }
}

/// A virtual file: `head`, then zeros up to `size`, counting the bytes read.
struct Virtual {
    head: Vec<u8>,
    size: u64,
    read: std::cell::Cell<u64>,
}

impl ReadAt for Virtual {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        tensorlane_core::source::check_range(offset, buf.len() as u64, self.size)?;
        self.read.set(self.read.get() + buf.len() as u64);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.head.get(offset as usize + i).copied().unwrap_or(0);
        }
        Ok(())
    }
}

#[test]
fn attack_header_over_limit() {
    // A 150 MB string in a 200 MB file: within the file, over MAX_HEADER.
    let b = Builder::new(3).kv_raw("s", 8, &(150u64 << 20).to_le_bytes());
    let v = Virtual {
        head: b.build(),
        size: 200 << 20,
        read: 0.into(),
    };
    assert_eq!(gguf::open(&v).unwrap_err().kind, ErrorKind::HeaderTooLarge);
    assert!(v.read.get() < 1 << 20, "read {} bytes", v.read.get());
}

#[test]
fn listing_a_large_file_reads_only_its_header() {
    // 200 tensors of 12.5 MB each: a 2.5 GB model whose header is a few KB.
    let mut b = Builder::new(3).kv_str("general.architecture", "big");
    let per = 12_500_000u64 / 32 * 32;
    for i in 0..200u64 {
        b = b.info(&format!("blk.{i}.weight"), &[per / 4], 0, i * per);
    }
    let head = b.build();
    let data_start = head.len() as u64;
    let v = Virtual {
        head,
        size: data_start + 200 * per,
        read: 0.into(),
    };
    let cat = gguf::open(&v).unwrap();
    assert_eq!(cat.tensors.len(), 200);
    assert!(v.size > 2_400_000_000);
    assert!(v.read.get() * 100 < v.size, "read {} of {} bytes", v.read.get(), v.size);
    assert!(v.read.get() <= 64 << 10, "read {} bytes", v.read.get());
}

// --- Splits -------------------------------------------------------------------------------------

fn split_part(no: u16, count: u16, total: i32, name: &str, v: f32) -> Vec<u8> {
    Builder::new(3)
        .kv_raw("split.no", 2, &no.to_le_bytes())
        .kv_raw("split.count", 2, &count.to_le_bytes())
        .kv_raw("split.tensors.count", 5, &total.to_le_bytes())
        .tensor(name, &[1], 0, &f32_bytes(&[v]))
        .build()
}

fn open_set(files: &[(String, Vec<u8>)], first: &str) -> Result<Catalog, FormatError> {
    let bytes = &files.iter().find(|(n, _)| n == first).unwrap().1;
    let cat = gguf::open(bytes)?;
    gguf::open_splits(cat, &format!("models/{first}"), &mut |name| {
        let (_, b) = files
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| FormatError::new("gguf", ErrorKind::Companion, format!("missing {name}")))?;
        gguf::open(b)
    })
}

#[test]
fn splits_join() {
    let files: Vec<(String, Vec<u8>)> = (0..3u16)
        .map(|i| {
            (
                format!("m-{:05}-of-00003.gguf", i + 1),
                split_part(i, 3, 3, &format!("t{i}"), i as f32),
            )
        })
        .collect();
    let cat = open_set(&files, "m-00001-of-00003.gguf").unwrap();
    assert_eq!(cat.sources, ["", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"]);
    let srcs: Vec<&[u8]> = vec![&files[0].1, &files[1].1, &files[2].1];
    for (i, t) in cat.tensors.iter().enumerate() {
        assert_eq!(t.name, format!("t{i}"));
        assert_eq!(&formats::read("gguf", t, &srcs).unwrap()[..], &(i as f32).to_le_bytes());
    }
    // Not the first split.
    assert_eq!(
        open_set(&files, "m-00002-of-00003.gguf").unwrap_err().kind,
        ErrorKind::Companion
    );
    // A missing part.
    assert_eq!(
        open_set(&files[..2], "m-00001-of-00003.gguf").unwrap_err().kind,
        ErrorKind::Companion
    );
    // A part that claims another place.
    let mut bad = files.clone();
    bad[2].1 = split_part(1, 3, 3, "t2", 2.0);
    assert_eq!(
        open_set(&bad, "m-00001-of-00003.gguf").unwrap_err().kind,
        ErrorKind::Companion
    );
    // A wrong total.
    let mut bad = files.clone();
    bad[0].1 = split_part(0, 3, 4, "t0", 0.0);
    assert_eq!(
        open_set(&bad, "m-00001-of-00003.gguf").unwrap_err().kind,
        ErrorKind::Companion
    );
    // A repeated tensor name across parts.
    let mut bad = files.clone();
    bad[1].1 = split_part(1, 3, 3, "t0", 1.0);
    assert_eq!(
        open_set(&bad, "m-00001-of-00003.gguf").unwrap_err().kind,
        ErrorKind::Duplicate
    );
    // A split file whose name does not follow the pattern.
    let mut bad = files.clone();
    bad[0].0 = "renamed.gguf".into();
    assert_eq!(open_set(&bad, "renamed.gguf").unwrap_err().kind, ErrorKind::Companion);
    // A single file passes through.
    let one = valid().build();
    let cat = gguf::open(&one).unwrap();
    let same = gguf::open_splits(cat.clone(), "x.gguf", &mut |_| unreachable!()).unwrap();
    assert_eq!(cat, same);
}

// --- Dequantization -----------------------------------------------------------------------------

#[test]
fn dequantize_refusals() {
    assert_eq!(
        ggml::dequantize(GgmlType(2), &[0; 17]).unwrap_err().kind,
        ErrorKind::SizeMismatch
    );
    assert_eq!(
        ggml::dequantize(GgmlType(41), &[0; 18]).unwrap_err().kind,
        ErrorKind::Unsupported
    );
    assert_eq!(
        ggml::dequantize(GgmlType(26), &[0; 4]).unwrap_err().kind,
        ErrorKind::Unsupported
    );
    assert_eq!(
        ggml::dequantize(GgmlType(4), &[0; 4]).unwrap_err().kind,
        ErrorKind::Unsupported
    );
    assert_eq!(ggml::dequantize(GgmlType(30), &[0x80, 0x3f]).unwrap(), [1.0]);
    assert_eq!(ggml::dequantize(GgmlType(1), &[0x00, 0x3c]).unwrap(), [1.0]);
    assert!(ggml::dequantize(GgmlType(12), &[]).unwrap().is_empty());
}

// --- Properties ---------------------------------------------------------------------------------

/// Opens `bytes` and reads (and dequantizes) every tensor: never panics.
fn exercise(bytes: &[u8]) {
    if let Ok(cat) = gguf::open(bytes) {
        for t in &cat.tensors {
            if let (Ok(raw), ElementType::Ggml(ty)) = (formats::read("gguf", t, &[bytes]), t.ty) {
                let _ = ggml::dequantize(ty, &raw);
            }
        }
    }
}

fn type_ids() -> Vec<u32> {
    ggml::TYPES.iter().map(|e| e.0).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_files_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut b = valid().build();
        for (i, v) in flips {
            let at = i.index(b.len());
            b[at] = v;
        }
        if truncate {
            b.truncate(cut.index(b.len()));
        }
        exercise(&b);
    }

    #[test]
    fn generated_files_round_trip(
        version in 1u32..=3,
        ints in proptest::collection::vec(any::<u32>(), 0..5),
        strs in proptest::collection::vec("[a-z\u{e9}]{0,6}", 0..4),
        tensors in proptest::collection::vec((proptest::collection::vec(1u64..4, 0..4), any::<u8>()), 0..5),
    ) {
        let mut b = Builder::new(version).kv_str("general.architecture", "p");
        for (i, v) in ints.iter().enumerate() {
            b = b.kv_u32(&format!("p.i{i}"), *v);
        }
        if !strs.is_empty() {
            let mut v = 8u32.to_le_bytes().to_vec();
            v.extend(b.len(strs.len() as u64));
            for s in &strs {
                v.extend(b.string(s.as_bytes()));
            }
            b = b.kv_raw("p.strs", 9, &v);
        }
        let mut want = vec![];
        for (i, (ne, fill)) in tensors.iter().enumerate() {
            let n: u64 = ne.iter().product();
            let bytes: Vec<u8> = (0..n * 2).map(|k| fill.wrapping_add(k as u8)).collect();
            b = b.tensor(&format!("t{i}"), ne, 1, &bytes);
            want.push((ne.iter().rev().copied().collect::<Vec<u64>>(), bytes));
        }
        let file = b.build();
        let cat = gguf::open(&file).unwrap();
        prop_assert_eq!(cat.metadata.len(), 1 + ints.len() + usize::from(!strs.is_empty()));
        for (i, v) in ints.iter().enumerate() {
            prop_assert_eq!(&cat.metadata[1 + i].1, &Meta::UInt(u64::from(*v)));
        }
        if !strs.is_empty() {
            let l = Meta::List(strs.iter().map(|s| Meta::Str(s.clone())).collect());
            prop_assert_eq!(&cat.metadata[1 + ints.len()].1, &l);
        }
        prop_assert_eq!(cat.tensors.len(), want.len());
        for (t, (shape, bytes)) in cat.tensors.iter().zip(&want) {
            prop_assert_eq!(&t.shape, shape);
            prop_assert_eq!(&formats::read("gguf", t, &[&file[..]]).unwrap()[..], &bytes[..]);
        }
    }

    #[test]
    fn random_blocks_dequantize(
        ty in proptest::sample::select(type_ids()),
        blocks in 0usize..4,
        seed in any::<u64>(),
    ) {
        let ty = GgmlType(ty);
        let size = ty.type_size().unwrap() as usize * blocks;
        let mut x = seed | 1;
        let bytes: Vec<u8> = (0..size).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
        match ggml::dequantize(ty, &bytes) {
            Ok(v) => prop_assert_eq!(v.len() as u64, ty.block_size().unwrap() * blocks as u64),
            Err(e) => prop_assert!(!ggml::can_dequantize(ty), "{}", e),
        }
    }
}
