#!/usr/bin/env bash
# A mixture-of-experts model on the CPU beside llama.cpp, alternating rounds in the same run:
# prefill and decode tokens/s of `tensorlane run` and of llama.cpp (node-llama-cpp 3.21.1,
# tests/llama/bench.mjs: the same prompt, BOS then ids 300, 301, ..., greedy decoding, f16 KV
# cache on both sides), then `tensorlane run --budget` at a quarter of the weights, whose
# streamed bytes per token are the routed experts'.
#
#   bash scripts/bench_moe.sh [SHAPE] [TYPE] [PROMPT] [DECODE]   (defaults: qwen3moe-mini Q8_0 64 32)
#
# Writes a random-weight qwen3moe of SHAPE (tests/python/llm_gen.py --bench; qwen3moe-mini: 8
# layers, embedding 1024, 16 experts of 512, 4 used per token, vocabulary 32000) to
# target/bench-moe/, builds the release CLI, 2 threads. REPEAT=N rounds (default 3). Needs
# tests/.venv-formats and tests/llama/node_modules (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE=${1:-qwen3moe-mini}
TYPE=${2:-Q8_0}
PROMPT=${3:-64}
DECODE=${4:-32}
THREADS=${THREADS:-2}
export PATH="$HOME/.cargo/bin:$PATH"
mkdir -p target/bench-moe
MODEL="target/bench-moe/$SHAPE-$TYPE.gguf"
[ -f "$MODEL" ] || tests/.venv-formats/bin/python tests/python/llm_gen.py --bench "$SHAPE" "$TYPE" "$MODEL"
CARGO_INCREMENTAL=0 cargo build -q --release -p tensorlane-cli
TOKENS=$(python3 -c "print(','.join(['1'] + [str(300 + i) for i in range($PROMPT - 1)]))")
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "${REPEAT:-3}"); do
  node tests/llama/bench.mjs "$MODEL" "$THREADS" "$PROMPT" "$DECODE" | python3 -c "
import json, sys; r = json.load(sys.stdin)
print(f'round $round llama.cpp   prefill {r[\"prefill_tokens_per_s\"]:8.1f} tok/s  decode {r[\"decode_tokens_per_s\"]:7.2f} tok/s')"
  target/release/tensorlane run "$MODEL" --tokens "$TOKENS" --max-new-tokens "$DECODE" --threads "$THREADS" --json \
    | python3 -c "
import json, sys; s = json.load(sys.stdin)['stats']
print(f'round $round tensorlane  prefill {s[\"prefill_tokens_per_s\"]:8.1f} tok/s  decode {s[\"decode_tokens_per_s\"]:7.2f} tok/s')"
done
WEIGHTS=$(stat -c %s "$MODEL")
target/release/tensorlane run "$MODEL" --tokens "$TOKENS" --max-new-tokens "$DECODE" --threads "$THREADS" \
  --budget $((WEIGHTS / 4)) --json | python3 -c "
import json, sys; s = json.load(sys.stdin)['stats']
print(f'budget {s[\"weight_bytes\"] // 4 / 2**20:.0f} MiB-ish: resident {s[\"resident_bytes\"] / 2**20:.1f} MiB, plan streams up to '
      f'{s[\"plan_streamed_bytes_per_token\"] / 2**20:.1f} MiB a pass, the last decode step streamed '
      f'{s[\"streamed_bytes_per_token\"] / 2**20:.1f} MiB (its routed experts), decode {s[\"decode_tokens_per_s\"]:.2f} tok/s')"
