#!/usr/bin/env bash
# Writes every npm tarball a release publishes into OUTDIR:
#   tensorlane-<version>.tgz                  the main package: js/ (ESM + the CJS entry), the .d.ts,
#                                             the wasm build, the inspector's pages (web-demo/) and
#                                             the `tensorlane serve` bin (js/cli.js); its package.json lists every
#                                             platform package (package.json's tensorlanePlatforms)
#                                             in optionalDependencies
#   tensorlane-<platform>-<version>.tgz      @tensorlane/<platform> (napi-rs layout): the N-API
#                                             addon tensorlane.<platform>.node with os/cpu/libc set,
#                                             built here for this machine's platform only
# Builds first (scripts/build-js.sh: wasm + addon; idempotent), and stages the same built inspector
# into cli/inspector/ for the crate tensorlane-cli (scripts/stage-inspector.sh), so that one release
# step packs the npm tarballs and the crate the `tensorlane` binary embeds it from. Prints the
# tarballs' paths.
# Usage: scripts/pack.sh OUTDIR
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: scripts/pack.sh OUTDIR" >&2; exit 2; }
cd "$(dirname "$0")/.."
mkdir -p "$1"
out=$(cd "$1" && pwd)

bash scripts/build-js.sh >&2
[[ -s web-demo/vendor/elkjs/elk-worker.min.js ]] || { echo "pack.sh: web-demo/vendor/elkjs/ is missing (npm ci installs elkjs, then scripts/build-js.sh copies it): the inspector's graph view needs it" >&2; exit 1; }
bash scripts/stage-inspector.sh

# This machine's platform package, named as js/node.js looks for it.
platform=$(node --input-type=module -e "import { platformName } from './js/platform.js'; console.log(platformName())")
addon="js/tensorlane.$platform.node"
[[ -s "$addon" ]] || { echo "pack.sh: $addon was not built by scripts/build-js.sh" >&2; exit 1; }
node -e "const p=require('./package.json'); if(!p.tensorlanePlatforms?.includes('$platform')) { console.error('pack.sh: package.json tensorlanePlatforms does not list $platform'); process.exit(1) }"

# The platform package, staged in a temporary folder.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$addon" "$stage/"
cp LICENSE-MIT LICENSE-APACHE "$stage/"
PLATFORM="$platform" node -e '
const fs = require("fs");
const root = require("./package.json");
const platform = process.env.PLATFORM;
const [os, cpu, abi] = platform.split("-");
const file = `tensorlane.${platform}.node`;
const pkg = {
  name: `@tensorlane/${platform}`,
  version: root.version,
  description: `The N-API addon of tensorlane for ${platform}: installed by the package tensorlane as an optional dependency, not used on its own`,
  license: root.license,
  repository: root.repository,
  main: file,
  files: [file, "LICENSE-MIT", "LICENSE-APACHE"],
  os: [os],
  cpu: [cpu],
  ...(abi === "gnu" ? { libc: ["glibc"] } : abi === "musl" ? { libc: ["musl"] } : {}),
  engines: root.engines,
};
fs.writeFileSync(process.argv[1] + "/package.json", JSON.stringify(pkg, null, 2) + "\n");
fs.writeFileSync(process.argv[1] + "/README.md", `# ${pkg.name}\n\nThe prebuilt N-API addon of [tensorlane](https://www.npmjs.com/package/tensorlane) for \`${platform}\`.\nInstall \`tensorlane\`: npm picks this package from its optionalDependencies.\n`);
' "$stage"
(cd "$stage" && npm pack --silent --pack-destination "$out" >/dev/null)

version=$(node -p 'require("./package.json").version')

# The main package: npm pack of the repository (prepack only checks: everything is built), then
# its package.json gains optionalDependencies on every platform package, as napi-rs's prepublish
# does. They are not in the repository's package.json: packages not yet on the registry cannot be
# in package-lock.json, so `npm ci` would fail. Dev-only fields are dropped from the published one.
mkdir "$stage/main"
TENSORLANE_PACK_PREBUILT=1 npm pack --silent --pack-destination "$stage/main" >/dev/null
tar xzf "$stage/main/tensorlane-$version.tgz" -C "$stage/main"
node -e '
const fs = require("fs");
const file = process.argv[1];
const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
pkg.optionalDependencies = Object.fromEntries(pkg.tensorlanePlatforms.map((p) => [`@tensorlane/${p}`, pkg.version]));
for (const k of ["tensorlanePlatforms", "scripts", "devDependencies"]) delete pkg[k];
fs.writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
' "$stage/main/package/package.json"
(cd "$stage/main/package" && npm pack --silent --pack-destination "$out" >/dev/null)

ls "$out/tensorlane-$version.tgz" "$out/tensorlane-$platform-$version.tgz"
