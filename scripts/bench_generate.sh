#!/usr/bin/env bash
# Continuous batching on the CPU executor: aggregate decode tokens/s of `tensorlane serve --model`
# at 1 and 8 concurrent clients, and the server's overhead against `tensorlane run` on the same
# prompt, the peers measured round after round in the same run (scripts/bench_generate.py says
# how each figure is taken). Prints Markdown tables (BENCHMARKS.md, "Serving a model").
#
#   bash scripts/bench_generate.sh [SHAPE] [TYPE] [CLIENTS...]   (defaults: smollm-135m Q8_0 1 8)
#
# Writes a random-weight llama of SHAPE (tests/python/llm_gen.py --bench; smollm-135m or
# tinyllama-1.1b) in TYPE to target/bench-generate/, builds the release CLI, and uses 2 worker
# threads. BUDGET=SIZE in the environment serves (and runs) under that weight budget (the
# streamed bytes are copied once per decode step for the whole batch; `tensorlane run` and
# `serve --max-batch 1` plan for one sequence's KV cache, `serve --max-batch 8` for eight).
# REPEAT=N rounds of each (default 3). Needs tests/.venv-formats (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE=${1:-smollm-135m}
TYPE=${2:-Q8_0}
shift $(( $# < 2 ? $# : 2 ))
export PATH="$HOME/.cargo/bin:$PATH"
mkdir -p target/bench-generate
MODEL="target/bench-generate/$SHAPE-$TYPE.gguf"
[ -f "$MODEL" ] || tests/.venv-formats/bin/python tests/python/llm_gen.py --bench "$SHAPE" "$TYPE" "$MODEL"
CARGO_INCREMENTAL=0 cargo build -q --release -p tensorlane-cli
python3 scripts/bench_generate.py target/release/tensorlane "$MODEL" "$@"
