//! ONNX reader: every `onnx` fixture of the fixture manifest (external data companions read with
//! std::fs), the hostile fixtures, one named test per known attack (hand-built protobuf), a
//! 2.5 GB model listed through a counting source, and property tests.

use crate::common;

use std::cell::Cell;
use std::path::Path;

use common::attr;

use proptest::prelude::*;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, Catalog, ErrorKind, FormatError, MAX_HEADER, Meta, Storage, onnx};
use tensorlane_core::source::{ReadAt, SourceError};

// ---------------------------------------------------------------------------------------------
// A tiny protobuf writer for hand-built models.

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[derive(Clone, Default, Debug)]
struct Msg(Vec<u8>);

impl Msg {
    fn new() -> Msg {
        Msg::default()
    }
    fn tag(mut self, field: u32, wire: u8) -> Msg {
        put_varint(&mut self.0, (u64::from(field) << 3) | u64::from(wire));
        self
    }
    fn varint(self, field: u32, v: u64) -> Msg {
        let mut m = self.tag(field, 0);
        put_varint(&mut m.0, v);
        m
    }
    fn fixed32(self, field: u32, v: u32) -> Msg {
        let mut m = self.tag(field, 5);
        m.0.extend_from_slice(&v.to_le_bytes());
        m
    }
    fn fixed64(self, field: u32, v: u64) -> Msg {
        let mut m = self.tag(field, 1);
        m.0.extend_from_slice(&v.to_le_bytes());
        m
    }
    fn bytes(self, field: u32, b: &[u8]) -> Msg {
        let mut m = self.tag(field, 2);
        put_varint(&mut m.0, b.len() as u64);
        m.0.extend_from_slice(b);
        m
    }
    fn str(self, field: u32, s: &str) -> Msg {
        self.bytes(field, s.as_bytes())
    }
    fn msg(self, field: u32, m: &Msg) -> Msg {
        self.bytes(field, &m.0)
    }
    fn packed(self, field: u32, vals: &[u64]) -> Msg {
        let mut b = Vec::new();
        for &v in vals {
            put_varint(&mut b, v);
        }
        self.bytes(field, &b)
    }
}

/// A `TensorProto` header: dims (packed), data_type, name.
fn tensor(name: &str, data_type: u64, dims: &[i64]) -> Msg {
    let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    Msg::new().packed(1, &dims).varint(2, data_type).str(8, name)
}

fn graph_of(inits: &[Msg]) -> Msg {
    let mut g = Msg::new().str(2, "g");
    for t in inits {
        g = g.msg(5, t);
    }
    g
}

fn model_with(graph: &Msg) -> Vec<u8> {
    let opset = Msg::new().str(1, "").varint(2, 17);
    Msg::new().varint(1, 8).str(2, "hand").msg(7, graph).msg(8, &opset).0
}

fn model(inits: &[Msg]) -> Vec<u8> {
    model_with(&graph_of(inits))
}

fn open(bytes: &[u8]) -> Result<Catalog, FormatError> {
    onnx::open(bytes)
}

fn kind(bytes: &[u8]) -> ErrorKind {
    common::refusal_kind(open(bytes))
}

fn read_all(cat: &Catalog, data: &[u8]) -> Vec<Vec<u8>> {
    let sources: Vec<&[u8]> = cat.sources.iter().map(|_| data).collect();
    cat.tensors
        .iter()
        .map(|t| formats::read("onnx", t, &sources).unwrap().into_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Shared fixtures.

/// Opens a model file as a host would: the catalog, then its companions (relative to the
/// model's folder), then `check_ranges` with their sizes.
fn open_set(path: &Path) -> Result<(Catalog, Vec<Vec<u8>>), FormatError> {
    let bytes = std::fs::read(path).unwrap();
    let cat = formats::open(&bytes[..])?;
    assert_eq!(cat.format, Format::Onnx, "{} detected as ONNX", path.display());
    let dir = path.parent().unwrap();
    let mut files = vec![bytes];
    for s in &cat.sources[1..] {
        files.push(std::fs::read(dir.join(s)).unwrap_or_else(|e| panic!("{s}: {e}")));
    }
    let sizes: Vec<u64> = files.iter().map(|f| f.len() as u64).collect();
    cat.check_ranges(&sizes)?;
    Ok((cat, files))
}

#[test]
fn manifest_fixtures() {
    let fixtures = common::fixtures(&["onnx", "onnx-external-data"]);
    // Each hostile fixture, with the refusal it must get.
    let rejects: &[(&str, ErrorKind)] = &[
        ("onnx/hostile/external-path-traversal.onnx", ErrorKind::Refused),
        ("onnx/hostile/external-out-of-bounds.onnx", ErrorKind::OutOfBounds),
    ];
    let (mut read, mut rejected) = (0, 0);
    for fx in &fixtures {
        match fx.expect() {
            "read" => {
                let (cat, files) = open_set(&fx.path).unwrap_or_else(|e| panic!("{}: {e}", fx.file()));
                let sources: Vec<&[u8]> = files.iter().map(|f| f.as_slice()).collect();
                common::check_catalog(fx, &cat, &sources);
                for (t, w) in cat.tensors.iter().zip(fx.entry["tensors"].as_array().unwrap()) {
                    let what = format!("{} / {}", fx.file(), t.name);
                    assert_eq!(
                        attr(t, "onnx_type"),
                        Some(&Meta::Str(w["onnx_type"].as_str().unwrap().into())),
                        "{what}"
                    );
                    let storage = w["storage"].as_str().unwrap();
                    assert_eq!(attr(t, "storage"), Some(&Meta::Str(storage.into())), "{what}");
                    match storage {
                        "raw_data" => assert!(t.is_zero_copy(), "{what}: raw_data is zero-copy"),
                        "external" => {
                            let e = &w["external"];
                            let Some(Meta::Map(m)) = attr(t, "external") else {
                                panic!("{what}: external")
                            };
                            assert_eq!(
                                m[0],
                                ("location".into(), Meta::Str(e["location"].as_str().unwrap().into()))
                            );
                            assert_eq!(m[1], ("offset".into(), Meta::UInt(e["offset"].as_u64().unwrap())));
                            assert_eq!(m[2], ("length".into(), Meta::UInt(e["length"].as_u64().unwrap())));
                            let Storage::Range { source, offset, .. } = t.storage else {
                                panic!("{what}")
                            };
                            assert!(source > 0 && offset == e["offset"].as_u64().unwrap(), "{what}");
                            assert!(t.is_zero_copy(), "{what}: external data is zero-copy");
                        }
                        _ => assert!(
                            matches!(t.storage, Storage::Inline(_)),
                            "{what}: typed fields are inline"
                        ),
                    }
                }
                read += 1;
            }
            "reject" => {
                let want = common::expected_refusal(rejects, fx);
                let e = open_set(&fx.path)
                    .err()
                    .unwrap_or_else(|| panic!("{}: was not refused", fx.file()));
                assert_eq!(e.kind, want, "{}: {e}", fx.file());
                assert_eq!(e.tensor.as_deref(), Some("W"), "{}: {e}", fx.file());
                rejected += 1;
            }
            "companion" => assert!(fx.entry["companion_of"].is_string()),
            other => panic!("{}: unexpected expect {other}", fx.file()),
        }
    }
    assert_eq!((read, rejected), (3, 2));
}

#[test]
fn metadata_of_a_fixture() {
    let root = common::data("fixtures/onnx/initializers.onnx");
    let bytes = std::fs::read(root.join("fixtures/onnx/initializers.onnx")).unwrap();
    let cat = onnx::open(&bytes[..]).unwrap();
    let keys: Vec<&str> = cat.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert!(
        keys.contains(&"ir_version") && keys.contains(&"opset_import"),
        "{keys:?}"
    );
    assert!(cat.skipped.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Hand-built models: what is read.

#[test]
fn every_storage_and_type() {
    let f32s = [1.5f32, -2.0];
    let raw: Vec<u8> = f32s.iter().flat_map(|v| v.to_le_bytes()).collect();
    let inits = [
        tensor("raw", 1, &[2]).bytes(9, &raw),
        // float_data unpacked, then packed: values concatenate.
        tensor("floats", 1, &[3]).fixed32(4, 1f32.to_bits()).bytes(4, &raw),
        // FLOAT16 bits in int32_data (unpacked varints), BFLOAT16 packed.
        tensor("h", 10, &[2]).varint(5, 0x3c00).varint(5, 0xc000),
        tensor("bf", 16, &[1]).packed(5, &[0x3f80]),
        // INT8 -1 is a sign-extended 10-byte varint; only the low byte is kept.
        tensor("i8", 3, &[2]).packed(5, &[(-1i64) as u64, 127]),
        tensor("b", 9, &[3]).packed(5, &[1, 0, 1]),
        tensor("i64", 7, &[2]).packed(7, &[(-5i64) as u64, 1 << 40]),
        tensor("u32", 12, &[1]).packed(11, &[0x1_0000_0007]),
        tensor("d", 11, &[1]).fixed64(10, 2.5f64.to_bits()),
        tensor("c64", 14, &[1])
            .fixed32(4, 1f32.to_bits())
            .fixed32(4, 2f32.to_bits()),
        tensor("f4", 23, &[3]).packed(5, &[0x21, 0x03]),
        tensor("e8m0", 24, &[2]).packed(5, &[127, 128]),
        tensor("empty", 1, &[0, 4]),
        tensor("scalar", 6, &[]).packed(5, &[(-3i64) as u64]),
    ];
    let bytes = model(&inits);
    let cat = open(&bytes).unwrap();
    let got = read_all(&cat, &bytes);
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "raw", "floats", "h", "bf", "i8", "b", "i64", "u32", "d", "c64", "f4", "e8m0", "empty", "scalar"
        ]
    );
    let dtypes: Vec<&str> = cat.tensors.iter().map(|t| t.ty.name()).collect();
    assert_eq!(
        dtypes,
        [
            "float32",
            "float32",
            "float16",
            "bfloat16",
            "int8",
            "bool",
            "int64",
            "uint32",
            "float64",
            "complex64",
            "float4_e2m1fn",
            "float8_e8m0fnu",
            "float32",
            "int32"
        ]
    );
    assert_eq!(got[0], raw);
    assert!(cat.tensors[0].is_zero_copy());
    assert_eq!(got[1], [&1f32.to_le_bytes()[..], &raw].concat());
    assert_eq!(got[2], [0x00, 0x3c, 0x00, 0xc0]);
    assert_eq!(got[3], [0x80, 0x3f]);
    assert_eq!(got[4], [0xff, 0x7f]);
    assert_eq!(got[5], [1, 0, 1]);
    assert_eq!(got[6], [(-5i64).to_le_bytes(), (1i64 << 40).to_le_bytes()].concat());
    assert_eq!(got[7], 7u32.to_le_bytes());
    assert_eq!(got[8], 2.5f64.to_le_bytes());
    assert_eq!(got[9], [1f32.to_le_bytes(), 2f32.to_le_bytes()].concat());
    assert_eq!(got[10], [0x21, 0x03]);
    assert_eq!(got[11], [127, 128]);
    assert!(got[12].is_empty());
    assert_eq!(got[13], (-3i32).to_le_bytes());
    assert_eq!(cat.metadata[0], ("ir_version".into(), Meta::Int(8)));
    assert!(cat.metadata.contains(&(
        "opset_import".into(),
        Meta::Map(vec![("ai.onnx".into(), Meta::Int(17))])
    )));
}

#[test]
fn strings_int4_and_sparse_are_skipped_by_name() {
    let sparse = Msg::new()
        .msg(1, &tensor("sp_values", 1, &[1]).fixed32(4, 0))
        .msg(2, &tensor("sp_idx", 7, &[1]).packed(7, &[0]))
        .packed(3, &[4]);
    let g = graph_of(&[
        tensor("s", 8, &[1]).str(6, "hello"),
        tensor("q", 22, &[2]).packed(5, &[0x12]),
        tensor("w", 1, &[1]).fixed32(4, 0),
        tensor("new", 99, &[1]),
    ])
    .msg(15, &sparse);
    let cat = open(&model_with(&g)).unwrap();
    assert_eq!(cat.tensors.len(), 1);
    let skipped: Vec<&str> = cat.skipped.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(skipped, ["s", "q", "new", "sp_values"]);
    assert!(cat.skipped[0].1.contains("STRING") && cat.skipped[1].1.contains("INT4"));
    assert!(cat.skipped[2].1.contains("99") && cat.skipped[3].1.contains("sparse"));
}

#[test]
fn subgraph_initializers_follow_the_main_graph() {
    let then = graph_of(&[tensor("inner", 6, &[1]).packed(5, &[7])]);
    let attr = Msg::new().str(1, "then_branch").msg(6, &then);
    let node = Msg::new().str(3, "if0").str(4, "If").msg(5, &attr);
    let g = Msg::new()
        .msg(1, &node)
        .msg(5, &tensor("outer", 6, &[1]).packed(5, &[1]));
    let cat = open(&model_with(&g)).unwrap();
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["outer", "inner"]);
    assert_eq!(
        attr_of(&cat, "inner", "subgraph"),
        Some(Meta::Str("if0/then_branch".into()))
    );
}

fn attr_of(cat: &Catalog, t: &str, k: &str) -> Option<Meta> {
    attr(cat.get(t)?, k).cloned()
}

#[test]
fn external_data_in_several_files() {
    let ext = |loc: &str, off: u64, len: u64| {
        [
            ("location", loc.to_string()),
            ("offset", off.to_string()),
            ("length", len.to_string()),
        ]
        .iter()
        .fold(Msg::new(), |m, (k, v)| m.msg(13, &Msg::new().str(1, k).str(2, v)))
        .varint(14, 1)
    };
    let a = tensor("a", 1, &[2]).0;
    let a = Msg([a, ext("w1.bin", 0, 8).0].concat());
    let b = Msg([tensor("b", 7, &[1]).0, ext("sub/w2.bin", 16, 8).0].concat());
    let c = Msg([tensor("c", 2, &[4]).0, ext("w1.bin", 8, 4).0].concat());
    let bytes = model(&[a, b, c]);
    let cat = open(&bytes).unwrap();
    assert_eq!(cat.sources, ["", "w1.bin", "sub/w2.bin"]);
    assert_eq!(
        cat.tensors[1].storage,
        Storage::Range {
            source: 2,
            offset: 16,
            len: 8
        }
    );
    assert_eq!(
        cat.tensors[2].storage,
        Storage::Range {
            source: 1,
            offset: 8,
            len: 4
        }
    );
    assert!(cat.check_ranges(&[bytes.len() as u64, 12, 24]).is_ok());
    let e = cat.check_ranges(&[bytes.len() as u64, 11, 24]).unwrap_err();
    assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::OutOfBounds, Some("c")));
    let w1: Vec<u8> = (0..12).collect();
    let w2: Vec<u8> = (100..124).collect();
    let srcs: Vec<&[u8]> = vec![&bytes, &w1, &w2];
    assert_eq!(&formats::read("onnx", &cat.tensors[1], &srcs).unwrap()[..], &w2[16..24]);
    assert_eq!(&formats::read("onnx", &cat.tensors[2], &srcs).unwrap()[..], &w1[8..12]);
}

/// ONNX's `checksum` (SHA-1 of the external file, hex): kept as one of `Catalog::checks`,
/// checked by `read_chunks` / `read_limited` when the tensor covers the file, and by
/// `check_integrity`; a flipped data byte is a `Checksum` error naming the file.
#[test]
fn external_data_checksum_is_checked() {
    let w: Vec<u8> = (0..64u8).collect();
    let sha1 = "c6138d514ffa2135bfce0ed0b8fac65669917ec7"; // Python: hashlib.sha1(bytes(range(64)))
    let ext = |sum: &str| {
        [
            ("location", "w.bin".to_string()),
            ("offset", "0".to_string()),
            ("length", "64".to_string()),
            ("checksum", sum.to_string()),
        ]
        .iter()
        .fold(Msg::new(), |m, (k, v)| m.msg(13, &Msg::new().str(1, k).str(2, v)))
        .varint(14, 1)
    };
    let t = Msg([tensor("w", 1, &[16]).0, ext(sha1).0].concat());
    let bytes = model(&[t]);
    let cat = open(&bytes).unwrap();
    assert_eq!(cat.checks.len(), 1);
    let limits = formats::ReadLimits::default();
    let good: Vec<&[u8]> = vec![&bytes, &w];
    formats::check_integrity("onnx", &cat.checks[0], &good).unwrap();
    let mut n = 0;
    formats::read_chunks("onnx", &cat.tensors[0], &good, &cat.checks, &limits, 16, &mut |p| {
        n += p.len();
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 64);
    let mut bad_w = w.clone();
    bad_w[40] ^= 1;
    let bad: Vec<&[u8]> = vec![&bytes, &bad_w];
    let e = formats::check_integrity("onnx", &cat.checks[0], &bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Checksum, "{e}");
    assert!(e.message.contains("w.bin") && e.message.contains(sha1), "{e}");
    let e = formats::read_chunks("onnx", &cat.tensors[0], &bad, &cat.checks, &limits, 16, &mut |_| Ok(())).unwrap_err();
    assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Checksum, Some("w")));
    let e = formats::read_limited("onnx", &cat.tensors[0], &bad, &cat.checks, &limits).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Checksum);
    // A checksum that is not 40 hex digits is only kept as an attribute.
    let t = Msg([tensor("w", 1, &[16]).0, ext("not-a-sha1").0].concat());
    assert!(open(&model(&[t])).unwrap().checks.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Attacks: one hand-built input per known attack, with the refusal it gets.

fn external(name: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let mut t = tensor(name, 1, &[2]);
    for (k, v) in entries {
        t = t.msg(13, &Msg::new().str(1, k).str(2, v));
    }
    model(&[t.varint(14, 1)])
}

mod attacks {
    use super::*;

    #[test]
    fn length_past_parent_end() {
        // The initializer claims 200 bytes of raw_data inside a 20-byte TensorProto; the file is
        // long enough, the parent is not.
        let mut t = tensor("w", 1, &[50]).0;
        t.extend_from_slice(&[0x4a, 0xc8, 0x01]); // field 9, length 200
        let mut bytes = model(&[Msg(t)]);
        bytes.extend_from_slice(&[0u8; 400]);
        assert_eq!(kind(&bytes), ErrorKind::Syntax);
    }

    #[test]
    fn length_past_file_end() {
        let mut bytes = model(&[tensor("w", 1, &[1]).fixed32(4, 0)]);
        bytes.extend_from_slice(&[0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f]); // a 4 GiB graph
        assert_eq!(kind(&bytes), ErrorKind::Truncated);
    }

    #[test]
    fn varint_of_11_bytes() {
        let mut bytes = vec![0x08];
        bytes.extend_from_slice(&[0xff; 10]);
        bytes.push(0x01);
        assert_eq!(kind(&bytes), ErrorKind::Syntax);
        // A 10-byte varint whose last byte carries bits past 64.
        let mut bytes = vec![0x08];
        bytes.extend_from_slice(&[0xff; 9]);
        bytes.push(0x02);
        assert_eq!(kind(&bytes), ErrorKind::Syntax);
    }

    #[test]
    fn groups_and_invalid_wire_types() {
        for tag in [0x0b, 0x0c, 0x0e, 0x0f] {
            let mut bytes = model(&[]);
            bytes.extend_from_slice(&[tag, 0, 0]);
            assert_eq!(kind(&bytes), ErrorKind::Syntax, "tag {tag:#x}");
        }
    }

    #[test]
    fn deep_nesting_of_subgraphs() {
        let mut g = graph_of(&[tensor("deep", 1, &[1]).fixed32(4, 0)]);
        for i in 0..40 {
            let attr = Msg::new().str(1, "body").msg(6, &g);
            let node = Msg::new().str(3, &format!("n{i}")).msg(5, &attr);
            g = Msg::new().msg(1, &node);
        }
        assert_eq!(kind(&model_with(&g)), ErrorKind::Limit);
    }

    #[test]
    fn deep_nesting_of_unknown_messages_is_skipped_not_followed() {
        let mut m = Msg::new();
        for _ in 0..10_000 {
            m = Msg::new().msg(1000, &m);
        }
        let g = graph_of(&[tensor("w", 1, &[1]).fixed32(4, 0)]).msg(1000, &m);
        assert_eq!(open(&model_with(&g)).unwrap().tensors.len(), 1);
    }

    #[test]
    fn dims_product_overflow() {
        let bytes = model(&[tensor("w", 1, &[1 << 32, 1 << 32]).fixed32(4, 0)]);
        assert_eq!(kind(&bytes), ErrorKind::Overflow);
        // numel fits but the byte count does not.
        let bytes = model(&[tensor("w", 11, &[1 << 62]).fixed64(10, 0)]);
        assert_eq!(kind(&bytes), ErrorKind::Overflow);
    }

    #[test]
    fn negative_dimension() {
        assert_eq!(kind(&model(&[tensor("w", 1, &[-1]).fixed32(4, 0)])), ErrorKind::Syntax);
    }

    #[test]
    fn too_many_dimensions() {
        let dims = vec![1i64; onnx::MAX_RANK + 1];
        assert_eq!(kind(&model(&[tensor("w", 1, &dims).fixed32(4, 0)])), ErrorKind::Limit);
    }

    #[test]
    fn typed_field_count_mismatch() {
        // Too few, too many, varints too few, a huge claimed shape over a 4-byte field (refused
        // before anything is allocated).
        for t in [
            tensor("w", 1, &[3]).fixed32(4, 0).fixed32(4, 0),
            tensor("w", 1, &[1]).fixed32(4, 0).fixed32(4, 0),
            tensor("w", 7, &[3]).packed(7, &[1, 2]),
            tensor("w", 7, &[1]).packed(7, &[1, 2]),
            tensor("w", 1, &[1 << 40]).fixed32(4, 0),
            tensor("w", 10, &[1 << 40]).packed(5, &[1, 2, 3]),
            tensor("w", 1, &[2]),
        ] {
            let e = open(&model(&[t])).unwrap_err();
            assert_eq!(
                (e.kind, e.tensor.as_deref()),
                (ErrorKind::SizeMismatch, Some("w")),
                "{e}"
            );
        }
    }

    #[test]
    fn raw_data_length_mismatch() {
        assert_eq!(
            kind(&model(&[tensor("w", 1, &[2]).bytes(9, &[0; 7])])),
            ErrorKind::SizeMismatch
        );
    }

    #[test]
    fn packed_fixed_field_with_a_partial_value() {
        assert_eq!(
            kind(&model(&[tensor("w", 1, &[1]).bytes(4, &[0; 6])])),
            ErrorKind::Syntax
        );
    }

    #[test]
    fn ambiguous_storage() {
        // raw_data and a typed field; a typed field of another type; external and inline.
        for t in [
            tensor("w", 1, &[1]).bytes(9, &[0; 4]).fixed32(4, 0),
            tensor("w", 1, &[1]).packed(7, &[1]),
            tensor("w", 1, &[1])
                .bytes(9, &[0; 4])
                .msg(13, &Msg::new().str(1, "location").str(2, "x"))
                .varint(14, 1),
        ] {
            assert_eq!(kind(&model(&[t])), ErrorKind::Syntax);
        }
    }

    #[test]
    fn external_location_etc_passwd() {
        let e = open(&external("w", &[("location", "/etc/passwd")])).unwrap_err();
        assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Refused, Some("w")));
    }

    #[test]
    fn external_location_backslash_parent() {
        for loc in ["..\\x", "a\\..\\..\\x", "../x", "C:\\x", "\\\\server\\share"] {
            assert_eq!(kind(&external("w", &[("location", loc)])), ErrorKind::Refused, "{loc}");
        }
    }

    #[test]
    fn external_length_and_offset() {
        assert_eq!(
            kind(&external("w", &[("location", "d"), ("length", "9")])),
            ErrorKind::SizeMismatch
        );
        assert_eq!(
            kind(&external("w", &[("location", "d"), ("offset", "-1")])),
            ErrorKind::Syntax
        );
        let max = u64::MAX.to_string();
        assert_eq!(
            kind(&external("w", &[("location", "d"), ("offset", &max)])),
            ErrorKind::Overflow
        );
        assert_eq!(kind(&external("w", &[("offset", "0")])), ErrorKind::Syntax);
        // Past the end of the companion: refused once its size is known.
        let cat = open(&external("w", &[("location", "d"), ("offset", "8")])).unwrap();
        assert_eq!(cat.check_ranges(&[0, 15]).unwrap_err().kind, ErrorKind::OutOfBounds);
        assert!(cat.check_ranges(&[0, 16]).is_ok());
    }

    #[test]
    fn duplicate_names() {
        let t = tensor("w", 1, &[1]).fixed32(4, 0);
        assert_eq!(kind(&model(&[t.clone(), t])), ErrorKind::Duplicate);
    }

    #[test]
    fn missing_name_type_or_graph() {
        assert_eq!(
            kind(&model(&[Msg::new().varint(2, 1).fixed32(4, 0)])),
            ErrorKind::Syntax
        );
        assert_eq!(kind(&model(&[tensor("w", 0, &[1]).fixed32(4, 0)])), ErrorKind::Syntax);
        assert_eq!(kind(&Msg::new().varint(1, 8).str(2, "x").0), ErrorKind::Syntax);
        assert_eq!(kind(b""), ErrorKind::Syntax);
    }

    #[test]
    fn wrong_wire_type_for_a_known_field() {
        assert_eq!(kind(&model(&[tensor("w", 1, &[1]).fixed32(2, 1)])), ErrorKind::Syntax);
        assert_eq!(kind(&model(&[tensor("w", 1, &[1]).varint(4, 1)])), ErrorKind::Syntax);
        assert_eq!(kind(&Msg::new().varint(1, 8).varint(7, 1).0), ErrorKind::Syntax);
    }

    #[test]
    fn name_not_utf8() {
        assert_eq!(
            kind(&model(&[Msg::new().bytes(8, &[0xff, 0xfe]).varint(2, 1)])),
            ErrorKind::Syntax
        );
    }

    #[test]
    fn segment_is_unsupported() {
        let t = tensor("w", 1, &[1])
            .fixed32(4, 0)
            .msg(3, &Msg::new().varint(1, 0).varint(2, 1));
        assert_eq!(kind(&model(&[t])), ErrorKind::Unsupported);
    }

    #[test]
    fn inline_data_past_the_budget() {
        // 101 MiB of packed float_data: refused before decoding or allocating the output.
        let n = (MAX_HEADER / 4 + (1 << 18)) as i64;
        let t = tensor("w", 1, &[n]).bytes(4, &vec![0u8; n as usize * 4]);
        assert_eq!(kind(&model(&[t])), ErrorKind::Limit);
    }
}

// ---------------------------------------------------------------------------------------------
// A 2.5 GB model with embedded weights, listed through a source that counts what is read.

/// A file made of real bytes and runs of zeros that are never stored.
struct Virtual {
    parts: Vec<(u64, Option<Vec<u8>>, u64)>, // (start, bytes or zeros, len)
    size: u64,
    read: Cell<u64>,
    calls: Cell<u64>,
}

impl Virtual {
    fn new() -> Virtual {
        Virtual {
            parts: Vec::new(),
            size: 0,
            read: Cell::new(0),
            calls: Cell::new(0),
        }
    }
    fn bytes(&mut self, b: Vec<u8>) {
        let n = b.len() as u64;
        self.parts.push((self.size, Some(b), n));
        self.size += n;
    }
    fn zeros(&mut self, n: u64) {
        self.parts.push((self.size, None, n));
        self.size += n;
    }
}

impl ReadAt for Virtual {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.read.set(self.read.get() + buf.len() as u64);
        self.calls.set(self.calls.get() + 1);
        tensorlane_core::source::check_range(offset, buf.len() as u64, self.size)?;
        let end = offset + buf.len() as u64;
        for (start, data, n) in &self.parts {
            let (s, e) = (offset.max(*start), end.min(start + n));
            if s >= e {
                continue;
            }
            let dst = &mut buf[(s - offset) as usize..(e - offset) as usize];
            match data {
                Some(v) => dst.copy_from_slice(&v[(s - start) as usize..(e - start) as usize]),
                None => dst.fill(0),
            }
        }
        Ok(())
    }
}

#[test]
fn listing_a_large_model_reads_a_tiny_fraction() {
    // 300 initializers of 2048 x 1024 float32 (8 MiB each): 2.5 GB, written the way onnx writes
    // them (dims, data_type, name, raw_data), in a graph after 300 nodes.
    let (count, rows, cols) = (300u64, 2048i64, 1024i64);
    let payload = (rows * cols * 4) as u64;
    let mut inits = Vec::new();
    let mut nodes = Msg::new();
    for i in 0..count {
        let node = Msg::new()
            .str(1, "x")
            .str(1, &format!("w{i}"))
            .str(2, &format!("y{i}"))
            .str(4, "MatMul");
        nodes = nodes.msg(1, &node);
        let mut head = tensor(&format!("w{i}"), 1, &[rows, cols]).tag(9, 2);
        put_varint(&mut head.0, payload);
        inits.push(head.0);
    }
    let mut graph_len = nodes.0.len() as u64;
    for h in &inits {
        let body = h.len() as u64 + payload;
        let mut t = Vec::new();
        put_varint(&mut t, body);
        graph_len += 1 + t.len() as u64 + body;
    }
    let mut v = Virtual::new();
    let mut head = Msg::new().varint(1, 8).str(2, "big").tag(7, 2);
    put_varint(&mut head.0, graph_len);
    head.0.extend_from_slice(&nodes.0);
    v.bytes(head.0);
    for h in inits {
        let mut t = vec![0x2a]; // GraphProto field 5
        put_varint(&mut t, h.len() as u64 + payload);
        t.extend_from_slice(&h);
        v.bytes(t);
        v.zeros(payload);
    }
    let cat = onnx::open(&v).unwrap();
    assert_eq!(cat.tensors.len() as u64, count);
    assert!(v.size > 2_500_000_000);
    let (read, size) = (v.read.get(), v.size);
    eprintln!(
        "listed {count} tensors of a {size}-byte ONNX model: read {read} bytes ({:.4}%) in {} calls",
        read as f64 * 100.0 / size as f64,
        v.calls.get()
    );
    assert!(read * 100 < size / 10, "read {read} of {size} bytes: more than 0.1%");
    // Reading one tensor reads just its bytes.
    let before = v.read.get();
    let t = cat.get("w7").unwrap();
    assert_eq!(formats::read("onnx", t, &[&v]).unwrap().len() as u64, payload);
    assert_eq!(v.read.get() - before, payload);
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// (data_type, catalog dtype name, bytes per element or 0 for packed float4, typed field, kept
/// bytes per stored value).
const TYPES: &[(u64, &str, u64, u32, usize)] = &[
    (1, "float32", 4, 4, 4),
    (2, "uint8", 1, 5, 1),
    (3, "int8", 1, 5, 1),
    (4, "uint16", 2, 5, 2),
    (5, "int16", 2, 5, 2),
    (6, "int32", 4, 5, 4),
    (7, "int64", 8, 7, 8),
    (9, "bool", 1, 5, 1),
    (10, "float16", 2, 5, 2),
    (11, "float64", 8, 10, 8),
    (12, "uint32", 4, 11, 4),
    (13, "uint64", 8, 11, 8),
    (14, "complex64", 8, 4, 4),
    (15, "complex128", 16, 10, 8),
    (16, "bfloat16", 2, 5, 2),
    (17, "float8_e4m3fn", 1, 5, 1),
    (18, "float8_e4m3fnuz", 1, 5, 1),
    (19, "float8_e5m2", 1, 5, 1),
    (20, "float8_e5m2fnuz", 1, 5, 1),
    (23, "float4_e2m1fn", 0, 5, 1),
    (24, "float8_e8m0fnu", 1, 5, 1),
];

/// A generated initializer: its message and the bytes `read` must give.
fn gen_tensor(i: usize, ty: usize, dims: &[i64], raw: bool, seed: &[u8]) -> (Msg, Vec<u8>, &'static str) {
    let (code, name, item, field, keep) = TYPES[ty];
    let numel: i64 = dims.iter().product();
    let nbytes = if item == 0 {
        (numel as u64).div_ceil(2)
    } else {
        numel as u64 * item
    } as usize;
    let want: Vec<u8> = (0..nbytes)
        .map(|k| seed[k % seed.len()].wrapping_add(k as u8))
        .collect();
    let t = tensor(&format!("t{i}"), code, dims);
    if raw {
        return (t.bytes(9, &want), want, name);
    }
    let vals: Vec<&[u8]> = want.chunks(keep).collect();
    let t = match field {
        4 => t.bytes(4, &want),
        10 => t.bytes(10, &want),
        _ => {
            // Varints: sign-extend the kept bytes (int32_data holds int32 values), as onnx does.
            let v: Vec<u64> = vals
                .iter()
                .map(|c| {
                    let mut b = [0u8; 8];
                    b[..keep].copy_from_slice(c);
                    let u = u64::from_le_bytes(b);
                    let shift = 64 - 8 * keep as u32;
                    ((u << shift) as i64 >> shift) as u64
                })
                .collect();
            t.packed(field, &v)
        }
    };
    (t, want, name)
}

/// A generated model and, per tensor, the bytes, dtype name and shape it must read to.
type Generated = (Vec<u8>, Vec<(Vec<u8>, &'static str, Vec<u64>)>);

fn gen_model() -> impl Strategy<Value = Generated> {
    let one = (
        0..TYPES.len(),
        proptest::collection::vec(0i64..4, 0..4),
        any::<bool>(),
        proptest::collection::vec(any::<u8>(), 1..8),
    );
    proptest::collection::vec(one, 0..6).prop_map(|ts| {
        let mut msgs = Vec::new();
        let mut want = Vec::new();
        for (i, (ty, dims, raw, seed)) in ts.into_iter().enumerate() {
            let (m, bytes, name) = gen_tensor(i, ty, &dims, raw, &seed);
            msgs.push(m);
            want.push((bytes, name, dims.iter().map(|&d| d as u64).collect()));
        }
        (model(&msgs), want)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn generated_models_round_trip((bytes, want) in gen_model()) {
        let cat = open(&bytes).unwrap();
        prop_assert_eq!(cat.tensors.len(), want.len());
        let got = read_all(&cat, &bytes);
        for ((t, g), (w, name, shape)) in cat.tensors.iter().zip(&got).zip(&want) {
            prop_assert_eq!(t.ty.name(), *name);
            prop_assert_eq!(&t.shape, shape);
            prop_assert_eq!(g, w);
        }
        // Through a source that is not in memory: the same catalog.
        let v = Disk(bytes.clone());
        prop_assert_eq!(onnx::open(&v).unwrap(), cat);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(cat) = open(&bytes) {
            let sources: Vec<&[u8]> = cat.sources.iter().map(|_| &bytes[..]).collect();
            for t in &cat.tensors {
                let _ = formats::read("onnx", t, &sources);
            }
        }
    }

    #[test]
    fn mutated_models_never_panic(
        (bytes, _) in gen_model(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = bytes;
        if b.is_empty() { return Ok(()); }
        for (i, v) in edits {
            let k = i.index(b.len());
            b[k] = v;
        }
        if let Ok(cat) = open(&b) {
            let sources: Vec<&[u8]> = cat.sources.iter().map(|_| &b[..]).collect();
            for t in &cat.tensors {
                let _ = formats::read("onnx", t, &sources);
            }
        }
        let k = cut.index(b.len());
        let _ = open(&b[..k]);
        let _ = onnx::open(&Disk(b[..k].to_vec()));
    }
}

/// A source that is not in memory (no `slice`).
struct Disk(Vec<u8>);

impl ReadAt for Disk {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.0.read_at(offset, buf)
    }
}
