// Node entry of the wasm build: reads the .wasm with fs and instantiates it synchronously.
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { glue, wasmBackend } from './wasm-backend.js';
import { makeApi } from './common.js';
import { makeZt } from './zt.js';

const exports = glue.initSync({ module: readFileSync(new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url)) });
const backend = wasmBackend(exports);
function shardPath(root, name) {
  const dir = dirname(root);
  const stem = basename(root, extname(root));
  for (const f of [join(dir, `${stem}-${name}.zt`), join(dir, name), join(dir, `${name}.zt`)]) if (existsSync(f)) return f;
  return null;
}
// Paths are read whole with fs (the wasm backend cannot map files); views are on that buffer.
const api = { ...makeApi(backend), ...makeZt(backend, { openPath: (p) => new Uint8Array(readFileSync(p)), shardPath }) };

export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes, open, writeZt } = api;
export const backendName = 'wasm';
/** The wasm instance's WebAssembly.Memory. */
export const wasmMemory = () => exports.memory;
export default api;
