// The ONNX graph view of the model inspector: the model (ctx.sources[i], i = ?gsrc= or 0) is
// read in a Worker (graph-worker.js: reader.graph()), analysed there too (graph-model.js: op-type
// counts, producers and consumers, repeated blocks, the boxes to draw for the opened blocks; small
// constants' values), and drawn here: repeated blocks (`/layers.N/`) collapsed
// to one box, laid out by elkjs (layered) in its own Worker (web-demo/vendor/elkjs, copied there
// by scripts/build-js.sh from the npm devDependency), drawn as SVG with pan (drag) and zoom
// (wheel). Beside it: op-type counts, a searchable node list (virtualised), and the selected
// node's inputs, outputs, attributes and, for an initializer, its consumers and a link to the
// tensor view (ctx.selectTensor).
//
// Stable hooks: root `data-graph-state` = `loading` | `layout` | `done` | `error`; drawn nodes
// and node-list rows carry `data-node="NAME"` (the node's name, or `OP#index` when unnamed),
// collapsed blocks `data-block="TEMPLATE"` (segments of a long graph without block names also
// `data-segment="K"`); the details panel `data-selected="NAME"`.
//
// `?blocks=off` draws every node (no blocks, no segments: the true flat graph; past 400 boxes laid
// out by graph-model.js's linear-time layeredLayout in graph-layout-worker.js, root
// `data-layout="layered"`, else `elk`; past 400 boxes only those in view are in the DOM, past
// 20,000 (`?glazy=N`: N) their elements are made when first needed or in idle time, root
// `data-made="all"` once all are); `?node=NAME` selects a node once drawn.
//
// mount(el, ctx) -> { unmount() }; ctx = { sources, selectTensor, params, setParam }.
import { boxSize, opFamily, shapeText } from './graph-model.js';
import { valuesText } from './graph-constants.js';

const STYLE_ID = 'tl-graph-style';
const ELK_WORKER = new URL('./vendor/elkjs/elk-worker.min.js', import.meta.url);
const ROW = 22;
const SVGNS = 'http://www.w3.org/2000/svg';
const CSS = `
.tl-graph { font: 13px/1.4 system-ui, sans-serif; color: #1d2433; display: grid; grid-template-columns: minmax(0, 1fr) 330px; grid-template-rows: auto minmax(0, 1fr); gap: 8px; height: min(80vh, 900px); min-height: 420px; }
.tl-graph .tl-g-head { grid-column: 1 / -1; display: flex; gap: 12px; align-items: center; flex-wrap: wrap; }
.tl-graph .tl-g-head b { font-size: 15px; }
.tl-graph .tl-g-muted { color: #6b7385; }
.tl-graph .tl-g-canvas { position: relative; border: 1px solid #d7dce6; border-radius: 6px; overflow: hidden; background: #fbfcfe; min-height: 0; }
.tl-graph .tl-g-canvas svg { width: 100%; height: 100%; display: block; cursor: grab; touch-action: none; }
.tl-graph .tl-g-canvas svg.tl-g-drag { cursor: grabbing; }
.tl-graph .tl-g-tools { position: absolute; top: 6px; left: 6px; display: flex; gap: 4px; }
.tl-graph button { font: inherit; padding: 2px 8px; border: 1px solid #b8c2d6; background: #fff; border-radius: 4px; cursor: pointer; }
.tl-graph button:hover { background: #eef2fa; }
.tl-graph .tl-g-side { display: flex; flex-direction: column; gap: 8px; min-height: 0; overflow: hidden; }
.tl-graph .tl-g-box { border: 1px solid #d7dce6; border-radius: 6px; padding: 6px 8px; background: #fff; min-height: 0; }
.tl-graph .tl-g-box h4 { margin: 0 0 4px; font-size: 13px; }
.tl-graph .tl-g-ops { max-height: 150px; overflow: auto; }
.tl-graph .tl-g-op { display: grid; grid-template-columns: 1fr auto; gap: 6px; cursor: pointer; padding: 0 2px; border-radius: 3px; }
.tl-graph .tl-g-op:hover, .tl-graph .tl-g-op.tl-g-on { background: #eef4ff; }
.tl-graph .tl-g-op i { display: block; height: 3px; background: #7c9be0; grid-column: 1 / -1; border-radius: 2px; }
.tl-graph .tl-g-list { flex: 1 1 0; display: flex; flex-direction: column; min-height: 120px; }
.tl-graph .tl-g-list input { font: inherit; padding: 3px 6px; border: 1px solid #b8c2d6; border-radius: 4px; margin-bottom: 4px; }
.tl-graph .tl-g-scroll { flex: 1 1 0; overflow: auto; position: relative; min-height: 60px; }
.tl-graph .tl-g-row { position: absolute; left: 0; right: 0; height: ${ROW}px; line-height: ${ROW}px; padding: 0 4px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; cursor: pointer; font-size: 12px; }
.tl-graph .tl-g-row:hover { background: #eef4ff; }
.tl-graph .tl-g-row.tl-g-on { background: #dbe7ff; }
.tl-graph .tl-g-row b { font-weight: 600; margin-right: 6px; }
.tl-graph .tl-g-detail { max-height: 42%; overflow: auto; font-size: 12px; }
.tl-graph .tl-g-detail code, .tl-graph .tl-g-detail a { font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
.tl-graph .tl-g-detail a { color: #2454b5; cursor: pointer; text-decoration: underline dotted; }
.tl-graph .tl-g-detail ul { margin: 2px 0 6px; padding-left: 16px; }
.tl-graph .tl-g-tag { font-size: 11px; color: #fff; background: #8a94a8; border-radius: 3px; padding: 0 4px; margin-left: 4px; }
.tl-graph .tl-g-error { grid-column: 1 / -1; color: #a3261b; background: #fdf0ee; border: 1px solid #f0c4bd; padding: 6px 10px; border-radius: 6px; overflow-wrap: anywhere; }
.tl-graph svg .tl-g-n rect { fill: #fff; stroke: #6d7fa6; stroke-width: 1; rx: 4; }
.tl-graph svg .tl-g-n.tl-g-block rect { fill: #eef3ff; stroke: #3b6fd8; stroke-width: 1.5; stroke-dasharray: 5 3; }
.tl-graph svg .tl-g-n.tl-g-io rect { fill: #f3f5f8; stroke: #98a2b6; rx: 12; }
.tl-graph svg .tl-g-n.tl-g-sel rect { stroke: #e0674f; stroke-width: 2.5; }
.tl-graph svg .tl-g-n text { font: 12px system-ui, sans-serif; fill: #1d2433; pointer-events: none; }
.tl-graph svg .tl-g-n text.tl-g-sub { font-size: 10px; fill: #6b7385; }
.tl-graph svg .tl-g-n { cursor: pointer; }
.tl-graph svg path.tl-g-e { fill: none; stroke: #98a2b6; stroke-width: 1.2; marker-end: url(#tl-g-arrow); }
.tl-graph svg path.tl-g-hit { fill: none; stroke: transparent; stroke-width: 9; cursor: help; }
.tl-graph svg path.tl-g-hit:hover + path.tl-g-e, .tl-graph svg path.tl-g-hit:hover { stroke: #e0674f55; }
.tl-graph svg .tl-g-n text.tl-g-extra { font: 10px ui-monospace, monospace; fill: #4a5468; }
.tl-graph svg .tl-g-n rect.tl-g-band { stroke: none; rx: 2; }
.tl-graph svg .tl-g-n[data-op-family=linear] rect:first-of-type { fill: #eaf1ff; }
.tl-graph svg .tl-g-n[data-op-family=norm] rect:first-of-type { fill: #eaf7ee; }
.tl-graph svg .tl-g-n[data-op-family=activation] rect:first-of-type { fill: #fdeee9; }
.tl-graph svg .tl-g-n[data-op-family=shape] rect:first-of-type { fill: #f3effa; }
.tl-graph svg .tl-g-n[data-op-family=control] rect:first-of-type { fill: #fff6dc; }
.tl-graph svg .tl-g-band.linear { fill: #3b6fd8; } .tl-graph svg .tl-g-band.norm { fill: #2f9a55; }
.tl-graph svg .tl-g-band.activation { fill: #d9573a; } .tl-graph svg .tl-g-band.elementwise { fill: #8a94a8; }
.tl-graph svg .tl-g-band.shape { fill: #8b6cc7; } .tl-graph svg .tl-g-band.control { fill: #c99a06; }
.tl-graph svg .tl-g-band.constant { fill: #5b6478; } .tl-graph svg .tl-g-band.other { fill: #b0b7c5; }
/* Level of detail: zoomed out, the second and third lines go (the op names stay); further out, every label. */
.tl-graph svg.tl-g-far .tl-g-sub, .tl-graph svg.tl-g-far .tl-g-extra { display: none; }
.tl-graph svg.tl-g-farther .tl-g-n text { display: none; }
`;

function injectStyle() {
  if (document.getElementById(STYLE_ID)) return;
  const s = document.createElement('style');
  s.id = STYLE_ID;
  s.textContent = CSS;
  document.head.append(s);
}

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

function s(tag, attrs = {}, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c) e.append(c);
  return e;
}

/** A minimal client of elkjs's worker protocol ({id, cmd} -> {id, data | error}). */
class ElkClient {
  constructor(url) {
    this.worker = new Worker(url);
    this.next = 0;
    this.pending = new Map();
    this.worker.onmessage = ({ data }) => {
      const p = this.pending.get(data.id);
      if (!p) return;
      this.pending.delete(data.id);
      if (data.error) p.reject(new Error(`layout failed: ${data.error.message ?? data.error}`));
      else p.resolve(data.data);
    };
    this.worker.onerror = (e) => {
      for (const p of this.pending.values()) p.reject(new Error(`the layout worker (${url.pathname}) failed: ${e.message || 'not found? run scripts/build-js.sh'}`));
      this.pending.clear();
    };
    this.ready = this.call({ cmd: 'register', algorithms: ['layered'] });
  }
  call(msg) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...msg, id });
    });
  }
  async layout(graph) {
    await this.ready;
    return this.call({ cmd: 'layout', graph, layoutOptions: {}, options: {} });
  }
  terminate() {
    this.worker.terminate();
  }
}

/** More boxes than this are laid out by graph-model.js's layeredLayout (in a Worker), not elkjs. */
const ELK_MAX_BOXES = 400;
/** More boxes than this keep only what the view shows in the DOM (a pan or zoom redraws that). */
const CULL_MIN_BOXES = 400;
/** More boxes than this make their SVG elements when first needed (see draw). */
const LAZY_MIN_BOXES = 20000;

/** The linear-time layered layout (graph-layout-worker.js) in a Worker: layout({nodes, edges}). */
class FastLayout {
  constructor() {
    this.worker = new Worker(new URL('./graph-layout-worker.js', import.meta.url), { type: 'module' });
    this.next = 0;
    this.pending = new Map();
    this.worker.onmessage = ({ data }) => {
      const p = this.pending.get(data.id);
      if (!p) return;
      this.pending.delete(data.id);
      if (data.error) p.reject(new Error(`layout failed: ${data.error.message}`));
      else p.resolve(data.data);
    };
    this.worker.onerror = (e) => {
      for (const p of this.pending.values()) p.reject(new Error(`the layout worker failed: ${e.message}`));
      this.pending.clear();
    };
  }
  layout(graph) {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, graph });
    });
  }
  terminate() {
    this.worker.terminate();
  }
}

/** Mounts the graph view in `el`. */
export function mount(el, ctx) {
  injectStyle();
  const root = h('div', { class: 'tl-graph', dataset: { graphState: 'loading' } });
  el.append(root);
  const si = Math.min(Number(ctx.params?.get('gsrc') ?? 0) || 0, Math.max(0, (ctx.sources?.length ?? 1) - 1));
  const src = ctx.sources?.[si];
  const head = h('div', { class: 'tl-g-head' }, h('b', {}, `Graph of ${src?.name ?? '?'}`), h('span', { class: 'tl-g-muted' }, 'reading the graph…'));
  root.append(head);
  const setState = (v) => (root.dataset.graphState = v);
  const fail = (msg) => {
    setState('error');
    root.append(h('div', { class: 'tl-g-error', role: 'alert' }, msg));
  };
  let worker = null;
  let elk = null;
  let fast = null;
  let dead = false;
  const cleanup = () => {
    dead = true;
    worker?.terminate();
    elk?.terminate();
    fast?.terminate();
  };
  if (!src) {
    fail('Open an ONNX model to see its graph.');
    return { unmount: () => (cleanup(), root.remove()) };
  }

  const t0 = performance.now();
  worker = new Worker(new URL('./graph-worker.js', import.meta.url), { type: 'module' });
  worker.onerror = (e) => fail(`the graph worker failed to start: ${e.message ?? e}`);
  worker.onmessage = ({ data }) => {
    // `?blocks=off`: the true flat graph, every node a box (no blocks, no segments). The Worker
    // analyses the graph too (a 100k-node graph's blocks take seconds: never on this thread).
    const flat = ctx.params?.get('blocks') === 'off';
    if (data.type === 'ready') worker.postMessage({ cmd: 'graph', source: { name: src.name, file: src.file, url: src.url }, companions: src.companions, analyze: { blocks: !flat, segments: !flat } });
    else if (data.type === 'error') {
      fail(data.error.message);
      worker.terminate();
    } else if (data.type === 'piece') {
      pieces.nodes.push(...data.nodes);
      for (const [k, v] of data.producer) pieces.producer.set(k, v);
      for (const [k, v] of data.consumers) pieces.consumers.set(k, v);
    } else if (data.type === 'display') {
      const p = displays.get(data.id);
      displays.delete(data.id);
      if (data.error) p?.reject(new Error(data.error.message));
      else p?.resolve(data.display);
    } else if (data.type === 'done') {
      // The Worker stays: it keeps the analysis and answers which boxes to draw (displayIn).
      Object.assign(data.analysis, pieces);
      if (!dead) show(data);
    }
  };
  // The analysis's nodes, producers and consumers, as they come (graph-worker.js sends them in pieces).
  const pieces = { nodes: [], producer: new Map(), consumers: new Map() };
  const displays = new Map();
  let nextDisplay = 1;
  /** graph-model.js's displayGraph(analysis, expanded), run in the graph Worker. */
  const displayIn = (expanded) =>
    new Promise((resolve, reject) => {
      const id = nextDisplay++;
      displays.set(id, { resolve, reject });
      worker.postMessage({ cmd: 'display', id, expanded });
    });
  /** Lets the page's thread draw and take input between the steps of a large graph's first draw. */
  const breathe = () => new Promise((r) => setTimeout(r, 0));

  async function show({ graph, analysis: a, arch, constants, tensors, bytesRead, ms, analyzeMs }) {
    // A task of its own (the message that brought the graph was one).
    await breathe();
    if (dead) return;
    root.dataset.analyzeMs = analyzeMs.toFixed(0);
    // Small constants drawn in their nodes: initializers by name, Constant nodes by index.
    const constInit = new Map(Object.entries(constants?.initializers ?? {}));
    const constNode = new Map(constants?.nodes ?? []);
    const tensorInfo = new Map(tensors.map((t) => [t.name, t]));
    const byId = new Map(a.nodes.map((n) => [n.id, n]));
    await breathe();
    if (dead) return;
    const expanded = new Map();
    let selected = null;
    let opFilter = '';
    let query = '';
    const timing = { readMs: ms, bytesRead };
    const meta = h('span', { class: 'tl-g-muted' });
    const opsets = Object.entries(graph.opset_import).map(([d, v]) => `${d} ${v}`).join(', ');
    meta.textContent = `${a.nodes.length.toLocaleString()} nodes · ${a.initializers.size.toLocaleString()} initializers · ${a.families.length} repeated block${a.families.length === 1 ? '' : 's'} · opset ${opsets || '?'}${graph.producer_name ? ` · ${graph.producer_name} ${graph.producer_version}` : ''} · read ${(bytesRead / 1024).toFixed(0)} KiB in ${ms.toFixed(0)} ms`;
    head.replaceChildren(head.firstChild, meta);

    // --- the drawing
    const svg = s('svg', { role: 'img', 'aria-label': 'model graph' });
    const defs = s('defs', {}, s('marker', { id: 'tl-g-arrow', viewBox: '0 0 10 10', refX: '10', refY: '5', markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' }, s('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#98a2b6' })));
    const world = s('g');
    svg.append(defs, world);
    const status = h('span', { class: 'tl-g-muted' });
    const fitBtn = h('button', { type: 'button', onclick: () => fit() }, 'Fit');
    const collapseBtn = h('button', { type: 'button', onclick: () => (expanded.clear(), relayout()) }, 'Collapse all');
    const canvas = h('div', { class: 'tl-g-canvas' }, svg, h('div', { class: 'tl-g-tools' }, fitBtn, collapseBtn, status));
    let view = { x: 0, y: 0, k: 1 };
    let bounds = { w: 1, h: 1 };
    // Level of detail: labels at 12 px are unreadable below about half scale.
    let items = [];
    /** Node id -> its box's position (centre() needs it before its element is made). */
    let nodeAt = new Map();
    let culling = false;
    let overview = null;
    let cullFrame = 0;
    const apply = () => {
      world.setAttribute('transform', `translate(${view.x},${view.y}) scale(${view.k})`);
      svg.classList.toggle('tl-g-far', view.k < 0.55);
      svg.classList.toggle('tl-g-farther', view.k < 0.3);
      root.dataset.zoom = view.k.toFixed(3);
      if (culling && !cullFrame) cullFrame = requestAnimationFrame(cull);
    };
    /** The boxes and edges in (or near) the view, or the two-path overview when far out. */
    function cull() {
      cullFrame = 0;
      if (!culling) return;
      const r = svg.getBoundingClientRect();
      if (view.k < 0.3) {
        if (world.firstChild !== overview[0]) world.replaceChildren(...overview);
        root.dataset.inDom = '0';
        return;
      }
      const m = 200 / view.k;
      const x0 = -view.x / view.k - m;
      const y0 = -view.y / view.k - m;
      const x1 = (r.width - view.x) / view.k + m;
      const y1 = (r.height - view.y) / view.k + m;
      const frag = document.createDocumentFragment();
      let n = 0;
      for (const it of items) {
        if (it.x1 < x0 || it.x0 > x1 || it.y1 < y0 || it.y0 > y1) continue;
        it.els ??= it.make();
        for (const e of it.els) frag.append(e);
        n++;
      }
      world.replaceChildren(frag);
      root.dataset.inDom = String(n);
    }
    function fit() {
      const r = svg.getBoundingClientRect();
      const k = Math.min(2, (r.width - 20) / bounds.w, (r.height - 20) / bounds.h);
      view = { k, x: (r.width - bounds.w * k) / 2, y: Math.max(10, (r.height - bounds.h * k) / 2) };
      if (bounds.h * k > r.height) view.y = 10;
      apply();
    }
    svg.addEventListener(
      'wheel',
      (e) => {
        e.preventDefault();
        const r = svg.getBoundingClientRect();
        const px = e.clientX - r.left;
        const py = e.clientY - r.top;
        const f = Math.exp(-e.deltaY * 0.0015);
        const k = Math.min(8, Math.max(0.02, view.k * f));
        view.x = px - ((px - view.x) * k) / view.k;
        view.y = py - ((py - view.y) * k) / view.k;
        view.k = k;
        apply();
      },
      { passive: false },
    );
    let drag = null;
    svg.addEventListener('pointerdown', (e) => {
      drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, moved: false, target: e.target.closest?.('.tl-g-n') };
      svg.setPointerCapture(e.pointerId);
      svg.classList.add('tl-g-drag');
    });
    svg.addEventListener('pointermove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x;
      const dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      view.x = drag.vx + dx;
      view.y = drag.vy + dy;
      apply();
    });
    svg.addEventListener('pointerup', (e) => {
      const d = drag;
      drag = null;
      svg.classList.remove('tl-g-drag');
      if (d && !d.moved && d.target) clickDrawn(d.target);
    });
    svg.addEventListener('keydown', (e) => {
      const step = 40;
      if (e.key === 'ArrowLeft') view.x += step;
      else if (e.key === 'ArrowRight') view.x -= step;
      else if (e.key === 'ArrowUp') view.y += step;
      else if (e.key === 'ArrowDown') view.y -= step;
      else if (e.key === '+' || e.key === '=') view.k *= 1.2;
      else if (e.key === '-') view.k /= 1.2;
      else return;
      e.preventDefault();
      apply();
    });
    svg.setAttribute('tabindex', '0');

    function clickDrawn(g) {
      if (g.dataset.segment !== undefined) {
        expanded.set(Number(g.dataset.family), Number(g.dataset.segment));
        relayout();
      } else if (g.dataset.block !== undefined) {
        const f = Number(g.dataset.family);
        const fam = a.families[f];
        if (expanded.has(f) && g.dataset.rest === '1') {
          expanded.delete(f);
        } else {
          expanded.set(f, fam.instances[0]);
        }
        relayout();
      } else if (g.dataset.node !== undefined) {
        select(g.dataset.node, false);
      }
    }

    /** A node's third line: its initializers' shapes (weights) and a Constant's value summary. */
    function inline(n) {
      const parts = [];
      for (const v of n.inputs) {
        if (!v || !a.initializers.has(v)) continue;
        const t = tensorInfo.get(v);
        const short = v.split(/[./]/).filter(Boolean).slice(-2).join('.');
        const c = constInit.get(v);
        parts.push(c ? `${short} = ${valuesText(c.values, c.shape)}` : `${short} ${t ? shapeText(t.shape) : ''}`.trim());
      }
      if (n.op_type === 'Constant') {
        const c = constNode.get(n.index);
        for (const x of n.attributes) parts.push(`${x.name} = ${x.name === 'value' && c ? valuesText(c.values, c.shape) : x.summary}`);
      }
      return parts.length ? parts.join(', ') : undefined;
    }

    let layoutSeq = 0;
    let drawnNodes = new Map();
    async function relayout() {
      const seq = ++layoutSeq;
      setState('layout');
      const t1 = performance.now();
      let d;
      try {
        d = await displayIn(expanded);
      } catch (e) {
        if (seq === layoutSeq) fail(e.message);
        return;
      }
      if (seq !== layoutSeq || dead) return;
      for (const n of d.nodes) if (n.kind === 'node') n.extra = inline(a.nodes[n.node]);
      status.textContent = `laying out ${d.nodes.length} boxes…`;
      const g = {
        id: 'root',
        layoutOptions: {
          'elk.algorithm': 'layered',
          'elk.direction': 'DOWN',
          'elk.spacing.nodeNode': '18',
          'elk.layered.spacing.nodeNodeBetweenLayers': '28',
          'elk.edgeRouting': 'POLYLINE',
          'elk.layered.thoroughness': d.nodes.length > 100 ? '1' : '3',
        },
        children: d.nodes.map((n) => ({ id: n.id, ...boxSize(n) })),
        edges: d.edges.map((e) => ({ id: e.id, sources: [e.source], targets: [e.target] })),
      };
      let out;
      try {
        if (d.nodes.length > ELK_MAX_BOXES) {
          // Thousands of boxes: the linear-time layered layout, in its own Worker (elkjs would take minutes).
          g.children.forEach((c, i) => Object.assign(d.nodes[i], { width: c.width, height: c.height }));
          fast ??= new FastLayout();
          out = await fast.layout({ nodes: d.nodes.map(({ id, width, height }) => ({ id, width, height })), edges: d.edges.map(({ id, source, target }) => ({ id, source, target })) });
          root.dataset.layout = 'layered';
        } else {
          elk ??= new ElkClient(ELK_WORKER);
          out = await elk.layout(g);
          root.dataset.layout = 'elk';
        }
      } catch (e) {
        if (seq === layoutSeq) fail(e.message);
        return;
      }
      if (seq !== layoutSeq || dead) return;
      draw(d, out);
      timing.layoutMs = performance.now() - t1;
      status.textContent = `${d.nodes.length} boxes · layout ${timing.layoutMs.toFixed(0)} ms`;
      root.dataset.layoutMs = String(Math.round(timing.layoutMs));
      root.dataset.totalMs = String(Math.round(performance.now() - t0));
      root.dataset.drawnBoxes = String(d.nodes.length);
      setState('done');
    }

    function draw(d, out) {
      const pos = new Map(out.children.map((c) => [c.id, c]));
      items = [];
      // Tens of thousands of boxes: their elements are made when first in view or in idle time,
      // not all at once (a long task); below that, at once (panning then only moves them: a
      // 5,049-box graph made lazily panned at p95 40 ms, made at once 18 ms).
      const lazy = d.nodes.length > (Number(ctx.params?.get('glazy')) || LAZY_MIN_BOXES);
      const frag = document.createDocumentFragment();
      const valuesOf = new Map(d.edges.map((e) => [e.id, e.values ?? []]));
      for (const e of out.edges ?? []) {
        // Hovering an edge names the values it carries, with their shapes where the file says them.
        const carried = valuesOf.get(e.id) ?? [];
        const text = carried.map((v) => `${v}${valueShape(v)}`).join('\n');
        for (const sec of e.sections ?? []) {
          const pts = [sec.startPoint, ...(sec.bendPoints ?? []), sec.endPoint];
          const make = () => {
            const path = `M${pts.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' L')}`;
            const hit = s('path', { class: 'tl-g-hit', d: path, dataset: { edge: e.id, values: carried.join(' ') } });
            const title = s('title');
            title.textContent = text || e.id;
            hit.append(title);
            return [hit, s('path', { class: 'tl-g-e', d: path })];
          };
          const xs = pts.map((q) => q.x);
          const ys = pts.map((q) => q.y);
          const it = { make, x0: Math.min(...xs), y0: Math.min(...ys), x1: Math.max(...xs), y1: Math.max(...ys) };
          if (!lazy) frag.append(...(it.els = make()));
          items.push(it);
        }
      }
      drawnNodes = new Map();
      nodeAt = new Map();
      for (const n of d.nodes) {
        const p = pos.get(n.id);
        if (!p) continue;
        const make = () => {
        const cls = n.kind === 'block' ? 'tl-g-n tl-g-block' : n.kind === 'node' ? 'tl-g-n' : 'tl-g-n tl-g-io';
        const attrs = { class: cls, transform: `translate(${p.x},${p.y})` };
        const ds = {};
        if (n.kind === 'node') Object.assign(ds, { node: a.nodes[n.node].id, opFamily: opFamily(a.nodes[n.node].op_type) });
        if (n.kind === 'block') Object.assign(ds, { block: a.families[n.family].template, family: String(n.family), rest: n.id.endsWith(':rest') ? '1' : '0' }, n.instance !== undefined ? { segment: String(n.instance) } : {});
        if (n.kind === 'input' || n.kind === 'output') ds.value = n.label;
        const g = s('g', { ...attrs, dataset: ds });
        const title = s('title');
        title.textContent = n.kind === 'block' ? `${n.label} ${n.sub}: click to ${n.id.endsWith(':rest') ? 'collapse' : n.instance !== undefined ? 'open this segment' : 'expand one block'}` : `${n.label} ${n.sub ?? ''}`;
        g.append(title, s('rect', { width: p.width, height: p.height }));
        if (ds.opFamily) g.append(s('rect', { class: `tl-g-band ${ds.opFamily}`, x: 0, y: 0, width: 4, height: p.height }));
        const label = s('text', { x: 8, y: n.sub ? 15 : 17 });
        label.textContent = n.kind === 'block' ? `▣ ${clip(n.label, 48)}` : clip(n.label, 48);
        g.append(label);
        if (n.sub) {
          const sub = s('text', { class: 'tl-g-sub', x: 8, y: 30 });
          sub.textContent = clip(n.sub, 52);
          g.append(sub);
        }
        if (n.extra) {
          const extra = s('text', { class: 'tl-g-extra', x: 8, y: 45 });
          extra.textContent = clip(n.extra, 52);
          g.append(extra);
        }
        if (ds.node) {
          drawnNodes.set(ds.node, g);
          if (ds.node === selected) g.classList.add('tl-g-sel');
        }
        return [g];
        };
        if (n.kind === 'node') nodeAt.set(a.nodes[n.node].id, p);
        const it = { make, x0: p.x, y0: p.y, x1: p.x + p.width, y1: p.y + p.height, box: true };
        if (!lazy) frag.append(...(it.els = make()));
        items.push(it);
      }
      culling = d.nodes.length > CULL_MIN_BOXES;
      overview = null;
      if (culling) {
        // Thousands of boxes: only what the view shows is in the DOM (cull), and far out the whole
        // graph is two paths (its boxes and its edges), the shape of the model.
        // The outline is a bitmap drawn once (a canvas, as an SVG image): panning and zooming a
        // picture costs a blit, a path of thousands of boxes a rasterisation every frame.
        const W = Math.max(1, out.width ?? 1);
        const H = Math.max(1, out.height ?? 1);
        const sc = Math.min(1, 4096 / Math.max(W, H));
        const cv = document.createElement('canvas');
        cv.width = Math.max(1, Math.round(W * sc));
        cv.height = Math.max(1, Math.round(H * sc));
        const c2 = cv.getContext('2d');
        c2.scale(sc, sc);
        c2.strokeStyle = '#98a2b6';
        c2.lineWidth = 1 / sc;
        c2.beginPath();
        for (const e of out.edges ?? []) {
          for (const sec of e.sections ?? []) {
            const pts = [sec.startPoint, ...(sec.bendPoints ?? []), sec.endPoint];
            c2.moveTo(pts[0].x, pts[0].y);
            for (const q of pts.slice(1)) c2.lineTo(q.x, q.y);
          }
        }
        c2.stroke();
        c2.fillStyle = '#dbe4f7';
        c2.strokeStyle = '#6d7fa6';
        for (const it of items) {
          if (!it.box) continue;
          c2.fillRect(it.x0, it.y0, it.x1 - it.x0, it.y1 - it.y0);
          c2.strokeRect(it.x0, it.y0, it.x1 - it.x0, it.y1 - it.y0);
        }
        overview = [s('image', { href: cv.toDataURL('image/png'), x: 0, y: 0, width: W, height: H, preserveAspectRatio: 'none', class: 'tl-g-outline' })];
        world.replaceChildren();
        root.dataset.culled = 'true';
        // The elements not yet made are made in idle time, a few hundred at a time, so a later pan
        // only moves them in and out of the DOM.
        const mine = items;
        let at = 0;
        const idle = window.requestIdleCallback ?? ((f) => setTimeout(() => f({ timeRemaining: () => 8 }), 16));
        const work = (deadline) => {
          if (items !== mine || dead) return;
          for (let k = 0; at < mine.length && (k < 50 || deadline.timeRemaining() > 2); k++, at++) mine[at].els ??= mine[at].make();
          if (at < mine.length) idle(work);
          else root.dataset.made = 'all';
        };
        idle(work);
      } else {
        world.replaceChildren(frag);
        delete root.dataset.culled;
      }
      bounds = { w: Math.max(1, out.width ?? 1), h: Math.max(1, out.height ?? 1) };
      fit();
      markSelected();
    }

    // --- op-type counts
    const max = a.opCounts[0]?.count ?? 1;
    const ops = h('div', { class: 'tl-g-ops' });
    for (const { op, count } of a.opCounts) {
      const row = h('div', { class: 'tl-g-op', dataset: { op }, title: `show only ${op} nodes` }, h('span', {}, op), h('span', {}, String(count)), h('i', { style: `width:${Math.max(2, (100 * count) / max)}%` }));
      row.addEventListener('click', () => {
        opFilter = opFilter === op ? '' : op;
        for (const r of ops.children) r.classList.toggle('tl-g-on', r.dataset.op === opFilter);
        filterList();
      });
      ops.append(row);
    }

    // --- node list (virtualised)
    const search = h('input', { type: 'search', placeholder: 'search nodes, values, initializers…', 'aria-label': 'search nodes' });
    const scroll = h('div', { class: 'tl-g-scroll', tabindex: '0' });
    const spacer = h('div', { style: 'position:relative' });
    scroll.append(spacer);
    let listed = a.nodes;
    const listCount = h('span', { class: 'tl-g-muted' });
    function filterList() {
      const q = query.toLowerCase();
      listed = a.nodes.filter((n) => {
        const op = n.domain ? `${n.domain}.${n.op_type}` : n.op_type;
        if (opFilter && op !== opFilter) return false;
        if (!q) return true;
        return n.id.toLowerCase().includes(q) || n.op_type.toLowerCase().includes(q) || n.inputs.some((v) => v.toLowerCase().includes(q)) || n.outputs.some((v) => v.toLowerCase().includes(q));
      });
      listCount.textContent = ` ${listed.length.toLocaleString()} of ${a.nodes.length.toLocaleString()}`;
      spacer.style.height = `${listed.length * ROW}px`;
      scroll.scrollTop = 0;
      paintRows();
    }
    function paintRows() {
      const top = scroll.scrollTop;
      const first = Math.max(0, Math.floor(top / ROW) - 5);
      const last = Math.min(listed.length, first + Math.ceil((scroll.clientHeight || 400) / ROW) + 10);
      const frag = document.createDocumentFragment();
      for (let i = first; i < last; i++) {
        const n = listed[i];
        const row = h('div', { class: `tl-g-row${selected === n.id ? ' tl-g-on' : ''}`, style: `top:${i * ROW}px`, dataset: { node: n.id }, title: n.id }, h('b', {}, n.op_type), n.name || h('span', { class: 'tl-g-muted' }, `(unnamed #${n.index})`));
        frag.append(row);
      }
      spacer.replaceChildren(frag);
    }
    scroll.addEventListener('scroll', () => requestAnimationFrame(paintRows));
    scroll.addEventListener('click', (e) => {
      const r = e.target.closest('[data-node]');
      if (r) select(r.dataset.node, true);
    });
    let searchTimer = 0;
    search.addEventListener('input', () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => {
        query = search.value.trim();
        filterList();
        const v = query;
        if (a.initializers.has(v) || a.consumers.has(v)) showValue(v);
      }, 120);
    });

    // --- details
    const detail = h('div', { class: 'tl-g-box tl-g-detail' }, h('span', { class: 'tl-g-muted' }, 'Click a node (or a block to expand it).'));
    const link = (text, onclick, title) => h('a', { onclick, title: title ?? '' }, text);
    const valueItem = (v) => {
      if (!v) return h('li', { class: 'tl-g-muted' }, '(omitted)');
      const li = h('li', {});
      if (a.initializers.has(v)) {
        const t = tensorInfo.get(v);
        li.append(link(v, () => ctx.selectTensor?.(si, v), 'open this tensor'), h('span', { class: 'tl-g-tag' }, 'initializer'), t ? ` ${t.dtype} ${shapeText(t.shape)}` : '', constInit.has(v) ? h('code', { class: 'tl-g-const' }, ` = ${valuesText(constInit.get(v).values, constInit.get(v).shape)}`) : '', ' · ', link(plural(a.consumers.get(v)?.length ?? 0, 'consumer'), () => showValue(v), 'show its consumers'));
      } else {
        const p = a.producer.get(v);
        li.append(link(v, () => showValue(v), 'show producer and consumers'));
        if (p !== undefined) li.append(h('span', { class: 'tl-g-muted' }, ` ← ${a.nodes[p].op_type}`));
        else li.append(h('span', { class: 'tl-g-tag' }, 'graph input'));
      }
      return li;
    };
    function showNode(n) {
      detail.dataset.selected = n.id;
      const consumersOf = n.outputs.flatMap((o) => a.consumers.get(o) ?? []);
      const famNote = n.family >= 0 ? h('div', { class: 'tl-g-muted' }, `block ${n.instance} of ${a.families[n.family].label}`) : null;
      detail.replaceChildren(
        ...[
        h('h4', {}, `${n.op_type}${n.domain ? ` (${n.domain})` : ''}`),
        h('div', {}, h('code', {}, n.name || `(unnamed #${n.index})`)),
        famNote,
        h('div', {}, h('b', {}, 'Inputs')),
        h('ul', {}, ...n.inputs.map(valueItem)),
        h('div', {}, h('b', {}, 'Outputs')),
        h('ul', {}, ...n.outputs.map(valueItem)),
        n.attributes.length ? h('div', {}, h('b', {}, 'Attributes')) : null,
        n.attributes.length ? h('ul', {}, ...n.attributes.map((x) => h('li', {}, h('code', {}, x.name), ` (${x.kind}) = `, h('code', {}, x.summary), x.name === 'value' && constNode.has(n.index) ? h('code', { class: 'tl-g-const' }, ` = ${valuesText(constNode.get(n.index).values, constNode.get(n.index).shape)}`) : null))) : null,
        h('div', {}, h('b', {}, `Consumers (${consumersOf.length})`)),
        h('ul', {}, ...consumersOf.slice(0, 200).map((k) => h('li', {}, link(`${a.nodes[k].op_type} ${a.nodes[k].id}`, () => select(a.nodes[k].id, true))))),
        ].filter(Boolean),
      );
    }
    function showValue(v) {
      detail.dataset.selected = v;
      const cons = a.consumers.get(v) ?? [];
      const p = a.producer.get(v);
      const t = tensorInfo.get(v);
      detail.replaceChildren(
        ...[
        h('h4', {}, a.initializers.has(v) ? 'Initializer' : 'Value'),
        h('div', {}, h('code', {}, v)),
        t ? h('div', {}, `${t.dtype} ${shapeText(t.shape)} · `, link('open tensor', () => ctx.selectTensor?.(si, v))) : null,
        p !== undefined ? h('div', {}, 'produced by ', link(`${a.nodes[p].op_type} ${a.nodes[p].id}`, () => select(a.nodes[p].id, true))) : null,
        h('div', {}, h('b', {}, `Consumers (${cons.length})`)),
        h('ul', { dataset: { consumersOf: v } }, ...cons.slice(0, 500).map((k) => h('li', { dataset: { consumer: a.nodes[k].id } }, link(`${a.nodes[k].op_type} ${a.nodes[k].id}`, () => select(a.nodes[k].id, true))))),
        ].filter(Boolean),
      );
    }
    /** ` dtype [shape]` of a value where the file declares it (graph inputs, outputs, initializers). */
    function valueShape(v) {
      const t = tensorInfo.get(v);
      if (t) return ` ${t.dtype} ${shapeText(t.shape)}`;
      const io = graph.inputs.find((x) => x.name === v) ?? graph.outputs.find((x) => x.name === v);
      return io ? ` ${io.elem_type} ${shapeText(io.shape)}` : '';
    }
    function markSelected() {
      for (const g of world.querySelectorAll('.tl-g-sel')) g.classList.remove('tl-g-sel');
      for (const g of drawnNodes.values()) if (g.classList.contains('tl-g-sel')) g.classList.remove('tl-g-sel');
      const g = selected && drawnNodes.get(selected);
      if (g) g.classList.add('tl-g-sel');
    }
    /** Selects node `id`: details, list highlight, and (when `reveal`) expands its block and centres it. */
    function select(id, reveal) {
      const n = byId.get(id);
      if (!n) return;
      selected = id;
      ctx.setParam?.('node', id);
      showNode(n);
      paintRows();
      if (reveal && n.family >= 0 && expanded.get(n.family) !== n.instance) {
        expanded.set(n.family, n.instance);
        relayout().then(() => centre(id));
      } else {
        markSelected();
        if (reveal) centre(id);
      }
    }
    function centre(id) {
      const p = nodeAt.get(id);
      if (!p) return;
      const r = svg.getBoundingClientRect();
      view.k = Math.max(view.k, 0.8);
      view.x = r.width / 2 - (p.x + p.width / 2) * view.k;
      view.y = r.height / 2 - (p.y + p.height / 2) * view.k;
      apply();
    }

    // The architecture beside the graph, from the initializers' names (as the Architecture tab;
    // found in graph-worker.js).
    const fmtN = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)} k` : String(n));
    const archBox = arch
      ? h(
          'div',
          { class: 'tl-g-box tl-g-arch', dataset: { layers: String(arch.layers), params: String(arch.params) } },
          h('h4', {}, 'Architecture'),
          h('div', {}, `${arch.embedding.tensors.length ? 'embedding → ' : ''}${arch.layers} × (${arch.block.parts.map((p) => `${p.label} ${fmtN(p.params)}`).join(', ')}) → ${arch.norm.tensors.length ? 'norm → ' : ''}${arch.head.tensors.length ? 'head' : 'tied head'}`),
          h('div', { class: 'tl-g-muted' }, `${fmtN(arch.block.params)} params a block · ${fmtN(arch.params)} in all · `, ctx.showArchitecture ? h('a', { onclick: () => ctx.showArchitecture(), style: 'cursor:pointer;text-decoration:underline dotted' }, 'details') : ''),
        )
      : null;
    const side = h(
      'div',
      { class: 'tl-g-side' },
      archBox,
      h('div', { class: 'tl-g-box' }, h('h4', {}, `Op types (${a.opCounts.length})`), ops),
      h('div', { class: 'tl-g-box tl-g-list' }, h('h4', {}, 'Nodes', listCount), search, scroll),
      detail,
    );
    root.append(canvas, side);
    await breathe();
    if (dead) return;
    filterList();
    await breathe();
    if (dead) return;
    relayout().then(() => {
      const want = ctx.params?.get('node');
      if (want && byId.has(want)) select(want, true);
    });
  }

  return {
    unmount() {
      cleanup();
      root.remove();
    },
  };
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function clip(t, n) {
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}
