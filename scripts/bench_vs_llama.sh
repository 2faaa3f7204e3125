#!/usr/bin/env bash
# Prefill and decode tokens/s of tensorlane's CPU executor and llama.cpp (node-llama-cpp 3.21.1)
# alternating in the same run, at 1 and 2 threads, their ratio, and each one's fraction of the
# memory-bandwidth floor (scripts/bench_vs_llama.py says how each figure is taken). Prints a
# Markdown table (BENCHMARKS.md, "Text generation on the CPU vs llama.cpp").
#
#   scripts/bench_vs_llama.sh [options] [MODEL.gguf...]
#
# Options go to bench_vs_llama.py: --rounds N (3), --prompt P (64), --decode D (16),
# --threads LIST (1,2), --cache-type f16|f32|q8_0 (f16, both sides). Without models: the real SmolLM2-135M-Instruct Q4_1
# (scripts/fetch_smollm2.sh) and a TinyLlama-1.1B-shaped random-weight llama in Q4_K_M and in
# Q8_0, each made from an F16 one (tests/python/llm_gen.py) by llama.cpp's own quantizer
# (scripts/llama_quantize.py), written once to target/bench-vs-llama/ (3.1 GB with the F16).
# The default run takes a few minutes. Needs tests/.venv-formats and tests/llama/node_modules
# (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
opts=()
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds|--prompt|--decode|--threads|--cache-type) opts+=("$1" "$2"); shift 2 ;;
    -*) echo "bench_vs_llama.sh: unknown option $1" >&2; exit 2 ;;
    *) models+=("$1"); shift ;;
  esac
done
PY=tests/.venv-formats/bin/python
[ -x "$PY" ] || { echo "bench_vs_llama.sh: $PY is missing: run scripts/setup.sh" >&2; exit 1; }
[ -d tests/llama/node_modules/node-llama-cpp ] || { echo "bench_vs_llama.sh: tests/llama/node_modules is missing: run scripts/setup.sh" >&2; exit 1; }
if [ ${#models[@]} -eq 0 ]; then
  smol=tests/data/llm/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$smol" ] || scripts/fetch_smollm2.sh
  dir=target/bench-vs-llama
  mkdir -p "$dir"
  f16=$dir/tinyllama-1.1b-F16.gguf
  for ty in Q4_K_M Q8_0; do
    out=$dir/tinyllama-1.1b-$ty.gguf
    if [ ! -f "$out" ]; then
      [ -f "$f16" ] || "$PY" tests/python/llm_gen.py --bench tinyllama-1.1b F16 "$f16"
      python3 scripts/llama_quantize.py "$f16" "$out.part" "$ty" >/dev/null 2>&1
      mv "$out.part" "$out"
    fi
  done
  models=("$smol" "$dir/tinyllama-1.1b-Q4_K_M.gguf" "$dir/tinyllama-1.1b-Q8_0.gguf")
fi
CARGO_INCREMENTAL=0 cargo build -q --release -p tensorlane-llm --example bench --example membw
"$PY" scripts/bench_vs_llama.py "${opts[@]}" "${models[@]}"
