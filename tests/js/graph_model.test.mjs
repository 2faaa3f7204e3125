// The graph view's analysis (web-demo/graph-model.js) over graphs read by reader.graph() and
// checked against the onnx library: op-type counts and consumers equal what the onnx library's
// node list gives, the 420 `/model/layers.N/` blocks of the generated model are found as one
// uniform family of 12 ops, the collapsed drawing keeps every edge between boxes, and a graph
// without block names (the same model read with {blocks: false}) is drawn as segments; blocks are
// found from the structure, not the names: a model whose norm nodes are named /model/layers/N/ln1/*
// and the rest /model/layers.N/* (issue 26) is one block × 62, not segments; the true flat graph
// (5,046 boxes) is laid out by layeredLayout in well under a second, every edge pointing down;
// the layout packed into typed arrays (packLayout) keeps every box and edge point, and its grid
// index finds exactly the items a brute-force scan finds in any rectangle; the node table sent to
// the page (packNodes/NodeTable) gives back every node, producer and consumer, and its search the
// nodes the list's old filter over node objects gave.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as api from '../../js/node.js';
import { analyze, boxSize, displayGraph, inlineText, itemsIn, layeredLayout, MAX_BOXES, NodeTable, packLayout, packNodes } from '../../web-demo/graph-model.js';
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


test('packLayout keeps every box and edge point, and its grid index finds what a scan finds', () => {
  const a = analyze(graph, { blocks: false, segments: false });
  const d = displayGraph(a);
  const ctx = { initializers: a.initializers, tensorInfo: new Map(), constInit: new Map(), constNode: new Map() };
  for (const n of d.nodes) {
    if (n.kind === 'node') n.extra = inlineText(a.nodes[n.node], ctx);
    Object.assign(n, boxSize(n));
  }
  const out = layeredLayout(d);
  const P = packLayout(d, out);
  assert.equal(P.boxes, d.nodes.length);
  const at = new Map(out.children.map((c) => [c.id, c]));
  d.nodes.forEach((n, i) => {
    const c = at.get(n.id);
    assert.deepEqual([...P.rect.subarray(4 * i, 4 * i + 4)], [c.x, c.y, c.width, c.height].map(Math.fround), n.id);
    if (n.kind === 'node') assert.equal(P.node[i], n.node);
    else assert.equal(new Map(P.others).get(i).id, n.id);
  });
  assert.equal(P.sections, out.edges.length);
  out.edges.forEach((e, j) => {
    const sec = e.sections[0];
    const pts = [sec.startPoint, ...sec.bendPoints, sec.endPoint].flatMap((q) => [q.x, q.y]).map(Math.fround);
    assert.deepEqual([...P.pts.subarray(2 * P.ptStart[j], 2 * P.ptStart[j + 1])], pts);
    const de = d.edges.find((x) => x.id === e.id);
    assert.equal(`${d.nodes[P.from[j]].id}->${d.nodes[P.to[j]].id}`, e.id);
    assert.deepEqual(P.values.slice(P.valStart[j], P.valStart[j + 1]).split('\n').filter(Boolean), de.values);
  });
  // Rectangles over the drawing (and past its edges): the index's answer equals a scan's.
  const stamp = new Uint32Array(P.boxes + P.sections);
  let mark = 0;
  let seen = 0;
  for (let r = 0; r < 60; r++) {
    const w = [50, 800, 5000][r % 3];
    const x0 = ((r * 7919) % 1000) / 1000 * P.width - w / 2;
    const y0 = ((r * 104729) % 1000) / 1000 * P.height - w / 2;
    const got = itemsIn(P, x0, y0, x0 + w, y0 + w, stamp, ++mark);
    const want = { boxes: [], sections: [] };
    for (let i = 0; i < P.boxes + P.sections; i++) {
      const b = P.bbox.subarray(4 * i, 4 * i + 4);
      if (b[2] < x0 || b[0] > x0 + w || b[3] < y0 || b[1] > y0 + w) continue;
      if (i < P.boxes) want.boxes.push(i);
      else want.sections.push(i - P.boxes);
    }
    assert.deepEqual(got.boxes.sort((p, q) => p - q), want.boxes);
    assert.deepEqual(got.sections.sort((p, q) => p - q), want.sections);
    seen += want.boxes.length;
  }
  assert.ok(seen > 100, `the rectangles met ${seen} boxes`);
});

test('the node table gives back every node, producer and consumer, and searches as the list did', () => {
  const a = analyze(graph);
  const T = new NodeTable(structuredClone(packNodes(a.nodes, a.producer, a.consumers)));
  assert.equal(T.length, a.nodes.length);
  for (const n of a.nodes) {
    const { index, id, name, op_type, domain, inputs, outputs, attributes, family, instance } = n;
    assert.deepEqual(T.get(n.index), { index, id, name, op_type, domain: domain ?? '', inputs: inputs.map((v) => v ?? ''), outputs: outputs.map((v) => v ?? ''), attributes: attributes.map(({ name, kind, summary }) => ({ name, kind, summary })), family, instance });
  }
  assert.equal(T.indexOf(a.nodes[4000].id), 4000);
  assert.equal(T.indexOf('no such node'), -1);
  for (const [v, p] of a.producer) assert.equal(T.producerOf(v), p, v);
  for (const [v, c] of a.consumers) assert.deepEqual(T.consumersOf(v), c, v);
  assert.equal(T.producerOf('model.layers.7.mlp.weight'), undefined);
  // The list's filter over the node objects, as graph-view.js had it.
  const old = (q, op) =>
    a.nodes.filter((n) => {
      if (op && (n.domain ? `${n.domain}.${n.op_type}` : n.op_type) !== op) return false;
      q = q.toLowerCase();
      return !q || n.id.toLowerCase().includes(q) || n.op_type.toLowerCase().includes(q) || n.inputs.some((v) => v.toLowerCase().includes(q)) || n.outputs.some((v) => v.toLowerCase().includes(q));
    }).map((n) => n.index);
  for (const [q, op] of [['', ''], ['', 'MatMul'], ['layers.41/', ''], ['MLP', ''], ['s.1', 'Add'], ['/head/', ''], ['zzz', ''], ['a', '']]) {
    assert.deepEqual(T.search(q, op), old(q, op), `${q} ${op}`);
  }
});
