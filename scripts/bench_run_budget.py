#!/usr/bin/env python3
"""`tensorlane run` under budgets: a Markdown table of what streaming costs.

    python3 scripts/bench_run_budget.py MODEL.gguf [--bin target/release/tensorlane]
        [--fractions 0.25,0.5,1.0] [--policies scheduler,flexgen-like] [--threads N]
        [--prompt-tokens 32] [--new 16] [--device cpu]

For each policy and each fraction of the model's weight bytes (plus the working set: KV cache,
norms, activations), runs `tensorlane run MODEL --budget B --policy P --json` with a synthetic
prompt and greedy decoding, and prints one row: resident and streamed bytes per token (counted by
the executor as it copies them; the plan's figure beside it), decode tokens/s, the achieved copy
rate against the link's measured rate, the step's floor and T/floor, and the plan's simulated
step on a GPU behind PCIe 4 (the offload profile `pcie4`). A run without a budget comes first
(all resident, nothing copied), and every row's tokens are checked against it.
"""

import argparse
import json
import subprocess
import sys


def run(bin_, model, args):
    cmd = [bin_, "run", model, "--json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    return json.loads(p.stdout), None


def mib(b):
    return f"{b / 2**20:,.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--bin", default="target/release/tensorlane")
    ap.add_argument("--fractions", default="0.25,0.5,1.0")
    ap.add_argument("--policies", default="scheduler,flexgen-like,sync-jit")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()

    ids = ",".join(str(1 + (i * 37 + 11) % 300) for i in range(a.prompt_tokens))
    common = ["--tokens", ids, "--max-new-tokens", str(a.new), "--context", str(a.context), "--device", a.device]
    if a.threads:
        common += ["--threads", str(a.threads)]
    base, err = run(a.bin, a.model, common)
    if base is None:
        sys.exit(f"the all-resident run failed: {err}")
    st = base["stats"]
    weights = st["weight_bytes"]
    print(f"model `{a.model}`: {mib(weights)} of weight matrices; device {a.device}, {st['threads']} threads; "
          f"{a.prompt_tokens}-token prompt, {a.new} greedy tokens, context {a.context}")
    print()
    print("| budget | policy | resident | streamed / token (plan) | decode tok/s | copies GB/s (link) "
          "| step ms | floor ms | T/floor | PCIe-4 GPU, simulated: step ms (floor) | tokens |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    step = lambda s: 1e3 * s["decode_s"] / max(1, s["decode_tokens"])
    print(f"| none | all resident | {mib(weights)} | 0 | {st['decode_tokens_per_s']:.2f} | – | {step(st):.1f} "
          f"| – | – | – | reference |")
    # The working set (KV cache, norms, activations) is reported under a budget: one short run
    # with room for everything says how large it is.
    probe, err = run(a.bin, a.model, [*common[:2], "--max-new-tokens", "1", *common[4:], "--budget", str(10 * weights)])
    if probe is None:
        sys.exit(f"the probe run failed: {err}")
    working_set = probe["stats"]["working_set_bytes"]
    for policy in a.policies.split(","):
        for f in (float(x) for x in a.fractions.split(",")):
            budget = int(weights * f) + working_set
            r, err = run(a.bin, a.model, common + ["--budget", str(budget), "--policy", policy])
            if r is None:
                print(f"| {mib(budget)} ({f:.0%}) | {policy} | – | – | – | – | – | – | – | – | {err} |")
                continue
            s = r["stats"]
            same = "same" if r["tokens"] == base["tokens"] else "DIFFER"
            print(f"| {mib(budget)} ({f:.0%}) | {policy} | {mib(s['resident_bytes'])} "
                  f"| {mib(s['streamed_bytes_per_token'])} ({mib(s['plan_streamed_bytes_per_token'])}) "
                  f"| {s['decode_tokens_per_s']:.2f} | {s['h2d_gbps']:.2f} ({s['link_gbps']:.2f}) "
                  f"| {step(s):.1f} | {1e3 * s['floor_s']:.1f} | {s['t_over_floor']:.2f} "
                  f"| {1e3 * s['sim_pcie4_forward_s']:.2f} ({1e3 * s['sim_pcie4_floor_s']:.2f}) | {same} |")


if __name__ == "__main__":
    main()
