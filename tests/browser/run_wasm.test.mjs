// run() in headless Chromium on the wasm CPU executor (tensorlane-llm's CPU executor compiled to
// wasm32 with simd128, js/run-cpu.js): greedy tokens must be the native CPU executor's
// (`tensorlane run --json`, at test time, its default f16 KV cache) for random-weight GGUFs of
// every weight type the native CPU has kernels for (tests/python/llm_gen.py, `--types` for Q4_1,
// Q5_0, Q5_1), everything resident and under a budget whose weight arena is below half the model,
// from a File and by URL; the bytes fetched per pass are the plan's streamed bytes. `device:
// 'auto'` takes wasm on this machine's SwiftShader adapter (a software one) and for a weight type
// the WGSL kernels lack; the Run view says which device ran (`data-run-device`) and takes
// `device=` in its URL. The real SmolLM2-135M-Instruct (Q4_1) by URL gives the CLI's text.
// `cacheType: 'q8_0'` gives the CLI's `--cache-type q8_0` tokens under a budget f16 cannot meet.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '../../web-demo/serve.mjs';
import { ARGS, CHROMIUM, CI, chromium, missing as chromiumMissing } from './_chromium.mjs';
import '../../js/wasm-node.js';
import { glue } from '../../js/wasm-backend.js';
import { byteSource, prepareModel } from '../../js/run-model.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = process.env.TENSORLANE_BIN ?? join(ROOT, 'target/debug/tensorlane');
const PY = join(ROOT, 'tests/.venv-formats/bin/python');
const SMOLLM2 = join(ROOT, 'tests/data/llm/SmolLM2-135M-Instruct.Q4_1.gguf');
let missing = chromiumMissing;
if (!missing && !existsSync(BIN)) {
  const r = spawnSync('cargo', ['build', '-q', '-p', 'tensorlane-cli'], { cwd: ROOT, stdio: 'inherit' });
  if (r.status !== 0 || !existsSync(BIN)) missing = `${BIN} not built (cargo build -p tensorlane-cli)`;
}
missing ??= !existsSync(PY) ? `${PY} missing (scripts/setup.sh)` : null;
if (missing && CI) throw new Error(`${missing} (CI=true: failing, not skipping)`);

const CONTEXT = 64;
const PROMPT = [1, 300, 45, 120, 77];
const MAX = 8;

function native(path, budget, extra = []) {
  const args = ['run', path, '--tokens', PROMPT.join(','), '--max-new-tokens', String(MAX), '--context', String(CONTEXT), '--json', ...extra];
  if (budget) args.push('--budget', String(budget));
  const r = spawnSync(BIN, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

describe('run() on the wasm CPU executor in Chromium', { skip: missing ?? false }, () => {
  let M, server, url, browser, page;
  const log = [];
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tl-wasm-'));
    const out = JSON.parse(execFileSync(PY, [join(ROOT, 'tests/python/llm_gen.py'), dir, '11'], { encoding: 'utf8' }));
    const more = JSON.parse(execFileSync(PY, [join(ROOT, 'tests/python/llm_gen.py'), '--types', dir, '12', 'Q4_1,Q5_0,Q5_1'], { encoding: 'utf8' }));
    M = Object.fromEntries([...out.models, ...more.models].map((m) => [m.name, m.path]));
    const generated = new Map(Object.entries(M).map(([n, p]) => [`${n}.gguf`, { path: p }]));
    if (existsSync(SMOLLM2)) generated.set('smollm2.gguf', { path: SMOLLM2 });
    ({ server, url } = await serve({ generated, log }));
    browser = await chromium.launch({ executablePath: CHROMIUM, args: [...ARGS.filter((a) => a !== '--disable-gpu'), '--enable-unsafe-webgpu'] });
    page = await browser.newPage();
    page.on('console', (m) => m.type() === 'error' && console.log('page:', m.text()));
    await page.goto(`${url}/tests/browser/harness/view.html`);
  });
  after(async () => {
    await browser?.close();
    server?.close();
  });

  /** Runs in the page: run() from a File (fetched whole first) or a URL; tokens, info and stats back. */
  async function inPage(src, { budget, how = 'url', device = 'wasm', prompt = PROMPT, max = MAX, context = CONTEXT, cacheType } = {}) {
    return page.evaluate(
      async ({ src, budget, how, device, prompt, max, context, cacheType }) => {
        const { run } = await import('/js/run.js');
        let source = src;
        if (how === 'file') source = new File([await (await fetch(source)).blob()], src.split('/').pop());
        try {
          const s = await run(source, { budget, context, device, cacheType });
          const tokens = [];
          let text = '';
          for await (const t of s.generate(prompt, { maxTokens: max })) {
            tokens.push(t.id);
            text += t.text;
          }
          const r = { tokens, text, info: { ...s.info, tensors: undefined }, stats: s.stats };
          s.close();
          return r;
        } catch (e) {
          return { error: e.message, code: e.code, minimum: e.minimum };
        }
      },
      { src, budget, how, device, prompt, max, context, cacheType },
    );
  }

  /** The plan's figures for `name` with a `cacheType` KV cache (default the CPU executor's f16; the wasm LlmModel in Node). */
  async function figures(name, cacheType = 'f16') {
    const { model } = await prepareModel(glue, byteSource(new Uint8Array(readFileSync(M[name])), `${name}.gguf`));
    try {
      return { minimum: model.minimumBudget(CONTEXT, '', cacheType), weights: model.weightBytes(), workingSet: model.workingSet(CONTEXT, cacheType) };
    } finally {
      model.free();
    }
  }

  // Every weight type of the native CPU executor x (everything resident | a weight arena of 40%
  // of the weights) x (File | URL); qwen2 (biases) and qwen3 (per-head Q/K norms) besides llama.
  const CASES = [
    ['llama-F32', 'resident', 'url'],
    ['llama-F16', 'budget', 'file'],
    ['llama-BF16', 'resident', 'file'],
    ['llama-Q8_0', 'budget', 'url'],
    ['llama-Q4_0', 'budget', 'file'],
    ['llama-Q4_1', 'budget', 'url'],
    ['llama-Q5_0', 'resident', 'url'],
    ['llama-Q5_1', 'budget', 'file'],
    ['llama-Q4_K', 'budget', 'url'],
    ['llama-Q6_K', 'resident', 'file'],
    ['qwen2-Q8_0', 'budget', 'url'],
    ['qwen3-F16', 'resident', 'url'],
  ];
  for (const [name, mode, how] of CASES) {
    it(`${name}, ${mode === 'budget' ? 'a budget below half the model' : 'everything resident'}, from a ${how}: greedy tokens equal \`tensorlane run\`'s on the CPU, the plan's bytes read per pass`, { timeout: 60000 }, async () => {
      const want = native(M[name]).tokens;
      assert.equal(want.length, MAX, name);
      let budget;
      if (mode === 'budget') {
        const f = await figures(name);
        budget = f.workingSet + Math.floor(f.weights * 0.4);
        assert.ok(budget >= f.minimum, `${name}: 40% of the weights is above the plan's minimum`);
        const n = native(M[name], budget);
        assert.deepEqual(n.tokens, want, `${name}: the CLI gives the same tokens under --budget ${budget}`);
        assert.ok(n.stats.plan_streamed_bytes_per_token > n.stats.weight_bytes / 2, `${name}: more than half of the weights streamed`);
      }
      const start = log.length;
      const got = await inPage(`/gen/${name}.gguf`, { budget, how });
      assert.ok(!got.error, `${name} ${how}: ${got.error}`);
      assert.equal(got.info.device, 'wasm');
      assert.deepEqual(got.tokens, want, `${name} ${mode}, from a ${how}`);
      assert.equal(got.stats.passes, MAX, 'one pass for the prompt, one per further token');
      if (mode === 'budget') {
        assert.ok(got.info.plan.streamed_bytes > got.info.weightBytes / 2);
        assert.equal(got.info.streamedPerForward, got.info.plan.streamed_bytes, `${name}: the executor streams what the plan says`);
        assert.equal(got.stats.streamedBytes, got.stats.passes * got.info.plan.streamed_bytes, `${name}: streamed bytes = passes x plan`);
        assert.ok(got.info.residentRead < got.info.weightBytes / 2 + got.info.workingSet, `${name}: under half the weights read in at load (${got.info.residentRead})`);
      } else {
        assert.equal(got.info.plan, null);
        assert.equal(got.stats.streamedBytes, 0);
      }
      assert.equal(got.stats.fetchedBytes, got.stats.streamedBytes, `${name}: after loading, only the plan's streamed bytes are read`);
      if (how === 'url') {
        const served = log.slice(start).filter((e) => e.path === `/gen/${name}.gguf`).reduce((a, e) => a + e.bytes, 0);
        assert.equal(served, got.info.loadFetched + got.stats.fetchedBytes, `${name}: the server sent what the runner counted`);
      }
    });
  }

  it("cacheType 'q8_0': the CLI's tokens under --cache-type q8_0, resident and under a budget below f16's minimum; WebGPU keeps f32 only (auto goes to wasm, webgpu refuses)", { timeout: 60000 }, async () => {
    const name = 'llama-F32';
    const want = native(M[name], null, ['--cache-type', 'q8_0']).tokens;
    assert.equal(want.length, MAX);
    const [f16, q8] = [await figures(name), await figures(name, 'q8_0')];
    // 64 positions: the KV cache is a small part of the working set (activations are most of it)
    assert.ok(q8.workingSet < f16.workingSet, `q8_0 working set ${q8.workingSet}, f16 ${f16.workingSet}`);
    const resident = await inPage(`/gen/${name}.gguf`, { cacheType: 'q8_0' });
    assert.ok(!resident.error, resident.error);
    assert.equal(resident.info.cacheType, 'q8_0');
    assert.equal(resident.info.workingSet, q8.workingSet);
    assert.deepEqual(resident.tokens, want);
    // a budget f16 cannot meet: the q8_0 minimum
    assert.ok(q8.minimum < f16.minimum);
    const tight = await inPage(`/gen/${name}.gguf`, { cacheType: 'q8_0', budget: q8.minimum });
    assert.ok(!tight.error, tight.error);
    assert.deepEqual(tight.tokens, want);
    assert.deepEqual(native(M[name], q8.minimum, ['--cache-type', 'q8_0']).tokens, want, 'the CLI under the same budget');
    const f16Refused = await inPage(`/gen/${name}.gguf`, { budget: q8.minimum });
    assert.equal(f16Refused.code, 'budget');
    assert.equal(f16Refused.minimum, f16.minimum);
    const auto = await inPage(`/gen/${name}.gguf`, { device: 'auto', cacheType: 'q8_0', max: 2 });
    assert.ok(!auto.error, auto.error);
    assert.equal(auto.info.device, 'wasm');
    const gpu = await inPage(`/gen/${name}.gguf`, { device: 'webgpu', cacheType: 'q8_0', max: 2 });
    if (gpu.code !== 'no-webgpu') {
      assert.equal(gpu.code, 'unsupported');
      assert.match(gpu.error, /f32 KV cache.*'q8_0'/);
    }
    const bad = await inPage(`/gen/${name}.gguf`, { cacheType: 'q4', max: 2 });
    assert.match(bad.error, /cache type 'q4' is not a KV cache type \(use one of: f16, f32, q8_0\)/);
  });

  it("device 'auto' takes wasm on a software WebGPU adapter (SwiftShader here) and says why; 'webgpu' runs there when asked; a type without a WGSL kernel goes to wasm under auto and is refused under webgpu", { timeout: 60000 }, async () => {
    const want = native(M['llama-Q8_0']).tokens.slice(0, 2);
    const auto = await inPage('/gen/llama-Q8_0.gguf', { device: 'auto', max: 2 });
    assert.ok(!auto.error, auto.error);
    assert.equal(auto.info.device, 'wasm');
    assert.match(auto.info.deviceWhy, /software|no WebGPU|no adapter/);
    assert.deepEqual(auto.tokens, want);
    const gpu = await inPage('/gen/llama-Q8_0.gguf', { device: 'webgpu', max: 2 });
    if (gpu.code !== 'no-webgpu') {
      assert.ok(!gpu.error, gpu.error);
      assert.equal(gpu.info.device, 'webgpu');
    }
    const q41 = await inPage('/gen/llama-Q4_1.gguf', { device: 'auto', max: 2 });
    assert.ok(!q41.error, q41.error);
    assert.equal(q41.info.device, 'wasm');
    if (gpu.code !== 'no-webgpu') {
      const refused = await inPage('/gen/llama-Q4_1.gguf', { device: 'webgpu', max: 2 });
      assert.equal(refused.code, 'unsupported');
      assert.match(refused.error, /element type Q4_1 on the WebGPU device/);
    }
    const bad = await inPage('/gen/llama-Q8_0.gguf', { device: 'tpu' });
    assert.equal(bad.code, 'unsupported');
    assert.match(bad.error, /device 'tpu'.*auto, webgpu, wasm/);
  });

  it("the Run view takes device= in its URL, shows data-run-device (wasm or webgpu: what ran) and switches device from its selector", { timeout: 120000 }, async () => {
    const name = 'llama-Q4_K';
    const want = native(M[name]).tokens;
    const view = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    try {
      const at = (device) => `${url}/web-demo/index.html?url=/gen/${name}.gguf&view=run&tokens=${PROMPT.join(',')}&max=${MAX}&context=${CONTEXT}${device ? `&device=${device}` : ''}`;
      for (const [device, ran] of [['wasm', 'wasm'], [null, 'wasm']]) {
        await view.goto(at(device));
        await view.waitForSelector('.run-view[data-run-state=done], .run-view[data-run-state=error]', { timeout: 50000 });
        assert.equal(await view.getAttribute('.run-view', 'data-run-state'), 'done', await view.textContent('.run-view .rv-msg'));
        assert.equal(await view.getAttribute('.run-view', 'data-run-device'), ran, `device=${device}`);
        assert.equal(await view.inputValue('.run-view .rv-device'), device ?? 'auto');
        assert.deepEqual(JSON.parse(await view.textContent('[data-run-tokens]')), want);
        assert.match(await view.textContent('.run-view .rv-device-now'), /wasm/);
      }
      // cache=q8_0 in the URL: the selector shows it and the tokens are the CLI's --cache-type q8_0 ones.
      await view.goto(`${at('wasm')}&cache=q8_0`);
      await view.waitForSelector('.run-view[data-run-state=done], .run-view[data-run-state=error]', { timeout: 50000 });
      assert.equal(await view.getAttribute('.run-view', 'data-run-state'), 'done', await view.textContent('.run-view .rv-msg'));
      assert.equal(await view.inputValue('.run-view .rv-cache'), 'q8_0');
      assert.deepEqual(JSON.parse(await view.textContent('[data-run-tokens]')), native(M[name], null, ['--cache-type', 'q8_0']).tokens);
      assert.match(await view.textContent('.run-view .rv-device-now'), /q8_0 KV cache/);
      if (process.env.RUN_VIEW_SHOT) await view.screenshot({ path: process.env.RUN_VIEW_SHOT });
      await view.selectOption('.run-view .rv-cache', '');
      // Switching to WebGPU in the selector and running again runs there (SwiftShader: 2 tokens).
      await view.fill('.run-view .rv-max', '2');
      await view.selectOption('.run-view .rv-device', 'webgpu');
      await view.click('.run-view .rv-go');
      await view.waitForFunction(() => ['done', 'error'].includes(document.querySelector('.run-view').dataset.runState) && document.querySelector('.run-view .rv-go').disabled === false, null, { timeout: 60000 });
      const state = await view.getAttribute('.run-view', 'data-run-state');
      if (state === 'done') {
        assert.equal(await view.getAttribute('.run-view', 'data-run-device'), 'webgpu');
        assert.deepEqual(JSON.parse(await view.textContent('[data-run-tokens]')), want.slice(0, 2));
      } else assert.match(await view.textContent('.run-view .rv-msg'), /No WebGPU/);
    } finally {
      await view.close();
    }
  });

  it('the real SmolLM2-135M-Instruct (Q4_1) by URL on wasm: the text `tensorlane run` prints', { timeout: 180000, skip: existsSync(SMOLLM2) ? false : `${SMOLLM2} missing (scripts/fetch_smollm2.sh)` }, async () => {
    const prompt = 'The capital of France is';
    const r = spawnSync(BIN, ['run', SMOLLM2, '--prompt', prompt, '--max-new-tokens', '16', '--context', '256', '--json'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const want = JSON.parse(r.stdout);
    const got = await inPage('/gen/smollm2.gguf', { prompt, max: 16, context: 256 });
    assert.ok(!got.error, got.error);
    assert.equal(got.info.device, 'wasm');
    assert.deepEqual(got.tokens, want.tokens);
    assert.equal(got.stats.text, want.text);
    console.log(`SmolLM2 Q4_1 on wasm: prefill ${got.stats.prefillTokensPerS.toFixed(1)} tok/s, decode ${got.stats.decodeTokensPerS.toFixed(2)} tok/s: ${JSON.stringify(got.stats.text)}`);
  });
});
