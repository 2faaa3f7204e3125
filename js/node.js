// Node entry: the N-API addon (js/tensorlane.<platform>-<arch>[-gnu].node), or the wasm build
// when the addon is missing or TENSORLANE_BACKEND=wasm. TENSORLANE_BACKEND=addon makes a missing
// addon an error instead of a fallback.
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import { makeApi } from './common.js';
import { makeZt } from './zt.js';
import { companionPath, makeFormats, memorySource } from './formats.js';
import { shardPath } from './node-paths.js';
import { makeCompare } from './compare.js';

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
  // A model path is opened by the native host (tensorlane::model::Model, through the addon's
  // ModelFile); zero-copy tensors are views on a copy-on-write mapping (ztMmap). Other paths (.zt,
  // {format} forced, {companions} given) are mapped and read through the byte-range session.
  const pathSource = (p) => memorySource(addon.ztMmap(p), basename(p), p);
  const io = { pathSource, companionPath, openModel: (p) => new addon.ModelFile(p), mapPath: (p) => addon.ztMmap(p) };
  const formats = makeFormats(addon, zt, io);
  api = { ...api, ...zt, open: formats.open, stats: formats.stats, ...makeCompare(addon) };
} else {
  const wasm = await import('./wasm-node.js');
  api = wasm.default;
  memory = wasm.wasmMemory;
}

export { shardPath };
export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes, open, stats, writeZt, compare } = api;
/** 'addon' or 'wasm'. */
export const backendName = api.backend;
/** Why the addon was not used (null when it was, or when wasm was requested). */
export const addonLoadError = loadError;
/** The wasm instance's memory when the wasm backend is in use. */
export const wasmMemory = memory;
export default api;
