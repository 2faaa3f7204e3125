#!/usr/bin/env bash
# Runs every test tensorlane has: Rust (core, native, the CLI, the live tenso and ztensor cross-checks,
# the .zt conformance corpus, offload), the no_std core built for wasm32, wgpu on lavapipe, both
# JavaScript backends under Node, and the pages in headless Chromium. Installs what is missing
# first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

# A full run from a fresh clone leaves about 6 GB here (target/ 4.3 GB, the venvs 1 GB,
# node_modules): say so up front when the disk has less, rather than at a link step minutes in
# ("No space left on device" ended a CI run that way).
free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if (( free_gb < 7 )); then
  echo "test.sh: warning: ${free_gb} GB free on this disk; a full run writes about 6 GB (target/, tests/.venv*, node_modules) and may fail with 'No space left on device'" >&2
fi

step "install what is missing"
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PWD/node_modules/.bin:$PATH"
# One full build: incremental caches would only take disk (1.2 GB of it; a CI machine ran out).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Mesa complains on every Vulkan instance without a runtime dir.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

step "no_std core for wasm32-unknown-unknown"
cargo build -q -p tensorlane-core --no-default-features --target wasm32-unknown-unknown

step "tensorlane-llm without native (arch, tokenizer, sampling, offload plan) for wasm32-unknown-unknown"
cargo build -q -p tensorlane-llm --no-default-features --target wasm32-unknown-unknown

step "no_std core for thumbv7em-none-eabihf (bare metal, no std at all)"
cargo build -q -p tensorlane-core --no-default-features --target thumbv7em-none-eabihf

# Before the Rust tests: cli/build.rs embeds the inspector (web-demo/, js/, the wasm this builds)
# into the tensorlane binary those builds make, so target/debug/tensorlane is the binary a user
# would install (the Node step runs it as the installed one).
step "JavaScript builds (wasm + N-API addon)"
scripts/build-js.sh

step "Rust tests (workspace)"
cargo test --workspace --no-fail-fast

step "device transfer: wgpu on lavapipe (CI=true: no adapter fails; tensorlane-llm on wgpu vs the CPU, batched serving on wgpu), CUDA build, error paths and the llm kernels through NVRTC"
# One build for every device test: the CLI's wgpu and cuda features turn on offload's and llm's, and
# one cargo invocation resolves the features once (five invocations with five feature sets
# rebuilt tensorlane-core, tensorlane, offload and llm five times: minutes of CI). The CLI's
# serve_wgpu is serve --device wgpu vs run --device wgpu on lavapipe; NVRTC is found on
# LD_LIBRARY_PATH (tests/.nvrtc, installed by setup.sh) for the llm kernels' compile check.
LD_LIBRARY_PATH="$PWD/tests/.nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cargo test -p tensorlane-offload -p tensorlane-llm -p tensorlane-cli --features tensorlane-cli/wgpu,tensorlane-cli/cuda \
    --test device_wgpu --test offload_wgpu --test wgpu --test wgpu_batch --test serve_wgpu --test device_cuda --test cuda

step "Node and Chromium tests (tests/browser/installed.test.mjs: the CLI binary run outside the checkout serves its built-in inspector)"
# The installed-binary test runs target/debug/tensorlane (built by the device step, inspector
# embedded) rather than `cargo install --path cli --debug`: the install resolves features for the
# CLI alone, so it reused nothing of the builds above and recompiled the core, native, llm and
# CLI crates (56-79 s of CI).
TENSORLANE_INSTALLED_BIN="${TENSORLANE_INSTALLED_BIN:-$PWD/target/debug/tensorlane}" \
  node --test tests/js/ tests/browser/

step "npm package: scripts/pack.sh, installed in a fresh project (ESM, CJS, tsc, esbuild, Vite, npx tensorlane serve vs the Rust server, wasm fallback)"
node --test tests/pack/
step "done"
