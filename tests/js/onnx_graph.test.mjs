// reader.graph() on both backends against the onnx library (tests/python/onnx_graph_ref.py):
// the ONNX fixtures (tests/data/fixtures) and a generated model of 5,046 nodes (420 repeated
// blocks, every common attribute kind, a custom domain, an If with subgraphs), opened from a path,
// from bytes and from a Blob: names, op types, domains, inputs, outputs, attribute names and
// kinds (int, float and ints values), graph inputs/outputs with types and shapes, initializers,
// opsets and producer all equal. Other formats refuse graph().
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openAsBlob, readFileSync } from 'node:fs';
import { loadBackends } from './_helpers.mjs';
import { fixturePath } from './_stats_reference.mjs';
import { assertGraph, bigGraph, onnxReference } from './_graph_compare_reference.mjs';

const backends = await loadBackends();
const big = bigGraph(420);
const models = [
  { path: fixturePath('sample.onnx') },
  { path: fixturePath('onnx/initializers.onnx') },
  { path: fixturePath('onnx/external.onnx'), companions: { 'external.onnx.data': fixturePath('onnx/external.onnx.data') } },
  { path: big.path },
].map((m) => ({ ...m, ref: onnxReference(m.path) }));

for (const { name, api } of backends) {
  for (const m of models) {
    test(`${name}: graph() of ${m.path.split('/').slice(-2).join('/')} equals the onnx library's`, async () => {
      assertGraph(api.open(m.path).graph(), m.ref, `${name} path`);
      const comps = Object.fromEntries(Object.entries(m.companions ?? {}).map(([k, p]) => [k, new Uint8Array(readFileSync(p))]));
      assertGraph(api.open(new Uint8Array(readFileSync(m.path)), { companions: comps }).graph(), m.ref, `${name} bytes`);
      const blobComps = Object.fromEntries(await Promise.all(Object.entries(m.companions ?? {}).map(async ([k, p]) => [k, await openAsBlob(p)])));
      const r = await api.open(await openAsBlob(m.path), { companions: blobComps });
      assertGraph(await r.graph(), m.ref, `${name} blob`);
    });
  }

  test(`${name}: graph() of a non-ONNX model is refused`, () => {
    const r = api.open(fixturePath('sample.safetensors'));
    assert.throws(() => r.graph(), (e) => e.kind === 'unsupported' && /ONNX/.test(e.message));
  });
}
