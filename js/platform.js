// Which prebuilt addon fits this Node (shared by js/node.js and scripts/pack.sh).

/** napi-rs's platform name: linux-x64-gnu, linux-arm64-musl, darwin-arm64, win32-x64-msvc, ... */
export function platformName() {
  const libc = process.platform === 'linux' ? (process.report?.getReport?.().header?.glibcVersionRuntime ? '-gnu' : '-musl') : '';
  const abi = process.platform === 'win32' ? '-msvc' : libc;
  return `${process.platform}-${process.arch}${abi}`;
}
