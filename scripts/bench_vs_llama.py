"""Prefill and decode speed of tensorlane's CPU executor beside llama.cpp (node-llama-cpp 3.21.1,
tests/llama/bench.mjs), alternating in the same run; run by scripts/bench_vs_llama.sh, which
builds the release binaries and writes the models. Prints a Markdown table.

    bench_vs_llama.py [--rounds N] [--prompt P] [--decode D] [--threads 1,2] MODEL.gguf...

For each model and thread count, ROUNDS rounds of: tensorlane (`bench` example), then llama.cpp,
each in a fresh process with the same prompt (BOS then ids 300, 301, ...: P tokens in one batch)
and D greedy tokens. Each figure is the median of its rounds (the range in brackets). The
ratios are tensorlane / llama.cpp of the medians. The bandwidth floor is what a decode step
costs if it only had to read every weight byte it uses once at the machine's memory read rate
(`membw` example, the same thread count, best of seven passes over 1 GiB): weight bytes per
token are the 2-D tensors' stored bytes, all but the token embedding unless the output
projection is tied to it. "of floor" is each program's decode tokens/s over the floor's.

The machine is shared: the load average (1 minute) is printed at the start and the end of each
model's rounds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TL = ROOT / "target/release/examples/bench"
MEMBW = ROOT / "target/release/examples/membw"


def weight_bytes_per_token(path: Path) -> int:
    """Stored bytes of the 2-D weights a decode step reads (gguf-py's reader)."""
    import gguf  # tests/.venv-formats

    r = gguf.GGUFReader(str(path))
    sizes = {t.name: int(t.n_bytes) for t in r.tensors if len([d for d in t.shape if d > 1]) == 2}
    total = sum(sizes.values())
    if "output.weight" in sizes:
        total -= sizes.get("token_embd.weight", 0)
    return total


def load() -> float:
    return os.getloadavg()[0]


def run_json(cmd, cwd=None) -> dict:
    o = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if o.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({o.returncode}):\n{o.stderr[-2000:]}")
    line = [l for l in o.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def med(xs):
    return statistics.median(xs)


def fmt(xs):
    return f"{med(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cache-type", default="f16", choices=["f16", "f32", "q8_0"],
                    help="the KV cache on both sides (q8_0: llama.cpp with flash attention, as it needs)")
    ap.add_argument("models", nargs="+", type=Path)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    os.environ["CACHE_TYPE"] = a.cache_type  # read by examples/bench.rs and tests/llama/bench.mjs
    bw = {t: run_json([MEMBW, str(t)])["read_gb_per_s"] for t in threads}
    print(f"Memory read bandwidth: " + ", ".join(f"{bw[t]:.1f} GB/s with {t} thread(s)" for t in threads))
    print(f"{a.cache_type} KV cache. Prompt {a.prompt} tokens, {a.decode} decoded, median of {a.rounds} alternating rounds [range]; "
          f"load average {load():.1f} at the start.\n")
    print("| model | threads | prefill tok/s: tensorlane / llama.cpp | ratio | decode tok/s: tensorlane / llama.cpp "
          "| ratio | floor tok/s (MB/token) | of floor: tensorlane / llama.cpp | load |")
    print("|---|---:|---|---:|---|---:|---:|---|---|")
    for m in a.models:
        per_token = weight_bytes_per_token(m)
        for t in threads:
            l0 = load()
            tl = {"prefill": [], "decode": []}
            ll = {"prefill": [], "decode": []}
            for _ in range(a.rounds):
                r = run_json([TL, m, str(t), str(a.prompt), str(a.decode)])
                tl["prefill"].append(r["prefill_tokens_per_s"])
                tl["decode"].append(r["decode_tokens_per_s"])
                r = run_json(["node", "bench.mjs", m.resolve(), str(t), str(a.prompt), str(a.decode)], cwd=ROOT / "tests/llama")
                ll["prefill"].append(r["prefill_tokens_per_s"])
                ll["decode"].append(r["decode_tokens_per_s"])
            floor = bw[t] * 1e9 / per_token
            print(
                f"| {m.name} | {t} | {fmt(tl['prefill'])} / {fmt(ll['prefill'])} | "
                f"{med(tl['prefill']) / med(ll['prefill']):.2f}x | {fmt(tl['decode'])} / {fmt(ll['decode'])} | "
                f"{med(tl['decode']) / med(ll['decode']):.2f}x | {floor:.1f} ({per_token / 1e6:.0f}) | "
                f"{med(tl['decode']) / floor:.2f} / {med(ll['decode']) / floor:.2f} | {l0:.1f}-{load():.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
