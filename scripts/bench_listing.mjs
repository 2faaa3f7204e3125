// Times listing (open()) a model with many tensors from a path, from bytes and from a Blob, on the
// backend chosen by TENSORLANE_BACKEND (addon or wasm). Usage:
//   node scripts/bench_listing.mjs FILE...            (see BENCHMARKS.md, "Listing many tensors")
import { openAsBlob, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import * as tl from '../js/node.js';

const files = process.argv.slice(2);
if (!files.length) {
  console.error('usage: node scripts/bench_listing.mjs FILE...');
  process.exit(2);
}
const backend = process.env.TENSORLANE_BACKEND || 'default';
console.log(`| backend | file | tensors | path (s) | bytes (s) | Blob (s) |`);
console.log(`|---|---|---|---|---|---|`);
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
  console.log(`| ${backend} | ${basename(file)} | ${n} | ${p.toFixed(2)} | ${b.toFixed(2)} | ${bl.toFixed(2)} |`);
}
