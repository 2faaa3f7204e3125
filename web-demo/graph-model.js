// What the graph view derives from reader.graph() (an ONNX graph, see js/index.d.ts OnnxGraph):
// op-type counts, each value's producer and consumers, initializers, repeated blocks, and the
// collapsed graph that is drawn, its layout packed into typed arrays with a grid index of where
// each box and edge lies (packLayout: what a page culls by). Pure functions (no DOM), run in the
// graph Worker and in Node tests.
import { valuesText } from './graph-constants.js';

/**
 * Where a node name has a block number: the first run of digits that follows letters (and an
 * optional `.` or `_`) and is followed by `/` or `.`, e.g. `/model/layers.17/mlp/MatMul`
 * (template `/model/layers.#/`, index 17) or `encoder.layer.3.attention.Softmax`.
 */
const BLOCK_NAME = /^(.*?[A-Za-z][A-Za-z_]*[._]?)(\d+)([/.])/;
/** A name template is a repeated block when this many distinct indices use it. */
export const MIN_REPEATS = 3;
/**
 * More nodes than this outside repeated blocks are drawn as consecutive segments (about
 * SEGMENTS of them, in file order, which ONNX keeps topological), each one box until opened: a
 * layered layout of thousands of boxes takes elkjs minutes (and overflows its stack on long
 * chains), a hundred boxes well under a second.
 */
export const MAX_BOXES = 300;
export const SEGMENTS = 60;

/**
 * Analyses an OnnxGraph: `{nodes, ids, producer, consumers, initializers, opCounts, families}`.
 * `nodes[i]` gains `id` (its name, or `op_type#i` when unnamed or repeated), `family` and
 * `instance` (its repeated block, or -1). `{blocks: false}`: no repeated blocks; `{segments:
 * false}`: no segments either (the true flat graph, every node drawn: layeredLayout lays it out).
 */
export function analyze(g, { blocks = true, segments = true } = {}) {
  const seen = new Set();
  const nodes = g.nodes.map((n, i) => {
    let id = n.name || `${n.op_type}#${i}`;
    if (seen.has(id)) id = `${id}#${i}`;
    seen.add(id);
    return { ...n, index: i, id, family: -1, instance: -1 };
  });
  const producer = new Map();
  const consumers = new Map();
  for (const n of nodes) {
    for (const o of n.outputs) if (o) producer.set(o, n.index);
    for (const v of n.inputs) {
      if (!v) continue;
      let c = consumers.get(v);
      if (!c) consumers.set(v, (c = []));
      if (c[c.length - 1] !== n.index) c.push(n.index);
    }
  }
  const counts = new Map();
  for (const n of nodes) {
    const k = n.domain ? `${n.domain}.${n.op_type}` : n.op_type;
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  const opCounts = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([op, count]) => ({ op, count }));
  // Repeated blocks from the graph's structure (the same ops wired the same way, one after the
  // other along the graph), else from the node names.
  let families = [];
  if (blocks) {
    families = detectRepeats(nodes, producer);
    if (!families.length) families = detectFamilies(nodes);
  }
  if (segments) segment(nodes, families);
  return { nodes, producer, consumers, initializers: new Set(g.initializers), opCounts, families, inputs: g.inputs, outputs: g.outputs };
}

/**
 * Repeated blocks: node names sharing a template with at least MIN_REPEATS distinct indices.
 * Returns `[{template, label, instances: [index...], nodes: Map(index -> [node index]),
 * signature, uniform}]` (`uniform`: every instance has the same op-type sequence) and marks the
 * nodes.
 */
export function detectFamilies(nodes) {
  const by = new Map();
  for (const n of nodes) {
    const m = BLOCK_NAME.exec(n.name);
    if (!m) continue;
    const template = `${m[1]}#${m[3]}`;
    let f = by.get(template);
    if (!f) by.set(template, (f = new Map()));
    const idx = Number(m[2]);
    let list = f.get(idx);
    if (!list) f.set(idx, (list = []));
    list.push(n.index);
  }
  const families = [];
  for (const [template, inst] of by) {
    if (inst.size < MIN_REPEATS) continue;
    const instances = [...inst.keys()].sort((a, b) => a - b);
    const sig = (i) => inst.get(i).map((k) => nodes[k].op_type).join(',');
    const signature = sig(instances[0]);
    const uniform = instances.every((i) => sig(i) === signature);
    const f = families.length;
    for (const i of instances) for (const k of inst.get(i)) Object.assign(nodes[k], { family: f, instance: i });
    families.push({ template, label: template.replace('#', `{${instances[0]}..${instances[instances.length - 1]}}`), instances, nodes: inst, signature, uniform, size: inst.get(instances[0]).length });
  }
  return families;
}

/**
 * Repeated blocks found from the graph's structure, not its names: runs of the node list (which
 * ONNX keeps in topological order, and exporters emit block by block) whose op sequence repeats
 * with some period L at least MIN_REPEATS times, cut where the fewest values are live (the
 * residual stream between two layers), and kept where each instance is wired the same way (every
 * input from the same node of the instance, or from outside it). Up to 4 such families, largest
 * first. Returns families as detectFamilies does (`structural: true`) and marks the nodes.
 */
export function detectRepeats(nodes, producer) {
  const n = nodes.length;
  if (n < 2 * MIN_REPEATS) return [];
  const ops = new Map();
  const S = new Int32Array(n);
  nodes.forEach((x, i) => {
    const k = `${x.domain ?? ''}.${x.op_type}`;
    if (!ops.has(k)) ops.set(k, ops.size);
    S[i] = ops.get(k);
  });
  // live[b]: values made before node b and used at or after it (boundary b sits before node b).
  const lastUse = new Map();
  nodes.forEach((x, i) => x.inputs.forEach((v) => v && producer.has(v) && lastUse.set(v, i)));
  const diff = new Int32Array(n + 2);
  for (const [v, c] of lastUse) {
    const p = producer.get(v);
    if (c > p) (diff[p + 1]++, diff[c + 1]--);
  }
  const live = new Int32Array(n + 1);
  for (let b = 1, acc = 0; b <= n; b++) live[b] = acc += diff[b];
  const nameIndex = nodes.map((x) => {
    const m = BLOCK_NAME.exec(x.name ?? '');
    return m ? { template: `${m[1]}#${m[3]}`, index: Number(m[2]) } : null;
  });
  const taken = new Uint8Array(n);
  // The periods worth trying: the distances between one op type's consecutive nodes that recur
  // (an op that a block holds once recurs exactly one period apart), the 256 most frequent.
  const maxL = Math.floor(n / MIN_REPEATS);
  const lastAt = new Int32Array(ops.size).fill(-1);
  const gaps = new Map();
  for (let i = 0; i < n; i++) {
    const q = lastAt[S[i]];
    if (q >= 0 && i - q <= maxL) gaps.set(i - q, (gaps.get(i - q) ?? 0) + 1);
    lastAt[S[i]] = i;
  }
  // (A block is at least 2 ops: three Relus in a row are not a repeated block.)
  const periods = [...gaps].filter(([g, c]) => g >= 2 && c >= MIN_REPEATS - 1).sort((x, y) => y[1] - x[1]).slice(0, 256).map(([g]) => g).sort((x, y) => x - y);
  const families = [];
  for (let round = 0; round < 4; round++) {
    let best = null;
    const consider = (run, start, L) => {
      const reps = Math.floor((run + L) / L);
      if (reps < MIN_REPEATS) return;
      const covered = reps * L;
      if (covered < 12) return;
      if (!best || covered > best.covered || (covered === best.covered && L < best.L)) best = { covered, start, end: start + run + L, L };
    };
    for (const L of periods) {
      let run = 0;
      for (let i = 0; i + L < n; i++) {
        if (!taken[i] && !taken[i + L] && S[i] === S[i + L]) run++;
        else {
          consider(run, i - run, L);
          run = 0;
        }
      }
      consider(run, n - L - run, L);
    }
    if (!best) break;
    const { L, start, end } = best;
    // The phase: the most whole instances, then the fewest live values at the cuts, then cuts
    // where a name's block number changes.
    let phase = null;
    for (let p = start; p < start + L && p + L * MIN_REPEATS <= end; p++) {
      const cnt = Math.floor((end - p) / L);
      let cost = 0;
      for (let k = 0; k <= cnt; k++) {
        const b = p + k * L;
        cost += live[b] * 4;
        if (b > 0 && b < n && nameIndex[b] && nameIndex[b - 1] && nameIndex[b].index === nameIndex[b - 1].index) cost += 1;
      }
      if (!phase || cnt > phase.cnt || (cnt === phase.cnt && cost < phase.cost)) phase = { p, cnt, cost };
    }
    if (!phase) break;
    // Each instance's wiring: an input from node j of the same instance, or from outside it.
    const wiring = (b) => {
      let sig = '';
      for (let i = b; i < b + L; i++) {
        sig += `${S[i]}(`;
        for (const v of nodes[i].inputs) {
          const q = v ? producer.get(v) : undefined;
          sig += q !== undefined && q >= b && q < i ? `${q - b},` : v ? 'x,' : '_,';
        }
        sig += ')';
      }
      return sig;
    };
    const sigs = Array.from({ length: phase.cnt }, (_, k) => wiring(phase.p + k * L));
    // The longest stretch of instances wired alike.
    let bestRun = [0, 0];
    for (let k = 0; k < sigs.length; ) {
      let j = k + 1;
      while (j < sigs.length && sigs[j] === sigs[k]) j++;
      if (j - k > bestRun[1] - bestRun[0]) bestRun = [k, j];
      k = j;
    }
    const [k0, k1] = bestRun;
    if (k1 - k0 < MIN_REPEATS) {
      // Not wired alike: leave this stretch alone and look elsewhere.
      for (let i = start; i < end; i++) taken[i] = 1;
      continue;
    }
    const starts = Array.from({ length: k1 - k0 }, (_, k) => phase.p + (k0 + k) * L);
    // Instance numbers from the names where they tell them apart (layers.5 is instance 5).
    const named = starts.map((b) => {
      const c = new Map();
      for (let i = b; i < b + L; i++) if (nameIndex[i]) c.set(nameIndex[i].index, (c.get(nameIndex[i].index) ?? 0) + 1);
      const top = [...c].sort((x, y) => y[1] - x[1])[0];
      return top ? top[0] : null;
    });
    const ids = named.every((x) => x !== null) && new Set(named).size === named.length ? named : starts.map((_, k) => k);
    const templates = new Map();
    for (let i = starts[0]; i < starts[0] + L; i++) if (nameIndex[i]) templates.set(nameIndex[i].template, (templates.get(nameIndex[i].template) ?? 0) + 1);
    const topT = [...templates].sort((x, y) => y[1] - x[1])[0];
    const template = topT ? topT[0] : `block@${starts[0]}`;
    const label = topT ? template.replace('#', `{${ids[0]}..${ids[ids.length - 1]}}`) : `${L} ops from node ${starts[0]}`;
    const f = families.length;
    const inst = new Map();
    starts.forEach((b, k) => {
      const list = [];
      for (let i = b; i < b + L; i++) {
        list.push(i);
        taken[i] = 1;
        Object.assign(nodes[i], { family: f, instance: ids[k] });
      }
      inst.set(ids[k], list);
    });
    families.push({ template, label, instances: ids, nodes: inst, signature: sigs[k0], uniform: true, size: L, structural: true });
  }
  return families;
}

/**
 * Groups the nodes outside repeated blocks into consecutive segments when there are more than
 * MAX_BOXES of them: one more family, `kind: 'segments'`, whose instances are the segments.
 */
export function segment(nodes, families) {
  const loose = nodes.filter((n) => n.family < 0);
  if (loose.length <= MAX_BOXES) return;
  const per = Math.ceil(loose.length / SEGMENTS);
  const f = families.length;
  const inst = new Map();
  loose.forEach((n, i) => {
    const k = Math.floor(i / per);
    n.family = f;
    n.instance = k;
    let list = inst.get(k);
    if (!list) inst.set(k, (list = []));
    list.push(n.index);
  });
  const instances = [...inst.keys()];
  families.push({ kind: 'segments', template: `segments of ${per} nodes`, label: `${instances.length} segments of ${per} nodes`, instances, nodes: inst, signature: '', uniform: false, size: per });
}

/** "12 Mul, 8 Add, …" of the node indices `list`. */
function opSummary(nodes, list) {
  const c = new Map();
  for (const k of list) c.set(nodes[k].op_type, (c.get(nodes[k].op_type) ?? 0) + 1);
  const top = [...c].sort((x, y) => y[1] - x[1]);
  return top.slice(0, 3).map(([op, n]) => `${n} ${op}`).join(', ') + (top.length > 3 ? ', …' : '');
}

/**
 * The graph to draw: repeated blocks collapsed to one box each, except a family listed in
 * `expanded` (family -> instance index), whose chosen instance is drawn node by node and whose
 * other instances stay one box. Graph inputs and outputs are boxes; initializers are not drawn
 * (they are listed with their node). Returns `{nodes: [{id, kind: 'node'|'block'|'input'|'output',
 * label, sub, node?, family?}], edges: [{id, source, target}]}`.
 */
export function displayGraph(a, expanded = new Map()) {
  const out = new Map();
  const add = (id, d) => {
    if (!out.has(id)) out.set(id, { id, ...d });
    return id;
  };
  const keyOf = (n) => {
    if (n.family >= 0) {
      const f = a.families[n.family];
      const k = expanded.get(n.family);
      if (f.kind === 'segments' && n.instance !== k) {
        const list = f.nodes.get(n.instance);
        const first = a.nodes[list[0]];
        return add(`seg:${n.family}:${n.instance}`, { kind: 'block', family: n.family, instance: n.instance, label: `nodes ${first.index}..${a.nodes[list[list.length - 1]].index} (${list.length})`, sub: opSummary(a.nodes, list) });
      }
      if (k === undefined) {
        return add(`block:${n.family}`, { kind: 'block', family: n.family, label: `${f.label}`, sub: `×${f.instances.length} blocks · ${f.size} ops each${f.uniform ? '' : ' (varying)'}` });
      }
      if (n.instance !== k) {
        return add(`block:${n.family}:rest`, { kind: 'block', family: n.family, label: `${f.label}`, sub: `the other ${f.instances.length - 1} blocks` });
      }
    }
    return add(`node:${n.id}`, { kind: 'node', node: n.index, label: n.op_type, sub: n.name });
  };
  const keys = a.nodes.map(keyOf);
  const graphInputs = new Set(a.inputs.map((v) => v.name));
  const edges = new Map();
  // Each edge keeps the values it carries (a hover names them).
  const edge = (s, t, v) => {
    if (s === t) return;
    const id = `${s}->${t}`;
    let e = edges.get(id);
    if (!e) edges.set(id, (e = { id, source: s, target: t, values: [] }));
    if (v && e.values.length < 8 && !e.values.includes(v)) e.values.push(v);
  };
  for (const v of a.inputs) if (!a.initializers.has(v.name)) add(`in:${v.name}`, { kind: 'input', label: v.name, sub: `${v.elem_type} ${shapeText(v.shape)}` });
  for (const n of a.nodes) {
    for (const v of n.inputs) {
      if (!v) continue;
      const p = a.producer.get(v);
      if (p !== undefined) edge(keys[p], keys[n.index], v);
      else if (graphInputs.has(v) && !a.initializers.has(v)) edge(`in:${v}`, keys[n.index], v);
    }
  }
  for (const v of a.outputs) {
    add(`out:${v.name}`, { kind: 'output', label: v.name, sub: `${v.elem_type} ${shapeText(v.shape)}` });
    const p = a.producer.get(v.name);
    if (p !== undefined) edge(keys[p], `out:${v.name}`, v.name);
    else if (graphInputs.has(v.name)) edge(`in:${v.name}`, `out:${v.name}`, v.name);
  }
  return { nodes: [...out.values()], edges: [...edges.values()] };
}

export function shapeText(s) {
  if (!s) return '';
  return `[${s.map((d) => (d === null ? '?' : d)).join(', ')}]`;
}

/** Box size of a drawn node (monospace label estimate); `extra`, a third line (weights, constants). */
export function boxSize(d) {
  const chars = Math.max(d.label.length, Math.min(d.sub?.length ?? 0, 44) * 0.8, Math.min(d.extra?.length ?? 0, 44) * 0.8);
  return { width: Math.min(360, Math.max(70, Math.round(chars * 7.2 + 20))), height: d.extra ? 52 : d.sub ? 38 : 26 };
}

/**
 * The family of an op type, for its colour: `linear` (MatMul, Gemm, Conv…), `norm`
 * (LayerNormalization, BatchNormalization, ReduceMean, Sqrt…), `activation` (Relu, Gelu, Erf,
 * Sigmoid, Softmax…), `elementwise` (Add, Mul, Sub, Div, Pow…), `shape` (Reshape, Transpose,
 * Gather, Concat, Slice, Cast…), `control` (If, Loop, Scan), `constant`, else `other`.
 */
export function opFamily(op) {
  if (/^(MatMul|MatMulInteger|Gemm|Conv|ConvTranspose|QLinearMatMul|QLinearConv|FusedMatMul|Attention|MultiHeadAttention|GroupQueryAttention|Einsum)$/.test(op)) return 'linear';
  if (/Norm|^(ReduceMean|ReduceSumSquare|Sqrt|Reciprocal|ReduceL2)$/.test(op)) return 'norm';
  if (/^(Relu|LeakyRelu|PRelu|Elu|Selu|Gelu|FastGelu|BiasGelu|Erf|Sigmoid|HardSigmoid|Tanh|Softmax|LogSoftmax|Softplus|Mish|HardSwish|QuickGelu)$/.test(op)) return 'activation';
  if (/^(Add|Sub|Mul|Div|Pow|Neg|Abs|Exp|Log|Max|Min|Sum|Mean|Where|Equal|Greater|Less|Not|And|Or|Sin|Cos|Clip|Ceil|Floor|Round|Mod|ReduceSum|ReduceMax|ReduceMin)$/.test(op)) return 'elementwise';
  if (/^(Reshape|Transpose|Gather|GatherElements|GatherND|Concat|Slice|Split|Squeeze|Unsqueeze|Shape|Cast|Expand|Flatten|Tile|Pad|Range|ConstantOfShape|Identity|ScatterND|ScatterElements|Resize|Trilu|DequantizeLinear|QuantizeLinear)$/.test(op)) return 'shape';
  if (/^(If|Loop|Scan)$/.test(op)) return 'control';
  if (op === 'Constant') return 'constant';
  return 'other';
}

/**
 * A layered layout in linear time for graphs too large for elkjs (thousands of boxes): each box
 * on the layer of its longest path from a source, boxes of a layer ordered by the mean position of
 * their predecessors (one sweep), edges straight from the bottom of one box to the top of the
 * next. `d`: displayGraph's {nodes (with width and height), edges}. Returns elkjs's result shape:
 * {children: [{id, x, y, width, height}], edges: [{id, sections: [{startPoint, endPoint}]}],
 * width, height}.
 */
export function layeredLayout(d, { gapX = 18, gapY = 28 } = {}) {
  const index = new Map(d.nodes.map((n, i) => [n.id, i]));
  const N = d.nodes.length;
  const preds = Array.from({ length: N }, () => []);
  const succs = Array.from({ length: N }, () => []);
  const indeg = new Int32Array(N);
  for (const e of d.edges) {
    const a = index.get(e.source);
    const b = index.get(e.target);
    if (a === undefined || b === undefined || a === b) continue;
    succs[a].push(b);
    preds[b].push(a);
    indeg[b]++;
  }
  // Kahn's order; what a cycle leaves over goes last, in file order.
  const order = [];
  const queue = [];
  for (let i = 0; i < N; i++) if (indeg[i] === 0) queue.push(i);
  for (let q = 0; q < queue.length; q++) {
    const i = queue[q];
    order.push(i);
    for (const j of succs[i]) if (--indeg[j] === 0) queue.push(j);
  }
  if (order.length < N) {
    const seen = new Uint8Array(N);
    for (const i of order) seen[i] = 1;
    for (let i = 0; i < N; i++) if (!seen[i]) order.push(i);
  }
  const layer = new Int32Array(N);
  const placed = new Uint8Array(N);
  for (const i of order) {
    let l = 0;
    for (const p of preds[i]) if (placed[p]) l = Math.max(l, layer[p] + 1);
    layer[i] = l;
    placed[i] = 1;
  }
  const layers = [];
  for (const i of order) (layers[layer[i]] ??= []).push(i);
  const x = new Float64Array(N);
  const y = new Float64Array(N);
  let width = 0;
  let top = 0;
  const rows = [];
  for (const list of layers) {
    if (!list) continue;
    // Ordered by where their predecessors sit.
    const key = (i) => (preds[i].length ? preds[i].reduce((s, p) => s + x[p] + d.nodes[p].width / 2, 0) / preds[i].length : -1);
    list.sort((a, b) => key(a) - key(b) || a - b);
    let at = 0;
    let tall = 0;
    for (const i of list) {
      x[i] = at;
      at += d.nodes[i].width + gapX;
      tall = Math.max(tall, d.nodes[i].height);
    }
    const span = at - gapX;
    width = Math.max(width, span);
    for (const i of list) y[i] = top;
    rows.push({ list, span });
    top += tall + gapY;
  }
  // Centre each layer on the widest.
  for (const { list, span } of rows) for (const i of list) x[i] += (width - span) / 2;
  const children = d.nodes.map((n, i) => ({ id: n.id, x: x[i], y: y[i], width: n.width, height: n.height }));
  // The right edge of each layer's boxes: an edge that skips layers goes round them on the right.
  const right = new Float64Array(layers.length);
  for (let i = 0; i < N; i++) right[layer[i]] = Math.max(right[layer[i]], x[i] + d.nodes[i].width);
  let skip = 0;
  const edges = d.edges
    .filter((e) => index.has(e.source) && index.has(e.target) && e.source !== e.target)
    .map((e) => {
      const a = index.get(e.source);
      const b = index.get(e.target);
      const startPoint = { x: x[a] + d.nodes[a].width / 2, y: y[a] + d.nodes[a].height };
      const endPoint = { x: x[b] + d.nodes[b].width / 2, y: y[b] };
      const bendPoints = [];
      if (layer[b] - layer[a] > 1) {
        let bx = 0;
        for (let l = layer[a] + 1, k = 0; l < layer[b] && k < 4000; l++, k++) bx = Math.max(bx, right[l]);
        bx += 10 + (skip++ % 4) * 5;
        width = Math.max(width, bx + 4);
        bendPoints.push({ x: bx, y: startPoint.y + gapY / 3 }, { x: bx, y: endPoint.y - gapY / 3 });
      }
      return { id: e.id, sections: [{ startPoint, bendPoints, endPoint }] };
    });
  return { children, edges, width: Math.max(1, width), height: Math.max(1, top - gapY) };
}


/**
 * A node's third line: its initializers' shapes (weights) and small constants' values
 * (`model.sqrt2 = 1.414`, `mlp.weight [16, 16]`, a Constant's `value = [[0, 1, 2], [3, 4, 5]]`),
 * or undefined. `c`: `{initializers: Set, tensorInfo: Map(name -> {shape}), constInit:
 * Map(name -> {values, shape}), constNode: Map(node index -> {values, shape})}`.
 */
export function inlineText(n, c) {
  const parts = [];
  for (const v of n.inputs) {
    if (!v || !c.initializers.has(v)) continue;
    const t = c.tensorInfo.get(v);
    const short = v.split(/[./]/).filter(Boolean).slice(-2).join('.');
    const k = c.constInit.get(v);
    parts.push(k ? `${short} = ${valuesText(k.values, k.shape)}` : `${short} ${t ? shapeText(t.shape) : ''}`.trim());
  }
  if (n.op_type === 'Constant') {
    const k = c.constNode.get(n.index);
    for (const x of n.attributes) parts.push(`${x.name} = ${x.name === 'value' && k ? valuesText(k.values, k.shape) : x.summary}`);
  }
  return parts.length ? parts.join(', ') : undefined;
}

/** Box kinds in a packed layout's `kind` array. */
export const KINDS = ['node', 'block', 'input', 'output'];

/**
 * A laid-out display graph (displayGraph's `d`, its nodes sized; `out`: elkjs's or layeredLayout's
 * result) as typed arrays, cheap to post between threads (transferable: no per-box objects to
 * clone) and to cull by:
 * - boxes `0..boxes-1`: `rect` (x, y, width, height each), `kind` (index into KINDS), `node` (the
 *   analysis's node index of a `node` box, else -1); `others`: `[[box, {id, kind, label, sub,
 *   family, instance}]]` for the boxes that are not nodes (blocks, graph inputs and outputs);
 * - edge sections `0..sections-1` (one polyline each): `from`/`to` (box indices), `ptStart` (into
 *   `pts`, x y pairs; `ptStart[sections]` ends the last), the values each carries in `values`
 *   (one string, `valStart` offsets, values separated by `\n`);
 * - `grid`: `{cell, cols, rows, start, items, wide}`: the items (box `i`, section `boxes + j`)
 *   whose bounds meet each cell (CSR: cell `c`'s are `items[start[c]..start[c+1]]`); an item over
 *   more than WIDE_CELLS cells is in `wide` instead, looked at every time;
 * - `bbox`: per item, x0 y0 x1 y1; `width`, `height`.
 * `transfer()` lists the buffers to transfer.
 */
export function packLayout(d, out) {
  const B = d.nodes.length;
  const at = new Map((out.children ?? []).map((c) => [c.id, c]));
  const boxIndex = new Map(d.nodes.map((n, i) => [n.id, i]));
  const rect = new Float32Array(4 * B);
  const kind = new Uint8Array(B);
  const node = new Int32Array(B).fill(-1);
  const others = [];
  d.nodes.forEach((n, i) => {
    const c = at.get(n.id) ?? { x: 0, y: 0, width: n.width ?? 0, height: n.height ?? 0 };
    rect.set([c.x, c.y, c.width, c.height], 4 * i);
    kind[i] = Math.max(0, KINDS.indexOf(n.kind));
    if (n.kind === 'node') node[i] = n.node;
    else others.push([i, { id: n.id, kind: n.kind, label: n.label, sub: n.sub, family: n.family, instance: n.instance }]);
  });
  const valuesOf = new Map(d.edges.map((e) => [e.id, e]));
  let S = 0;
  let P = 0;
  for (const e of out.edges ?? []) for (const sec of e.sections ?? []) (S++, (P += 2 + (sec.bendPoints?.length ?? 0)));
  const from = new Uint32Array(S);
  const to = new Uint32Array(S);
  const ptStart = new Uint32Array(S + 1);
  const pts = new Float32Array(2 * P);
  const valStart = new Uint32Array(S + 1);
  const texts = [];
  let j = 0;
  let p = 0;
  let chars = 0;
  for (const e of out.edges ?? []) {
    const de = valuesOf.get(e.id);
    const text = (de?.values ?? []).join('\n');
    for (const sec of e.sections ?? []) {
      from[j] = boxIndex.get(de?.source) ?? 0;
      to[j] = boxIndex.get(de?.target) ?? 0;
      ptStart[j] = p;
      for (const q of [sec.startPoint, ...(sec.bendPoints ?? []), sec.endPoint]) (pts[2 * p] = q.x), (pts[2 * p + 1] = q.y), p++;
      valStart[j] = chars;
      texts.push(text);
      chars += text.length;
      j++;
    }
  }
  ptStart[S] = p;
  valStart[S] = chars;
  const width = Math.max(1, out.width ?? 1);
  const height = Math.max(1, out.height ?? 1);
  const bbox = new Float32Array(4 * (B + S));
  for (let i = 0; i < B; i++) bbox.set([rect[4 * i], rect[4 * i + 1], rect[4 * i] + rect[4 * i + 2], rect[4 * i + 1] + rect[4 * i + 3]], 4 * i);
  for (let k = 0; k < S; k++) {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (let q = ptStart[k]; q < ptStart[k + 1]; q++) {
      x0 = Math.min(x0, pts[2 * q]), x1 = Math.max(x1, pts[2 * q]);
      y0 = Math.min(y0, pts[2 * q + 1]), y1 = Math.max(y1, pts[2 * q + 1]);
    }
    bbox.set([x0, y0, x1, y1], 4 * (B + k));
  }
  const grid = gridIndex(bbox, B + S, width, height);
  const packed = { boxes: B, rect, kind, node, others, sections: S, from, to, ptStart, pts, values: texts.join(''), valStart, bbox, grid, width, height };
  return packed;
}

/** An item over more cells than this is kept in the grid's `wide` list (looked at every time). */
export const WIDE_CELLS = 64;

/** The grid index of packLayout: `n` items' bounds (`bbox`, x0 y0 x1 y1 each) in a `width` × `height` world. */
export function gridIndex(bbox, n, width, height) {
  // About 4 items a cell, at least 256 units a side.
  const cell = Math.max(256, Math.sqrt((width * height) / Math.max(1, n / 4)));
  const cols = Math.max(1, Math.ceil(width / cell));
  const rows = Math.max(1, Math.ceil(height / cell));
  const span = (i) => {
    const cx0 = Math.min(cols - 1, Math.max(0, Math.floor(bbox[4 * i] / cell)));
    const cy0 = Math.min(rows - 1, Math.max(0, Math.floor(bbox[4 * i + 1] / cell)));
    const cx1 = Math.min(cols - 1, Math.max(0, Math.floor(bbox[4 * i + 2] / cell)));
    const cy1 = Math.min(rows - 1, Math.max(0, Math.floor(bbox[4 * i + 3] / cell)));
    return [cx0, cy0, cx1, cy1];
  };
  const start = new Uint32Array(cols * rows + 1);
  const wide = [];
  for (let i = 0; i < n; i++) {
    const [cx0, cy0, cx1, cy1] = span(i);
    if ((cx1 - cx0 + 1) * (cy1 - cy0 + 1) > WIDE_CELLS) continue;
    for (let cy = cy0; cy <= cy1; cy++) for (let cx = cx0; cx <= cx1; cx++) start[cy * cols + cx + 1]++;
  }
  for (let c = 0; c < cols * rows; c++) start[c + 1] += start[c];
  const items = new Uint32Array(start[cols * rows]);
  const fill = start.slice(0, cols * rows);
  for (let i = 0; i < n; i++) {
    const [cx0, cy0, cx1, cy1] = span(i);
    if ((cx1 - cx0 + 1) * (cy1 - cy0 + 1) > WIDE_CELLS) {
      wide.push(i);
      continue;
    }
    for (let cy = cy0; cy <= cy1; cy++) for (let cx = cx0; cx <= cx1; cx++) items[fill[cy * cols + cx]++] = i;
  }
  return { cell, cols, rows, start, items, wide: Uint32Array.from(wide) };
}

/**
 * The items of a packed layout (packLayout) whose bounds meet the rectangle x0 y0 x1 y1, boxes and
 * edge sections apart: `{boxes: [i], sections: [j]}`, each item once. `stamp`: a Uint32Array of
 * one entry an item, and `mark` a number not used before with it (dedupes without clearing).
 */
export function itemsIn(P, x0, y0, x1, y1, stamp, mark) {
  const { cell, cols, rows, start, items, wide } = P.grid;
  const boxes = [];
  const sections = [];
  const take = (i) => {
    if (stamp[i] === mark) return;
    stamp[i] = mark;
    const b = 4 * i;
    if (P.bbox[b + 2] < x0 || P.bbox[b] > x1 || P.bbox[b + 3] < y0 || P.bbox[b + 1] > y1) return;
    if (i < P.boxes) boxes.push(i);
    else sections.push(i - P.boxes);
  };
  const cx0 = Math.max(0, Math.floor(x0 / cell));
  const cy0 = Math.max(0, Math.floor(y0 / cell));
  const cx1 = Math.min(cols - 1, Math.floor(x1 / cell));
  const cy1 = Math.min(rows - 1, Math.floor(y1 / cell));
  for (let cy = cy0; cy <= cy1; cy++) for (let cx = cx0; cx <= cx1; cx++) for (let k = start[cy * cols + cx]; k < start[cy * cols + cx + 1]; k++) take(items[k]);
  for (const i of wide) take(i);
  return { boxes, sections };
}

/** The ArrayBuffers of a packed layout, to transfer with postMessage. */
export function packedBuffers(P) {
  return [P.rect, P.kind, P.node, P.from, P.to, P.ptStart, P.pts, P.valStart, P.bbox, P.grid.start, P.grid.items, P.grid.wide].map((a) => a.buffer);
}

/**
 * An analysis's nodes, producers and consumers as one string and typed arrays (posted from the
 * graph Worker to the page: a 100k-node graph as a dozen buffers instead of a million objects to
 * clone and keep, which the page's garbage collector then walked in pauses of hundreds of
 * milliseconds). Every distinct string once in `text` (`strStart` offsets, string ids `sid`);
 * per node `id`, `name`, `op`, `domain` (sids), `family`, `instance`; inputs, outputs and
 * attributes (name, kind, summary: 3 sids each) as CSR (`inStart`/`ins`, ...; an omitted input is
 * the sid of ''); per string `producer` (node index or -1) and consumers (`consStart`/`cons`).
 * Read it with NodeTable.
 */
export function packNodes(nodes, producer, consumers) {
  const sids = new Map();
  const parts = [];
  const sid = (t) => {
    let k = sids.get(t);
    if (k === undefined) sids.set(t, (k = parts.length)), parts.push(t);
    return k;
  };
  sid('');
  const N = nodes.length;
  const id = new Int32Array(N);
  const name = new Int32Array(N);
  const op = new Int32Array(N);
  const domain = new Int32Array(N);
  const family = new Int32Array(N);
  const instance = new Int32Array(N);
  const inStart = new Uint32Array(N + 1);
  const outStart = new Uint32Array(N + 1);
  const attrStart = new Uint32Array(N + 1);
  const ins = [];
  const outs = [];
  const attrs = [];
  for (let i = 0; i < N; i++) {
    const n = nodes[i];
    id[i] = sid(n.id);
    name[i] = sid(n.name ?? '');
    op[i] = sid(n.op_type);
    domain[i] = sid(n.domain ?? '');
    family[i] = n.family ?? -1;
    instance[i] = n.instance ?? -1;
    inStart[i] = ins.length;
    for (const v of n.inputs) ins.push(sid(v ?? ''));
    outStart[i] = outs.length;
    for (const v of n.outputs) outs.push(sid(v ?? ''));
    attrStart[i] = attrs.length / 3;
    for (const x of n.attributes ?? []) attrs.push(sid(x.name), sid(x.kind), sid(x.summary));
  }
  inStart[N] = ins.length;
  outStart[N] = outs.length;
  attrStart[N] = attrs.length / 3;
  const S = parts.length;
  const prod = new Int32Array(S).fill(-1);
  for (const [v, p] of producer) if (sids.has(v)) prod[sids.get(v)] = p;
  const consStart = new Uint32Array(S + 1);
  for (const [v, list] of consumers) if (sids.has(v)) consStart[sids.get(v) + 1] = list.length;
  for (let k = 0; k < S; k++) consStart[k + 1] += consStart[k];
  const cons = new Int32Array(consStart[S]);
  for (const [v, list] of consumers) if (sids.has(v)) cons.set(list, consStart[sids.get(v)]);
  const strStart = new Uint32Array(S + 1);
  for (let k = 0; k < S; k++) strStart[k + 1] = strStart[k] + parts[k].length;
  return { count: N, text: parts.join(''), strStart, id, name, op, domain, family, instance, inStart, ins: Int32Array.from(ins), outStart, outs: Int32Array.from(outs), attrStart, attrs: Int32Array.from(attrs), producer: prod, consStart, cons };
}

/** The ArrayBuffers of packNodes's result, to transfer with postMessage. */
export function nodeBuffers(T) {
  return [T.strStart, T.id, T.name, T.op, T.domain, T.family, T.instance, T.inStart, T.ins, T.outStart, T.outs, T.attrStart, T.attrs, T.producer, T.consStart, T.cons].map((a) => a.buffer);
}

/**
 * Reads packNodes's tables: `get(i)` makes node `i`'s object (`{index, id, name, op_type, domain,
 * inputs, outputs, attributes, family, instance}`, fresh each time: nothing kept), `indexOf(id)`
 * and `sidOf(value)` find by name, `producerOf(value)` and `consumersOf(value)` (node indices),
 * `search(q, op)` the nodes whose id, op type, inputs or outputs contain `q` (case-insensitive)
 * and whose op (`domain.op_type` or `op_type`) is `op` when given.
 */
export class NodeTable {
  constructor(T) {
    Object.assign(this, T);
    this.length = T.count;
    this.bySid = null;
    this.lower = null;
  }
  str(k) {
    return this.text.slice(this.strStart[k], this.strStart[k + 1]);
  }
  /** Whether string `k` equals `t`, without making a string. */
  is(k, t) {
    return this.strStart[k + 1] - this.strStart[k] === t.length && this.text.startsWith(t, this.strStart[k]);
  }
  idOf(i) {
    return this.str(this.id[i]);
  }
  opOf(i) {
    return this.str(this.op[i]);
  }
  /** `domain.op_type`, or `op_type` in the default domain (the op-type counts' key). */
  opKey(i) {
    // sid 0 is ''.
    return this.domain[i] ? `${this.str(this.domain[i])}.${this.opOf(i)}` : this.opOf(i);
  }
  get(i) {
    if (!(i >= 0 && i < this.length)) return undefined;
    const list = (start, arr) => Array.from(arr.subarray(start[i], start[i + 1]), (k) => this.str(k));
    const attributes = [];
    for (let k = this.attrStart[i]; k < this.attrStart[i + 1]; k++) attributes.push({ name: this.str(this.attrs[3 * k]), kind: this.str(this.attrs[3 * k + 1]), summary: this.str(this.attrs[3 * k + 2]) });
    return { index: i, id: this.idOf(i), name: this.str(this.name[i]), op_type: this.opOf(i), domain: this.str(this.domain[i]), inputs: list(this.inStart, this.ins), outputs: list(this.outStart, this.outs), attributes, family: this.family[i], instance: this.instance[i] };
  }
  /** The index of the node with this id, or -1 (a scan without making strings). */
  indexOf(id) {
    for (let i = 0; i < this.length; i++) if (this.is(this.id[i], id)) return i;
    return -1;
  }
  /** The string id of a value name, or undefined (the first call indexes every string). */
  sidOf(v) {
    if (!this.bySid) {
      this.bySid = new Map();
      for (let k = 0; k + 1 < this.strStart.length; k++) this.bySid.set(this.str(k), k);
    }
    return this.bySid.get(v);
  }
  producerOf(v) {
    const k = this.sidOf(v);
    return k === undefined || this.producer[k] < 0 ? undefined : this.producer[k];
  }
  consumersOf(v) {
    const k = this.sidOf(v);
    return k === undefined ? [] : Array.from(this.cons.subarray(this.consStart[k], this.consStart[k + 1]));
  }
  hasConsumers(v) {
    const k = this.sidOf(v);
    return k !== undefined && this.consStart[k + 1] > this.consStart[k];
  }
  search(q, op) {
    const out = [];
    let hit = null;
    if (q) {
      // Every string that contains q, from one pass over all the text (lowercased once).
      this.lower ??= this.text.toLowerCase();
      const S = this.strStart.length - 1;
      hit = new Uint8Array(S);
      const ql = q.toLowerCase();
      if (this.lower.length === this.text.length) {
        for (let at = this.lower.indexOf(ql); at >= 0; ) {
          // The string at `at` (binary search), if q lies inside it; then on from the next string.
          let lo = 0;
          let hi = S - 1;
          while (lo < hi) {
            const mid = (lo + hi + 1) >> 1;
            if (this.strStart[mid] <= at) lo = mid;
            else hi = mid - 1;
          }
          const inside = at + ql.length <= this.strStart[lo + 1];
          if (inside) hit[lo] = 1;
          at = this.lower.indexOf(ql, inside ? Math.max(at + 1, this.strStart[lo + 1]) : at + 1);
        }
      } else for (let k = 0; k < S; k++) hit[k] = this.str(k).toLowerCase().includes(ql) ? 1 : 0;
    }
    const any = (start, arr, i) => {
      for (let k = start[i]; k < start[i + 1]; k++) if (hit[arr[k]]) return true;
      return false;
    };
    for (let i = 0; i < this.length; i++) {
      if (op && this.opKey(i) !== op) continue;
      if (hit && !(hit[this.id[i]] || hit[this.op[i]] || any(this.inStart, this.ins, i) || any(this.outStart, this.outs, i))) continue;
      out.push(i);
    }
    return out;
  }
}
