//! HDF5 reader against the fixtures in `tests/data` (h5py-written, libver earliest and latest), hand-built
//! hostile files (one named test per attack), and property tests (mutated fixtures never panic).

use crate::common;

use common::{check_catalog, fixtures, meta_json};
use tensorlane_core::formats::{self, Catalog, ErrorKind, hdf5};

fn open(bytes: &[u8]) -> Catalog {
    hdf5::open(bytes).unwrap_or_else(|e| panic!("open: {e}"))
}

/// JSON equality with floats compared to a relative 1e-12 (serde_json's default float parsing is
/// not exactly round-trip).
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (J::Array(x), J::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn assert_same(got: Option<serde_json::Value>, want: Option<&serde_json::Value>, what: &str) {
    let ok = match (&got, want) {
        (Some(g), Some(w)) => same(g, w),
        (None, None) => true,
        _ => false,
    };
    assert!(ok, "{what}: got {got:?}, want {want:?}");
}

#[test]
fn every_hdf5_fixture_reads_as_the_manifest_says() {
    let fxs = fixtures(&["hdf5"]);
    assert_eq!(fxs.len(), 4);
    for fx in &fxs {
        assert_eq!(fx.expect(), "read", "{}", fx.file());
        let bytes = fx.bytes();
        let cat = open(&bytes);
        check_catalog(fx, &cat, &[&bytes[..]]);
        // Skipped datasets are reported, never returned as tensors.
        for s in fx.entry["skipped"].as_array().into_iter().flatten() {
            let name = s["name"].as_str().unwrap();
            assert!(cat.get(name).is_none(), "{}: {name} must be skipped", fx.file());
            assert!(
                cat.skipped.iter().any(|(n, _)| n == name),
                "{}: {name} not reported",
                fx.file()
            );
        }
        // Per-tensor layout details and attributes.
        for w in fx.entry["tensors"].as_array().unwrap() {
            let t = cat.get(w["name"].as_str().unwrap()).unwrap();
            let attr = |k: &str| t.attributes.iter().find(|(n, _)| n == k).map(|(_, v)| meta_json(v));
            for k in ["stored_dtype", "layout", "chunks", "maxshape", "filters", "attributes"] {
                assert_same(attr(k), w.get(k), &format!("{} / {}: {k}", fx.file(), t.name));
            }
        }
        // Root attributes are the metadata; group attributes are `<group>/<name>`.
        let meta = |k: &str| cat.metadata.iter().find(|(n, _)| n == k).map(|(_, v)| meta_json(v));
        for (k, v) in fx.entry["attributes"].as_object().into_iter().flatten() {
            assert_same(meta(k), Some(v), &format!("{}: root attribute {k}", fx.file()));
        }
        for (g, attrs) in fx.entry["group_attributes"].as_object().into_iter().flatten() {
            for (k, v) in attrs.as_object().unwrap() {
                assert_same(
                    meta(&format!("{g}/{k}")),
                    Some(v),
                    &format!("{}: {g} attribute {k}", fx.file()),
                );
            }
        }
        // Opening reads no tensor data: the catalog is the same through the generic entry point.
        assert_eq!(formats::open(&bytes[..]).unwrap(), cat);
    }
}

// ---------------------------------------------------------------------------------------------
// A tiny HDF5 writer for hand-built (valid and hostile) files: superblock v0, 8-byte offsets and
// lengths, version-1 object headers, link messages in the root group.

const UNDEF: u64 = u64::MAX;

struct H5 {
    buf: Vec<u8>,
}

/// Message type numbers.
const DATASPACE: u16 = 1;
const DATATYPE: u16 = 3;
const LINK: u16 = 6;
const LAYOUT: u16 = 8;
const FILTERS: u16 = 11;
const CONTINUATION: u16 = 0x10;
const SYMBOL_TABLE: u16 = 0x11;

impl H5 {
    fn new() -> H5 {
        let mut b = b"\x89HDF\r\n\x1a\n".to_vec();
        b.extend([0, 0, 0, 0, 0, 8, 8, 0]);
        b.extend(4u16.to_le_bytes());
        b.extend(16u16.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        for a in [0, UNDEF, 0, UNDEF] {
            b.extend(u64::to_le_bytes(a));
        }
        b.extend(0u64.to_le_bytes()); // root link name offset
        b.extend(0u64.to_le_bytes()); // root object header (patched)
        b.extend([0u8; 24]);
        assert_eq!(b.len(), 96);
        H5 { buf: b }
    }

    /// Appends `bytes` at an 8-byte boundary; returns their address.
    fn put(&mut self, bytes: &[u8]) -> u64 {
        while !self.buf.len().is_multiple_of(8) {
            self.buf.push(0);
        }
        let at = self.buf.len() as u64;
        self.buf.extend_from_slice(bytes);
        at
    }

    /// Appends a version-1 object header with `msgs`; returns its address.
    fn object(&mut self, msgs: &[(u16, Vec<u8>)]) -> u64 {
        self.put(&object_v1(msgs))
    }

    /// Sets the root group and the end-of-file address; returns the file.
    fn finish(mut self, root: u64) -> Vec<u8> {
        self.buf[64..72].copy_from_slice(&root.to_le_bytes());
        let eof = self.buf.len() as u64;
        self.buf[40..48].copy_from_slice(&eof.to_le_bytes());
        self.buf
    }
}

fn messages(msgs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (t, data) in msgs {
        let mut d = data.clone();
        d.resize(d.len().div_ceil(8) * 8, 0);
        b.extend(t.to_le_bytes());
        b.extend((d.len() as u16).to_le_bytes());
        b.extend([0u8; 4]);
        b.extend(d);
    }
    b
}

fn object_v1(msgs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let body = messages(msgs);
    let mut b = vec![1, 0];
    b.extend((msgs.len() as u16).to_le_bytes());
    b.extend(1u32.to_le_bytes());
    b.extend((body.len() as u32).to_le_bytes());
    b.extend([0u8; 4]);
    b.extend(body);
    b
}

fn dataspace(dims: &[u64]) -> Vec<u8> {
    let mut b = vec![1, dims.len() as u8, 0, 0, 0, 0, 0, 0];
    for d in dims {
        b.extend(d.to_le_bytes());
    }
    b
}

fn int32() -> Vec<u8> {
    let mut b = vec![0x10, 0x08, 0, 0];
    b.extend(4u32.to_le_bytes());
    b.extend(0u16.to_le_bytes());
    b.extend(32u16.to_le_bytes());
    b
}

fn contiguous(addr: u64, size: u64) -> Vec<u8> {
    let mut b = vec![3, 1];
    b.extend(addr.to_le_bytes());
    b.extend(size.to_le_bytes());
    b
}

fn chunked(btree: u64, chunk: &[u32]) -> Vec<u8> {
    let mut b = vec![3, 2, chunk.len() as u8 + 1];
    b.extend(btree.to_le_bytes());
    for d in chunk {
        b.extend(d.to_le_bytes());
    }
    b.extend(4u32.to_le_bytes());
    b
}

fn filters(ids: &[u16]) -> Vec<u8> {
    let mut b = vec![2, ids.len() as u8];
    for &id in ids {
        b.extend(id.to_le_bytes());
        if id >= 256 {
            b.extend(0u16.to_le_bytes());
        }
        b.extend(0u16.to_le_bytes());
        let params: &[u32] = if id == 2 { &[4] } else { &[] };
        b.extend((params.len() as u16).to_le_bytes());
        for p in params {
            b.extend(p.to_le_bytes());
        }
    }
    b
}

fn link(name: &str, addr: u64) -> Vec<u8> {
    let mut b = vec![1, 0, name.len() as u8];
    b.extend(name.as_bytes());
    b.extend(addr.to_le_bytes());
    b
}

/// A leaf v1 B-tree chunk node: `(element offsets, stored size, address)` per chunk.
fn chunk_node(rank: usize, chunks: &[(Vec<u64>, u32, u64)]) -> Vec<u8> {
    let mut b = b"TREE".to_vec();
    b.extend([1, 0]);
    b.extend((chunks.len() as u16).to_le_bytes());
    b.extend(UNDEF.to_le_bytes());
    b.extend(UNDEF.to_le_bytes());
    let key = |b: &mut Vec<u8>, size: u32, offs: &[u64]| {
        b.extend(size.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        for o in offs {
            b.extend(o.to_le_bytes());
        }
        b.extend(0u64.to_le_bytes());
    };
    for (offs, size, addr) in chunks {
        key(&mut b, *size, offs);
        b.extend(addr.to_le_bytes());
    }
    key(&mut b, 0, &vec![u64::MAX / 2; rank]);
    b
}

/// A file whose root group links `name` to a dataset with the given messages.
fn one_dataset(h: &mut H5, name: &str, msgs: &[(u16, Vec<u8>)]) -> u64 {
    let ds = h.object(msgs);
    h.object(&[(LINK, link(name, ds))])
}

fn open_err(bytes: &[u8]) -> formats::FormatError {
    hdf5::open(bytes).expect_err("must be refused")
}

fn read_err(bytes: &[u8], name: &str) -> formats::FormatError {
    let cat = hdf5::open(bytes).unwrap_or_else(|e| panic!("open: {e}"));
    let t = cat.get(name).unwrap();
    formats::read("hdf5", t, &[bytes]).expect_err("the read must be refused")
}

fn zlib(data: &[u8]) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec_zlib(data, 6)
}

#[test]
fn hand_built_file_reads() {
    let mut h = H5::new();
    let data: Vec<u8> = (0..12i32).flat_map(|v| v.to_le_bytes()).collect();
    let at = h.put(&data);
    let root = one_dataset(
        &mut h,
        "x",
        &[
            (DATASPACE, dataspace(&[3, 4])),
            (DATATYPE, int32()),
            (LAYOUT, contiguous(at, 48)),
        ],
    );
    let f = h.finish(root);
    let cat = open(&f);
    assert_eq!(cat.tensors.len(), 1);
    assert_eq!(cat.tensors[0].shape, [3, 4]);
    assert_eq!(
        &formats::read("hdf5", &cat.tensors[0], &[&f[..]]).unwrap()[..],
        &data[..]
    );
}

#[test]
fn attack_continuation_cycle() {
    let mut h = H5::new();
    // The root header's continuation message points at its own message block.
    let root = h.put(&[]);
    let cont = |addr: u64| {
        let mut d = addr.to_le_bytes().to_vec();
        d.extend(24u64.to_le_bytes());
        d
    };
    let obj = object_v1(&[(CONTINUATION, cont(root + 16))]);
    h.put(&obj);
    let e = open_err(&h.finish(root));
    assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
    assert!(e.message.contains("cycle"), "{e}");
}

#[test]
fn attack_btree_cycle() {
    let mut h = H5::new();
    let mut heap_data = vec![0u8; 8];
    heap_data.extend(b"x\0\0\0\0\0\0\0");
    let data_at = h.put(&heap_data);
    let mut heap = b"HEAP".to_vec();
    heap.extend([0, 0, 0, 0]);
    heap.extend((heap_data.len() as u64).to_le_bytes());
    heap.extend(UNDEF.to_le_bytes());
    heap.extend(data_at.to_le_bytes());
    let heap_at = h.put(&heap);
    // A level-1 group node whose only child is itself.
    let node_at = h.put(&[]);
    let mut node = b"TREE".to_vec();
    node.extend([0, 1]);
    node.extend(1u16.to_le_bytes());
    node.extend(UNDEF.to_le_bytes());
    node.extend(UNDEF.to_le_bytes());
    node.extend(0u64.to_le_bytes());
    node.extend(node_at.to_le_bytes());
    node.extend(8u64.to_le_bytes());
    h.put(&node);
    let mut st = node_at.to_le_bytes().to_vec();
    st.extend(heap_at.to_le_bytes());
    let root = h.object(&[(SYMBOL_TABLE, st)]);
    let e = open_err(&h.finish(root));
    assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
    assert!(e.message.contains("cycle"), "{e}");
}

#[test]
fn attack_chunk_size_over_limit() {
    // Four int32 elements in chunks of 2^30 elements (4 GiB each): refused before allocating.
    let mut h = H5::new();
    let root = one_dataset(
        &mut h,
        "x",
        &[
            (DATASPACE, dataspace(&[4])),
            (DATATYPE, int32()),
            (LAYOUT, chunked(0, &[1 << 30])),
        ],
    );
    let e = read_err(&h.finish(root), "x");
    assert_eq!(e.kind, ErrorKind::Limit, "{e}");
}

#[test]
fn attack_deflate_bomb() {
    // A 64-byte chunk whose deflate stream inflates to 16 MiB: stopped at the chunk's size.
    let mut h = H5::new();
    let bomb = zlib(&vec![0u8; 16 << 20]);
    let chunk_at = h.put(&bomb);
    let node = h.put(&chunk_node(1, &[(vec![0], bomb.len() as u32, chunk_at)]));
    let root = one_dataset(
        &mut h,
        "x",
        &[
            (DATASPACE, dataspace(&[16])),
            (DATATYPE, int32()),
            (FILTERS, filters(&[1])),
            (LAYOUT, chunked(node, &[16])),
        ],
    );
    let e = read_err(&h.finish(root), "x");
    assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
    assert!(e.message.contains("inflates past"), "{e}");
}

#[test]
fn attack_dataspace_dims_overflow() {
    let mut h = H5::new();
    let root = one_dataset(
        &mut h,
        "x",
        &[
            (DATASPACE, dataspace(&[1 << 40, 1 << 40])),
            (DATATYPE, int32()),
            (LAYOUT, contiguous(0, 0)),
        ],
    );
    let e = open_err(&h.finish(root));
    assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Overflow, Some("x")), "{e}");
}

#[test]
fn attack_contiguous_past_eof() {
    let mut h = H5::new();
    let root = one_dataset(
        &mut h,
        "x",
        &[
            (DATASPACE, dataspace(&[1 << 20])),
            (DATATYPE, int32()),
            (LAYOUT, contiguous(96, 4 << 20)),
        ],
    );
    assert_eq!(open_err(&h.finish(root)).kind, ErrorKind::OutOfBounds);
}

#[test]
fn attack_superblock_points_past_eof() {
    let h = H5::new();
    let e = open_err(&h.finish(1 << 40));
    assert_eq!(e.kind, ErrorKind::OutOfBounds, "{e}");
    // An end-of-file address past the file: a truncated file.
    let mut f = H5::new().finish(96);
    f[40..48].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert_eq!(open_err(&f).kind, ErrorKind::Truncated);
}

#[test]
fn attack_unknown_filter_is_refused_by_name_and_id() {
    for (id, name) in [
        (32000u16, "lzf"),
        (4, "szip"),
        (32001, "blosc"),
        (40000, "unregistered"),
    ] {
        let mut h = H5::new();
        let root = one_dataset(
            &mut h,
            "x",
            &[
                (DATASPACE, dataspace(&[4])),
                (DATATYPE, int32()),
                (FILTERS, filters(&[id])),
                (LAYOUT, chunked(UNDEF, &[4])),
            ],
        );
        let e = open_err(&h.finish(root));
        assert_eq!(
            (e.kind, e.tensor.as_deref()),
            (ErrorKind::Unsupported, Some("x")),
            "{e}"
        );
        assert!(
            e.message.contains(name) && e.message.contains(&format!("id {id}")),
            "{e}"
        );
    }
}

#[test]
fn attack_fletcher32_mismatch() {
    let mut h = H5::new();
    let mut chunk: Vec<u8> = (0..4i32).flat_map(|v| v.to_le_bytes()).collect();
    chunk.extend(0xdead_beefu32.to_le_bytes());
    let at = h.put(&chunk);
    let node = h.put(&chunk_node(1, &[(vec![0], chunk.len() as u32, at)]));
    let root = one_dataset(
        &mut h,
        "x",
        &[
            (DATASPACE, dataspace(&[4])),
            (DATATYPE, int32()),
            (FILTERS, filters(&[3])),
            (LAYOUT, chunked(node, &[4])),
        ],
    );
    assert_eq!(read_err(&h.finish(root), "x").kind, ErrorKind::Checksum);
}

#[test]
fn attack_superblock_v2_checksum() {
    let fxs = fixtures(&["hdf5"]);
    let fx = fxs.iter().find(|f| f.file() == "hdf5/libver-latest.h5").unwrap();
    let mut b = fx.bytes();
    b[20] ^= 1; // inside the v3 superblock's addresses
    assert_eq!(open_err(&b).kind, ErrorKind::Checksum);
}

#[test]
fn attack_deep_groups() {
    // 100 groups, each linking the next: refused past MAX_DEPTH.
    let mut h = H5::new();
    let mut next = h.object(&[
        (DATASPACE, dataspace(&[0])),
        (DATATYPE, int32()),
        (LAYOUT, contiguous(UNDEF, 0)),
    ]);
    for _ in 0..100 {
        next = h.object(&[(LINK, link("g", next))]);
    }
    assert_eq!(open_err(&h.finish(next)).kind, ErrorKind::Limit);
}

#[test]
fn attack_hard_link_cycle_is_listed_once() {
    // The root links to itself: the walk lists it as skipped and stops.
    let mut h = H5::new();
    let root = h.put(&[]);
    h.put(&object_v1(&[(LINK, link("again", root))]));
    let cat = open(&h.finish(root));
    assert!(cat.tensors.is_empty());
    assert_eq!(cat.skipped.len(), 1);
    assert_eq!(cat.skipped[0].0, "again");
}

#[test]
fn attack_header_size_over_limit() {
    let mut h = H5::new();
    let root = h.put(&[]);
    let mut obj = object_v1(&[]);
    obj[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    h.put(&obj);
    assert_eq!(open_err(&h.finish(root)).kind, ErrorKind::HeaderTooLarge);
}

/// Shuffles bytes as HDF5's shuffle filter does (byte `j` of every element together).
fn shuffle(data: &[u8], es: usize) -> Vec<u8> {
    let n = data.len() / es;
    let mut out = data.to_vec();
    for j in 0..es {
        for k in 0..n {
            out[j * n + k] = data[k * es + j];
        }
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Hand-built chunked int32 datasets (random shape, chunk shape, filters, missing chunks)
    /// read back as the data they were built from.
    #[test]
    fn chunked_round_trip(
        dims in proptest::collection::vec(1u64..6, 1..4),
        chunk_seed in proptest::collection::vec(1u32..7, 3),
        gzip in proptest::bool::ANY,
        shuf in proptest::bool::ANY,
        drop in proptest::collection::vec(proptest::bool::ANY, 64),
    ) {
        let rank = dims.len();
        let chunk: Vec<u64> = (0..rank).map(|d| chunk_seed[d] as u64).collect();
        let n: u64 = dims.iter().product();
        let data: Vec<i32> = (0..n as i32).map(|v| v * 7 - 50).collect();
        let mut want = vec![0i32; n as usize];
        let grid: Vec<u64> = dims.iter().zip(&chunk).map(|(d, c)| d.div_ceil(*c)).collect();
        let mut h = H5::new();
        let mut entries = Vec::new();
        let ids: Vec<u16> = [(shuf, 2u16), (gzip, 1)].iter().filter(|(on, _)| *on).map(|(_, id)| *id).collect();
        let total: u64 = grid.iter().product();
        for (i, keep) in (0..total).zip(drop.iter().cycle()) {
            if !keep { continue; }
            // Chunk coordinates, row major.
            let mut rest = i;
            let mut at = vec![0u64; rank];
            for d in (0..rank).rev() { at[d] = rest % grid[d] * chunk[d]; rest /= grid[d]; }
            let mut bytes = Vec::new();
            let celems: u64 = chunk.iter().product();
            for e in 0..celems {
                let mut rest = e;
                let mut idx = vec![0u64; rank];
                for d in (0..rank).rev() { idx[d] = at[d] + rest % chunk[d]; rest /= chunk[d]; }
                let inside = idx.iter().zip(&dims).all(|(i, d)| i < d);
                let lin = idx.iter().zip(&dims).fold(0u64, |a, (i, d)| a * d + i);
                let v = if inside { data[lin as usize] } else { -1 };
                if inside { want[lin as usize] = v; }
                bytes.extend(v.to_le_bytes());
            }
            if shuf { bytes = shuffle(&bytes, 4); }
            if gzip { bytes = zlib(&bytes); }
            let addr = h.put(&bytes);
            entries.push((at, bytes.len() as u32, addr));
        }
        let node = h.put(&chunk_node(rank, &entries));
        let cd: Vec<u32> = chunk.iter().map(|&c| c as u32).collect();
        let mut msgs = vec![(DATASPACE, dataspace(&dims)), (DATATYPE, int32()), (LAYOUT, chunked(node, &cd))];
        if !ids.is_empty() { msgs.push((FILTERS, filters(&ids))); }
        let root = one_dataset(&mut h, "x", &msgs);
        let f = h.finish(root);
        let cat = open(&f);
        let got = formats::read("hdf5", &cat.tensors[0], &[&f[..]]).unwrap();
        let want: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
        proptest::prop_assert_eq!(&got[..], &want[..]);
    }

    /// Mutated fixtures (bytes changed, the file cut short) never panic, hang or over-allocate:
    /// opening and reading every tensor either works or returns an error.
    #[test]
    fn mutated_fixtures_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..8),
        cut in proptest::option::of(proptest::num::usize::ANY),
    ) {
        let fxs = fixtures(&["hdf5"]);
        let mut b = fxs[which % fxs.len()].bytes();
        for (at, v) in edits {
            let n = b.len();
            b[at % n] = v;
        }
        if let Some(c) = cut {
            let n = b.len();
            b.truncate(c % n);
        }
        if let Ok(cat) = hdf5::open(&b[..]) {
            for t in &cat.tensors {
                let _ = formats::read("hdf5", t, &[&b[..]]);
            }
        }
    }
}
