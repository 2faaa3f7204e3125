// .zt v2 and legacy .zt in JS through the one open(): paths, bytes and Blobs list every object as a
// tensor (dense and gguf objects by tensor(), other layouts part by part with part()), views where
// the bytes allow, verify() (the container's deep verify), writeZt(), on both backends, against
// tests/data/fixtures (manifest.json) and tests/data/conformance/zt.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openAsBlob, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DATA, data, loadBackends, sha256 } from './_helpers.mjs';

const FIXTURES = data(new URL('fixtures/', DATA));
const CORPUS = data(new URL('conformance/zt/', DATA));

const backends = await loadBackends();

function ztFixtures() {
  const m = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
  return m.files.filter((f) => f.format === 'zt' || f.format === 'zt-v1');
}

/** The `.zt` names of storage dtypes (what a part's `dtype` attribute says). */
const ZT_DTYPE = { uint8: 'u8', int8: 'i8', uint16: 'u16', int16: 'i16', uint32: 'u32', int32: 'i32', uint64: 'u64', int64: 'i64', float16: 'f16', bfloat16: 'bf16', float32: 'f32', float64: 'f64' };

/** Checks a reader against a manifest entry; returns how many digests were compared. */
async function checkEntry(r, e, ctx) {
  assert.deepEqual(r.keys(), e.tensors.map((t) => t.name), `${ctx}: names`);
  let n = 0;
  for (const t of e.tensors) {
    const info = r.info(t.name);
    assert.deepEqual(info.shape, t.shape, `${ctx} ${t.name}: shape`);
    // Legacy files name their layouts as v1 did (`sparse_csr`); the catalog gives the v2 id.
    const want = t.zt_layout ?? 'dense';
    assert.ok([want, `zt.${want}/1`].includes(info.attributes.layout), `${ctx} ${t.name}: layout ${info.attributes.layout}`);
    if (t.dtype !== null) {
      const data = await r.tensor(t.name);
      assert.equal(info.dtype, t.dtype, `${ctx} ${t.name}: dtype`);
      assert.equal(data.byteLength, t.nbytes, `${ctx} ${t.name}: nbytes`);
      assert.equal(sha256(data), t.sha256, `${ctx} ${t.name}: sha256`);
      n++;
    } else {
      assert.equal(info.layout.storage, 'parts', `${ctx} ${t.name}: storage`);
      for (const [pn, pw] of Object.entries(t.parts)) {
        const meta = info.attributes.parts[pn];
        assert.equal(meta.dtype, ZT_DTYPE[pw.dtype] ?? pw.dtype, `${ctx} ${t.name}.${pn}: dtype`);
        assert.equal(meta.type ?? null, pw.logical, `${ctx} ${t.name}.${pn}: type`);
        assert.equal(sha256(await r.part(t.name, pn)), pw.sha256, `${ctx} ${t.name}.${pn}: sha256`);
        n++;
      }
    }
  }
  return n;
}

for (const { name, api } of backends) {
  test(`${name}: every .zt fixture opens (path, bytes, Blob) with the manifest's tensors`, async () => {
    let digests = 0;
    for (const e of ztFixtures()) {
      const path = fileURLToPath(new URL(e.file, FIXTURES));
      const fromPath = api.open(path);
      const bytes = new Uint8Array(readFileSync(path));
      const fromBytes = api.open(bytes);
      const fromBlob = await api.open(await openAsBlob(path));
      assert.equal(fromBlob.lazy, true);
      assert.equal(fromPath.format, e.format, e.file);
      if (e.expect === 'no-tensors') {
        for (const r of [fromPath, fromBytes, fromBlob]) {
          assert.equal(r.metadata['zt.data_shard'], true, e.file);
          assert.deepEqual(r.keys(), []);
        }
        assert.equal(fromBytes.verify().dataShard, true);
        continue;
      }
      digests += await checkEntry(fromPath, e, `${e.file} (path)`);
      if (e.file !== 'sharded.zt') {
        // Bytes and Blobs have no directory: shards resolve only for paths (or given as companions).
        digests += await checkEntry(fromBytes, e, `${e.file} (bytes)`);
        digests += await checkEntry(fromBlob, e, `${e.file} (Blob)`);
        for (const v of [fromBytes.verify(), await fromBlob.verify()]) {
          assert.equal(v.tensors, e.tensors.length, e.file);
          if (e.format === 'zt') assert.ok(v.partsDigestChecked > 0, e.file);
        }
      } else {
        await assert.rejects(fromBlob.tensor('layer.weight'), (err) => err.kind === 'companion' && /shard "00001"/.test(err.message));
        assert.equal(fromBytes.verify().unresolved.length, 2);
        assert.equal(fromPath.verify().shardsChecked, 2);
      }
      if (e.format === 'zt') assert.equal(fromPath.verify().dataShard, false);
    }
    assert.ok(digests >= 50, `${digests}`);
  });

  test(`${name}: tensor() returns views on the caller's buffer, copies only decoded parts`, () => {
    const bytes = new Uint8Array(readFileSync(new URL('basic-canonical.zt', FIXTURES)));
    const r = api.open(bytes);
    const w = r.tensor('embed.weight');
    assert.equal(w.buffer, bytes.buffer);
    assert.equal(w.byteOffset, 196608);
    assert.ok(w instanceof Float32Array);
    assert.deepEqual([...w], [0, 1, 2, 3, 4, 5]);
    assert.equal(r.info('embed.weight').layout.zeroCopy, true);
    // Tied weights share their blob: two views on the same bytes.
    assert.equal(r.tensor('tied.weight').byteOffset, 196608);
    const m = r.info('mask');
    assert.equal(m.dtype, 'bool');
    assert.deepEqual(m.attributes.parts.data, { dtype: 'u8', type: 'bool', digest: 'xxh3:aed946681f85b77a', offset: 327680, length: 3 });
    assert.deepEqual(r.metadata, { n: 6, neg: -42, nested: { list: [1, 2.5, null, true] }, pi: 3.5, producer: 'research' });
    // A misaligned buffer still reads correctly (as a copy).
    const shifted = new Uint8Array(bytes.length + 1);
    shifted.set(bytes, 1);
    const s = api.open(shifted.subarray(1)).tensor('embed.weight');
    assert.notEqual(s.buffer, shifted.buffer);
    assert.deepEqual([...s], [0, 1, 2, 3, 4, 5]);
    // zstd-seekable parts are decoded (copies).
    const cbytes = new Uint8Array(readFileSync(new URL('compressed-zstd-seekable.zt', FIXTURES)));
    const c = api.open(cbytes);
    const ramp = c.tensor('ramp');
    assert.notEqual(ramp.buffer, cbytes.buffer);
    assert.equal(ramp[1023], 1023);
    assert.equal(c.info('ramp').layout.storage, 'encoded');
    assert.equal(c.info('ramp').layout.codec, 'zt.zstd-seekable/1');
    assert.equal(c.info('ramp').attributes.parts.data.encoding, 'zt.zstd-seekable/1');
    assert.equal(c.tensor('raw').buffer, cbytes.buffer);
    assert.throws(() => c.tensor('nope'), (e) => e.rule === 'NotFound' && e.kind === 'not-found');
    // A tensor stored as parts is read part by part; tensor() says so.
    const p = api.open(readFileSync(new URL('profiles-csr-quant-mx.zt', FIXTURES)));
    assert.throws(() => p.tensor('csr'), (e) => e.rule === 'Unsupported' && /read its parts one by one/.test(e.message));
    assert.ok(p.part('csr', 'indptr') instanceof Uint32Array || p.part('csr', 'indptr') instanceof BigUint64Array);
    assert.throws(() => p.part('csr', 'nope'), (e) => e.kind === 'unsupported' && /its parts: /.test(e.message));
    if (name === 'addon') {
      // A path is read by the host (a copy); with {mmap: true} tensors are views on the mapping.
      const mapped = api.open(fileURLToPath(new URL('basic-canonical.zt', FIXTURES)), { mmap: true }).tensor('embed.weight');
      assert.equal(mapped.buffer.byteLength, 393910);
      assert.deepEqual([...mapped], [0, 1, 2, 3, 4, 5]);
    }
  });

  test(`${name}: a Blob is read lazily (no part bytes at open, one range per tensor)`, async () => {
    const path = fileURLToPath(new URL('basic-canonical.zt', FIXTURES));
    const reads = [];
    const base = await openAsBlob(path);
    class CountingBlob extends Blob {
      slice(start, end) {
        reads.push([start, end]);
        return base.slice(start, end);
      }
      get size() {
        return base.size;
      }
    }
    const blob = new CountingBlob([]);
    const r = await api.open(blob);
    const size = 393910;
    assert.ok(reads.reduce((n, [s, e]) => n + e - s, 0) < size / 2, JSON.stringify(reads));
    const blobs = r.keys().map((k) => r.info(k).layout);
    for (const [s, e] of reads) for (const b of blobs) assert.ok(b.offset + b.length <= s || b.offset >= e, `open read part bytes at ${b.offset}`);
    reads.length = 0;
    const w = await r.tensor('embed.weight');
    assert.deepEqual(reads, [[196608, 196632]]);
    assert.deepEqual([...w], [0, 1, 2, 3, 4, 5]);
  });

  test(`${name}: the conformance corpus`, () => {
    const { cases } = JSON.parse(readFileSync(new URL('expectations.json', CORPUS), 'utf8'));
    assert.equal(cases.length, 76);
    let checked = 0;
    for (const c of cases) {
      const bytes = new Uint8Array(readFileSync(new URL(c.file, CORPUS)));
      const ctx = `${c.file} (${c.expect})`;
      if (c.expect.startsWith('reject:')) {
        const rule = c.expect.slice(7);
        if (c.op === 'open') {
          assert.throws(() => api.open(bytes), (e) => e.rule === rule, ctx);
        } else {
          const r = api.open(bytes);
          assert.throws(() => r.verify(), (e) => e.rule === rule && e.object === c.object && e.offset !== undefined, ctx);
        }
      } else {
        const r = api.open(bytes);
        assert.equal(r.metadata['zt.data_shard'] === true, c.expect === 'data_shard', ctx);
        if (c.op === 'view') {
          assert.throws(() => r.tensor(c.object), (e) => e.rule === 'Unsupported', ctx);
        } else if (c.file.includes('f4-packed-odd-count')) {
          assert.throws(() => r.verify(), (e) => e.rule === 'LayoutData', ctx);
        } else {
          r.verify();
          for (const t of r.tensors) {
            if (Object.values(t.attributes.parts).some((p) => p.shard)) continue;
            if (t.layout.storage === 'parts') for (const p of t.layout.parts) r.part(t.name, p.name);
            else r.tensor(t.name);
          }
        }
      }
      checked++;
    }
    assert.equal(checked, 76);
  });

  test(`${name}: writeZt writes canonical files byte-identical to the reference writer`, () => {
    const shim = readFileSync(new URL('basic-canonical-numpy-shim.zt', FIXTURES));
    const out = api.writeZt({ x: { shape: [2, 3], data: new Float32Array([0, 1, 2, 3, 4, 5]) }, a: new Int8Array([-128, -1, 0, 1, 127]) });
    assert.ok(out instanceof Uint8Array);
    assert.equal(Buffer.compare(Buffer.from(out), shim), 0);
    const basic = readFileSync(new URL('basic-canonical.zt', FIXTURES));
    const src = api.open(new Uint8Array(basic));
    const entries = src.tensors.map((t) => [t.name, { dtype: t.dtype, shape: t.shape, data: src.tensor(t.name) }]);
    const again = api.writeZt(entries, { attributes: src.metadata });
    assert.equal(Buffer.compare(Buffer.from(again), basic), 0);
    // Round trip with every kind of value, non-canonical too.
    const csr = { layout: 'zt.sparse_csr/1', shape: [2, 3], parts: { values: { data: new Float32Array([1, 2, 3]) }, indices: { data: new Uint32Array([0, 2, 1]) }, indptr: { data: new Uint32Array([0, 2, 3]) } } };
    const f = api.writeZt(new Map([['m', csr], ['b', { dtype: 'bool', data: new Uint8Array([1, 0]) }]]), { canonical: false });
    const r = api.open(f);
    assert.deepEqual(r.keys(), ['b', 'm']);
    assert.deepEqual([...r.part('m', 'indptr')], [0, 2, 3]);
    assert.equal(r.info('b').dtype, 'bool');
    assert.equal(r.verify().partsDigestChecked, 4);
    assert.throws(() => api.writeZt({ bad: { dtype: 'bool', data: new Uint8Array([2]) }, '': new Uint8Array(1) }), (e) => /Name|name/.test(e.message));
  });
}
