//! The writer's own tests: canonical layout and sharing, names and limits, layouts, streaming,
//! append, shards.

use alloc::vec;
use alloc::vec::Vec;

use crate::hash::xxh3_64;

use super::*;
use crate::dtype::DType;
use crate::zt::cbor::{self, Value};
use crate::zt::rule::Rule;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn footer(b: &[u8]) -> (u64, u64, u64) {
    let f = &b[b.len() - 40..];
    let u = |i: usize| u64::from_le_bytes(f[i..i + 8].try_into().unwrap());
    (u(0), u(8), u(16))
}

#[test]
fn canonical_layout_and_sharing() {
    let x = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
    w.add("a", DType::F32, &[0], &[]).unwrap();
    w.add("b", DType::F32, &[2, 3], &x).unwrap();
    w.add("c", DType::F32, &[0], &[]).unwrap();
    w.add("d", DType::F32, &[6], &x).unwrap();
    let err = w.add("c0", DType::F32, &[6], &x).unwrap_err();
    assert_eq!(err.rule, Rule::Order);
    let done = w.finish().unwrap();
    let b = &done.sink;
    let (mo, ml, mh) = footer(b);
    assert_eq!((mo, ml), (131072, done.manifest_length));
    assert_eq!(mh, xxh3_64(&b[mo as usize..(mo + ml) as usize]));
    assert!(b[8..65536].iter().all(|&z| z == 0));
    let m = cbor::decode(&done.manifest, cbor::Mode::Deterministic).unwrap();
    let blob = |o: &str| {
        m.get("objects")
            .unwrap()
            .get(o)
            .unwrap()
            .get("parts")
            .unwrap()
            .get("data")
            .unwrap()
            .get("blob")
            .unwrap()
            .clone()
    };
    assert_eq!(blob("a"), Value::Array(vec![Value::Uint(65536), Value::Uint(0)]));
    assert_eq!(blob("b"), Value::Array(vec![Value::Uint(65536), Value::Uint(24)]));
    assert_eq!(blob("d"), blob("b"));
    assert_eq!(b.len() as u64, mo + ml + 40);
}

#[test]
fn names_and_limits() {
    let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
    assert_eq!(w.add("e\u{301}", DType::U8, &[1], &[1]).unwrap_err().rule, Rule::Name);
    assert_eq!(w.add("", DType::U8, &[1], &[1]).unwrap_err().rule, Rule::Name);
    assert_eq!(w.add("a\0", DType::U8, &[1], &[1]).unwrap_err().rule, Rule::Name);
    assert_eq!(
        w.add(&"x".repeat(1025), DType::U8, &[1], &[1]).unwrap_err().rule,
        Rule::Name
    );
    w.add(&"x".repeat(1024), DType::U8, &[1], &[1]).unwrap();
    let e = w.add("y", DType::U8, &[2], &[1]).unwrap_err();
    assert_eq!(
        (e.rule, e.object.as_deref(), e.part.as_deref()),
        (Rule::DenseSize, Some("y"), Some("data"))
    );
    assert_eq!(w.add("z", DType::U8, &vec![1; 65], &[1]).unwrap_err().rule, Rule::Shape);
    assert_eq!(
        w.add("z", DType::U8, &[u64::MAX, 2], &[1]).unwrap_err().rule,
        Rule::Shape
    );
    w.add("z", DType::U8, &vec![1; 64], &[1]).unwrap();
    let mut n = Writer::new(Vec::new(), Options::non_canonical()).unwrap();
    n.add("e\u{301}", DType::U8, &[1], &[1]).unwrap();
    n.add("a", DType::Bool, &[1], &[1]).unwrap();
    assert!(Writer::new(Vec::new(), Options::default().alignment(4096)).is_err());
    assert!(Writer::new(Vec::new(), Options::non_canonical().alignment(8192 + 4096)).is_err());
}

#[test]
fn layouts() {
    let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
    let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (ind, ptr, val) = (u32s(&[0, 2, 1]), u32s(&[0, 2, 3]), f32s(&[1.0, 2.0, 3.0]));
    let csr = [
        PartSpec::new("values", DType::F32, &val),
        PartSpec::new("indices", DType::U32, &ind),
        PartSpec::new("indptr", DType::U32, &ptr),
    ];
    w.add_object("csr", &ObjectSpec::new(&[2, 3], LAYOUT_SPARSE_CSR), &csr)
        .unwrap();
    let bad = [
        PartSpec::new("values", DType::F32, &val),
        PartSpec::new("indices", DType::U32, &ind),
        PartSpec::new("indptr", DType::U32, &ind[..8]),
    ];
    assert_eq!(
        w.add_object("csr2", &ObjectSpec::new(&[2, 3], LAYOUT_SPARSE_CSR), &bad)
            .unwrap_err()
            .rule,
        Rule::LayoutRule
    );
    let q = QuantGroup {
        bits: 4,
        group_size: 8,
        axis: 1,
        word: "u32".into(),
        msb_first: false,
        scale_form: "f32_factors".into(),
        zero_point: ZeroPoint::Implied(8),
    };
    let data = u32s(&[1985229328, 4275878552, 1985229328, 4275878552]);
    let scales = f32s(&[0.5, 0.25, 1.0, 2.0]);
    let parts = [
        PartSpec::new("data", DType::U32, &data),
        PartSpec::new("scales", DType::F32, &scales),
    ];
    w.add_object(
        "q4",
        &ObjectSpec::new(&[2, 16], LAYOUT_QUANT_GROUP).attributes(q.attributes()),
        &parts,
    )
    .unwrap();
    let coords = u32s(&[0, 1, 2, 0]);
    w.add_object(
        "z",
        &ObjectSpec::new(&[3, 3], LAYOUT_SPARSE_COO),
        &[
            PartSpec::new("coords", DType::U32, &coords),
            PartSpec::new("values", DType::F32, &val[..8]),
        ],
    )
    .unwrap();
    w.finish().unwrap();
}

#[test]
fn streaming_matches_in_memory_and_shares() {
    let x: Vec<u8> = (0..200_000u32).flat_map(|v| v.to_le_bytes()).collect();
    let mut a = Writer::new(Vec::new(), Options::default()).unwrap();
    a.add("p", DType::U32, &[200_000], &x).unwrap();
    a.add("q", DType::U32, &[200_000], &x).unwrap();
    let a = a.finish().unwrap().sink;
    let mut b = Writer::new(Vec::new(), Options::default()).unwrap();
    for name in ["p", "q"] {
        b.begin_object(
            name,
            &ObjectSpec::dense(&[200_000]),
            &[PartDecl::new("data", DType::U32, x.len() as u64)],
        )
        .unwrap();
        b.begin_part("data").unwrap();
        for c in x.chunks(7777) {
            b.write_chunk(c).unwrap();
        }
        b.end_part().unwrap();
        b.end_object().unwrap();
    }
    assert_eq!(a, b.finish().unwrap().sink);
}

#[test]
fn append_keeps_old_bytes() {
    let mut w = Writer::new(Vec::new(), Options::non_canonical().alignment(4096)).unwrap();
    w.add("first", DType::F32, &[4], &f32s(&[1.0, 2.0, 3.0, 4.0])).unwrap();
    let old = w.finish().unwrap().sink;
    let mut w = Writer::append(old.clone(), &old, Options::non_canonical()).unwrap();
    assert_eq!(w.alignment(), 4096);
    w.add(
        "second",
        DType::I64,
        &[2],
        &[5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0],
    )
    .unwrap();
    let done = w.finish().unwrap();
    let grow = &done.sink;
    assert_eq!(&grow[..old.len()], &old[..]);
    assert_eq!(done.manifest_offset, 16384);
    let m = cbor::decode(&done.manifest, cbor::Mode::Deterministic).unwrap();
    assert_eq!(m.get("objects").unwrap().as_map().unwrap().len(), 2);
}

#[test]
fn sha256_shards_and_data_shards() {
    let mut s = Writer::new(Vec::new(), Options::non_canonical().alignment(4096)).unwrap();
    let r = s.put_blob(&[1, 2, 3, 4]).unwrap();
    assert_eq!(r.offset, 4096);
    let shard = s.finish_data_shard().unwrap();
    assert_eq!(footer(&shard.sink), (0, 0, 0));
    let mut w = Writer::new(Vec::new(), Options::non_canonical().digest(DigestAlgo::Sha256)).unwrap();
    assert_eq!(
        w.add_shard("../x", shard.size, "xxh3:00").unwrap_err().rule,
        Rule::ShardName
    );
    w.add_shard("data", shard.size, &DigestAlgo::Xxh3.digest(&shard.sink))
        .unwrap();
    w.add_object(
        "t",
        &ObjectSpec::dense(&[4]),
        &[PartSpec::external(
            "data",
            DType::U8,
            "data",
            r.offset,
            r.length,
            Some(r.digest.clone()),
        )],
    )
    .unwrap();
    w.add("local", DType::U8, &[1], &[9]).unwrap();
    let done = w.finish().unwrap();
    let m = cbor::decode(&done.manifest, cbor::Mode::Deterministic).unwrap();
    let d = m
        .get("objects")
        .unwrap()
        .get("local")
        .unwrap()
        .get("parts")
        .unwrap()
        .get("data")
        .unwrap()
        .get("digest")
        .unwrap();
    assert!(d.as_text().unwrap().starts_with("sha256:"));
    assert!(
        content_digest(&done.manifest, DigestAlgo::Sha256)
            .unwrap()
            .starts_with("sha256:")
    );
}

#[test]
fn an_object_without_parts_is_refused_whatever_its_layout() {
    // Found by the bindings_zt fuzz target: an unknown layout with no parts was written, and the
    // reader then refused the file ("object has an empty parts map").
    for layout in ["dense", "x.custom"] {
        let mut w = Writer::new(Vec::new(), Options::default()).unwrap();
        let e = w.add_object("w", &ObjectSpec::new(&[3, 2], layout), &[]).unwrap_err();
        assert_eq!(e.rule, Rule::Schema, "{e}");
        assert!(alloc::format!("{e}").contains("at least one part"), "{e}");
        let e = w.begin_object("w", &ObjectSpec::new(&[3, 2], layout), &[]).unwrap_err();
        assert_eq!(e.rule, Rule::Schema, "{e}");
        // The writer is still usable, and what it writes opens.
        w.add("w", DType::F32, &[1], &f32s(&[1.0])).unwrap();
        let f = w.finish().unwrap();
        crate::zt::reader::Reader::open(&f.sink[..]).unwrap();
    }
}
