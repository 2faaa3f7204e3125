#!/usr/bin/env bash
# npm's `prepack` of the main package `tensorlane` (run by `npm pack` and `npm publish`): the
# package ships the wasm build (wasm/pkg/), which is made from this repository's Rust, so build it
# here (scripts/build-js.sh without the addon: the addon ships in the platform packages, which
# scripts/pack.sh writes and adds to the packed manifest's optionalDependencies) or stop with what to
# do, instead of packing a tarball that cannot load.
# TENSORLANE_PACK_PREBUILT=1 (set by scripts/pack.sh, which has just built) only checks the files.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

fail() {
  echo "npm pack (tensorlane): $*" >&2
  echo "  The npm package ships the wasm build of the Rust crates, so packing needs Rust (rustup target" >&2
  echo "  add wasm32-unknown-unknown) and wasm-bindgen-cli (bash scripts/setup.sh installs both)." >&2
  echo "  To make every tarball a release publishes (the main package and the platform addon):" >&2
  echo "  bash scripts/pack.sh OUTDIR" >&2
  exit 1
}

if [[ "${TENSORLANE_PACK_PREBUILT:-0}" != 1 ]]; then
  command -v cargo >/dev/null || fail "cargo is not on PATH, and wasm/pkg/ must be built from Rust."
  SKIP_ADDON=1 bash scripts/build-js.sh >&2 || fail "building the wasm (SKIP_ADDON=1 scripts/build-js.sh) failed (see above)."
fi
for f in wasm/pkg/tensorlane_wasm.js wasm/pkg/tensorlane_wasm_bg.wasm; do
  [[ -s "$f" ]] || fail "$f is missing: the wasm is not built (bash scripts/build-js.sh)."
done
