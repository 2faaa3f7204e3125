// llama.cpp (node-llama-cpp, its default mmap load) generating from a prompt of token ids, for
// scripts/bench_disk.sh:  node tests/llama/disk.mjs MODEL THREADS DECODE_TOKENS IDS
// Greedy; prints one JSON line with the generated tokens and the load, prefill and decode times.
import { getLlama } from "node-llama-cpp";

const [path, threads, nDecode, ids] = [process.argv[2], +process.argv[3], +process.argv[4], process.argv[5]];
const prompt = ids.split(",").map(Number);
const t00 = performance.now();
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, logLevel: "error" });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const context = await model.createContext({ contextSize: 64, batchSize: prompt.length, threads, flashAttention: false });
const seq = context.getSequence();
const load = (performance.now() - t00) / 1000;
const gen = [];
let t0 = performance.now();
let first = 0;
for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
  if (gen.length === 0) first = (performance.now() - t0) / 1000;
  gen.push(t);
  if (gen.length >= nDecode) break;
}
const total = (performance.now() - t0) / 1000;
console.log(JSON.stringify({
  tokens: gen, load_s: load, prefill_s: first, decode_tokens: gen.length - 1,
  decode_tokens_per_s: (gen.length - 1) / Math.max(total - first, 1e-9),
}));
await llama.dispose();
