#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv-zt with the pinned ztensor 2.1.2 peer used by the live .zt
# cross-check (native/tests/zt_live.rs, tests/python/zt_gen.py, tests/python/zt_check.py).
#
#   tests/python/setup_zt_venv.sh         # idempotent; prints the venv's python on the last line
#
# The venv is rebuilt when it is missing, broken, or was made from another requirements file.
# Environment: PYTHON (interpreter to build the venv with, default python3),
#              TENSORLANE_ZT_VENV (venv path, default tests/.venv-zt).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${TENSORLANE_ZT_VENV:-$root/tests/.venv-zt}"
req="$here/ztensor_requirements.txt"
py="${PYTHON:-python3}"
stamp="$venv/.tensorlane-requirements"

command -v "$py" >/dev/null 2>&1 || { echo "setup_zt_venv.sh: $py not found" >&2; exit 127; }

want="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])'):$(sha256sum "$req" | cut -d' ' -f1)"

if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
   && "$venv/bin/python" -c 'import ztensor, numpy, ml_dtypes' >/dev/null 2>&1; then
  echo "$venv/bin/python"
  exit 0
fi

echo "setup_zt_venv.sh: creating $venv" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
"$venv/bin/python" - <<'PY' >&2
import ztensor, numpy, ml_dtypes
from importlib.metadata import version
assert version("ztensor") == "2.1.2", version("ztensor")
print("setup_zt_venv.sh: ztensor", version("ztensor"), "numpy", numpy.__version__,
      "ml_dtypes", ml_dtypes.__version__)
PY
echo "$want" > "$stamp"
echo "$venv/bin/python"
