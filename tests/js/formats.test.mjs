// open() for every model format, on both backends, against tests/data/fixtures (manifest.json):
// every `read` fixture lists the manifest's names, dtypes, shapes and byte counts, and tensor()
// gives bytes with the manifest's sha256 (quantized GGUF tensors: dequantize() too), from a path,
// from bytes and from a Blob, with companions (safetensors shards, ONNX external data) found next
// to a path or passed as {companions}. Every `reject` fixture throws a TensorlaneError that names
// the format, the kind of problem and what is wrong. A format whose parser still answers "not
// yet implemented" is skipped (and reported); once its parser is there, any mismatch fails.
// Large generated files check that a Blob is read lazily: listing reads a few header bytes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, openAsBlob, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DATA, data, loadBackends, sha256 } from './_helpers.mjs';
import { bigModels, ggufSplits } from './_model_files.mjs';

const FIXTURES = data(new URL('fixtures/', DATA));
const FOREIGN = new Set(['safetensors', 'safetensors-index', 'gguf', 'pt', 'npy', 'npz', 'onnx', 'hdf5']);
const KINDS = new Set(['truncated', 'header-too-large', 'syntax', 'unsupported-version', 'unsupported', 'out-of-bounds', 'overlap', 'gap', 'size-mismatch', 'duplicate', 'overflow', 'limit', 'refused', 'companion', 'checksum', 'io']);

const manifest = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
const entries = manifest.files.filter((e) => FOREIGN.has(e.format));
const backends = await loadBackends();

/** The parser of this format is still a stub. */
const pending = (e) => /not yet implemented/.test(e?.message ?? '');
const path = (file) => fileURLToPath(new URL(file, FIXTURES));
const dir = (file) => file.slice(0, file.lastIndexOf('/') + 1);

/** The companion files of an entry: {name relative to the model: fixture path}. */
function companionsOf(e) {
  const out = {};
  for (const c of e.companions ?? []) out[c.slice(dir(e.file).length)] = c;
  for (const t of e.tensors ?? []) if (t.shard) out[t.shard] = dir(e.file) + t.shard;
  return out;
}

/** The entry opened three ways: [how, reader] (path, bytes + companions, Blob + companions). */
async function openAll(api, e) {
  const comps = companionsOf(e);
  const bytes = Object.fromEntries(Object.entries(comps).map(([n, f]) => [n, new Uint8Array(readFileSync(path(f)))]));
  const blobs = Object.fromEntries(await Promise.all(Object.entries(comps).map(async ([n, f]) => [n, await openAsBlob(path(f))])));
  return [
    ['path', api.open(path(e.file))],
    ['bytes', api.open(new Uint8Array(readFileSync(path(e.file))), { companions: bytes })],
    ['Blob', await api.open(await openAsBlob(path(e.file)), { companions: blobs })],
  ];
}

/** Checks a reader against a manifest entry; returns the number of digests compared. */
async function check(r, e, ctx) {
  assert.deepEqual(r.keys(), e.tensors.map((t) => t.name), `${ctx}: names`);
  let n = 0;
  for (const want of e.tensors) {
    const what = `${ctx} / ${want.name}`;
    const info = r.info(want.name);
    assert.equal(info.dtype, want.dtype, `${what}: dtype`);
    assert.deepEqual(info.shape, want.shape, `${what}: shape`);
    assert.equal(info.nbytes, want.nbytes, `${what}: nbytes`);
    const data = await r.tensor(want.name);
    assert.ok(ArrayBuffer.isView(data), `${what}: a TypedArray`);
    assert.equal(data.byteLength, want.nbytes, `${what}: bytes read`);
    assert.equal(sha256(data), want.sha256, `${what}: sha256`);
    n++;
    if (want.dequantized) {
      let f;
      try {
        f = await r.dequantize(want.name);
      } catch (err) {
        if (pending(err)) continue;
        throw err;
      }
      assert.ok(f instanceof Float32Array, `${what}: dequantize gives a Float32Array`);
      assert.equal(sha256(f), want.dequantized.sha256, `${what}: dequantized sha256`);
      n++;
    }
  }
  return n;
}

/** A comparable form of a listing (BigInts as strings). */
const plain = (x) => JSON.parse(JSON.stringify(x, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v instanceof Uint8Array ? [...v] : v)));

for (const { name, api } of backends) {
  test(`${name}: every read fixture lists and reads as the manifest says (path, bytes, Blob)`, async (t) => {
    const skipped = new Set();
    let digests = 0;
    for (const e of entries.filter((x) => x.expect === 'read')) {
      let opened;
      try {
        opened = await openAll(api, e);
      } catch (err) {
        if (pending(err)) {
          skipped.add(e.format);
          continue;
        }
        throw new Error(`${e.file}: ${err.message}`, { cause: err });
      }
      const listings = [];
      for (const [how, r] of opened) {
        assert.equal(r.lazy, how === 'Blob', `${e.file} (${how}): lazy`);
        digests += await check(r, e, `${e.file} (${how})`);
        listings.push(plain({ format: r.format, tensors: r.tensors, metadata: r.metadata, skipped: r.skipped }));
      }
      assert.deepEqual(listings[1], listings[0], `${e.file}: bytes and path list the same`);
      assert.deepEqual(listings[2], listings[0], `${e.file}: Blob and path list the same`);
    }
    if (skipped.size) t.diagnostic(`parsers not yet implemented (skipped): ${[...skipped].sort().join(', ')}`);
    else assert.ok(digests >= 200, `${digests} digests`);
  });

  test(`${name}: every reject fixture throws a TensorlaneError that says what is wrong`, async (t) => {
    const skipped = new Set();
    for (const e of entries.filter((x) => x.expect === 'reject')) {
      const comps = Object.fromEntries(Object.entries(companionsOf(e)).map(([n, f]) => [n, new Uint8Array(readFileSync(path(f)))]));
      for (const [how, open] of [
        ['path', () => api.open(path(e.file))],
        ['bytes', () => api.open(new Uint8Array(readFileSync(path(e.file))), { companions: comps })],
      ]) {
        let err;
        try {
          const r = open();
          // Refusing at open is expected; a reader that lists must refuse the tensor instead.
          for (const k of r.keys()) r.tensor(k);
        } catch (x) {
          err = x;
        }
        if (pending(err)) {
          skipped.add(e.format);
          continue;
        }
        const ctx = `${e.file} (${how}): ${e.reason}`;
        assert.ok(err, `${ctx}: not refused`);
        assert.equal(err.name, 'TensorlaneError', `${ctx}: ${err.stack}`);
        assert.ok(KINDS.has(err.kind), `${ctx}: kind ${err.kind}`);
        assert.equal(typeof err.format, 'string', ctx);
        assert.ok(err.message.length >= 30, `${ctx}: message ${JSON.stringify(err.message)}`);
        assert.ok(err.message.includes(`[${err.kind}]`), `${ctx}: ${err.message}`);
      }
    }
    // The companion checks happen in the binding: a path outside the folder is refused, a short data file too.
    if (!skipped.has('onnx')) {
      const kind = (f) => {
        try {
          api.open(path(f));
        } catch (err) {
          return err.kind;
        }
      };
      assert.equal(kind('onnx/hostile/external-path-traversal.onnx'), 'refused');
      assert.equal(kind('onnx/hostile/external-out-of-bounds.onnx'), 'out-of-bounds');
    }
    if (skipped.size) t.diagnostic(`parsers not yet implemented (skipped): ${[...skipped].sort().join(', ')}`);
  });

  test(`${name}: companions come from the folder, {companions}, or the error names them`, async (t) => {
    const onnx = 'onnx/external.onnx';
    let r;
    try {
      r = api.open(path(onnx));
    } catch (err) {
      if (pending(err)) return t.skip('onnx not yet implemented');
      throw err;
    }
    assert.deepEqual(r.sources, ['', 'external.onnx.data']);
    assert.throws(
      () => api.open(new Uint8Array(readFileSync(path(onnx)))),
      (err) => err.kind === 'companion' && /external\.onnx\.data/.test(err.message) && /companions/.test(err.message),
    );
    // The shard index over bytes: each shard from {companions}, read only when its tensor is.
    const index = 'safetensors/sharded/model.safetensors.index.json';
    const e = entries.find((x) => x.file === index);
    let ix;
    try {
      ix = api.open(path(index));
    } catch (err) {
      if (pending(err)) return t.skip('safetensors not yet implemented');
      throw err;
    }
    assert.equal(ix.format, 'safetensors-index');
    assert.deepEqual(ix.sources.slice(1).sort(), Object.keys(companionsOf(e)).sort());
    assert.equal(ix.info(e.tensors[0].name).attributes.shard, e.tensors[0].shard);
  });

  test(`${name}: tensor() views the caller's bytes; widen and dequantize give float32`, async (t) => {
    const file = 'safetensors/dtypes.safetensors';
    const bytes = new Uint8Array(readFileSync(path(file)));
    let r;
    try {
      r = api.open(bytes);
    } catch (err) {
      if (pending(err)) return t.skip('safetensors not yet implemented');
      throw err;
    }
    const e = entries.find((x) => x.file === file);
    for (const want of e.tensors) {
      const info = r.info(want.name);
      const a = r.tensor(want.name);
      if (info.layout.zeroCopy && a.byteOffset % a.BYTES_PER_ELEMENT === 0 && want.nbytes > 0) assert.equal(a.buffer, bytes.buffer, `${want.name}: a view`);
      if (want.dtype === 'float16' || want.dtype === 'bfloat16') {
        assert.ok(a instanceof Uint16Array);
        const w = r.tensor(want.name, { widen: true });
        assert.ok(w instanceof Float32Array);
        assert.deepEqual([...w.subarray(0, want.head.length)], want.head.map(Number), `${want.name}: widened head`);
        assert.deepEqual(r.dequantize(want.name), w);
      }
      if (want.dtype === 'float32') assert.deepEqual([...a.subarray(0, want.head.length)], want.head.map(Number));
    }
    assert.throws(() => r.tensor('no such tensor'), (err) => err.kind === 'not-found' && err.tensor === 'no such tensor');
  });

  test(`${name}: a Blob lists a 64 MiB safetensors and GGUF file reading only their headers`, async (t) => {
    const { safetensors, gguf, expect } = bigModels();
    for (const [label, bytes] of [['safetensors', safetensors], ['gguf', gguf]]) {
      const reads = [];
      const base = new Blob([bytes]);
      class CountingBlob extends Blob {
        slice(start, end) {
          reads.push([start, end]);
          return base.slice(start, end);
        }
        get size() {
          return base.size;
        }
      }
      let r;
      try {
        r = await api.open(new CountingBlob([]));
      } catch (err) {
        if (pending(err)) {
          t.diagnostic(`${label} not yet implemented (skipped)`);
          continue;
        }
        throw err;
      }
      const atOpen = reads.reduce((n, [s, e]) => n + e - s, 0);
      assert.equal(r.bytesRead, atOpen, `${label}: the reader's own count`);
      assert.ok(atOpen < bytes.byteLength / 100, `${label}: open read ${atOpen} of ${bytes.byteLength} bytes`);
      assert.ok(reads.length <= 12, `${label}: ${reads.length} reads at open`);
      reads.length = 0;
      if (label === 'safetensors') {
        assert.deepEqual(r.keys(), ['bias', 'half', 'weight']);
        assert.deepEqual(r.info('weight').shape, [expect.side, expect.side]);
        assert.deepEqual(r.metadata, { format: 'pt', producer: 'tensorlane tests' });
        assert.deepEqual([...(await r.tensor('bias'))], expect.bias);
        assert.deepEqual([...(await r.tensor('half', { widen: true }))], expect.half);
        const [b, h] = [r.info('bias').layout.offset, r.info('half').layout.offset];
        assert.deepEqual(reads, [[b, b + 16], [h, h + 6]], 'one read per tensor, of its bytes only');
      } else {
        assert.deepEqual(r.keys(), ['blk.0.ffn.weight', 'token_embd.weight', 'output_norm.weight']);
        assert.equal(r.metadata['tokenizer.ggml.tokens'].length, expect.tokens);
        assert.equal(r.info('blk.0.ffn.weight').dtype, 'Q8_0');
        assert.equal(r.info('blk.0.ffn.weight').ggml.quantized, true);
        assert.deepEqual([...(await r.tensor('output_norm.weight'))], expect.bias);
        let q;
        try {
          q = await r.dequantize('blk.0.ffn.weight');
        } catch (err) {
          if (!pending(err)) throw err;
        }
        if (q) assert.deepEqual(q, expect.q8);
        assert.ok(reads.every(([s, e]) => e - s <= 272), JSON.stringify(reads));
      }
    }
  });

  test(`${name}: a split GGUF set opens from its first file (folder, {companions}, or a clear error)`, async (t) => {
    const parts = ggufSplits();
    const dir = mkdtempSync(join(tmpdir(), 'tensorlane-splits-'));
    try {
      for (const [f, b] of parts) writeFileSync(join(dir, f), b);
      const [[first, firstBytes], [second, secondBytes]] = parts;
      let r;
      try {
        r = api.open(join(dir, first));
      } catch (err) {
        if (pending(err)) return t.skip('gguf not yet implemented');
        throw err;
      }
      const check = async (m, how) => {
        assert.deepEqual(m.keys(), ['a', 'b'], how);
        assert.deepEqual(m.sources, ['', second], how);
        assert.equal(m.info('b').layout.source, second, how);
        assert.deepEqual(m.info('b').shape, [2, 3], how);
        assert.deepEqual([...(await m.tensor('b'))], [5, 6, 7, 8, 9, 10], how);
        assert.deepEqual([...(await m.tensor('a'))], [1, 2, 3, 4], how);
      };
      await check(r, 'path');
      await check(api.open(firstBytes, { name: first, companions: { [second]: secondBytes } }), 'bytes');
      const blob = await api.open(new File([firstBytes], first), { companions: { [second]: new Blob([secondBytes]) } });
      assert.equal(blob.lazy, true);
      await check(blob, 'File');
      // The second part alone, or bytes without a name, say what to open instead.
      assert.throws(() => api.open(join(dir, second)), (err) => err.kind === 'companion' && /not the first/.test(err.message));
      assert.throws(() => api.open(firstBytes), (err) => err.kind === 'companion' && /named/.test(err.message));
      assert.throws(() => api.open(firstBytes, { name: first }), (err) => err.kind === 'companion' && err.message.includes(second));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test(`${name}: open() reads a .zt like the others`, () => {
    const r = api.open(path('basic-canonical.zt'));
    assert.equal(r.format, 'zt');
    const w = r.tensors.find((x) => x.name === 'embed.weight');
    assert.equal(w.dtype, 'float32');
    assert.equal(w.layout.zeroCopy, true);
    assert.deepEqual([...r.tensor('embed.weight')], [0, 1, 2, 3, 4, 5]);
    assert.deepEqual(r.tensor('b.f16', { widen: true }), api.widen('float16', r.tensor('b.f16')));
  });

  test(`${name}: rounds are bounded ({maxRounds})`, async (t) => {
    const { gguf } = bigModels();
    try {
      api.open(gguf, { maxRounds: 2 });
      assert.fail('a 190 KB header cannot be read in two rounds');
    } catch (err) {
      if (pending(err)) return t.skip('gguf not yet implemented');
      assert.equal(err.kind, 'limit', err.message);
      assert.match(err.message, /maxRounds/);
    }
  });
}

// Runs unless TENSORLANE_BACKEND selects one backend on purpose; without the addon built it fails.
test('the addon and the wasm build list and read every fixture identically', { skip: process.env.TENSORLANE_BACKEND && `TENSORLANE_BACKEND=${process.env.TENSORLANE_BACKEND} selects one backend` }, () => {
  assert.equal(backends.length, 2, 'both backends loaded (build the addon with scripts/build-js.sh)');
  const [a, b] = backends.map((x) => x.api);
  let compared = 0;
  for (const e of entries) {
    const comps = Object.fromEntries(Object.entries(companionsOf(e)).map(([n, f]) => [n, new Uint8Array(readFileSync(path(f)))]));
    const bytes = new Uint8Array(readFileSync(path(e.file)));
    const outcome = (api) => {
      try {
        const r = api.open(bytes, { companions: comps });
        const data = r.keys().map((k) => {
          try {
            return sha256(r.tensor(k));
          } catch (err) {
            return `error: ${err.message}`;
          }
        });
        return plain({ format: r.format, tensors: r.tensors, metadata: r.metadata, skipped: r.skipped, sources: r.sources, data });
      } catch (err) {
        return { error: err.message, kind: err.kind, format: err.format, offset: err.offset, tensor: err.tensor };
      }
    };
    assert.deepEqual(outcome(b), outcome(a), e.file);
    compared++;
  }
  assert.ok(compared >= 70, `${compared}`);
});
