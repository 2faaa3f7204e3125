// Node entry: the N-API addon (js/tensorlane.<platform>-<arch>[-gnu].node), or the wasm build
// when the addon is missing or TENSORLANE_BACKEND=wasm. TENSORLANE_BACKEND=addon makes a missing
// addon an error instead of a fallback.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { makeApi } from './common.js';
import { makeZt } from './zt.js';
import { companionPath, makeFormats, memorySource } from './formats.js';

const require = createRequire(import.meta.url);
const want = process.env.TENSORLANE_BACKEND ?? '';

function addonFile() {
  const libc = process.platform === 'linux' ? (process.report?.getReport?.().header?.glibcVersionRuntime ? '-gnu' : '-musl') : '';
  const abi = process.platform === 'win32' ? '-msvc' : libc;
  return `./tensorlane.${process.platform}-${process.arch}${abi}.node`;
}

let addon = null;
let loadError = null;
if (want !== 'wasm') {
  try {
    addon = require(addonFile());
  } catch (e) {
    loadError = e;
    if (want === 'addon') throw new Error(`TENSORLANE_BACKEND=addon but the addon could not be loaded: ${e.message}`, { cause: e });
  }
}

/**
 * Where shard `name` of the root file `root` is: `<stem>-<name>.zt` next to it (the reference
 * convention), else `<name>` or `<name>.zt` in the same directory (shard names are single path
 * components by the spec's naming rule).
 */
export function shardPath(root, name) {
  const dir = dirname(root);
  const stem = basename(root, extname(root));
  for (const f of [join(dir, `${stem}-${name}.zt`), join(dir, name), join(dir, `${name}.zt`)]) if (existsSync(f)) return f;
  return null;
}

let api;
let memory = () => undefined;
if (addon) {
  api = makeApi({
    name: 'addon',
    decodeRaw: addon.decodeRaw,
    encodeRaw: addon.encodeRaw,
    dequantizeRaw: addon.dequantizeRaw,
    copiedBytes: addon.copiedBytes,
    RawStreamDecoder: addon.RawStreamDecoder,
  });
  const zt = makeZt(addon, { openPath: (p) => addon.ztMmap(p), shardPath });
  // A path is mapped (zero-copy views; only the pages a parser touches are read).
  const pathSource = (p) => memorySource(addon.ztMmap(p), basename(p), p);
  api = { ...api, ...zt, open: makeFormats(addon, zt, { pathSource, companionPath }).open };
} else {
  const wasm = await import('./wasm-node.js');
  api = wasm.default;
  memory = wasm.wasmMemory;
}

export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes, open, writeZt } = api;
/** 'addon' or 'wasm'. */
export const backendName = api.backend;
/** Why the addon was not used (null when it was, or when wasm was requested). */
export const addonLoadError = loadError;
/** The wasm instance's memory when the wasm backend is in use. */
export const wasmMemory = memory;
export default api;
