#!/usr/bin/env bash
# "Bigger than memory on the CPU" (BENCHMARKS.md, issue 39): a dense model at least 3x a memory
# cap, run as whole processes inside a memory cgroup of that cap, page cache dropped before each:
# `tensorlane run --budget B` (the disk tier: O_DIRECT reads ahead of use) and llama.cpp
# (node-llama-cpp 3.21.1, its default mmap load), the same greedy tokens, alternating. Prints the
# tokens/s, tensorlane's disk figures (bytes read per token, measured read rate, floor, T/floor),
# each process's wall time and the group's peak charge, then tensorlane's peak RSS under the same
# budget without a cap (against budget + 64 MiB).
#
#   scripts/bench_disk.sh MODEL.gguf CAP_MIB BUDGET_MIB [TOKENS] [ROUNDS]
#
# Needs root (cgroup v1 memory controller at /sys/fs/cgroup/memory, /proc/sys/vm/drop_caches),
# target/debug/tensorlane or TENSORLANE_BIN, and tests/llama/node_modules (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 cap=$(( $2 << 20 )) budget=$3 tokens=${4:-8} rounds=${5:-2}
bin=${TENSORLANE_BIN:-target/debug/tensorlane}
ids=1,300,301,302
own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
grp=/sys/fs/cgroup/memory${own%/}/tensorlane-bench-disk-$$
mkdir "$grp"
trap 'rmdir "$grp" 2>/dev/null || true' EXIT
echo "$cap" > "$grp/memory.limit_in_bytes"
echo "$cap" > "$grp/memory.memsw.limit_in_bytes" 2>/dev/null || true
size=$(stat -c %s "$model")
echo "model $model: $size bytes, cap $cap bytes ($(( size * 100 / cap ))% of it), budget ${budget}MiB, $tokens tokens, load $(cut -d' ' -f1-3 /proc/loadavg)"
capped() { # NAME CMD...: runs CMD in the group after dropping the page cache
  local name=$1; shift
  sync; echo 1 > /proc/sys/vm/drop_caches
  echo 0 > "$grp/memory.max_usage_in_bytes"
  local oom0; oom0=$(awk '/oom_kill /{print $2}' "$grp/memory.oom_control")
  local t0; t0=$(date +%s.%N)
  sh -c 'g=$0 rss=$1; shift; echo $$ > "$g/tasks" && exec /usr/bin/time -o "$rss" -f %M "$@"' \
    "$grp" "/tmp/bench-disk-$name.rss" "$@" > "/tmp/bench-disk-$name.json" || echo "$name: exit $?"
  local t1; t1=$(date +%s.%N)
  local oom1; oom1=$(awk '/oom_kill /{print $2}' "$grp/memory.oom_control")
  printf '%s: process %.2f s, peak RSS %d MiB, group peak %d MiB (RSS and page cache), OOM kills %d: ' \
    "$name" "$(echo "$t1 - $t0" | bc)" $(( $(tail -1 "/tmp/bench-disk-$name.rss") >> 10 )) \
    $(( $(cat "$grp/memory.max_usage_in_bytes") >> 20 )) $(( oom1 - oom0 ))
  tail -c 2000 "/tmp/bench-disk-$name.json" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read().strip().splitlines()[-1])
s = j.get("stats", j); d = s.get("disk") or {}
print("tokens", j["tokens"], "decode %.3f tok/s" % s["decode_tokens_per_s"], end="")
if d: print("; %.1f MB read/token at %.2f GB/s measured (%s), floor %.3f s, T/floor %.2f, waited %.2f s" % (
    d["bytes_per_token"] / 1e6, d["read_gbps"], "O_DIRECT" if d["direct"] else "buffered", d["floor_s"], d["t_over_floor"], d["wait_s"]), end="")
print()'
}
for r in $(seq 1 "$rounds"); do
  capped tensorlane "$bin" run "$model" --tokens "$ids" --max-new-tokens "$tokens" --context 64 --threads 2 --budget "${budget}MiB" --json
  capped llama.cpp node tests/llama/disk.mjs "$model" 2 "$tokens" "$ids"
done
/usr/bin/time -f "tensorlane --budget ${budget}MiB without a cap: peak RSS %M KiB" \
  "$bin" run "$model" --tokens "$ids" --max-new-tokens "$tokens" --context 64 --threads 2 --budget "${budget}MiB" --json > /dev/null
