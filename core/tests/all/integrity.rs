//! Checksums the formats carry, checked when a tensor is read: a zip member's CRC-32 (`.npz`,
//! `.pt`; deflated members as they are inflated, stored members over the member's bytes) against
//! the fixtures of `tests/data/fixtures` with one data byte flipped and every header kept; and
//! the streaming reader (`read_chunks`) giving the same bytes as `read` in bounded pieces.

use std::path::PathBuf;

use tensorlane_core::formats::{self, Catalog, ErrorKind, ReadLimits, Storage, TensorInfo};

fn fixture(rel: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/fixtures")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every tensor streamed in 1000-byte pieces equals `read`'s bytes.
fn stream_all(cat: &Catalog, bytes: &[u8]) -> Result<Vec<Vec<u8>>, formats::FormatError> {
    let srcs: Vec<&[u8]> = vec![bytes];
    let mut out = Vec::new();
    for t in &cat.tensors {
        let mut got = Vec::new();
        formats::read_chunks(
            cat.format.name(),
            t,
            &srcs,
            &cat.checks,
            &ReadLimits::default(),
            1000,
            &mut |p| {
                assert!(p.len() <= 1000);
                got.extend_from_slice(p);
                Ok(())
            },
        )?;
        out.push(got);
    }
    Ok(out)
}

fn first_data_byte(t: &TensorInfo) -> u64 {
    match &t.storage {
        Storage::Range { offset, len, .. } => offset + len / 2,
        Storage::Deflate { offset, compressed, .. } => offset + compressed / 2,
        other => panic!("unexpected storage {other:?}"),
    }
}

#[test]
fn streaming_equals_read_on_the_zip_fixtures() {
    for rel in [
        "npz/stored.npz",
        "npz/compressed.npz",
        "sample_compressed.npz",
        "pt/mlp-state-dict.pt",
        "pt/views.pt",
    ] {
        let bytes = fixture(rel);
        let cat = formats::open(&bytes[..]).unwrap();
        let streamed = stream_all(&cat, &bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for (t, s) in cat.tensors.iter().zip(&streamed) {
            let whole = formats::read(cat.format.name(), t, &[&bytes[..]]).unwrap();
            assert!(whole[..] == s[..], "{rel}: {}", t.name);
        }
    }
}

#[test]
fn a_flipped_byte_in_a_stored_member_fails_its_crc() {
    for rel in ["npz/stored.npz", "pt/mlp-state-dict.pt"] {
        let bytes = fixture(rel);
        let cat = formats::open(&bytes[..]).unwrap();
        assert!(!cat.checks.is_empty(), "{rel}: stored members carry their CRC-32");
        let t = cat.tensors.iter().find(|t| t.nbytes().unwrap() > 0).unwrap();
        let mut bad = bytes.clone();
        bad[first_data_byte(t) as usize] ^= 0x10;
        // The directory is untouched, so the archive still opens: the damage is in the data.
        let cat2 = formats::open(&bad[..]).unwrap();
        assert_eq!(cat2.tensors.len(), cat.tensors.len());
        let e = stream_all(&cat2, &bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checksum, "{rel}: {e}");
        assert_eq!(e.tensor.as_deref(), Some(t.name.as_str()), "{rel}: {e}");
        assert!(
            e.message.contains("CRC-32") && e.message.contains("zip member"),
            "{rel}: {e}"
        );
        let srcs: Vec<&[u8]> = vec![&bad];
        let e = formats::read_limited(cat2.format.name(), t, &srcs, &cat2.checks, &ReadLimits::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Checksum, "{rel}: {e}");
        // check_integrity (what a verify runs) finds it too.
        assert!(
            cat2.checks
                .iter()
                .any(|c| formats::check_integrity(cat2.format.name(), c, &srcs).is_err())
        );
    }
}

#[test]
fn a_deflated_member_is_checked_as_it_inflates() {
    let bytes = fixture("npz/compressed.npz");
    let cat = formats::open(&bytes[..]).unwrap();
    let t = cat
        .tensors
        .iter()
        .find(|t| matches!(t.storage, Storage::Deflate { crc32: Some(_), .. }) && t.nbytes().unwrap() > 0)
        .unwrap();
    // A flipped byte of the compressed data: the stream is now invalid, or inflates to other bytes.
    let mut bad = bytes.clone();
    bad[first_data_byte(t) as usize] ^= 0x10;
    // (Where the flip lands in the member's .npy header, opening already refuses it.)
    let e = formats::open(&bad[..]).and_then(|c| stream_all(&c, &bad)).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Checksum | ErrorKind::Syntax), "{e}");
    // The data kept, the declared CRC-32 changed (in the local and the central header): only the
    // CRC can tell.
    let Storage::Deflate { crc32: Some(crc), .. } = t.storage else {
        unreachable!()
    };
    let mut bad = bytes.clone();
    let needle = crc.to_le_bytes();
    let mut n = 0;
    for i in 0..bad.len() - 4 {
        if bad[i..i + 4] == needle {
            bad[i] ^= 1;
            n += 1;
        }
    }
    assert_eq!(n, 2, "the CRC appears in the local and the central header");
    let cat2 = formats::open(&bad[..]).unwrap();
    let e = stream_all(&cat2, &bad).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Checksum, "{e}");
    assert!(e.message.contains("CRC-32 mismatch"), "{e}");
    let srcs: Vec<&[u8]> = vec![&bad];
    let t2 = cat2.get(&t.name).unwrap();
    assert_eq!(
        formats::read(cat2.format.name(), t2, &srcs).unwrap_err().kind,
        ErrorKind::Checksum
    );
}

#[test]
fn whole_reads_are_limited_before_allocating() {
    let bytes = fixture("npz/compressed.npz");
    let cat = formats::open(&bytes[..]).unwrap();
    let t = cat.tensors.iter().max_by_key(|t| t.nbytes().unwrap()).unwrap();
    let srcs: Vec<&[u8]> = vec![&bytes];
    let tight = ReadLimits { max_tensor_bytes: 8 };
    let e = formats::read_limited(cat.format.name(), t, &srcs, &cat.checks, &tight).unwrap_err();
    assert_eq!(
        (e.kind, e.tensor.as_deref()),
        (ErrorKind::Limit, Some(t.name.as_str())),
        "{e}"
    );
    assert!(
        e.message.contains("max_tensor_bytes") && e.message.contains("--max-tensor-bytes"),
        "{e}"
    );
    // Streaming is not limited by it.
    let mut n = 0u64;
    formats::read_chunks(cat.format.name(), t, &srcs, &cat.checks, &tight, 64, &mut |p| {
        n += p.len() as u64;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, t.nbytes().unwrap());
}
