// Summaries of decoded packets for display: kind/dtype/shape per leaf, statistics and a histogram.
const BINS = 48;

function numbers(api, leaf) {
  if (leaf.kind === 'quantized') return leaf.dequantize();
  const { dtype, data } = leaf;
  if (dtype === 'float16' || dtype === 'bfloat16') return api.widen(dtype, data);
  if (dtype === 'int64' || dtype === 'uint64') return Float64Array.from(data, Number);
  return data;
}

export function stats(values) {
  let min = Infinity, max = -Infinity, sum = 0, sq = 0, n = 0, nan = 0, inf = 0, zeros = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v !== v) { nan++; continue; }
    if (v === Infinity || v === -Infinity) { inf++; continue; }
    if (v === 0) zeros++;
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v; sq += v * v; n++;
  }
  const mean = n ? sum / n : NaN;
  const bins = new Array(BINS).fill(0);
  if (n) {
    const w = max > min ? (max - min) / BINS : 1;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v !== v || v === Infinity || v === -Infinity) continue;
      bins[Math.min(BINS - 1, Math.floor((v - min) / w))]++;
    }
  }
  return { count: values.length, min: n ? min : NaN, max: n ? max : NaN, mean, std: n ? Math.sqrt(Math.max(0, sq / n - mean * mean)) : NaN, nan, inf, zeros, bins };
}

/** Flattens a decoded packet into leaves { path, kind, dtype, shape, copied, shares, nbytes, stats }. */
export function summarize(api, decoded, input, path = '') {
  const out = [];
  const leaf = (v, extra = {}) => {
    const entry = { path: path || '(top level)', kind: v.kind, ...extra };
    out.push(entry);
    return entry;
  };
  switch (decoded.kind) {
    case 'bundle':
      for (const [k, v] of decoded) out.push(...summarize(api, v, input, path ? `${path}/${k}` : k));
      break;
    case 'dense': {
      const e = leaf(decoded, { dtype: decoded.dtype, shape: decoded.shape, copied: decoded.copied, shares: decoded.data.buffer === input.buffer, nbytes: decoded.data.byteLength });
      if (decoded.dtype !== 'bool') e.stats = stats(numbers(api, decoded));
      break;
    }
    case 'sparse': {
      const e = leaf(decoded, { dtype: decoded.dtype, shape: decoded.shape, format: decoded.format, copied: decoded.copied, shares: decoded.data.buffer === input.buffer, nbytes: decoded.data.byteLength });
      e.stats = stats(numbers(api, { dtype: decoded.dtype, data: decoded.data }));
      break;
    }
    case 'quantized': {
      const e = leaf(decoded, { dtype: decoded.qdtype, shape: decoded.shape, scheme: decoded.scheme, copied: decoded.copied, shares: decoded.data.buffer === input.buffer, nbytes: decoded.data.byteLength });
      e.stats = stats(numbers(api, decoded));
      break;
    }
    case 'string':
      leaf(decoded, { dtype: 'string', shape: [decoded.strings.length], preview: decoded.strings.slice(0, 4) });
      break;
  }
  return out;
}
