// A .zt or a Tenso file converted from a safetensors file is the same model through open() on
// both backends: the same tensor names, dtypes, shapes, bytes and statistics, from a path, bytes
// and a Blob. Conversions: tests/data/fixtures/from-safetensors.zt (ztensor's convert of
// sample.safetensors); for every safetensors fixture, writeZt() of what open() read from it
// (safetensors/dtypes.safetensors covers every dtype both formats hold, float8/float4 included);
// and encode() of the same tensors as one Tenso bundle (every dtype Tenso 0.24 has).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, openAsBlob, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DATA, data, loadBackends, sha256 } from './_helpers.mjs';
import { plainStats } from './_stats_reference.mjs';

const FIXTURES = data(new URL('fixtures/', DATA));
const path = (f) => fileURLToPath(new URL(f, FIXTURES));
const backends = await loadBackends();

const SAFETENSORS = ['sample.safetensors', 'safetensors/dtypes.safetensors', 'safetensors/numpy-writer.safetensors', 'safetensors/sharded/model.safetensors.index.json'];

/** Everything open() says about a model that must not depend on its format, by tensor name. */
async function model(r) {
  const out = {};
  for (const t of r.tensors) {
    const data = await r.tensor(t.name);
    const numeric = !/^complex|^float4|^float8/.test(t.dtype);
    out[t.name] = { dtype: t.dtype, shape: t.shape, nbytes: t.nbytes, sha256: sha256(data), stats: numeric ? plainStats(await r.stats(t.name, { bins: 16 })) : null };
  }
  return out;
}

for (const { name, api } of backends) {
  test(`${name}: from-safetensors.zt (ztensor's convert) is sample.safetensors`, async () => {
    const want = await model(api.open(path('sample.safetensors')));
    assert.deepEqual(Object.keys(want).sort(), ['b', 'flag', 'w']);
    const zt = path('from-safetensors.zt');
    for (const [how, r] of [['path', api.open(zt)], ['bytes', api.open(new Uint8Array(readFileSync(zt)))], ['Blob', await api.open(await openAsBlob(zt))]]) {
      assert.equal(r.format, 'zt', how);
      assert.deepEqual(await model(r), want, `${how}`);
    }
  });

  test(`${name}: writeZt of every safetensors fixture reads back as the same model`, async () => {
    let tensors = 0;
    for (const f of SAFETENSORS) {
      const st = api.open(path(f));
      const want = await model(st);
      const bytes = api.writeZt(st.tensors.map((t) => [t.name, { dtype: t.dtype, shape: t.shape, data: st.tensor(t.name) }]));
      for (const [how, r] of [['bytes', api.open(bytes)], ['Blob', await api.open(new Blob([bytes]))]]) {
        assert.equal(r.format, 'zt', `${f} (${how})`);
        assert.deepEqual(await model(r), want, `${f} (${how})`);
        const v = await r.verify();
        assert.equal(v.partsDigestChecked, st.tensors.length, `${f} (${how}): every part has a digest that matched`);
      }
      tensors += st.tensors.length;
    }
    assert.ok(tensors >= 30, `${tensors}`);
  });

  test(`${name}: encode() of every safetensors fixture as a Tenso bundle reads back as the same model (path, bytes, Blob)`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tl-tenso-same-'));
    try {
      let tensors = 0;
      for (const f of SAFETENSORS) {
        const st = api.open(path(f));
        // Tenso 0.24 has no float8/float4 dtypes: those tensors stay out of the bundle.
        const kept = st.tensors.filter((t) => !/^float8|^float4/.test(t.dtype));
        const want = Object.fromEntries(Object.entries(await model(st)).filter(([n]) => kept.some((t) => t.name === n)));
        const bytes = api.encode(Object.fromEntries(kept.map((t) => [t.name, { dtype: t.dtype, shape: t.shape, data: st.tensor(t.name) }])), { integrity: true });
        const file = join(dir, 'm.tenso');
        writeFileSync(file, bytes);
        for (const [how, r] of [['path', api.open(file)], ['bytes', api.open(bytes)], ['Blob', await api.open(new Blob([bytes]))]]) {
          assert.equal(r.format, 'tenso', `${f} (${how})`);
          assert.deepEqual(await model(r), want, `${f} (${how})`);
          assert.equal((await r.verify()).checks, kept.length, `${f} (${how}): every entry's XXH3 footer matched`);
        }
        tensors += kept.length;
      }
      assert.ok(tensors >= 25, `${tensors}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
