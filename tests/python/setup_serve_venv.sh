#!/usr/bin/env bash
# Creates (or refreshes) tests/.venv-serve with the official `openai` client and gguf (the model
# writer) for the OpenAI-compatible endpoint's tests (cli/tests/serve_openai.rs). Idempotent;
# prints the venv's python on the last line. TENSORLANE_SERVE_VENV overrides the path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec bash "$here/make_venv.sh" "${TENSORLANE_SERVE_VENV:-$here/../.venv-serve}" \
  "$here/serve_requirements.txt" "openai, gguf, numpy, jsonschema" "openai==3.51.0"
