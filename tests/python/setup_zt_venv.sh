#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv-zt with the pinned ztensor 2.1.2 peer used by the live .zt
# cross-check (native/tests/zt_live.rs, scripts/bench_zt.py). Idempotent; prints the venv's
# python on the last line. TENSORLANE_ZT_VENV overrides the path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/make_venv.sh" "${TENSORLANE_ZT_VENV:-$here/../.venv-zt}" "$here/ztensor_requirements.txt" \
  "ztensor, numpy, ml_dtypes" "ztensor==2.1.2"
