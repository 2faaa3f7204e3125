//! Golden vectors written by tenso 0.24.0 (`tests/data/vectors/tenso`): every case decodes to
//! its sidecar's expectation, every case tenso wrote re-encodes to identical bytes, and every
//! `invalid/` case is refused (except tenso's own compressed bundle, which tensorlane reads).

use crate::common;

use std::path::PathBuf;

use serde_json::Value;
use tensorlane_core::wire::{self, DecodeOptions, EncodeOptions, Packet, flags};

fn vectors_dir() -> PathBuf {
    common::data("vectors/tenso").join("vectors/tenso")
}

struct Case {
    name: String,
    bytes: Vec<u8>,
    json: Value,
}

fn cases(sub: &str) -> Vec<Case> {
    let root = vectors_dir();
    let dir = root.join(sub);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("tenso") {
            continue;
        }
        let json: Value = serde_json::from_str(&std::fs::read_to_string(p.with_extension("json")).unwrap()).unwrap();
        out.push(Case {
            name: format!("{sub}{}", p.file_stem().unwrap().to_str().unwrap()),
            bytes: std::fs::read(&p).unwrap(),
            json,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn f32_hex(v: &[f32]) -> String {
    hex::encode(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
}

/// Compares a decoded packet with an `expected` value; returns a description of the first difference.
fn check(p: &Packet<'_>, exp: &Value, at: &str) -> Result<(), String> {
    let ty = exp["type"].as_str().unwrap();
    match (ty, p) {
        ("ndarray", Packet::Dense(t)) => {
            if t.dtype().name() != exp["dtype"].as_str().unwrap() {
                return Err(format!("{at}: dtype {} != {}", t.dtype(), exp["dtype"]));
            }
            if t.shape() != common::u64s(&exp["shape"]) {
                return Err(format!("{at}: shape {:?} != {}", t.shape(), exp["shape"]));
            }
            if t.nbytes() as u64 != exp["nbytes"].as_u64().unwrap() {
                return Err(format!("{at}: nbytes {} != {}", t.nbytes(), exp["nbytes"]));
            }
            if common::sha256_hex(t.data()) != exp["data_sha256"].as_str().unwrap() {
                return Err(format!("{at}: data sha256 differs"));
            }
            if let Some(h) = exp.get("data_hex")
                && hex::encode(t.data()) != h.as_str().unwrap()
            {
                return Err(format!("{at}: data_hex differs"));
            }
            Ok(())
        }
        ("bundle", Packet::Bundle(b)) => {
            let es = exp["entries"].as_array().unwrap();
            if es.len() != b.entries.len() {
                return Err(format!("{at}: {} entries != {}", b.entries.len(), es.len()));
            }
            for ((k, v), e) in b.entries.iter().zip(es) {
                if k != e["key"].as_str().unwrap() {
                    return Err(format!("{at}: key {k:?} != {}", e["key"]));
                }
                check(v, &e["value"], &format!("{at}/{k}"))?;
            }
            Ok(())
        }
        ("sparse", Packet::Sparse(s)) => {
            if s.format.name() != exp["format"].as_str().unwrap() || s.shape != common::u64s(&exp["shape"]) {
                return Err(format!(
                    "{at}: sparse {} {:?} != {} {}",
                    s.format.name(),
                    s.shape,
                    exp["format"],
                    exp["shape"]
                ));
            }
            for (i, (c, e)) in s
                .components
                .iter()
                .zip(exp["components"].as_array().unwrap())
                .enumerate()
            {
                check(&Packet::Dense(c.clone()), e, &format!("{at}/component{i}"))?;
            }
            Ok(())
        }
        ("quantized", Packet::Quantized(q)) => {
            let same = q.qdtype.name() == exp["qdtype"].as_str().unwrap()
                && q.shape == common::u64s(&exp["shape"])
                && q.scheme.code() as u64 == exp["scheme_code"].as_u64().unwrap()
                && q.axis as u64 == exp["axis_wire"].as_u64().unwrap()
                && q.group_size as u64 == exp["group_size"].as_u64().unwrap()
                && q.scales.len() as u64 == exp["num_scales"].as_u64().unwrap()
                && f32_hex(&q.scales) == exp["scales_hex"].as_str().unwrap()
                && f32_hex(&q.zero_points) == exp["zero_points_hex"].as_str().unwrap()
                && hex::encode(&q.data) == exp["packed_hex"].as_str().unwrap();
            if !same {
                return Err(format!("{at}: quantized metadata differs: {q:?}"));
            }
            let d = q.dequantize().map_err(|e| format!("{at}: dequantize failed: {e}"))?;
            let bytes: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
            if common::sha256_hex(&bytes) != exp["dequantized"]["data_sha256"].as_str().unwrap() {
                return Err(format!("{at}: dequantized values differ: {d:?}"));
            }
            Ok(())
        }
        ("string", Packet::Strings(s)) => {
            let want: Vec<&str> = exp["strings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let got: Vec<&str> = (0..s.len()).map(|i| s.get_str(i).unwrap().unwrap()).collect();
            let offs: Vec<u64> = exp["offsets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            if got != want || s.offsets().collect::<Vec<_>>() != offs {
                return Err(format!("{at}: strings {got:?} != {want:?}"));
            }
            Ok(())
        }
        _ => Err(format!("{at}: decoded a {} packet, expected {ty}", p.kind_name())),
    }
}

/// The options tenso was called with, read back from the packet (leaves share them).
fn infer_options(b: &[u8]) -> EncodeOptions {
    let h = wire::parse_header(b).unwrap();
    let mut o = EncodeOptions::default();
    if h.flags & flags::BUNDLE != 0 {
        // First entry's value: header, u32 key length, key, u32 value length.
        if h.ndim > 0 {
            let kl = u32::from_le_bytes(b[h.len..h.len + 4].try_into().unwrap()) as usize;
            let v = h.len + 4 + kl + 4;
            let leaf = infer_options(&b[v..]);
            if wire::parse_header(&b[v..]).unwrap().flags & (flags::SPARSE_COO | flags::SPARSE_CSR | flags::SPARSE_CSC)
                == 0
            {
                return leaf;
            }
        }
        return o;
    }
    o.integrity = h.flags & flags::INTEGRITY != 0;
    o.compress = h.flags & flags::COMPRESSION != 0;
    if h.flags & flags::CUST_ALIGN != 0 {
        let mut at = h.len + 4 * h.ndim as usize;
        if (16..=19).contains(&h.dtype_code) {
            let ns = u32::from_le_bytes(b[at + 6..at + 10].try_into().unwrap()) as usize;
            at += 10 + 8 * ns;
        }
        o.alignment = 1 << b[at];
    }
    o
}

#[test]
fn every_valid_vector_decodes_to_its_sidecar() {
    let mut n = 0;
    let mut failures = Vec::new();
    for sub in ["", "decode_only/"] {
        for c in cases(sub) {
            n += 1;
            match wire::decode(&c.bytes) {
                Ok(p) => {
                    if let Err(e) = check(&p, &c.json["expected"], &c.name) {
                        failures.push(e);
                    }
                }
                Err(e) => failures.push(format!("{}: refused: {e}", c.name)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(n >= 107, "only {n} cases found");
}

#[test]
fn every_tenso_packet_reencodes_byte_exact() {
    let mut n = 0;
    let mut failures = Vec::new();
    for c in cases("") {
        if c.json["expected"]["type"] == "error" {
            continue;
        }
        let p = wire::decode(&c.bytes).unwrap();
        let opts = infer_options(&c.bytes);
        match wire::encode(&p, &opts) {
            Ok(b) if b == c.bytes => n += 1,
            Ok(b) => failures.push(format!(
                "{}: {} bytes, tenso wrote {} (opts {opts:?})",
                c.name,
                b.len(),
                c.bytes.len()
            )),
            Err(e) => failures.push(format!("{}: encode failed: {e}", c.name)),
        }
        // The vectored form of a dense packet joins to the same bytes and borrows the body.
        if let Packet::Dense(t) = &p {
            let parts = wire::encode_parts(t, &opts).unwrap();
            assert_eq!(parts.to_vec(), c.bytes, "{}: parts", c.name);
            assert_eq!(parts.body_is_borrowed(), !opts.compress, "{}", c.name);
        }
    }
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(n >= 98, "only {n} re-encoded");
}

#[test]
fn every_invalid_vector_is_refused_with_a_clear_error() {
    for c in cases("invalid/") {
        let r = wire::decode(&c.bytes);
        let stem = c.name.trim_start_matches("invalid/");
        if stem == "compressed_bundle_emitted_by_tenso" {
            // tenso cannot read its own compressed bundle; tensorlane can (spec §21.1).
            let p = r.unwrap_or_else(|e| panic!("{stem}: {e}"));
            let v = p.as_bundle().unwrap().entries[0].1.as_dense().unwrap().clone();
            assert!(!v.is_view());
            continue;
        }
        let e = r.expect_err(&c.name);
        let msg = e.to_string();
        assert!(msg.contains("at byte"), "{}: error lacks an offset: {msg}", c.name);
        // Where tenso has a text for the fault, ours maps to the same one.
        let want = c.json["expected"]["message"].as_str().unwrap();
        if let Some(t) = e.tenso_message() {
            assert_eq!(t, want, "{}: {msg}", c.name);
        }
        if stem == "version_2_tenso_0_10" {
            // Opt-in legacy read with the v3 rules.
            let o = DecodeOptions {
                allow_v2: true,
                ..Default::default()
            };
            wire::decode_with(&c.bytes, &o).unwrap();
        }
    }
}

#[test]
fn aligned_decode_is_a_view_of_the_input() {
    let root = vectors_dir();
    let bytes = std::fs::read(root.join("large_float32_256x1024.tenso")).unwrap();
    let p = wire::decode(&bytes).unwrap();
    let t = p.as_dense().unwrap();
    assert!(t.is_view());
    assert_eq!(t.data().as_ptr(), bytes[64..].as_ptr());
}

#[test]
fn strict_options_refuse_what_tenso_lets_through() {
    let root = vectors_dir();
    let trailing = std::fs::read(root.join("decode_only/v4_trailing_garbage.tenso")).unwrap();
    let d = wire::decode_with(&trailing, &DecodeOptions::default()).unwrap();
    assert!(d.len < trailing.len());
    let strict = DecodeOptions {
        allow_trailing_bytes: false,
        ..Default::default()
    };
    assert!(matches!(
        wire::decode_with(&trailing, &strict).unwrap_err().kind(),
        wire::ErrorKind::TrailingBytes(_)
    ));
    let plain = std::fs::read(root.join("rank1_float32.tenso")).unwrap();
    let req = DecodeOptions {
        require_integrity: true,
        ..Default::default()
    };
    assert!(matches!(
        wire::decode_with(&plain, &req).unwrap_err().kind(),
        wire::ErrorKind::IntegrityRequired
    ));
    let with = std::fs::read(root.join("integrity_float32_vec.tenso")).unwrap();
    wire::decode_with(&with, &req).unwrap();
}
