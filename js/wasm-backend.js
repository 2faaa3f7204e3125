// Adapts the wasm-bindgen glue (wasm/pkg/tensorlane_wasm.js, --target web) to the backend
// interface js/common.js expects. Shared by js/wasm-node.js and js/browser.js.
import * as glue from '../wasm/pkg/tensorlane_wasm.js';

export function wasmBackend(exports) {
  return {
    name: 'wasm',
    decodeRaw(input, bits, max) {
      const a = glue.decodeRaw(input, bits, max);
      return { json: a[0], owned: a.slice(1) };
    },
    encodeRaw: glue.encodeRaw,
    dequantizeRaw: glue.dequantizeRaw,
    copiedBytes: glue.copiedBytes,
    RawStreamDecoder: glue.RawStreamDecoder,
    ztWriteRaw: glue.ztWriteRaw,
    FormatSession: glue.FormatSession,
    ggmlDequantize: glue.ggmlDequantize,
    StatsSummary: glue.StatsSummary,
    StatsHistogram: glue.StatsHistogram,
    StatsDiff: glue.StatsDiff,
    statsSplit: glue.statsSplit,
    statsSummaryOfParts: glue.statsSummaryOfParts,
    /** The wasm instance's memory (tests check that views survive its growth). */
    memory: () => exports.memory,
  };
}

export { glue };
