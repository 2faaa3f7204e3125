// Web Worker of the graph view (graph-view.js): opens the model with the package's open() and
// reads its ONNX graph (reader.graph(): the core's onnx_graph reader over the header bytes of a
// File, never the weights), then posts it with timings. The layout runs in another Worker
// (elkjs's own, web-demo/vendor/elkjs/elk-worker.min.js). Small constants (initializers and
// Constant nodes of at most 8 values) are read too, to be drawn inside their nodes
// (graph-constants.js); the graph is analysed here (graph-model.js's analyze: producers,
// consumers, repeated blocks), so the page's thread only draws.
import * as tensorlane from '../js/browser.js';
import { RemoteFile } from '../js/http.js';
import { constantNodes, MAX_VALUES } from './graph-constants.js';
import { analyze, displayGraph } from './graph-model.js';
import { architecture } from './arch-view.js';

/** Nodes (and producer/consumer entries) per message: each message is parsed on the page's thread
 * as one task, so a 100k-node graph comes in pieces of a few tens of milliseconds each. */
const PIECE = 2000;
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

self.onmessage = async ({ data }) => {
  if (data.cmd === 'display') {
    // graph-model.js's displayGraph: the boxes and edges to lay out with `expanded` blocks open.
    try {
      if (!analysed) throw new Error('no graph has been read yet');
      self.postMessage({ type: 'display', id: data.id, display: displayGraph(analysed, data.expanded) });
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
    const arch = architecture(tensors.map((t) => ({ ...t, numel: t.shape.reduce((x, y) => x * Number(y), 1) })));
    const analyzeMs = performance.now() - t1;
    // The big parts in pieces (the page puts them together); the analysis's nodes and initializers
    // stand for the graph's.
    const { nodes, producer, consumers, ...rest } = analysis;
    const prod = [...producer];
    const cons = [...consumers];
    for (let i = 0; i < Math.max(nodes.length, prod.length, cons.length); i += PIECE) {
      self.postMessage({ type: 'piece', nodes: nodes.slice(i, i + PIECE), producer: prod.slice(i, i + PIECE), consumers: cons.slice(i, i + PIECE) });
    }
    self.postMessage({ type: 'done', graph: { ...graph, nodes: [], initializers: [] }, analysis: rest, arch, tensors, constants, bytesRead, ms, analyzeMs });
  } catch (e) {
    self.postMessage({ type: 'error', error: errorMessage(e) });
  }
};
self.postMessage({ type: 'ready', backend: tensorlane.backendName });
