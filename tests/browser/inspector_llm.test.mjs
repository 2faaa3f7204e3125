// Issue 26 in Debian's Chromium (headless, playwright-core), the inspector served by
// web-demo/serve.mjs over HTTP Range, on small llama-shaped checkpoints written in memory
// (tests/js/_llm_files.mjs: a GGUF with llama.cpp's names and a safetensors with Hugging Face's):
// - the layer tree: a repeated block opens into one representative layer with its parts, the
//   count of repeats and per-layer, per-part and total parameters (not into itself again); the
//   filtered table shows its totals;
// - the architecture view: embedding → N × block (attention, MLP) → norm → head with shapes,
//   dtypes and parameters per part, from llama.cpp's and Hugging Face's names (and GGUF metadata);
//   a tied head; a part's tensor opens in the Tensors view;
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
    generated.set('llama-tied.safetensors', llamaSafetensors({ tied: true }));
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
});
