// open(url) in Node (fetch + HTTP Range, js/http.js) against web-demo/serve.mjs on 127.0.0.1:
// the server's Range answers (single, open-ended, suffix, 416, If-Match/If-None-Match/If-Range,
// HEAD, CORS preflight); every readable fixture of tests/data/fixtures opened by URL lists the
// manifest's tensors and reads the same bytes as the path does; a 50 GB sparse safetensors lists
// from its header only (requests and bytes counted at the server); GGUF splits and ONNX external
// data come as sibling URLs; parallel parts stay within {concurrency}; 503s are retried; an object
// replaced mid-read, a 404 and an unreachable server are errors that say so; stats() cancels on
// an AbortSignal.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve, parseRange } from '../../web-demo/serve.mjs';
import * as tensorlane from '../../js/node.js';
import { ggufSplits, safetensorsFile, sparseSafetensors } from './_model_files.mjs';

const FIXTURES = new URL('../data/fixtures/', import.meta.url);
const manifest = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
const fixture = (f) => fileURLToPath(new URL(f, FIXTURES));
const bytesOf = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

describe('open(url): HTTP Range reads', () => {
  let server, url, dir, sparse;
  const log = [];
  const generated = new Map();
  let failNext = 0;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tensorlane-http-'));
    sparse = sparseSafetensors(dir);
    generated.set('sparse.safetensors', { path: sparse.file });
    for (const [name, b] of ggufSplits()) generated.set(name, b);
    ({ server, url } = await serve({
      generated,
      log,
      faults: (req) => {
        if (req.url.startsWith('/gen/flaky') && failNext > 0) {
          failNext--;
          return 503;
        }
        if (req.url.startsWith('/gen/down')) return 503;
        return 0;
      },
    }));
  });
  after(() => {
    server?.closeAllConnections();
    server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the server answers Range, conditional and CORS requests correctly', async () => {
    assert.deepEqual(parseRange('bytes=0-9', 100), { start: 0, end: 9 });
    assert.deepEqual(parseRange('bytes=90-', 100), { start: 90, end: 99 });
    assert.deepEqual(parseRange('bytes=-10', 100), { start: 90, end: 99 });
    assert.deepEqual(parseRange('bytes=-1000', 100), { start: 0, end: 99 });
    assert.deepEqual(parseRange('bytes=95-1000', 100), { start: 95, end: 99 });
    assert.equal(parseRange('bytes=100-', 100), 'unsatisfiable');
    assert.equal(parseRange('bytes=0-1,5-6', 100), null);
    const file = `${url}/tests/data/fixtures/safetensors/dtypes.safetensors`;
    const whole = readFileSync(fixture('safetensors/dtypes.safetensors'));
    const get = (headers, method = 'GET') => fetch(file, { headers, method });
    let r = await get({ Range: 'bytes=8-15' });
    assert.equal(r.status, 206);
    assert.equal(r.headers.get('content-range'), `bytes 8-15/${whole.length}`);
    assert.equal(r.headers.get('accept-ranges'), 'bytes');
    assert.deepEqual(new Uint8Array(await r.arrayBuffer()), new Uint8Array(whole.subarray(8, 16)));
    const etag = r.headers.get('etag');
    assert.match(etag, /^"[^"]+"$/, 'a strong ETag');
    r = await get({ Range: 'bytes=-4' });
    assert.deepEqual(new Uint8Array(await r.arrayBuffer()), new Uint8Array(whole.subarray(whole.length - 4)));
    r = await get({ Range: `bytes=${whole.length - 3}-` });
    assert.equal(r.headers.get('content-range'), `bytes ${whole.length - 3}-${whole.length - 1}/${whole.length}`);
    await r.arrayBuffer();
    r = await get({ Range: `bytes=${whole.length}-` });
    assert.equal(r.status, 416);
    assert.equal(r.headers.get('content-range'), `bytes */${whole.length}`);
    await r.arrayBuffer();
    r = await get({ Range: 'bytes=0-3', 'If-Match': '"other"' });
    assert.equal(r.status, 412);
    await r.arrayBuffer();
    r = await get({ 'If-None-Match': etag });
    assert.equal(r.status, 304);
    r = await get({ Range: 'bytes=0-3', 'If-Range': '"other"' });
    assert.equal(r.status, 200, 'a stale If-Range gets the whole body');
    assert.equal((await r.arrayBuffer()).byteLength, whole.length);
    r = await get({}, 'HEAD');
    assert.equal(Number(r.headers.get('content-length')), whole.length);
    r = await fetch(file, { method: 'OPTIONS', headers: { Origin: 'http://example.test', 'Access-Control-Request-Method': 'GET', 'Access-Control-Request-Headers': 'range,if-match' } });
    assert.equal(r.status, 204);
    assert.equal(r.headers.get('access-control-allow-origin'), '*');
    assert.match(r.headers.get('access-control-allow-headers'), /Range/);
    assert.match(r.headers.get('access-control-expose-headers'), /Content-Range/);
    assert.match(r.headers.get('access-control-expose-headers'), /ETag/);
  });

  it('every readable fixture opens by URL: the manifest listing and the same bytes as the path', { timeout: 120000 }, async () => {
    let n = 0;
    for (const m of manifest.files.filter((f) => f.expect === 'read')) {
      let local;
      try {
        local = tensorlane.open(fixture(m.file));
      } catch (e) {
        // A file the path refuses: the URL gets the same refusal.
        await assert.rejects(tensorlane.open(`${url}/tests/data/fixtures/${m.file}`), (err) => err.message === e.message, m.file);
        continue;
      }
      const remote = await tensorlane.open(`${url}/tests/data/fixtures/${m.file}`);
      assert.equal(remote.format, local.format, m.file);
      assert.deepEqual(remote.keys(), local.keys(), `${m.file}: keys`);
      // (Objects stored as parts have no dtype in the manifest: their parts are compared below.)
      if (m.tensors.every((t) => t.dtype !== null)) assert.deepEqual(remote.tensors.map((t) => [t.name, t.dtype, t.shape, t.nbytes]), m.tensors.map((t) => [t.name, t.dtype, t.shape, t.nbytes]), `${m.file}: the manifest's listing`);
      for (const name of remote.keys()) {
        if (remote.info(name).layout.storage === 'parts') {
          for (const p of remote.info(name).layout.parts) assert.deepEqual(bytesOf(await remote.part(name, p.name)), bytesOf(local.part(name, p.name)), `${m.file} / ${name} / ${p.name}`);
          continue;
        }
        let want;
        try {
          want = local.tensor(name);
        } catch (e) {
          await assert.rejects(async () => remote.tensor(name), (err) => err.kind === e.kind, `${m.file} / ${name}: the same refusal`);
          continue;
        }
        assert.deepEqual(bytesOf(await remote.tensor(name)), bytesOf(want), `${m.file} / ${name}`);
      }
      remote.close?.();
      n++;
    }
    assert.ok(n >= 50, `${n} fixtures`);
  });

  it('a 50 GB sparse safetensors lists by URL from its header: one request, < 0.01% of the bytes', async () => {
    log.length = 0;
    const r = await tensorlane.open(`${url}/gen/sparse.safetensors`);
    const requests = log.filter((e) => e.path === '/gen/sparse.safetensors');
    const sent = requests.reduce((k, e) => k + e.bytes, 0);
    assert.equal(r.tensors.length, sparse.tensors);
    assert.equal(requests.length, 1, 'the probe GET is the whole listing');
    assert.ok(sent < sparse.size * 1e-4, `${sent} of ${sparse.size} bytes`);
    assert.ok(sent >= sparse.headerBytes);
    // One small tensor at the far end: one more ranged GET of its 16 bytes.
    log.length = 0;
    assert.deepEqual([...(await r.tensor('model.norm.weight'))], [1, 2, 3, 4]);
    assert.deepEqual(log.map((e) => [e.range, e.status, e.bytes]), [[`bytes=${sparse.size - 16}-${sparse.size - 1}`, 206, 16]]);
  });

  it('GGUF splits and ONNX external data are fetched as sibling URLs', async () => {
    const g = await tensorlane.open(`${url}/gen/model-00001-of-00002.gguf`);
    assert.deepEqual(g.keys(), ['a', 'b']);
    assert.deepEqual([...(await g.tensor('b'))], [5, 6, 7, 8, 9, 10]);
    const o = await tensorlane.open(`${url}/tests/data/fixtures/onnx/external.onnx`);
    assert.deepEqual(o.sources, ['', 'external.onnx.data']);
    const local = tensorlane.open(fixture('onnx/external.onnx'));
    assert.deepEqual(bytesOf(await o.tensor('table')), bytesOf(local.tensor('table')));
    // A missing companion says which and why.
    generated.set('lonely.safetensors.index.json', new TextEncoder().encode(JSON.stringify({ metadata: {}, weight_map: { w: 'gone.safetensors' } })));
    await assert.rejects(tensorlane.open(`${url}/gen/lonely.safetensors.index.json`), /gone\.safetensors.*not found \(HTTP 404\)/);
  });

  it('a big read is split into parts, at most {concurrency} in flight', async () => {
    const data = new Float32Array(5 << 20).map((_, i) => i % 977);
    generated.set('wide.safetensors', safetensorsFile([['w', { dtype: 'F32', shape: [5 << 20], data: bytesOf(data) }]]));
    let inFlight = 0;
    let peak = 0;
    const counting = async (...a) => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      try {
        const res = await fetch(...a);
        const body = await res.arrayBuffer();
        return new Response(body, { status: res.status, headers: res.headers });
      } finally {
        inFlight--;
      }
    };
    const r = await tensorlane.open(`${url}/gen/wide.safetensors`, { fetch: counting, partBytes: 1 << 20, concurrency: 3 });
    log.length = 0;
    assert.deepEqual(bytesOf(await r.tensor('w')), bytesOf(data));
    assert.equal(peak, 3, 'parts ran in parallel, bounded');
    assert.equal(log.length, 20, 'twenty 1 MiB parts');
    assert.ok(log.every((e) => e.status === 206));
  });

  it('5xx answers are retried; a server that keeps failing is an error that says so', async () => {
    generated.set('flaky.safetensors', safetensorsFile([['x', { dtype: 'F32', shape: [2], data: bytesOf(new Float32Array([7, 8])) }]]));
    failNext = 2;
    const r = await tensorlane.open(`${url}/gen/flaky.safetensors`);
    assert.deepEqual([...(await r.tensor('x'))], [7, 8]);
    assert.equal(failNext, 0);
    generated.set('down.safetensors', new Uint8Array(8));
    await assert.rejects(tensorlane.open(`${url}/gen/down.safetensors`, { retries: 1 }), (e) => e.status === 503 && /server error \(HTTP 503\); retried/.test(e.message));
  });

  it('an object replaced mid-read is an error, never mixed bytes', async () => {
    const make = (v) => safetensorsFile([['x', { dtype: 'F32', shape: [16384], data: bytesOf(new Float32Array(16384).fill(v)) }]]);
    generated.set('moving.safetensors', make(1));
    const r = await tensorlane.open(`${url}/gen/moving.safetensors`);
    generated.set('moving.safetensors', make(2));
    await assert.rejects(r.tensor('x'), (e) => e.kind === 'changed' && /changed on the server/.test(e.message));
    // Without If-Match the response's ETag is still compared.
    const r2 = await tensorlane.open(`${url}/gen/moving.safetensors`, { ifMatch: false });
    generated.set('moving.safetensors', make(3));
    await assert.rejects(r2.tensor('x'), (e) => e.kind === 'changed');
  });

  it('4xx and unreachable servers are explained', async () => {
    await assert.rejects(tensorlane.open(`${url}/gen/nothing.safetensors`), (e) => e.status === 404 && /nothing\.safetensors: not found \(HTTP 404\)/.test(e.message));
    const dead = createDeadPort();
    await assert.rejects(tensorlane.open(`http://127.0.0.1:${await dead}/x.gguf`, { retries: 1 }), (e) => e.kind === 'network' && /unreachable/.test(e.message));
  });

  it('stats() over a URL reads in chunks and stops on an AbortSignal', async () => {
    const data = new Float32Array(1 << 20).map((_, i) => Math.sin(i));
    generated.set('stat.safetensors', safetensorsFile([['s', { dtype: 'F32', shape: [1 << 20], data: bytesOf(data) }]]));
    const r = await tensorlane.open(`${url}/gen/stat.safetensors`);
    const s = await r.stats('s', { chunkBytes: 256 << 10 });
    assert.deepEqual(s.min, tensorlane.stats({ data }).min);
    assert.equal(s.mean, tensorlane.stats({ data }).mean);
    const ac = new AbortController();
    let calls = 0;
    await assert.rejects(
      r.stats('s', { chunkBytes: 64 << 10, onProgress: () => ++calls === 3 && ac.abort(), signal: ac.signal }),
      (e) => e.name === 'AbortError',
    );
    assert.equal(calls, 3, 'no progress after the abort');
  });
});

/** A port on 127.0.0.1 with nothing listening (bound, then closed). */
async function createDeadPort() {
  const { createServer } = await import('node:net');
  const s = createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const port = s.address().port;
  await new Promise((r) => s.close(r));
  return port;
}
