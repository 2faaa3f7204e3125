// Web Worker of the graph view (graph-view.js): opens the model with the package's open() and
// reads its ONNX graph (reader.graph(): the core's onnx_graph reader over the header bytes of a
// File, never the weights), then posts it with timings. The layout runs in another Worker
// (elkjs's own, web-demo/vendor/elkjs/elk-worker.min.js).
import * as tensorlane from '../js/browser.js';
import { errorMessage, openSource } from './open-source.js';

self.onmessage = async ({ data }) => {
  if (data.cmd !== 'graph') return;
  const t0 = performance.now();
  try {
    const reader = await openSource(data.source, data.companions);
    if (reader.format !== 'onnx') throw new Error(`${data.source.name ?? 'this file'} is ${reader.format ?? 'not a model'}, not ONNX: only ONNX models have a graph`);
    const graph = await reader.graph();
    const tensors = reader.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes }));
    const bytesRead = reader.bytesRead;
    reader.close();
    self.postMessage({ type: 'done', graph, tensors, bytesRead, ms: performance.now() - t0 });
  } catch (e) {
    self.postMessage({ type: 'error', error: errorMessage(e) });
  }
};
self.postMessage({ type: 'ready', backend: tensorlane.backendName });
