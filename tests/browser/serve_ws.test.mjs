// `tensorlane serve` in Debian's Chromium (headless, playwright-core, the wasm build): the inspector
// page loads from the Rust server without errors, and a page script streams tensors over the
// server's WebSocket (/ws), decodes every binary message with the package's `decode` (wasm) and
// hashes the bytes with WebCrypto: dtype, shape and sha256 match the fixtures manifest. The page
// also reads a file's byte range from another origin with fetch + Range (a CORS preflight) and
// reads the exposed headers.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { launch, missing as noChromium } from './_chromium.mjs';
import { startServe, missing as noBinary } from '../js/_serve.mjs';

const FIXTURES = new URL('../data/fixtures/', import.meta.url);
const manifest = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
const entry = (file) => manifest.files.find((m) => m.file === file);

describe('Chromium: tensorlane serve (inspector and WebSocket)', { skip: noChromium ?? noBinary ?? false }, () => {
  let srv, browser, page, redirected;
  const problems = [];
  before(async () => {
    srv = await startServe([fileURLToPath(FIXTURES)]);
    browser = await launch();
    page = await browser.newPage();
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
    await page.goto(`${srv.base}/`); // redirects to /web-demo/
    redirected = new URL(page.url()).pathname;
    // The inspector opens a served model by URL (HTTP Range against the Rust server).
    await page.goto(`${srv.base}/web-demo/?url=${encodeURIComponent(`${srv.base}/files/fixtures/sample.safetensors`)}&view=tensors`);
    await page.waitForSelector('body[data-state="ready"] [data-tensor]', { timeout: 30000 });
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
  });

  it('serves the inspector without errors, and the inspector opens a served model by URL', async () => {
    assert.equal(redirected, '/web-demo/');
    assert.deepEqual(problems, []);
    const rows = await page.$$eval('[data-tensor]', (els) => [...new Set(els.map((e) => e.dataset.tensor))].sort());
    assert.deepEqual(rows, entry('sample.safetensors').tensors.map((t) => t.name).sort());
  });

  it('streams tensors over /ws that the page decodes to the manifest', async () => {
    const files = ['sample.safetensors', 'npy/fortran-order-f64.npy', 'npy/big-endian-f4.npy'].filter((f) => entry(f));
    assert.ok(files.length >= 1);
    const request = { tensors: files.flatMap((f) => entry(f).tensors.map((t) => ({ model: `fixtures/${f}`, name: t.name }))), integrity: true };
    const got = await page.evaluate(async (req) => {
      const tl = await import('/js/browser.js');
      const ws = new WebSocket(location.origin.replace('http', 'ws') + '/ws');
      ws.binaryType = 'arraybuffer';
      const out = [];
      let meta = null;
      const done = new Promise((resolve, reject) => {
        ws.onerror = () => reject(new Error('WebSocket error'));
        ws.onmessage = async (ev) => {
          if (typeof ev.data === 'string') {
            const m = JSON.parse(ev.data);
            if (m.done) resolve(m); else meta = m;
            return;
          }
          const t = tl.decode(new Uint8Array(ev.data));
          const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
          out.push({ name: meta.name, dtype: t.dtype, shape: t.shape, bytes: bytes.slice() });
        };
      });
      await new Promise((r) => { ws.onopen = r; });
      ws.send(JSON.stringify(req));
      const end = await done;
      ws.close();
      const hex = async (b) => [...new Uint8Array(await crypto.subtle.digest('SHA-256', b))].map((x) => x.toString(16).padStart(2, '0')).join('');
      return { end, tensors: await Promise.all(out.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, sha256: await hex(t.bytes) }))) };
    }, request);
    assert.deepEqual(got.end, { done: true, sent: request.tensors.length, failed: 0 });
    const want = files.flatMap((f) => entry(f).tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, sha256: t.sha256 })));
    assert.deepEqual(got.tensors, want);
  });

  it('reads a byte range cross-origin with fetch (CORS preflight) and sees the exposed headers', async () => {
    // The page is on 127.0.0.1; localhost is another origin, and a Range header needs a preflight.
    const other = srv.base.replace('127.0.0.1', 'localhost');
    const r = await page.evaluate(async (url) => {
      const res = await fetch(url, { headers: { Range: 'bytes=-16' } });
      return { status: res.status, range: res.headers.get('content-range'), etag: res.headers.get('etag'), n: (await res.arrayBuffer()).byteLength };
    }, `${other}/files/fixtures/sample.safetensors`);
    const size = entry('sample.safetensors').size;
    assert.equal(r.status, 206);
    assert.equal(r.range, `bytes ${size - 16}-${size - 1}/${size}`);
    assert.match(r.etag, /^"/);
    assert.equal(r.n, 16);
  });
});
