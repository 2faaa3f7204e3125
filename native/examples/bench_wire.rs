//! Times tensorlane's Tenso codec the way scripts/bench_tenso.py times tenso 0.24.0, and prints JSON.
//!
//! ```text
//! cargo run --release -p tensorlane --example bench_wire -- \
//!     [--sizes 4096,1048576,67108864] [--configs plain,integrity,compress] [--runs 20] [--warmup 3]
//! ```
//!
//! For each float32 body size (bytes) and configuration it reports the median seconds of:
//! `encode` (a fresh buffer, like `tenso.dumps`: the host library's `tensorlane::wire::encode`,
//! huge pages from 4 MiB on Linux), `decode` of the encoded `Vec` (like `tenso.loads(dumps(x))`;
//! tensorlane returns a view whatever the address), `decode_aligned` of a 64-byte-aligned copy,
//! and `decode_copy` (decode into owned memory, like `tenso.loads(..., copy=True)`:
//! `tensorlane::wire::decode_owned`). Beside them: `encode_core` and `decode_copy_core` (the
//! no_std core's `wire::encode` and `decode(..).into_owned()`, a fresh `Vec` from the global
//! allocator) and `encode_into_reused` (`wire::encode_into` a buffer kept across calls).
//! Beside each size, the limits of an integrity pass: XXH3 alone over the body, a memcpy of it,
//! and `wire::verify` (decode's checks with the footer, no packet built), each against XXH3 in
//! alternating pairs.
//! Data: uniform random float32 from a fixed seed.

use std::hint::black_box;
use std::time::Instant;

use tensorlane_core::wire::{self, DecodeOptions, EncodeOptions, Packet};
use tensorlane_core::{DType, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median time of one call of `f` over `runs` samples. A sample times enough calls to last
/// at least 200 µs and divides: timing a 100 ns call on its own would mostly measure the clock
/// (a clock read costs tens of ns on a VM).
fn time<F: FnMut()>(runs: usize, warmup: usize, mut f: F) -> f64 {
    for _ in 0..warmup {
        f();
    }
    let t = Instant::now();
    f();
    let once = t.elapsed().as_secs_f64().max(1e-9);
    let calls = ((200e-6 / once).ceil() as usize).clamp(1, 1_000_000);
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..calls {
                    f();
                }
                t.elapsed().as_secs_f64() / calls as f64
            })
            .collect(),
    )
}

fn random_f32_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let v = (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// A copy of `bytes` whose first byte sits at a 64-byte-aligned address.
struct Aligned {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(bytes: &[u8]) -> Self {
        let mut buf = vec![0u8; bytes.len() + 64];
        let off = (64 - buf.as_ptr() as usize % 64) % 64;
        buf[off..off + bytes.len()].copy_from_slice(bytes);
        Aligned {
            buf,
            off,
            len: bytes.len(),
        }
    }
    fn get(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = arg(&args, "--sizes")
        .unwrap_or_else(|| "4096,1048576,67108864".into())
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes: comma-separated byte counts"))
        .collect();
    let configs: Vec<String> = arg(&args, "--configs")
        .unwrap_or_else(|| "plain,integrity,compress".into())
        .split(',')
        .map(String::from)
        .collect();
    let runs: usize = arg(&args, "--runs").map_or(20, |s| s.parse().expect("--runs"));
    let warmup: usize = arg(&args, "--warmup").map_or(3, |s| s.parse().expect("--warmup"));

    let mut rows = Vec::new();
    for &size in &sizes {
        let n = size / 4;
        let data = random_f32_bytes(n, 0x5EED ^ size as u64);
        let t = Tensor::new(DType::F32, vec![n as u64], data.as_slice()).unwrap();
        let packet = Packet::Dense(t);
        // fewer repetitions for big bodies keep a full run in minutes on a small machine
        let (runs, warmup) = if size >= 32 << 20 {
            (runs.clamp(3, 7), warmup.min(1))
        } else {
            (runs, warmup)
        };
        for config in &configs {
            let opts = EncodeOptions {
                integrity: config.contains("integrity"),
                compress: config.contains("compress"),
                ..EncodeOptions::default()
            };
            let encoded = wire::encode(&packet, &opts).unwrap();
            let aligned = Aligned::new(&encoded);
            let encode = time(runs, warmup, || {
                black_box(tensorlane::wire::encode(black_box(&packet), &opts).unwrap());
            });
            let encode_core = time(runs, warmup, || {
                black_box(wire::encode(black_box(&packet), &opts).unwrap());
            });
            let mut reused = Vec::new();
            let encode_into_reused = time(runs, warmup, || {
                reused.clear();
                wire::encode_into(black_box(&packet), &opts, &mut reused).unwrap();
                black_box(&reused);
            });
            let decode = time(runs, warmup, || {
                black_box(wire::decode(black_box(&encoded)).unwrap());
            });
            let decode_aligned = time(runs, warmup, || {
                black_box(wire::decode(black_box(aligned.get())).unwrap());
            });
            let decode_copy = time(runs, warmup, || {
                black_box(tensorlane::wire::decode_owned(black_box(&encoded), &DecodeOptions::default()).unwrap());
            });
            let decode_copy_core = time(runs, warmup, || {
                black_box(wire::decode(black_box(&encoded)).unwrap().into_owned());
            });
            let p = wire::decode(&encoded).unwrap();
            let view = p.as_dense().is_some_and(|d| d.is_view());
            rows.push(format!(
                "{{\"size\": {size}, \"config\": \"{config}\", \"packet_len\": {}, \"runs\": {runs}, \"warmup\": {warmup}, \
                 \"encode_s\": {encode:e}, \"decode_s\": {decode:e}, \"decode_aligned_s\": {decode_aligned:e}, \
                 \"decode_copy_s\": {decode_copy:e}, \"decode_is_view\": {view}, \"encode_core_s\": {encode_core:e}, \
                 \"decode_copy_core_s\": {decode_copy_core:e}, \"encode_into_reused_s\": {encode_into_reused:e}}}",
                encoded.len()
            ));
        }
        // The limits an integrity pass cannot beat: XXH3 alone over the body (the core's
        // run-time-dispatched hash and xxhash-rust built for the target's baseline), and one
        // memcpy of it.
        let xxh3 = time(runs, warmup, || {
            black_box(tensorlane_core::hash::xxh3_64(black_box(&data)));
        });
        let xxh3_baseline = time(runs, warmup, || {
            black_box(xxhash_rust::xxh3::xxh3_64(black_box(&data)));
        });
        // The bar's ratio, timed in pairs: a sample of the integrity decode, then one of XXH3
        // alone, round after round, so both see the same clock speed and neighbours (this
        // machine's speed drifts by up to 1.5x between seconds; two medians taken a minute apart
        // compare those states, not the code). Median of the per-round ratios.
        let with_footer = wire::encode(&packet, &EncodeOptions { integrity: true, ..EncodeOptions::default() }).unwrap();
        let with_footer = Aligned::new(&with_footer);
        // The same for `wire::verify`, the integrity check that builds no packet.
        let opts = DecodeOptions::default();
        let (mut ratios, mut verify_ratios) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(9) {
            let decode = time(1, 1, || {
                black_box(wire::decode(black_box(with_footer.get())).unwrap());
            });
            let hash = time(1, 1, || {
                black_box(tensorlane_core::hash::xxh3_64(black_box(&data)));
            });
            let verify = time(1, 1, || {
                black_box(wire::verify(black_box(with_footer.get()), &opts).unwrap());
            });
            ratios.push(hash / decode);
            verify_ratios.push(hash / verify);
        }
        let median_of = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let paired_ratio = median_of(ratios);
        let verify_paired_ratio = median_of(verify_ratios);
        let verify = time(runs, warmup, || {
            black_box(wire::verify(black_box(with_footer.get()), &opts).unwrap());
        });
        let mut dst = vec![0u8; data.len()];
        let memcpy = time(runs, warmup, || {
            dst.copy_from_slice(black_box(&data));
            black_box(&dst);
        });
        rows.push(format!(
            "{{\"size\": {size}, \"config\": \"limit\", \"xxh3_s\": {xxh3:e}, \"xxh3_baseline_s\": {xxh3_baseline:e}, \
             \"memcpy_s\": {memcpy:e}, \"xxh3_over_verify_paired\": {paired_ratio:.4}, \"wire_verify_s\": {verify:e}, \
             \"xxh3_over_wire_verify_paired\": {verify_paired_ratio:.4}, \"xxh3_impl\": \"{}\"}}",
            tensorlane_core::hash::IMPLEMENTATION
        ));
    }
    println!(
        "{{\"implementation\": \"tensorlane-core {}\", \"results\": [\n  {}\n]}}",
        env!("CARGO_PKG_VERSION"),
        rows.join(",\n  ")
    );
}
