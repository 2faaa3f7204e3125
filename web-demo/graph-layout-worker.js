// Web Worker of the graph view: lays out a graph too large for elkjs (graph-model.js's
// layeredLayout, linear time) off the page's thread. {id, graph: {nodes, edges}} -> {id, data}.
import { layeredLayout } from './graph-model.js';

self.onmessage = ({ data }) => {
  try {
    self.postMessage({ id: data.id, data: layeredLayout(data.graph) });
  } catch (e) {
    self.postMessage({ id: data.id, error: { message: e?.message ?? String(e) } });
  }
};
