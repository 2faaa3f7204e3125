// Web Worker of the compare view (compare-view.js): opens two models with the package's open()
// and runs compare() (the core's DiffAccumulator over both tensors' bytes, read from File slices
// in bounded chunks), posting throttled progress. {cmd: 'cancel'} aborts between slices.
import * as tensorlane from '../js/browser.js';
import { errorMessage, openSource } from './open-source.js';

let controller = null;

self.onmessage = async ({ data }) => {
  if (data.cmd === 'cancel') {
    controller?.abort();
    return;
  }
  if (data.cmd !== 'compare') return;
  controller = new AbortController();
  const t0 = performance.now();
  let last = 0;
  try {
    const [a, b] = await Promise.all([openSource(data.a, data.companionsA), openSource(data.b, data.companionsB)]);
    if (!a.tensors || !b.tensors) throw new Error('both sources must be model files with tensors');
    const result = await tensorlane.compare(a, b, {
      chunkBytes: data.chunkBytes,
      signal: controller.signal,
      onProgress: (p) => {
        const now = performance.now();
        if (now - last < 50 && p.bytesDone < p.bytesTotal) return;
        last = now;
        self.postMessage({ type: 'progress', ...p });
      },
    });
    a.close();
    b.close();
    self.postMessage({ type: 'done', result, ms: performance.now() - t0 });
  } catch (e) {
    self.postMessage({ type: 'error', error: errorMessage(e), aborted: controller.signal.aborted });
  } finally {
    controller = null;
  }
};
self.postMessage({ type: 'ready', backend: tensorlane.backendName });
