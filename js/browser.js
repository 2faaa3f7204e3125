// Browser (and default) entry: the wasm build. The module initialises the wasm with top-level
// await from the .wasm next to the glue, so `import { decode } from 'tensorlane'` is ready to use.
// Decoded TypedArrays are views on the caller's ArrayBuffer, never on wasm memory.
import { glue, wasmBackend } from './wasm-backend.js';
import { makeApi } from './common.js';
import { makeFormats } from './formats.js';
import { makeCompare } from './compare.js';

const exports = await glue.default({ module_or_path: new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url) });
const backend = wasmBackend(exports);
// open(): every format (.zt and Tenso files included) through one reader.
const formats = makeFormats(backend);
const api = { ...makeApi(backend), open: formats.open, stats: formats.stats, mergeSummaries: formats.mergeSummaries, mergeStats: formats.mergeStats, ...makeCompare(backend) };

export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes, open, stats, mergeSummaries, mergeStats, writeZt, compare } = api;
export const backendName = 'wasm';
/** This build's version, `tensorlane X.Y.Z` (the wasm's: the inspector shows it). */
export const version = glue.version();
/** The wasm instance's WebAssembly.Memory. */
export const wasmMemory = () => exports.memory;
export default api;
export { run, RunError } from './run.js';
