// Web Worker: fetches packets, decodes them with the wasm build and summarises them.
import * as tensorlane from '../js/browser.js';
import { summarize } from './summary.js';

self.onmessage = async ({ data: { id, url, bytes, name } }) => {
  try {
    const t0 = performance.now();
    const input = bytes ? new Uint8Array(bytes) : new Uint8Array(await (await fetch(url)).arrayBuffer());
    const t1 = performance.now();
    const decoded = tensorlane.decode(input);
    const t2 = performance.now();
    const leaves = summarize(decoded, input);
    self.postMessage({ id, name: name ?? url, size: input.byteLength, kind: decoded.kind, leaves, fetchMs: t1 - t0, decodeMs: t2 - t1 });
  } catch (e) {
    self.postMessage({ id, name: name ?? url, error: String(e.message ?? e) });
  }
};
self.postMessage({ ready: true, backend: tensorlane.backendName });
