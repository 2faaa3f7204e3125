// Node entry of the wasm build: reads the .wasm with fs and instantiates it synchronously.
import { readFileSync } from 'node:fs';
import { glue, wasmBackend } from './wasm-backend.js';
import { makeApi } from './common.js';

const exports = glue.initSync({ module: readFileSync(new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url)) });
const backend = wasmBackend(exports);
const api = makeApi(backend);

export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes } = api;
export const backendName = 'wasm';
/** The wasm instance's WebAssembly.Memory. */
export const wasmMemory = () => exports.memory;
export default api;
