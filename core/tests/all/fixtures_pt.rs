//! PyTorch checkpoints: every `pt` fixture of the fixture manifest (written by torch 2.x, or
//! hand-built hostile files), named attacks built byte by byte, and property tests.
//!
//! torch itself is too large to install for a live cross-check; the fixtures are the proof
//! against real data (each was read back with `torch.load(weights_only=True)` when it was made).

use crate::common;

use std::io::Write;

use common::{attr, meta_json};

use proptest::prelude::*;
use tensorlane_core::detect::Format;
use tensorlane_core::formats::{self, Catalog, ErrorKind, FormatError, Meta, Storage, pt};

fn open(bytes: &[u8]) -> Result<Catalog, FormatError> {
    pt::open(bytes)
}

/// The hostile fixtures and the error each must get.
const REJECT: &[(&str, ErrorKind)] = &[
    ("pt/malicious-os-system.pt", ErrorKind::Refused),
    ("pt/malicious-os-system.legacy.pt", ErrorKind::Refused),
    ("pt/view-out-of-bounds.pt", ErrorKind::OutOfBounds),
];

#[test]
fn every_pt_fixture() {
    let fixtures = common::fixtures(&["pt"]);
    let mut read = 0;
    let mut rejected = 0;
    for fx in &fixtures {
        let bytes = fx.bytes();
        match fx.expect() {
            "read" => {
                let cat = open(&bytes).unwrap_or_else(|e| panic!("{}: {e}", fx.file()));
                // Detection by content routes the file to the same reader.
                let detected = formats::open(&bytes[..]).unwrap_or_else(|e| panic!("{}: {e}", fx.file()));
                assert_eq!(detected, cat, "{}", fx.file());
                let variant = fx.entry["variant"].as_str().unwrap();
                let want_format = if variant == "zip" {
                    Format::PyTorch
                } else {
                    Format::PyTorchLegacy
                };
                assert_eq!(cat.format, want_format, "{}", fx.file());
                common::check_catalog(fx, &cat, &[&bytes[..]]);
                check_attributes(fx, &cat, variant);
                if let Some(values) = fx.entry.get("non_tensor_values") {
                    let got = cat
                        .metadata
                        .iter()
                        .find(|(k, _)| k == "non_tensor_values")
                        .map(|(_, v)| meta_json(v));
                    assert_eq!(got.as_ref(), Some(values), "{}: non_tensor_values", fx.file());
                    for k in values.as_object().unwrap().keys() {
                        assert!(
                            cat.skipped.iter().any(|(n, _)| n == k),
                            "{}: {k} not skipped",
                            fx.file()
                        );
                    }
                }
                read += 1;
            }
            "reject" => {
                let want = common::expected_refusal(REJECT, fx);
                let e = open(&bytes).expect_err(fx.file());
                assert_eq!(e.kind, want, "{}: {e}", fx.file());
                if want == ErrorKind::Refused {
                    for g in fx.entry["pickle_globals"].as_array().unwrap() {
                        assert!(e.message.contains(g.as_str().unwrap()), "{}: {e}", fx.file());
                    }
                }
                rejected += 1;
            }
            other => panic!("{}: unexpected expect {other}", fx.file()),
        }
    }
    assert_eq!((read, rejected), (16, 3));
}

/// The manifest's torch attributes, compared one by one.
fn check_attributes(fx: &common::Fixture, cat: &Catalog, variant: &str) {
    for (t, w) in cat.tensors.iter().zip(fx.entry["tensors"].as_array().unwrap()) {
        let what = format!("{} / {}", fx.file(), t.name);
        for k in [
            "torch_dtype",
            "stride",
            "storage_offset",
            "contiguous",
            "storage_nbytes",
        ] {
            assert_eq!(attr(t, k).map(meta_json).as_ref(), Some(&w[k]), "{what}: {k}");
        }
        let param = attr(t, "parameter")
            .map(meta_json)
            .unwrap_or(serde_json::Value::Bool(false));
        assert_eq!(
            param,
            w.get("parameter").cloned().unwrap_or(serde_json::Value::Bool(false)),
            "{what}: parameter"
        );
        let shares = attr(t, "shares_storage_with").map(meta_json);
        if w["storage_nbytes"] == 0 {
            // The manifest pairs the empty tensors of scalar-empty because torch reports a null
            // data_ptr() for every empty storage; the file stores them as distinct storages
            // ('2' and '3' in the zip), which share no bytes.
            assert_eq!(shares, None, "{what}: shares_storage_with");
        } else {
            assert_eq!(
                shares.as_ref(),
                w.get("shares_storage_with"),
                "{what}: shares_storage_with"
            );
        }
        assert_eq!(attr(t, "variant"), Some(&Meta::Str(variant.into())), "{what}");
        // Contiguous tensors are plain ranges (zero-copy), even at an offset.
        assert_eq!(t.is_zero_copy(), w["contiguous"] == true, "{what}: zero-copy");
    }
}

#[test]
fn zip_and_legacy_give_the_same_tensors() {
    let fixtures = common::fixtures(&["pt"]);
    for fx in fixtures
        .iter()
        .filter(|f| f.file().ends_with(".legacy.pt") && f.expect() == "read")
    {
        let zip_name = fx.file().replace(".legacy.pt", ".pt");
        let zfx = fixtures.iter().find(|f| f.file() == zip_name).unwrap();
        let (lb, zb) = (fx.bytes(), zfx.bytes());
        let (l, z) = (open(&lb).unwrap(), open(&zb).unwrap());
        assert_eq!(l.tensors.len(), z.tensors.len());
        for (a, b) in l.tensors.iter().zip(&z.tensors) {
            assert_eq!((&a.name, a.ty, &a.shape), (&b.name, b.ty, &b.shape));
            let ra = formats::read("pt", a, &[&lb[..]]).unwrap();
            let rb = formats::read("pt", b, &[&zb[..]]).unwrap();
            assert_eq!(ra, rb, "{}: {}", fx.file(), a.name);
        }
    }
}

#[test]
fn parameters_are_kept() {
    let fixtures = common::fixtures(&["pt"]);
    let fx = fixtures.iter().find(|f| f.file() == "pt/parameters.pt").unwrap();
    let cat = open(&fx.bytes()).unwrap();
    let w = cat.get("weight").unwrap();
    assert_eq!(attr(w, "parameter"), Some(&Meta::Bool(true)));
    assert_eq!(attr(w, "requires_grad"), Some(&Meta::Bool(true)));
    assert_eq!(
        attr(cat.get("frozen").unwrap(), "requires_grad"),
        Some(&Meta::Bool(false))
    );
    assert_eq!(attr(cat.get("plain").unwrap(), "parameter"), None);
}

#[test]
fn state_dict_metadata_is_kept() {
    let fixtures = common::fixtures(&["pt"]);
    let fx = fixtures.iter().find(|f| f.file() == "pt/mlp-state-dict.pt").unwrap();
    let cat = open(&fx.bytes()).unwrap();
    let state = &cat.metadata.iter().find(|(k, _)| k == "container_state").unwrap().1;
    let j = meta_json(state);
    assert_eq!(j[""]["_metadata"]["bn"]["version"], 2, "{j}");
}

// ---------------------------------------------------------------------------------------------
// Hand-built checkpoints.

/// A stored zip archive of `members` (name, bytes), as `torch.save` lays it out (no alignment
/// padding: this reader does not need it).
fn zip_archive(members: &[(&str, &[u8], bool)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data, deflate) in members {
        let at = out.len() as u32;
        let crc = crc32(data);
        let body = if *deflate { miniz_deflate(data) } else { data.to_vec() };
        let method: u16 = if *deflate { 8 } else { 0 };
        let mut lh = Vec::new();
        lh.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        lh.extend_from_slice(&[20, 0, 0, 0]);
        lh.extend_from_slice(&method.to_le_bytes());
        lh.extend_from_slice(&[0; 4]);
        lh.extend_from_slice(&crc.to_le_bytes());
        lh.extend_from_slice(&(body.len() as u32).to_le_bytes());
        lh.extend_from_slice(&(data.len() as u32).to_le_bytes());
        lh.extend_from_slice(&(name.len() as u16).to_le_bytes());
        lh.extend_from_slice(&0u16.to_le_bytes());
        lh.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&lh);
        out.extend_from_slice(&body);
        let mut ch = Vec::new();
        ch.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        ch.extend_from_slice(&[20, 0, 20, 0, 0, 0]);
        ch.extend_from_slice(&method.to_le_bytes());
        ch.extend_from_slice(&[0; 4]);
        ch.extend_from_slice(&crc.to_le_bytes());
        ch.extend_from_slice(&(body.len() as u32).to_le_bytes());
        ch.extend_from_slice(&(data.len() as u32).to_le_bytes());
        ch.extend_from_slice(&(name.len() as u16).to_le_bytes());
        ch.extend_from_slice(&[0; 12]);
        ch.extend_from_slice(&at.to_le_bytes());
        ch.extend_from_slice(name.as_bytes());
        central.extend_from_slice(&ch);
    }
    let cd_at = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let n = members.len() as u16;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_at.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xedb8_8320 } else { c >> 1 };
        }
    }
    !c
}

fn miniz_deflate(data: &[u8]) -> Vec<u8> {
    // A stored deflate block: valid raw deflate without a compressor.
    let mut out = vec![1u8];
    out.extend_from_slice(&(data.len() as u16).to_le_bytes());
    out.extend_from_slice(&(!(data.len() as u16)).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// Pickle opcodes, written by hand.
#[derive(Default)]
struct P(Vec<u8>);

impl P {
    fn op(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn s(mut self, s: &str) -> Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn global(mut self, m: &str, n: &str) -> Self {
        write!(self.0, "c{m}\n{n}\n").unwrap();
        self
    }
    fn int(mut self, i: i64) -> Self {
        self.0.push(0x8a);
        self.0.push(8);
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    fn ints(mut self, v: &[i64]) -> Self {
        self.0.push(b'(');
        for &i in v {
            self = self.int(i);
        }
        self.0.push(b't');
        self
    }
    /// `_rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu', numel), offset, size, stride, False, OrderedDict())`.
    fn tensor(self, key: &str, numel: i64, offset: i64, size: &[i64], stride: &[i64]) -> Self {
        self.global("torch._utils", "_rebuild_tensor_v2")
            .op(b"((")
            .s("storage")
            .global("torch", "FloatStorage")
            .s(key)
            .s("cpu")
            .int(numel)
            .op(b"tQ")
            .int(offset)
            .ints(size)
            .ints(stride)
            .op(&[0x89])
            .global("collections", "OrderedDict")
            .op(b")RtR")
    }
    fn done(self) -> Vec<u8> {
        let mut v = vec![0x80, 2];
        v.extend_from_slice(&self.0);
        v.push(b'.');
        v
    }
}

fn floats(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

fn checkpoint(pickle: &[u8], storages: &[(&str, &[u8])]) -> Vec<u8> {
    let names: Vec<String> = storages.iter().map(|(k, _)| format!("archive/data/{k}")).collect();
    let mut members: Vec<(&str, &[u8], bool)> = vec![
        ("archive/data.pkl", pickle, false),
        ("archive/byteorder", b"little", false),
    ];
    for (n, (_, d)) in names.iter().zip(storages) {
        members.push((n, d, false));
    }
    zip_archive(&members)
}

fn one_tensor(size: &[i64], stride: &[i64], offset: i64, numel: i64) -> Vec<u8> {
    P::default()
        .op(b"}")
        .s("w")
        .tensor("0", numel, offset, size, stride)
        .op(b"s")
        .done()
}

#[test]
fn hand_built_checkpoint_reads() {
    let data = floats(12);
    // A transposed 4x3 view of a 12-element storage, and a contiguous slice at offset 4.
    let pk = P::default()
        .op(b"}(")
        .s("t")
        .tensor("0", 12, 0, &[4, 3], &[1, 4])
        .s("s")
        .tensor("0", 12, 4, &[2, 2], &[2, 1])
        .op(b"u")
        .done();
    let file = checkpoint(&pk, &[("0", &data)]);
    let cat = open(&file).unwrap();
    let t = cat.get("t").unwrap();
    let got: Vec<f32> = formats::read("pt", t, &[&file[..]])
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, [0., 4., 8., 1., 5., 9., 2., 6., 10., 3., 7., 11.]);
    let s = cat.get("s").unwrap();
    assert!(s.is_zero_copy());
    let Storage::Range { len, .. } = s.storage else {
        panic!()
    };
    assert_eq!(len, 16);
    let got = formats::read("pt", s, &[&file[..]]).unwrap();
    assert!(
        matches!(got, std::borrow::Cow::Borrowed(_)),
        "a contiguous slice is borrowed"
    );
    assert_eq!(&got[..], &data[16..32]);
    assert_eq!(
        attr(s, "shares_storage_with"),
        Some(&Meta::List(vec![Meta::Str("t".into())]))
    );
}

#[test]
fn big_endian_archive() {
    let data: Vec<u8> = (0..4).flat_map(|i| (i as f32).to_be_bytes()).collect();
    let pk = one_tensor(&[4], &[1], 0, 4);
    let file = zip_archive(&[
        ("a/data.pkl", &pk, false),
        ("a/byteorder", b"big", false),
        ("a/data/0", &data, false),
    ]);
    let cat = open(&file).unwrap();
    let got = formats::read("pt", &cat.tensors[0], &[&file[..]]).unwrap();
    assert_eq!(&got[..], &floats(4)[..]);
}

// ---------------------------------------------------------------------------------------------
// Attacks: one hostile input per known trick, each with the error it must get.

fn refused_with(pk: Vec<u8>, name: &str) {
    let file = checkpoint(&pk, &[]);
    let e = open(&file).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused, "{name}: {e}");
    assert!(e.message.contains(name), "{name}: {e}");
    // The same pickle as a legacy file (its first pickle).
    let e = open(&pk).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Refused, "{name} (legacy): {e}");
    assert!(e.message.contains(name), "{name}: {e}");
}

#[test]
fn attack_os_system() {
    refused_with(
        P::default()
            .global("os", "system")
            .s("echo pwned")
            .op(&[0x85, b'R'])
            .done(),
        "os.system",
    );
    refused_with(
        P::default().global("posix", "system").s("id").op(&[0x85, b'R']).done(),
        "posix.system",
    );
    refused_with(
        P::default().global("nt", "system").s("id").op(&[0x85, b'R']).done(),
        "nt.system",
    );
}

#[test]
fn attack_builtins_eval_exec() {
    refused_with(
        P::default()
            .global("builtins", "eval")
            .s("1+1")
            .op(&[0x85, b'R'])
            .done(),
        "builtins.eval",
    );
    refused_with(
        P::default()
            .global("builtins", "exec")
            .s("import os")
            .op(&[0x85, b'R'])
            .done(),
        "builtins.exec",
    );
    refused_with(
        P::default()
            .global("__builtin__", "eval")
            .s("1")
            .op(&[0x85, b'R'])
            .done(),
        "__builtin__.eval",
    );
}

#[test]
fn attack_subprocess_and_torch_load() {
    refused_with(
        P::default()
            .global("subprocess", "Popen")
            .s("sh")
            .op(&[0x85, b'R'])
            .done(),
        "subprocess.Popen",
    );
    refused_with(
        P::default().global("torch", "load").s("x.pt").op(&[0x85, b'R']).done(),
        "torch.load",
    );
}

#[test]
fn attack_getattr_chain() {
    // getattr(__import__('os'), 'system')('id'): refused at the first global, before any call.
    let pk = P::default()
        .global("builtins", "getattr")
        .global("builtins", "__import__")
        .s("os")
        .op(&[0x85, b'R'])
        .s("system")
        .op(&[0x86, b'R'])
        .s("id")
        .op(&[0x85, b'R'])
        .done();
    refused_with(pk, "builtins.getattr");
    // Protocol 4: STACK_GLOBAL with the names on the stack.
    let mut pk = vec![0x80, 4, 0x8c, 8];
    pk.extend_from_slice(b"builtins");
    pk.extend_from_slice(&[0x8c, 7]);
    pk.extend_from_slice(b"getattr");
    pk.extend_from_slice(&[0x93, b'.']);
    refused_with(pk, "builtins.getattr");
}

#[test]
fn attack_global_hidden_in_a_tensor() {
    // The storage type of a persistent id is itself a global: a non-storage one is refused.
    let pk = P::default()
        .op(b"}")
        .s("w")
        .global("torch._utils", "_rebuild_tensor_v2")
        .op(b"((")
        .s("storage")
        .global("os", "system")
        .done();
    refused_with(pk, "os.system");
}

#[test]
fn attack_copyreg_extension() {
    let file = checkpoint(&[0x80, 2, 0x82, 1, b')', b'R', b'.'], &[]);
    assert_eq!(open(&file).unwrap_err().kind, ErrorKind::Refused);
}

#[test]
fn attack_huge_memo_index() {
    // LONG_BINPUT 2^32-1 is a key, not an allocation; LONG_BINGET of an unset index is refused.
    let mut pk = vec![
        0x80, 2, b'}', b'r', 0xff, 0xff, 0xff, 0xff, b'j', 0xfe, 0xff, 0xff, 0xff, b'.',
    ];
    assert_eq!(open(&checkpoint(&pk, &[])).unwrap_err().kind, ErrorKind::Syntax);
    pk[8] = b'0';
    pk.truncate(9);
    pk.extend_from_slice(&[b'j', 0xff, 0xff, 0xff, 0xff, b'.']);
    let cat = open(&checkpoint(&pk, &[])).unwrap();
    assert!(cat.tensors.is_empty());
}

#[test]
fn attack_depth_bomb() {
    // 100 000 nested lists: [[[[...]]]] built with EMPTY_LIST then APPEND.
    let n = 100_000;
    let mut pk = vec![0x80, 2];
    pk.extend(std::iter::repeat_n(b']', n));
    pk.extend(std::iter::repeat_n(b'a', n - 1));
    pk.push(b'.');
    let e = open(&checkpoint(&pk, &[])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit, "{e}");
    // Tuples nested through MARK ... TUPLE.
    let mut pk = vec![0x80, 2];
    pk.extend(std::iter::repeat_n(b'(', n));
    pk.extend(std::iter::repeat_n(b't', n));
    pk.push(b'.');
    assert_eq!(open(&checkpoint(&pk, &[])).unwrap_err().kind, ErrorKind::Limit);
}

#[test]
fn attack_shared_container_expansion() {
    // l0 = [t, t]; l1 = [l0, l0]; ... 60 levels: a tree of 2^60 leaves from 60 small lists.
    let mut pk = vec![0x80, 2, b'N'];
    for _ in 0..60 {
        pk.extend_from_slice(&[b'2', 0x86]); // DUP, TUPLE2
    }
    pk.push(b'.');
    let e = open(&checkpoint(&pk, &[])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit, "{e}");
}

#[test]
fn attack_self_referencing_list() {
    let pk = vec![0x80, 2, b']', b'q', 0, b'h', 0, b'a', b'.'];
    assert_eq!(open(&checkpoint(&pk, &[])).unwrap_err().kind, ErrorKind::Limit);
}

#[test]
fn attack_binunicode8_claims_2_pow_60() {
    let mut pk = vec![0x80, 4, 0x8d];
    pk.extend_from_slice(&(1u64 << 60).to_le_bytes());
    pk.extend_from_slice(b"x.");
    let e = open(&checkpoint(&pk, &[])).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Truncated, "{e}");
    let mut pk = vec![0x80, 4, 0x8e];
    pk.extend_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(open(&checkpoint(&pk, &[])).unwrap_err().kind, ErrorKind::Truncated);
}

#[test]
fn attack_storage_missing_from_zip() {
    let file = checkpoint(&one_tensor(&[4], &[1], 0, 4), &[]);
    let e = open(&file).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Truncated, "{e}");
    assert!(e.message.contains("archive/data/0"), "{e}");
}

#[test]
fn attack_deflated_storage() {
    let pk = one_tensor(&[4], &[1], 0, 4);
    let data = floats(4);
    let file = zip_archive(&[("archive/data.pkl", &pk, false), ("archive/data/0", &data, true)]);
    let e = open(&file).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    // A deflated data.pkl is fine: it is inflated within its declared size.
    let file = zip_archive(&[("archive/data.pkl", &pk, true), ("archive/data/0", &data, false)]);
    assert_eq!(open(&file).unwrap().tensors.len(), 1);
}

#[test]
fn attack_short_storage_member() {
    let file = checkpoint(&one_tensor(&[4], &[1], 0, 4), &[("0", &floats(3))]);
    assert_eq!(open(&file).unwrap_err().kind, ErrorKind::SizeMismatch);
}

#[test]
fn attack_negative_or_overflowing_sizes() {
    let data = floats(4);
    type Case<'a> = (&'a [i64], &'a [i64], i64, i64, ErrorKind);
    let cases: &[Case] = &[
        (&[-1], &[1], 0, 4, ErrorKind::Syntax),
        (&[4], &[-1], 0, 4, ErrorKind::Syntax),
        (&[4], &[1], -2, 4, ErrorKind::Syntax),
        (&[4], &[1], 0, -4, ErrorKind::Syntax),
        (&[i64::MAX, i64::MAX], &[1, 1], 0, 4, ErrorKind::Overflow),
        (&[2, 2], &[i64::MAX, 1], 0, 4, ErrorKind::Overflow),
        (&[4], &[1], i64::MAX, 4, ErrorKind::Overflow),
        (&[4], &[1], 0, i64::MAX, ErrorKind::Overflow),
        (&[4], &[1, 1], 0, 4, ErrorKind::Syntax),
        // In range arithmetically, outside the storage.
        (&[4], &[2], 0, 4, ErrorKind::OutOfBounds),
        (&[4], &[1], 1, 4, ErrorKind::OutOfBounds),
        (&[1 << 40], &[1], 0, 4, ErrorKind::OutOfBounds),
    ];
    for (size, stride, offset, numel, kind) in cases {
        let file = checkpoint(&one_tensor(size, stride, *offset, *numel), &[("0", &data)]);
        let e = open(&file).unwrap_err();
        assert_eq!(
            e.kind, *kind,
            "size {size:?} stride {stride:?} offset {offset} numel {numel}: {e}"
        );
    }
}

#[test]
fn attack_duplicate_names() {
    // {'a.b': t, 'a': {'b': t}} joins two entries to one name.
    let pk = P::default()
        .op(b"}(")
        .s("a.b")
        .tensor("0", 4, 0, &[4], &[1])
        .s("a")
        .op(b"}")
        .s("b")
        .tensor("0", 4, 0, &[4], &[1])
        .op(b"su")
        .done();
    let file = checkpoint(&pk, &[("0", &floats(4))]);
    assert_eq!(open(&file).unwrap_err().kind, ErrorKind::Duplicate);
}

#[test]
fn attack_legacy_storage_count_mismatch_and_truncation() {
    let fixtures = common::fixtures(&["pt"]);
    let fx = fixtures.iter().find(|f| f.file() == "pt/views.legacy.pt").unwrap();
    let bytes = fx.bytes();
    // The first storage's count (15) sits right after the key list pickle, at 617.
    let mut bad = bytes.clone();
    bad[617] = 16;
    assert_eq!(open(&bad).unwrap_err().kind, ErrorKind::SizeMismatch);
    let short = &bytes[..bytes.len() - 1];
    assert_eq!(open(short).unwrap_err().kind, ErrorKind::Truncated);
    assert_eq!(open(&bytes[..100]).unwrap_err().kind, ErrorKind::Truncated);
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// Opcodes (with operands) that build checkpoint-like pickles, for random streams.
const OPS: &[&[u8]] = &[
    b"}",
    b"]",
    b")",
    b"(",
    b"t",
    b"s",
    b"u",
    b"a",
    b"e",
    b"R",
    b"b",
    b"Q",
    b"N",
    b"2",
    b"0",
    b"1",
    b"K\x03",
    b"q\x00",
    b"h\x00",
    b"q\x01",
    b"h\x01",
    b"X\x01\x00\x00\x000",
    b"X\x07\x00\x00\x00storage",
    b"\x85",
    b"\x86",
    b"\x87",
    b"\x94",
    b"\x88",
    b"ctorch._utils\n_rebuild_tensor_v2\n",
    b"ctorch._utils\n_rebuild_parameter\n",
    b"ctorch\nFloatStorage\n",
    b"ccollections\nOrderedDict\n",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn random_pickles_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut pk = vec![0x80, 2];
        pk.extend_from_slice(&body);
        let _ = open(&pk);
        let _ = open(&checkpoint(&pk, &[("0", &floats(4))]));
    }

    #[test]
    fn random_opcode_streams_never_panic(ops in proptest::collection::vec(proptest::sample::select(OPS), 0..64)) {
        let mut pk = vec![0x80, 2];
        for o in ops {
            pk.extend_from_slice(o);
        }
        pk.push(b'.');
        if let Ok(cat) = open(&checkpoint(&pk, &[("0", &floats(4))])) {
            for t in &cat.tensors {
                let _ = formats::read("pt", t, &[&checkpoint(&pk, &[("0", &floats(4))])[..]]);
            }
        }
    }

    #[test]
    fn generated_views_read_like_a_strided_gather(
        (shape, stride, offset) in (proptest::collection::vec(1u64..4, 0..4), 0u64..3)
            .prop_flat_map(|(shape, offset)| {
                let n = shape.len();
                (Just(shape), proptest::collection::vec(0u64..5, n), Just(offset))
            })
    ) {
        let numel = 64i64;
        let data = floats(numel as usize);
        let size: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let st: Vec<i64> = stride.iter().map(|&d| d as i64).collect();
        let file = checkpoint(&one_tensor(&size, &st, offset as i64, numel), &[("0", &data)]);
        let mut last = offset;
        for (d, s) in shape.iter().zip(&stride) {
            last += (d - 1) * s;
        }
        match open(&file) {
            Ok(cat) => {
                prop_assert!(last < numel as u64);
                let got = formats::read("pt", &cat.tensors[0], &[&file[..]]).unwrap();
                // The expected values: element index = offset + sum(i_k * stride_k), C order.
                let n: u64 = shape.iter().product();
                let mut want = Vec::new();
                for flat in 0..n {
                    let (mut rem, mut e) = (flat, offset);
                    for k in (0..shape.len()).rev() {
                        e += (rem % shape[k]) * stride[k];
                        rem /= shape[k];
                    }
                    want.extend_from_slice(&(e as f32).to_le_bytes());
                }
                prop_assert_eq!(&got[..], &want[..]);
            }
            Err(e) => {
                prop_assert!(last >= numel as u64);
                prop_assert_eq!(e.kind, ErrorKind::OutOfBounds);
            }
        }
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let fixtures = common::fixtures(&["pt"]);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    });
    for fx in &fixtures {
        let bytes = fx.bytes();
        let len = bytes.len();
        runner
            .run(&proptest::collection::vec((0..len, any::<u8>()), 1..8), |muts| {
                let mut b = bytes.clone();
                for (i, v) in muts {
                    b[i] = v;
                }
                if let Ok(cat) = open(&b) {
                    for t in &cat.tensors {
                        let _ = formats::read("pt", t, &[&b[..]]);
                    }
                }
                // Truncations too.
                let _ = open(&b[..len / 2]);
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn legacy_storage_view_metadata() {
    // Old torch wrote views of storages: ('storage', type, root_key, location, root_numel,
    // (view_key, offset, size)). A 2-element tensor on view [3, +4) of an 8-element storage, at
    // tensor offset 1: elements 4 and 5.
    let pickle = |b: P| b.done();
    let mut file = pickle(P::default().op(&[0x8a, 10, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19]));
    file.extend(pickle(P::default().op(&[b'M', 0xe9, 0x03])));
    file.extend(pickle(P::default().op(b"}").s("little_endian").op(&[0x88, b's'])));
    let view = |key: &str, offset: i64, size: &[i64], vsize: i64| {
        P::default()
            .global("torch._utils", "_rebuild_tensor_v2")
            .op(b"((")
            .s("storage")
            .global("torch", "FloatStorage")
            .s(key)
            .s("cpu")
            .int(8)
            .op(b"(")
            .s("view")
            .int(3)
            .int(vsize)
            .op(b"ttQ")
            .int(offset)
            .ints(size)
            .ints(&[1])
            .op(&[0x89])
            .global("collections", "OrderedDict")
            .op(b")RtR")
    };
    let main = |size: i64, vsize: i64| {
        let mut b = P::default().op(b"}").s("v");
        b.0.extend(view("root", 1, &[size], vsize).0);
        pickle(b.op(b"s"))
    };
    let keys = pickle(P::default().op(b"(").s("root").op(b"l"));
    let tail = |file: &[u8], main: Vec<u8>| {
        let mut f = file.to_vec();
        f.extend(main);
        f.extend(&keys);
        f.extend(8u64.to_le_bytes());
        f.extend(floats(8));
        f
    };
    let ok = tail(&file, main(2, 4));
    let cat = open(&ok).unwrap();
    let got = formats::read("pt", &cat.tensors[0], &[&ok[..]]).unwrap();
    assert_eq!(&got[..], &floats(8)[16..24]);
    // The tensor runs past its view (3 elements from offset 1 of a 3-element view).
    assert_eq!(open(&tail(&file, main(3, 3))).unwrap_err().kind, ErrorKind::OutOfBounds);
    // The view runs past its root storage.
    assert_eq!(open(&tail(&file, main(1, 6))).unwrap_err().kind, ErrorKind::OutOfBounds);
}
