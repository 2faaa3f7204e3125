//! Throughput of `core::stats` over 1 GiB of float32, bfloat16 and Q4_K data (both passes:
//! summary, then histogram with 64 bins), beside a memcpy of the same bytes.
//!
//! `cargo bench -p tensorlane-core --bench stats` (`STATS_BENCH_MIB` sets the size, default
//! 1024). `scripts/bench_stats.py` measures NumPy's `mean` + `std` + `histogram` on the same
//! shapes; BENCHMARKS.md (`## Stats`) has the figures.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tensorlane_core::DType;
use tensorlane_core::formats::ElementType;
use tensorlane_core::formats::ggml::GgmlType;
use tensorlane_core::stats::{HistogramAccumulator, Stats};

/// xorshift64: deterministic data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Roughly normal (sum of four uniforms, centred), as f32.
    fn normal(&mut self) -> f32 {
        let r = self.next();
        let u = |s: u32| ((r >> s) & 0xFFFF) as f32 / 65536.0;
        (u(0) + u(16) + u(32) + u(48) - 2.0) * 1.7
    }
}

fn f32_data(bytes: usize, rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes);
    while v.len() < bytes {
        v.extend_from_slice(&rng.normal().to_le_bytes());
    }
    v
}

fn bf16_data(bytes: usize, rng: &mut Rng) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes);
    while v.len() < bytes {
        v.extend_from_slice(&((rng.normal().to_bits() >> 16) as u16).to_le_bytes());
    }
    v
}

/// Q4_K blocks (144 bytes, 256 elements): random f16 scale and min, random 6-bit sub-block
/// scales and nibbles.
fn q4k_data(bytes: usize, rng: &mut Rng) -> Vec<u8> {
    let blocks = bytes / 144;
    let mut v = Vec::with_capacity(blocks * 144);
    for _ in 0..blocks {
        let d = half::f16::from_f32((rng.next() % 1000 + 1) as f32 * 2e-5).to_bits();
        let m = half::f16::from_f32((rng.next() % 1000) as f32 * 2e-5).to_bits();
        v.extend_from_slice(&d.to_le_bytes());
        v.extend_from_slice(&m.to_le_bytes());
        for _ in 0..(140 / 4) {
            v.extend_from_slice(&(rng.next() as u32).to_le_bytes());
        }
    }
    v
}

const CHUNK: usize = 4 << 20;

/// A benchmarked element type: name, type, data maker.
type Case = (&'static str, ElementType, fn(usize, &mut Rng) -> Vec<u8>);

/// Both passes, fed in 4 MiB pieces as `tensor_stats` does.
fn both_passes(ty: ElementType, data: &[u8]) -> u64 {
    let mut s = Stats::new(ty).unwrap();
    for c in data.chunks(CHUNK) {
        s.push(c);
    }
    let sum = s.summary();
    let mut h = HistogramAccumulator::from_summary(ty, &sum, 64).unwrap();
    for c in data.chunks(CHUNK) {
        h.push(c);
    }
    h.finish().counts.iter().sum::<u64>() + sum.count
}

fn pass1(ty: ElementType, data: &[u8]) -> u64 {
    let mut s = Stats::new(ty).unwrap();
    for c in data.chunks(CHUNK) {
        s.push(c);
    }
    s.summary().count
}

fn bench(c: &mut Criterion) {
    let mib: usize = std::env::var("STATS_BENCH_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let bytes = mib << 20;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut g = c.benchmark_group("stats");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(10));
    let cases: [Case; 3] = [
        ("f32", ElementType::Dense(DType::F32), f32_data),
        ("bf16", ElementType::Dense(DType::BF16), bf16_data),
        ("q4_k", ElementType::Ggml(GgmlType(12)), q4k_data),
    ];
    for (name, ty, make) in cases {
        let data = make(bytes, &mut rng);
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_function(format!("{name}/summary+histogram"), |b| {
            b.iter(|| both_passes(ty, black_box(&data)))
        });
        g.bench_function(format!("{name}/summary"), |b| b.iter(|| pass1(ty, black_box(&data))));
        let mut dst = vec![0u8; data.len()];
        g.bench_function(format!("{name}/memcpy"), |b| {
            b.iter(|| {
                dst.copy_from_slice(black_box(&data));
                black_box(&dst);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
