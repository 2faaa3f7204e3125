// llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU binary) as the reference for llm/tests.
//
//   node tests/llama/reference.mjs JOB.json > OUT.json
//
// JOB: {"threads": N, "models": [{"name", "path", "prompt": [ids], "generate": N,
//       "f32_kv": bool, "kv_type": "Q8_0" (optional), "context": positions (optional, 256),
//       "strings": [text, ...]}]}
// OUT: {"models": [{"name", "greedy": [ids], "ended": bool, "sequence": [ids], "positions": [[[id, log p], ...]],
//       "tokenized": [[ids], ...]}]}
//
// greedy: up to `generate` tokens from sequence.evaluate(prompt, {temperature: 0}); its generator
// ends at an end-of-generation token without yielding it, so `ended` says whether it did. positions: for each position of
// sequence = prompt + greedy, the next-token distribution from controlledEvaluate at temperature 0
// (a softmax of the raw logits), as log-probabilities of every token whose probability is over
// 1e-30 (smaller ones lose precision in float32). tokenized: model.tokenize(text) of each string
// (no BOS is added, special-token text is not parsed).
//
// Never builds and never downloads: getLlama({gpu: false, build: "never", skipDownload: true}).
import { readFileSync } from "node:fs";
import { getLlama } from "node-llama-cpp";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true, logLevel: "error" });
const out = { models: [] };
for (const m of job.models) {
  const model = await llama.loadModel({ modelPath: m.path, gpuLayers: 0 });
  // kv_type: the cache's ggml type for keys and values ("Q8_0"; f32_kv: "F32"; neither: llama.cpp's
  // default, F16). A quantized V cache needs flash attention in llama.cpp, so Q8_0 turns it on.
  const kvType = m.kv_type ?? (m.f32_kv ? "F32" : null);
  const kv = kvType ? { experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType } : {};
  const ctxOptions = {
    contextSize: m.context ?? 256,
    batchSize: m.context ?? 256,
    threads: job.threads ?? 1, // 1: ggml's spinning workers crawl on a loaded machine
    flashAttention: kvType === "Q8_0",
    sequences: 1,
    ...kv,
  };

  let context = await model.createContext(ctxOptions);
  let seq = context.getSequence();
  const greedy = [];
  if (m.generate > 0) {
    for await (const t of seq.evaluate(m.prompt, { temperature: 0 })) {
      greedy.push(t);
      if (greedy.length >= m.generate) break;
    }
  }
  const ended = greedy.length < m.generate;
  await context.dispose();

  const sequence = [...m.prompt, ...greedy];
  context = await model.createContext(ctxOptions);
  seq = context.getSequence();
  const res = await seq.controlledEvaluate(
    sequence.map((t) => [t, { generateNext: { probabilities: true, token: true, options: { temperature: 0 } } }]),
  );
  const positions = res.map((r) => {
    const row = [];
    for (const [tok, p] of r.next.probabilities) if (p > 1e-30) row.push([tok, Math.log(p)]);
    return row;
  });
  await context.dispose();

  const tokenized = (m.strings ?? []).map((s) => Array.from(model.tokenize(s)));
  out.models.push({ name: m.name, greedy, ended, sequence, positions, tokenized });
  await model.dispose();
}
await llama.dispose();
process.stdout.write(JSON.stringify(out));
