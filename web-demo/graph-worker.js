// Web Worker of the graph view (graph-view.js): opens the model with the package's open() and
// reads its ONNX graph (reader.graph(): the core's onnx_graph reader over the header bytes of a
// File, never the weights), then posts it with timings. The layout runs in another Worker
// (elkjs's own, web-demo/vendor/elkjs/elk-worker.min.js). Small constants (initializers and
// Constant nodes of at most 8 values) are read too, to be drawn inside their nodes
// (graph-constants.js); the graph is analysed here (graph-model.js's analyze: producers,
// consumers, repeated blocks), so the page's thread only draws. A drawing of more than
// `elkMax` boxes is laid out here too (layeredLayout, linear time) and comes to the page as
// typed arrays (packLayout: transferred, not cloned; with a grid index to cull by) and its
// outline as a PNG drawn on an OffscreenCanvas: no task on the page's thread grows with the graph.
import * as tensorlane from '../js/browser.js';
import { RemoteFile } from '../js/http.js';
import { constantNodes, MAX_VALUES } from './graph-constants.js';
import { analyze, boxSize, displayGraph, inlineText, opFamily, layeredLayout, nodeBuffers, packedBuffers, packLayout, packNodes } from './graph-model.js';
import { architecture } from './arch-view.js';

import { errorMessage, openSource } from './open-source.js';

/** `(offset, length) -> Uint8Array` of a File or URL source. */
async function byteReader(source) {
  if (source.file) return { size: source.file.size, read: async (o, n) => new Uint8Array(await source.file.slice(o, o + n).arrayBuffer()) };
  const remote = await RemoteFile.open(source.url);
  return { size: remote.size, read: (o, n) => remote.read(o, n) };
}

/**
 * Values of the small constants: `{initializers: {name: {shape, values}}, nodes: [[index,
 * {dtype, shape, values}]]}`. A constant that cannot be read is left out (the node then shows its
 * type and shape only), and why is in `problems`.
 */
async function constantsOf(reader, source) {
  const initializers = {};
  const problems = [];
  for (const t of reader.tensors) {
    const numel = t.shape.reduce((a, b) => a * Number(b), 1);
    if (numel > MAX_VALUES) continue;
    try {
      initializers[t.name] = { shape: t.shape.map(Number), values: Array.from(await reader.values(t.name), Number) };
    } catch (e) {
      problems.push(`${t.name}: ${e?.message ?? e}`);
    }
  }
  let nodes = [];
  try {
    const { size, read } = await byteReader(source);
    nodes = [...(await constantNodes(read, size))];
  } catch (e) {
    problems.push(`Constant nodes: ${e?.message ?? e}`);
  }
  return { initializers, nodes, problems };
}

/** The last graph's analysis, for the page's `display` requests (which boxes, given the opened blocks). */
let analysed = null;
/** What a node's third line is made from (graph-model.js's inlineText). */
let inlineCtx = null;

/** Fill of a box in the outline by its op family (graph-model.js's opFamily; graph-view.js's band colours). */
const FAMILY_COLOURS = { linear: '#3b6fd8', norm: '#2f9a55', activation: '#d9573a', elementwise: '#8a94a8', shape: '#8b6cc7', control: '#c99a06', constant: '#5b6478', other: '#b0b7c5' };
/** Longest side of the outline bitmap, in pixels. */
const OUTLINE_PX = 4096;

/**
 * The whole drawing as a PNG (boxes filled, edges as lines), for the page to show far out
 * instead of tens of thousands of elements; null where OffscreenCanvas is missing.
 */
async function outline(P) {
  if (typeof OffscreenCanvas === 'undefined') return null;
  const sc = Math.min(1, OUTLINE_PX / Math.max(P.width, P.height));
  const cv = new OffscreenCanvas(Math.max(1, Math.round(P.width * sc)), Math.max(1, Math.round(P.height * sc)));
  const c = cv.getContext('2d');
  c.scale(sc, sc);
  c.strokeStyle = '#98a2b6';
  c.lineWidth = 1 / sc;
  c.beginPath();
  for (let j = 0; j < P.sections; j++) {
    const a = P.ptStart[j];
    c.moveTo(P.pts[2 * a], P.pts[2 * a + 1]);
    for (let q = a + 1; q < P.ptStart[j + 1]; q++) c.lineTo(P.pts[2 * q], P.pts[2 * q + 1]);
  }
  c.stroke();
  // Boxes in their op family's colour (graph-view.js's bands): far out, the model's structure
  // (the green norms, blue projections, red activations of each layer) still shows.
  c.strokeStyle = '#6d7fa6';
  for (let i = 0; i < P.boxes; i++) {
    const [x, y, w, h] = P.rect.subarray(4 * i, 4 * i + 4);
    c.fillStyle = P.node[i] >= 0 ? FAMILY_COLOURS[opFamily(analysed.nodes[P.node[i]].op_type)] : '#dbe4f7';
    c.fillRect(x, y, w, h);
    c.strokeRect(x, y, w, h);
  }
  return cv.convertToBlob({ type: 'image/png' });
}

self.onmessage = async ({ data }) => {
  if (data.cmd === 'display') {
    // graph-model.js's displayGraph: the boxes and edges to lay out with `expanded` blocks open,
    // sized (their third lines, inlineText, included). Past `elkMax` boxes laid out here
    // (layeredLayout) and packed (packLayout), with the outline: `{packed, outline}`; else
    // `{display}` for elkjs.
    try {
      if (!analysed) throw new Error('no graph has been read yet');
      const t0 = performance.now();
      const d = displayGraph(analysed, data.expanded);
      for (const n of d.nodes) {
        if (n.kind === 'node') n.extra = inlineText(analysed.nodes[n.node], inlineCtx);
        Object.assign(n, boxSize(n));
      }
      if (d.nodes.length <= data.elkMax) {
        self.postMessage({ type: 'display', id: data.id, display: d });
        return;
      }
      const packed = packLayout(d, layeredLayout(d));
      const png = await outline(packed);
      self.postMessage({ type: 'display', id: data.id, packed, outline: png, ms: performance.now() - t0 }, packedBuffers(packed));
    } catch (e) {
      self.postMessage({ type: 'display', id: data.id, error: errorMessage(e) });
    }
    return;
  }
  if (data.cmd !== 'graph') return;
  const t0 = performance.now();
  try {
    const reader = await openSource(data.source, data.companions);
    if (reader.format !== 'onnx') throw new Error(`${data.source.name ?? 'this file'} is ${reader.format ?? 'not a model'}, not ONNX: only ONNX models have a graph`);
    const graph = await reader.graph();
    const tensors = reader.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes }));
    const bytesRead = reader.bytesRead;
    const constants = await constantsOf(reader, data.source);
    reader.close();
    const ms = performance.now() - t0;
    const t1 = performance.now();
    const analysis = analyze(graph, data.analyze);
    analysed = analysis;
    inlineCtx = {
      initializers: analysis.initializers,
      tensorInfo: new Map(tensors.map((t) => [t.name, t])),
      constInit: new Map(Object.entries(constants.initializers)),
      constNode: new Map(constants.nodes),
    };
    const arch = architecture(tensors.map((t) => ({ ...t, numel: t.shape.reduce((x, y) => x * Number(y), 1) })));
    const analyzeMs = performance.now() - t1;
    // The nodes, producers and consumers as one string and typed arrays (transferred: the page
    // reads them with NodeTable, never holding an object a node); the analysis's initializers
    // stand for the graph's.
    const { nodes, producer, consumers, ...rest } = analysis;
    const table = packNodes(nodes, producer, consumers);
    self.postMessage({ type: 'nodes', table }, nodeBuffers(table));
    // Of the blocks the page needs their names and instances, not their node lists.
    rest.families = rest.families.map(({ nodes: _, ...f }) => f);
    self.postMessage({ type: 'done', graph: { ...graph, nodes: [], initializers: [] }, analysis: rest, arch, tensors, constants, bytesRead, ms, analyzeMs });
  } catch (e) {
    self.postMessage({ type: 'error', error: errorMessage(e) });
  }
};
self.postMessage({ type: 'ready', backend: tensorlane.backendName });
