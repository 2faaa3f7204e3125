// What the graph view derives from reader.graph() (an ONNX graph, see js/index.d.ts OnnxGraph):
// op-type counts, each value's producer and consumers, initializers, repeated blocks, and the
// collapsed graph that is drawn. Pure functions (no DOM), run in the graph Worker and in Node tests.

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
 * `instance` (its repeated block, or -1). `{blocks: false}`: no repeated blocks (every node drawn).
 */
export function analyze(g, { blocks = true } = {}) {
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
  const families = blocks ? detectFamilies(nodes) : [];
  segment(nodes, families);
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
  const edge = (s, t) => {
    if (s === t) return;
    const id = `${s}->${t}`;
    if (!edges.has(id)) edges.set(id, { id, source: s, target: t });
  };
  for (const v of a.inputs) if (!a.initializers.has(v.name)) add(`in:${v.name}`, { kind: 'input', label: v.name, sub: `${v.elem_type} ${shapeText(v.shape)}` });
  for (const n of a.nodes) {
    for (const v of n.inputs) {
      if (!v) continue;
      const p = a.producer.get(v);
      if (p !== undefined) edge(keys[p], keys[n.index]);
      else if (graphInputs.has(v) && !a.initializers.has(v)) edge(`in:${v}`, keys[n.index]);
    }
  }
  for (const v of a.outputs) {
    add(`out:${v.name}`, { kind: 'output', label: v.name, sub: `${v.elem_type} ${shapeText(v.shape)}` });
    const p = a.producer.get(v.name);
    if (p !== undefined) edge(keys[p], `out:${v.name}`);
    else if (graphInputs.has(v.name)) edge(`in:${v.name}`, `out:${v.name}`);
  }
  return { nodes: [...out.values()], edges: [...edges.values()] };
}

export function shapeText(s) {
  if (!s) return '';
  return `[${s.map((d) => (d === null ? '?' : d)).join(', ')}]`;
}

/** Box size of a drawn node (monospace label estimate). */
export function boxSize(d) {
  const chars = Math.max(d.label.length, Math.min(d.sub?.length ?? 0, 44) * 0.8);
  return { width: Math.min(360, Math.max(70, Math.round(chars * 7.2 + 20))), height: d.sub ? 38 : 26 };
}
