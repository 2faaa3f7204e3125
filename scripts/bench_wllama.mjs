#!/usr/bin/env node
// wllama (llama.cpp compiled to wasm, npm @wllama/wllama) beside tensorlane's wasm CPU executor
// (run(src, {device: 'wasm'})) in the same headless Chromium, same GGUF, same text prompt, one
// thread each, greedy, in one run:
//   npm install --prefix /tmp/wl @wllama/wllama@3.13.0     (outside the repo: not a dependency)
//   node scripts/bench_wllama.mjs MODEL.gguf /tmp/wl/node_modules/@wllama/wllama/esm [--tokens 21] [--repeat 3]
// The page is not cross-origin isolated, so wllama runs its single-thread build (n_threads 1).
// Prints prefill and decode tokens/s (best of REPEAT; wllama's from its `timings`) and both texts.
import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { serve } from '../web-demo/serve.mjs';
import { ARGS, CHROMIUM, chromium } from '../tests/browser/_chromium.mjs';

const argv = process.argv.slice(2);
const opt = (k, d) => {
  const i = argv.indexOf(`--${k}`);
  return i >= 0 ? argv[i + 1] : d;
};
const [model, esm] = argv;
if (!model || !esm) {
  console.error('usage: node scripts/bench_wllama.mjs MODEL.gguf WLLAMA_ESM_DIR [--tokens 21] [--repeat 3]');
  process.exit(2);
}
const maxT = Number(opt('tokens', '21'));
const repeat = Number(opt('repeat', '3'));
const prompt = opt('prompt', 'The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome. The capital of Spain is Madrid. The capital of Portugal is');

// wllama's files and the model from a server of their own (Range supported).
const types = { '.js': 'text/javascript', '.wasm': 'application/wasm' };
const wlServer = createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  if (u.pathname === '/') {
    res.writeHead(200, { 'content-type': 'text/html' });
    return res.end('<!doctype html><title>wllama</title>');
  }
  const path = u.pathname === '/m.gguf' ? resolve(model) : u.pathname.startsWith('/wl/') ? resolve(esm, `.${u.pathname.slice(3)}`) : null;
  let size;
  try {
    size = path && statSync(path).size;
  } catch {
    size = null;
  }
  if (!path || size == null || (u.pathname !== '/m.gguf' && !path.startsWith(resolve(esm)))) {
    res.writeHead(404);
    return res.end();
  }
  const h = { 'content-type': types[extname(path)] ?? 'application/octet-stream', 'accept-ranges': 'bytes' };
  const m = /bytes=(\d+)-(\d*)/.exec(req.headers.range ?? '');
  if (m) {
    const a = Number(m[1]);
    const b = m[2] ? Number(m[2]) : size - 1;
    res.writeHead(206, { ...h, 'content-range': `bytes ${a}-${b}/${size}`, 'content-length': b - a + 1 });
    createReadStream(path, { start: a, end: b }).pipe(res);
  } else {
    res.writeHead(200, { ...h, 'content-length': size });
    if (req.method === 'HEAD') return res.end();
    createReadStream(path).pipe(res);
  }
});
await new Promise((r) => wlServer.listen(0, '127.0.0.1', r));
const { server, url } = await serve({ generated: new Map([['m.gguf', { path: resolve(model) }]]) });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS });

const wl = await browser.newPage();
await wl.goto(`http://127.0.0.1:${wlServer.address().port}/`);
const wlRuns = await wl.evaluate(
  async ({ prompt, maxT, repeat }) => {
    const { Wllama } = await import('/wl/index.js');
    const w = new Wllama({ default: '/wl/wasm/wllama.wasm' });
    await w.loadModelFromUrl(`${location.origin}/m.gguf`, { n_threads: 1, n_ctx: 256, useCache: false });
    const out = [];
    for (let i = 0; i < repeat; i++) {
      const r = await w.createCompletion({ prompt, max_tokens: maxT, temperature: 0, cache_prompt: false });
      out.push({ n: r.timings.prompt_n, prefill: r.timings.prompt_per_second, decode: r.timings.predicted_per_second, text: r.choices[0].text });
    }
    await w.exit();
    return out;
  },
  { prompt, maxT, repeat },
);
const tl = await browser.newPage();
await tl.goto(`${url}/tests/browser/harness/view.html`);
const tlRuns = await tl.evaluate(
  async ({ prompt, maxT, repeat }) => {
    const { run } = await import('/js/run.js');
    const s = await run('/gen/m.gguf', { context: 256, device: 'wasm' });
    const out = [];
    for (let i = 0; i < repeat; i++) {
      let text = '';
      for await (const t of s.generate(prompt, { maxTokens: maxT })) text += t.text;
      out.push({ n: s.stats.prefillTokens, prefill: s.stats.prefillTokensPerS, decode: s.stats.decodeTokensPerS, text });
    }
    s.close();
    return out;
  },
  { prompt, maxT, repeat },
);
await browser.close();
server.close();
wlServer.close();
const best = (rs) => ({ n: rs[0].n, prefill: Math.max(...rs.map((r) => r.prefill)), decode: Math.max(...rs.map((r) => r.decode)), text: rs[0].text });
const [w, t] = [best(wlRuns), best(tlRuns)];
console.log(`model ${model}; ${w.n}/${t.n}-token prompt (wllama/tensorlane), up to ${maxT} greedy tokens, 1 thread, best of ${repeat}\n`);
console.log('| executor | prefill tok/s | decode tok/s | text |');
console.log('|---|---|---|---|');
console.log(`| wllama (llama.cpp in wasm) | ${w.prefill.toFixed(1)} | ${w.decode.toFixed(2)} | ${JSON.stringify(w.text)} |`);
console.log(`| tensorlane wasm device | ${t.prefill.toFixed(1)} | ${t.decode.toFixed(2)} | ${JSON.stringify(t.text)} |`);
console.log(`| tensorlane / wllama | ${(t.prefill / w.prefill).toFixed(2)}x | ${(t.decode / w.decode).toFixed(2)}x | |`);
