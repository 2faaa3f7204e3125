//! Property tests: arbitrary tensors and packets round-trip, arbitrary chunkings frame the same
//! packets, and arbitrary mutations of valid packets never panic.

use proptest::prelude::*;
use tensorlane_core::wire::{
    self, Bundle, EncodeOptions, Packet, QDType, QuantizeParams, Quantized, Sparse, SparseFormat, StreamDecoder,
    Strings,
};
use tensorlane_core::{DType, Tensor};

fn dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(DType::ALL.to_vec())
}

fn dense() -> impl Strategy<Value = Tensor<'static>> {
    (dtype(), proptest::collection::vec(0u64..5, 0..4)).prop_flat_map(|(d, shape)| {
        let n = shape.iter().product::<u64>() as usize * d.itemsize();
        proptest::collection::vec(any::<u8>(), n).prop_map(move |bytes| Tensor::new(d, shape.clone(), bytes).unwrap())
    })
}

fn quantized() -> impl Strategy<Value = Quantized<'static>> {
    let qd = proptest::sample::select(vec![QDType::QInt8, QDType::QUInt8, QDType::QInt4, QDType::QUInt4]);
    (qd, proptest::collection::vec(1u64..5, 1..3), 0usize..3, 1u32..7).prop_flat_map(|(qd, shape, scheme, g)| {
        let n = shape.iter().product::<u64>() as usize;
        proptest::collection::vec(-100f32..100f32, n).prop_map(move |v| {
            let p = match scheme {
                0 => QuantizeParams::PerTensor,
                1 => QuantizeParams::PerChannel { axis: -1 },
                _ => QuantizeParams::PerGroup { group_size: g },
            };
            Quantized::quantize(&v, &shape, qd, p).unwrap()
        })
    })
}

fn csr() -> impl Strategy<Value = Sparse<'static>> {
    (1u64..6, 1u64..6).prop_flat_map(|(r, c)| {
        proptest::collection::vec(proptest::collection::vec(any::<bool>(), c as usize), r as usize).prop_map(
            move |mask| {
                let (mut data, mut idx, mut ptr) = (vec![], vec![], vec![0i32]);
                for row in &mask {
                    for (j, &on) in row.iter().enumerate() {
                        if on {
                            data.push(j as f64 + 0.5);
                            idx.push(j as i32);
                        }
                    }
                    ptr.push(idx.len() as i32);
                }
                Sparse {
                    format: SparseFormat::Csr,
                    shape: vec![r, c],
                    components: [
                        Tensor::from_values(vec![data.len() as u64], &data).unwrap(),
                        Tensor::from_values(vec![idx.len() as u64], &idx).unwrap(),
                        Tensor::from_values(vec![ptr.len() as u64], &ptr).unwrap(),
                    ],
                }
            },
        )
    })
}

fn leaf() -> impl Strategy<Value = Packet<'static>> {
    prop_oneof![
        4 => dense().prop_map(Packet::Dense),
        1 => quantized().prop_map(Packet::from),
        1 => csr().prop_map(Packet::from),
        1 => proptest::collection::vec(".{0,6}", 0..4).prop_map(|v| Packet::Strings(Strings::from_items(&v))),
    ]
}

fn packet() -> impl Strategy<Value = Packet<'static>> {
    leaf().prop_recursive(3, 24, 5, |inner| {
        proptest::collection::vec(("[a-z\u{e9}]{0,4}", inner), 0..5).prop_map(|es| {
            Packet::Bundle(Bundle {
                entries: es.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            })
        })
    })
}

fn options() -> impl Strategy<Value = EncodeOptions> {
    (
        proptest::sample::select(vec![1u64, 8, 16, 64, 128, 4096]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(a, i, c)| EncodeOptions {
            alignment: a,
            integrity: i,
            compress: c,
            ..Default::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn packets_round_trip(p in packet(), o in options()) {
        let bytes = wire::encode(&p, &o).unwrap();
        let back = wire::decode(&bytes).unwrap();
        prop_assert_eq!(back, p);
    }

    #[test]
    fn dense_views_are_zero_copy(t in dense(), a in proptest::sample::select(vec![1u64, 8, 64])) {
        let o = EncodeOptions { alignment: a, ..Default::default() };
        let bytes = wire::encode(&Packet::Dense(t.clone()), &o).unwrap();
        let back = wire::decode(&bytes).unwrap();
        let d = back.as_dense().unwrap();
        prop_assert!(d.is_view());
        prop_assert_eq!(d, &t);
    }

    #[test]
    fn any_chunking_frames_the_same_packets(
        ps in proptest::collection::vec(packet(), 1..6),
        cuts in proptest::collection::vec(1usize..97, 1..40),
    ) {
        // Streams carry uncompressed packets (compressed ones have no length).
        let o = EncodeOptions { integrity: true, ..Default::default() };
        let encoded: Vec<Vec<u8>> = ps.iter().map(|p| wire::encode(p, &o).unwrap()).collect();
        let stream: Vec<u8> = encoded.concat();
        let mut s = StreamDecoder::new();
        let mut got = Vec::new();
        let (mut at, mut k) = (0, 0);
        while at < stream.len() {
            let n = cuts[k % cuts.len()].min(stream.len() - at);
            s.push(&stream[at..at + n]).unwrap();
            at += n;
            k += 1;
            // Alternate the owned and the borrowing pop.
            loop {
                let p = if k % 2 == 0 { s.next_packet().unwrap() } else { s.next_packet_slice().unwrap().map(<[u8]>::to_vec) };
                match p {
                    Some(p) => got.push(p),
                    None => break,
                }
            }
        }
        prop_assert!(s.is_idle());
        prop_assert_eq!(got, encoded);
    }

    #[test]
    fn mutated_packets_never_panic(p in packet(), o in options(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut bytes = wire::encode(&p, &o).unwrap();
        for (at, v) in edits {
            let n = bytes.len();
            bytes[at % n] = v;
        }
        let _ = wire::decode(&bytes);
        let _ = wire::measure(&bytes);
        let cut = cut % (bytes.len() + 1);
        let _ = wire::decode(&bytes[..cut]);
        let mut s = StreamDecoder::new();
        let _ = s.push(&bytes);
        let _ = s.next_packet();
    }
}

/// A bounded, deterministic mutation sweep over the golden vectors (no panics, no huge
/// allocations: the process would abort on either).
#[test]
fn golden_vector_mutation_sweep_never_panics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/vectors/tenso");
    assert!(dir.is_dir(), "golden vectors missing at {}", dir.display());
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut count = 0;
    for sub in ["", "decode_only", "invalid"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) != Some("tenso") {
                continue;
            }
            let orig = std::fs::read(&p).unwrap();
            if orig.len() > 1 << 16 {
                continue;
            }
            for _ in 0..200 {
                let mut b = orig.clone();
                for _ in 0..(1 + next() % 4) {
                    let i = (next() as usize) % b.len().max(1);
                    if let Some(x) = b.get_mut(i) {
                        *x = match next() % 3 {
                            0 => next() as u8,
                            1 => 0xFF,
                            _ => *x ^ (1 << (next() % 8)),
                        };
                    }
                }
                let _ = wire::decode(&b);
                let _ = wire::measure(&b);
                count += 1;
            }
        }
    }
    assert!(count > 10_000);
}

#[test]
fn lying_lengths_do_not_allocate() {
    // A bundle entry declaring a 4 GiB value in a 30-byte packet: refused as too short.
    let mut b = b"TNSO\x04\x10\x00\x00\x01\x00".to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    let e = wire::decode(&b).unwrap_err();
    assert!(matches!(e.kind(), wire::ErrorKind::TooShort { needed, .. } if *needed > 1 << 32));
    // The stream decoder refuses it as soon as the length prefix arrives.
    let mut s = StreamDecoder::new();
    s.push(&b).unwrap();
    assert!(matches!(
        s.next_packet().unwrap_err().kind(),
        wire::ErrorKind::LimitExceeded { .. }
    ));
    // A compressed packet declaring 10^9 float64 with a tiny frame: refused before decompressing.
    let t = Tensor::new(DType::F64, vec![1], &[0u8; 8][..]).unwrap();
    let mut p = wire::encode(
        &Packet::Dense(t),
        &EncodeOptions {
            compress: true,
            ..Default::default()
        },
    )
    .unwrap();
    p[10..14].copy_from_slice(&1_000_000_000u32.to_le_bytes());
    let e = wire::decode(&p).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            wire::ErrorKind::LimitExceeded { .. } | wire::ErrorKind::DecompressedSize { .. }
        ),
        "{e}"
    );
}

#[test]
fn compressed_bundles_round_trip_and_can_be_made_tenso_readable() {
    let t = Tensor::from_values(vec![1024], &vec![0f32; 1024]).unwrap();
    let b = Packet::Bundle(Bundle::new().with("w", Packet::Dense(t)));
    let o = EncodeOptions {
        compress: true,
        ..Default::default()
    };
    let bytes = wire::encode(&b, &o).unwrap();
    assert!(bytes.len() < 200);
    assert_eq!(wire::decode(&bytes).unwrap(), b);
    let plain = wire::encode(
        &b,
        &EncodeOptions {
            compress_in_containers: false,
            ..o
        },
    )
    .unwrap();
    assert!(plain.len() > 4096);
    assert_eq!(wire::decode(&plain).unwrap(), b);
}

#[test]
fn oversized_entries_and_counts_are_refused_on_encode() {
    let t = || Packet::Dense(Tensor::from_values(vec![1], &[1u8]).unwrap());
    let mut b = Bundle::new();
    for i in 0..256 {
        b = b.with(format!("k{i}"), t());
    }
    let e = wire::encode(&Packet::Bundle(b), &EncodeOptions::default()).unwrap_err();
    assert!(e.to_string().contains("256 entries"), "{e}");
    let e = wire::encode(
        &t(),
        &EncodeOptions {
            alignment: 3,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("power of two"));
    let big = Tensor::new(DType::U8, vec![1 << 33], &[][..]);
    assert!(big.is_err());
}

#[test]
fn the_encoder_refuses_a_sparse_packet_the_decoder_would_refuse() {
    // Found by the bindings_packets fuzz target: a CSR matrix of shape [1, 3] with an indptr of
    // three entries (two expected) was encoded, and the default decode then refused the packet.
    use tensorlane_core::wire::{self, EncodeOptions, Packet, Sparse, SparseFormat};
    use tensorlane_core::{DType, Tensor};
    let data: Vec<u8> = [1.0f32, -2.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    let indices: Vec<u8> = [0i64, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    let bad_ptr: Vec<u8> = [0i64, 1, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    let good_ptr: Vec<u8> = [0i64, 2].iter().flat_map(|x| x.to_le_bytes()).collect();
    let csr = |ptr: &[u8]| {
        Packet::from(Sparse {
            format: SparseFormat::Csr,
            shape: vec![1, 3],
            components: [
                Tensor::new(DType::F32, vec![2], data.clone()).unwrap(),
                Tensor::new(DType::I64, vec![2], indices.clone()).unwrap(),
                Tensor::new(DType::I64, vec![(ptr.len() / 8) as u64], ptr.to_vec()).unwrap(),
            ],
        })
    };
    let e = wire::encode(&csr(&bad_ptr), &EncodeOptions::default()).unwrap_err();
    assert!(e.to_string().contains("indptr has 3 entries; expected 2"), "{e}");
    let ok = wire::encode(&csr(&good_ptr), &EncodeOptions::default()).unwrap();
    assert_eq!(wire::decode(&ok).unwrap(), csr(&good_ptr));
}
