// The inspector opens model files in Debian's Chromium (headless, playwright-core, the wasm build):
// safetensors (alone and as a shard index with its shards), GGUF, ONNX with external data,
// PyTorch (zip and legacy), .npz, .npy and HDF5 from tests/data/fixtures, picked together as Files,
// list exactly the manifest's tensors; clicking a
// row plots the tensor (GGUF quantized blocks dequantized, same statistics as Node computes);
// and a 64 MiB safetensors and GGUF file, dropped as Files, list from under 1% of their bytes
// (every Blob slice is counted) and read one small tensor with one slice of its own bytes.
// Screenshot in tests/out/web-demo-models.png.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serve } from '../../web-demo/serve.mjs';
import { launch, missing } from './_chromium.mjs';
import * as tensorlane from '../../js/node.js';
import { bigModels } from '../js/_model_files.mjs';

const OUT = new URL('../out/', import.meta.url);
const FIXTURES = new URL('../data/fixtures/', import.meta.url);


const manifest = missing ? { files: [] } : JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
const entry = (file) => manifest.files.find((m) => m.file === file);
const fixture = (f) => fileURLToPath(new URL(f, FIXTURES));

describe('Chromium: the inspector opens model files lazily', { skip: missing ?? false }, () => {
  let server, url, browser, page;
  const problems = [];
  const big = missing ? null : bigModels();

  before(async () => {
    ({ server, url } = await serve({ generated: new Map([['big.safetensors', big.safetensors], ['big.gguf', big.gguf]]) }));
    browser = await launch();
    page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
    await page.goto(`${url}/web-demo/packets.html?packets=`);
    await page.waitForSelector('body[data-done="true"]', { timeout: 30000 });
    // Count every byte sliced out of a File; snapshot the count when the page says open() returned.
    await page.evaluate(() => {
      window.__reads = [];
      window.__atOpen = {};
      const slice = Blob.prototype.slice;
      Blob.prototype.slice = function (start, end, type) {
        const b = slice.call(this, start, end, type);
        if (this instanceof File) window.__reads.push({ file: this.name, start, end, size: b.size });
        return b;
      };
      document.addEventListener('model-opened', (ev) => {
        window.__atOpen[ev.detail.name] = window.__reads.map((r) => ({ ...r }));
      });
    });
  });

  after(async () => {
    await browser?.close();
    server?.close();
  });

  /** Clicks the row of `tensor` in the section of `file` and waits until it is plotted (or failed). */
  async function click(file, tensor) {
    const row = page.locator(`section.model[data-file="${file}"] tr[data-name="${tensor}"]`);
    await row.click();
    await page.waitForFunction(
      ([f, t]) => ['plotted', 'failed', 'not plottable'].includes(window.demo.models.find((m) => m.name === f)?.tensors.find((x) => x.name === t)?.state),
      [file, tensor],
      { timeout: 30000 },
    );
    return page.evaluate(([f, t]) => window.demo.models.find((m) => m.name === f).tensors.find((x) => x.name === t), [file, tensor]);
  }

  it('lists every format picked as Files (a shard index and ONNX external data with their companions); click plots', { timeout: 90000 }, async () => {
    const files = [
      'safetensors/dtypes.safetensors', 'safetensors/sharded/model.safetensors.index.json', 'safetensors/sharded/model-00001-of-00002.safetensors',
      'safetensors/sharded/model-00002-of-00002.safetensors', 'gguf/tiny-llama.gguf', 'gguf/types.gguf', 'onnx/external.onnx', 'onnx/external.onnx.data',
      'pt/mlp-state-dict.pt', 'pt/views.legacy.pt', 'npz/compressed.npz', 'npy/fortran-order-f64.npy', 'hdf5/libver-latest.h5',
    ];
    const live = files.filter((f) => !/\.data$|-0000\d-of/.test(f));
    if (live.length === 0) return;
    await page.setInputFiles('#files', files.map(fixture));
    await page.waitForFunction(() => document.body.dataset.files === 'done', null, { timeout: 60000 });
    const models = await page.evaluate(() => window.demo.models);
    // Shards and external data were read as companions, not listed on their own.
    assert.deepEqual(models.map((m) => m.name).sort(), files.filter((f) => !/\.data$|-0000\d-of/.test(f)).map((f) => f.split('/').pop()).sort());
    for (const file of live) {
      const name = file.split('/').pop();
      const m = models.find((x) => x.name === name);
      const want = entry(file);
      assert.equal(m.error, undefined, `${file}: ${m.error}`);
      assert.deepEqual(m.tensors.map((t) => [t.name, t.dtype, t.shape, t.nbytes]), want.tensors.map((t) => [t.name, t.dtype, t.shape, t.nbytes]), `${file}: listing`);
      const rows = await page.$$eval(`section.model[data-file="${name}"] tbody tr`, (trs) => trs.map((tr) => tr.dataset.name));
      assert.deepEqual(rows, want.tensors.map((t) => t.name), `${file}: table rows`);
    }
    if (live.includes('safetensors/sharded/model.safetensors.index.json')) {
      const ix = models.find((x) => x.name === 'model.safetensors.index.json');
      assert.equal(ix.format, 'safetensors-index');
      assert.deepEqual(ix.sources.slice(1).sort(), ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']);
      const t = await click('model.safetensors.index.json', 'model.embed_tokens.weight');
      assert.equal(t.state, 'plotted');
      assert.equal(t.stats.count, 40);
    }
    if (live.includes('onnx/external.onnx')) {
      const t = await click('external.onnx', 'table');
      assert.equal(t.state, 'plotted', t.error);
      assert.equal(t.stats.count, 128);
    }
    // Click every row: plottable tensors are drawn with the statistics the core gives in Node (the
    // addon) for the values Node reads (GGUF blocks dequantized); the others say why not.
    const PLOTTABLE = /^(u?int(8|16|32|64)|float(16|32|64)|bfloat16)$/;
    for (const file of live.filter((f) => !f.endsWith('.json') && !f.endsWith('.onnx'))) {
      const name = file.split('/').pop();
      const node = tensorlane.open(fixture(file));
      for (const want of entry(file).tensors) {
        const t = await click(name, want.name);
        if (!want.dequantized && !PLOTTABLE.test(want.dtype)) {
          assert.equal(t.state, 'not plottable', `${file} / ${want.name}`);
          continue;
        }
        assert.equal(t.state, 'plotted', `${file} / ${want.name}: ${t.error}`);
        const values = want.dequantized ? node.dequantize(want.name) : node.tensor(want.name, { widen: true });
        const s = tensorlane.stats({ data: values });
        assert.deepEqual(t.stats, { min: s.min, max: s.max, mean: s.mean, count: s.count }, `${file} / ${want.name}`);
      }
      const plots = await page.$$eval(`section.model[data-file="${name}"] .plot`, (ps) => ps.length);
      assert.equal(plots, entry(file).tensors.filter((w) => w.dequantized || PLOTTABLE.test(w.dtype)).length, file);
    }
    const heat = await page.$$eval('section.model[data-file="tiny-llama.gguf"] canvas.heat', (cs) => cs.length);
    if (live.includes('gguf/tiny-llama.gguf')) assert.equal(heat, 3); // the three 2-D quantized matrices
    assert.deepEqual(problems, []);
  });

  it('a 64 MiB safetensors and GGUF dropped as Files list from under 1% of their bytes', { timeout: 90000 }, async () => {
    await page.evaluate(async () => {
      const dt = new DataTransfer();
      for (const name of ['big.safetensors', 'big.gguf']) dt.items.add(new File([await (await fetch(`/gen/${name}`)).arrayBuffer()], name));
      window.__reads.length = 0;
      document.getElementById('drop').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    });
    await page.waitForFunction(() => window.demo.models.some((m) => m.name === 'big.gguf') && document.body.dataset.files === 'done', null, { timeout: 60000 });
    const { models, atOpen } = await page.evaluate(() => ({ models: window.demo.models, atOpen: window.__atOpen }));
    for (const [name, size] of [['big.safetensors', big.safetensors.byteLength], ['big.gguf', big.gguf.byteLength]]) {
      const m = models.find((x) => x.name === name);
      assert.equal(m.error, undefined, m.error);
      const read = atOpen[name].filter((r) => r.file === name);
      const n = read.reduce((k, r) => k + r.size, 0);
      assert.equal(m.openBytes, n, `${name}: the page's own count`);
      assert.ok(n < size / 100, `${name}: open read ${n} of ${size} bytes`);
      assert.ok(read.length <= 8, `${name}: ${read.length} slices`);
    }
    const st = models.find((x) => x.name === 'big.safetensors');
    assert.deepEqual(st.tensors.map((t) => [t.name, t.dtype, t.shape]), [['bias', 'float32', [4]], ['half', 'float16', [3]], ['weight', 'float32', [big.expect.side, big.expect.side]]]);
    const bias = await click('big.safetensors', 'bias');
    assert.equal(bias.readBytes, 16, 'one slice of the tensor bytes');
    assert.deepEqual([bias.stats.min, bias.stats.max], [1, 4]);
    const gg = models.find((x) => x.name === 'big.gguf');
    assert.equal(gg.format, 'gguf');
    assert.deepEqual(gg.tensors.map((t) => t.name), ['blk.0.ffn.weight', 'token_embd.weight', 'output_norm.weight']);
    const q = await click('big.gguf', 'blk.0.ffn.weight');
    assert.equal(q.state, 'plotted', q.error);
    assert.equal(q.readBytes, 8 * 34);
    const s = tensorlane.stats({ data: big.expect.q8 });
    assert.deepEqual(q.stats, { min: s.min, max: s.max, mean: s.mean, count: s.count });
    await page.waitForTimeout(200); // let the canvases paint
    mkdirSync(OUT, { recursive: true });
    await page.screenshot({ path: fileURLToPath(new URL('web-demo-models.png', OUT)), fullPage: true });
    assert.deepEqual(problems, []);
  });
});
