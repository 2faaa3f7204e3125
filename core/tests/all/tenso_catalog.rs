//! Tenso packet files as a `formats::Catalog` (`formats::tenso::open`), checked against the codec
//! (`wire::decode`): over the golden vectors (`tests/data/vectors/tenso`), every truncation of
//! them, flipped bytes under an XXH3 footer, and random files of several packets.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;
use tensorlane_core::detect::Format;
use tensorlane_core::dtype::DType;
use tensorlane_core::formats::{self, Catalog, ErrorKind, FormatError, Meta, ReadLimits, Storage};
use tensorlane_core::tensor::Tensor;
use tensorlane_core::wire::{self, Bundle, DecodeOptions, EncodeOptions, Packet, SparseFormat, flags};

/// What a leaf of a decoded packet should read as.
#[derive(Clone, Debug, PartialEq)]
enum Want {
    Dense(Vec<u8>),
    Parts(Vec<(&'static str, Vec<u8>)>),
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The leaves of `p` named under `name`, as the catalog names them.
fn leaves(p: &Packet<'_>, name: String, out: &mut Vec<(String, Want)>) {
    match p {
        Packet::Dense(t) => out.push((name, Want::Dense(t.data().to_vec()))),
        Packet::Bundle(b) => {
            for (k, v) in &b.entries {
                let sub = if name.is_empty() {
                    k.to_string()
                } else {
                    format!("{name}/{k}")
                };
                leaves(v, sub, out);
            }
        }
        Packet::Sparse(s) => {
            let [d, a, b] = &s.components;
            let (na, nb) = if s.format == SparseFormat::Coo {
                ("row", "col")
            } else {
                ("indices", "indptr")
            };
            out.push((
                name,
                Want::Parts(vec![
                    ("values", d.data().to_vec()),
                    (na, a.data().to_vec()),
                    (nb, b.data().to_vec()),
                ]),
            ));
        }
        Packet::Quantized(q) => out.push((
            name,
            Want::Parts(vec![
                ("data", q.data.to_vec()),
                ("scales", f32_bytes(&q.scales)),
                ("zero_points", f32_bytes(&q.zero_points)),
            ]),
        )),
        Packet::Strings(s) => out.push((
            name,
            Want::Parts(vec![
                ("offsets", s.offsets().flat_map(u64::to_le_bytes).collect()),
                ("payload", s.payload().to_vec()),
            ]),
        )),
    }
}

/// The leaves of a file of `packets`, named as the CLI's conversion names them.
fn wants(packets: &[Packet<'_>]) -> Vec<(String, Want)> {
    let prefixed = !(packets.len() == 1 && matches!(packets[0], Packet::Bundle(_)));
    let mut out = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let mut v = Vec::new();
        leaves(p, String::new(), &mut v);
        for (n, w) in v {
            let name = match (prefixed, n.is_empty()) {
                (false, _) => n,
                (true, true) => format!("#{i}"),
                (true, false) => format!("#{i}/{n}"),
            };
            out.push((name, w));
        }
    }
    out
}

/// The packets of a file as the CLI decodes them (the first must decode; after it, bytes that
/// do not start with the magic end the file), or `None` where the decoder refuses.
fn decode_file(data: &[u8]) -> Option<Vec<Packet<'_>>> {
    if data.is_empty() {
        return None;
    }
    let mut packets = Vec::new();
    let mut off = 0;
    while off < data.len() {
        if !packets.is_empty() && !data[off..].starts_with(&wire::MAGIC) {
            break;
        }
        let d = wire::decode_with(&data[off..], &DecodeOptions::default()).ok()?;
        off += d.len;
        packets.push(d.packet);
    }
    Some(packets)
}

/// What the catalog of `data` reads: every tensor (or part), through `read_limited` with the
/// catalog's checks and through `read_chunks`; every check through `check_integrity`.
fn catalog_reads(data: &[u8]) -> Result<(Catalog, BTreeMap<String, Want>), FormatError> {
    let cat = formats::open_as(Format::Tenso, data)?;
    let src: &[&[u8]] = &[data];
    let limits = ReadLimits::default();
    let mut got = BTreeMap::new();
    for t in &cat.tensors {
        let w = match &t.storage {
            Storage::Parts(p) => {
                let mut parts = Vec::new();
                for part in &p.parts {
                    let b = formats::read_part("tenso", t, &part.name, src, &cat.checks, &limits)?;
                    assert_eq!(b.len() as u64, part.len, "{}: part {} length", t.name, part.name);
                    let name: &'static str = match part.name.as_str() {
                        "values" => "values",
                        "row" => "row",
                        "col" => "col",
                        "indices" => "indices",
                        "indptr" => "indptr",
                        "data" => "data",
                        "scales" => "scales",
                        "zero_points" => "zero_points",
                        "offsets" => "offsets",
                        "payload" => "payload",
                        other => panic!("unexpected part {other}"),
                    };
                    parts.push((name, b.into_owned()));
                }
                // Sparse parts compare in the order `leaves` lists them.
                if p.layout.starts_with("tenso.sparse") {
                    parts.rotate_right(1);
                }
                Want::Parts(parts)
            }
            _ => {
                let whole = formats::read_limited("tenso", t, src, &cat.checks, &limits)?;
                let mut pieces = Vec::new();
                formats::read_chunks("tenso", t, src, &cat.checks, &limits, 24, &mut |p| {
                    pieces.extend_from_slice(p);
                    Ok(())
                })?;
                assert_eq!(
                    pieces,
                    whole.as_ref(),
                    "{}: read_chunks and read_limited differ",
                    t.name
                );
                Want::Dense(whole.into_owned())
            }
        };
        got.insert(t.name.clone(), w);
    }
    for c in &cat.checks {
        formats::check_integrity("tenso", c, src)?;
    }
    Ok((cat, got))
}

/// The catalog agrees with the decoder on `data`: it refuses (on open, on a read or on a check)
/// exactly what the decoder refuses, and otherwise reads every leaf's bytes.
fn agree(data: &[u8]) -> Result<(), String> {
    let expected = decode_file(data);
    let actual = catalog_reads(data);
    match (expected, actual) {
        (None, Err(_)) => Ok(()),
        (None, Ok((cat, _))) => Err(format!(
            "the decoder refuses but the catalog reads {} tensors",
            cat.tensors.len()
        )),
        (Some(_), Err(e)) => Err(format!("the decoder accepts but the catalog refuses: {e}")),
        (Some(packets), Ok((cat, got))) => compare(&packets, &cat, &got),
    }
}

fn compare(packets: &[Packet<'_>], cat: &Catalog, got: &BTreeMap<String, Want>) -> Result<(), String> {
    let mut want = BTreeMap::new();
    for (n, w) in wants(packets) {
        want.insert(n, w);
    }
    for (n, w) in &want {
        if got.get(n) != Some(w) {
            return Err(format!("{n:?}: catalog reads {:?}, decoder gives {w:?}", got.get(n)));
        }
    }
    if want.len() != got.len() {
        return Err(format!(
            "catalog lists {:?}; expected {:?}",
            got.keys().collect::<Vec<_>>(),
            want.keys()
        ));
    }
    if cat.metadata.first() != Some(&("packets".to_string(), Meta::UInt(packets.len() as u64))) {
        return Err(format!(
            "metadata {:?} does not count {} packets",
            cat.metadata,
            packets.len()
        ));
    }
    Ok(())
}

fn vectors_dir() -> PathBuf {
    common::data("vectors/tenso").join("vectors/tenso")
}

/// Every `.tenso` file of the vectors, with its name (`invalid/x`, `decode_only/y`, `z`).
fn vectors() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for sub in ["", "decode_only", "invalid"] {
        for e in std::fs::read_dir(vectors_dir().join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) == Some("tenso") {
                let stem = p.file_stem().unwrap().to_str().unwrap();
                let name = if sub.is_empty() {
                    stem.to_string()
                } else {
                    format!("{sub}/{stem}")
                };
                out.push((name, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 128, "expected the 128 golden vectors, found {}", out.len());
    out
}

fn attr<'a>(t: &'a formats::TensorInfo, k: &str) -> Option<&'a Meta> {
    t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| v)
}

#[test]
fn every_vector_reads_as_the_decoder_decodes_it() {
    let mut opened = 0;
    for (name, bytes) in vectors() {
        agree(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let refused = name.starts_with("invalid/") && name != "invalid/compressed_bundle_emitted_by_tenso";
        assert_eq!(decode_file(&bytes).is_none(), refused, "{name}: the decoder's verdict");
        let Ok(cat) = formats::open_as(Format::Tenso, &bytes[..]) else {
            continue;
        };
        opened += 1;
        // Plain `formats::read` (no checks) gives the decoder's bytes too, borrowed for raw bodies.
        let src: &[&[u8]] = &[&bytes];
        for t in &cat.tensors {
            for k in ["packet", "packet_offset", "kind", "flags", "integrity"] {
                assert!(attr(t, k).is_some(), "{name}: tensor {} lacks attribute {k}", t.name);
            }
            if let Storage::Range { .. } = t.storage {
                let b = formats::read("tenso", t, src).unwrap();
                assert!(
                    matches!(b, std::borrow::Cow::Borrowed(_)),
                    "{name}: {} is not zero-copy",
                    t.name
                );
            }
        }
    }
    assert!(opened >= 100, "only {opened} vectors opened");
}

#[test]
fn vector_names_kinds_and_layouts() {
    let open = |n: &str| {
        let b = std::fs::read(vectors_dir().join(format!("{n}.tenso"))).unwrap();
        formats::open_as(Format::Tenso, &b[..]).unwrap()
    };
    let c = open("sparse_csr_f64");
    assert_eq!(c.tensors.len(), 1);
    let t = &c.tensors[0];
    assert_eq!(t.name, "#0");
    assert_eq!(t.ty, formats::ElementType::Dense(DType::F64));
    assert_eq!(attr(t, "kind"), Some(&Meta::Str("sparse".into())));
    let Storage::Parts(p) = &t.storage else {
        panic!("not parts")
    };
    assert_eq!(p.layout, "tenso.sparse_csr");
    let names: Vec<&str> = p.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["indices", "indptr", "values"]);
    assert_eq!(
        formats::read("tenso", t, &[&[][..]]).unwrap_err().kind,
        ErrorKind::Unsupported
    );

    let q = open("quant_qint8_per_tensor");
    let t = &q.tensors[0];
    assert_eq!(attr(t, "kind"), Some(&Meta::Str("quantized".into())));
    assert_eq!(attr(t, "qdtype"), Some(&Meta::Str("qint8".into())));
    assert!(matches!(attr(t, "scales"), Some(Meta::List(v)) if v.len() == 1));

    // A string packet is a tensor of `count` strings stored as its offsets and payload, which
    // read as the decoder gives them.
    let b = std::fs::read(vectors_dir().join("string_mixed_utf8.tenso")).unwrap();
    let s = formats::open_as(Format::Tenso, &b[..]).unwrap();
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    assert_eq!(s.tensors.len(), 1);
    let t = &s.tensors[0];
    assert_eq!(t.name, "#0");
    let Packet::Strings(decoded) = wire::decode_with(&b, &DecodeOptions::default()).unwrap().packet else {
        panic!("not a string packet")
    };
    assert_eq!(t.shape, [decoded.len() as u64]);
    assert_eq!(t.ty, formats::ElementType::Dense(DType::U8));
    assert_eq!(attr(t, "kind"), Some(&Meta::Str("string".into())));
    assert_eq!(attr(t, "count"), Some(&Meta::UInt(decoded.len() as u64)));
    assert_eq!(attr(t, "layout"), Some(&Meta::Str("tenso.strings".into())));
    let Storage::Parts(p) = &t.storage else {
        panic!("not parts")
    };
    assert_eq!(p.layout, formats::tenso::LAYOUT_STRINGS);
    let names: Vec<&str> = p.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["offsets", "payload"]);
    let src: &[&[u8]] = &[&b];
    let read = |part: &str| formats::read_part("tenso", t, part, src, &s.checks, &ReadLimits::default()).unwrap();
    let offsets: Vec<u8> = decoded.offsets().flat_map(u64::to_le_bytes).collect();
    assert_eq!(read("offsets").as_ref(), &offsets[..]);
    assert_eq!(read("payload").as_ref(), decoded.payload());
    assert_eq!(
        formats::read("tenso", t, &[&[][..]]).unwrap_err().kind,
        ErrorKind::Unsupported
    );

    let g = open("decode_only/v4_trailing_garbage");
    assert!(g.metadata.iter().any(|(k, _)| k == "trailing_bytes"));
    assert!(g.skipped.iter().any(|(_, why)| why.contains("magic")));

    let c = open("compress_custom_align16_integrity");
    let t = &c.tensors[0];
    assert!(matches!(
        t.storage,
        Storage::Encoded {
            codec: formats::Codec::Lz4Frame,
            ..
        }
    ));
    assert_eq!(c.checks.len(), 1);
    assert_eq!(attr(t, "integrity"), Some(&Meta::Bool(true)));
    assert_eq!(
        attr(t, "flags"),
        Some(&Meta::List(vec![
            Meta::Str("INTEGRITY".into()),
            Meta::Str("COMPRESSION".into()),
            Meta::Str("CUST_ALIGN".into())
        ]))
    );
}

/// A flipped body byte under INTEGRITY: open succeeds (headers are fine), reading the tensor and
/// `check_integrity` fail with a checksum error. For a quantized packet the footer is checked on
/// open.
#[test]
fn flipped_body_byte_under_integrity_is_a_checksum_error() {
    let mut seen = 0;
    for (name, bytes) in vectors() {
        if name.starts_with("invalid/") {
            continue;
        }
        let Ok(cat) = formats::open_as(Format::Tenso, &bytes[..]) else {
            continue;
        };
        for (ci, c) in cat.checks.iter().enumerate() {
            if c.len == 0 {
                continue;
            }
            let mut bad = bytes.clone();
            bad[(c.offset + c.len / 2) as usize] ^= 0x5a;
            let cat2 = formats::open_as(Format::Tenso, &bad[..]).unwrap_or_else(|e| panic!("{name}: {e}"));
            let src: &[&[u8]] = &[&bad];
            let e = formats::check_integrity("tenso", &cat2.checks[ci], src).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Checksum, "{name}: {e}");
            let covered: Vec<_> = cat2
                .tensors
                .iter()
                .filter(|t| {
                    t.storage
                        .stored_ranges()
                        .iter()
                        .any(|&(_, o, l)| o == c.offset && l == c.len)
                })
                .collect();
            assert!(!covered.is_empty(), "{name}: no tensor under check {ci}");
            for t in covered {
                let e = match &t.storage {
                    Storage::Parts(p) => {
                        let part = p
                            .parts
                            .iter()
                            .find(|x| x.storage.stored_ranges()[0].1 == c.offset)
                            .unwrap();
                        formats::read_part("tenso", t, &part.name, src, &cat2.checks, &ReadLimits::default())
                            .unwrap_err()
                    }
                    _ => formats::read_limited("tenso", t, src, &cat2.checks, &ReadLimits::default()).unwrap_err(),
                };
                assert_eq!(e.kind, ErrorKind::Checksum, "{name}: {e}");
                if !matches!(t.storage, Storage::Parts(_)) {
                    let e =
                        formats::read_chunks(
                            "tenso",
                            t,
                            src,
                            &cat2.checks,
                            &ReadLimits::default(),
                            7,
                            &mut |_| Ok(()),
                        )
                        .unwrap_err();
                    assert_eq!(e.kind, ErrorKind::Checksum, "{name}: {e}");
                }
            }
            seen += 1;
        }
        // Quantized packets with a footer: it is checked on open.
        for t in &cat.tensors {
            if attr(t, "kind") == Some(&Meta::Str("quantized".into()))
                && attr(t, "integrity") == Some(&Meta::Bool(true))
            {
                let Storage::Parts(p) = &t.storage else { unreachable!() };
                let (_, o, l) = p.parts[0].storage.stored_ranges()[0];
                if l == 0 {
                    continue;
                }
                let mut bad = bytes.clone();
                bad[o as usize] ^= 1;
                let e = formats::open_as(Format::Tenso, &bad[..]).unwrap_err();
                assert_eq!(e.kind, ErrorKind::Checksum, "{name}: {e}");
                seen += 1;
            }
        }
    }
    assert!(seen >= 5, "only {seen} integrity-protected bodies among the vectors");
}

/// Every truncation of every vector (and of a file of several packets): the catalog refuses
/// exactly what the decoder refuses, and never panics.
#[test]
fn truncations_never_panic_and_agree_with_the_decoder() {
    let mut files: Vec<(String, Vec<u8>)> = vectors().into_iter().filter(|(_, b)| b.len() <= 8 << 10).collect();
    let mut multi = Vec::new();
    for n in [
        "dtype_float32",
        "bundle_flat",
        "sparse_coo_f32",
        "quant_qint8_integrity",
        "string_mixed_utf8",
        "integrity_float32_vec",
    ] {
        multi.extend(std::fs::read(vectors_dir().join(format!("{n}.tenso"))).unwrap());
    }
    files.push(("several packets".into(), multi));
    let mut cuts = 0;
    for (name, bytes) in &files {
        for cut in 0..bytes.len() {
            let data = &bytes[..cut];
            if let Err(e) = agree(data) {
                panic!("{name} cut at {cut}: {e}");
            }
            cuts += 1;
        }
    }
    assert!(cuts > 10_000, "only {cuts} truncations");
}

#[test]
fn several_packets_are_prefixed_and_a_lone_bundle_is_not() {
    let t = |v: &[f32]| Packet::Dense(Tensor::from_values(vec![v.len() as u64], v).unwrap());
    let bundle = Packet::Bundle(
        Bundle::new()
            .with("a", t(&[1.0]))
            .with("n", Packet::Bundle(Bundle::new().with("b", t(&[2.0])))),
    );
    let opts = EncodeOptions::default();
    let lone = wire::encode(&bundle, &opts).unwrap();
    let cat = formats::open_as(Format::Tenso, &lone[..]).unwrap();
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "n/b"]);
    let mut two = wire::encode(&t(&[3.0, 4.0]), &opts).unwrap();
    two.extend(&lone);
    let cat = formats::open_as(Format::Tenso, &two[..]).unwrap();
    let names: Vec<&str> = cat.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["#0", "#1/a", "#1/n/b"]);
    assert_eq!(cat.metadata[0], ("packets".to_string(), Meta::UInt(2)));
    // A repeated key keeps its last value, as the decoder's lookup does.
    let dup = Packet::Bundle(Bundle::new().with("k", t(&[1.0])).with("k", t(&[2.0])));
    let b = wire::encode(&dup, &opts).unwrap();
    let cat = formats::open_as(Format::Tenso, &b[..]).unwrap();
    assert_eq!(cat.tensors.len(), 1);
    assert_eq!(
        formats::read("tenso", &cat.tensors[0], &[&b[..]]).unwrap().as_ref(),
        2f32.to_le_bytes()
    );
    assert_eq!(cat.skipped.len(), 1);
}

#[test]
fn errors_name_the_tensor_and_the_offset() {
    let t = Packet::Dense(Tensor::from_values(vec![4], &[1u32, 2, 3, 4]).unwrap());
    let b = wire::encode(&Packet::Bundle(Bundle::new().with("w", t)), &EncodeOptions::default()).unwrap();
    let e = formats::open_as(Format::Tenso, &b[..b.len() - 1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Truncated);
    assert_eq!(e.tensor.as_deref(), Some("w"));
    assert!(e.offset.is_some());
    assert_eq!(e.format, "tenso");
    // In a file of several packets the name carries the packet index, and the offset is absolute.
    let mut two = b.clone();
    two.extend(&b[..b.len() - 1]);
    let e = formats::open_as(Format::Tenso, &two[..]).unwrap_err();
    assert_eq!(e.tensor.as_deref(), Some("#1/w"));
    assert!(e.offset.unwrap() >= b.len() as u64, "{e}");
    assert!(e.message.starts_with("packet 1 (at byte"), "{e}");
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![
        DType::F32,
        DType::F64,
        DType::I8,
        DType::U16,
        DType::I64,
        DType::Bool,
        DType::BF16,
        DType::C64,
    ])
}

fn dense_strategy() -> impl Strategy<Value = Packet<'static>> {
    (dtype_strategy(), prop::collection::vec(0u64..4, 0..3), any::<u64>()).prop_map(|(d, shape, seed)| {
        let n = shape.iter().product::<u64>() as usize * d.itemsize();
        // Half zeros (compressible), half pseudo-random.
        let mut x = seed | 1;
        let data: Vec<u8> = (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 2 == 0 { 0 } else { x as u8 }
            })
            .collect();
        Packet::Dense(Tensor::new(d, shape, data).unwrap())
    })
}

fn packet_strategy() -> impl Strategy<Value = Packet<'static>> {
    dense_strategy().prop_recursive(2, 12, 4, |inner| {
        prop::collection::vec(("[a-c]{0,2}", inner), 0..4).prop_map(|entries| {
            let mut b = Bundle::new();
            for (k, v) in entries {
                b = b.with(k, v);
            }
            Packet::Bundle(b)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random dense and bundle packets (LZ4 and integrity on or off, several alignments),
    /// concatenated: the catalog reads every leaf back equal.
    #[test]
    fn random_packet_files_read_back(
        packets in prop::collection::vec((packet_strategy(), any::<bool>(), any::<bool>(), prop::sample::select(vec![1u64, 8, 64, 128])), 1..4)
    ) {
        let mut file = Vec::new();
        let n = packets.len();
        let mut originals = Vec::new();
        for (i, (p, compress, integrity, alignment)) in packets.into_iter().enumerate() {
            // A compressed top-level body runs to the end of the file: only the last packet may
            // have one (bundles bound their compressed leaves).
            let compress = compress && (i + 1 == n || matches!(p, Packet::Bundle(_)));
            let opts = EncodeOptions { compress, integrity, alignment, ..Default::default() };
            file.extend(wire::encode(&p, &opts).unwrap());
            originals.push(p);
        }
        let (cat, got) = catalog_reads(&file).map_err(|e| TestCaseError::fail(e.to_string()))?;
        compare(&originals, &cat, &got).map_err(TestCaseError::fail)?;
        prop_assert!(agree(&file).is_ok());
        // Every leaf with a footer has a check over exactly its stored bytes.
        for t in &cat.tensors {
            let (_, o, l) = t.storage.stored_ranges()[0];
            let checked = cat.checks.iter().any(|c| c.offset == o && c.len == l);
            prop_assert_eq!(checked, attr(t, "integrity") == Some(&Meta::Bool(true)), "{}", t.name);
        }
    }

    /// Any bytes after a valid first packet: never a panic, and the same verdict as the decoder.
    #[test]
    fn arbitrary_tails_agree(tail in prop::collection::vec(any::<u8>(), 0..64), magic in any::<bool>()) {
        let mut file = std::fs::read(vectors_dir().join("dtype_float32.tenso")).unwrap();
        if magic {
            file.extend(wire::MAGIC);
        }
        file.extend(tail);
        agree(&file).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn flags_of_every_vector_are_named() {
    for (name, bytes) in vectors() {
        let Ok(cat) = formats::open_as(Format::Tenso, &bytes[..]) else {
            continue;
        };
        for t in &cat.tensors {
            let off = match attr(t, "offset") {
                Some(Meta::UInt(o)) => *o as usize,
                other => panic!("{name}: offset {other:?}"),
            };
            let h = wire::parse_header(&bytes[off..]).unwrap();
            let Some(Meta::List(names)) = attr(t, "flags") else {
                panic!("{name}")
            };
            assert_eq!(names.len(), formats::tenso::flag_names(h.flags).len());
            if attr(t, "kind") != Some(&Meta::Str("sparse".into())) {
                assert_eq!(
                    attr(t, "integrity") == Some(&Meta::Bool(true)),
                    h.flags & flags::INTEGRITY != 0,
                    "{name}"
                );
            }
        }
    }
}

/// A source that counts what is read from it (and is not in memory, so nothing is borrowed).
struct Counting {
    data: Vec<u8>,
    reads: std::cell::Cell<u64>,
    bytes: std::cell::Cell<u64>,
}

impl tensorlane_core::source::ReadAt for Counting {
    fn size(&self) -> u64 {
        self.data.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), tensorlane_core::source::SourceError> {
        self.reads.set(self.reads.get() + 1);
        self.bytes.set(self.bytes.get() + buf.len() as u64);
        tensorlane_core::source::ReadAt::read_at(&self.data[..], offset, buf)
    }
}

#[test]
fn listing_reads_headers_only() {
    let big = Packet::Dense(Tensor::new(DType::F32, vec![1024, 1024], vec![7u8; 4 << 20]).unwrap());
    let opts = EncodeOptions {
        integrity: true,
        ..Default::default()
    };
    let mut data = Vec::new();
    for _ in 0..4 {
        data.extend(wire::encode(&big, &opts).unwrap());
    }
    data.extend(wire::encode(&Packet::Bundle(Bundle::new().with("w", big.clone())), &opts).unwrap());
    let src = Counting {
        data,
        reads: 0.into(),
        bytes: 0.into(),
    };
    let cat = formats::open_as(Format::Tenso, &src).unwrap();
    assert_eq!(cat.tensors.len(), 5);
    assert_eq!(cat.checks.len(), 5);
    assert!(src.bytes.get() < 1024, "{} bytes read to list 20 MiB", src.bytes.get());
    assert!(src.reads.get() < 40, "{} reads", src.reads.get());
    // A read verifies the footer.
    let sources: &[&Counting] = &[&src];
    let b = formats::read_limited("tenso", &cat.tensors[4], sources, &cat.checks, &ReadLimits::default()).unwrap();
    assert_eq!(b.len(), 4 << 20);
}
