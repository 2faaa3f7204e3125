//! `.zt` v2 reader behaviour not covered by the corpus (spec §17.5): the COO, quant-group, MX and
//! GGUF profiles, sha256 and unknown digests, structural access, non-memory sources, read counts.

use std::cell::Cell;

use tensorlane_core::source::{ReadAt, SourceError};
use tensorlane_core::zt::cbor::{self, Value};
use tensorlane_core::zt::format::{FOOTER_LEN, Footer, MAGIC, xxh3_64};
use tensorlane_core::zt::reader::Reader;
use tensorlane_core::zt::rule::Rule;
use tensorlane_core::zt::validate::{Image, validate};
use tensorlane_core::zt::verify::compute_digest;

fn t(s: &str) -> Value<'static> {
    Value::text(s.to_string())
}
fn u(n: u64) -> Value<'static> {
    Value::Uint(n)
}
fn map(entries: Vec<(&str, Value<'static>)>) -> Value<'static> {
    Value::Map(entries.into_iter().map(|(k, v)| (t(k), v)).collect())
}
fn arr(items: Vec<Value<'static>>) -> Value<'static> {
    Value::Array(items)
}

/// A part spec: (name, dtype, logical type, bytes).
type PartSpec<'a> = (&'a str, &'a str, Option<&'a str>, Vec<u8>);

/// An object spec: (name, shape, layout, parts, attributes).
type ObjectSpec<'a> = (&'a str, Vec<u64>, &'a str, Vec<PartSpec<'a>>, Option<Value<'static>>);

/// Builds an image: each part gets its own 4096-aligned blob with an xxh3 digest; the manifest
/// follows the last blob.
fn image(objects: Vec<ObjectSpec<'_>>) -> Vec<u8> {
    let mut file = MAGIC.to_vec();
    let mut objs = Vec::new();
    for (name, shape, layout, parts, attrs) in objects {
        let mut pv = Vec::new();
        for (pname, dtype, logical, bytes) in parts {
            let off = file.len().next_multiple_of(4096) as u64;
            file.resize(off as usize, 0);
            file.extend_from_slice(&bytes);
            let mut e = vec![
                ("blob", arr(vec![u(off), u(bytes.len() as u64)])),
                ("dtype", t(dtype)),
                ("digest", t(&compute_digest("xxh3", &bytes).unwrap())),
            ];
            if let Some(l) = logical {
                e.push(("type", t(l)));
            }
            pv.push((pname, map(e)));
        }
        let mut o = vec![
            ("parts", map(pv)),
            ("shape", arr(shape.into_iter().map(u).collect())),
            ("layout", t(layout)),
        ];
        if let Some(a) = attrs {
            o.push(("attributes", a));
        }
        objs.push((name, map(o)));
    }
    finish(file, map(vec![("objects", map(objs))]))
}

fn finish(mut file: Vec<u8>, root: Value<'_>) -> Vec<u8> {
    let m = cbor::encode(&root).unwrap();
    let off = file.len().max(1).next_multiple_of(4096) as u64;
    file.resize(off as usize, 0);
    file.extend_from_slice(&m);
    let f = Footer {
        manifest_offset: off,
        manifest_length: m.len() as u64,
        manifest_hash: xxh3_64(&m),
        version: 2,
        reserved: 0,
    };
    file.extend_from_slice(&f.to_bytes());
    file
}

fn le32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn lef32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn coo(coords: &[u32], values: &[f32]) -> Vec<u8> {
    image(vec![(
        "c",
        vec![3, 4],
        "zt.sparse_coo/1",
        vec![
            ("coords", "u32", None, le32(coords)),
            ("values", "f32", None, lef32(values)),
        ],
        None,
    )])
}

#[test]
fn coo_profile_and_data_rules() {
    // elements (0,1) and (2,3), SoA.
    let b = coo(&[0, 2, 1, 3], &[1.0, 2.0]);
    let r = Reader::open(b.as_slice()).unwrap();
    let c = r.read_coo("c").unwrap();
    assert_eq!((c.nnz, c.coords.clone()), (2, vec![0, 2, 1, 3]));
    assert_eq!(r.verify_object("c").unwrap(), 2);
    // duplicate coordinates, out-of-range coordinates
    let b = coo(&[1, 1, 2, 2], &[1.0, 2.0]);
    assert_eq!(
        Reader::open(b.as_slice()).unwrap().read_coo("c").unwrap_err().rule,
        Rule::LayoutData
    );
    let b = coo(&[3, 0, 0, 0], &[1.0, 2.0]);
    assert_eq!(
        Reader::open(b.as_slice()).unwrap().read_coo("c").unwrap_err().rule,
        Rule::LayoutData
    );
    // metadata: values size wrong. The reference reads COO structurally, so the image opens;
    // the profile check (before interpretation) rejects it.
    let b = coo(&[0, 2, 1, 3], &[1.0]);
    let r = Reader::open(b.as_slice()).unwrap();
    assert_eq!(r.check_object("c").unwrap_err().rule, Rule::LayoutRule);
    assert_eq!(r.verify_object("c").unwrap_err().rule, Rule::LayoutRule);
}

#[test]
fn gguf_and_mx_profiles() {
    let gguf = |n: usize| {
        image(vec![(
            "q",
            vec![2, 32],
            "gguf.q8_0/1",
            vec![("data", "u8", None, vec![7u8; n])],
            Some(map(vec![("elems_per_block", u(32)), ("block_bytes", u(34))])),
        )])
    };
    let b = gguf(68);
    let r = Reader::open(b.as_slice()).unwrap();
    r.check_object("q").unwrap();
    assert_eq!(r.tensor("q").unwrap_err().rule, Rule::Unsupported);
    assert_eq!(r.read("q", "data").unwrap().len(), 68);
    let b = gguf(67);
    assert_eq!(
        Reader::open(b.as_slice()).unwrap().check_object("q").unwrap_err().rule,
        Rule::LayoutRule
    );

    let mx = |form: &str| {
        image(vec![(
            "m",
            vec![2, 32],
            "zt.mx/1",
            vec![
                ("data", "u8", Some("f8_e4m3fn"), vec![0u8; 64]),
                ("scales", "u8", Some("f8_e8m0"), vec![127u8, 127]),
            ],
            Some(map(vec![("block_size", u(32)), ("scale_form", t(form))])),
        )])
    };
    let b = mx("e8m0_exponent");
    Reader::open(b.as_slice()).unwrap().verify_object("m").unwrap();
    let b = mx("f32_factors");
    assert_eq!(
        Reader::open(b.as_slice()).unwrap().check_object("m").unwrap_err().rule,
        Rule::LayoutRule
    );
}

#[test]
fn quant_group_with_zero_tensor() {
    // AWQ-like: bits 4, group 8 along axis 1 of [2, 16], zeros packed same_as_data.
    let attrs = map(vec![
        ("bits", u(4)),
        ("group_size", u(8)),
        ("axis", u(1)),
        (
            "packing",
            map(vec![("word", t("u32")), ("order", t("lsb_first")), ("per_word", u(8))]),
        ),
        ("scale_form", t("f16_factors")),
        (
            "zero_point",
            map(vec![("form", t("tensor")), ("packing", t("same_as_data"))]),
        ),
    ]);
    let mk = |zeros: usize| {
        image(vec![(
            "q",
            vec![2, 16],
            "zt.quant_group/1",
            vec![
                ("data", "u32", None, vec![0u8; 16]),
                ("scales", "f16", None, vec![0u8; 8]),
                ("zeros", "u32", None, vec![0u8; zeros]),
            ],
            Some(attrs.clone()),
        )])
    };
    let b = mk(0); // 4 groups / 8 per word: not whole words
    assert_eq!(
        Reader::open(b.as_slice()).unwrap().check_object("q").unwrap_err().rule,
        Rule::LayoutRule
    );
    let attrs_plain = {
        let mut a = attrs.clone();
        if let Value::Map(m) = &mut a {
            for (k, v) in m.iter_mut() {
                if k.as_text() == Some("zero_point") {
                    *v = map(vec![("form", t("tensor")), ("packing", t("plain"))]);
                }
            }
        }
        a
    };
    let b = image(vec![(
        "q",
        vec![2, 16],
        "zt.quant_group/1",
        vec![
            ("data", "u32", None, vec![0u8; 16]),
            ("scales", "f16", None, vec![0u8; 8]),
            ("zeros", "u8", None, vec![0u8; 4]),
        ],
        Some(attrs_plain),
    )]);
    let r = Reader::open(b.as_slice()).unwrap();
    let q = tensorlane_core::zt::layout::quant_group_params(r.check_object("q").unwrap()).unwrap();
    assert_eq!((q.zero_form.as_str(), q.zeros_packed), ("tensor", false));
    assert_eq!(r.verify_object("q").unwrap(), 3);
}

#[test]
fn digests_sha256_unknown_and_mismatch() {
    let data = lef32(&[1.0, 2.0]);
    let build = |digest: &str| {
        let mut file = MAGIC.to_vec();
        file.resize(4096, 0);
        file.extend_from_slice(&data);
        let part = map(vec![
            ("blob", arr(vec![u(4096), u(8)])),
            ("dtype", t("f32")),
            ("digest", t(digest)),
        ]);
        let obj = map(vec![
            ("parts", map(vec![("data", part)])),
            ("shape", arr(vec![u(2)])),
            ("layout", t("dense")),
        ]);
        finish(file, map(vec![("objects", map(vec![("x", obj)]))]))
    };
    let sha = compute_digest("sha256", &data).unwrap();
    assert!(sha.starts_with("sha256:") && sha.len() == 7 + 64);
    let b = build(&sha);
    assert!(Reader::open(b.as_slice()).unwrap().verify_part("x", "data").unwrap());
    let b = build("blake3:00ff");
    assert_eq!(
        Reader::open(b.as_slice())
            .unwrap()
            .verify_part("x", "data")
            .unwrap_err()
            .rule,
        Rule::Unsupported
    );
    let b = build("xxh3:0000000000000000");
    let e = Reader::open(b.as_slice())
        .unwrap()
        .verify_part("x", "data")
        .unwrap_err();
    assert_eq!(e.rule, Rule::Digest);
    assert!(e.to_string().contains("object \"x\", part \"data\""), "{e}");
    let b = build("XXH3:00");
    assert_eq!(validate(b.as_slice()).unwrap_err().rule, Rule::Schema);
}

#[test]
fn structural_access_for_unknowns() {
    let b = image(vec![
        (
            "u",
            vec![5],
            "vendor.thing/3",
            vec![("blob", "u8", None, vec![1, 2, 3])],
            None,
        ),
        (
            "l",
            vec![5],
            "dense",
            vec![("data", "u8", Some("vendor_fp3"), vec![9, 9])],
            None,
        ),
        (
            "ok",
            vec![],
            "dense",
            vec![("data", "f64", None, 2.5f64.to_le_bytes().to_vec())],
            None,
        ),
    ]);
    let r = Reader::open(b.as_slice()).unwrap();
    r.check_object("u").unwrap();
    assert_eq!(r.tensor("u").unwrap_err().rule, Rule::Unsupported);
    assert_eq!(r.read("u", "blob").unwrap().as_ref(), &[1, 2, 3]);
    assert_eq!(r.tensor("l").unwrap_err().rule, Rule::Unsupported);
    assert_eq!(r.view("l", "data").unwrap(), &[9, 9]);
    let s = r.tensor("ok").unwrap();
    assert_eq!((s.shape(), s.to_values::<f64>().unwrap()[0]), (&[][..], 2.5));
    assert_eq!(r.objects().collect::<Vec<_>>(), ["l", "ok", "u"]);
}

/// A source that is not in memory and counts its reads.
struct Remote<'a> {
    bytes: &'a [u8],
    reads: Cell<usize>,
    bytes_read: Cell<u64>,
}

impl ReadAt for Remote<'_> {
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), SourceError> {
        self.reads.set(self.reads.get() + 1);
        self.bytes_read.set(self.bytes_read.get() + buf.len() as u64);
        self.bytes.read_at(offset, buf)
    }
}

#[test]
fn open_reads_two_ranges_and_never_views_remote_bytes() {
    // A 1 MiB tensor: open reads the head and the tail window only.
    let big = vec![0u8; 1 << 20];
    let b = image(vec![(
        "w",
        vec![1 << 18],
        "dense",
        vec![("data", "f32", None, big)],
        None,
    )]);
    let src = Remote {
        bytes: &b,
        reads: Cell::new(0),
        bytes_read: Cell::new(0),
    };
    let r = Reader::open(&src).unwrap();
    assert_eq!(src.reads.get(), 2);
    assert!(src.bytes_read.get() <= 8 + 64 * 1024);
    assert_eq!(r.view("w", "data").unwrap_err().rule, Rule::Unsupported);
    assert_eq!(r.read("w", "data").unwrap().len(), 1 << 20);
    assert!(r.verify_part("w", "data").unwrap());
}

#[test]
fn declared_sizes_are_checked_before_reading() {
    let mut b = MAGIC.to_vec();
    b.resize(4096, 0);
    let f = Footer {
        manifest_offset: 4096,
        manifest_length: (1 << 30) + 1,
        manifest_hash: 0,
        version: 2,
        reserved: 0,
    };
    b.extend_from_slice(&f.to_bytes());
    let src = Remote {
        bytes: &b,
        reads: Cell::new(0),
        bytes_read: Cell::new(0),
    };
    assert_eq!(validate(&src).unwrap_err().rule, Rule::ManifestTooLarge);
    assert!(src.bytes_read.get() <= b.len() as u64);
    // Exactly 1 GiB is allowed by the limit (and then fails the bounds check).
    let n = b.len() - FOOTER_LEN as usize;
    let f = Footer {
        manifest_length: 1 << 30,
        ..f
    };
    b[n..].copy_from_slice(&f.to_bytes());
    assert_eq!(validate(b.as_slice()).unwrap_err().rule, Rule::ManifestBounds);
}

#[test]
fn data_shard_and_limits() {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(
        &Footer {
            manifest_offset: 0,
            manifest_length: 0,
            manifest_hash: 0,
            version: 2,
            reserved: 7,
        }
        .to_bytes(),
    );
    assert_eq!(validate(b.as_slice()).unwrap(), Image::DataShard);
    let r = Reader::open(b.as_slice()).unwrap();
    assert!(r.is_data_shard() && r.is_empty());
    assert_eq!(r.object("x").unwrap_err().rule, Rule::NotFound);

    // rank 64 and a 1024-byte name are fine; rank 65 and 1025 bytes are not.
    let ok = image(vec![(
        &"n".repeat(1024),
        vec![1; 64],
        "dense",
        vec![("data", "u8", None, vec![1])],
        None,
    )]);
    assert!(validate(ok.as_slice()).is_ok());
    let bad = image(vec![(
        "x",
        vec![1; 65],
        "dense",
        vec![("data", "u8", None, vec![1])],
        None,
    )]);
    assert_eq!(validate(bad.as_slice()).unwrap_err().rule, Rule::Shape);
    let bad = image(vec![(
        &"n".repeat(1025),
        vec![1],
        "dense",
        vec![("data", "u8", None, vec![1])],
        None,
    )]);
    assert_eq!(validate(bad.as_slice()).unwrap_err().rule, Rule::Name);
    // complex64 pins f32; a dense complex tensor reads as C64.
    let c = image(vec![(
        "c",
        vec![2],
        "dense",
        vec![("data", "f32", Some("complex64"), lef32(&[1.0, 2.0, 3.0, 4.0]))],
        None,
    )]);
    let r = Reader::open(c.as_slice()).unwrap();
    assert_eq!(r.tensor("c").unwrap().dtype(), tensorlane_core::DType::C64);
    let c = image(vec![(
        "c",
        vec![2],
        "dense",
        vec![("data", "u8", Some("complex64"), vec![0; 16])],
        None,
    )]);
    assert_eq!(validate(c.as_slice()).unwrap_err().rule, Rule::Schema);
}
