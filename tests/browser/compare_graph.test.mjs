// The inspector's compare and graph views (web-demo/compare-view.js, graph-view.js) in Debian's
// Chromium (headless, playwright-core), mounted by tests/browser/harness/view.html with Files
// picked through the file inputs:
// - compare: two safetensors checkpoints (tests/python/compare_ref.py) give NumPy's numbers in the
//   table's data-max-abs / data-cosine hooks and the only-in-A/B lists; clicking a row calls
//   ctx.selectTensor; cancel stops a run;
// - graph: the ONNX fixture and a generated 5,046-node model (tests/python/onnx_graph_ref.py)
//   reach data-graph-state=done with op-type counts equal to the onnx library's, repeated blocks
//   collapsed, and a click on a drawn node and on an initializer reaching ctx.selectTensor.
// Screenshots go to tests/out/.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serve } from '../../web-demo/serve.mjs';
import { launch, missing } from './_chromium.mjs';
import { fixturePath } from '../js/_stats_reference.mjs';
import { bigGraph, checkpointPair, onnxReference } from '../js/_graph_compare_reference.mjs';

const OUT = fileURLToPath(new URL('../out/', import.meta.url));
const num = (v) => (v === null ? NaN : v === 'inf' ? Infinity : v);

describe('Chromium: compare and graph views', { skip: missing ?? false }, () => {
  let server, url, browser, page;
  const problems = [];

  before(async () => {
    mkdirSync(OUT, { recursive: true });
    ({ server, url } = await serve());
    browser = await launch();
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('response', (r) => r.status() >= 400 && !r.url().endsWith('/favicon.ico') && problems.push(`HTTP ${r.status()}: ${r.url()}`));
    page.on('console', (m) => m.type() === 'error' && !/^Failed to load resource/.test(m.text()) && problems.push(`console: ${m.text()}`));
  });

  after(async () => {
    await browser?.close();
    server?.close();
  });

  async function mountView(view, files, extra = '') {
    await page.goto(`${url}/tests/browser/harness/view.html?view=${view}${extra}`);
    await page.waitForFunction(() => window.harnessReady === true);
    await page.setInputFiles('#a', files.a);
    if (files.b) await page.setInputFiles('#b', files.b);
    if (files.c) await page.setInputFiles('#c', files.c);
    await page.click('#go');
  }

  it('compare of two checkpoints shows NumPy numbers, lists and selects tensors', { timeout: 120000 }, async () => {
    const pair = checkpointPair(11);
    await mountView('compare', { a: pair.a, b: pair.b });
    await page.waitForSelector('[data-compare-state="done"], [data-compare-state="error"]', { timeout: 60000 });
    assert.equal(await page.getAttribute('.tl-compare', 'data-compare-state'), 'done', await page.textContent('.tl-compare'));
    const rows = await page.$$eval('tr[data-tensor]', (trs) => trs.map((tr) => ({ name: tr.dataset.tensor, maxAbs: Number(tr.dataset.maxAbs), cosine: Number(tr.dataset.cosine), relL2: Number(tr.dataset.relL2) })));
    assert.deepEqual(rows.map((r) => r.name).sort(), Object.keys(pair.ref.tensors).sort());
    for (const r of rows) {
      const w = pair.ref.tensors[r.name];
      const wm = num(w.maxAbs);
      const wc = num(w.cosine);
      assert.ok(Number.isNaN(wm) ? Number.isNaN(r.maxAbs) : r.maxAbs === wm, `${r.name}: max |a-b| ${r.maxAbs} vs NumPy ${wm}`);
      assert.ok(Number.isNaN(wc) ? Number.isNaN(r.cosine) : Math.abs(r.cosine - wc) <= 1e-12, `${r.name}: cosine ${r.cosine} vs NumPy ${wc}`);
    }
    const rel = rows.map((r) => (Number.isNaN(r.relL2) ? -1 : r.relL2));
    assert.ok(rel.every((v, i) => i === 0 || rel[i - 1] >= v), 'largest change first');
    const text = await page.textContent('.tl-compare');
    for (const n of [...pair.ref.onlyA, ...pair.ref.onlyB, ...pair.ref.changed.map((c) => c.name)]) assert.ok(text.includes(n), `${n} listed`);
    await page.screenshot({ path: `${OUT}compare-view.png`, fullPage: true });
    // Sorting by name, then a click on a row opens A's tensor.
    await page.click('th[data-key="name"]');
    const first = await page.$eval('tbody tr[data-tensor]', (tr) => tr.dataset.tensor);
    assert.equal(first, rows.map((r) => r.name).sort()[0]);
    await page.click(`tr[data-tensor="${first}"]`);
    assert.deepEqual(await page.evaluate(() => window.selected), [[0, first]]);
    assert.match(await page.evaluate(() => location.search), /csort=name/);
    assert.deepEqual(problems, []);
  });

  it('compare can be cancelled', { timeout: 120000 }, async () => {
    const pair = checkpointPair(12);
    // 4 KiB slices: thousands of File reads, so the run is still going when Cancel is clicked.
    await mountView('compare', { a: pair.a, b: pair.b }, '&cchunk=4096');
    await page.waitForFunction(() => /tensors ·/.test(document.querySelector('.tl-compare .tl-c-muted')?.textContent ?? ''));
    await page.click('.tl-compare button');
    await page.waitForSelector('[data-compare-state="cancelled"], [data-compare-state="done"], [data-compare-state="error"]', { timeout: 60000 });
    assert.equal(await page.getAttribute('.tl-compare', 'data-compare-state'), 'cancelled');
    assert.equal(await page.$$eval('tr[data-tensor]', (r) => r.length), 0);
    assert.deepEqual(problems, []);
  });

  it('graph of the ONNX fixture: op counts, nodes, click-through', { timeout: 120000 }, async () => {
    const path = fixturePath('onnx/initializers.onnx');
    const ref = onnxReference(path);
    await mountView('graph', { a: path });
    await page.waitForSelector('[data-graph-state="done"], [data-graph-state="error"]', { timeout: 60000 });
    assert.equal(await page.getAttribute('.tl-graph', 'data-graph-state'), 'done', await page.textContent('.tl-graph'));
    const ops = await page.$$eval('.tl-g-op', (rows) => Object.fromEntries(rows.map((r) => [r.dataset.op, Number(r.children[1].textContent)])));
    const want = {};
    for (const n of ref.nodes) want[n.domain ? `${n.domain}.${n.op_type}` : n.op_type] = (want[n.domain ? `${n.domain}.${n.op_type}` : n.op_type] ?? 0) + 1;
    assert.deepEqual(ops, want);
    const drawn = await page.$$eval('svg [data-node]', (gs) => gs.length);
    assert.equal(drawn, ref.nodes.length, 'every node drawn (no repeated blocks here)');
    await page.screenshot({ path: `${OUT}graph-fixture.png` });
    // Click a drawn node, then one of its initializer inputs: the tensor view is asked for it.
    const id = await page.$eval('svg [data-node]', (g) => g.dataset.node);
    await page.click(`svg [data-node="${id}"]`);
    await page.waitForSelector(`.tl-g-detail[data-selected="${id}"]`);
    const init = await page.$$eval('.tl-g-detail li a[title="open this tensor"]', (as) => as.map((a) => a.textContent));
    assert.ok(init.length > 0, 'the node has initializer inputs');
    assert.ok(ref.initializers.includes(init[0]));
    await page.click('.tl-g-detail li a[title="open this tensor"]');
    assert.deepEqual(await page.evaluate(() => window.selected), [[0, init[0]]]);
    assert.deepEqual(problems, []);
  });

  it('graph of a 5,046-node model: repeated blocks collapsed, responsive', { timeout: 180000 }, async () => {
    const big = bigGraph(420);
    const ref = onnxReference(big.path);
    await mountView('graph', { a: big.path });
    const t0 = Date.now();
    await page.waitForSelector('[data-graph-state="done"], [data-graph-state="error"]', { timeout: 120000 });
    const ms = Date.now() - t0;
    assert.equal(await page.getAttribute('.tl-graph', 'data-graph-state'), 'done', await page.textContent('.tl-graph'));
    const blocks = await page.$$eval('svg [data-block]', (gs) => gs.map((g) => g.dataset.block));
    assert.deepEqual(blocks, ['/model/layers.#/'], 'the 420 layers are one box');
    const total = (await page.$$eval('.tl-g-op', (rows) => rows.map((r) => Number(r.children[1].textContent)))).reduce((x, y) => x + y, 0);
    assert.equal(total, ref.nodes.length);
    await page.screenshot({ path: `${OUT}graph-5000-collapsed.png` });
    // Search a node of block 137 in the list and select it: its block expands around it.
    await page.fill('.tl-g-list input', '/model/layers.137/mlp/MatMul');
    await page.waitForSelector('.tl-g-row[data-node="/model/layers.137/mlp/MatMul"]');
    await page.click('.tl-g-row[data-node="/model/layers.137/mlp/MatMul"]');
    await page.waitForSelector('svg [data-node="/model/layers.137/mlp/MatMul"]', { timeout: 60000 });
    await page.waitForSelector('[data-graph-state="done"]');
    await page.screenshot({ path: `${OUT}graph-5000-expanded.png` });
    // The weight's consumers: exactly the one MatMul (the onnx library agrees).
    await page.click('.tl-g-detail a[title="show its consumers"]');
    const consumers = await page.$$eval('[data-consumers-of] [data-consumer]', (li) => li.map((x) => x.dataset.consumer));
    const wantCons = ref.nodes.filter((n) => n.inputs.includes('model.layers.137.mlp.weight')).map((n) => n.name);
    assert.deepEqual(consumers, wantCons);
    // The main thread stays responsive: a frame within 200 ms.
    const frame = await page.evaluate(() => new Promise((r) => { const t = performance.now(); requestAnimationFrame(() => r(performance.now() - t)); }));
    assert.ok(frame < 200, `a frame after ${frame} ms`);
    console.log(`# 5,046-node graph: data-graph-state=done ${ms} ms after mount (layout ${await page.getAttribute('.tl-graph', 'data-layout-ms')} ms)`);
    assert.deepEqual(problems, []);
  });
});
