// Model files in the inspector (safetensors and its shard index, GGUF, PyTorch, NumPy, ONNX,
// HDF5): opened lazily as a Blob with `open()`, which reads only the header-like bytes it needs
// (a progress line counts them while it lists), then listed with name, dtype, shape, size and
// where the bytes are. Clicking a row reads that tensor (one blob.slice for a stored tensor) and
// draws its histogram, plus a heatmap for a 2-D float tensor; GGUF block-quantized tensors are
// dequantized first.
import { bytes, el, fmt, plotValues } from './zt-view.js';

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
  const onProgress = ({ bytesRead, reads }) => {
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
    const where = L.storage === 'range' ? `${L.source ? `${L.source} ` : ''}@${L.offset}${L.zeroCopy ? '' : L.bigEndian ? ' (big-endian)' : ' (strided)'}` : L.storage;
    const state = el('td', { class: 'state', textContent: plan(t) ? 'click to plot' : '' });
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
