//! `zt.zstd-seekable/1`: round trips, random access, hostile seek tables, and the reference fixture.

use crate::common;
use common::data;

use ruzstd::encoding::{CompressionLevel, compress_to_vec};
use tensorlane_core::zt::cbor::{self, Mode, Value};
use tensorlane_core::zt::seekable::{self, SEEKABLE_MAGIC, SKIPPABLE_MAGIC, SeekTable};

/// A minimal seekable writer for tests (the product one lives in the `tensorlane` crate).
fn encode(bytes: &[u8], frame: usize, checksum_column: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut entries = Vec::new();
    for chunk in bytes.chunks(frame) {
        let f = compress_to_vec(chunk, CompressionLevel::Fastest);
        let mut h = twox(chunk);
        if !checksum_column {
            h = 0;
        }
        entries.push((f.len() as u32, chunk.len() as u32, h));
        out.extend_from_slice(&f);
    }
    table(&mut out, &entries, checksum_column);
    out
}

fn table(out: &mut Vec<u8>, entries: &[(u32, u32, u32)], checksum_column: bool) {
    let es = if checksum_column { 12 } else { 8 };
    out.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    out.extend_from_slice(&((entries.len() * es + 9) as u32).to_le_bytes());
    for &(c, d, h) in entries {
        out.extend_from_slice(&c.to_le_bytes());
        out.extend_from_slice(&d.to_le_bytes());
        if checksum_column {
            out.extend_from_slice(&h.to_le_bytes());
        }
    }
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.push(if checksum_column { 0x80 } else { 0 });
    out.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
}

/// Low 32 bits of XXH64(seed 0), read back from a one-frame zstd encoding's content checksum.
fn twox(chunk: &[u8]) -> u32 {
    let f = compress_to_vec(chunk, CompressionLevel::Uncompressed);
    u32::from_le_bytes(f[f.len() - 4..].try_into().unwrap())
}

fn sample(n: usize) -> Vec<u8> {
    let mut x = 0x1234_5678u32;
    (0..n)
        .map(|i| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            if i % 3 == 0 { (x >> 24) as u8 } else { (i / 7) as u8 }
        })
        .collect()
}

#[test]
fn round_trips_and_ranges() {
    for (n, frame) in [
        (0usize, 16usize),
        (1, 16),
        (15, 16),
        (16, 16),
        (17, 16),
        (1000, 100),
        (70_000, 4096),
        (300_000, 1 << 20),
    ] {
        for col in [false, true] {
            let data = sample(n);
            let enc = encode(&data, frame, col);
            assert_eq!(
                seekable::decode(&enc, n as u64).unwrap(),
                data,
                "n={n} frame={frame} col={col}"
            );
            let t = SeekTable::parse(&enc, n as u64).unwrap();
            assert_eq!(t.frames.len(), n.div_ceil(frame));
            for (off, len) in [
                (0, n),
                (n / 3, n / 3),
                (n.saturating_sub(1), n.min(1)),
                (n / 2, 0),
                (frame.min(n), n - frame.min(n)),
            ] {
                let got = seekable::read_range(&enc, n as u64, off as u64, len as u64).unwrap();
                assert_eq!(got, &data[off..off + len], "n={n} frame={frame} off={off} len={len}");
            }
            assert!(seekable::read_range(&enc, n as u64, n as u64, 1).is_err());
        }
    }
}

#[test]
fn range_decodes_only_touched_frames() {
    let data = sample(10 * 1000);
    let mut enc = encode(&data, 1000, false);
    // Corrupt frame 7: ranges within frames 0..=6 and 8..=9 still decode; frame 7 is refused.
    let t = SeekTable::parse(&enc, data.len() as u64).unwrap();
    let f7 = t.frames[7];
    assert_eq!(t.frames_for(6500, 1000).unwrap(), 6..8);
    let mid = (f7.stored_offset + u64::from(f7.stored_size) / 2) as usize;
    enc[mid] ^= 0x55;
    assert_eq!(seekable::read_range(&enc, 10_000, 100, 6800).unwrap(), &data[100..6900]);
    assert_eq!(seekable::read_range(&enc, 10_000, 8000, 2000).unwrap(), &data[8000..]);
    let e = seekable::read_range(&enc, 10_000, 6999, 2).unwrap_err();
    assert_eq!(e.rule.name(), "Encoding");
    assert!(seekable::decode(&enc, 10_000).is_err());
}

#[test]
fn hostile_tables_refused() {
    let data = sample(5000);
    let good = encode(&data, 1024, false);
    let n = data.len() as u64;
    let err = |b: &[u8], dl: u64| seekable::decode(b, dl).unwrap_err();
    // wrong decoded_length (short and long)
    assert!(err(&good, n - 1).message.contains("decoded_length"));
    assert!(err(&good, n + 1).message.contains("decoded_length"));
    // too short
    assert!(err(&good[..16], 0).message.contains("17"));
    // footer magic
    let mut b = good.clone();
    *b.last_mut().unwrap() ^= 1;
    assert!(err(&b, n).message.contains("seekable magic"));
    // reserved descriptor bits
    let mut b = good.clone();
    let l = b.len();
    b[l - 5] = 0x01;
    assert!(err(&b, n).message.contains("reserved"));
    // frame count larger than the stored bytes
    let mut b = good.clone();
    b[l - 9..l - 5].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(err(&b, n).message.contains("needs"));
    // skippable magic / size
    let t = SeekTable::parse(&good, n).unwrap();
    let s = t.table_offset as usize;
    let mut b = good.clone();
    b[s] ^= 1;
    assert!(err(&b, n).message.contains("skippable-frame magic"));
    let mut b = good.clone();
    b[s + 4] ^= 1;
    assert!(err(&b, n).message.contains("skippable-frame size"));
    // compressed sizes not covering the frames
    let mut b = good.clone();
    let c0 = u32::from_le_bytes(b[s + 8..s + 12].try_into().unwrap());
    b[s + 8..s + 12].copy_from_slice(&(c0 + 1).to_le_bytes());
    assert!(err(&b, n).message.contains("compressed"));
    // unequal non-final frames (sizes still add up)
    let mut b = good.clone();
    b[s + 12..s + 16].copy_from_slice(&1023u32.to_le_bytes());
    b[s + 20..s + 24].copy_from_slice(&1025u32.to_le_bytes());
    assert!(err(&b, n).message.contains("non-final"));
    // a frame over 16 MiB
    let big = encode(&[], 1, false);
    let mut entries_big = Vec::new();
    table(&mut entries_big, &[(0, (16 << 20) + 1, 0)], false);
    assert!(err(&entries_big, (16 << 20) + 1).message.contains("16 MiB"));
    assert_eq!(seekable::decode(&big, 0).unwrap(), b"");
    // frame that decodes to less / more than declared (swap sizes between two frames of a 2-frame stream)
    let two = sample(1500);
    let f0 = compress_to_vec(&two[..1000], CompressionLevel::Fastest);
    let f1 = compress_to_vec(&two[1000..], CompressionLevel::Fastest);
    let mut b = [f0.clone(), f1.clone()].concat();
    table(&mut b, &[(f0.len() as u32, 600, 0), (f1.len() as u32, 900, 0)], false);
    assert!(err(&b, 1500).message.contains("more than"));
    // the zstd frame checksum is verified
    let mut b = good.clone();
    let first_frame_end = c0 as usize;
    b[first_frame_end - 1] ^= 0xFF;
    assert!(err(&b, n).message.contains("checksum"));
    // the seek table's checksum column is verified
    let mut b = encode(&data, 1024, true);
    let t = SeekTable::parse(&b, n).unwrap();
    let s = t.table_offset as usize;
    b[s + 16] ^= 1;
    assert!(err(&b, n).message.contains("seek-table checksum"));
    // errors render with the rule and the offset
    let e = err(&good, n + 1);
    assert!(e.to_string().starts_with("Encoding: "), "{e}");
}

#[test]
fn zstd_bomb_bounded() {
    // 16 MiB of zeros declared as 1 byte: refused without producing it.
    let zeros = vec![0u8; 16 << 20];
    let f = compress_to_vec(zeros.as_slice(), CompressionLevel::Fastest);
    let mut b = f.clone();
    table(&mut b, &[(f.len() as u32, 1, 0)], false);
    let e = seekable::decode(&b, 1).unwrap_err();
    assert!(e.message.contains("more than"), "{e}");
}

#[test]
fn seek_table_never_allocates_claimed_sizes() {
    // A table claiming 1000 frames of 16 MiB each over 8 KiB of stored bytes: refused by the
    // compressed-size sum before any decoding.
    let mut b = vec![0u8; 0];
    let entries: Vec<_> = (0..1000).map(|_| (0u32, 16u32 << 20, 0u32)).collect();
    table(&mut b, &entries, false);
    let e = seekable::decode(&b, 1000 * (16 << 20)).unwrap_err();
    assert!(e.message.contains("more than") || e.message.contains("frame 0"), "{e}");
}

/// Minimal v2 footer + manifest reading, enough to find the fixture's parts.
type PartRow = (String, u64, u64, Option<String>, Option<u64>);

fn v2_parts(file: &[u8]) -> Vec<PartRow> {
    let foot = &file[file.len() - 40..];
    let mo = u64::from_le_bytes(foot[0..8].try_into().unwrap()) as usize;
    let ml = u64::from_le_bytes(foot[8..16].try_into().unwrap()) as usize;
    let m = cbor::decode(&file[mo..mo + ml], Mode::Lenient).unwrap();
    let mut out = Vec::new();
    for (name, obj) in m.get("objects").unwrap().as_map().unwrap() {
        let part = obj.get("parts").unwrap().get("data").unwrap();
        let blob = part.get("blob").unwrap().as_array().unwrap();
        out.push((
            name.as_text().unwrap().to_string(),
            blob[0].as_u64().unwrap(),
            blob[1].as_u64().unwrap(),
            part.get("encoding").and_then(Value::as_text).map(str::to_string),
            part.get("decoded_length").and_then(Value::as_u64),
        ));
    }
    out
}

#[test]
fn reference_fixture_decodes_to_manifest_sha256() {
    let root = data("fixtures");
    let file = std::fs::read(root.join("fixtures/compressed-zstd-seekable.zt")).unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("fixtures/manifest.json")).unwrap()).unwrap();
    let entry = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["file"] == "compressed-zstd-seekable.zt")
        .unwrap();
    let mut checked = 0;
    for (name, off, len, enc, dl) in v2_parts(&file) {
        let want = entry["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name.as_str())
            .unwrap();
        let stored = &file[off as usize..(off + len) as usize];
        let bytes = match enc.as_deref() {
            Some(seekable::ENCODING_ID) => {
                let dl = dl.unwrap();
                let t = SeekTable::parse(stored, dl).unwrap();
                if name == "zeros" {
                    assert_eq!(t.frames.len(), 2);
                    assert_eq!(t.frames[0].decoded_size, 1 << 20);
                    // random access into the second frame only
                    let r = seekable::read_range(stored, dl, (1 << 20) + 8, 64).unwrap();
                    assert_eq!(r, vec![0u8; 64]);
                }
                if name == "ramp" {
                    let r = seekable::read_range(stored, dl, 4 * 1000, 8).unwrap();
                    assert_eq!(r, [1000f32.to_le_bytes(), 1001f32.to_le_bytes()].concat());
                }
                // and over a ReadAt, reading only the table and the touched frames
                let r = seekable::read_range_at(file.as_slice(), off, len, dl, 0, dl.min(16)).unwrap();
                assert_eq!(r.len() as u64, dl.min(16));
                seekable::decode(stored, dl).unwrap()
            }
            None => stored.to_vec(),
            Some(other) => panic!("unexpected encoding {other}"),
        };
        assert_eq!(bytes.len() as u64, want["nbytes"].as_u64().unwrap(), "{name}");
        assert_eq!(common::sha256_hex(&bytes), want["sha256"].as_str().unwrap(), "{name}");
        checked += 1;
    }
    assert_eq!(checked, 3);
}
