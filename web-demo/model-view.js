// Model files in the inspector (every format: safetensors and its shard index, GGUF, PyTorch,
// NumPy, ONNX, HDF5, .zt v2 with its shards, legacy .zt, Tenso): opened lazily as a Blob with
// `open()`, which reads only the header-like bytes it needs (a progress line counts them while it
// lists), then listed with name, dtype, shape, size and where the bytes are. Clicking a row reads
// that tensor (one blob.slice for a stored tensor) and draws its histogram, plus a heatmap for a
// 2-D float tensor; GGUF block-quantized tensors are dequantized first. What only some formats
// have (a .zt object's layout, parts and digests) is in the tensor's attributes, shown in a
// "layout and parts" details table.
import { stats } from './summary.js';

export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'data') Object.assign(e.dataset, v);
    else e[k] = v;
  }
  e.append(...children);
  return e;
}

export function fmt(x) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return String(x);
  return Math.abs(x) >= 1e5 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(3) : Number(x.toPrecision(5)).toString();
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  const u = ['KiB', 'MiB', 'GiB', 'TiB'];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return `${n.toFixed(n < 10 ? 2 : 1)} ${u[i]}`;
}

export function histogram(canvas, s) {
  const dpr = window.devicePixelRatio || 1;
  const w = (canvas.width = Math.round(canvas.clientWidth * dpr));
  const h = (canvas.height = Math.round(canvas.clientHeight * dpr));
  const g = canvas.getContext('2d');
  g.fillStyle = '#f3f5f8';
  g.fillRect(0, 0, w, h);
  const top = Math.max(1, ...s.bins);
  const bw = w / s.bins.length;
  g.fillStyle = '#3b6fd6';
  s.bins.forEach((c, i) => {
    const bh = c === 0 ? 0 : Math.max(1, (c / top) * (h - 14 * dpr));
    g.fillRect(i * bw + 0.5, h - bh, Math.max(1, bw - 1), bh);
  });
  g.fillStyle = '#394252';
  g.font = `${10 * dpr}px ui-monospace, monospace`;
  g.fillText(fmt(s.min), 2, 10 * dpr);
  const t = fmt(s.max);
  g.fillText(t, w - g.measureText(t).width - 2, 10 * dpr);
}

/** A diverging heatmap (blue < 0 < red, symmetric about 0; or min..max when all one sign). */
function heatmap(canvas, values, rows, cols, s) {
  const maxSide = 256;
  const sr = Math.max(1, Math.ceil(rows / maxSide)), sc = Math.max(1, Math.ceil(cols / maxSide));
  const h = Math.ceil(rows / sr), w = Math.ceil(cols / sc);
  canvas.width = w;
  canvas.height = h;
  // Display size: scale tiny matrices up, keep the aspect ratio, at most the plot's width.
  const scale = Math.max(1, Math.floor(Math.min(240 / w, 160 / h)));
  canvas.style.width = `${w * scale}px`;
  canvas.style.height = `${h * scale}px`;
  const g = canvas.getContext('2d');
  const img = g.createImageData(w, h);
  const lo = s.min < 0 && s.max > 0 ? -Math.max(-s.min, s.max) : s.min;
  const hi = s.min < 0 && s.max > 0 ? -lo : s.max;
  const span = hi > lo ? hi - lo : 1;
  const A = [44, 79, 168], M = [245, 245, 245], B = [194, 64, 43];
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const v = values[y * sr * cols + x * sc];
      const o = (y * w + x) * 4;
      if (!Number.isFinite(v)) {
        img.data.set([0, 0, 0, 255], o);
        continue;
      }
      const t = Math.min(1, Math.max(0, (v - lo) / span));
      const [c0, c1, u] = t < 0.5 ? [A, M, t * 2] : [M, B, t * 2 - 1];
      img.data[o] = c0[0] + (c1[0] - c0[0]) * u;
      img.data[o + 1] = c0[1] + (c1[1] - c0[1]) * u;
      img.data[o + 2] = c0[2] + (c1[2] - c0[2]) * u;
      img.data[o + 3] = 255;
    }
  }
  g.putImageData(img, 0, 0);
  return { lo, hi, sampled: sr > 1 || sc > 1 };
}

/**
 * A plot box for a tensor's values: title, statistics, histogram, and a heatmap for a 2-D float
 * tensor (`heat`). Returns {box, stats}.
 */
export function plotValues(name, label, values, shape, heat) {
  const s = stats(values);
  const box = el('div', { class: 'plot', data: { name } }, el('div', { class: 'title', textContent: name }));
  box.append(el('div', { textContent: `${label} [${shape.join('×')}] n=${s.count}` }));
  box.append(el('div', { textContent: `min=${fmt(s.min)} max=${fmt(s.max)} mean=${fmt(s.mean)} std=${fmt(s.std)}${s.nan || s.inf ? ` NaN=${s.nan} Inf=${s.inf}` : ''}` }));
  const hist = el('canvas', { class: 'hist' });
  box.append(hist);
  requestAnimationFrame(() => histogram(hist, s));
  if (heat && shape.length === 2 && s.count > 0) {
    const canvas = el('canvas', { class: 'heat' });
    const [rows, cols] = shape;
    const { lo, hi, sampled } = heatmap(canvas, values, rows, cols, s);
    box.append(canvas, el('div', { class: 'scale' }, el('span', { textContent: fmt(lo) }), el('i'), el('span', { textContent: fmt(hi) })));
    if (sampled) box.append(el('div', { textContent: '(heatmap subsampled)' }));
  }
  return { box, stats: s };
}

const PLOTTABLE = new Set(['float16', 'bfloat16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64']);
const GGML_FLOATS = new Set(['F32', 'F16', 'BF16', 'F64']);

/** Per Blob: the bytes and slices read out of it so far (one counter each, however often opened). */
const COUNTERS = new WeakMap();
function counting(blob) {
  let counter = COUNTERS.get(blob);
  if (counter) return counter;
  counter = { bytes: 0, reads: 0 };
  COUNTERS.set(blob, counter);
  blob.slice = function (start, end, type) {
    const b = Blob.prototype.slice.call(this, start, end, type);
    counter.bytes += b.size;
    counter.reads++;
    return b;
  };
  return counter;
}

/** A short text for a metadata value (long arrays and strings cut). */
function short(v) {
  if (typeof v === 'bigint') return `${v}`;
  if (typeof v === 'number') return fmt(v);
  if (typeof v === 'string') return v.length > 120 ? `${JSON.stringify(v.slice(0, 120))}…` : JSON.stringify(v);
  if (v instanceof Uint8Array) return `<${v.length} bytes>`;
  if (Array.isArray(v)) return `[${v.slice(0, 8).map(short).join(', ')}${v.length > 8 ? `, … (${v.length} items)` : ''}]`;
  if (v && typeof v === 'object') return `{${Object.entries(v).slice(0, 8).map(([k, x]) => `${k}: ${short(x)}`).join(', ')}${Object.keys(v).length > 8 ? ', …' : ''}}`;
  return String(v);
}

/** Whether a tensor can be drawn, and how its values are read. */
function plan(t) {
  if (t.layout.storage === 'parts') return null;
  if (t.ggml?.quantized) return { how: 'dequantize', heat: true };
  if (t.ggml && GGML_FLOATS.has(t.dtype)) return { how: 'dequantize', heat: true };
  if (t.ggml && /^I(8|16|32|64)$/.test(t.dtype)) return { how: 'dequantize', heat: false };
  if (PLOTTABLE.has(t.dtype)) return { how: 'values', heat: t.dtype.startsWith('float') || t.dtype === 'bfloat16' };
  return null;
}

async function valuesOf(reader, t, p) {
  if (p.how === 'dequantize') return reader.dequantize(t.name);
  const a = await reader.tensor(t.name, { widen: true });
  return a instanceof BigInt64Array || a instanceof BigUint64Array ? Float64Array.from(a, Number) : a;
}

/**
 * Opens `file` (a Blob/File; `companions`: {name: Blob} for shards and external data), renders
 * it into `container` and makes each row clickable. Resolves to a summary {name, format, size,
 * openBytes, openReads, openMs, tensors: [{name, dtype, shape, nbytes, storage, state, stats?}],
 * sources, error?}; dispatches `model-opened` on `document` right after open with it. The
 * summary's `load(name)` reads and plots one tensor (what a click does).
 */
/** Every part of every tensor whose attributes describe parts (a .zt object's `layout` and `parts`), as table rows. */
function partRows(list) {
  const rows = [];
  for (const t of list) {
    const { layout, parts } = t.attributes ?? {};
    if (typeof layout !== 'string' || !parts || typeof parts !== 'object') continue;
    for (const [part, p] of Object.entries(parts)) {
      const stored = [p.encoding ?? 'raw', p.decoded_length !== undefined ? `→ ${p.decoded_length} B` : '', p.shard !== undefined ? `in shard ${p.shard}` : ''].filter(Boolean).join(' ');
      rows.push({ tensor: t.name, layout, part, type: p.type ?? p.dtype, offset: p.offset, length: p.length, stored, digest: p.digest ?? '—' });
    }
  }
  return rows;
}

export async function showModel(api, file, container, companions = {}) {
  const section = el('section', { class: 'zt model', data: { file: file.name, state: 'opening' } });
  container.append(section);
  const head = el('div', { class: 'meta' });
  const bar = el('progress');
  const barText = el('span', { textContent: 'reading the header…' });
  section.append(el('h2', { textContent: file.name }), head, el('div', { class: 'meta progress' }, bar, barText));
  const summary = { name: file.name, size: file.size, tensors: [] };
  const counters = [counting(file), ...Object.values(companions).map(counting)];
  const read = () => counters.reduce((n, c) => n + c.bytes, 0);
  const slices = () => counters.reduce((n, c) => n + c.reads, 0);
  const onProgress = ({ phase, bytesRead, reads }) => {
    if (phase !== 'open') return;
    barText.textContent = `listing: read ${bytes(bytesRead)} in ${reads} slices of ${bytes(file.size)}`;
  };
  let reader;
  const [bytes0, reads0] = [read(), slices()];
  const t0 = performance.now();
  try {
    reader = await api.open(file, { companions, onProgress });
  } catch (e) {
    summary.error = e.message;
    head.append(el('div', { class: 'err', textContent: e.message }));
    bar.remove();
    barText.textContent = '';
    section.dataset.state = 'error';
    document.dispatchEvent(new CustomEvent('model-opened', { detail: summary }));
    return summary;
  }
  summary.openMs = performance.now() - t0;
  summary.openBytes = read() - bytes0;
  summary.openReads = slices() - reads0;
  summary.format = reader.format;
  summary.sources = reader.sources;
  const list = reader.tensors;
  summary.tensors = list.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes, storage: t.layout.storage, state: 'listed' }));
  bar.max = 1;
  bar.value = 1;
  barText.textContent = `listed ${list.length} tensors from ${bytes(summary.openBytes)} in ${summary.openReads} slices (${((100 * summary.openBytes) / Math.max(1, file.size)).toFixed(3)}% of the file), ${summary.openMs.toFixed(1)} ms`;
  const total = list.reduce((n, t) => n + (t.nbytes ?? 0), 0);
  head.append(el('div', { textContent: `${reader.format} · ${bytes(file.size)} · ${list.length} tensors, ${bytes(total)}${reader.sources.length > 1 ? ` · companions: ${reader.sources.slice(1).join(', ')}` : ''} · click a row to plot it` }));

  const meta = Object.entries(reader.metadata ?? {});
  if (meta.length) {
    const details = el('details', { class: 'metadata' }, el('summary', { textContent: `metadata (${meta.length} keys)` }));
    const table = el('table');
    for (const [k, v] of meta) table.append(el('tr', {}, el('td', { class: 'name', textContent: k }), el('td', { class: 'name', textContent: short(v) })));
    details.append(table);
    section.append(details);
  }
  if (reader.skipped?.length) section.append(el('div', { class: 'meta', textContent: `skipped: ${reader.skipped.map((s) => `${s.name} (${s.reason})`).join('; ')}` }));
  const parts = partRows(list);
  if (parts.length) {
    const details = el('details', { class: 'parts' }, el('summary', { textContent: `layout and parts (${parts.length} parts of ${new Set(parts.map((p) => p.tensor)).size} tensors)` }));
    const t = el('table');
    t.append(el('thead', {}, el('tr', {}, ...['tensor', 'layout', 'part', 'type', 'offset', 'length', 'stored as', 'digest'].map((h) => el('th', { textContent: h })))));
    for (const p of parts) {
      t.append(el('tr', { data: { tensor: p.tensor, part: p.part } }, ...[p.tensor, p.layout, p.part, p.type, p.offset, p.length, p.stored, p.digest].map((v) => el('td', { class: 'name', textContent: String(v) }))));
    }
    details.append(t);
    section.append(details);
  }

  const table = el('table');
  table.append(el('thead', {}, el('tr', {}, ...['name', 'dtype', 'shape', 'bytes', 'storage', 'state'].map((h, i) => el('th', { textContent: h, class: i === 3 ? 'num' : '' })))));
  const tbody = el('tbody');
  table.append(tbody);
  section.append(table);
  const plots = el('div', { class: 'plots' });
  section.append(plots);

  const rows = new Map();
  const load = async (name) => {
    const i = list.findIndex((t) => t.name === name);
    const t = list[i];
    const { tr, state } = rows.get(name);
    const entry = summary.tensors[i];
    const p = plan(t);
    if (t.layout.storage === 'parts') {
      // Read part by part (each checked against its digest): the bytes each part holds.
      const before = read();
      try {
        const got = [];
        for (const part of t.layout.parts) got.push(`${part.name} ${bytes((await reader.part(name, part.name)).byteLength)}`);
        entry.state = 'parts read';
        state.textContent = `parts read and checked: ${got.join(', ')}`;
      } catch (e) {
        entry.state = 'failed';
        entry.error = e.message;
        state.textContent = `error: ${e.message}`;
      }
      entry.readBytes = read() - before;
      return entry;
    }
    if (!p) {
      state.textContent = `no plot for ${t.dtype}`;
      entry.state = 'not plottable';
      return entry;
    }
    tr.className = 'loading';
    state.textContent = 'reading…';
    const before = read();
    try {
      const values = await valuesOf(reader, t, p);
      const label = t.ggml?.quantized ? `${t.dtype} → float32` : t.dtype;
      plots.querySelector(`.plot[data-name="${CSS.escape(name)}"]`)?.remove();
      const { box, stats } = plotValues(name, label, values, t.shape, p.heat);
      plots.prepend(box);
      entry.state = 'plotted';
      entry.readBytes = read() - before;
      entry.stats = { min: stats.min, max: stats.max, mean: stats.mean, count: stats.count };
      tr.className = 'loaded';
      state.textContent = `plotted (${p.how === 'dequantize' && t.ggml?.quantized ? 'dequantized, ' : ''}read ${bytes(entry.readBytes)})`;
    } catch (e) {
      entry.state = 'failed';
      entry.error = e.message;
      tr.className = 'failed';
      state.textContent = `error: ${e.message}`;
    }
    section.dataset.loaded = summary.tensors.filter((x) => x.state === 'plotted').length;
    return entry;
  };
  for (const t of list) {
    const L = t.layout;
    const at = `${L.source ? `${L.source} ` : ''}@${L.offset}`;
    const where = L.storage === 'range' ? `${at}${L.zeroCopy ? '' : L.bigEndian ? ' (big-endian)' : ' (strided)'}` : L.storage === 'encoded' ? `${at} (${L.codec})` : L.storage === 'parts' ? `${L.layoutId}: ${L.parts.length} parts` : L.storage;
    const state = el('td', { class: 'state', textContent: plan(t) ? 'click to plot' : L.storage === 'parts' ? 'click to read its parts' : '' });
    const tr = el('tr', { class: 'pending', data: { name: t.name } },
      el('td', { class: 'name', textContent: t.name }),
      el('td', { textContent: t.ggml?.quantized ? `${t.dtype} (ggml blocks)` : t.dtype }),
      el('td', { textContent: `[${t.shape.join(', ')}]` }),
      el('td', { class: 'num', textContent: t.nbytes === null ? '?' : bytes(t.nbytes) }),
      el('td', { textContent: where }),
      state,
    );
    tr.style.cursor = 'pointer';
    tr.addEventListener('click', () => load(t.name));
    tbody.append(tr);
    rows.set(t.name, { tr, state });
  }
  section.dataset.state = 'listed';
  summary.load = load;
  document.dispatchEvent(new CustomEvent('model-opened', { detail: summary }));
  return summary;
}
