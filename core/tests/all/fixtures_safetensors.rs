//! safetensors against the fixtures in `tests/data`, hand-built attacks and property tests.
//!
//! * every `safetensors` and `safetensors-index` fixture of the manifest: `read` files give the
//!   manifest's tensors (names in order, dtype, shape, sha256 of the bytes), `st_dtype`,
//!   `data_offsets` and `__metadata__`; hostile files are refused with the kind listed per file,
//!   and no allocation while opening any fixture is larger than the file (a counting allocator
//!   watches every allocation of the opening thread);
//! * the sharded set opens through its index, the shards read from the files beside it;
//! * one named test per known attack (as safetensors keeps its `attacks/` folder);
//! * proptests: random and mutated inputs never panic, generated files round-trip.

use crate::common;

use common::counting::largest_alloc;
use std::path::Path;

use proptest::prelude::*;
use tensorlane_core::formats::{self, Catalog, ErrorKind, FormatError, Meta, safetensors};

/// Opens an index with shards read from the files beside it; returns the catalog and the bytes of
/// its sources in order.
fn open_index_at(path: &Path) -> (Result<Catalog, FormatError>, Vec<Vec<u8>>) {
    let dir = path.parent().unwrap().to_path_buf();
    let index = std::fs::read(path).unwrap();
    let mut calls = Vec::new();
    let cat = safetensors::open_index(&index[..], &mut |name: &str| {
        calls.push(name.to_string());
        let bytes = std::fs::read(dir.join(name)).map_err(|e| {
            FormatError::new(
                "safetensors",
                ErrorKind::Companion,
                format!("cannot read shard '{name}': {e}"),
            )
        })?;
        safetensors::open(&bytes[..])
    });
    let mut distinct = calls.clone();
    distinct.dedup();
    assert_eq!(calls, distinct, "every shard is opened once");
    let mut sources = vec![index];
    if let Ok(c) = &cat {
        for s in c.sources.iter().skip(1) {
            sources.push(std::fs::read(dir.join(s)).unwrap());
        }
    }
    (cat, sources)
}

fn check_attributes(fx: &common::Fixture, cat: &Catalog) {
    for (t, w) in cat.tensors.iter().zip(fx.entry["tensors"].as_array().unwrap()) {
        let attr = |k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(
            attr("st_dtype"),
            Some(Meta::Str(w["st_dtype"].as_str().unwrap().into())),
            "{}",
            t.name
        );
        let offs: Vec<Meta> = w["data_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| Meta::UInt(o.as_u64().unwrap()))
            .collect();
        assert_eq!(attr("data_offsets"), Some(Meta::List(offs)), "{}", t.name);
        if let Some(shard) = w["shard"].as_str() {
            assert_eq!(attr("shard"), Some(Meta::Str(shard.into())), "{}", t.name);
        }
    }
    if let Some(m) = fx.entry["metadata"].as_object() {
        let want: Vec<(String, Meta)> = m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => Meta::Str(s.clone()),
                    serde_json::Value::Number(n) => Meta::Int(n.as_i64().unwrap()),
                    other => panic!("unexpected metadata value {other}"),
                };
                (k.clone(), v)
            })
            .collect();
        let mut got = cat.metadata.clone();
        let mut want = want;
        got.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want, "{}: metadata", fx.file());
    }
}

/// The kind each hostile fixture is refused with.
const REJECT: &[(&str, ErrorKind)] = &[
    (
        "safetensors/hostile/header-length-exceeds-file.safetensors",
        ErrorKind::HeaderTooLarge,
    ),
    (
        "safetensors/hostile/header-length-100gb.safetensors",
        ErrorKind::HeaderTooLarge,
    ),
    (
        "safetensors/hostile/tensor-claims-100gb.safetensors",
        ErrorKind::OutOfBounds,
    ),
    (
        "safetensors/hostile/overlapping-offsets.safetensors",
        ErrorKind::Overlap,
    ),
    (
        "safetensors/hostile/offsets-out-of-bounds.safetensors",
        ErrorKind::OutOfBounds,
    ),
    ("safetensors/hostile/duplicate-keys.safetensors", ErrorKind::Duplicate),
    ("safetensors/hostile/invalid-json.safetensors", ErrorKind::Syntax),
    ("safetensors/hostile/size-mismatch.safetensors", ErrorKind::SizeMismatch),
    ("safetensors/hostile/truncated.safetensors", ErrorKind::Truncated),
];

#[test]
fn every_manifest_fixture() {
    let fixtures = common::fixtures(&["safetensors", "safetensors-index"]);
    let (mut read, mut rejected) = (0, 0);
    for fx in &fixtures {
        let bytes = fx.bytes();
        let index = fx.entry["format"] == "safetensors-index";
        let ((result, sources), largest) = largest_alloc(|| {
            if index {
                open_index_at(&fx.path)
            } else {
                (safetensors::open(&bytes[..]), vec![bytes.clone()])
            }
        });
        // Opening allocates at most what the files hold (the header, the catalog), never what
        // they claim.
        let total: usize = sources.iter().map(Vec::len).sum::<usize>().max(bytes.len());
        assert!(largest <= total.max(4096), "{}: a {largest}-byte allocation", fx.file());
        match fx.expect() {
            "read" => {
                let cat = result.unwrap_or_else(|e| panic!("{}: {e}", fx.file()));
                let refs: Vec<&[u8]> = sources.iter().map(Vec::as_slice).collect();
                common::check_catalog(fx, &cat, &refs);
                check_attributes(fx, &cat);
                if !index {
                    assert!(cat.tensors.iter().all(|t| t.is_zero_copy()));
                    // Zero-copy: `read` borrows the file's own bytes.
                    for t in &cat.tensors {
                        let b = formats::read("safetensors", t, &refs).unwrap();
                        assert!(matches!(b, std::borrow::Cow::Borrowed(_)), "{}", t.name);
                    }
                }
                // Detected by content, and open_as agrees.
                let detected = formats::open(&bytes[..]);
                if index {
                    assert_eq!(detected.unwrap_err().kind, ErrorKind::Companion);
                } else {
                    assert_eq!(detected.unwrap(), cat);
                }
                read += 1;
            }
            "reject" => {
                let want = common::expected_refusal(REJECT, fx);
                assert_eq!(common::refusal_kind(result), want, "{}", fx.file());
                rejected += 1;
            }
            other => panic!("{}: unexpected expect '{other}'", fx.file()),
        }
    }
    assert_eq!(rejected, REJECT.len());
    assert!(read >= 6, "{read} read fixtures");
}

// ---------------------------------------------------------------------------------------------
// The sharded set.

fn sharded() -> std::path::PathBuf {
    common::data("fixtures/safetensors/sharded").join("fixtures/safetensors/sharded")
}

/// A copy of the sharded set in a temporary folder, with `index` as its index.
fn sharded_copy(tag: &str, index: &str) -> std::path::PathBuf {
    let src = sharded();
    let dir = std::env::temp_dir().join(format!("tensorlane-st-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    dir.join("model.safetensors.index.json")
}

const S1: &str = "model-00001-of-00002.safetensors";
const S2: &str = "model-00002-of-00002.safetensors";

#[test]
fn index_sources_and_order() {
    let dir = sharded();
    let (cat, _) = open_index_at(&dir.join("model.safetensors.index.json"));
    let cat = cat.unwrap();
    assert_eq!(cat.sources, ["", S2, S1]);
    assert_eq!(cat.metadata, [("total_size".to_string(), Meta::Int(368))]);
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "weight_map order (sorted in this file)");
}

#[test]
fn index_disagreeing_with_shards_is_refused() {
    let base = |extra: &str, drop: Option<&str>| {
        let mut m = vec![
            ("model.embed_tokens.weight", S2),
            ("model.layers.0.attn.bias", S1),
            ("model.layers.0.attn.weight", S1),
            ("model.layers.0.mlp.weight", S1),
            ("model.layers.1.attn.bias", S2),
            ("model.layers.1.attn.weight", S1),
            ("model.layers.1.mlp.weight", S2),
        ];
        m.retain(|(n, _)| Some(*n) != drop);
        let body: Vec<String> = m.iter().map(|(n, s)| format!("\"{n}\": \"{s}\"")).collect();
        format!("{{\"metadata\": {{}}, \"weight_map\": {{{}{extra}}}}}", body.join(", "))
    };
    let cases = [
        // A weight_map entry whose shard does not hold it.
        (
            "missing",
            base(&format!(", \"ghost\": \"{S1}\""), None),
            ErrorKind::Companion,
            Some("ghost"),
        ),
        // A shard tensor the weight_map does not list.
        (
            "unlisted",
            base("", Some("model.layers.1.mlp.weight")),
            ErrorKind::Companion,
            Some("model.layers.1.mlp.weight"),
        ),
        // A shard path leaving the folder.
        (
            "escape",
            base(", \"x\": \"../x.safetensors\"", None),
            ErrorKind::Refused,
            None,
        ),
        // A shard that is not there.
        (
            "absent",
            base(", \"x\": \"nope.safetensors\"", None),
            ErrorKind::Companion,
            None,
        ),
        // Duplicate keys in the weight_map.
        (
            "dup",
            base(&format!(", \"model.embed_tokens.weight\": \"{S1}\""), None),
            ErrorKind::Duplicate,
            None,
        ),
        ("not-a-map", "{\"weight_map\": []}".into(), ErrorKind::Syntax, None),
        ("no-map", "{\"metadata\": {}}".into(), ErrorKind::Syntax, None),
    ];
    for (tag, index, kind, tensor) in cases {
        let path = sharded_copy(tag, &index);
        let (r, _) = open_index_at(&path);
        let e = r.unwrap_err();
        assert_eq!(e.kind, kind, "{tag}: {e}");
        if tensor.is_some() {
            assert_eq!(e.tensor.as_deref(), tensor, "{tag}: {e}");
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
    // A tensor placed in the other shard names both.
    let moved = base("", None).replace(
        &format!("\"model.embed_tokens.weight\": \"{S2}\""),
        &format!("\"model.embed_tokens.weight\": \"{S1}\""),
    );
    let path = sharded_copy("moved", &moved);
    let e = open_index_at(&path).0.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Companion);
    assert!(e.message.contains(S1) && e.message.contains(S2), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Attacks: one hand-built hostile file per known attack.

fn st(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn refused(bytes: &[u8]) -> ErrorKind {
    let (r, largest) = largest_alloc(|| safetensors::open(bytes));
    assert!(largest <= bytes.len().max(4096), "a {largest}-byte allocation");
    common::refusal_kind(r)
}

#[test]
fn attack_header_length_u64_max() {
    let mut f = u64::MAX.to_le_bytes().to_vec();
    f.extend_from_slice(b"{}");
    assert_eq!(refused(&f), ErrorKind::HeaderTooLarge);
}

#[test]
fn attack_header_length_just_past_file() {
    let mut f = st("{}", &[]);
    f[0] = 3;
    assert_eq!(refused(&f), ErrorKind::HeaderTooLarge);
}

#[test]
fn attack_empty_and_short_files() {
    assert_eq!(refused(b""), ErrorKind::Truncated);
    assert_eq!(refused(b"\x02\0\0\0\0\0\0"), ErrorKind::Truncated);
    assert_eq!(refused(&st("", &[])), ErrorKind::Syntax);
}

#[test]
fn attack_duplicate_tensor_names() {
    let h = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Duplicate);
}

#[test]
fn attack_duplicate_field_inside_a_tensor() {
    let h = r#"{"w":{"dtype":"F32","dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Duplicate);
}

#[test]
fn attack_duplicate_metadata() {
    let h = r#"{"__metadata__":{},"__metadata__":{"a":"b"}}"#;
    assert_eq!(refused(&st(h, &[])), ErrorKind::Duplicate);
}

#[test]
fn attack_deep_nesting() {
    let h = format!(r#"{{"__metadata__":{}1{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(refused(&st(&h, &[])), ErrorKind::Limit);
    let h = format!(
        r#"{{"a":{{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":{}1{}}}}}"#,
        "{\"k\":".repeat(100),
        "}".repeat(100)
    );
    assert_eq!(refused(&st(&h, &[0])), ErrorKind::Limit);
}

#[test]
fn attack_shape_overflow() {
    let h = r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Overflow);
    // Elements fit, bytes do not.
    let h = r#"{"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Overflow);
    // A dimension beyond 64 bits.
    let h = r#"{"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Overflow);
}

#[test]
fn attack_offsets_past_data_section() {
    let h = r#"{"w":{"dtype":"U8","shape":[4],"data_offsets":[18446744073709551611,18446744073709551615]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::OutOfBounds);
}

#[test]
fn attack_reversed_offsets() {
    let h = r#"{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::OutOfBounds);
}

#[test]
fn attack_negative_and_fractional_numbers() {
    let h = r#"{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}"#;
    assert_eq!(refused(&st(h, &[0])), ErrorKind::Syntax);
    let h = r#"{"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}"#;
    assert_eq!(refused(&st(h, &[0])), ErrorKind::Syntax);
    let h = r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}"#;
    assert_eq!(refused(&st(h, &[0])), ErrorKind::Syntax);
}

#[test]
fn attack_two_tensors_share_bytes() {
    let h =
        r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Overlap);
    // An empty tensor inside another one.
    let h =
        r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Overlap);
}

#[test]
fn attack_hidden_bytes() {
    // A hole between tensors, bytes before the first, bytes after the last.
    let h =
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}"#;
    assert_eq!(refused(&st(h, &[0; 6])), ErrorKind::Gap);
    let h = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}"#;
    assert_eq!(refused(&st(h, &[0; 4])), ErrorKind::Gap);
    let h = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    assert_eq!(refused(&st(h, &[0; 3])), ErrorKind::Gap);
}

#[test]
fn attack_f4_odd_element_count() {
    let h = r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#;
    assert_eq!(refused(&st(h, &[0; 2])), ErrorKind::SizeMismatch);
}

#[test]
fn attack_unknown_dtype_and_bad_entries() {
    for (h, kind) in [
        (
            r#"{"a":{"dtype":"F6_E2M3","shape":[0],"data_offsets":[0,0]}}"#,
            ErrorKind::Unsupported,
        ),
        (
            r#"{"a":{"dtype":"f32","shape":[0],"data_offsets":[0,0]}}"#,
            ErrorKind::Unsupported,
        ),
        (
            r#"{"a":{"dtype":3,"shape":[0],"data_offsets":[0,0]}}"#,
            ErrorKind::Syntax,
        ),
        (r#"{"a":{"shape":[0],"data_offsets":[0,0]}}"#, ErrorKind::Syntax),
        (r#"{"a":[]}"#, ErrorKind::Syntax),
        (r#"[]"#, ErrorKind::Syntax),
        (r#"{"__metadata__":{"a":1}}"#, ErrorKind::Syntax),
        (r#"{"__metadata__":"x"}"#, ErrorKind::Syntax),
        ("{\"a\":\"\\ud800\"}", ErrorKind::Syntax),
    ] {
        assert_eq!(refused(&st(h, &[])), kind, "{h}");
    }
    // Not UTF-8.
    assert_eq!(
        refused(
            &st("{\"\u{e9}\":1}", &[])
                .iter()
                .map(|&b| if b == 0xc3 { 0xff } else { b })
                .collect::<Vec<_>>()
        ),
        ErrorKind::Syntax
    );
}

#[test]
fn attack_index_escapes_folder() {
    for shard in [
        "../outside.safetensors",
        "/etc/passwd",
        "C:\\x.safetensors",
        "a/../../b",
    ] {
        let index = format!("{{\"weight_map\": {{\"w\": \"{}\"}}}}", shard.replace('\\', "\\\\"));
        let mut called = false;
        let e = safetensors::open_index(index.as_bytes(), &mut |_| {
            called = true;
            Ok(Catalog::new(tensorlane_core::detect::Format::Safetensors))
        })
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Refused, "{shard}");
        assert!(!called, "{shard}: the shard callback ran");
    }
}

#[test]
fn index_alone_is_refused_with_a_pointer_to_the_shards() {
    let index = format!("{{\"metadata\": {{}}, \"weight_map\": {{\"a\": \"{S1}\", \"b\": \"{S2}\"}}}}");
    let e = formats::open(index.as_bytes()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Companion);
    assert!(e.message.contains(S1) && e.message.contains("open_index"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Properties.

const DTYPES: [(&str, usize); 17] = [
    ("BOOL", 1),
    ("U8", 1),
    ("I8", 1),
    ("U16", 2),
    ("I16", 2),
    ("U32", 4),
    ("I32", 4),
    ("U64", 8),
    ("I64", 8),
    ("F16", 2),
    ("BF16", 2),
    ("F32", 4),
    ("F64", 8),
    ("C64", 8),
    ("F8_E4M3", 1),
    ("F8_E5M2", 1),
    ("F8_E8M0", 1),
];

type Spec = Vec<(usize, Vec<u64>, Vec<u8>)>;

fn specs() -> impl Strategy<Value = Spec> {
    proptest::collection::vec(
        (0..DTYPES.len(), proptest::collection::vec(0u64..4, 0..4)).prop_flat_map(|(d, shape)| {
            let n = shape.iter().product::<u64>() as usize * DTYPES[d].1;
            (Just(d), Just(shape), proptest::collection::vec(any::<u8>(), n))
        }),
        0..6,
    )
}

/// A safetensors file of `spec` (tensor `t{i}`), with the header keys in reverse order.
fn build(spec: &Spec, pad: usize) -> Vec<u8> {
    let mut entries = Vec::new();
    let mut data = Vec::new();
    for (i, (d, shape, bytes)) in spec.iter().enumerate() {
        entries.push(format!(
            "\"t{i}\":{{\"dtype\":\"{}\",\"shape\":{shape:?},\"data_offsets\":[{},{}]}}",
            DTYPES[*d].0,
            data.len(),
            data.len() + bytes.len()
        ));
        data.extend_from_slice(bytes);
    }
    entries.reverse();
    let header = format!("{{\"__metadata__\":{{\"k\":\"v\"}},{}}}", entries.join(","));
    let mut h = header.into_bytes();
    if spec.is_empty() {
        h = b"{\"__metadata__\":{\"k\":\"v\"}}".to_vec();
    }
    h.extend(std::iter::repeat_n(b' ', pad));
    st(std::str::from_utf8(&h).unwrap(), &data)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_files_round_trip(spec in specs(), pad in 0usize..8) {
        let f = build(&spec, pad);
        let cat = safetensors::open(&f[..]).unwrap();
        prop_assert_eq!(cat.tensors.len(), spec.len());
        prop_assert_eq!(&cat.metadata, &vec![("k".to_string(), Meta::Str("v".into()))]);
        // Data-offset order is file order; empty tensors keep their header (reversed) order
        // among themselves but sort by offset, so match by name.
        for (i, (d, shape, bytes)) in spec.iter().enumerate() {
            let t = cat.get(&format!("t{i}")).unwrap();
            prop_assert_eq!(&t.shape, shape);
            prop_assert_eq!(t.ty, safetensors::element_type(DTYPES[*d].0).unwrap());
            let got = formats::read("safetensors", t, &[&f[..]]).unwrap();
            prop_assert_eq!(&got[..], &bytes[..]);
        }
        let offsets: Vec<u64> = cat.tensors.iter().map(|t| match t.storage {
            formats::Storage::Range { offset, .. } => offset,
            _ => unreachable!(),
        }).collect();
        prop_assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn mutated_files_never_panic(spec in specs(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut f = build(&spec, 0);
        for (at, b) in edits {
            let n = f.len();
            f[at % n] = b;
        }
        let (r, largest) = largest_alloc(|| safetensors::open(&f[..]));
        prop_assert!(largest <= f.len().max(4096));
        if let Ok(cat) = r {
            for t in &cat.tensors {
                let _ = formats::read("safetensors", t, &[&f[..]]);
            }
        }
    }

    #[test]
    fn truncated_files_are_refused(spec in specs(), cut in any::<usize>()) {
        let f = build(&spec, 0);
        let cut = cut % f.len();
        prop_assert!(safetensors::open(&f[..cut]).is_err());
    }

    #[test]
    fn random_bytes_never_panic(mut f in proptest::collection::vec(any::<u8>(), 0..256), len in 0u64..300) {
        if f.len() >= 8 {
            f[..8].copy_from_slice(&len.to_le_bytes());
        }
        let _ = safetensors::open(&f[..]);
        let _ = safetensors::open_index(&f[..], &mut |_| Err(FormatError::new("t", ErrorKind::Io, "no")));
    }
}
