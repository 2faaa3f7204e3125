// The wasm side of the stats benchmark (BENCHMARKS.md, `## Stats`): GB/s of the core's statistics
// (`tensorlane_core::stats`: summary pass + 64-bin histogram pass) compiled to WebAssembly, on the
// same data shapes as `core/benches/stats.rs` and `scripts/bench_stats.py` (float32, bfloat16 and
// Q4_K blocks), beside a JavaScript memcpy (`Uint8Array.set`) of the same bytes.
//
//   scripts/build-js.sh && node scripts/bench_stats_wasm.mjs [--mib 1024] [--runs 3]
//
// float32 and bfloat16 go through `stats({dtype, data})`; Q4_K through `open(bytes).stats(name)`
// on a one-tensor GGUF built in memory (the wasm backend reads the tensor's bytes in `chunkBytes`
// slices, default 4 MiB, as it does from a Blob). Data are finite and seeded; throughput is stored
// bytes / best-of-runs seconds.
import { argv, versions } from 'node:process';
import * as wasm from '../js/wasm-node.js';

const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i > 0 ? Number(argv[i + 1]) : dflt;
};
const MIB = arg('mib', 1024);
const RUNS = arg('runs', 3);

let seed = 0x9e3779b9;
const rand = () => {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 2 ** 32;
};
const normal = () => Math.sqrt(-2 * Math.log(rand() + 1e-12)) * Math.cos(2 * Math.PI * rand());

function f32(nbytes) {
  const a = new Float32Array(nbytes / 4);
  for (let i = 0; i < a.length; i++) a[i] = normal();
  return a;
}

function bf16(nbytes) {
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  const a = new Uint16Array(nbytes / 2);
  for (let i = 0; i < a.length; i++) {
    f[0] = normal();
    a[i] = u[0] >>> 16;
  }
  return a;
}

/** A GGUF v3 file with one Q4_K tensor of `nbytes` stored bytes (random blocks, finite scales). */
function q4kGguf(nbytes) {
  const blocks = Math.floor(nbytes / 144);
  const name = new TextEncoder().encode('w');
  const head = 4 + 4 + 8 + 8 + (8 + name.length) + 4 + 8 + 4 + 8;
  const dataAt = Math.ceil(head / 32) * 32;
  const out = new Uint8Array(dataAt + blocks * 144);
  const v = new DataView(out.buffer);
  let o = 0;
  out.set([0x47, 0x47, 0x55, 0x46], 0); // "GGUF"
  v.setUint32((o = 4), 3, true);
  v.setBigUint64((o += 4), 1n, true); // tensors
  v.setBigUint64((o += 8), 0n, true); // metadata keys
  v.setBigUint64((o += 8), BigInt(name.length), true);
  out.set(name, (o += 8));
  v.setUint32((o += name.length), 1, true); // n_dims
  v.setBigUint64((o += 4), BigInt(blocks * 256), true);
  v.setUint32((o += 8), 12, true); // GGML_TYPE_Q4_K
  v.setBigUint64((o += 4), 0n, true); // offset in the data section
  for (let i = dataAt; i < out.length; i += 4) v.setUint32(i, (rand() * 2 ** 32) >>> 0, true);
  for (let b = 0; b < blocks; b++) {
    // d and dmin: small positive float16 (exponent 0x08..0x0b), as the other benches use.
    v.setUint16(dataAt + b * 144, 0x2000 | ((rand() * 0x0fff) | 0), true);
    v.setUint16(dataAt + b * 144 + 2, 0x2000 | ((rand() * 0x0fff) | 0), true);
  }
  return { bytes: out, stored: blocks * 144 };
}

function best(fn) {
  let t = Infinity;
  for (let r = 0; r < RUNS; r++) {
    const t0 = performance.now();
    fn();
    t = Math.min(t, performance.now() - t0);
  }
  return t / 1e3;
}

const row = (what, stored, s) => console.log(`| ${what} | ${(stored / 2 ** 20).toFixed(0)} MiB | ${(s * 1e3).toFixed(0)} ms | ${(stored / s / 1e9).toFixed(2)} |`);

console.log(`Node ${versions.node} (V8 ${versions.v8}), backend ${wasm.backendName}`);
console.log('| what | stored bytes | best time | GB/s |');
console.log('|---|---:|---:|---:|');
const n = MIB << 20;
{
  const a = f32(n);
  const dst = new Uint8Array(n);
  row('memcpy (Uint8Array.set)', n, best(() => dst.set(new Uint8Array(a.buffer))));
  row('wasm stats float32', n, best(() => wasm.stats({ dtype: 'float32', data: a }, { bins: 64 })));
}
{
  const a = bf16(n);
  row('wasm stats bfloat16', n, best(() => wasm.stats({ dtype: 'bfloat16', data: a }, { bins: 64 })));
}
{
  const { bytes, stored } = q4kGguf(n);
  const m = wasm.open(bytes);
  row('wasm stats Q4_K', stored, best(() => m.stats('w', { bins: 64 })));
  m.close();
}
