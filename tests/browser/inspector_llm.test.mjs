// Issue 26 in Debian's Chromium (headless, playwright-core), the inspector served by
// web-demo/serve.mjs over HTTP Range, on small llama-shaped checkpoints written in memory
// (tests/js/_llm_files.mjs: a GGUF with llama.cpp's names and a safetensors with Hugging Face's):
// - the layer tree: a repeated block opens into one representative layer with its parts, the
//   count of repeats and per-layer, per-part and total parameters (not into itself again); the
//   filtered table shows its totals;
// - the architecture view: embedding → N × block (attention, MLP) → norm → head with shapes,
//   dtypes and parameters per part, from llama.cpp's and Hugging Face's names (and GGUF metadata);
//   a tied head; a part's tensor opens in the Tensors view;
// - every view's state in the address and restored on reload (search, dtype and size filters,
//   sort, tensor, heatmap mode and slice, histogram log axis, value page); Esc in the search box
//   leaves the box, not the tensor; `tensorlane serve` (target/debug/tensorlane, when built) keeps
//   the query through its `/` and `/web-demo` redirects, and so does `npx tensorlane serve` (js/cli.js);
// - statistics by URL read each byte of the tensor once, in one Worker and in helper Workers
//   (the Range bytes counted at the server);
// - the value grid: a matrix as rows × columns with row and column pages, PageUp/PageDown/Home/End
//   and ←/→ in the grid, "go to" row, column or index; Home/End/PageUp/PageDown in the table;
//   a wide matrix's heatmap is not a strip;
// - the graph: an ONNX model whose norm nodes are named /model/layers/N/ln1/* and the rest
//   /model/layers.N/* draws one block × 62 (found from the structure), not segments; opened, one
//   layer's 18 nodes coloured by op family with their weights' shapes inline, edges that name
//   their values (and shapes where declared), labels hidden when zoomed out; its Architecture
//   tab (from the initializers' names); `?blocks=off` draws the true flat graph (every node, no
//   segments) laid out in a Worker by the linear-time layered layout, only what the view shows in
//   the DOM; search centres a node;
// - compare: a cosine near 1 is told from 1, "changed only" filters the table (kept in the address);
// - smaller defects: the Tensors tab is off without a model; "1 key"; a shard index's overview
//   gives the index's size and no percentage of it; the error panel does not repeat the rule;
// - screenshots in tests/out/issue26-*.png.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { serve } from '../../web-demo/serve.mjs';
import { CI, launch, missing } from './_chromium.mjs';
import { LLM, PARAMS, llamaGguf, llamaSafetensors } from '../js/_llm_files.mjs';
import { safetensorsFile } from '../js/_model_files.mjs';
import { bigGraph, mixedNamesGraph } from '../js/_graph_compare_reference.mjs';
import * as tensorlane from '../../js/node.js';
import { serve as npmServe } from '../../js/cli.js';

/** A safetensors with one 24 MiB float32 matrix `big` (values i % 1000 - 500) after a small one. */
function bigSafetensors() {
  const big = new Float32Array(3072 * 2048);
  for (let i = 0; i < big.length; i++) big[i] = (i % 1000) - 500;
  return safetensorsFile([['small', { dtype: 'F32', shape: [4], data: new Uint8Array(16) }], ['big', { dtype: 'F32', shape: [3072, 2048], data: new Uint8Array(big.buffer) }]]);
}

const OUT = new URL('../out/', import.meta.url);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** The `tensorlane` binary `cargo test` builds (scripts/test.sh runs the Rust tests first). */
const BIN = process.env.TENSORLANE_BIN ?? join(ROOT, 'target/debug/tensorlane');
const shot = (name) => fileURLToPath(new URL(`issue26-${name}.png`, OUT));

describe('Chromium: the inspector on LLM checkpoints (issue 26)', { skip: missing ?? false }, () => {
  let server, url, browser, page;
  const problems = [];
  // Requests as the server saw them, each with the time it arrived.
  const log = [];
  log.push = (...entries) => Array.prototype.push.apply(log, entries.map((e) => Object.assign(e, { at: Date.now() })));
  const generated = new Map();

  before(async () => {
    generated.set('llama.gguf', llamaGguf());
    generated.set('llama.safetensors', llamaSafetensors());
    generated.set('llama-tied.safetensors', llamaSafetensors({ tied: true }));
    generated.set('big.safetensors', bigSafetensors());
    const wide = new Float32Array(128 * 8192).map((_, i) => Math.sin(i / 97) * ((i % 8192) / 8192));
    generated.set('wide.safetensors', safetensorsFile([['wide', { dtype: 'F32', shape: [128, 8192], data: new Uint8Array(wide.buffer) }]]));
    generated.set('llama-nudged.safetensors', llamaSafetensors({ nudge: { name: 'model.layers.2.mlp.up_proj.weight', by: 0.001 } }));
    ({ server, url } = await serve({ generated, log }));
    browser = await launch();
    page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('console', (m) => m.type() === 'error' && !/Failed to load resource/.test(m.text()) && problems.push(`console: ${m.text()}`));
    mkdirSync(OUT, { recursive: true });
  });

  after(async () => {
    await browser?.close();
    server?.closeAllConnections();
    server?.close();
  });

  async function fresh(query = '') {
    await page.goto(`${url}/web-demo/${query}`);
    await page.waitForFunction(() => document.body.dataset.state !== 'loading' && window.inspector?.ready, null, { timeout: 60000 });
    await page.evaluate(() => window.inspector.ready);
  }
  /** The tree's lines: path, label, parameters, total across repeats. */
  const treeLines = () =>
    page.$$eval('#tree .node[data-path]', (els) => els.map((e) => ({ path: e.dataset.path, label: e.querySelector('.label').textContent, params: Number(e.dataset.params), total: e.dataset.total === undefined ? null : Number(e.dataset.total), repeat: e.dataset.repeat ? Number(e.dataset.repeat) : null })));
  const countData = () => page.$eval('#count', (e) => ({ rows: Number(e.dataset.rows), params: Number(e.dataset.params), bytes: Number(e.dataset.bytes), text: e.textContent }));

  for (const [file, layers, attn, mlp, rel] of [
    ['llama.safetensors', 'model.layers', 'self_attn', 'mlp', 'self_attn.q_proj.weight'],
    ['llama.gguf', 'blk', null, null, 'attn_q.weight'],
  ]) {
    it(`${file}: the layer tree opens a repeated block into one layer's parts, with the repeat count and parameter totals`, { timeout: 60000 }, async () => {
      await fresh(`?url=/gen/${file}&view=tensors`);
      const total = await countData();
      assert.equal(total.rows, 3 + 9 * LLM.layers);
      assert.equal(total.params, PARAMS.total);
      // Down to the layers: a safetensors' `model` first (beside lm_head), a GGUF's `blk` at the top.
      if (layers === 'model.layers') await page.click('#tree .node[data-path="model"]');
      await page.click(`#tree .node[data-path="${layers}"]`);
      const group = `#tree .node[data-path="${layers}.[0..${LLM.layers - 1}]"]`;
      assert.match(await page.textContent(group), new RegExp(`0\\.\\.${LLM.layers - 1} ×${LLM.layers}`));
      await page.click(group);
      // One representative layer: its info line, its parts with per-layer and ×N totals.
      const info = await page.$eval('#tree .rep-info', (e) => ({ ...e.dataset, text: e.textContent }));
      assert.equal(Number(info.repeat), LLM.layers);
      assert.equal(Number(info.perLayer), PARAMS.layer);
      assert.equal(Number(info.total), PARAMS.layer * LLM.layers);
      if (file.endsWith('.gguf')) assert.match(info.text, /dtypes vary: .*float16|dtypes vary: .*F16/i);
      const lines = await treeLines();
      const under = lines.filter((l) => l.path.startsWith(`${layers}.0.`));
      assert.ok(under.length >= 4, `the representative's parts are listed: ${JSON.stringify(lines)}`);
      for (const l of under) assert.equal(l.total, l.params * LLM.layers, l.path);
      // Not the run again: no second group line, and no other layer's lines.
      assert.equal(lines.filter((l) => l.repeat).length, 1, 'one group line');
      assert.ok(!lines.some((l) => l.path.startsWith(`${layers}.1.`)));
      // The click filtered the table to the group's tensors, with their totals.
      let c = await countData();
      assert.equal(c.rows, 9 * LLM.layers);
      assert.equal(c.params, PARAMS.layer * LLM.layers);
      assert.match(c.text, new RegExp(`^${9 * LLM.layers} of ${3 + 9 * LLM.layers} · `));
      if (attn) {
        const a = under.find((l) => l.path === `${layers}.0.${attn}`);
        const m = under.find((l) => l.path === `${layers}.0.${mlp}`);
        // self_attn: Q, K, V, O (the norms are their own lines in HF's names).
        assert.equal(a.params, PARAMS.attention - LLM.hidden);
        assert.equal(m.params, PARAMS.mlp - LLM.hidden);
        // A part filters that part in every layer.
        await page.click(`#tree .node[data-path="${layers}.0.${attn}"]`);
        c = await countData();
        assert.equal(c.rows, 4 * LLM.layers);
        assert.equal(c.params, (PARAMS.attention - LLM.hidden) * LLM.layers);
      }
      // A tensor of the representative opens (its node first: `weight` is the last name part).
      await page.click(`#tree .node[data-path="${layers}.0.${rel.replace(/\.weight$/, '')}"]`);
      await page.click(`#tree .node[data-path="${layers}.0.${rel}"]`);
      await page.waitForFunction(() => document.getElementById('tensor').dataset.statsState === 'done', null, { timeout: 30000 });
      assert.equal(await page.$eval('#tensor', (e) => e.dataset.tensor), `${layers}.0.${rel}`);
      await page.screenshot({ path: shot(`tree-${file.split('.').pop()}`), fullPage: true });
      assert.deepEqual(problems, []);
    });
  }

  for (const file of ['llama.gguf', 'llama.safetensors', 'llama-tied.safetensors']) {
    it(`${file}: the architecture view shows embedding → ${LLM.layers} × (attention, MLP) → norm → head with parameters per part`, { timeout: 60000 }, async () => {
      await fresh(`?url=/gen/${file}`);
      assert.equal(await page.$eval('#tabs [data-view=arch]', (b) => b.disabled), false);
      await page.click('#tabs [data-view=arch]');
      const a = await page.$eval('#arch-host .arch', (root) => ({
        layers: Number(root.dataset.layers),
        prefix: root.dataset.prefix,
        params: Number(root.dataset.params),
        parts: Object.fromEntries([...root.querySelectorAll('[data-part]')].map((e) => [e.dataset.part, { params: Number(e.dataset.params), tensors: Number(e.dataset.tensors ?? 0), total: e.dataset.total ? Number(e.dataset.total) : null, tied: e.dataset.tied === 'true', rows: [...e.querySelectorAll(':scope > table [data-part-tensor]')].map((r) => [...r.children].map((c) => c.textContent)) }])),
        hyper: Object.fromEntries([...root.querySelectorAll('[data-hyper]')].map((e) => [e.dataset.hyper, e.textContent])),
        order: [...root.querySelectorAll('.arch > [data-part]')].map((e) => e.dataset.part),
        text: root.textContent,
      }));
      const gguf = file.endsWith('.gguf');
      const tied = file.includes('tied');
      assert.equal(a.layers, LLM.layers);
      assert.equal(a.prefix, gguf ? 'blk' : 'model.layers');
      assert.equal(a.params, PARAMS.total - (tied ? PARAMS.head : 0));
      assert.deepEqual(a.order, ['embedding', 'block', 'norm', 'head']);
      assert.equal(a.parts.embedding.params, PARAMS.embedding);
      assert.deepEqual(a.parts.embedding.rows, [[gguf ? 'token_embd.weight' : 'model.embed_tokens.weight', `[${LLM.vocab}, ${LLM.hidden}]`, 'float32', String(PARAMS.embedding)]]);
      assert.equal(a.parts.block.params, PARAMS.layer);
      assert.equal(a.parts.block.total, PARAMS.layer * LLM.layers);
      assert.equal(a.parts['block.attention'].params, PARAMS.attention);
      assert.equal(a.parts['block.attention'].tensors, 5);
      assert.equal(a.parts['block.mlp'].params, PARAMS.mlp);
      assert.equal(a.parts['block.mlp'].tensors, 4);
      const q = a.parts['block.attention'].rows.find((r) => /q_proj|attn_q/.test(r[0]));
      assert.deepEqual(q.slice(1), [`[${LLM.hidden}, ${LLM.hidden}]`, 'float32', String(LLM.hidden * LLM.hidden)]);
      const k = a.parts['block.attention'].rows.find((r) => /k_proj|attn_k/.test(r[0]));
      assert.equal(k[1], `[${(LLM.kvHeads * LLM.hidden) / LLM.heads}, ${LLM.hidden}]`);
      assert.equal(a.parts.norm.params, PARAMS.norm);
      if (tied) {
        assert.equal(a.parts.head.tied, true);
        assert.match(a.text, /tied to the embedding/);
      } else assert.equal(a.parts.head.params, PARAMS.head);
      assert.equal(a.hyper.blocks, String(LLM.layers));
      assert.equal(a.hyper['hidden size'], String(LLM.hidden));
      assert.equal(a.hyper['feed-forward size'], String(LLM.ff));
      assert.equal(a.hyper.vocabulary, String(LLM.vocab));
      if (gguf) {
        assert.equal(a.hyper.architecture, 'llama');
        assert.equal(a.hyper['attention heads'], String(LLM.heads));
        assert.match(a.hyper['KV heads'], new RegExp(`^${LLM.kvHeads} \\(${LLM.heads / LLM.kvHeads} query heads`));
        assert.match(a.text, /several dtypes: float32, float16/);
      }
      await page.screenshot({ path: shot(`arch-${file.replace(/\.\w+$/, '')}`), fullPage: true });
      // A block's tensor opens (the first block's) in the Tensors view.
      await page.click(`#arch-host [data-part="block.mlp"] [data-part-tensor="${gguf ? 'ffn_down.weight' : 'mlp.down_proj.weight'}"]`);
      await page.waitForFunction(() => document.getElementById('tensor').dataset.statsState === 'done', null, { timeout: 30000 });
      assert.equal(await page.$eval('#tensor', (e) => e.dataset.tensor), gguf ? 'blk.0.ffn_down.weight' : 'model.layers.0.mlp.down_proj.weight');
      assert.deepEqual(problems, []);
    });
  }

  it('a model without numbered blocks has no architecture tab to click', { timeout: 30000 }, async () => {
    await fresh('?url=/tests/data/fixtures/npy/float16.npy');
    assert.equal(await page.$eval('#tabs [data-view=arch]', (b) => b.disabled), true);
    assert.deepEqual(problems, []);
  });

  it('the view state is in the address and a reload restores it; Esc in the search box keeps the tensor', { timeout: 60000 }, async () => {
    await fresh('?url=/gen/llama.gguf&view=tensors');
    await page.fill('#search', 'ffn');
    await page.waitForFunction(() => document.getElementById('count').dataset.rows === String(4 * 4));
    await page.selectOption('#f-dtype', 'float32');
    await page.waitForFunction(() => document.getElementById('count').dataset.rows === String(4 * 4 - 1));
    await page.click('#ghead [data-sort=params]');
    await page.click('#ghead [data-sort=params]');
    await page.evaluate(() => window.inspector.openTensor('blk.2.ffn_up.weight'));
    await page.waitForFunction(() => document.getElementById('tensor').dataset.statsState === 'done');
    await page.selectOption('#hm-mode', 'absmax');
    await page.check('#h-log');
    await page.click('#v-next');
    await page.waitForFunction(() => document.getElementById('values').dataset.page === '1');
    // Esc in the search box leaves the box; the tensor stays open.
    await page.focus('#search');
    await page.keyboard.press('Escape');
    assert.equal(await page.isVisible('#tensor'), true);
    assert.notEqual(await page.evaluate(() => document.activeElement.id), 'search');
    const q = new URLSearchParams(await page.evaluate(() => location.search));
    assert.deepEqual(Object.fromEntries(q), { url: '/gen/llama.gguf', view: 'tensors', q: 'ffn', dtype: 'float32', sort: '-params', tensor: 'blk.2.ffn_up.weight', hm: 'absmax', log: '1', page: '1' });
    const shown = () =>
      page.evaluate(() => ({
        search: document.getElementById('search').value,
        dtype: document.getElementById('f-dtype').value,
        sort: document.querySelector('#ghead [data-sort=params]').textContent,
        rows: document.getElementById('count').dataset.rows,
        first: document.querySelector('#gbody .row')?.dataset.tensor,
        tensor: document.getElementById('tensor').dataset.tensor,
        hm: document.getElementById('hm-mode').value,
        log: document.getElementById('h-log').checked,
        page: document.getElementById('values').dataset.page,
        view: document.querySelector('#tabs .active').dataset.view,
      }));
    const before = await shown();
    await page.reload();
    await page.waitForFunction(() => window.inspector?.ready && document.body.dataset.state === 'ready');
    await page.evaluate(() => window.inspector.ready);
    await page.waitForFunction(() => document.getElementById('values').dataset.page === '1', null, { timeout: 30000 });
    assert.deepEqual(await shown(), before);
    assert.equal(before.sort, 'parameters ▼');
    assert.equal(before.rows, String(4 * 4 - 1));
    // A 3-D tensor's slice: none here is 3-D, so the slice stays out of the address.
    assert.equal(new URLSearchParams(await page.evaluate(() => location.search)).get('slice'), null);
    // Closing the tensor takes its state out of the address.
    await page.click('#t-close');
    const after = new URLSearchParams(await page.evaluate(() => location.search));
    assert.equal(after.get('tensor'), null);
    assert.equal(after.get('page'), null);
    assert.deepEqual(problems, []);
  });

  it('tensorlane serve keeps the query through its / and /web-demo redirects: a shared link opens the model, view and tensor', { timeout: 60000, skip: !existsSync(BIN) && !CI && `no ${BIN} (cargo build -p tensorlane-cli)` }, async () => {
    const child = spawn(BIN, ['serve', join(ROOT, 'tests/data/fixtures/sample.safetensors'), '--web', ROOT, '--bind', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    try {
      const base = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`tensorlane serve printed no URL within 30 s:\n${stderr}`)), 30000);
        child.on('exit', (code) => reject(new Error(`tensorlane serve exited (${code}):\n${stderr}`)));
        createInterface({ input: child.stdout }).once('line', (line) => {
          clearTimeout(timer);
          resolve(line.trim().replace(/^(http:\/\/[^/]+).*$/, '$1'));
        });
      });
      const query = `?url=${encodeURIComponent('/tests/data/fixtures/sample.safetensors')}&view=tensors&tensor=w&q=w`;
      for (const start of ['/', '/web-demo']) {
        await page.goto(`${base}${start}${query}`);
        assert.equal(new URL(page.url()).pathname, '/web-demo/');
        assert.equal(new URL(page.url()).search, query);
        await page.waitForFunction(() => document.getElementById('tensor').dataset.statsState === 'done', null, { timeout: 30000 });
        assert.equal(await page.$eval('#tensor', (e) => e.dataset.tensor), 'w');
        assert.equal(await page.$eval('#search', (e) => e.value), 'w');
        assert.equal(await page.$eval('#tabs .active', (e) => e.dataset.view), 'tensors');
      }
      assert.deepEqual(problems, []);
    } finally {
      const done = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await done;
    }
  });

  for (const workers of [1, 4]) {
    it(`statistics by URL fetch each byte of the tensor once (${workers === 1 ? 'one Worker' : `${workers} Workers in spans`}; Range bytes counted at the server)`, { timeout: 60000 }, async () => {
      const file = generated.get('big.safetensors');
      const dataStart = 8 + Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
      const bigStart = dataStart + 16;
      const nbytes = 3072 * 2048 * 4;
      await fresh('?url=/gen/big.safetensors&view=tensors');
      await page.evaluate((w) => (window.inspector.statsWorkers = w), workers);
      log.length = 0;
      // When the statistics were done (the value page and the heatmap read the tensor after).
      await page.evaluate(() => {
        const panel = document.getElementById('tensor');
        new MutationObserver((_, obs) => {
          if (panel.dataset.statsState === 'done') (window.statsDoneAt = Date.now()), obs.disconnect();
          if (panel.dataset.statsState === 'error') (window.statsDoneAt = -1), obs.disconnect();
        }).observe(panel, { attributes: true, attributeFilter: ['data-stats-state'] });
        window.inspector.openTensor('big');
      });
      await page.waitForFunction(() => window.statsDoneAt, null, { timeout: 50000 }).catch(async (e) => {
        throw new Error(`${e.message}: ${await page.evaluate(() => `${document.getElementById('tensor').dataset.statsState}: ${document.getElementById('t-progress-text').textContent}`)}`);
      });
      const doneAt = await page.evaluate(() => window.statsDoneAt);
      assert.ok(doneAt > 0, await page.$eval('#t-progress-text', (e) => e.textContent));
      const got = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#tensor [data-stat]')].map((e) => [e.dataset.stat, Number(e.dataset.value)])));
      assert.equal(got.count, 3072 * 2048);
      assert.equal(got.min, -500);
      assert.equal(got.max, 499);
      assert.equal(Number(await page.$eval('#tensor', (e) => e.dataset.statsWorkers)), workers);
      // Only the statistics' requests: before the value page and the heatmap read their bytes.
      const ranged = log.filter((e) => e.path === '/gen/big.safetensors' && e.range && e.at <= doneAt).map((e) => {
        const [, a, b] = /bytes=(\d+)-(\d+)/.exec(e.range);
        return { start: Number(a), end: Number(b), bytes: e.bytes };
      });
      const inTensor = ranged.filter((r) => r.start >= bigStart);
      const fetched = inTensor.reduce((n, r) => n + r.end - r.start + 1, 0);
      // Every byte once: the statistics' ranges tile the tensor, no byte twice.
      const seen = inTensor.slice().sort((x, y) => x.start - y.start);
      const overlaps = seen.filter((r, i) => i > 0 && r.start <= seen[i - 1].end).length;
      console.log(`# ${workers} Worker(s): ${inTensor.length} ranged GETs, ${fetched} bytes of the ${nbytes}-byte tensor (${(fetched / nbytes).toFixed(3)}x)`);
      // (The first bytes may come from the probe that opened the file.)
      assert.ok(fetched >= nbytes - (1 << 20), `read ${fetched} of ${nbytes}`);
      assert.ok(fetched <= nbytes * 1.05, `each byte once: ${fetched} bytes for a ${nbytes}-byte tensor (${(fetched / nbytes).toFixed(2)}x)`);
      assert.ok(overlaps <= 2, `${overlaps} overlapping ranges`);
      assert.deepEqual(problems, []);
    });
  }

  it('smaller defects: Tensors tab off without a model, "1 key", a shard index overview, an error said once', { timeout: 60000 }, async () => {
    await fresh();
    assert.equal(await page.$eval('#tabs [data-view=tensors]', (b) => b.disabled), true, 'no model: no Tensors tab');
    await page.keyboard.press('/');
    assert.equal(await page.$eval('#tabs .active', (e) => e.dataset.view), 'overview');
    await page.evaluate(() => window.inspector.openUrl('/tests/data/fixtures/safetensors/sharded/model.safetensors.index.json'));
    await page.evaluate(() => window.inspector.ready);
    await page.waitForFunction(() => window.inspector.models.length === 1 && document.body.dataset.state === 'ready');
    assert.equal(await page.$eval('#tabs [data-view=tensors]', (b) => b.disabled), false);
    const facts = await page.$$eval('#ov-facts [data-fact]', (els) => Object.fromEntries(els.map((e) => [e.dataset.fact, e.textContent])));
    const sizeKey = Object.keys(facts).find((k) => k.endsWith('size'));
    assert.equal(sizeKey, 'model.safetensors.index.json size');
    assert.match(facts[sizeKey], /more files hold the rest/);
    assert.doesNotMatch(facts['read to list'], /% of the file/);
    assert.match(facts['read to list'], /from 3 files/);
    const title = await page.textContent('#ov-meta-title');
    assert.match(title, /^Metadata \(\d+ keys?\)$/);
    assert.doesNotMatch(title, /\b1 keys\b/);
    await page.screenshot({ path: shot('sharded-overview'), fullPage: true });
    // A .zt refused by a rule: the rule once (the reader's message names it).
    await page.evaluate(() => window.inspector.openUrl('/tests/data/conformance/zt/reject/attribute-key-empty.zt'));
    await page.waitForFunction(() => document.body.dataset.state === 'error');
    const err = await page.textContent('#error-text');
    assert.match(err, /Name/);
    assert.equal(err.split('Name').length - 1, 1, err);
    // Closing the only good model with the Tensors view open goes back to the overview.
    await page.click('#tabs [data-view=tensors]');
    await page.click('#models .chip:first-child .x');
    assert.equal(await page.$eval('#tabs .active', (e) => e.dataset.view), 'overview');
    assert.deepEqual(problems, []);
  });

  it('compare tells a cosine near 1 from 1 and filters the changed tensors; the filter is in the address', { timeout: 60000 }, async () => {
    await fresh('?url=/gen/llama.safetensors&compare=/gen/llama-nudged.safetensors&view=compare');
    await page.waitForSelector('#compare-host [data-compare-state="done"]', { timeout: 30000 });
    const rows = () => page.$$eval('#compare-host tbody tr[data-tensor]', (els) => els.map((e) => ({ name: e.dataset.tensor, cosine: Number(e.dataset.cosine), text: e.children[6].textContent })));
    const all = await rows();
    assert.equal(all.length, 3 + 9 * LLM.layers);
    const hit = all.find((r) => r.name === 'model.layers.2.mlp.up_proj.weight');
    assert.ok(hit.cosine < 1 && hit.cosine > 0.99999, String(hit.cosine));
    assert.match(hit.text, /^1 − \d\.\de-\d+$/);
    assert.equal(all.find((r) => r.name === 'model.norm.weight').text, '1');
    await page.check('#compare-host .tl-c-changed');
    assert.deepEqual((await rows()).map((r) => r.name), ['model.layers.2.mlp.up_proj.weight']);
    assert.equal(new URLSearchParams(await page.evaluate(() => location.search)).get('cchanged'), '1');
    await page.screenshot({ path: shot('compare'), fullPage: true });
    await page.reload();
    await page.waitForSelector('#compare-host [data-compare-state="done"]', { timeout: 30000 });
    assert.equal(await page.$eval('#compare-host .tl-c-changed', (e) => e.checked), true);
    assert.equal((await rows()).length, 1);
    assert.deepEqual(problems, []);
  });

  it('the value grid pages a matrix by rows and columns, jumps, and takes PageUp/PageDown/Home/End; the table too', { timeout: 60000 }, async () => {
    await fresh('?url=/gen/llama.gguf&view=tensors&tensor=token_embd.weight');
    const want = tensorlane.open(generated.get('llama.gguf')).tensor('token_embd.weight', { widen: true });
    const grid = () =>
      page.evaluate(() => {
        const v = document.getElementById('values');
        return {
          page: v.dataset.page,
          col: v.dataset.col,
          heads: [...v.querySelectorAll('tr:first-child th')].slice(1).map((e) => e.textContent),
          rows: [...v.querySelectorAll('tr')].slice(1).map((tr) => tr.querySelector('th').textContent),
          cells: [...v.querySelectorAll('td[data-index]')].map((td) => [Number(td.dataset.index), Number(td.dataset.value)]),
          hit: [...v.querySelectorAll('td.hit')].map((td) => Number(td.dataset.index)),
          text: document.getElementById('v-page').textContent,
        };
      });
    const at = async (page_, col) => {
      await page.waitForFunction(([p, c]) => document.getElementById('values').dataset.page === p && document.getElementById('values').dataset.col === c, [String(page_), String(col)], { timeout: 30000 });
      const g = await grid();
      for (const [i, v] of g.cells) assert.equal(v, want[i], `value ${i}`);
      return g;
    };
    let g = await at(0, 0);
    // 64 × 16: rows 0-15 and columns 0-7, flat index = row * 16 + column.
    assert.deepEqual(g.heads, ['0', '1', '2', '3', '4', '5', '6', '7']);
    assert.equal(g.rows[1], '1');
    assert.equal(g.cells.length, 16 * 8);
    assert.deepEqual(g.cells[8][0], 16);
    assert.equal(g.text, 'rows 0–15 of 64, columns 0–7 of 16 (page 1/4)');
    await page.click('#v-right');
    g = await at(0, 1);
    assert.deepEqual(g.heads, ['8', '9', '10', '11', '12', '13', '14', '15']);
    assert.equal(g.cells[0][0], 8);
    await page.focus('#values');
    await page.keyboard.press('PageDown');
    g = await at(1, 1);
    assert.equal(g.rows[0], '16');
    await page.keyboard.press('End');
    g = await at(3, 1);
    assert.equal(g.rows.at(-1), '63');
    await page.keyboard.press('ArrowLeft');
    await at(3, 0);
    await page.keyboard.press('Home');
    await at(0, 0);
    // Go to row 40, column 13: its page, the cell marked; then by flat index.
    await page.fill('#v-goto', '40, 13');
    await page.press('#v-goto', 'Enter');
    g = await at(2, 1);
    assert.deepEqual(g.hit, [40 * 16 + 13]);
    const q = new URLSearchParams(await page.evaluate(() => location.search));
    assert.deepEqual([q.get('page'), q.get('vcol')], ['2', '1']);
    await page.reload();
    await page.waitForFunction(() => window.inspector?.ready);
    await page.evaluate(() => window.inspector.ready);
    await at(2, 1);
    await page.fill('#v-goto', '5');
    await page.press('#v-goto', 'Enter');
    g = await at(0, 0);
    assert.deepEqual(g.hit, [5]);
    await page.fill('#v-goto', '64, 0');
    await page.press('#v-goto', 'Enter');
    assert.equal(await page.$eval('#v-goto', (e) => e.classList.contains('bad')), true, 'outside: refused');
    await page.screenshot({ path: shot('values'), fullPage: true });
    // The table: End, Home, PageDown move the selection.
    await page.focus('#grid');
    await page.keyboard.press('End');
    const sel = () => page.$eval('#gbody .row.sel', (e) => Number(e.dataset.i));
    assert.equal(await sel(), 3 + 9 * LLM.layers - 1);
    await page.keyboard.press('Home');
    assert.equal(await sel(), 0);
    await page.keyboard.press('PageDown');
    assert.ok((await sel()) >= 10, String(await sel()));
    assert.deepEqual(problems, []);
  });

  it('a wide matrix draws as a readable heatmap, not a strip', { timeout: 60000 }, async () => {
    await fresh('?url=/gen/wide.safetensors&view=tensors&tensor=wide');
    await page.waitForFunction(() => /px wide/.test(document.getElementById('hm-info').textContent), null, { timeout: 30000 });
    const h = await page.evaluate(() => {
      const c = document.getElementById('heat');
      return { w: c.width, h: c.height, cw: c.clientWidth, ch: c.clientHeight, info: document.getElementById('hm-info').textContent };
    });
    // 128 × 8192 in 16×16 blocks would be 512 × 8 px; 1 row × 16 columns a pixel: 512 × 128.
    assert.deepEqual([h.w, h.h], [512, 128]);
    assert.ok(h.ch >= 100, `${h.cw}×${h.ch} on the page`);
    assert.match(h.info, /^128 rows × 8192 columns → 512 px wide × 128 px tall, 1 row × 16 columns a pixel \(not to scale\)/);
    await page.screenshot({ path: shot('heatmap-wide'), fullPage: true });
    assert.deepEqual(problems, []);
  });

  it('the graph finds repeated blocks from the structure: mixed node names draw one block × 62, not segments', { timeout: 90000 }, async () => {
    const mixed = mixedNamesGraph(62);
    generated.set('mixed.onnx', new Uint8Array(readFileSync(mixed.path)));
    await fresh('?url=/gen/mixed.onnx&view=graph');
    await page.waitForSelector('#graph-host [data-graph-state="done"]', { timeout: 60000 });
    const blocks = await page.$$eval('#graph-host [data-block]', (els) => els.map((e) => ({ block: e.dataset.block, text: e.textContent })));
    assert.equal(blocks.length, 1, JSON.stringify(blocks));
    assert.match(blocks[0].text, /×62 blocks · 18 ops each/);
    assert.equal(await page.$$eval('#graph-host [data-segment]', (els) => els.length), 0, 'no segments');
    await page.waitForTimeout(200);
    await page.screenshot({ path: shot('graph-blocks'), fullPage: true });
    // Opened: one layer's 18 nodes, coloured by op family, weights' shapes inline, edges named.
    await page.click('#graph-host [data-block]');
    await page.waitForFunction(() => document.querySelectorAll('#graph-host svg [data-node]').length >= 18, null, { timeout: 60000 });
    await page.waitForSelector('#graph-host [data-graph-state="done"]');
    const drawn = await page.$$eval('#graph-host svg [data-node]', (els) => els.map((e) => ({ node: e.dataset.node, family: e.dataset.opFamily, text: [...e.querySelectorAll('text')].map((t) => t.textContent) })));
    const layer0 = drawn.filter((d) => d.node.startsWith('/model/layers/0/') || d.node.startsWith('/model/layers.0/'));
    assert.equal(layer0.length, 18, JSON.stringify(drawn.map((d) => d.node)));
    const q = drawn.find((d) => d.node === '/model/layers.0/attn/q/MatMul');
    assert.equal(q.family, 'linear');
    assert.ok(q.text.includes('q.weight [16, 16]'), JSON.stringify(q.text));
    assert.equal(drawn.find((d) => d.node === '/model/layers.0/attn/Softmax').family, 'activation');
    assert.equal(drawn.find((d) => d.node === '/model/layers/0/ln1/ReduceMean').family, 'norm');
    const edges = await page.$$eval('#graph-host svg path[data-edge]', (els) => els.map((e) => ({ id: e.dataset.edge, values: e.dataset.values, title: e.querySelector('title').textContent })));
    const qe = edges.find((e) => e.id === 'node:/model/layers.0/attn/q/MatMul->node:/model/layers.0/attn/Softmax');
    assert.equal(qe.values, '/model/layers.0/q');
    const out = edges.find((e) => e.id.endsWith('->out:logits'));
    assert.equal(out.title, 'logits FLOAT [batch, 32]');
    // Zoomed in the labels read; zoomed out only the shape of the model (no sub-lines, then no text).
    await page.click('#graph-host .tl-g-tools button');
    await page.screenshot({ path: shot('graph-open-fit'), fullPage: true });
    const zoomTo = (k) =>
      page.evaluate((k) => {
        const svg = document.querySelector('#graph-host svg');
        const r = svg.getBoundingClientRect();
        const now = Number(svg.closest('[data-graph-state]').dataset.zoom);
        svg.dispatchEvent(new WheelEvent('wheel', { deltaY: -Math.log(k / now) / 0.0015, clientX: r.left + r.width / 2, clientY: r.top + 60, bubbles: true, cancelable: true }));
        return Number(svg.closest('[data-graph-state]').dataset.zoom);
      }, k);
    assert.ok(Math.abs((await zoomTo(1)) - 1) < 0.01);
    assert.equal(await page.$eval('#graph-host svg', (e) => e.classList.contains('tl-g-far')), false);
    assert.equal(await page.$eval('#graph-host svg [data-node] text.tl-g-extra', (e) => getComputedStyle(e).display !== 'none'), true);
    await page.screenshot({ path: shot('graph-zoomed-in'), fullPage: true });
    await page.screenshot({ path: shot('graph-zoomed-in'), fullPage: true });
    await zoomTo(0.4);
    assert.equal(await page.$eval('#graph-host svg', (e) => e.classList.contains('tl-g-far')), true);
    assert.equal(await page.$eval('#graph-host svg [data-node] text.tl-g-sub', (e) => getComputedStyle(e).display), 'none');
    await page.screenshot({ path: shot('graph-zoomed-out'), fullPage: true });
    await zoomTo(0.2);
    assert.equal(await page.$eval('#graph-host svg', (e) => e.classList.contains('tl-g-farther')), true);
    assert.equal(await page.$eval('#graph-host svg [data-node] text', (e) => getComputedStyle(e).display), 'none');
    // The same model's architecture, from its initializers' names: beside the graph, then its tab.
    const beside = await page.$eval('#graph-host .tl-g-arch', (e) => ({ layers: Number(e.dataset.layers), text: e.textContent }));
    assert.equal(beside.layers, 62);
    assert.match(beside.text, /62 × \(Attention [\d.]+( k)?, MLP [\d.]+( k)?\) → head/);
    await page.click('#graph-host .tl-g-arch a');
    assert.equal(await page.$eval('#tabs .active', (e) => e.dataset.view), 'arch');
    assert.equal(await page.$eval('#arch-host .arch', (e) => Number(e.dataset.layers)), 62);
    assert.deepEqual(await page.$$eval('#arch-host [data-part^="block."]', (els) => els.map((e) => e.dataset.part)), ['block.attention', 'block.mlp']);
    assert.deepEqual(problems, []);
  });

  for (const lazy of [false, true]) it(`?blocks=off draws the true flat graph: every node, no blocks or segments, laid out in a Worker${lazy ? '; elements made when first needed (?glazy=400)' : ''}`, { timeout: 90000 }, async () => {
    if (!generated.has('mixed.onnx')) generated.set('mixed.onnx', new Uint8Array(readFileSync(mixedNamesGraph(62).path)));
    const t0 = Date.now();
    await fresh(`?url=/gen/mixed.onnx&view=graph&blocks=off${lazy ? '&glazy=400' : ''}`);
    await page.waitForSelector('#graph-host [data-graph-state="done"]', { timeout: 60000 });
    const ms = Date.now() - t0;
    const root = await page.$eval('#graph-host [data-graph-state]', (e) => ({ ...e.dataset }));
    assert.equal(root.layout, 'layered');
    assert.equal(Number(root.drawnBoxes), 62 * 18 + 1 + 2);
    // Only what the view shows is in the DOM (the rest is culled); far out, the outline (2 paths).
    assert.equal(root.culled, 'true');
    const inDom = await page.$$eval('#graph-host svg [data-node]', (els) => els.length);
    assert.ok(inDom < 200, `${inDom} boxes in the DOM`);
    assert.equal(await page.$$eval('#graph-host [data-block], #graph-host [data-segment]', (els) => els.length), 0);
    console.log(`# flat graph of ${root.drawnBoxes} boxes: drawn ${ms} ms after navigation (layout ${root.layoutMs} ms)`);
    // Search centres a node: the list row selects it and the view moves to it, readable.
    await page.fill('#graph-host input[type=search]', '/model/layers.40/attn/Softmax');
    await page.click('#graph-host .tl-g-row[data-node="/model/layers.40/attn/Softmax"]');
    await page.waitForFunction(() => document.querySelector('#graph-host svg .tl-g-sel'));
    const where = await page.evaluate(() => {
      const svg = document.querySelector('#graph-host svg').getBoundingClientRect();
      const g = document.querySelector('#graph-host svg .tl-g-sel').getBoundingClientRect();
      return { dx: g.left + g.width / 2 - (svg.left + svg.width / 2), dy: g.top + g.height / 2 - (svg.top + svg.height / 2), zoom: Number(document.querySelector('#graph-host [data-graph-state]').dataset.zoom) };
    });
    assert.ok(Math.abs(where.dx) < 150 && Math.abs(where.dy) < 40, JSON.stringify(where));
    assert.ok(where.zoom >= 0.8, 'readable after centring');
    if (lazy) await page.waitForFunction(() => document.querySelector('#graph-host [data-graph-state]').dataset.made === 'all', null, { timeout: 30000 });
    else await page.screenshot({ path: shot('graph-flat-search'), fullPage: true });
    // The drawing came from the graph Worker as typed arrays with a grid index: what is in the DOM
    // is what the view meets (data-in-dom, a few dozen, not the 2,000+ boxes and edges), and
    // fitted, far out, the Worker's outline bitmap (a blob: PNG) with no boxes at all.
    const near = await page.$eval('#graph-host [data-graph-state]', (e) => Number(e.dataset.inDom));
    assert.ok(near > 5 && near < 200, `${near} boxes and edges in the DOM`);
    await page.click('#graph-host .tl-g-tools button');
    await page.waitForFunction(() => document.querySelector('#graph-host [data-graph-state]').dataset.inDom === '0');
    const far = await page.evaluate(() => ({ zoom: Number(document.querySelector('#graph-host [data-graph-state]').dataset.zoom), href: document.querySelector('#graph-host svg image.tl-g-outline')?.getAttribute('href'), boxes: document.querySelectorAll('#graph-host svg [data-node]').length }));
    assert.ok(far.zoom < 0.3 && far.href?.startsWith('blob:') && far.boxes === 0, JSON.stringify(far));
    if (!lazy) await page.screenshot({ path: shot('graph-flat-outline'), fullPage: true });
    assert.deepEqual(problems, []);
  });

  it('small constants are drawn in their nodes: initializers and Constant nodes of <= 8 values, by value', { timeout: 60000 }, async () => {
    // tests/python/onnx_graph_ref.py: Div by the initializer /model/sqrt2 (2**0.5), Add of /model/one,
    // Reshape to /model/shape_2d ([-1, 16]) and a Constant node of arange(6) as 2×3.
    generated.set('consts.onnx', new Uint8Array(readFileSync(bigGraph(2).path)));
    await fresh('?url=/gen/consts.onnx&view=graph&blocks=off');
    await page.waitForSelector('#graph-host [data-graph-state="done"]', { timeout: 30000 });
    const extra = (node) => page.$eval(`#graph-host svg [data-node="${node}"] text.tl-g-extra`, (e) => e.textContent);
    assert.equal(await extra('/model/layers.0/gelu/Div'), 'model.sqrt2 = 1.414');
    assert.equal(await extra('/model/layers.1/gelu/Add'), 'model.one = 1');
    assert.equal(await extra('/model/layers.0/Reshape'), 'model.shape_2d = [-1, 16]');
    assert.equal(await extra('/head/Constant'), 'value = [[0, 1, 2], [3, 4, 5]]');
    // A large initializer still shows its shape, not values.
    assert.match(await extra('/model/layers.0/mlp/MatMul'), /^mlp\.weight \[16, 16\]$/);
    // The details panel says the same.
    await page.click('#graph-host svg [data-node="/head/Constant"]');
    const details = await page.$eval('#graph-host [data-selected]', (e) => e.textContent);
    // Centred on the Div (the search row), at a readable zoom: what the screenshot shows.
    await page.fill('#graph-host input[type=search]', '/model/layers.0/gelu/Div');
    await page.click('#graph-host .tl-g-row[data-node="/model/layers.0/gelu/Div"]');
    await page.waitForTimeout(100);
    await page.screenshot({ path: shot('graph-constants'), fullPage: true });
    assert.match(details, /value \(tensor\) = tensor FLOAT \[2, 3\] = \[\[0, 1, 2\], \[3, 4, 5\]\]/);
    assert.deepEqual(problems, []);
  });

  it('npx tensorlane serve (js/cli.js) keeps the query through its / and /web-demo redirects too', { timeout: 30000 }, async () => {
    const { server: s, url: base } = await npmServe({ paths: [join(ROOT, 'tests/data/fixtures/sample.safetensors')], port: 0, open: tensorlane.open });
    try {
      for (const [from, status] of [['/', 307], ['/web-demo', 308]]) {
        const r = await fetch(`${base}${from}?url=%2Ffiles%2Fx&tensor=w`, { redirect: 'manual' });
        assert.equal(r.status, status, from);
        assert.equal(r.headers.get('location'), '/web-demo/?url=%2Ffiles%2Fx&tensor=w', from);
      }
    } finally {
      s.closeAllConnections?.();
      s.close();
    }
  });
});
