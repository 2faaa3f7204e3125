// reader.stats() in Debian's Chromium (headless, playwright-core) through the wasm build: fixtures
// picked as Files (a GGUF with every quantized type, a safetensors with bfloat16, float8 and
// float4, and a safetensors with NaN/±Inf written by the safetensors package) give the statistics
// NumPy computes and exactly what Node gives for the same files; each tensor is read in slices of
// at most `chunkBytes` (every File slice is counted), never whole.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { serve } from '../../web-demo/serve.mjs';
import { launch, missing } from './_chromium.mjs';
import * as tensorlane from '../../js/node.js';
import { assertMatches, fixturePath, plainStats, reference, specialFile } from '../js/_stats_reference.mjs';

const CHUNK = 512;


describe('Chromium: stats() of Files through the wasm build', { skip: missing ?? false }, () => {
  let server, url, browser, page;
  const problems = [];

  before(async () => {
    ({ server, url } = await serve());
    browser = await launch();
    page = await browser.newPage();
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    // The browser's own favicon request is the one 404 that says nothing about the code under test.
    page.on('response', (r) => r.status() >= 400 && !r.url().endsWith('/favicon.ico') && problems.push(`HTTP ${r.status()}: ${r.url()}`));
    page.on('console', (m) => m.type() === 'error' && !/^Failed to load resource/.test(m.text()) && problems.push(`console: ${m.text()}`));
    // Any page of the origin: the test imports js/browser.js into it.
    await page.goto(`${url}/package.json`);
    await page.evaluate(() => {
      const input = document.createElement('input');
      input.type = 'file';
      input.multiple = true;
      input.id = 'files';
      document.body.append(input);
    });
  });

  after(async () => {
    await browser?.close();
    server?.close();
  });

  it('GGUF quantized, bfloat16/float8/float4 and NaN/±Inf tensors match NumPy and Node', { timeout: 120000 }, async () => {
    const files = [fixturePath('gguf/types.gguf'), fixturePath('safetensors/dtypes.safetensors'), specialFile()];
    await page.setInputFiles('#files', files);
    const got = await page.evaluate(async (chunk) => {
      const api = await import('/js/browser.js');
      const out = [];
      for (const file of document.querySelector('#files').files) {
        const r = await api.open(file);
        for (const name of r.keys()) {
          const slices = [];
          const slice = Blob.prototype.slice;
          Blob.prototype.slice = function (start, end, type) {
            if (this === file) slices.push((end ?? this.size) - (start ?? 0));
            return slice.call(this, start, end, type);
          };
          try {
            const s = await r.stats(name, { chunkBytes: chunk, bins: 16 });
            out.push({ file: file.name, zeroCopy: r.info(name).layout.zeroCopy, slices, s: { ...s, histogram: { edges: [...s.histogram.edges], counts: s.histogram.counts } } });
          } finally {
            Blob.prototype.slice = slice;
          }
        }
        r.close();
      }
      return { backend: api.backendName, out };
    }, CHUNK);
    assert.equal(got.backend, 'wasm');
    // Node over the same paths (the addon when built: the native host's Model::stats).
    const cases = [];
    for (const f of files) {
      const r = tensorlane.open(f);
      for (const name of r.keys()) cases.push({ id: `${f.split('/').pop()} / ${name}`, node: r.stats(name, { bins: 16 }), data: r.tensor(name) });
    }
    assert.equal(got.out.length, cases.length);
    const ref = reference(cases.map((c) => ({ id: c.id, dtype: c.node.dtype, shape: c.node.shape, bytes: new Uint8Array(c.data.buffer, c.data.byteOffset, c.data.byteLength), edges: c.node.histogram.edges })));
    const dtypes = new Set();
    for (const [i, b] of got.out.entries()) {
      const c = cases[i];
      const s = { ...b.s, histogram: { edges: Float64Array.from(b.s.histogram.edges, (v) => v ?? NaN), counts: b.s.histogram.counts } };
      // NaN crosses page.evaluate as NaN; compare numbers the same way as Node's.
      assertMatches(s, ref[c.id], `Chromium ${c.id}`);
      assert.deepEqual(plainStats(s), plainStats(c.node), `${c.id}: Chromium and Node (${tensorlane.backendName}) agree`);
      if (b.zeroCopy) assert.ok(b.slices.every((n) => n <= CHUNK), `${c.id}: slices ${b.slices} of at most ${CHUNK} bytes`);
      dtypes.add(s.dtype);
    }
    for (const d of ['Q4_K', 'Q6_K', 'Q4_0', 'bfloat16', 'float8_e4m3fn', 'float4_e2m1fn']) assert.ok(dtypes.has(d), `${d} checked`);
    assert.ok(got.out.some((b) => b.s.nan > 0 && b.s.pos_inf > 0 && b.s.neg_inf > 0), 'a tensor with NaN and ±Inf checked');
    assert.deepEqual(problems, []);
  });
});
