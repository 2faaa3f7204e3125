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
// out by graph-model.js's linear-time layeredLayout in the graph Worker, which sends the layout as
// typed arrays with a grid index (packLayout) and the outline as a PNG, root
// `data-layout="layered"`, else `elk`; past 400 boxes only those in view are in the DOM (found
// through the grid index, root `data-in-dom` = how many), far out the outline bitmap; past 20,000
// (`?glazy=N`: N) their elements are made when first needed or in idle time, root
// `data-made="all"` once all are); `?node=NAME` selects a node once drawn.
//
// mount(el, ctx) -> { unmount() }; ctx = { sources, selectTensor, params, setParam }.
import { boxSize, inlineText, itemsIn, NodeTable, opFamily, packLayout, shapeText } from './graph-model.js';
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
  let dead = false;
  const cleanup = () => {
    dead = true;
    worker?.terminate();
    elk?.terminate();
  };
  if (!src) {
    fail('Open an ONNX model to see its graph.');
    return { unmount: () => (cleanup(), root.remove()) };
  }

  const t0 = performance.now();
  worker = new Worker(new URL('./graph-worker.js', import.meta.url), { type: 'module' });
  worker.onerror = (e) => fail(`the graph worker failed to start: ${e.message ?? e}`);
  worker.onmessage = ({ data }) => {
    if (dead) return;
    // `?blocks=off`: the true flat graph, every node a box (no blocks, no segments). The Worker
    // analyses the graph too (a 100k-node graph's blocks take seconds: never on this thread).
    const flat = ctx.params?.get('blocks') === 'off';
    if (data.type === 'ready') worker.postMessage({ cmd: 'graph', source: { name: src.name, file: src.file, url: src.url }, companions: src.companions, analyze: { blocks: !flat, segments: !flat } });
    else if (data.type === 'error') {
      fail(data.error.message);
      worker.terminate();
    } else if (data.type === 'nodes') {
      nodes = new NodeTable(data.table);
    } else if (data.type === 'display') {
      const p = displays.get(data.id);
      displays.delete(data.id);
      if (data.error) p?.reject(new Error(data.error.message));
      else p?.resolve(data);
    } else if (data.type === 'done') {
      // The Worker stays: it keeps the analysis and answers which boxes to draw (displayIn).
      if (!dead) show(data);
    }
  };
  // The analysis's nodes, producers and consumers (graph-model.js's NodeTable over the typed arrays graph-worker.js sends).
  let nodes = null;
  const displays = new Map();
  let nextDisplay = 1;
  /**
   * graph-model.js's displayGraph(analysis, expanded), run in the graph Worker: `{display}` (sized
   * boxes, for elkjs), or past ELK_MAX_BOXES boxes laid out there: `{packed, outline}`.
   */
  const displayIn = (expanded) =>
    new Promise((resolve, reject) => {
      const id = nextDisplay++;
      displays.set(id, { resolve, reject });
      worker.postMessage({ cmd: 'display', id, expanded, elkMax: ELK_MAX_BOXES });
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
    const T = nodes;
    const inlineCtx = { initializers: a.initializers, tensorInfo, constInit, constNode };
    await breathe();
    if (dead) return;
    const expanded = new Map();
    let selected = null;
    let opFilter = '';
    let query = '';
    const timing = { readMs: ms, bytesRead };
    const meta = h('span', { class: 'tl-g-muted' });
    const opsets = Object.entries(graph.opset_import).map(([d, v]) => `${d} ${v}`).join(', ');
    meta.textContent = `${T.length.toLocaleString()} nodes · ${a.initializers.size.toLocaleString()} initializers · ${a.families.length} repeated block${a.families.length === 1 ? '' : 's'} · opset ${opsets || '?'}${graph.producer_name ? ` · ${graph.producer_name} ${graph.producer_version}` : ''} · read ${(bytesRead / 1024).toFixed(0)} KiB in ${ms.toFixed(0)} ms`;
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
    /** The drawing (graph-model.js's packLayout) and its elements, made when first needed (index: box i, section boxes + j). */
    let P = null;
    let els = [];
    /** Node index -> its box (centre() needs the position before the element is made), or -1. */
    let boxOfNode = new Int32Array(0);
    let stamp = new Uint32Array(0);
    let mark = 0;
    let culling = false;
    let overview = null;
    let outlineUrl = null;
    let cullFrame = 0;
    /** The items cull() last put in the DOM, in order. */
    let shown = [];
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
      if (view.k < 0.3 && overview) {
        if (world.firstChild !== overview[0]) world.replaceChildren(...overview);
        root.dataset.inDom = '0';
        return;
      }
      const m = 200 / view.k;
      const x0 = -view.x / view.k - m;
      const y0 = -view.y / view.k - m;
      const x1 = (r.width - view.x) / view.k + m;
      const y1 = (r.height - view.y) / view.k + m;
      // The grid index gives the items near the view (not a walk over all of them); edges first, boxes over them.
      const { boxes, sections } = itemsIn(P, x0, y0, x1, y1, stamp, ++mark);
      const ids = [...sections.map((j) => P.boxes + j), ...boxes];
      // Most frames of a pan meet the same items: then the DOM is left as it is (no re-insertion,
      // no style recalculation of what is already there).
      if (world.firstChild !== overview?.[0] && ids.length === shown.length && ids.every((k, n) => k === shown[n])) return;
      shown = ids;
      const frag = document.createDocumentFragment();
      for (const k of ids) frag.append(...(els[k] ??= k < P.boxes ? makeBox(k) : makeSection(k - P.boxes)));
      world.replaceChildren(frag);
      root.dataset.inDom = String(ids.length);
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

    let layoutSeq = 0;
    let drawnNodes = new Map();
    async function relayout() {
      const seq = ++layoutSeq;
      setState('layout');
      const t1 = performance.now();
      let r;
      try {
        r = await displayIn(expanded);
      } catch (e) {
        if (seq === layoutSeq) fail(e.message);
        return;
      }
      if (seq !== layoutSeq || dead) return;
      let packed = r.packed;
      if (packed) root.dataset.layout = 'layered';
      else {
        // A few hundred boxes at most: elkjs's layered layout, in its own Worker.
        const d = r.display;
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
        try {
          elk ??= new ElkClient(ELK_WORKER);
          packed = packLayout(d, await elk.layout(g));
        } catch (e) {
          if (seq === layoutSeq) fail(e.message);
          return;
        }
        if (seq !== layoutSeq || dead) return;
        root.dataset.layout = 'elk';
      }
      draw(packed, r.outline);
      timing.layoutMs = performance.now() - t1;
      status.textContent = `${packed.boxes} boxes · layout ${timing.layoutMs.toFixed(0)} ms`;
      root.dataset.layoutMs = String(Math.round(timing.layoutMs));
      root.dataset.totalMs = String(Math.round(performance.now() - t0));
      root.dataset.drawnBoxes = String(packed.boxes);
      setState('done');
    }

    /** Box `i` of the drawing as displayGraph gave it: `{id, kind, label, sub, extra?, node?, family?, instance?}`. */
    let othersOf = new Map();
    function boxInfo(i) {
      if (P.node[i] < 0) return othersOf.get(i);
      const nd = T.get(P.node[i]);
      return { id: `node:${nd.id}`, kind: 'node', node: nd.index, label: nd.op_type, sub: nd.name, extra: inlineText(nd, inlineCtx) };
    }
    const boxId = (i) => (P.node[i] < 0 ? othersOf.get(i).id : `node:${T.idOf(P.node[i])}`);
    /** The elements of edge section `j`: a wide transparent path to hover (its title names the values carried) and the line. */
    function makeSection(j) {
      const pts = [];
      for (let q = P.ptStart[j]; q < P.ptStart[j + 1]; q++) pts.push(`${P.pts[2 * q].toFixed(1)},${P.pts[2 * q + 1].toFixed(1)}`);
      const path = `M${pts.join(' L')}`;
      const carried = P.values.slice(P.valStart[j], P.valStart[j + 1]).split('\n').filter(Boolean);
      const id = `${boxId(P.from[j])}->${boxId(P.to[j])}`;
      const hit = s('path', { class: 'tl-g-hit', d: path, dataset: { edge: id, values: carried.join(' ') } });
      const title = s('title');
      // Hovering an edge names the values it carries, with their shapes where the file says them.
      title.textContent = carried.map((v) => `${v}${valueShape(v)}`).join('\n') || id;
      hit.append(title);
      return [hit, s('path', { class: 'tl-g-e', d: path })];
    }
    /** The elements of box `i`: a group with its rectangle, op-family band and up to three lines. */
    function makeBox(i) {
      const n = boxInfo(i);
      const p = { x: P.rect[4 * i], y: P.rect[4 * i + 1], width: P.rect[4 * i + 2], height: P.rect[4 * i + 3] };
      const cls = n.kind === 'block' ? 'tl-g-n tl-g-block' : n.kind === 'node' ? 'tl-g-n' : 'tl-g-n tl-g-io';
      const attrs = { class: cls, transform: `translate(${p.x},${p.y})` };
      const ds = {};
      if (n.kind === 'node') Object.assign(ds, { node: T.idOf(n.node), opFamily: opFamily(n.label) });
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
    }

    /** Shows a packed layout (graph-model.js's packLayout); `outlinePng`, the Worker's bitmap of it. */
    function draw(packed, outlinePng) {
      P = packed;
      shown = [];
      const total = P.boxes + P.sections;
      els = new Array(total);
      stamp = new Uint32Array(total);
      othersOf = new Map(P.others);
      drawnNodes = new Map();
      boxOfNode = new Int32Array(T.length).fill(-1);
      for (let i = 0; i < P.boxes; i++) if (P.node[i] >= 0) boxOfNode[P.node[i]] = i;
      // Tens of thousands of boxes: their elements are made when first in view or in idle time,
      // not all at once (a long task); below that, at once (panning then only moves them: a
      // 5,049-box graph made lazily panned at p95 40 ms, made at once 18 ms).
      const lazy = P.boxes > (Number(ctx.params?.get('glazy')) || LAZY_MIN_BOXES);
      if (!lazy) for (let k = 0; k < total; k++) els[k] = k < P.boxes ? makeBox(k) : makeSection(k - P.boxes);
      culling = P.boxes > CULL_MIN_BOXES;
      overview = null;
      if (outlineUrl) URL.revokeObjectURL(outlineUrl);
      outlineUrl = null;
      if (culling) {
        // Thousands of boxes: only what the view shows is in the DOM (cull), and far out the whole
        // graph is one bitmap (drawn by the graph Worker): panning and zooming a picture costs a
        // blit, thousands of elements a rasterisation every frame.
        if (outlinePng) {
          outlineUrl = URL.createObjectURL(outlinePng);
          overview = [s('image', { href: outlineUrl, x: 0, y: 0, width: P.width, height: P.height, preserveAspectRatio: 'none', class: 'tl-g-outline' })];
        }
        world.replaceChildren();
        root.dataset.culled = 'true';
        // The elements not yet made are made in idle time, a few hundred at a time, so a later pan
        // only moves them in and out of the DOM.
        const mine = P;
        let at = 0;
        const idle = window.requestIdleCallback ?? ((f) => setTimeout(() => f({ timeRemaining: () => 8 }), 16));
        const work = (deadline) => {
          if (P !== mine || dead) return;
          for (let k = 0; at < total && (k < 50 || deadline.timeRemaining() > 2); k++, at++) els[at] ??= at < P.boxes ? makeBox(at) : makeSection(at - P.boxes);
          if (at < total) idle(work);
          else root.dataset.made = 'all';
        };
        idle(work);
      } else {
        const frag = document.createDocumentFragment();
        for (let j = 0; j < P.sections; j++) frag.append(...els[P.boxes + j]);
        for (let i = 0; i < P.boxes; i++) frag.append(...els[i]);
        world.replaceChildren(frag);
        delete root.dataset.culled;
      }
      bounds = { w: P.width, h: P.height };
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
    /** The node indices the list shows. */
    let listed = [];
    const listCount = h('span', { class: 'tl-g-muted' });
    function filterList() {
      const q = query.toLowerCase();
      listed = T.search(query, opFilter);
      listCount.textContent = ` ${listed.length.toLocaleString()} of ${T.length.toLocaleString()}`;
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
        const n = T.get(listed[i]);
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
        if (a.initializers.has(v) || T.hasConsumers(v)) showValue(v);
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
        li.append(link(v, () => ctx.selectTensor?.(si, v), 'open this tensor'), h('span', { class: 'tl-g-tag' }, 'initializer'), t ? ` ${t.dtype} ${shapeText(t.shape)}` : '', constInit.has(v) ? h('code', { class: 'tl-g-const' }, ` = ${valuesText(constInit.get(v).values, constInit.get(v).shape)}`) : '', ' · ', link(plural(T.consumersOf(v).length, 'consumer'), () => showValue(v), 'show its consumers'));
      } else {
        const p = T.producerOf(v);
        li.append(link(v, () => showValue(v), 'show producer and consumers'));
        if (p !== undefined) li.append(h('span', { class: 'tl-g-muted' }, ` ← ${T.opOf(p)}`));
        else li.append(h('span', { class: 'tl-g-tag' }, 'graph input'));
      }
      return li;
    };
    function showNode(n) {
      detail.dataset.selected = n.id;
      const consumersOf = n.outputs.flatMap((o) => (o ? T.consumersOf(o) : []));
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
        h('ul', {}, ...consumersOf.slice(0, 200).map((k) => h('li', {}, link(`${T.opOf(k)} ${T.idOf(k)}`, () => select(T.idOf(k), true))))),
        ].filter(Boolean),
      );
    }
    function showValue(v) {
      detail.dataset.selected = v;
      const cons = T.consumersOf(v);
      const p = T.producerOf(v);
      const t = tensorInfo.get(v);
      detail.replaceChildren(
        ...[
        h('h4', {}, a.initializers.has(v) ? 'Initializer' : 'Value'),
        h('div', {}, h('code', {}, v)),
        t ? h('div', {}, `${t.dtype} ${shapeText(t.shape)} · `, link('open tensor', () => ctx.selectTensor?.(si, v))) : null,
        p !== undefined ? h('div', {}, 'produced by ', link(`${T.opOf(p)} ${T.idOf(p)}`, () => select(T.idOf(p), true))) : null,
        h('div', {}, h('b', {}, `Consumers (${cons.length})`)),
        h('ul', { dataset: { consumersOf: v } }, ...cons.slice(0, 500).map((k) => h('li', { dataset: { consumer: T.idOf(k) } }, link(`${T.opOf(k)} ${T.idOf(k)}`, () => select(T.idOf(k), true))))),
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
      const n = T.get(T.indexOf(id));
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
      const b = boxOfNode[T.indexOf(id)] ?? -1;
      if (b < 0 || !P) return;
      const p = { x: P.rect[4 * b], y: P.rect[4 * b + 1], width: P.rect[4 * b + 2], height: P.rect[4 * b + 3] };
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
      if (want && T.indexOf(want) >= 0) select(want, true);
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
