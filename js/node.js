// Node entry: the N-API addon, or the wasm build when the addon is missing or
// TENSORLANE_BACKEND=wasm. TENSORLANE_BACKEND=addon makes a missing addon an error instead of a
// fallback. The addon is looked for, in order, as
//   1. js/tensorlane.<platform>-<arch>[-gnu|-musl|-msvc].node next to this file (a development
//      build made by scripts/build-js.sh; the published package does not ship it), then
//   2. the platform package @tensorlane/<platform>-<arch>[-abi] (napi-rs layout), which npm
//      installs from the main package's optionalDependencies on the platforms it matches.
// When neither loads, the wasm build is used and a warning (code TENSORLANE_WASM_FALLBACK) says
// so once; `backendName` (and the default export's `backend`) tell which backend is in use.
//
// No top-level await: this module (and js/wasm-node.js) can be loaded by require() (js/node.cjs),
// which is what Node >= 20.19 / 22.12 allow for ES modules without top-level await.
import { createRequire } from 'node:module';
import { basename, join } from 'node:path';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { nodeRun, RunError } from './run.js';
import { makeApi } from './common.js';
import { companionPath, makeFormats, memorySource, MAX_TENSOR_BYTES } from './formats.js';
import { platformName } from './platform.js';
import { makeCompare } from './compare.js';

const require = createRequire(import.meta.url);
const want = process.env.TENSORLANE_BACKEND ?? '';

/** Where the addon may be, in the order tried (see the top of this file). */
export const addonCandidates = [`./tensorlane.${platformName()}.node`, `@tensorlane/${platformName()}`];

let addon = null;
let loadError = null;
if (want !== 'wasm') {
  const tries = [];
  for (const where of addonCandidates) {
    try {
      addon = require(where);
      break;
    } catch (e) {
      tries.push(`${where}: ${e.code === 'MODULE_NOT_FOUND' ? 'not installed' : e.message}`);
      loadError ??= e;
    }
  }
  if (!addon) {
    const msg = `the tensorlane N-API addon for ${platformName()} could not be loaded (${tries.join('; ')})`;
    loadError = new Error(msg, { cause: loadError });
    if (want === 'addon') throw new Error(`TENSORLANE_BACKEND=addon but ${msg}`, { cause: loadError });
    process.emitWarning(`${msg}; using the wasm build instead (same results, slower; paths are read, not mapped). Install @tensorlane/${platformName()} (an optional dependency of tensorlane) or set TENSORLANE_BACKEND=wasm to choose wasm and silence this.`, { code: 'TENSORLANE_WASM_FALLBACK' });
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
    ztWriteRaw: addon.ztWriteRaw,
  });
  // A file the byte-range session opens by path is read into memory with pread (addon.readFile,
  // refused over maxTensorBytes) unless the caller asks for a mapping with {mmap: true}
  // (addon.mapFile, a copy-on-write map). A mapping handed to JavaScript can have no guard: if the file is truncated
  // while it is mapped, touching a missing page kills the process with SIGBUS. A read file cannot
  // change underneath; a file truncated while it is read is an error.
  const pathBytes = (p, options) => (options?.mmap === true ? addon.mapFile(p) : addon.readFile(p, options?.maxTensorBytes ?? MAX_TENSOR_BYTES));
  // A path (any format, .zt with its shards included) is opened by the native host
  // (tensorlane::model::Model, through the addon's ModelFile, with pread); with {mmap: true}
  // zero-copy tensors are views on a copy-on-write mapping (mapFile). Paths with {format} forced
  // or {companions} given are read (or mapped) and read through the byte-range session.
  const pathSource = (p, options) => memorySource(pathBytes(p, options), basename(p), p);
  const io = { pathSource, companionPath, openModel: (p) => new addon.ModelFile(p), mapPath: pathBytes };
  const formats = makeFormats(addon, io);
  api = { ...api, open: formats.open, stats: formats.stats, mergeSummaries: formats.mergeSummaries, mergeStats: formats.mergeStats, ...makeCompare(addon) };
} else {
  // Synchronous: js/wasm-node.js instantiates the wasm with initSync and has no top-level await.
  const wasm = require('./wasm-node.js');
  api = wasm.default;
  memory = wasm.wasmMemory;
}

export const { decode, encode, StreamDecoder, decodeStream, widen, Bundle, Quantized, TensorlaneError, DTYPES, copiedBytes, open, stats, mergeSummaries, mergeStats, writeZt, compare } = api;
/** 'addon' or 'wasm'. */
export const backendName = api.backend;
/** This package's version, `tensorlane X.Y.Z` (its wasm build and addon are built from the same version). */
export const version = `tensorlane ${require('../package.json').version}`;
/** Why the addon was not used (null when it was, or when wasm was requested). */
export const addonLoadError = loadError;
/** The wasm instance's memory when the wasm backend is in use. */
export const wasmMemory = memory;
export default api;
/**
 * run() in Node: the addon's CPU executor on a thread of its own (js/run.js nodeRun), the same
 * API as the browser's WebGPU run(). Without the addon (the wasm fallback) it rejects with a
 * RunError saying why.
 */
export const run = addon
  ? nodeRun(addon, runSource)
  : async () => {
      throw new RunError(`run() in Node needs the N-API addon, which did not load (${loadError?.message ?? 'TENSORLANE_BACKEND=wasm'}); the wasm build has no CPU executor`, 'unsupported');
    };
export { RunError };

/** run()'s source as a path the addon opens: `{path, done()}`, done() removing a temporary copy. */
async function runSource(source) {
  const none = async () => {};
  if (typeof source === 'string' && !/^(https?|file):\/\//i.test(source)) return { path: source, done: none };
  const url = source instanceof URL ? source : typeof source === 'string' ? new URL(source) : null;
  if (url?.protocol === 'file:') return { path: fileURLToPath(url), done: none };
  let bytes;
  if (url) {
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new RunError(`run(): ${url.href}: only file:, http: and https: URLs can be read`);
    const res = await fetch(url).catch((e) => {
      throw new RunError(`run(): ${url.href}: ${e.cause?.message ?? e.message}`);
    });
    if (!res.ok) throw new RunError(`run(): ${url.href}: HTTP ${res.status} ${res.statusText}`);
    bytes = new Uint8Array(await res.arrayBuffer());
  } else if (source instanceof Uint8Array) bytes = source;
  else if (source instanceof ArrayBuffer) bytes = new Uint8Array(source);
  else if (typeof Blob !== 'undefined' && source instanceof Blob) bytes = new Uint8Array(await source.arrayBuffer());
  else throw new RunError('run(): the source is neither a path, a URL, a Blob nor bytes (Uint8Array)');
  // The addon maps models from files: bytes go to a private temporary file, removed once the
  // session has opened it (the mapping stays valid on POSIX).
  const dir = await mkdtemp(join(tmpdir(), 'tensorlane-run-'));
  const path = join(dir, 'model.gguf');
  await writeFile(path, bytes);
  return { path, done: () => rm(dir, { recursive: true, force: true }).catch(() => {}) };
}
