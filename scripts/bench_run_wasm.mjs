#!/usr/bin/env node
// Text generation on the wasm CPU executor (js/run-cpu.js: tensorlane-llm's CPU executor in wasm,
// one thread, simd128) in headless Chromium beside the native CPU executor (`tensorlane run
// --threads N --json`) on the same model, prompt and machine, in one run:
//   node scripts/bench_run_wasm.mjs MODEL.gguf [--bin target/release/tensorlane] [--fraction 0.4]
//        [--prompt-tokens 32] [--tokens 32] [--context 256] [--repeat 3] [--threads 1,2]
// For each of "everything resident" and "a weight arena of FRACTION of the weights" (the browser
// reads the streamed bytes from the test server by HTTP Range at each pass): prefill and decode
// tokens/s (the best of REPEAT runs), whether the tokens equal the native CPU executor's. Prints
// a Markdown table. Needs scripts/build-js.sh (a release wasm) and Chromium.
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
  console.error('usage: node scripts/bench_run_wasm.mjs MODEL.gguf [--bin PATH] [--fraction 0.4] [--prompt-tokens 32] [--tokens 32] [--context 256] [--repeat 3] [--threads 1,2]');
  process.exit(2);
}
const BIN = opt('bin', 'target/release/tensorlane');
const fraction = Number(opt('fraction', '0.4'));
const promptN = Number(opt('prompt-tokens', '32'));
const maxT = Number(opt('tokens', '32'));
const context = Number(opt('context', '256'));
const repeat = Number(opt('repeat', '3'));
const threads = opt('threads', '1,2').split(',').map(Number);
const { model: m } = await prepareModel(glue, byteSource(new Uint8Array(readFileSync(model)), basename(model)));
const weights = m.weightBytes();
// the CPU executor's f16 KV cache
const budget = m.workingSet(context, 'f16') + Math.floor(weights * fraction);
if (budget < (m.minimumBudget(context, '', 'f16') ?? Infinity)) throw new Error(`a ${fraction} arena is below the plan's minimum ${m.minimumBudget(context, '', 'f16')}`);
const vocab = m.vocabSize();
m.free();
const prompt = [1, ...Array.from({ length: promptN - 1 }, (_, i) => 3 + ((i * 37) % (vocab - 3)))];
const best = (runs) => ({ ...runs[0], prefill: Math.max(...runs.map((r) => r.prefill)), decode: Math.max(...runs.map((r) => r.decode)) });

function native(t, b) {
  const args = ['run', model, '--tokens', prompt.join(','), '--max-new-tokens', String(maxT), '--context', String(context), '--threads', String(t), '--json'];
  if (b) args.push('--budget', String(b));
  const runs = [];
  for (let i = 0; i < repeat; i++) {
    const r = spawnSync(BIN, args, { encoding: 'utf8' });
    if (r.status !== 0) return { error: r.stderr.trim().split('\n').pop() };
    const s = JSON.parse(r.stdout);
    runs.push({ tokens: s.tokens, prefill: s.stats.prefill_tokens_per_s, decode: s.stats.decode_tokens_per_s });
  }
  return best(runs);
}

const { server, url } = await serve({ generated: new Map([['m.gguf', { path: resolve(model) }]]) });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });
const page = await browser.newPage();
await page.goto(`${url}/tests/browser/harness/view.html`);
async function web(b, how) {
  const r = await page.evaluate(
    async ({ b, context, prompt, maxT, repeat, how }) => {
      const { run } = await import('/js/run.js');
      let source = '/gen/m.gguf';
      if (how === 'file') source = new File([await (await fetch(source)).blob()], 'm.gguf');
      const s = await run(source, { budget: b, context, device: 'wasm' });
      const runs = [];
      for (let i = 0; i < repeat; i++) {
        const tokens = [];
        for await (const t of s.generate(prompt, { maxTokens: maxT })) tokens.push(t.id);
        runs.push({ tokens, prefill: s.stats.prefillTokensPerS, decode: s.stats.decodeTokensPerS });
      }
      s.close();
      return runs;
    },
    { b, context, prompt, maxT, repeat, how },
  );
  return best(r);
}

const rows = [];
for (const [label, b] of [['all resident', undefined], [`budget ${budget} (arena ${Math.round(fraction * 100)}% of weights)`, budget]]) {
  // Everything resident: the source does not matter (read once); under a budget, a File's
  // slices (FileReaderSync) and HTTP Range requests (synchronous, from the test server) differ.
  const webs = b ? [['File', await web(b, 'file')], ['URL', await web(b, 'url')]] : [['URL', await web(b, 'url')]];
  const ws = webs[0][1];
  const nat = threads.map((t) => [t, native(t, b)]);
  const ref = nat[0][1];
  const same = (r) => (r.tokens && ref.tokens ? (JSON.stringify(r.tokens) === JSON.stringify(ref.tokens) ? 'yes' : 'no') : '–');
  for (const [how, w] of webs) rows.push(`| ${label} | wasm (Chromium, 1 thread, simd128${b ? `, streamed from a ${how}` : ''}) | ${w.prefill.toFixed(1)} | ${w.decode.toFixed(2)} | ${same(w)} |`);
  for (const [t, r] of nat) rows.push(`| ${label} | CPU (native, ${t} thread${t > 1 ? 's' : ''}) | ${r.error ? `n/a: ${r.error}` : r.prefill.toFixed(1)} | ${r.error ? '' : r.decode.toFixed(2)} | ${same(r)} |`);
  const n1 = nat.find(([t]) => t === 1)?.[1];
  if (n1 && !n1.error) rows.push(`| ${label} | wasm${b ? ' (File)' : ''} / native 1 thread | ${(ws.prefill / n1.prefill).toFixed(2)}x | ${(ws.decode / n1.decode).toFixed(2)}x | |`);
}
await browser.close();
server.close();
console.log(`model ${basename(model)}: ${weights} weight bytes; ${prompt.length}-token prompt, ${maxT} greedy tokens, context ${context}, best of ${repeat}\n`);
console.log('| plan | executor | prefill tok/s | decode tok/s | same tokens as native |');
console.log('|---|---|---|---|---|');
console.log(rows.join('\n'));
