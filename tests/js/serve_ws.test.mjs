// `tensorlane serve` streams tensors over its WebSocket (/ws); Node decodes every binary message
// with the package's `decode`: safetensors tensors match the fixtures manifest's sha256, dtype and
// shape, GGUF blocks dequantized by the server match the package's own `dequantize`, a missing
// tensor is an error message that names it, and /tensors/ over HTTP gives the same packets; /models
// lists .zt models (shards as sources) and their tensors stream like any model's.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as tensorlane from '../../js/node.js';
import { startServe, askOverWsFromNode, missing } from './_serve.mjs';

const FIXTURES = new URL('../data/fixtures/', import.meta.url);
const manifest = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
const entry = (file) => manifest.files.find((m) => m.file === file);
const bytesOf = (t) => new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
const sha = (b) => createHash('sha256').update(b).digest('hex');

describe('tensorlane serve: tensors over WebSocket, decoded in Node', { skip: missing ?? false }, () => {
  let srv;
  before(async () => { srv = await startServe([fileURLToPath(FIXTURES)]); });
  after(async () => { await srv?.stop(); });

  it('streams safetensors and dequantized GGUF tensors that decode to the reference values', async () => {
    const st = entry('sample.safetensors');
    const gguf = entry('sample.gguf');
    const quantized = gguf.tensors.filter((t) => /^Q|^IQ/.test(t.dtype)).map((t) => t.name);
    assert.ok(st.tensors.length > 0 && quantized.length > 0);
    const ws = srv.base.replace('http://', 'ws://') + '/ws';
    const answers = await askOverWsFromNode(ws, [
      { tensors: st.tensors.map((t) => ({ model: 'fixtures/sample.safetensors', name: t.name })), integrity: true },
      { model: 'fixtures/sample.gguf', tensors: quantized, dequantize: 'f32' },
      { tensors: [{ model: 'fixtures/sample.safetensors', name: 'no.such.tensor' }] },
    ]);
    assert.equal(answers.length, 3);

    const [a, b, c] = answers;
    assert.deepEqual(a.end, { done: true, sent: st.tensors.length, failed: 0 });
    for (const [i, want] of st.tensors.entries()) {
      const item = a.items[i];
      assert.equal(item.meta.name, want.name);
      assert.equal(item.meta.bytes, item.bytes.length);
      const t = tensorlane.decode(item.bytes);
      assert.equal(t.kind, 'dense');
      assert.equal(t.dtype, want.dtype, want.name);
      assert.deepEqual(t.shape, want.shape, want.name);
      assert.equal(sha(bytesOf(t)), want.sha256, want.name);
      // Over HTTP the same packet.
      const http = new Uint8Array(await (await fetch(`${srv.base}/tensors/fixtures/sample.safetensors/${encodeURIComponent(want.name)}?integrity=1`)).arrayBuffer());
      assert.deepEqual(http, item.bytes, want.name);
    }

    assert.deepEqual(b.end, { done: true, sent: quantized.length, failed: 0 });
    const local = tensorlane.open(fileURLToPath(new URL('sample.gguf', FIXTURES)));
    for (const [i, name] of quantized.entries()) {
      const t = tensorlane.decode(b.items[i].bytes);
      assert.equal(t.dtype, 'float32', name);
      assert.deepEqual(t.shape, gguf.tensors.find((x) => x.name === name).shape, name);
      assert.deepEqual(Array.from(t.data), Array.from(await local.dequantize(name)), name);
    }

    assert.deepEqual(c.end, { done: true, sent: 0, failed: 1 });
    assert.equal(c.items[0].meta.status, 404);
    assert.match(c.items[0].meta.error, /no\.such\.tensor/);
  });

  it('/models lists .zt models like any model (shards as sources); a .zt tensor streams as the JS reader reads it', async () => {
    const { models } = await (await fetch(`${srv.base}/models`)).json();
    let n = 0;
    for (const e of manifest.files.filter((f) => f.format.startsWith('zt') && f.expect === 'read')) {
      const m = models.find((x) => x.id === `fixtures/${e.file}`);
      assert.ok(m, `${e.file} is listed`);
      assert.equal(m.format, e.format, e.file);
      assert.deepEqual(m.tensors.map((t) => t.name), e.tensors.map((t) => t.name), e.file);
      const local = tensorlane.open(fileURLToPath(new URL(e.file, FIXTURES)));
      assert.deepEqual(m.tensors.map((t) => [t.dtype, t.shape]), local.tensors.map((t) => [t.dtype, t.shape]), e.file);
      n++;
    }
    assert.ok(n >= 8, `${n}`);
    const sharded = models.find((x) => x.id === 'fixtures/sharded.zt');
    assert.deepEqual(sharded.sources.map((s) => s.url), ['/files/fixtures/sharded.zt', '/files/fixtures/sharded-00001.zt', '/files/fixtures/sharded-data.zt']);
    const ws = srv.base.replace('http://', 'ws://') + '/ws';
    const [a] = await askOverWsFromNode(ws, [{ model: 'fixtures/sharded.zt', tensors: ['layer.weight', 'layer.raw_u16'] }]);
    assert.deepEqual(a.end, { done: true, sent: 2, failed: 0 });
    const local = tensorlane.open(fileURLToPath(new URL('sharded.zt', FIXTURES)));
    for (const [i, name] of ['layer.weight', 'layer.raw_u16'].entries()) assert.deepEqual(bytesOf(tensorlane.decode(a.items[i].bytes)), (({ buffer, byteOffset, byteLength }) => new Uint8Array(buffer, byteOffset, byteLength))(local.tensor(name)), name);
  });

  it('answers a malformed request with an error, and keeps the socket', async () => {
    const ws = srv.base.replace('http://', 'ws://') + '/ws';
    const [bad, good] = await askOverWsFromNode(ws, [
      { names: ['x'] },
      { model: 'fixtures/sample.safetensors', tensors: [entry('sample.safetensors').tensors[0].name] },
    ]);
    assert.match(bad.end.error, /tensors/);
    assert.equal(good.end.sent, 1);
  });
});
