#!/usr/bin/env bash
# Stages the built web inspector into cli/inspector/ (web-demo/, js/, wasm/pkg/; gitignored), the
# folder the crate tensorlane-cli packages (its Cargo.toml `include`) and its build.rs embeds, so
# that a published `tensorlane-cli` builds a `tensorlane` binary with the inspector from its
# package alone. Builds the wasm first (scripts/build-js.sh without the addon; idempotent), and
# refuses a graph-layout library that is not installed (npm ci).
# Then: cargo package -p tensorlane-cli (or cargo publish [--dry-run] --workspace).
# Usage: scripts/stage-inspector.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SKIP_ADDON=1 bash scripts/build-js.sh >&2
for f in web-demo/index.html wasm/pkg/tensorlane_wasm.js wasm/pkg/tensorlane_wasm_bg.wasm wasm/pkg/llm_wgsl.js web-demo/vendor/elkjs/elk-worker.min.js; do
  [[ -s "$f" ]] || { echo "stage-inspector.sh: $f is missing (npm ci, then bash scripts/build-js.sh)" >&2; exit 1; }
done
dst=cli/inspector
rm -rf "$dst.tmp"
mkdir -p "$dst.tmp/web-demo/vendor/elkjs" "$dst.tmp/js" "$dst.tmp/wasm/pkg"
cp web-demo/*.html web-demo/*.js "$dst.tmp/web-demo/"
cp web-demo/vendor/elkjs/elk-worker.min.js web-demo/vendor/elkjs/LICENSE.md "$dst.tmp/web-demo/vendor/elkjs/"
# The page's modules (as build.rs embeds them from a checkout): not the Node-only ones.
for f in js/*.js; do
  case "$(basename "$f")" in cli.js|node.js|wasm-node.js|esbuild.js) ;; *) cp "$f" "$dst.tmp/js/" ;; esac
done
# Every module and wasm of the package (the Run view's worker imports llm_wgsl.js too).
cp wasm/pkg/*.js wasm/pkg/*.wasm "$dst.tmp/wasm/pkg/"
rm -rf "$dst"
mv "$dst.tmp" "$dst"
echo "stage-inspector: $(find "$dst" -type f | wc -l) files, $(du -sk "$dst" | cut -f1) KiB in $dst" >&2
