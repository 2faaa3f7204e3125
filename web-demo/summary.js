// Summaries of decoded packets for display: kind/dtype/shape per leaf, statistics and a histogram.
import * as tensorlane from '../js/browser.js';

const BINS = 48;

function numbers(leaf) {
  if (leaf.kind === 'quantized') return { data: leaf.dequantize() };
  return { dtype: leaf.dtype, data: leaf.data };
}

/** The core's statistics (`tensorlane_core::stats` through the wasm build) in the shape the plots draw. */
function view(s) {
  return { ...s, bins: s.histogram.counts, inf: s.pos_inf + s.neg_inf };
}

/**
 * Statistics of values in memory (a TypedArray, or {dtype, data} with raw float16/bfloat16 bits):
 * count, min/max/mean/std over the finite values, zeros, NaN and ±Inf counts and a BINS-bin
 * histogram, computed by the core in one streaming pass (NumPy-exact), not in JavaScript.
 */
export function stats(values) {
  return view(tensorlane.stats(ArrayBuffer.isView(values) ? { data: values } : values, { bins: BINS }));
}

/** Flattens a decoded packet into leaves { path, kind, dtype, shape, copied, shares, nbytes, stats }. */
export function summarize(decoded, input, path = '') {
  const out = [];
  const leaf = (v, extra = {}) => {
    const entry = { path: path || '(top level)', kind: v.kind, ...extra };
    out.push(entry);
    return entry;
  };
  switch (decoded.kind) {
    case 'bundle':
      for (const [k, v] of decoded) out.push(...summarize(v, input, path ? `${path}/${k}` : k));
      break;
    case 'dense': {
      const e = leaf(decoded, { dtype: decoded.dtype, shape: decoded.shape, copied: decoded.copied, shares: decoded.data.buffer === input.buffer, nbytes: decoded.data.byteLength });
      if (decoded.dtype !== 'bool') e.stats = stats(numbers(decoded));
      break;
    }
    case 'sparse': {
      const e = leaf(decoded, { dtype: decoded.dtype, shape: decoded.shape, format: decoded.format, copied: decoded.copied, shares: decoded.data.buffer === input.buffer, nbytes: decoded.data.byteLength });
      e.stats = stats(numbers({ dtype: decoded.dtype, data: decoded.data }));
      break;
    }
    case 'quantized': {
      const e = leaf(decoded, { dtype: decoded.qdtype, shape: decoded.shape, scheme: decoded.scheme, copied: decoded.copied, shares: decoded.data.buffer === input.buffer, nbytes: decoded.data.byteLength });
      e.stats = stats(numbers(decoded));
      break;
    }
    case 'string':
      leaf(decoded, { dtype: 'string', shape: [decoded.strings.length], preview: decoded.strings.slice(0, 4) });
      break;
  }
  return out;
}
