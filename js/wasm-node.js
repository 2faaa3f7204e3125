// Node entry of the wasm build: reads the .wasm with fs and instantiates it synchronously.
import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { basename } from 'node:path';
import { glue, wasmBackend } from './wasm-backend.js';
import { makeApi } from './common.js';
import { companionPath, makeFormats } from './formats.js';
import { makeCompare } from './compare.js';

const exports = glue.initSync({ module: readFileSync(new URL('../wasm/pkg/tensorlane_wasm_bg.wasm', import.meta.url)) });
const backend = wasmBackend(exports);
// A path is read on demand through a file descriptor (closed with the source).
const closer = new FinalizationRegistry((fd) => {
  try {
    closeSync(fd);
  } catch {}
});
function pathSource(path) {
  const fd = openSync(path, 'r');
  const src = {
    name: basename(path),
    path,
    size: fstatSync(fd).size,
    lazy: false,
    read(offset, len) {
      const out = new Uint8Array(len);
      for (let n = 0; n < len; ) {
        const r = readSync(fd, out, n, len - n, offset + n);
        if (r === 0) throw new Error(`${path}: the file ended at ${offset + n} (it changed while open?)`);
        n += r;
      }
      return out;
    },
    close() {
      if (src.closed) return;
      src.closed = true;
      closer.unregister(src);
      closeSync(fd);
    },
  };
  closer.register(src, fd, src);
  return src;
}
const formats = makeFormats(backend, { pathSource, companionPath });
const api = { ...makeApi(backend), open: formats.open, stats: formats.stats, mergeSummaries: formats.mergeSummaries, mergeStats: formats.mergeStats, ...makeCompare(backend) };

export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes, open, stats, mergeSummaries, mergeStats, writeZt, compare } = api;
export const backendName = 'wasm';
/** This build's version, `tensorlane X.Y.Z` (the wasm's). */
export const version = glue.version();
/** The wasm instance's WebAssembly.Memory. */
export const wasmMemory = () => exports.memory;
export default api;
