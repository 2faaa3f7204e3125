"""NumPy's side of the stats benchmark (BENCHMARKS.md, `## Stats`): GB/s of
`mean` + `std` + `histogram(bins=64)` over the same data shapes as `core/benches/stats.rs`
(float32, bfloat16 and Q4_K blocks, 1 GiB of stored bytes each).

    tests/.venv-formats/bin/python scripts/bench_stats.py [--mib 1024] [--q4k-mib 128] [--runs 3]

(`bash tests/python/setup_formats_venv.sh` makes the venv: numpy, ml_dtypes, gguf.)

What is timed, per dtype, on the stored bytes:
  float32   x.mean(dtype=float64), x.std(dtype=float64), np.histogram(x, bins=64)
            (f64 accumulation, as core::stats; the histogram's range is min/max of the data)
  bfloat16  x = bytes viewed as ml_dtypes.bfloat16 .astype(float32), then the same
  Q4_K      x = gguf.quants.dequantize(bytes, Q4_K) (float32), then the same
NaN handling is not timed (the data are finite; core::stats checks for it on every value).
Throughput is stored bytes / best-of-runs seconds. Q4_K dequantizes to 7x its size in float32,
so it runs on --q4k-mib MiB (default 128, about 0.9 GiB of float32) to fit in memory.
"""
import argparse
import platform
import time

import ml_dtypes
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants


def stats(x: np.ndarray):
    m = x.mean(dtype=np.float64)
    s = x.std(dtype=np.float64)
    h = np.histogram(x, bins=64)
    return m, s, h


def f32_bytes(rng, nbytes):
    return (rng.standard_normal(nbytes // 4, dtype=np.float32)).view(np.uint8)


def bf16_bytes(rng, nbytes):
    return rng.standard_normal(nbytes // 2, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint8)


def q4k_bytes(rng, nbytes):
    n = nbytes // 144
    blocks = rng.integers(0, 256, size=(n, 144), dtype=np.uint8)
    d = (rng.integers(1, 1001, size=n) * 2e-5).astype(np.float16)
    mn = (rng.integers(0, 1000, size=n) * 2e-5).astype(np.float16)
    blocks[:, 0:2] = d.view(np.uint8).reshape(n, 2)
    blocks[:, 2:4] = mn.view(np.uint8).reshape(n, 2)
    return blocks.reshape(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--q4k-mib", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = [
        ("float32", a.mib, f32_bytes, lambda b: b.view(np.float32)),
        ("bfloat16", a.mib, bf16_bytes, lambda b: b.view(ml_dtypes.bfloat16).astype(np.float32)),
        ("Q4_K", a.q4k_mib, q4k_bytes, lambda b: quants.dequantize(b, Q.Q4_K)),
    ]
    print(f"numpy {np.__version__}, Python {platform.python_version()}, {platform.machine()}")
    print("| dtype | stored bytes | numpy mean+std+histogram | GB/s |")
    print("|---|---:|---:|---:|")
    for name, mib, make, values in cases:
        b = make(rng, mib << 20)
        best = float("inf")
        for _ in range(a.runs):
            t = time.perf_counter()
            stats(values(b))
            best = min(best, time.perf_counter() - t)
        print(f"| {name} | {b.nbytes / 2**20:.0f} MiB | {best * 1e3:.0f} ms | {b.nbytes / best / 1e9:.2f} |", flush=True)
        del b


if __name__ == "__main__":
    main()
