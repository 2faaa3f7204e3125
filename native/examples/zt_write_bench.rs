//! `.zt` write throughput: a canonical write of ~1 GB of tensors vs a plain `write` of the same
//! bytes (BENCHMARKS.md, section ".zt write").
//!
//!     cargo run --release -p tensorlane --example zt_write_bench -- [DIR] [TOTAL_MIB] [TENSOR_MIB]
//!
//! Writes TOTAL_MIB (default 1024) as tensors of TENSOR_MIB (default 16) into DIR (default the
//! system temp dir), five rounds, alternating: (1) plain `File::write_all` of each tensor, (2)
//! tensorlane canonical `.zt` (`ZtFile::create`: xxh3 digest + dedup hash of every part, 64 KiB
//! placement, manifest, footer), (3) plain write + fsync, (4) `ZtFile::publish` (temp name,
//! fsync, rename). Prints the median wall time and GB/s of each and the ratios, as JSON.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use tensorlane::zt_write::{DenseItem, ZtFile};
use tensorlane_core::DType;
use tensorlane_core::zt::writer::Options;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    let total_mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let tensor_mib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16);
    let n = total_mib / tensor_mib;
    let len = tensor_mib << 20;
    // Distinct tensors (no sharing), deterministic, not all-zero.
    let tensors: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut s = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (0..len / 8)
                .flat_map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s.to_le_bytes()
                })
                .collect()
        })
        .collect();
    let names: Vec<String> = (0..n).map(|i| format!("layer.{i:04}.weight")).collect();
    let bytes = (n * len) as f64;
    let plain = dir.join("zt_write_bench.plain");
    let zt = dir.join("zt_write_bench.zt");

    let run_plain = |sync: bool| {
        let t = Instant::now();
        let mut f = File::create(&plain).unwrap();
        for x in &tensors {
            f.write_all(x).unwrap();
        }
        if sync {
            f.sync_all().unwrap();
        }
        drop(f);
        let s = t.elapsed().as_secs_f64();
        std::fs::remove_file(&plain).unwrap();
        s
    };
    let run_zt = |publish: bool| {
        let t = Instant::now();
        let mut w = if publish {
            ZtFile::publish(&zt, Options::default())
        } else {
            ZtFile::create(&zt, Options::default())
        }
        .unwrap();
        // add_many hashes the next tensor on a second thread while this one is written.
        let shapes: Vec<[u64; 1]> = tensors.iter().map(|x| [(x.len() / 4) as u64]).collect();
        let items: Vec<DenseItem<'_>> = names
            .iter()
            .zip(&tensors)
            .zip(&shapes)
            .map(|((name, x), shape)| DenseItem {
                name,
                dtype: DType::F32,
                shape,
                data: x,
            })
            .collect();
        w.add_many(&items).unwrap();
        w.finish().unwrap();
        let s = t.elapsed().as_secs_f64();
        std::fs::remove_file(&zt).unwrap();
        s
    };
    // Warm-up.
    run_plain(false);
    run_zt(false);
    let (mut p, mut z, mut ps, mut zs) = (vec![], vec![], vec![], vec![]);
    for _ in 0..5 {
        p.push(run_plain(false));
        z.push(run_zt(false));
        ps.push(run_plain(true));
        zs.push(run_zt(true));
    }
    let (p, z, ps, zs) = (median(p), median(z), median(ps), median(zs));
    let gbs = |s: f64| bytes / s / 1e9;
    println!(
        "{}",
        serde_json::json!({
            "payload_bytes": n * len, "tensors": n, "tensor_bytes": len,
            "plain_write_s": p, "plain_write_gbps": gbs(p),
            "zt_canonical_s": z, "zt_canonical_gbps": gbs(z), "ratio_zt_vs_plain": p / z,
            "plain_write_fsync_s": ps, "plain_write_fsync_gbps": gbs(ps),
            "zt_publish_fsync_s": zs, "zt_publish_fsync_gbps": gbs(zs), "ratio_publish_vs_plain_fsync": ps / zs,
        })
    );
}
