// run() in headless Chromium on WebGPU (`device: 'webgpu'`: 'auto' takes the wasm CPU executor on
// SwiftShader, tests/browser/run_wasm.test.mjs; SwiftShader: no GPU, no shader-f16, 1 GiB buffer
// limits): greedy tokens must be the native CPU executor's (`tensorlane run --json`, at test
// time) for random-weight GGUFs of several weight types (tests/python/llm_gen.py), everything
// resident and under a budget whose weight arena is below half the model, from a File and by URL
// (HTTP Range: from the test's web-demo/serve.mjs, and from the real `tensorlane serve`, whose
// bytes a proxy in front of it counts, the page loaded through it). The bytes the server sent
// after loading must be the plan's streamed bytes per forward pass times the passes, and loading
// must fetch the header and resident bytes once.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '../../web-demo/serve.mjs';
import { ARGS, CHROMIUM, CI, chromium, missing as chromiumMissing } from './_chromium.mjs';
import '../../js/wasm-node.js';
import { glue } from '../../js/wasm-backend.js';
import { byteSource, prepareModel } from '../../js/run-model.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const BIN = process.env.TENSORLANE_BIN ?? join(ROOT, 'target/debug/tensorlane');
const PY = join(ROOT, 'tests/.venv-formats/bin/python');
const WGSL = join(ROOT, 'wasm/pkg/llm_wgsl.js');
let missing = chromiumMissing;
if (!missing && !existsSync(BIN)) {
  // Built as other browser suites build it, when cargo is there.
  const r = spawnSync('cargo', ['build', '-q', '-p', 'tensorlane-cli'], { cwd: ROOT, stdio: 'inherit' });
  if (r.status !== 0 || !existsSync(BIN)) missing = `${BIN} not built (cargo build -p tensorlane-cli)`;
}
missing ??= !existsSync(PY) ? `${PY} missing (scripts/setup.sh)` : !existsSync(WGSL) ? `${WGSL} missing (scripts/build-js.sh)` : null;
if (missing && CI) throw new Error(`${missing} (CI=true: failing, not skipping)`);

const CONTEXT = 64;
const PROMPT = [1, 300, 45, 120, 77];
/** SwiftShader takes about a second per pass over these models: a few tokens each. */
const MAX = 3;

function native(path, budget) {
  // The WebGPU runner keeps an f32 KV cache: the CPU run too, so only the kernels differ.
  const args = ['run', path, '--tokens', PROMPT.join(','), '--max-new-tokens', String(MAX), '--context', String(CONTEXT), '--cache-type', 'f32', '--json'];
  if (budget) args.push('--budget', String(budget));
  const r = spawnSync(BIN, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

/**
 * `tensorlane serve FILE --web ROOT` on a free loopback port behind a proxy of this process that
 * forwards every request and appends `{path, bytes}` (the response body's bytes) to `log`:
 * `{ base, mount, stop }`, `base` the proxy's origin, `mount` the file's URL path.
 */
async function tensorlaneServe(file, log) {
  const child = spawn(BIN, ['serve', file, '--bind', '127.0.0.1:0', '--web', ROOT], { stdio: ['ignore', 'pipe', 'pipe'], env: Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'TENSORLANE_TOKEN')) });
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  const origin = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`tensorlane serve printed no URL within 30 s:\n${stderr}`));
    }, 30000);
    child.on('exit', (code) => reject(new Error(`tensorlane serve exited (${code}):\n${stderr}`)));
    child.stdout.on('data', (c) => {
      out += c;
      const line = /^(http:\/\/[^/\s]+)\//m.exec(out);
      if (line) {
        clearTimeout(timer);
        resolve(new URL(line[1]));
      }
    });
  });
  const proxy = createServer((req, res) => {
    const entry = { method: req.method, path: decodeURIComponent(new URL(req.url, 'http://x').pathname), bytes: 0 };
    log.push(entry);
    const up = request({ host: origin.hostname, port: origin.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.on('data', (c) => (entry.bytes += c.length));
      r.pipe(res);
    });
    up.on('error', (e) => res.destroy(e));
    req.pipe(up);
  });
  await new Promise((r) => proxy.listen(0, '127.0.0.1', r));
  return {
    base: `http://127.0.0.1:${proxy.address().port}`,
    mount: `/files/${basename(dirname(file))}/${basename(file)}`,
    stop: () => {
      proxy.closeAllConnections();
      proxy.close();
      child.kill();
    },
  };
}

describe('run() on WebGPU in Chromium', { skip: missing ?? false }, () => {
  let M, server, url, browser, page;
  const log = [];
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tl-run-'));
    const out = JSON.parse(execFileSync(PY, [join(ROOT, 'tests/python/llm_gen.py'), dir, '11'], { encoding: 'utf8' }));
    M = Object.fromEntries(out.models.map((m) => [m.name, m.path]));
    M.broken = out.broken;
    const generated = new Map(Object.entries(M).filter(([, p]) => typeof p === 'string').map(([n, p]) => [`${n}.gguf`, { path: p }]));
    generated.set('bad-arch.gguf', { path: out.broken['bad-arch'] });
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
  async function inPage(name, budget, how, bindLimit, on = page, src = `/gen/${name}.gguf`) {
    return on.evaluate(
      async ({ name, budget, how, CONTEXT, PROMPT, MAX, bindLimit, src }) => {
        const { run } = await import('/js/run.js');
        let source = src;
        if (how === 'file') source = new File([await (await fetch(source)).blob()], `${name}.gguf`);
        try {
          const s = await run(source, { budget, context: CONTEXT, bindLimit, device: 'webgpu' });
          const tokens = [];
          for await (const t of s.generate(PROMPT, { maxTokens: MAX })) tokens.push(t.id);
          const r = { tokens, info: { ...s.info, tensors: undefined }, stats: s.stats };
          s.close();
          return r;
        } catch (e) {
          return { error: e.message, code: e.code, minimum: e.minimum };
        }
      },
      { name, budget, how, CONTEXT, PROMPT, MAX, bindLimit, src },
    );
  }

  /** The plan's figures for `name` (the wasm LlmModel in Node: the same compiler the page runs). */
  async function figures(name) {
    const { model } = await prepareModel(glue, byteSource(new Uint8Array(readFileSync(M[name])), `${name}.gguf`));
    try {
      return { minimum: model.minimumBudget(CONTEXT, ''), weights: model.weightBytes(), workingSet: model.workingSet(CONTEXT) };
    } finally {
      model.free();
    }
  }

  // Weight types x (everything resident | a weight arena of 40% of the weights) x (File | URL);
  // one with bindings of at most 64 KiB, so the larger weights (resident and streamed) are bound
  // in parts of whole rows, as a weight over the adapter's limit is.
  const SPLIT = 64 << 10;
  const CASES = [
    ['llama-Q8_0', 'resident', 'file'],
    ['llama-Q8_0', 'budget', 'url', SPLIT],
    ['llama-Q4_K', 'budget', 'file'],
    ['llama-F16', 'budget', 'url'],
    ['llama-F32', 'resident', 'url'],
    ['llama-BF16', 'budget', 'file'],
    ['llama-Q4_0', 'resident', 'file'],
    // qwen3: the per-head Q/K norms, a head wider than embedding / heads.
    ['qwen3-Q8_0', 'budget', 'url'],
    // By URL from the real `tensorlane serve` (the page loaded from it, through a counting proxy).
    ['llama-Q6_K', 'budget', 'serve'],
  ];
  for (const [name, mode, how, bindLimit] of CASES) {
    it(`${name}, ${mode === 'budget' ? 'a budget below half the model' : 'everything resident'}, from ${how === 'serve' ? 'tensorlane serve by URL' : `a ${how}`}${bindLimit ? ', weights bound in parts of 64 KiB' : ''}: greedy tokens equal the native CPU executor\'s${how !== 'file' ? ', and the server sends the plan\'s streamed bytes per pass' : ''}`, { timeout: 60000 }, async () => {
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
      let start = log.length;
      let got, served;
      if (how === 'serve') {
        const sent = [];
        const srv = await tensorlaneServe(M[name], sent);
        const p = await browser.newPage();
        try {
          p.on('console', (m) => m.type() === 'error' && console.log('page:', m.text()));
          await p.goto(`${srv.base}/models`);
          start = sent.length;
          got = await inPage(name, budget, 'url', bindLimit, p, srv.mount);
          served = sent.slice(start).filter((e) => e.path === srv.mount).reduce((a, e) => a + e.bytes, 0);
        } finally {
          await p.close();
          srv.stop();
        }
      } else {
        got = await inPage(name, budget, how, bindLimit);
        served = log.slice(start).filter((e) => e.path === `/gen/${name}.gguf`).reduce((a, e) => a + e.bytes, 0);
      }
      assert.ok(!got.error, `${name} ${how}: ${got.error}`);
      if (bindLimit) assert.ok(got.info.bindings.parts > got.info.bindings.weights, `weights split into parts: ${JSON.stringify(got.info.bindings)}`);
      else assert.equal(got.info.bindings.parts, got.info.bindings.weights, 'one binding per weight');
      assert.deepEqual(got.tokens, want, `${name} ${mode}, from a ${how}`);
      assert.equal(got.stats.passes, MAX, 'one pass for the prompt, one per further token');
      if (mode === 'budget') {
        assert.ok(got.info.plan.streamed_bytes > got.info.weightBytes / 2);
        assert.equal(got.info.streamedPerForward, got.info.plan.streamed_bytes, `${name}: the runner streams what the plan says`);
        assert.equal(got.stats.streamedBytes, got.stats.passes * got.info.plan.streamed_bytes, `${name}: streamed bytes = passes x plan`);
      } else {
        assert.equal(got.info.plan, null);
        assert.equal(got.stats.streamedBytes, 0);
      }
      assert.equal(got.stats.fetchedBytes, got.stats.streamedBytes, `${name}: after loading, only the plan's streamed bytes are read`);
      if (how !== 'file') {
        assert.equal(served, got.info.loadFetched + got.stats.fetchedBytes, `${name}: the server sent what the runner counted`);
        assert.ok(got.info.loadFetched <= got.info.headerBytes + got.info.residentRead + 64 * 1024, `${name}: loading fetches the header and the resident bytes once`);
      }
    });
  }

  it('the inspector\'s Run view runs ?view=run&tokens=..&max=..&budget=.. on load: the same tokens, the plan drawn; a budget below the minimum explained with its minimum (screenshots in tests/out/)', { timeout: 60000 }, async () => {
    const name = 'llama-Q4_K';
    const f = await figures(name);
    const budget = f.workingSet + Math.floor(f.weights * 0.4);
    const want = native(M[name], budget).tokens;
    const view = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    try {
      await view.goto(`${url}/web-demo/index.html?url=/gen/${name}.gguf&view=run&tokens=${PROMPT.join(',')}&max=${MAX}&budget=${budget}&context=${CONTEXT}&device=webgpu`);
      await view.waitForSelector('.run-view[data-run-state=done], .run-view[data-run-state=error]', { timeout: 50000 });
      assert.equal(await view.getAttribute('.run-view', 'data-run-state'), 'done', await view.textContent('.run-view .rv-msg'));
      assert.deepEqual(JSON.parse(await view.textContent('[data-run-tokens]')), want);
      assert.equal(await view.getAttribute('.run-view', 'data-run-device'), 'webgpu');
      // Rates to three significant digits: SwiftShader's 0.0x tok/s is not shown as 0.0.
      const rate = /prefill([\d.]+) tok\/s/.exec(await view.textContent('.run-view .rv-stats'))?.[1];
      assert.ok(Number(rate) > 0 && rate === String(Number(Number(rate).toPrecision(3))), `prefill rate '${rate}'`);
      assert.equal(await view.locator('.run-view .rv-plan svg').count(), 1);
      assert.ok(Number(await view.getAttribute('.run-view .rv-slot', 'width')) > 0, 'the ring slot being filled is drawn');
      assert.match(await view.textContent('.run-view .rv-now'), /last streamed: \S+\.weight/);
      mkdirSync(join(ROOT, 'tests/out'), { recursive: true });
      await view.screenshot({ path: join(ROOT, 'tests/out/run-view.png'), fullPage: true });
      await view.goto(`${url}/web-demo/index.html?url=/gen/${name}.gguf&view=run&tokens=1,2&max=2&budget=${f.minimum - 1000}&context=${CONTEXT}&device=webgpu`);
      await view.waitForSelector('.run-view[data-run-state=error]', { timeout: 20000 });
      assert.match(await view.textContent('.run-view .rv-msg'), new RegExp(`Budget too small \\(minimum .*, ${f.minimum} bytes\\)`));
      await view.screenshot({ path: join(ROOT, 'tests/out/run-view-budget.png'), fullPage: true });
      // The page keeps working: "Use the minimum" runs at the minimum budget.
      await view.click('.run-view .rv-use-min');
      await view.waitForSelector('.run-view[data-run-state=done], .run-view[data-run-state=error]', { timeout: 30000 });
      assert.equal(await view.getAttribute('.run-view', 'data-run-state'), 'done', await view.textContent('.run-view .rv-msg'));
      assert.equal(JSON.parse(await view.textContent('[data-run-tokens]')).length, 2);
    } finally {
      await view.close();
    }
  });

  it('a worker whose module does not load says which file and why, not [object Event]', { timeout: 30000 }, async () => {
    // The same files, but the WebGPU kernels' module answers 404 (what a binary that did not
    // embed wasm/pkg/llm_wgsl.js served).
    const { server: broken, url: brokenUrl } = await serve({ generated: new Map([['m.gguf', { path: M['llama-Q4_K'] }]]), faults: (req) => (req.url.includes('llm_wgsl.js') ? 404 : null) });
    const p = await browser.newPage();
    try {
      await p.goto(`${brokenUrl}/tests/browser/harness/view.html`);
      const r = await p.evaluate(async () => {
        const { run } = await import('/js/run.js');
        try {
          (await run('/gen/m.gguf')).close();
          return { ok: true };
        } catch (e) {
          return { message: e.message, code: e.code };
        }
      });
      assert.equal(r.code, 'error', JSON.stringify(r));
      assert.match(r.message, /^the run worker could not start: \/wasm\/pkg\/llm_wgsl\.js: HTTP 404/);
    } finally {
      await p.close();
      broken.close();
    }
  });

  it('cancel() stops computing and fetching: at most the pass under way finishes, nothing is read past it', { timeout: 30000 }, async () => {
    const name = 'llama-Q8_0';
    const f = await figures(name);
    const budget = f.workingSet + Math.floor(f.weights * 0.4);
    const r = await page.evaluate(
      async ({ name, budget, CONTEXT, PROMPT }) => {
        const { run } = await import('/js/run.js');
        const s = await run(`/gen/${name}.gguf`, { budget, context: CONTEXT, device: 'webgpu' });
        const tokens = [];
        for await (const t of s.generate(PROMPT, { maxTokens: 48, stopAtEog: false })) {
          tokens.push(t.id);
          if (tokens.length === 1) s.cancel();
        }
        const out = { tokens, stats: s.stats, streamed: s.info.plan.streamed_bytes };
        s.close();
        return out;
      },
      { name, budget, CONTEXT, PROMPT },
    );
    assert.equal(r.stats.cancelled, true);
    assert.ok(r.tokens.length <= 3, `stopped after ${r.tokens.length} tokens of 48`);
    assert.ok(r.stats.passes <= r.tokens.length + 1, `${r.stats.passes} passes for ${r.tokens.length} tokens`);
    assert.equal(r.stats.streamedBytes, r.stats.passes * r.streamed);
    // What was read ahead for a pass that never ran is at most the next two weights.
    assert.ok(r.stats.fetchedBytes - r.stats.streamedBytes <= r.streamed, `${r.stats.fetchedBytes - r.stats.streamedBytes} bytes read past the last pass`);
  });

  it('a budget below the minimum and an unsupported architecture are explained, not thrown at the page', { timeout: 30000 }, async () => {
    const min = (await figures('llama-Q8_0')).minimum;
    const small = await inPage('llama-Q8_0', min - 1000, 'url');
    assert.equal(small.code, 'budget');
    assert.equal(small.minimum, min);
    assert.match(small.error, new RegExp(`smallest budget the scheduler policy accepts is ${min} bytes`));
    const bad = await inPage('bad-arch', undefined, 'url');
    assert.equal(bad.code, 'unsupported');
    assert.match(bad.error, /unsupported architecture 'gptj'/);
  });
});
