// llama.cpp's prefill and decode speed on the CPU, for scripts/bench_llm.sh:
//   node tests/llama/bench.mjs MODEL THREADS PROMPT_TOKENS DECODE_TOKENS
// The prompt is BOS then ids 300, 301, ... evaluated in one batch; decode is greedy generation of
// DECODE_TOKENS tokens through sequence.evaluate (so it includes node-llama-cpp's per-token
// overhead, ~3 ms on a 2-core machine). Default F16 KV cache, no flash attention; CACHE_TYPE=f32 or
// q8_0 in the environment sets the cache (q8_0 with the flash attention llama.cpp needs for it).
// Prints one JSON line.
import { getLlama } from "node-llama-cpp";

const [path, threads, nPrompt, nDecode] = [process.argv[2], +process.argv[3], +process.argv[4], +process.argv[5]];
const cacheType = process.env.CACHE_TYPE ?? "f16";
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, logLevel: "error" });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const context = await model.createContext({
  contextSize: nPrompt + nDecode + 8, batchSize: nPrompt, threads, flashAttention: cacheType === "q8_0", sequences: 2,
  ...(cacheType !== "f16" ? { experimentalKvCacheKeyType: cacheType.toUpperCase(), experimentalKvCacheValueType: cacheType.toUpperCase() } : {}),
});
const prompt = [1, ...Array.from({ length: nPrompt - 1 }, (_, i) => 300 + i)];
let seq = context.getSequence();
let t0 = performance.now();
await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { token: true } }] : t)));
const prefill = (performance.now() - t0) / 1000;
seq.dispose();
seq = context.getSequence();
await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { token: true } }] : t)));
const gen = [];
t0 = performance.now();
for await (const t of seq.evaluate([prompt[prompt.length - 1]], { temperature: 0 })) {
  gen.push(t);
  if (gen.length >= nDecode) break;
}
const decode = (performance.now() - t0) / 1000;
console.log(JSON.stringify({
  model: path, threads, prefill_tokens: nPrompt, prefill_tokens_per_s: +(nPrompt / prefill).toFixed(2),
  decode_tokens: gen.length, decode_tokens_per_s: +(gen.length / decode).toFixed(2),
}));
await llama.dispose();
