#!/usr/bin/env bash
# make_venv.sh VENV REQUIREMENTS "IMPORTS" PACKAGE==VERSION
# Creates (or refreshes) a pinned venv and prints its python on the last line. Idempotent: the
# venv is rebuilt only when it is missing, broken, or was made from another requirements file or
# Python. Used by setup_venv.sh (tenso) and setup_zt_venv.sh (ztensor).
# Environment: PYTHON (interpreter to build the venv with, default python3).
set -euo pipefail

venv="$1" req="$2" imports="$3" pin="$4"
name="${pin%%==*}" want_version="${pin##*==}"
py="${PYTHON:-python3}"
stamp="$venv/.tensorlane-requirements"
me="$(basename "$req")"

command -v "$py" >/dev/null 2>&1 || { echo "make_venv.sh: $py not found" >&2; exit 127; }
# tenso 0.24.0 is an abi3 wheel for CPython >= 3.11; ztensor 2.1.2 needs 3.9+.
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "make_venv.sh: the peers need Python >= 3.11 ($py is $("$py" -V 2>&1))" >&2; exit 1; }

want="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])'):$(sha256sum "$req" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
   && "$venv/bin/python" -c "import $imports" >/dev/null 2>&1; then
  echo "$venv/bin/python"
  exit 0
fi

echo "make_venv.sh: creating $venv from $me" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
"$venv/bin/python" - "$imports" "$name" "$want_version" <<'PY' >&2
import importlib, sys
from importlib.metadata import version
imports, name, want = sys.argv[1:]
for m in imports.split(","):
    importlib.import_module(m.strip())
assert version(name) == want, (name, version(name), want)
print("make_venv.sh:", name, version(name), "ready")
PY
echo "$want" > "$stamp"
echo "$venv/bin/python"
