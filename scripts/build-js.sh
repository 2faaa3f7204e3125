#!/usr/bin/env bash
# Builds the JavaScript backends of the npm package `tensorlane`:
#   1. tensorlane-core for wasm32 with --no-default-features (proves the core is no_std);
#   2. tensorlane-wasm (release, wasm32-unknown-unknown) + wasm-bindgen --target web -> wasm/pkg/;
#   3. the N-API addon (release) -> js/tensorlane.<platform>-<arch>[-gnu].node.
# Idempotent: cargo skips up-to-date crates, and bindgen/copies run only when their input changed.
# Needs: rustup target wasm32-unknown-unknown, wasm-bindgen-cli at the Cargo.lock version.
# SKIP_ADDON=1 skips step 3; SKIP_WASM=1 skips steps 1-2.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

newer() { # newer SRC DST: true when DST is missing or older than SRC
  [[ ! -e "$2" || "$1" -nt "$2" ]]
}

if [[ "${SKIP_WASM:-0}" != 1 ]]; then
  cargo build -q -p tensorlane-core --target wasm32-unknown-unknown --no-default-features
  cargo build -q -p tensorlane-wasm --target wasm32-unknown-unknown --release
  want=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p' | head -n1)
  have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')
  if [[ "$want" != "$have" ]]; then
    echo "wasm-bindgen-cli $want is required (found '${have:-none}'): cargo install wasm-bindgen-cli --version $want" >&2
    exit 1
  fi
  wasm=target/wasm32-unknown-unknown/release/tensorlane_wasm.wasm
  if newer "$wasm" wasm/pkg/tensorlane_wasm_bg.wasm || newer "$wasm" wasm/pkg/tensorlane_wasm.js; then
    wasm-bindgen --target web --out-dir wasm/pkg "$wasm"
    # Optional size pass when npm's binaryen is installed (Debian's binaryen is too old).
    if [[ -x node_modules/.bin/wasm-opt ]]; then
      node_modules/.bin/wasm-opt -O wasm/pkg/tensorlane_wasm_bg.wasm -o wasm/pkg/tensorlane_wasm_bg.wasm
    fi
    touch wasm/pkg/tensorlane_wasm.js
  fi
fi

if [[ "${SKIP_ADDON:-0}" != 1 ]]; then
  cargo build -q -p tensorlane-node --release
  case "$(uname -s)" in
    Linux) lib=target/release/libtensorlane_node.so
           abi=$(ldd --version 2>&1 | grep -qi musl && echo musl || echo gnu)
           dst=js/tensorlane.linux-$(node -p process.arch)-$abi.node ;;
    Darwin) lib=target/release/libtensorlane_node.dylib; dst=js/tensorlane.darwin-$(node -p process.arch).node ;;
    *) lib=target/release/tensorlane_node.dll; dst=js/tensorlane.win32-$(node -p process.arch)-msvc.node ;;
  esac
  if newer "$lib" "$dst"; then cp "$lib" "$dst"; fi
fi
# The graph view's layout library (npm devDependency elkjs), served from a gitignored vendor path.
if [[ -f node_modules/elkjs/lib/elk-worker.min.js ]]; then
  mkdir -p web-demo/vendor/elkjs
  for f in elk-worker.min.js LICENSE.md; do
    src=node_modules/elkjs/lib/$f; [[ -f $src ]] || src=node_modules/elkjs/$f
    if [[ -f $src ]] && newer "$src" "web-demo/vendor/elkjs/$f"; then cp "$src" "web-demo/vendor/elkjs/$f"; fi
  done
else
  echo "build-js: elkjs is not installed (npm install); the graph view cannot lay out graphs" >&2
fi
echo "build-js: ok"
