// Times listing (open()) a model with many tensors from a path, from bytes and from a Blob, on the
// backend chosen by TENSORLANE_BACKEND (addon or wasm). Usage (see BENCHMARKS.md, "Listing many
// tensors"):
//   node scripts/bench_listing.mjs [FILE...]
// Without files it writes (to a temp dir, removed afterwards) a safetensors with 100k float32 [2, 2]
// tensors and a GGUF with 20k float32 [4] tensors (BENCH_ST, BENCH_GGUF change the counts).
import { mkdtempSync, openAsBlob, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import * as tl from '../js/node.js';
import { ggufFile, safetensorsFile } from '../tests/js/_model_files.mjs';

// With the addon, also the native host alone: ModelFile (Model::open: parse and check) and its
// catalog() (the JSON text handed to JS).
const addon = tl.backendName === 'addon' ? createRequire(import.meta.url)(new URL(`../js/${tl.addonCandidates[0].slice(2)}`, import.meta.url).pathname) : null;

let files = process.argv.slice(2);
let dir;
if (!files.length) {
  dir = mkdtempSync(join(tmpdir(), 'tensorlane-bench-listing-'));
  const nSt = Number(process.env.BENCH_ST ?? 100000);
  const nGguf = Number(process.env.BENCH_GGUF ?? 20000);
  const st = join(dir, `${nSt}.safetensors`);
  writeFileSync(st, safetensorsFile(Array.from({ length: nSt }, (_, i) => [`layer.${i}.weight`, { dtype: 'F32', shape: [2, 2], data: new Uint8Array(16) }])));
  const gguf = join(dir, `${nGguf}.gguf`);
  writeFileSync(gguf, ggufFile([['general.architecture', { type: 'STRING', value: 'llama' }]], Array.from({ length: nGguf }, (_, i) => [`blk.${i}.w`, { type: 0, ne: [4], data: new Uint8Array(16) }])));
  files = [st, gguf];
}
console.log(`| backend | file | tensors | open(path) s | open(bytes) s | open(Blob) s | native parse s | native catalog JSON s |`);
console.log(`|---|---|---:|---:|---:|---:|---:|---:|`);
for (const file of files) {
  const time = async (input) => {
    const t0 = performance.now();
    const m = await tl.open(input);
    const s = (performance.now() - t0) / 1000;
    const n = m.tensors.length;
    m.close?.();
    return [s, n];
  };
  const [p, n] = await time(file);
  const [b] = await time(new Uint8Array(readFileSync(file)));
  const [bl] = await time(await openAsBlob(file));
  let native = ['-', '-'];
  if (addon) {
    const t0 = performance.now();
    const m = new addon.ModelFile(file);
    const t1 = performance.now();
    m.catalog();
    const t2 = performance.now();
    m.close();
    native = [((t1 - t0) / 1000).toFixed(3), ((t2 - t1) / 1000).toFixed(3)];
  }
  console.log(`| ${tl.backendName} | ${basename(file)} | ${n} | ${p.toFixed(2)} | ${b.toFixed(2)} | ${bl.toFixed(2)} | ${native.join(' | ')} |`);
}
if (dir) rmSync(dir, { recursive: true, force: true });
