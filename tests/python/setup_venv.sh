#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv with the pinned tenso 0.24.0 peer used by the live
# cross-checks (native/tests/tenso_live.rs, tests/js/tenso_live.test.mjs, scripts/bench_tenso.py).
# Idempotent; prints the venv's python on the last line. TENSORLANE_VENV overrides the path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/make_venv.sh" "${TENSORLANE_VENV:-$here/../.venv}" "$here/requirements.txt" \
  "tenso, numpy, scipy, ml_dtypes" "tenso==0.24.0"
