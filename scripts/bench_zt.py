#!/usr/bin/env python3
"""`.zt` open and read-all: tensorlane vs ztensor 2.1.2 vs safetensors vs numpy, in one run.

    python3 scripts/bench_zt.py [--dir /tmp/zt_read_bench] [--iters 7] [--passes 3]
                                [--st-python PY] [--zt-python PY] [--write-md BENCHMARKS.md]
                                [--cleanup]

* Data: `zt_read_bench gen DIR` (release build of native/examples/zt_read_bench.rs) writes a
  Llama-3.2-1B-shaped model (146 bf16 tensors, 2.47 GB) as `llama.zt` (tensorlane's canonical
  writer), `llama.safetensors` and `npy/<name>.npy` (same bytes), plus `small.zt` / `tiny.zt`
  for open latency. Skipped when the files are already there.
* tensorlane: `zt_read_bench bench DIR ITERS` (Rust: `Reader::open` latency; read-all over the
  mmap touching every byte, vs memcpy / sum / pread of the same file in the same run).
* Python, each in its own process, `--passes` passes each, median: ztensor `ztensor.open(path)`
  then `np.frombuffer(memoryview(t), np.uint64).sum()` for every tensor (zero-copy view of its
  mapping); safetensors `safe_open(path, framework="numpy")` then `get_tensor(name)` for every
  name, same sum; numpy `np.load(path, mmap_mode="r")` of every `.npy`, same sum; and a numpy
  baseline: `np.memmap` of the whole `.zt` file, one sum. "Touch every byte" is the same
  wrapping u64 sum everywhere; the Python workers check that they agree on the checksum.
* Warm page cache: every measurement (the Rust example and each Python worker) is run twice and
  the second run is reported.

--zt-python defaults to the venv of tests/python/setup_zt_venv.sh (ztensor 2.1.2, numpy,
ml_dtypes); --st-python (safetensors, numpy, ml_dtypes: safetensors' numpy backend needs
ml_dtypes for BF16) defaults to this interpreter. Prints markdown tables; --write-md appends
them, with the machine and the command, as a section of the given file. --cleanup deletes DIR.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## .zt open and read"
EXE = os.path.join(ROOT, "target", "release", "examples", "zt_read_bench")

COMMON = r"""
import json, os, statistics, sys, time
import numpy as np
MASK = (1 << 64) - 1
def touch(buf):
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(a) // 8 * 8
    s = int(a[:n].view(np.uint64).sum(dtype=np.uint64)) + int(a[n:].sum())
    return s & MASK
def arr(x):  # an ndarray of any dtype, as its raw bytes (no copy)
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)
d, passes = sys.argv[1], int(sys.argv[2])
def run(f):
    times, out = [], None
    for _ in range(passes):
        t = time.perf_counter(); out = f(); times.append(time.perf_counter() - t)
    return statistics.median(times), out
def open_time(f, n=201):
    v = []
    for _ in range(n):
        t = time.perf_counter(); f(); v.append(time.perf_counter() - t)
    return statistics.median(v)
"""

WORKERS = {
    "ztensor": COMMON + r"""
import ztensor
from importlib.metadata import version
def read_all():
    src = ztensor.open(os.path.join(d, "llama.zt"))
    s = n = 0
    for name in src.keys():
        m = memoryview(src[name])
        s += touch(m); n += m.nbytes
    return s & MASK, n
t, (s, n) = run(read_all)
opens = {k: open_time(lambda: ztensor.open(os.path.join(d, k + ".zt"))) for k in ("llama", "small", "tiny")}
print(json.dumps({"what": "ztensor " + version("ztensor"), "s": t, "bytes": n, "checksum": "%016x" % s,
                  "open_us": {k: v * 1e6 for k, v in opens.items()}}))
""",
    "safetensors": COMMON + r"""
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy: safetensors' numpy backend needs it)
from safetensors import safe_open
import safetensors
path = os.path.join(d, "llama.safetensors")
def read_all():
    s = n = 0
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            a = arr(f.get_tensor(name))
            s += touch(a); n += a.nbytes
    return s & MASK, n
t, (s, n) = run(read_all)
def op():
    with safe_open(path, framework="numpy") as f:
        f.keys()
print(json.dumps({"what": "safetensors " + safetensors.__version__, "s": t, "bytes": n, "checksum": "%016x" % s,
                  "open_us": {"llama": open_time(op) * 1e6}}))
""",
    "numpy": COMMON + r"""
npy = os.path.join(d, "npy")
names = sorted(os.listdir(npy))
def read_all():
    s = n = 0
    for name in names:
        a = arr(np.load(os.path.join(npy, name), mmap_mode="r"))
        s += touch(a); n += a.nbytes
    return s & MASK, n
t, (s, n) = run(read_all)
print(json.dumps({"what": "numpy " + np.__version__, "s": t, "bytes": n, "checksum": "%016x" % s}))
""",
    "numpy_memmap_file": COMMON + r"""
path = os.path.join(d, "llama.zt")
def read_all():
    a = np.memmap(path, dtype=np.uint8, mode="r")
    return touch(a), a.nbytes
t, (s, n) = run(read_all)
print(json.dumps({"what": "numpy memmap whole file", "s": t, "bytes": n, "checksum": "%016x" % s}))
""",
}


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, **kw)


def twice(cmd):
    """Runs cmd twice (the first warms the page cache); the second run's JSON."""
    sh(cmd, stdout=subprocess.DEVNULL)
    return json.loads(sh(cmd, stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1])


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.0f GiB" % (int(f.readline().split()[1]) / 2**20)
    except OSError:
        pass
    load = "%.1f %.1f %.1f" % os.getloadavg()
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} vCPU, {mem} RAM, load average {load}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/tmp/zt_read_bench")
    ap.add_argument("--iters", type=int, default=7, help="passes of the Rust read-all (median)")
    ap.add_argument("--passes", type=int, default=3, help="passes of each Python read-all (median)")
    ap.add_argument("--st-python", default=sys.executable, help="python with safetensors, numpy, ml_dtypes")
    ap.add_argument("--zt-python", default=None, help="python with ztensor 2.1.2 (default: setup_zt_venv.sh)")
    ap.add_argument("--write-md", default=None, help="append the tables to this markdown file")
    ap.add_argument("--cleanup", action="store_true", help="delete --dir at the end")
    args = ap.parse_args()

    zt_py = args.zt_python
    if zt_py is None:
        out = sh(["bash", os.path.join(ROOT, "tests", "python", "setup_zt_venv.sh")], stdout=subprocess.PIPE, text=True)
        zt_py = out.stdout.strip().splitlines()[-1]
    sh(["cargo", "build", "-q", "--release", "-p", "tensorlane", "--example", "zt_read_bench"], cwd=ROOT)
    d = args.dir
    if not all(os.path.exists(os.path.join(d, f)) for f in ("llama.zt", "llama.safetensors", "small.zt", "tiny.zt")):
        os.makedirs(d, exist_ok=True)
        sh([EXE, "gen", d])

    rust = twice([EXE, "bench", d, str(args.iters)])
    py = {}
    for name, interp in (("ztensor", zt_py), ("safetensors", args.st_python), ("numpy", args.st_python),
                         ("numpy_memmap_file", args.st_python)):
        py[name] = twice([interp, "-c", WORKERS[name], d, str(args.passes)])
    sums = {py[k]["checksum"] for k in ("ztensor", "safetensors", "numpy")} | {rust["checksum"]}
    assert len(sums) == 1, f"checksums differ: {py} {rust['checksum']}"
    assert py["ztensor"]["bytes"] == py["safetensors"]["bytes"] == py["numpy"]["bytes"] == rust["payload_bytes"]

    memcpy_gbps = rust["baseline_memcpy_gbps"]
    tl_gbps = rust["read_zt_mapped_gbps"]
    rows = [
        ("page-cache baseline: `memcpy` of the whole mapped file into a preallocated buffer (Rust)",
         rust["baseline_memcpy_s"], memcpy_gbps),
        ("page-cache baseline: one sequential u64 sum over the whole mapping (Rust)",
         rust["baseline_sum_mapped_s"], rust["baseline_sum_mapped_gbps"]),
        ("page-cache baseline: `pread` of the whole file into a preallocated buffer (Rust)",
         rust["baseline_pread_s"], rust["baseline_pread_gbps"]),
        ("**tensorlane** `Reader::tensor` view + sum, all 146 tensors (mapping kept)",
         rust["read_zt_mapped_s"], tl_gbps),
        ("tensorlane `MmapSource::open` + `Reader::open` + read-all (fresh mapping each pass)",
         rust["read_zt_fresh_map_s"], rust["read_zt_fresh_map_gbps"]),
        ("same sum over a fresh mapping of the whole file (Rust)",
         rust["baseline_sum_fresh_map_s"], rust["baseline_sum_fresh_map_gbps"]),
        (f"Python baseline: `np.memmap` of the whole `.zt`, one sum ({py['numpy_memmap_file']['what']})",
         py["numpy_memmap_file"]["s"], py["numpy_memmap_file"]["bytes"] / py["numpy_memmap_file"]["s"] / 1e9),
        (f"{py['ztensor']['what']}: `ztensor.open` + `memoryview(t)` sum, all tensors",
         py["ztensor"]["s"], py["ztensor"]["bytes"] / py["ztensor"]["s"] / 1e9),
        (f"{py['safetensors']['what']}: `safe_open(framework=\"numpy\")` + `get_tensor` sum, all tensors",
         py["safetensors"]["s"], py["safetensors"]["bytes"] / py["safetensors"]["s"] / 1e9),
        (f"{py['numpy']['what']}: `np.load(mmap_mode=\"r\")` of 146 `.npy` + sum",
         py["numpy"]["s"], py["numpy"]["bytes"] / py["numpy"]["s"] / 1e9),
    ]
    lines = [
        "| read-all, warm page cache | time | GB/s | vs memcpy | vs tensorlane |",
        "|---|---:|---:|---:|---:|",
    ]
    for what, s, g in rows:
        lines.append(f"| {what} | {s * 1e3:.0f} ms | {g:.2f} | {g / memcpy_gbps:.2f}× | {g / tl_gbps:.2f}× |")
    read_table = "\n".join(lines)

    zo = py["ztensor"]["open_us"]
    lines = [
        "| open, warm | `llama.zt` (146 tensors, 2.47 GB) | `small.zt` (146 tensors, 9.7 MB) | `tiny.zt` (1 tensor, 131 kB) |",
        "|---|---:|---:|---:|",
        "| tensorlane `Reader::open` (already mapped) | {:.0f} µs | {:.0f} µs | {:.1f} µs |".format(
            rust["open_llama_reader_open_us"], rust["open_small_reader_open_us"], rust["open_tiny_reader_open_us"]),
        "| tensorlane `MmapSource::open` + `Reader::open` | {:.0f} µs | {:.0f} µs | {:.1f} µs |".format(
            rust["open_llama_mmap_plus_reader_open_us"], rust["open_small_mmap_plus_reader_open_us"],
            rust["open_tiny_mmap_plus_reader_open_us"]),
        "| {} `ztensor.open` (Python) | {:.0f} µs | {:.0f} µs | {:.0f} µs |".format(
            py["ztensor"]["what"], zo["llama"], zo["small"], zo["tiny"]),
        "| {} `safe_open` (Python, `.safetensors`) | {:.0f} µs | – | – |".format(
            py["safetensors"]["what"], py["safetensors"]["open_us"]["llama"]),
    ]
    open_table = "\n".join(lines)
    ratio_sum = rust["ratio_zt_vs_sum_mapped"]
    ratio_cpy = rust["ratio_zt_vs_memcpy"]
    summary = (
        f"checksum {rust['checksum']} (all readers agree), payload {rust['payload_bytes']} bytes, "
        f"file {rust['file_bytes']} bytes. tensorlane read-all / memcpy = {ratio_cpy:.2f}×, "
        f"/ sequential sum = {ratio_sum:.2f}×, / pread = {rust['ratio_zt_vs_pread']:.2f}×; "
        f"fresh mapping: / fresh-mapping sum = {rust['ratio_zt_vs_sum_fresh_map']:.2f}×. "
        f"Open (llama.zt): {rust['open_llama_reader_open_us']:.0f} µs."
    )
    print(open_table + "\n\n" + read_table + "\n\n" + summary)
    print(json.dumps({"rust": rust, "python": py}), file=sys.stderr)

    if args.write_md:
        cmd = "python3 scripts/bench_zt.py " + " ".join(sys.argv[1:])
        with open(args.write_md, "a") as f:
            f.write(f"\n{SECTION}\n\nMachine: {machine()}.\n\nReproduce: `{cmd}`\n\n"
                    f"{open_table}\n\n{read_table}\n\n{summary}\n")
    if args.cleanup:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
