#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv-formats with the pinned reference libraries of the foreign
# formats (safetensors, gguf, numpy, onnx, h5py) used by the live cross-checks and
# scripts/bench_formats.py. Idempotent; prints the venv's python on the last line.
# TENSORLANE_FORMATS_VENV overrides the path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/make_venv.sh" "${TENSORLANE_FORMATS_VENV:-$here/../.venv-formats}" \
  "$here/formats_requirements.txt" "safetensors, gguf, numpy, onnx, h5py, ml_dtypes" "safetensors==0.8.0"
