//! NumPy `.npy` / `.npz` against the fixtures in `tests/data`, hand-built attacks and property tests.
//!
//! * every `npy` and `npz` fixture of the manifest: `read` files give the manifest's tensors (names
//!   in order, dtype, shape, sha256 of the C-order little-endian bytes) and attributes; refused
//!   files are refused with the kind listed per file; no allocation while opening a fixture is
//!   larger than the file (a counting allocator watches the opening thread);
//! * one named test per known attack;
//! * proptests: generated `.npy` files (every dtype, both byte orders, C and Fortran order,
//!   versions 1–3) and `.npz` archives (stored and deflated) round-trip; random and mutated inputs
//!   never panic.

use crate::common;

use common::attr;
use common::counting::largest_alloc;
use std::borrow::Cow;

use proptest::prelude::*;
use tensorlane_core::formats::{self, Catalog, ErrorKind, FormatError, Meta, Storage, npy};

fn open_any(bytes: &[u8], npz: bool) -> Result<Catalog, FormatError> {
    if npz { npy::open_npz(bytes) } else { npy::open(bytes) }
}

/// Opens and returns the error kind, checking that opening allocated no more than the input.
fn refused(bytes: &[u8], npz: bool) -> ErrorKind {
    let (r, largest) = largest_alloc(|| open_any(bytes, npz));
    assert!(largest <= bytes.len().max(1 << 16), "a {largest}-byte allocation");
    common::refusal_kind(r)
}

fn check_attributes(fx: &common::Fixture, cat: &Catalog) {
    for (t, w) in cat.tensors.iter().zip(fx.entry["tensors"].as_array().unwrap()) {
        let what = format!("{} / {}", fx.file(), t.name);
        assert_eq!(
            attr(t, "stored_dtype"),
            Some(&Meta::Str(w["stored_dtype"].as_str().unwrap().into())),
            "{what}"
        );
        let fortran = w["fortran_order"].as_bool().unwrap();
        assert_eq!(attr(t, "fortran_order"), Some(&Meta::Bool(fortran)), "{what}");
        for k in ["header_version", "member", "zip_method"] {
            if let Some(v) = w[k].as_str() {
                assert_eq!(attr(t, k), Some(&Meta::Str(v.into())), "{what}: {k}");
            }
        }
        if let Some(o) = w["data_offset"].as_u64() {
            assert_eq!(attr(t, "data_offset"), Some(&Meta::UInt(o)), "{what}");
        }
        let stored = w["stored_dtype"].as_str().unwrap();
        let strided = fortran && t.shape.iter().filter(|&&d| d > 1).count() > 1;
        let native = !stored.starts_with('>') && !strided;
        let deflated = w["zip_method"] == "deflate";
        assert_eq!(t.is_zero_copy(), native && !deflated, "{what}: zero-copy");
        if deflated {
            assert!(matches!(t.storage, Storage::Deflate { .. }), "{what}");
        }
    }
}

/// The kind each refused fixture is refused with.
const REJECT: &[(&str, ErrorKind)] = &[
    ("npy/structured.npy", ErrorKind::Unsupported),
    ("npy/object.npy", ErrorKind::Refused),
    ("npy/hostile/truncated-data.npy", ErrorKind::Truncated),
];

#[test]
fn every_manifest_fixture() {
    let fixtures = common::fixtures(&["npy", "npz"]);
    let (mut read, mut rejected) = (0, 0);
    for fx in &fixtures {
        let bytes = fx.bytes();
        let npz = fx.entry["format"] == "npz";
        let (result, largest) = largest_alloc(|| open_any(&bytes, npz));
        assert!(
            largest <= bytes.len().max(4096),
            "{}: a {largest}-byte allocation",
            fx.file()
        );
        match fx.expect() {
            "read" => {
                let cat = result.unwrap_or_else(|e| panic!("{}: {e}", fx.file()));
                common::check_catalog(fx, &cat, &[&bytes[..]]);
                check_attributes(fx, &cat);
                assert!(cat.skipped.is_empty(), "{}: {:?}", fx.file(), cat.skipped);
                for t in cat.tensors.iter().filter(|t| t.is_zero_copy()) {
                    let b = formats::read(cat.format.name(), t, &[&bytes[..]]).unwrap();
                    assert!(matches!(b, Cow::Borrowed(_)), "{}: {}", fx.file(), t.name);
                }
                // Detected by content, and open agrees.
                assert_eq!(formats::open(&bytes[..]).unwrap(), cat, "{}", fx.file());
                read += 1;
            }
            "reject" => {
                let want = common::expected_refusal(REJECT, fx);
                let e = result.unwrap_err();
                assert_eq!(e.kind, want, "{}: {e}", fx.file());
                rejected += 1;
            }
            other => panic!("{}: unexpected expect '{other}'", fx.file()),
        }
    }
    assert_eq!(rejected, REJECT.len());
    assert!(read >= 16, "{read} read fixtures");
}

#[test]
fn refusals_name_the_reason() {
    let fixtures = common::fixtures(&["npy"]);
    for (file, words) in [
        ("npy/structured.npy", &["structured", "'x'", "'y'"][..]),
        ("npy/object.npy", &["object", "pickle"][..]),
        ("npy/hostile/truncated-data.npy", &["8000000", "truncated"][..]),
    ] {
        let fx = fixtures.iter().find(|f| f.file() == file).unwrap();
        let e = npy::open(&fx.bytes()[..]).unwrap_err();
        for w in words {
            assert!(e.to_string().contains(w), "{file}: '{w}' not in: {e}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Builders.

fn npy_file(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY".to_vec();
    v.extend_from_slice(&[version, 0]);
    let pre = if version == 1 { 10 } else { 12 };
    let mut h = dict.as_bytes().to_vec();
    // Pad with spaces so the data starts at a multiple of 64, ending with a newline.
    while !(pre + h.len() + 1).is_multiple_of(64) {
        h.push(b' ');
    }
    h.push(b'\n');
    if version == 1 {
        v.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        v.extend_from_slice(&(h.len() as u32).to_le_bytes());
    }
    v.extend_from_slice(&h);
    v.extend_from_slice(data);
    v
}

fn dict(descr: &str, fortran: bool, shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let f = if fortran { "True" } else { "False" };
    format!("{{'descr': '{descr}', 'fortran_order': {f}, 'shape': {shape}, }}")
}

/// One zip member: name, bytes (uncompressed), deflate it, and an optional lie about its size.
struct Member<'a> {
    name: &'a str,
    data: &'a [u8],
    deflate: bool,
    claimed_size: Option<u32>,
}

fn zip_file(members: &[Member]) -> Vec<u8> {
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    let mut out = Vec::new();
    let mut central = Vec::new();
    for m in members {
        let body = if m.deflate {
            miniz_oxide::deflate::compress_to_vec(m.data, 6)
        } else {
            m.data.to_vec()
        };
        let size = m.claimed_size.unwrap_or(m.data.len() as u32);
        let method: u16 = if m.deflate { 8 } else { 0 };
        let local = out.len() as u32;
        let fields = |v: &mut Vec<u8>| {
            v.extend_from_slice(&method.to_le_bytes());
            v.extend_from_slice(&[0, 0, 0, 0]); // time, date
            v.extend_from_slice(&crc.checksum(m.data).to_le_bytes());
            v.extend_from_slice(&(body.len() as u32).to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes());
            v.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes()); // extra
        };
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        out.extend_from_slice(&20u16.to_le_bytes()); // version needed
        out.extend_from_slice(&0u16.to_le_bytes()); // flags
        fields(&mut out);
        out.extend_from_slice(m.name.as_bytes());
        out.extend_from_slice(&body);
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by
        central.extend_from_slice(&20u16.to_le_bytes()); // needed
        central.extend_from_slice(&0u16.to_le_bytes()); // flags
        fields(&mut central);
        central.extend_from_slice(&[0; 10]); // comment len, disk, internal attr, external attr
        central.extend_from_slice(&local.to_le_bytes());
        central.extend_from_slice(m.name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn member<'a>(name: &'a str, data: &'a [u8], deflate: bool) -> Member<'a> {
    Member {
        name,
        data,
        deflate,
        claimed_size: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Attacks: one hand-built hostile input per known attack.

#[test]
fn attack_header_length_past_file() {
    let mut f = npy_file(1, &dict("<f4", false, &[1]), &[0; 4]);
    f[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
    assert_eq!(refused(&f, false), ErrorKind::HeaderTooLarge);
}

#[test]
fn attack_header_length_4gb() {
    let mut f = npy_file(2, &dict("<f4", false, &[1]), &[0; 4]);
    f[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(refused(&f, false), ErrorKind::HeaderTooLarge);
}

#[test]
fn attack_shape_claims_terabytes() {
    let f = npy_file(1, &dict("<f8", false, &[1 << 40]), &[0; 80]);
    assert_eq!(refused(&f, false), ErrorKind::Truncated);
}

#[test]
fn attack_shape_overflow() {
    let f = npy_file(1, &dict("<f8", false, &[1 << 32, 1 << 32]), &[]);
    assert_eq!(refused(&f, false), ErrorKind::Overflow);
    let f = npy_file(
        1,
        "{'descr': '<f8', 'fortran_order': False, 'shape': (123456789012345678901234567890,)}",
        &[],
    );
    assert_eq!(refused(&f, false), ErrorKind::Overflow);
}

#[test]
fn attack_object_array_pickle_is_never_read() {
    // A pickle that would call os.system: the reader refuses on the descr, before the payload.
    let payload = b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.";
    let f = npy_file(1, &dict("|O", false, &[1]), payload);
    assert_eq!(refused(&f, false), ErrorKind::Refused);
    let f = npy_file(3, &dict("O", false, &[1]), payload);
    assert_eq!(refused(&f, false), ErrorKind::Refused);
}

#[test]
fn attack_header_is_code_not_a_literal() {
    for d in [
        "__import__('os').system('echo pwned')",
        "{'descr': eval('1'), 'fortran_order': False, 'shape': (1,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} or 1",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [1]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}",
        "{1: '<f4'}",
        "",
    ] {
        assert_eq!(refused(&npy_file(1, d, &[0; 4]), false), ErrorKind::Syntax, "{d}");
    }
}

#[test]
fn attack_duplicate_header_keys() {
    let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'shape': (100,)}";
    assert_eq!(refused(&npy_file(1, d, &[0; 400]), false), ErrorKind::Duplicate);
}

#[test]
fn attack_deep_nesting() {
    let d = format!(
        "{{'descr': {}'<f4'{}, 'fortran_order': False, 'shape': (1,)}}",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let mut f = npy_file(2, &d, &[0; 4]);
    assert_eq!(refused(&f, false), ErrorKind::Limit);
    f.truncate(f.len() / 2);
    assert!(npy::open(&f[..]).is_err());
}

#[test]
fn attack_versions_and_magic() {
    let mut f = npy_file(1, &dict("<f4", false, &[1]), &[0; 4]);
    f[6] = 4;
    assert_eq!(refused(&f, false), ErrorKind::UnsupportedVersion);
    f[6] = 1;
    f[7] = 1;
    assert_eq!(refused(&f, false), ErrorKind::UnsupportedVersion);
    assert_eq!(refused(b"\x93NUMPY\x01", false), ErrorKind::Truncated);
    assert_eq!(refused(b"\x93NUMPY\x01\x00\x10", false), ErrorKind::Truncated);
    assert_eq!(refused(b"", false), ErrorKind::Truncated);
    assert_eq!(refused(b"\x93NUMPX\x01\x00\x00\x00", false), ErrorKind::Syntax);
}

#[test]
fn attack_latin1_and_utf8_headers() {
    // Version 3.0 headers are UTF-8: invalid UTF-8 in a string is refused; version 1.0 is latin-1.
    let mut f = npy_file(
        3,
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x\u{e9}': 1}",
        &[0; 4],
    );
    let at = f.windows(2).position(|w| w == "\u{e9}".as_bytes()).unwrap();
    f[at] = 0xff;
    assert_eq!(refused(&f, false), ErrorKind::Syntax);
}

#[test]
fn attack_refused_dtypes() {
    for d in [
        "<U10", "|S4", "|V16", "<M8[D]", "<m8[ms]", "<f16", "<c32", "<i16", "|b2",
    ] {
        assert_eq!(
            refused(&npy_file(1, &dict(d, false, &[1]), &[0; 64]), false),
            ErrorKind::Unsupported,
            "{d}"
        );
    }
    let d = "{'descr': [('a', '<f4', (2,)), ('b', [('c', '|u1')])], 'fortran_order': False, 'shape': (1,)}";
    assert_eq!(refused(&npy_file(1, d, &[0; 9]), false), ErrorKind::Unsupported);
}

#[test]
fn attack_npz_decompression_bomb() {
    // A deflated member that claims 4 GB from a few compressed bytes.
    let inner = npy_file(1, &dict("<f4", false, &[1]), &[0; 4]);
    let z = zip_file(&[Member {
        claimed_size: Some(u32::MAX),
        ..member("a.npy", &inner, true)
    }]);
    assert_eq!(refused(&z, true), ErrorKind::Limit);
    // A real 1 MiB of zeros (ratio ~1000:1) opens; the header is all that is inflated.
    let zeros = vec![0u8; 1 << 20];
    let inner = npy_file(1, &dict("|u1", false, &[1 << 20]), &zeros);
    let z = zip_file(&[member("z.npy", &inner, true)]);
    let (cat, largest) = largest_alloc(|| npy::open_npz(&z[..]).unwrap());
    assert!(largest < 64 << 10, "opening inflated {largest} bytes");
    assert_eq!(formats::read("npz", &cat.tensors[0], &[&z[..]]).unwrap().len(), 1 << 20);
}

#[test]
fn attack_npz_member_size_disagrees_with_header() {
    let inner = npy_file(1, &dict("<f4", false, &[4]), &[0; 16]);
    // The member holds extra bytes after the array; or fewer than it needs.
    for (data, deflate) in [
        ([&inner[..], &[0; 4]].concat(), false),
        ([&inner[..], &[0; 4]].concat(), true),
        (inner[..inner.len() - 4].to_vec(), false),
        (inner[..inner.len() - 4].to_vec(), true),
    ] {
        let z = zip_file(&[member("a.npy", &data, deflate)]);
        assert_eq!(refused(&z, true), ErrorKind::SizeMismatch, "deflate {deflate}");
    }
    // A deflated member that declares more than its header accounts for.
    let z = zip_file(&[Member {
        claimed_size: Some(inner.len() as u32 + 16),
        ..member("a.npy", &inner[..], true)
    }]);
    assert_eq!(refused(&z, true), ErrorKind::SizeMismatch);
}

#[test]
fn attack_npz_member_header_cut_short() {
    let inner = npy_file(1, &dict("<f4", false, &[4]), &[0; 16]);
    for deflate in [false, true] {
        let z = zip_file(&[member("a.npy", &inner[..40], deflate)]);
        assert_eq!(refused(&z, true), ErrorKind::HeaderTooLarge, "deflate {deflate}");
        let z = zip_file(&[member("a.npy", &inner[..9], deflate)]);
        assert_eq!(refused(&z, true), ErrorKind::Truncated, "deflate {deflate}");
    }
    // The stream inflates to less than the member declares, inside the header.
    let z = zip_file(&[Member {
        claimed_size: Some(inner.len() as u32),
        ..member("a.npy", &inner[..40], true)
    }]);
    assert_eq!(refused(&z, true), ErrorKind::Truncated);
}

#[test]
fn attack_npz_corrupt_deflate_stream() {
    let inner = npy_file(1, &dict("<f4", false, &[4]), &[0; 16]);
    let clean = zip_file(&[member("a.npy", &inner, true)]);
    // Garble the compressed bytes (after the 30-byte local header and the 5-byte name): opening
    // or reading refuses it, or it inflates to other bytes of the declared size; never a panic.
    for at in 35..clean.len().min(60) {
        let mut z = clean.clone();
        z[at] ^= 0xa5;
        if let Ok(cat) = npy::open_npz(&z[..])
            && let Ok(b) = formats::read("npz", &cat.tensors[0], &[&z[..]])
        {
            assert_eq!(b.len(), 16);
        }
    }
}

#[test]
fn attack_npz_duplicate_members() {
    let inner = npy_file(1, &dict("<f4", false, &[1]), &[0; 4]);
    let z = zip_file(&[member("a.npy", &inner, false), member("a.npy", &inner, true)]);
    assert_eq!(refused(&z, true), ErrorKind::Duplicate);
}

#[test]
fn attack_npz_object_member() {
    let inner = npy_file(1, &dict("|O", false, &[1]), b"\x80\x04cos\nsystem\n.");
    let z = zip_file(&[
        member("ok.npy", &npy_file(1, &dict("|u1", false, &[1]), &[1]), false),
        member("evil.npy", &inner, true),
    ]);
    let e = npy::open_npz(&z[..]).unwrap_err();
    assert_eq!((e.kind, e.tensor.as_deref()), (ErrorKind::Refused, Some("evil")));
}

#[test]
fn npz_non_npy_members_are_skipped() {
    let inner = npy_file(1, &dict("<i2", false, &[2]), &[1, 0, 2, 0]);
    let z = zip_file(&[
        member("README.txt", b"hello", false),
        member("dir/", b"", false),
        member("sub/x.npy", &inner, true),
    ]);
    let cat = npy::open_npz(&z[..]).unwrap();
    assert_eq!(cat.tensors.len(), 1);
    assert_eq!(cat.tensors[0].name, "sub/x");
    assert_eq!(
        cat.skipped.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["README.txt", "dir/"]
    );
    assert_eq!(
        &formats::read("npz", &cat.tensors[0], &[&z[..]]).unwrap()[..],
        &[1, 0, 2, 0]
    );
}

// ---------------------------------------------------------------------------------------------
// Properties.

/// (descr code, item size, lane size).
const CODES: [(&str, usize, usize); 14] = [
    ("b1", 1, 1),
    ("i1", 1, 1),
    ("i2", 2, 2),
    ("i4", 4, 4),
    ("i8", 8, 8),
    ("u1", 1, 1),
    ("u2", 2, 2),
    ("u4", 4, 4),
    ("u8", 8, 8),
    ("f2", 2, 2),
    ("f4", 4, 4),
    ("f8", 8, 8),
    ("c8", 8, 4),
    ("c16", 16, 8),
];

/// A random array: dtype index, shape, C-order little-endian bytes.
fn arrays() -> impl Strategy<Value = (usize, Vec<u64>, Vec<u8>)> {
    (0..CODES.len(), proptest::collection::vec(0u64..5, 0..4)).prop_flat_map(|(c, shape)| {
        let n = shape.iter().product::<u64>() as usize * CODES[c].1;
        (Just(c), Just(shape), proptest::collection::vec(any::<u8>(), n))
    })
}

/// Stores C-order little-endian `bytes` of `shape` as a `.npy` file in the given order.
fn encode(code: usize, shape: &[u64], bytes: &[u8], big: bool, fortran: bool, version: u8) -> Vec<u8> {
    let (c, item, lane) = CODES[code];
    let mut elems: Vec<&[u8]> = bytes.chunks(item).collect();
    if fortran {
        // Element at C index i goes to the Fortran index of the same coordinates.
        let n = elems.len();
        let mut out = vec![&[][..]; n];
        for (i, e) in elems.iter().enumerate() {
            let mut rem = i as u64;
            let mut coords = vec![0u64; shape.len()];
            for k in (0..shape.len()).rev() {
                coords[k] = rem % shape[k];
                rem /= shape[k];
            }
            let mut f = 0u64;
            for k in (0..shape.len()).rev() {
                f = f * shape[k] + coords[k];
            }
            out[f as usize] = e;
        }
        elems = out;
    }
    let mut data: Vec<u8> = elems.concat();
    if big {
        for l in data.chunks_mut(lane) {
            l.reverse();
        }
    }
    let order = if big {
        ">"
    } else if item == 1 {
        "|"
    } else {
        "<"
    };
    npy_file(version, &dict(&format!("{order}{c}"), fortran, shape), &data)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn npy_round_trips((code, shape, bytes) in arrays(), big in any::<bool>(), fortran in any::<bool>(), version in 1u8..4) {
        let f = encode(code, &shape, &bytes, big, fortran, version);
        let cat = npy::open(&f[..]).unwrap();
        let t = &cat.tensors[0];
        prop_assert_eq!(&t.shape, &shape);
        prop_assert_eq!(t.ty.itemsize(), Some(CODES[code].1));
        let got = formats::read("npy", t, &[&f[..]]).unwrap();
        prop_assert_eq!(&got[..], &bytes[..]);
        prop_assert_eq!(attr(t, "header_version"), Some(&Meta::Str(format!("{version}.0"))));
    }

    #[test]
    fn npz_round_trips(arrays in proptest::collection::vec((arrays(), any::<bool>(), any::<bool>()), 0..5)) {
        let files: Vec<(String, Vec<u8>, bool)> = arrays
            .iter()
            .enumerate()
            .map(|(i, ((code, shape, bytes), fortran, deflate))| {
                (format!("m{i}.npy"), encode(*code, shape, bytes, false, *fortran, 1), *deflate)
            })
            .collect();
        let members: Vec<Member> = files.iter().map(|(n, d, z)| member(n, d, *z)).collect();
        let z = zip_file(&members);
        let cat = npy::open_npz(&z[..]).unwrap();
        prop_assert_eq!(cat.tensors.len(), arrays.len());
        for (i, ((_, shape, bytes), _, _)) in arrays.iter().enumerate() {
            let t = &cat.tensors[i];
            prop_assert_eq!(&t.name, &format!("m{i}"));
            prop_assert_eq!(&t.shape, shape);
            prop_assert_eq!(&formats::read("npz", t, &[&z[..]]).unwrap()[..], &bytes[..]);
        }
    }

    #[test]
    fn mutated_npy_never_panics((code, shape, bytes) in arrays(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut f = encode(code, &shape, &bytes, false, true, 1);
        for (at, b) in edits {
            let n = f.len();
            f[at % n] = b;
        }
        f.truncate(f.len() - cut % 4);
        let (r, largest) = largest_alloc(|| npy::open(&f[..]));
        prop_assert!(largest <= f.len().max(4096));
        if let Ok(cat) = r {
            let _ = formats::read("npy", &cat.tensors[0], &[&f[..]]);
        }
    }

    #[test]
    fn mutated_npz_never_panics((code, shape, bytes) in arrays(), deflate in any::<bool>(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let inner = encode(code, &shape, &bytes, true, false, 2);
        let mut z = zip_file(&[member("a.npy", &inner, deflate), member("b.npy", &inner, !deflate)]);
        for (at, b) in edits {
            let n = z.len();
            z[at % n] = b;
        }
        let (r, largest) = largest_alloc(|| npy::open_npz(&z[..]));
        prop_assert!(largest <= z.len().max(1 << 16));
        if let Ok(cat) = r {
            for t in &cat.tensors {
                let _ = formats::read("npz", t, &[&z[..]]);
            }
        }
    }

    #[test]
    fn random_headers_never_panic(body in proptest::collection::vec(proptest::sample::select(b"{}()[],:' \"TrueFalsNn0123456789<>|fiubc-\\x".to_vec()), 0..120), version in 1u8..4) {
        let f = npy_file(version, std::str::from_utf8(&body).unwrap(), &[0; 64]);
        let _ = npy::open(&f[..]);
    }

    #[test]
    fn random_bytes_never_panic(f in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = npy::open(&f[..]);
        let _ = npy::open_npz(&f[..]);
        let mut g = b"\x93NUMPY\x01\x00".to_vec();
        g.extend_from_slice(&f);
        let _ = npy::open(&g[..]);
    }
}
