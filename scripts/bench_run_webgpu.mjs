#!/usr/bin/env node
// Text generation on WebGPU in headless Chromium (SwiftShader when there is no GPU) beside the
// native executors on the same model, prompt and machine, in one run:
//   node scripts/bench_run_webgpu.mjs MODEL.gguf [--bin target/release/tensorlane] [--fraction 0.4]
//        [--prompt-tokens 32 | --prompt 1,2,3] [--tokens 16] [--context 128] [--budget-only]
// For each of "everything resident" and "a weight arena of FRACTION of the weights": Chromium's
// run() (js/run.js; the Worker's prefill/decode tokens/s, bytes streamed and fetched per pass)
// and `tensorlane run --device cpu|wgpu --json` (wgpu: lavapipe without a GPU; skipped when the
// binary lacks the feature). Prints a Markdown table. Needs scripts/build-js.sh and Chromium.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { serve } from '../web-demo/serve.mjs';
import { ARGS, CHROMIUM, chromium } from '../tests/browser/_chromium.mjs';
import '../js/wasm-node.js';
import { glue } from '../js/wasm-backend.js';
import { byteSource, prepareModel } from '../js/run-model.js';

const argv = process.argv.slice(2);
const opt = (k, d) => {
  const i = argv.indexOf(`--${k}`);
  return i >= 0 ? argv[i + 1] : d;
};
const model = argv[0];
if (!model || model.startsWith('--')) {
  console.error('usage: node scripts/bench_run_webgpu.mjs MODEL.gguf [--bin PATH] [--fraction 0.4] [--prompt-tokens 32] [--tokens 16] [--context 128]');
  process.exit(2);
}
const BIN = opt('bin', 'target/release/tensorlane');
const fraction = Number(opt('fraction', '0.4'));
const promptN = Number(opt('prompt-tokens', '32'));
const maxT = Number(opt('tokens', '16'));
const context = Number(opt('context', '128'));
const { model: m } = await prepareModel(glue, byteSource(new Uint8Array(readFileSync(model)), basename(model)));
const weights = m.weightBytes();
const workingSet = m.workingSet(context);
const budget = workingSet + Math.floor(weights * fraction);
if (budget < (m.minimumBudget(context, '') ?? Infinity)) throw new Error(`a ${fraction} arena is below the plan's minimum ${m.minimumBudget(context, '')}`);
const vocab = m.vocabSize();
m.free();
const prompt = opt('prompt') ? opt('prompt').split(',').map(Number) : [1, ...Array.from({ length: promptN - 1 }, (_, i) => 3 + ((i * 37) % (vocab - 3)))];

function native(device, b) {
  const args = ['run', model, '--tokens', prompt.join(','), '--max-new-tokens', String(maxT), '--context', String(context), '--device', device, '--json'];
  if (b) args.push('--budget', String(b));
  const r = spawnSync(BIN, args, { encoding: 'utf8' });
  if (r.status !== 0) return { error: r.stderr.trim().split('\n').pop() };
  const s = JSON.parse(r.stdout);
  return { tokens: s.tokens, prefill: s.stats.prefill_tokens_per_s, decode: s.stats.decode_tokens_per_s, perPass: s.stats.streamed_bytes_per_token, plan: s.stats.plan_streamed_bytes_per_token };
}

const log = [];
const { server, url } = await serve({ generated: new Map([['m.gguf', { path: resolve(model) }]]), log });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: [...ARGS.filter((a) => a !== '--disable-gpu'), '--enable-unsafe-webgpu'] });
const page = await browser.newPage();
await page.goto(`${url}/tests/browser/harness/view.html`);
async function web(b) {
  const start = log.length;
  const r = await page.evaluate(
    async ({ b, context, prompt, maxT }) => {
      const { run } = await import('/js/run.js');
      // Main-thread tasks over 50 ms while loading and generating (the Long Tasks API).
      const long = [];
      const obs = new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration)));
      obs.observe({ type: 'longtask' });
      const s = await run('/gen/m.gguf', { budget: b, context, device: 'webgpu' });
      const tokens = [];
      for await (const t of s.generate(prompt, { maxTokens: maxT, stopAtEog: false })) tokens.push(t.id);
      obs.disconnect();
      const out = { tokens, stats: s.stats, info: { ...s.info, tensors: undefined }, longest: Math.max(0, ...long) };
      s.close();
      return out;
    },
    { b, context, prompt, maxT },
  );
  const served = log.slice(start).filter((e) => e.path === '/gen/m.gguf').reduce((a, e) => a + e.bytes, 0) - r.info.loadFetched;
  const st = r.stats;
  return { longest: r.longest, tokens: r.tokens, prefill: st.prefillTokensPerS, decode: st.decodeTokensPerS, perPass: st.fetchedBytes / st.passes, served: served / st.passes, plan: r.info.plan?.streamed_bytes ?? 0, adapter: r.info.adapter };
}

const rows = [];
const plans = [['all resident', undefined], [`budget ${budget} (arena ${Math.round(fraction * 100)}% of weights)`, budget]];
for (const [label, b] of argv.includes('--budget-only') ? plans.slice(1) : plans) {
  const cpu = native('cpu', b);
  const wg = native('wgpu', b);
  const sw = await web(b);
  for (const [dev, r] of [['WebGPU (Chromium, SwiftShader)', sw], ['wgpu (native, lavapipe)', wg], ['CPU (native)', cpu]]) {
    const eq = (x, y) => (x?.tokens && y?.tokens ? (JSON.stringify(x.tokens) === JSON.stringify(y.tokens) ? 'yes' : 'no') : '–');
    const same = `${eq(r, cpu)} / ${eq(r, wg)}`;
    rows.push(`| ${label} | ${dev} | ${r.error ? `n/a: ${r.error}` : r.prefill.toFixed(1)} | ${r.error ? '' : r.decode.toFixed(2)} | ${r.error ? '' : Math.round(r.perPass)} | ${r.error ? '' : r.plan} | ${r.served !== undefined ? Math.round(r.served) : ''} | ${same} | ${r.longest !== undefined ? Math.round(r.longest) : ''} |`);
  }
  console.error(`${label}: adapter maxStorageBufferBindingSize ${sw.adapter.maxStorageBufferBindingSize}, maxBufferSize ${sw.adapter.maxBufferSize}, shader-f16 ${sw.adapter.features.includes('shader-f16')}`);
}
await browser.close();
server.close();
console.log(`model ${basename(model)}: ${weights} weight bytes; ${prompt.length}-token prompt, ${maxT} greedy tokens, context ${context}\n`);
console.log('| plan | executor | prefill tok/s | decode tok/s | weight bytes read per pass | plan streamed bytes | bytes served by HTTP per pass | same tokens as CPU / wgpu | longest main-thread task, ms |');
console.log('|---|---|---|---|---|---|---|---|---|');
console.log(rows.join('\n'));
