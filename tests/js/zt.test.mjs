// .zt v2 in JS: open() over paths, bytes and Blobs, get() views, verify(), writeZt(), on both
// backends, against tests/data/fixtures (manifest.json) and tests/data/conformance/zt.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, openAsBlob, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { DATA, data, loadBackends, sha256 } from './_helpers.mjs';

const FIXTURES = data(new URL('fixtures/', DATA));
const CORPUS = data(new URL('conformance/zt/', DATA));

const backends = await loadBackends();

function ztFixtures() {
  const m = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
  return m.files.filter((f) => f.format === 'zt' || f.format === 'zt-v1');
}

/** Checks a reader against a manifest entry; returns how many digests were compared. */
async function checkEntry(r, e, ctx) {
  assert.deepEqual(r.keys(), e.tensors.map((t) => t.name), `${ctx}: names`);
  let n = 0;
  for (const t of e.tensors) {
    const got = await r.get(t.name);
    assert.deepEqual(got.shape, t.shape, `${ctx} ${t.name}: shape`);
    if (t.dtype !== null) {
      assert.equal(got.dtype, t.dtype, `${ctx} ${t.name}: dtype`);
      assert.equal(got.data.byteLength, t.nbytes, `${ctx} ${t.name}: nbytes`);
      assert.equal(sha256(got.data), t.sha256, `${ctx} ${t.name}: sha256`);
      n++;
    } else {
      for (const [pn, pw] of Object.entries(t.parts)) {
        const p = got.parts[pn];
        assert.equal(p.dtype, pw.dtype, `${ctx} ${t.name}.${pn}: dtype`);
        assert.equal(p.type ?? null, pw.logical, `${ctx} ${t.name}.${pn}: type`);
        assert.equal(sha256(p.data), pw.sha256, `${ctx} ${t.name}.${pn}: sha256`);
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
      if (e.format === 'zt-v1') {
        // Legacy files are converted with `tensorlane convert`; open() names the problem.
        assert.throws(() => api.open(path), (err) => err.rule === 'HeaderMagic' && /ZTEN1000|v1/.test(err.message), e.file);
        continue;
      }
      const fromPath = api.open(path);
      const bytes = new Uint8Array(readFileSync(path));
      const fromBytes = api.open(bytes);
      const fromBlob = await api.open(await openAsBlob(path));
      assert.equal(fromBlob.lazy, true);
      if (e.expect === 'no-tensors') {
        for (const r of [fromPath, fromBytes, fromBlob]) {
          assert.equal(r.dataShard, true, e.file);
          assert.deepEqual(r.keys(), []);
        }
        continue;
      }
      digests += await checkEntry(fromPath, e, `${e.file} (path)`);
      if (e.file !== 'sharded.zt') {
        // Bytes and Blobs have no directory: shards resolve only for paths.
        digests += await checkEntry(fromBytes, e, `${e.file} (bytes)`);
        digests += await checkEntry(fromBlob, e, `${e.file} (Blob)`);
        assert.ok(fromBytes.verify().partsDigestChecked > 0, e.file);
        assert.ok((await fromBlob.verify()).partsDigestChecked > 0, e.file);
      } else {
        await assert.rejects(fromBlob.get('layer.weight'), (err) => err.rule === 'Unsupported');
        assert.equal(fromBytes.verify().unresolved.length, 2);
      }
      assert.equal(fromPath.verify().dataShard, false);
    }
    assert.ok(digests >= 50, `${digests}`);
  });

  test(`${name}: get() returns views on the caller's buffer, copies only decoded parts`, () => {
    const bytes = new Uint8Array(readFileSync(new URL('basic-canonical.zt', FIXTURES)));
    const r = api.open(bytes);
    const w = r.get('embed.weight');
    assert.equal(w.copied, false);
    assert.equal(w.data.buffer, bytes.buffer);
    assert.equal(w.data.byteOffset, 196608);
    assert.ok(w.data instanceof Float32Array);
    assert.deepEqual([...w.data], [0, 1, 2, 3, 4, 5]);
    // Tied weights share their blob: two views on the same bytes.
    assert.equal(r.get('tied.weight').data.byteOffset, 196608);
    const m = r.metadata('mask');
    assert.deepEqual(m.parts.data, { dtype: 'uint8', type: 'bool', encoding: undefined, nbytes: 3, digest: 'xxh3:aed946681f85b77a', offset: 327680, length: 3, shard: undefined });
    assert.deepEqual(r.attributes, { n: 6, neg: -42, nested: { list: [1, 2.5, null, true] }, pi: 3.5, producer: 'research' });
    // A misaligned buffer still reads correctly (as a copy).
    const shifted = new Uint8Array(bytes.length + 1);
    shifted.set(bytes, 1);
    const s = api.open(shifted.subarray(1)).get('embed.weight');
    assert.equal(s.copied, true);
    assert.deepEqual([...s.data], [0, 1, 2, 3, 4, 5]);
    // zstd-seekable parts are decoded (copies).
    const c = api.open(readFileSync(new URL('compressed-zstd-seekable.zt', FIXTURES)));
    const ramp = c.get('ramp');
    assert.equal(ramp.copied, true);
    assert.equal(ramp.data[1023], 1023);
    assert.equal(c.metadata('ramp').parts.data.encoding, 'zt.zstd-seekable/1');
    assert.equal(c.get('raw').copied, false);
    assert.throws(() => c.get('nope'), (e) => e.rule === 'NotFound');
    if (name === 'addon') {
      // A path is read whole (mapped with {mmap: true}): the view's buffer is the whole file.
      const p = api.open(fileURLToPath(new URL('basic-canonical.zt', FIXTURES))).get('embed.weight');
      assert.equal(p.copied, false);
      assert.equal(p.data.buffer.byteLength, 393910);
    }
  });

  test(`${name}: a Blob is read lazily (footer and manifest at open, one range per get)`, async () => {
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
    // The header magic and the tail window (footer + manifest, the manifest is at 393216).
    assert.deepEqual(reads, [[0, 8], [size - 65536, size]]);
    const blobs = Object.values(r.keys()).map((k) => r.metadata(k).parts.data);
    for (const [s, e] of reads.slice(1)) for (const b of blobs) assert.ok(b.offset + b.length <= s || b.offset >= e, `open read part bytes at ${b.offset}`);
    reads.length = 0;
    const w = await r.get('embed.weight');
    assert.deepEqual(reads, [[196608, 196632]]);
    assert.deepEqual([...w.data], [0, 1, 2, 3, 4, 5]);
    assert.equal(w.copied, false);
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
        assert.equal(r.dataShard, c.expect === 'data_shard', ctx);
        if (c.op === 'view') {
          assert.throws(() => r.get(c.object), (e) => e.rule === 'Unsupported', ctx);
        } else if (c.file.includes('f4-packed-odd-count')) {
          assert.throws(() => r.verify(), (e) => e.rule === 'LayoutData', ctx);
        } else {
          r.verify();
          for (const k of r.keys()) if (!Object.values(r.metadata(k).parts).some((p) => p.shard)) r.get(k);
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
    const entries = src.keys().map((k) => [k, src.get(k)]);
    const again = api.writeZt(entries, { attributes: src.attributes });
    assert.equal(Buffer.compare(Buffer.from(again), basic), 0);
    // Round trip with every kind of value, non-canonical too.
    const csr = { layout: 'zt.sparse_csr/1', shape: [2, 3], parts: { values: { data: new Float32Array([1, 2, 3]) }, indices: { data: new Uint32Array([0, 2, 1]) }, indptr: { data: new Uint32Array([0, 2, 3]) } } };
    const f = api.writeZt(new Map([['m', csr], ['b', { dtype: 'bool', data: new Uint8Array([1, 0]) }]]), { canonical: false });
    const r = api.open(f);
    assert.deepEqual(r.keys(), ['b', 'm']);
    assert.deepEqual([...r.get('m').parts.indptr.data], [0, 2, 3]);
    assert.equal(r.get('b').dtype, 'bool');
    assert.equal(r.verify().partsDigestChecked, 4);
    assert.throws(() => api.writeZt({ bad: { dtype: 'bool', data: new Uint8Array([2]) }, '': new Uint8Array(1) }), (e) => /Name|name/.test(e.message));
  });
}
