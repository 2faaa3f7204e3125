#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv-s3: moto's S3 server, boto3, safetensors and numpy for the
# remote-source tests and benchmark. Idempotent; prints the venv's python on the last line.
# TENSORLANE_S3_VENV overrides the path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/make_venv.sh" "${TENSORLANE_S3_VENV:-$here/../.venv-s3}" \
  "$here/s3_requirements.txt" "moto.server, boto3, safetensors, numpy" "moto==5.2.5"
