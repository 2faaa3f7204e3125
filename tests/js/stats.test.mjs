// reader.stats() and stats() on both backends against NumPy (float64, tests/python/stats_ref.py
// in the formats venv): every tensor of every readable model fixture (tests/data/fixtures,
// manifest.json), opened from a path, from bytes and from a Blob read in small slices, plus a
// safetensors file written by the safetensors package with NaN, +Inf, -Inf and -0 in float32,
// float16 and bfloat16. Counts, min and max exact, mean and std within 1e-6 relative, histogram
// edges NumPy's and counts exact for those edges; the addon and the wasm build give the same
// results, and so does stats({dtype, shape, data}) on the tensor's TypedArray.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openAsBlob, readFileSync } from 'node:fs';
import { loadBackends, sha256 } from './_helpers.mjs';
import { assertMatches, companionsOf, fixturePath, modelEntries, plainStats, reference, specialFile } from './_stats_reference.mjs';

const backends = await loadBackends();
const entries = modelEntries();
const bytesOf = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
/** A slice size that cuts elements and GGUF blocks, to prove a Blob can be fed in any pieces. */
const ODD_CHUNK = 1000;

/** A Blob that records the slices read from it. */
async function countingBlob(file, reads) {
  const base = await openAsBlob(file);
  return new (class extends Blob {
    slice(start, end) {
      reads.push(end - start);
      return base.slice(start, end);
    }
    get size() {
      return base.size;
    }
  })([]);
}

/** Every fixture tensor's stats on one backend: [{id, entry, tensor, bytes, path, bytesIn, blob}]. */
async function fixtureStats(api) {
  const out = [];
  for (const e of entries) {
    const comps = companionsOf(e);
    const compBytes = Object.fromEntries(Object.entries(comps).map(([n, f]) => [n, new Uint8Array(readFileSync(fixturePath(f)))]));
    const compBlobs = Object.fromEntries(await Promise.all(Object.entries(comps).map(async ([n, f]) => [n, await openAsBlob(fixturePath(f))])));
    const byPath = api.open(fixturePath(e.file));
    const byBytes = api.open(new Uint8Array(readFileSync(fixturePath(e.file))), { companions: compBytes });
    const reads = [];
    const byBlob = await api.open(await countingBlob(fixturePath(e.file), reads), { companions: compBlobs });
    for (const want of e.tensors) {
      const ctx = `${e.file} / ${want.name}`;
      const data = byPath.tensor(want.name);
      assert.equal(sha256(data), want.sha256, `${ctx}: the bytes handed to NumPy are the manifest's`);
      const path = byPath.stats(want.name);
      reads.length = 0;
      const blob = await byBlob.stats(want.name, { chunkBytes: ODD_CHUNK });
      const info = byBlob.info(want.name);
      if (info.layout.zeroCopy && info.layout.source === '') {
        assert.ok(reads.every((n) => n <= ODD_CHUNK), `${ctx}: Blob read in slices of at most ${ODD_CHUNK} bytes (${reads})`);
      }
      out.push({ id: ctx, entry: e, want, data, path, bytesIn: byBytes.stats(want.name), blob });
    }
    for (const r of [byPath, byBytes, byBlob]) r.close();
  }
  return out;
}

const results = new Map();
for (const { name, api } of backends) {
  test(`${name}: stats() of every fixture tensor matches NumPy (path, bytes, Blob in ${ODD_CHUNK}-byte slices)`, async () => {
    const all = await fixtureStats(api);
    assert.ok(all.length >= 200, `${all.length} tensors`);
    const ref = reference(all.map((c) => ({ id: c.id, dtype: c.path.dtype, shape: c.path.shape, bytes: bytesOf(c.data), edges: c.path.histogram.edges })));
    const dtypes = new Set();
    for (const c of all) {
      assert.equal(c.path.name, c.want.name);
      assert.equal(c.path.dtype, c.want.dtype, `${c.id}: dtype`);
      assert.deepEqual(c.path.shape, c.want.shape, `${c.id}: shape`);
      assertMatches(c.path, ref[c.id], `${c.id} (path)`);
      assert.deepEqual(plainStats(c.bytesIn), plainStats(c.path), `${c.id}: bytes and path agree`);
      assert.deepEqual(plainStats(c.blob), plainStats(c.path), `${c.id}: Blob slices and path agree`);
      dtypes.add(c.path.dtype);
    }
    for (const d of ['bfloat16', 'float16', 'float32', 'int64', 'bool', 'Q4_K', 'Q8_0', 'Q6_K', 'float8_e4m3fn', 'float4_e2m1fn', 'complex64']) {
      assert.ok(dtypes.has(d), `a ${d} tensor was checked`);
    }
    results.set(name, all);
  });

  test(`${name}: NaN, +Inf, -Inf and -0 (float32, float16, bfloat16) are counted and left out of the moments`, async () => {
    const file = specialFile();
    const r = api.open(file);
    const blob = await api.open(await openAsBlob(file));
    const cases = r.keys().map((k) => ({ id: k, s: r.stats(k, { bins: 7 }), data: r.tensor(k) }));
    const ref = reference(cases.map((c) => ({ id: c.id, dtype: c.s.dtype, shape: c.s.shape, bytes: bytesOf(c.data), edges: c.s.histogram.edges })));
    for (const c of cases) {
      assertMatches(c.s, ref[c.id], `special ${c.id}`);
      assert.deepEqual(plainStats(await blob.stats(c.id, { bins: 7, chunkBytes: 3 })), plainStats(c.s), `special ${c.id}: Blob`);
    }
    const bf = cases.find((c) => c.id === 'bf16').s;
    assert.deepEqual([bf.nan, bf.pos_inf, bf.neg_inf, bf.zeros], [2, 1, 1, 2]);
    assert.equal(bf.histogram.counts.length, 7);
    const none = cases.find((c) => c.id === 'all_nan').s;
    assert.equal(none.nan, 5);
    assert.deepEqual(none.histogram.counts, [0, 0, 0, 0, 0, 0, 0]);
    assert.deepEqual([none.histogram.edges[0], none.histogram.edges[7]], [0, 1], "NumPy's empty range");
  });

  test(`${name}: stats({dtype, shape, data}) gives what reader.stats() gives; progress; errors`, async () => {
    const all = results.get(name) ?? (await fixtureStats(api));
    let n = 0;
    for (const c of all) {
      if (c.want.dtype.toUpperCase() === c.want.dtype) continue; // GGUF types: the reader knows the ggml id
      const s = api.stats({ dtype: c.want.dtype, shape: c.want.shape, data: c.data, name: c.want.name }, { chunkBytes: 5 });
      assert.deepEqual(plainStats(s), plainStats(c.path), `${c.id}: standalone`);
      n++;
    }
    assert.ok(n > 150, `${n} standalone checks`);
    const f = api.stats({ data: new Float32Array([3, 1, 2, NaN]) }, { bins: 2 });
    assert.deepEqual([f.dtype, f.count, f.nan, f.min, f.max, f.mean, ...f.histogram.counts], ['float32', 4, 1, 1, 3, 2, 1, 2]);
    assert.throws(() => api.stats({ dtype: 'float32', shape: [5], data: new Float32Array(4) }), (e) => e.name === 'TensorlaneError' && e.kind === 'size-mismatch');
    assert.throws(() => api.stats({ dtype: 'float7', data: new Uint8Array(4) }), (e) => e.kind === 'unsupported' && /float7/.test(e.message));
    assert.throws(() => api.stats({ data: new Float32Array(4) }, { bins: 0 }), RangeError);

    const r = api.open(fixturePath('sample.gguf'));
    const big = r.tensors.reduce((a, b) => (b.nbytes > a.nbytes ? b : a));
    const seen = [];
    r.stats(big.name, { chunkBytes: 64, onProgress: (p) => seen.push(p) });
    assert.ok(seen.length >= 2, `${seen.length} progress calls`);
    assert.equal(seen.at(-1).bytesDone, seen.at(-1).bytesTotal);
    assert.equal(seen.at(-1).bytesTotal, 2 * big.nbytes);
    assert.ok(seen.some((p) => p.phase === 'summary') && seen.some((p) => p.phase === 'histogram'));
    assert.throws(() => r.stats('no such tensor'), (e) => e.kind === 'not-found');
  });
}

/** Statistics of one tensor in `parts` spans, each part carried through structuredClone (as postMessage between Workers). */
async function inSpans(api, r, name, parts, bins) {
  const spans = r.statsSpans(name, parts);
  const sums = [];
  for (const sp of spans) sums.push(structuredClone(await r.statsSummaryPart(name, sp, { chunkBytes: ODD_CHUNK })));
  const summary = api.mergeSummaries(sums);
  const hists = [];
  for (const sp of spans) hists.push(structuredClone(await r.statsHistogramPart(name, sp, summary, { bins, chunkBytes: ODD_CHUNK })));
  return { spans, stats: api.mergeStats(r.info(name), summary, hists) };
}

for (const { name, api } of backends) {
  test(`${name}: statistics in spans (one per Worker), merged, are stats()'s`, async () => {
    let n = 0;
    for (const e of entries) {
      const comps = Object.fromEntries(await Promise.all(Object.entries(companionsOf(e)).map(async ([k, f]) => [k, await openAsBlob(fixturePath(f))])));
      const byPath = api.open(fixturePath(e.file));
      const byBlob = await api.open(await openAsBlob(fixturePath(e.file)), { companions: comps });
      for (const t of byPath.tensors) {
        if (!t.layout.zeroCopy || t.dtype === 'complex64' || t.dtype === 'complex128') continue;
        const whole = plainStats(byPath.stats(t.name, { bins: 9 }));
        for (const [r, parts] of [[byPath, 3], [byBlob, 7], [byBlob, 1]]) {
          const { spans, stats } = await inSpans(api, r, t.name, parts, 9);
          const ctx = `${e.file} / ${t.name} in ${parts} spans`;
          assert.equal(spans.reduce((k, sp) => k + sp.bytes, 0), t.layout.length, `${ctx}: spans cover the tensor`);
          assert.equal(spans.reduce((k, sp) => k + sp.elements, 0), t.shape.reduce((k, d) => k * Number(d), 1), `${ctx}: and its elements`);
          const got = plainStats(stats);
          for (const k of ['count', 'finite', 'zeros', 'nan', 'pos_inf', 'neg_inf', 'min', 'max', 'histogram', 'name', 'dtype', 'shape']) assert.deepEqual(got[k], whole[k], `${ctx}: ${k}`);
          for (const k of ['mean', 'std']) assert.ok(Object.is(got[k], whole[k]) || Math.abs(got[k] - whole[k]) <= 1e-12 * Math.max(1, Math.abs(whole[k])), `${ctx}: ${k} ${got[k]} vs ${whole[k]}`);
          n++;
        }
      }
      byPath.close();
      byBlob.close();
    }
    assert.ok(n >= 300, `${n} span checks`);
    // Parts that no pass made, spans that are not the tensor's, tensors not stored as-is.
    const r = api.open(fixturePath('sample.gguf'));
    const t = r.tensors.find((x) => x.ggml?.quantized);
    const [sp] = r.statsSpans(t.name, 2);
    const part = await r.statsSummaryPart(t.name, sp);
    assert.equal(part.length, 10);
    const bad = Float64Array.from(part);
    bad[1] = bad[0] + 1; // more finite values than values
    assert.throws(() => api.mergeSummaries([part, bad]), (e) => e.name === 'TensorlaneError' && e.kind === 'syntax' && /part 1/.test(e.message) && /must equal count/.test(e.message));
    assert.throws(() => api.mergeSummaries([part.subarray(0, 9)]), (e) => e.kind === 'syntax' && /runs of 10/.test(e.message));
    assert.throws(() => r.statsSummaryPart(t.name, { ...sp, bytes: t.layout.length + 1 }), RangeError);
    assert.throws(() => r.statsSpans(t.name, 0), RangeError);
    assert.equal(r.statsSpans(t.name, 1e6).length, t.nbytes / t.ggml.typeSize, 'no more spans than blocks');
    const summary = api.mergeSummaries([part]);
    const h1 = r.statsHistogramPart(t.name, sp, summary, { bins: 4 });
    const h2 = r.statsHistogramPart(t.name, sp, summary, { bins: 5 });
    assert.throws(() => api.mergeStats(r.info(t.name), summary, [h1, h2]), RangeError);
    r.close();
  });
}

// Runs unless TENSORLANE_BACKEND selects one backend on purpose; without the addon built it fails.
test('the addon and the wasm build give the same statistics', { skip: process.env.TENSORLANE_BACKEND && `TENSORLANE_BACKEND=${process.env.TENSORLANE_BACKEND} selects one backend` }, () => {
  assert.equal(results.size, 2, 'both backends ran (build the addon with scripts/build-js.sh)');
  const [a, b] = [...results.values()];
  assert.equal(a.length, b.length);
  for (let i = 0; i < a.length; i++) assert.deepEqual(plainStats(a[i].path), plainStats(b[i].path), a[i].id);
});
