#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv with the pinned tenso 0.24.0 peer used by the live
# cross-checks (native/tests/tenso_live.rs, tests/js/tenso_live.test.mjs, scripts/bench_tenso.py).
#
#   tests/python/setup_venv.sh            # idempotent; prints the venv's python on the last line
#
# The venv is rebuilt when it is missing, broken, or was made from another requirements.txt.
# Environment: PYTHON (interpreter to build the venv with, default python3),
#              TENSORLANE_VENV (venv path, default tests/.venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${TENSORLANE_VENV:-$root/tests/.venv}"
req="$here/requirements.txt"
py="${PYTHON:-python3}"
stamp="$venv/.tensorlane-requirements"

command -v "$py" >/dev/null 2>&1 || { echo "setup_venv.sh: $py not found" >&2; exit 127; }

want="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])'):$(sha256sum "$req" | cut -d' ' -f1)"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
   && "$venv/bin/python" -c 'import tenso, numpy, scipy, ml_dtypes' >/dev/null 2>&1; then
  echo "$venv/bin/python"
  exit 0
fi

# tenso 0.24.0 is an abi3 wheel for CPython >= 3.11.
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "setup_venv.sh: tenso 0.24.0 needs Python >= 3.11 ($py is $("$py" -V 2>&1))" >&2; exit 1; }

echo "setup_venv.sh: creating $venv" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
"$venv/bin/python" - <<'PY' >&2
import tenso, numpy, scipy, ml_dtypes
from importlib.metadata import version
assert version("tenso") == "0.24.0", version("tenso")
print("setup_venv.sh: tenso", version("tenso"), "numpy", numpy.__version__, "scipy", scipy.__version__,
      "ml_dtypes", ml_dtypes.__version__)
PY
echo "$want" > "$stamp"
echo "$venv/bin/python"
