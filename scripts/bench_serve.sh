#!/usr/bin/env bash
# `tensorlane serve` vs Debian's nginx: HTTP Range throughput on loopback, same file, same client
# (wrk, a load generator neither server's authors wrote), same run. Prints a Markdown table.
#
#   bash scripts/bench_serve.sh [SECONDS_PER_CASE] [FILE_MIB]     (defaults: 5 s, 256 MiB)
#
# TENSORLANE_BIN=path runs that binary instead of building the release CLI (to measure an older
# build against nginx in the same way).
#
# Needs nginx-light and wrk (apt; scripts/setup.sh installs nginx-light, this script installs wrk
# when it is missing) and builds the release CLI. Both servers listen on 127.0.0.1 free ports and
# are stopped on exit. nginx runs as Debian ships it for static files: `sendfile on`,
# `tcp_nopush on`, `worker_processes auto`, access log off (so neither side writes logs).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
MIB=${2:-256}
export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v wrk >/dev/null || ! command -v nginx >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends wrk nginx-light >/dev/null
fi
NGINX=$(command -v nginx)
if [ -n "${TENSORLANE_BIN:-}" ]; then
  BIN=$TENSORLANE_BIN
else
  cargo build -q --release -p tensorlane-cli
  BIN=target/release/tensorlane
fi

WORK=$(mktemp -d)
# nginx started as root serves as `nobody`: the folder must be readable by others.
chmod 755 "$WORK"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/data"
head -c $((MIB << 20)) /dev/urandom >"$WORK/data/model.bin"
chmod 644 "$WORK/data/model.bin"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

NPORT=$(free_port)
cat >"$WORK/nginx.conf" <<EOF
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
daemon off;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path $WORK/tmp; proxy_temp_path $WORK/tmp; fastcgi_temp_path $WORK/tmp;
  uwsgi_temp_path $WORK/tmp; scgi_temp_path $WORK/tmp;
  server {
    listen 127.0.0.1:$NPORT;
    root $WORK/data;
  }
}
EOF
mkdir -p "$WORK/tmp"
"$NGINX" -p "$WORK" -c "$WORK/nginx.conf" &
pids+=($!)

"$BIN" serve "$WORK/data" --bind 127.0.0.1:0 >"$WORK/serve.url" 2>"$WORK/serve.log" &
pids+=($!)
for _ in $(seq 100); do
  [ -s "$WORK/serve.url" ] && curl -sf -o /dev/null "http://127.0.0.1:$NPORT/model.bin" -r 0-0 && break
  sleep 0.1
done
SBASE=$(head -n1 "$WORK/serve.url" | sed 's#^\(http://[^/]*\)/.*#\1#')
NURL="http://127.0.0.1:$NPORT/model.bin"
SURL="$SBASE/files/data/model.bin"
# Both serve the same bytes.
for r in 0-15 1048576-1048591 -16; do
  [ "$(curl -s -r "$r" "$NURL" | sha256sum)" = "$(curl -s -r "$r" "$SURL" | sha256sum)" ] || {
    echo "nginx and serve disagree on range $r" >&2; exit 1; }
done

# wrk prints "Transfer/sec: 1.23GB" and "Requests/sec: 456.7".
run() { # URL RANGE CONNS -> "MiB/s req/s"
  local out
  out=$(wrk -t2 -c"$3" -d"${SECS}s" -H "Range: bytes=$2" "$1")
  echo "$out" | grep -q 'Non-2xx' && { echo "non-2xx answers from $1" >&2; echo "$out" >&2; exit 1; }
  local tr rq
  tr=$(echo "$out" | awk '/Transfer\/sec/ {print $2}')
  rq=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  python3 - "$tr" "$rq" <<'PY'
import sys
t, r = sys.argv[1], float(sys.argv[2])
units = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
for u in sorted(units, key=len, reverse=True):
    if t.endswith(u):
        print(f"{float(t[:-len(u)]) * units[u] / (1 << 20):.0f} {r:.0f}")
        break
PY
}

SIZE=$((MIB << 20))
echo "| range | connections | nginx MiB/s | serve MiB/s | serve / nginx | nginx req/s | serve req/s |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for case in "4 KiB:4096:64" "64 KiB:65536:64" "1 MiB:1048576:16" "16 MiB:16777216:8" "suffix 1 MiB:-1048576:16"; do
  IFS=: read -r label len conns <<<"$case"
  if [ "${len:0:1}" = "-" ]; then range="$len"; else
    off=$(( (SIZE / 2) - (SIZE / 2) % 4096 )); range="$off-$((off + len - 1))"; fi
  # nginx, then serve, then nginx again: the better nginx run counts (the machine is shared).
  read -r n1 nr1 < <(run "$NURL" "$range" "$conns")
  read -r s1 sr1 < <(run "$SURL" "$range" "$conns")
  read -r n2 nr2 < <(run "$NURL" "$range" "$conns")
  if [ "$n2" -gt "$n1" ]; then n1=$n2; nr1=$nr2; fi
  ratio=$(python3 -c "print(f'{$s1 / $n1:.2f}x')")
  echo "| $label ($range) | $conns | $n1 | $s1 | $ratio | $nr1 | $sr1 |"
done
echo
echo "file: ${MIB} MiB (page cache warm), ${SECS} s per run, wrk -t2, $(nproc) cores; $(nginx -v 2>&1 | sed 's/.*: //'), $($BIN --version)"
