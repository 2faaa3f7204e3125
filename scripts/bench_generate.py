"""Aggregate decode throughput of `tensorlane serve --model` at 1 and N concurrent clients (the
continuous batching of tensorlane_llm::batch), with `tensorlane run` on the same prompt as the
single-sequence reference. Run by scripts/bench_generate.sh, which builds the release CLI and
writes the model; prints a Markdown table.

    bench_generate.py TENSORLANE_BIN MODEL.gguf [CLIENTS...]     (default clients: 1 8)

Each client streams one completion (greedy, `ignore_eos`, 64 tokens after a 16-token prompt) and
timestamps every token. Decode tokens/s counts the tokens received while every client of the
round is decoding (from the last client's first token to the first client's last token), so
prompt evaluation and the ramp are left out; time to first token is the median over the
clients.
"""
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

BIN, MODEL = sys.argv[1], sys.argv[2]
CLIENTS = [int(c) for c in sys.argv[3:]] or [1, 8]
TOKENS = 64
PROMPT = "the tensor data model " * 4  # 17 tokens with the bench vocabulary
THREADS = "2"
# BUDGET=SIZE: serve (and run) under a weight budget; the streamed bytes are copied once per step
BUDGET = ["--budget", os.environ["BUDGET"]] if os.environ.get("BUDGET") else []


def serve(max_batch):
    p = subprocess.Popen([BIN, "serve", "--model", MODEL, "--bind", "127.0.0.1:0", "--threads", THREADS,
                          "--context", "512", "--max-batch", str(max_batch)] + BUDGET,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    host, port = re.match(r"http://([^/:]+):(\d+)", line).groups()
    return p, host, int(port)


def client(host, port, out, i):
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    stamps = []
    for raw in r:
        line = raw.decode().strip()
        if line.startswith("data: {"):
            ev = json.loads(line[6:])
            if ev["choices"] and ev["choices"][0]["finish_reason"] is None:
                stamps.append(time.perf_counter())
    out[i] = (t0, stamps)


def round_(host, port, n):
    out = [None] * n
    ts = [threading.Thread(target=client, args=(host, port, out, i)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    start = max(s[0] for _, s in out)
    end = min(s[-1] for _, s in out)
    inside = sum(sum(1 for t in s if start < t <= end) for _, s in out)
    ttft = statistics.median(s[0] - t0 for t0, s in out)
    return inside / (end - start), ttft, sum(len(s) for _, s in out)


# `tensorlane run`: one sequence, the same prompt and tokens
run = subprocess.run([BIN, "run", MODEL, "--prompt", PROMPT, "--max-new-tokens", str(TOKENS), "--threads", THREADS,
                      "--context", "512", "--json"] + BUDGET, capture_output=True, text=True, check=True)
st = json.loads(run.stdout)["stats"]
rows = [("`tensorlane run` (one sequence)", 1, st["decode_tokens_per_s"], st["prefill_s"], TOKENS)]
for n in CLIENTS:
    p, host, port = serve(max(CLIENTS))
    try:
        round_(host, port, 1)  # warm the page cache and the pool
        tps, ttft, total = round_(host, port, n)
    finally:
        p.terminate()
        p.wait()
    rows.append((f"`serve --model`, {n} concurrent client{'s' if n > 1 else ''}", n, tps, ttft, total))

base = rows[1][2]
print("| what | clients | aggregate decode tokens/s | vs 1 client | time to first token (median) | tokens |")
print("|---|---|---|---|---|---|")
for name, n, tps, ttft, total in rows:
    print(f"| {name} | {n} | {tps:.1f} | {tps / base:.2f}x | {ttft * 1000:.0f} ms | {total} |")
