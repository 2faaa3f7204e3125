//! The Tenso wire codec at 4 KiB, 1 MiB and 64 MiB of float32, against the physical limits
//! (memcpy, XXH3) and a peer format (the `safetensors` crate).
//!
//! ```text
//! cargo bench -p tensorlane --bench wire -- --warm-up-time 1 --measurement-time 2
//! ```

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensorlane_core::wire::{self, EncodeOptions, Packet};
use tensorlane_core::{DType, Tensor};

const SIZES: [(&str, usize); 3] = [("4KiB", 4 << 10), ("1MiB", 1 << 20), ("64MiB", 64 << 20)];

/// float32 values with some structure (a slow ramp with a repeating wobble): LZ4 finds matches
/// but cannot collapse the body, as with real weights after a cast.
fn values(nbytes: usize) -> Vec<u8> {
    let n = nbytes / 4;
    let mut out = Vec::with_capacity(nbytes);
    for i in 0..n {
        let v = (i / 64) as f32 * 0.25 + [0.0f32, 0.5, -0.5, 1.0][i % 4];
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn variants() -> [(&'static str, EncodeOptions); 3] {
    [
        ("plain", EncodeOptions::default()),
        (
            "integrity",
            EncodeOptions {
                integrity: true,
                ..EncodeOptions::default()
            },
        ),
        (
            "lz4",
            EncodeOptions {
                compress: true,
                ..EncodeOptions::default()
            },
        ),
    ]
}

fn bench(c: &mut Criterion) {
    for (label, nbytes) in SIZES {
        let data = values(nbytes);
        let tensor = Tensor::new(DType::F32, vec![(nbytes / 4) as u64], data.as_slice()).unwrap();
        let packet = Packet::Dense(tensor.clone());
        let mut g = c.benchmark_group(format!("wire/{label}"));
        g.throughput(Throughput::Bytes(nbytes as u64));
        if nbytes >= 64 << 20 {
            g.sample_size(10);
        }
        for (name, opts) in variants() {
            g.bench_function(BenchmarkId::new("encode_vec", name), |b| {
                b.iter(|| black_box(wire::encode(black_box(&packet), &opts).unwrap()))
            });
            // The same into a reused buffer: no fresh allocation (and no page faults) per packet.
            let mut out = Vec::new();
            g.bench_function(BenchmarkId::new("encode_into_reused", name), |b| {
                b.iter(|| {
                    out.clear();
                    wire::encode_into(black_box(&packet), &opts, &mut out).unwrap();
                    black_box(&out);
                })
            });
            g.bench_function(BenchmarkId::new("encode_parts", name), |b| {
                b.iter(|| black_box(wire::encode_parts(black_box(&tensor), &opts).unwrap()))
            });
            let encoded = wire::encode(&packet, &opts).unwrap();
            g.bench_function(BenchmarkId::new("decode", name), |b| {
                b.iter(|| black_box(wire::decode(black_box(&encoded)).unwrap()))
            });
        }
        // Physical limits: one memcpy of the body, one XXH3 pass over it.
        let mut dst = vec![0u8; nbytes];
        g.bench_function("limit/memcpy", |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&data));
                black_box(&dst);
            })
        });
        // tensorlane_core::hash (run-time AVX2/SSE2/NEON) beside xxhash-rust built for the
        // target's baseline (SSE2 on x86-64), which the core used before.
        g.bench_function("limit/xxh3_64", |b| {
            b.iter(|| black_box(tensorlane_core::hash::xxh3_64(black_box(&data))))
        });
        g.bench_function("limit/xxh3_64 xxhash-rust baseline", |b| {
            b.iter(|| black_box(xxhash_rust::xxh3::xxh3_64(black_box(&data))))
        });
        // Peer: safetensors with the same tensor.
        let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![nbytes / 4], &data).unwrap();
        g.bench_function("safetensors/serialize", |b| {
            b.iter(|| black_box(safetensors::serialize([("x", &view)], None).unwrap()))
        });
        let st = safetensors::serialize([("x", &view)], None).unwrap();
        g.bench_function("safetensors/deserialize", |b| {
            b.iter(|| {
                let s = safetensors::SafeTensors::deserialize(black_box(&st)).unwrap();
                black_box(s.tensor("x").unwrap().data().len())
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
