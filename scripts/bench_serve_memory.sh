#!/usr/bin/env bash
# Server peak RSS while CLIENTS curl clients fetch one SIZE_MIB tensor from `tensorlane serve` at once.
# usage: BIN=target/release/tensorlane SIZE_MIB=1024 CLIENTS=8 [ULIMIT_V_KIB=...] bash scripts/bench_serve_memory.sh
# (needs curl, python3, bc; the tensor is a sparse file of zeros, so the disk is not measured;
# peak_rss is the server's VmHWM after the clients are done; a server that died reports 0)
set -u
BIN=${BIN:-target/release/tensorlane}; SIZE_MIB=${SIZE_MIB:-1024}; CLIENTS=${CLIENTS:-8}
D=$(mktemp -d); mkdir "$D/m"
python3 - "$D/m/big.safetensors" "$SIZE_MIB" <<'PY'
import json, struct, sys
p, n = sys.argv[1], int(sys.argv[2]) << 20
h = json.dumps({"big": {"dtype": "F32", "shape": [n // 4], "data_offsets": [0, n]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(p, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + n)  # a sparse file: zeros, no disk
PY
( [ -n "${ULIMIT_V_KIB:-}" ] && ulimit -v "$ULIMIT_V_KIB"; exec "$BIN" serve --bind 127.0.0.1:0 "$D/m" ) >"$D/url" 2>"$D/err" &
PID=$!
until [ -s "$D/url" ]; do sleep 0.1; done
BASE=$(grep -o 'http://[^/]*' "$D/url")
T0=$(date +%s.%N)
PIDS=()
for i in $(seq "$CLIENTS"); do
  curl -s -o /dev/null -w "%{http_code} %{size_download}\n" "$BASE/tensors/m/big.safetensors/big" >"$D/c$i" 2>&1 &
  PIDS+=($!)
done
wait "${PIDS[@]}"
T1=$(date +%s.%N)
HWM=$(grep VmHWM /proc/$PID/status 2>/dev/null | awk '{print $2}')
ALIVE=$(kill -0 $PID 2>/dev/null && echo alive || echo died)
OK=$(cat "$D"/c* | grep -c "^200 $(( (SIZE_MIB << 20) + 128 ))\$\|^200 $(( (SIZE_MIB << 20) + 64 ))\$")
echo "$(basename "$BIN") size=${SIZE_MIB}MiB clients=$CLIENTS complete=$OK/$CLIENTS server=$ALIVE peak_rss=$((${HWM:-0} / 1024))MiB wall=$(echo "$T1 - $T0" | bc)s"
cat "$D"/c* | sort | uniq -c | sed 's/^/  answers: /'
[ "$ALIVE" = died ] && tail -2 "$D/err" | sed 's/^/  stderr: /'
kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D"
