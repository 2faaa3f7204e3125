//! Device-transfer figures for BENCHMARKS.md: host weight tiers (RAM, page cache, O_DIRECT disk)
//! and, with `--features wgpu`, upload/download bandwidth on the wgpu adapter (lavapipe in CI);
//! with `--features cuda`, host-to-device bandwidth by memory kind (pinned, write-combined,
//! pageable) and chunk size, timed with CUDA events — the numbers a device profile's
//! `h2d_pinned_gbps` / `h2d_pageable_gbps` / `h2d_latency_us` are calibrated from.
//!
//! `cargo run --release -p tensorlane-offload --features wgpu --example device_bench [FILE_MIB]`
//! `cargo run --release -p tensorlane-offload --features cuda --example device_bench [FILE_MIB]`

use tensorlane_offload::device::tiers;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = std::env::args().nth(1).map_or(Ok(256), |s| s.parse())?;
    let path = std::env::temp_dir().join(format!("tensorlane-device-bench-{}", std::process::id()));
    let dir = std::env::var_os("TENSORLANE_BENCH_DIR").map(std::path::PathBuf::from);
    let path = dir.map_or(path, |d| d.join("tensorlane-device-bench.bin"));
    let data: Vec<u8> = (0..mib << 20)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
        .collect();
    std::fs::write(&path, &data)?;
    drop(data);
    println!("tiers: {} MiB file at {}", mib, path.display());
    for chunk in [1usize << 20, 8 << 20, 32 << 20] {
        for r in tiers::probe(&path, chunk)? {
            println!(
                "  {:<10} chunk {:>3} MiB: {:>6.2} GB/s{}",
                r.tier.name(),
                chunk >> 20,
                r.gbps,
                r.note.map(|n| format!("  ({n})")).unwrap_or_default()
            );
        }
    }
    std::fs::remove_file(&path)?;

    #[cfg(feature = "cuda")]
    {
        use tensorlane_offload::device::cuda::{CudaDevice, HostMem};
        match CudaDevice::new(0) {
            Err(e) => println!("cuda: {e}"),
            Ok(dev) => {
                println!("cuda: {}", dev.name()?);
                let chunks = [64usize << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
                let kinds = [HostMem::Pinned, HostMem::WriteCombined, HostMem::Pageable];
                for r in dev.probe_h2d(1 << 30, &chunks, &kinds)? {
                    println!(
                        "  H2D {:<14} chunk {:>9} B: {:>6.2} GB/s",
                        r.kind.name(),
                        r.chunk,
                        r.gbps
                    );
                }
            }
        }
    }

    #[cfg(feature = "wgpu")]
    {
        use tensorlane_offload::device::wgpu::{DEFAULT_CHUNK, DEFAULT_SLOTS, GpuDevice};
        for (slots, chunk) in [(DEFAULT_SLOTS, DEFAULT_CHUNK), (4, 32 << 20)] {
            let dev = GpuDevice::with_staging(slots, chunk)?;
            println!(
                "wgpu: {} ({}, {}), staging {slots} x {} MiB",
                dev.adapter().name,
                dev.adapter().device_type,
                dev.adapter().driver,
                chunk >> 20
            );
            for size in [1usize << 20, 16 << 20, 64 << 20, 256 << 20] {
                let bw = dev.measure_bandwidth(size, 3)?;
                println!(
                    "  {:>4} MiB: upload {:>6.2} GB/s, download {:>6.2} GB/s",
                    size >> 20,
                    bw.upload_gbps,
                    bw.download_gbps
                );
            }
        }
        let dev = GpuDevice::new()?;
        let (m, k, n) = (512u32, 512u32, 512u32);
        let a = dev.upload(&vec![0u8; (m * k * 4) as usize])?;
        let b = dev.upload(&vec![0u8; (k * n * 4) as usize])?;
        let c = dev.matmul_f32(&a, &b, m, k, n)?;
        dev.synchronize()?;
        let t = std::time::Instant::now();
        for _ in 0..5 {
            dev.matmul_f32_into(&a, &b, &c, m, k, n)?;
        }
        dev.synchronize()?;
        let s = t.elapsed().as_secs_f64() / 5.0;
        println!(
            "  matmul f32 {m}x{k}x{n}: {:.1} ms, {:.2} GFLOP/s",
            s * 1e3,
            2.0 * (m * k * n) as f64 / s / 1e9
        );
    }
    Ok(())
}
