"""Aggregate decode throughput of `tensorlane serve --model` at 1 and N concurrent clients (the
continuous batching of tensorlane_llm::batch), and the server's overhead against `tensorlane run`
on the same prompt. Run by scripts/bench_generate.sh, which builds the release CLI and writes the
model; prints Markdown tables.

    bench_generate.py TENSORLANE_BIN MODEL.gguf [CLIENTS...]     (default clients: 1 8)

Each client streams one completion (greedy, `ignore_eos`, 64 tokens after a 17-token prompt) and
timestamps every token. Decode tokens/s counts the tokens received while every client of the
round is decoding (from the last client's first token to the first client's last token), so
prompt evaluation and the ramp are left out; time to first token is the median over the
clients (from sending the request to the first token's event).

The peers are measured in the same run, round after round (REPEAT=3 repetitions by default, each
one round of everything, in turn), and each figure is the median of its rounds with the range:
  - `tensorlane run`: one sequence in its own process; its own `decode_tokens_per_s` (forward
    passes only) and `prefill_s` (its time to first token, the prompt's forward pass);
  - `serve --max-batch 1`, 1 client: the server's overhead against `run` (the same plan: under a
    budget the server plans for --max-batch KV caches, `run` for one); measured as a client
    sees it, over HTTP, so it includes everything between the engine and the client;
  - `serve --max-batch N`, 1 and N clients: the batching ratio, on one server.

BUDGET=SIZE in the environment serves (and runs) under that weight budget.
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
REPEAT = int(os.environ.get("REPEAT", "3"))
TOKENS = 64
PROMPT = "the tensor data model " * 4  # 17 tokens with the bench vocabulary
THREADS = "2"
CONTEXT = "512"
# BUDGET=SIZE: serve (and run) under a weight budget; the streamed bytes are copied once per step
BUDGET = ["--budget", os.environ["BUDGET"]] if os.environ.get("BUDGET") else []


def serve(max_batch):
    """(process, host, port, weight bytes streamed per decode step as the server reports them)."""
    p = subprocess.Popen([BIN, "serve", "--model", MODEL, "--bind", "127.0.0.1:0", "--threads", THREADS,
                          "--context", CONTEXT, "--max-batch", str(max_batch)] + BUDGET,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    host, port = re.match(r"http://([^/:]+):(\d+)", p.stdout.readline()).groups()
    streamed = []

    def drain():  # the model line is on stderr; read it all so the pipe never fills
        for line in p.stderr:
            if (m := re.search(r"(\d+) weight bytes streamed", line)) and not streamed:
                streamed.append(int(m.group(1)))

    threading.Thread(target=drain, daemon=True).start()
    time.sleep(0.5)
    return p, host, int(port), streamed


def client(host, port, out, i, barrier):
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    barrier.wait()
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
    """(aggregate decode tokens/s, median time to first token in s) of n clients at once."""
    out = [None] * n
    barrier = threading.Barrier(n)
    ts = [threading.Thread(target=client, args=(host, port, out, i, barrier)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    start = max(s[0] for _, s in out)
    end = min(s[-1] for _, s in out)
    inside = sum(sum(1 for t in s if start < t <= end) for _, s in out)
    assert all(len(s) == TOKENS for _, s in out), [len(s) for _, s in out]
    ttft = statistics.median(s[0] - t0 for t0, s in out)
    return inside / (end - start), ttft


def run_once():
    r = subprocess.run([BIN, "run", MODEL, "--prompt", PROMPT, "--max-new-tokens", str(TOKENS), "--threads",
                        THREADS, "--context", CONTEXT, "--json"] + BUDGET, capture_output=True, text=True, check=True)
    st = json.loads(r.stdout)["stats"]
    return st["decode_tokens_per_s"], st["prefill_s"], st.get("streamed_bytes_per_token", 0)


N = max(CLIENTS)
one = serve(1)
batch = serve(N)
results = {}  # name -> list of (tok/s, ttft)
try:
    for srv in (one, batch):
        round_(srv[1], srv[2], 1)  # warm the page cache and the pool
    run_streamed = 0
    for rep in range(REPEAT):
        rounds = [("run", None, 1), ("one", one, 1)] + [(f"batch{n}", batch, n) for n in CLIENTS]
        if rep % 2:
            rounds.reverse()
        for name, srv, n in rounds:
            if srv is None:
                tps, ttft, run_streamed = run_once()
            else:
                tps, ttft = round_(srv[1], srv[2], n)
            results.setdefault(name, []).append((tps, ttft))
finally:
    for p, *_ in (one, batch):
        p.terminate()
        p.wait()


def fig(name):
    tps = [t for t, _ in results[name]]
    ttft = [f for _, f in results[name]]
    return statistics.median(tps), min(tps), max(tps), statistics.median(ttft), min(ttft), max(ttft)


load = os.getloadavg()
print(f"{REPEAT} rounds of each, in turn; medians (range); budget: {BUDGET[1] if BUDGET else 'none (all resident)'}; "
      f"weight bytes streamed per decode step: run {run_streamed}, serve --max-batch 1 {(one[3] or [0])[0]}, "
      f"serve --max-batch {N} {(batch[3] or [0])[0]}; load average after: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
print()
print("| what | clients | decode tokens/s | vs peer | time to first token | vs peer |")
print("|---|---|---|---|---|---|")
r = fig("run")
o = fig("one")
print(f"| `tensorlane run` (one sequence) | 1 | {r[0]:.1f} ({r[1]:.1f}–{r[2]:.1f}) | | "
      f"{r[3] * 1000:.0f} ms ({r[4] * 1000:.0f}–{r[5] * 1000:.0f}) | |")
print(f"| `serve --max-batch 1`, over HTTP | 1 | {o[0]:.1f} ({o[1]:.1f}–{o[2]:.1f}) | "
      f"**{(o[0] / r[0] - 1) * 100:+.1f}%** vs run | {o[3] * 1000:.0f} ms ({o[4] * 1000:.0f}–{o[5] * 1000:.0f}) | "
      f"**{(o[3] / r[3] - 1) * 100:+.1f}%** vs run |")
b1 = fig(f"batch{CLIENTS[0]}")
for n in CLIENTS:
    b = fig(f"batch{n}")
    ratio = [t / base for (t, _), (base, _) in zip(results[f"batch{n}"], results[f"batch{CLIENTS[0]}"])]
    print(f"| `serve --max-batch {N}`, {n} client{'s' if n > 1 else ''} | {n} | {b[0]:.1f} ({b[1]:.1f}–{b[2]:.1f}) | "
          f"{'**' if n > 1 else ''}{b[0] / b1[0]:.2f}x{'**' if n > 1 else ''} "
          f"({min(ratio):.2f}–{max(ratio):.2f} by round) | {b[3] * 1000:.0f} ms ({b[4] * 1000:.0f}–{b[5] * 1000:.0f}) | |")
