// The graph view's analysis (web-demo/graph-model.js) over graphs read by reader.graph() and
// checked against the onnx library: op-type counts and consumers equal what the onnx library's
// node list gives, the 420 `/model/layers.N/` blocks of the generated model are found as one
// uniform family of 12 ops, the collapsed drawing keeps every edge between boxes, and a graph
// without block names (the same model read with {blocks: false}) is drawn as segments; blocks are
// found from the structure, not the names: a model whose norm nodes are named /model/layers/N/ln1/*
// and the rest /model/layers.N/* (issue 26) is one block × 62, not segments; the true flat graph
// (5,046 boxes) is laid out by layeredLayout in well under a second, every edge pointing down.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as api from '../../js/node.js';
import { analyze, boxSize, displayGraph, layeredLayout, MAX_BOXES } from '../../web-demo/graph-model.js';
import { bigGraph, mixedNamesGraph, onnxReference } from './_graph_compare_reference.mjs';

const big = bigGraph(420);
const ref = onnxReference(big.path);
const graph = api.open(big.path).graph();

test('op-type counts and consumers equal the onnx library node list', () => {
  const a = analyze(graph);
  const want = new Map();
  for (const n of ref.nodes) {
    const k = n.domain ? `${n.domain}.${n.op_type}` : n.op_type;
    want.set(k, (want.get(k) ?? 0) + 1);
  }
  assert.deepEqual(new Map(a.opCounts.map((o) => [o.op, o.count])), want);
  for (const init of ['model.layers.7.mlp.weight', '/model/one', '/model/shape_2d']) {
    const got = (a.consumers.get(init) ?? []).map((k) => a.nodes[k].name);
    assert.deepEqual(got, ref.nodes.filter((n) => n.inputs.includes(init)).map((n) => n.name), init);
  }
});

test('the 420 layers are one uniform repeated block, drawn as one box', () => {
  const a = analyze(graph);
  assert.equal(a.families.length, 1);
  const f = a.families[0];
  assert.equal(f.template, '/model/layers.#/');
  assert.equal(f.instances.length, 420);
  assert.equal(f.size, 12);
  assert.ok(f.uniform);
  const d = displayGraph(a);
  assert.equal(d.nodes.filter((n) => n.kind === 'block').length, 1);
  assert.ok(d.nodes.length < 20, `${d.nodes.length} boxes`);
  // The block sits between the graph input and the head.
  assert.ok(d.edges.some((e) => e.source === 'in:input_ids_embeds' && e.target === 'block:0'));
  assert.ok(d.edges.some((e) => e.source === 'block:0' && e.target === 'node:/head/LeakyRelu'));
  // Expanding block 5 draws its 12 nodes and the other 419 blocks as one box.
  const e = displayGraph(a, new Map([[0, 5]]));
  assert.equal(e.nodes.filter((n) => n.kind === 'node' && n.sub.startsWith('/model/layers.5/')).length, 12);
  assert.ok(e.nodes.some((n) => n.id === 'block:0:rest'));
});

test('without block names, a long graph is drawn as segments of consecutive nodes', () => {
  const a = analyze(graph, { blocks: false });
  assert.equal(a.families.length, 1);
  assert.equal(a.families[0].kind, 'segments');
  const d = displayGraph(a);
  assert.ok(d.nodes.length <= MAX_BOXES, `${d.nodes.length} boxes`);
  const covered = [...a.families[0].nodes.values()].reduce((n, l) => n + l.length, 0);
  assert.equal(covered, ref.nodes.length);
});

test('blocks are found from the structure: mixed node names make one block × 62, not segments', () => {
  const mixed = mixedNamesGraph(62);
  const a = analyze(api.open(mixed.path).graph());
  assert.equal(a.families.length, 1, JSON.stringify(a.families.map((f) => f.label)));
  const f = a.families[0];
  assert.ok(f.structural);
  assert.equal(f.instances.length, 62);
  assert.equal(f.size, mixed.perLayer);
  assert.deepEqual(f.instances, Array.from({ length: 62 }, (_, i) => i), 'numbered as the names number them');
  // Each instance holds its layer's nodes under both names, and nothing else.
  for (const i of [0, 17, 61]) {
    const names = f.nodes.get(i).map((k) => a.nodes[k].name);
    assert.ok(names.every((x) => x.startsWith(`/model/layers/${i}/ln1/`) || x.startsWith(`/model/layers.${i}/`)), names.join(' '));
  }
  const d = displayGraph(a);
  assert.equal(d.nodes.filter((n) => n.kind === 'block').length, 1);
  assert.ok(!d.nodes.some((n) => n.id.startsWith('seg:')), 'no segments');
  assert.ok(d.nodes.length <= 5, `${d.nodes.length} boxes`);
  assert.ok(d.edges.some((e) => e.source === 'in:hidden' && e.target === 'block:0'));
  assert.ok(d.edges.some((e) => e.source === 'block:0' && e.target === 'node:/lm_head/MatMul'));
});

test('the true flat graph: every node a box, laid out in linear time, edges downward, no overlaps', () => {
  const a = analyze(graph, { blocks: false, segments: false });
  assert.equal(a.families.length, 0);
  const d = displayGraph(a);
  for (const n of d.nodes) Object.assign(n, boxSize(n));
  assert.ok(d.nodes.filter((n) => n.kind === 'node').length === ref.nodes.length);
  const t0 = performance.now();
  const out = layeredLayout(d);
  const ms = performance.now() - t0;
  console.log(`# layeredLayout of ${d.nodes.length} boxes, ${d.edges.length} edges: ${ms.toFixed(1)} ms`);
  assert.ok(ms < 1000, `${ms} ms`);
  const at = new Map(out.children.map((c) => [c.id, c]));
  assert.equal(out.edges.length, d.edges.length);
  for (const e of out.edges) {
    const [sec] = e.sections;
    assert.ok(sec.endPoint.y > sec.startPoint.y, `${e.id} points down`);
  }
  // No two boxes of one row overlap.
  const rows = new Map();
  for (const c of out.children) (rows.get(c.y) ?? rows.set(c.y, []).get(c.y)).push(c);
  for (const list of rows.values()) {
    list.sort((p, q) => p.x - q.x);
    for (let i = 1; i < list.length; i++) assert.ok(list[i].x >= list[i - 1].x + list[i - 1].width, 'no overlap');
  }
  assert.ok(at.get('in:input_ids_embeds').y < at.get('node:/head/If').y);
});

