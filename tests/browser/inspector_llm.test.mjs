// Issue 26 in Debian's Chromium (headless, playwright-core), the inspector served by
// web-demo/serve.mjs over HTTP Range, on small llama-shaped checkpoints written in memory
// (tests/js/_llm_files.mjs: a GGUF with llama.cpp's names and a safetensors with Hugging Face's):
// - the layer tree: a repeated block opens into one representative layer with its parts, the
//   count of repeats and per-layer, per-part and total parameters (not into itself again); the
//   filtered table shows its totals;
// - screenshots in tests/out/issue26-*.png.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serve } from '../../web-demo/serve.mjs';
import { launch, missing } from './_chromium.mjs';
import { LLM, PARAMS, llamaGguf, llamaSafetensors } from '../js/_llm_files.mjs';

const OUT = new URL('../out/', import.meta.url);
const shot = (name) => fileURLToPath(new URL(`issue26-${name}.png`, OUT));

describe('Chromium: the inspector on LLM checkpoints (issue 26)', { skip: missing ?? false }, () => {
  let server, url, browser, page;
  const problems = [];
  const log = [];
  const generated = new Map();

  before(async () => {
    generated.set('llama.gguf', llamaGguf());
    generated.set('llama.safetensors', llamaSafetensors());
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
});
