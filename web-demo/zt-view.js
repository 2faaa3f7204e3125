// `.zt` files in the inspector: opened lazily as a Blob through the wasm build (open() reads the
// 8-byte header, the 64 KiB tail and, if it lies before that, the manifest), listed from the
// manifest at once, then loaded object by object (reader.get reads that object's parts with
// blob.slice) with a progress bar; dense numeric objects get a histogram, 2-D float ones a heatmap.
import { stats } from './summary.js';

const FLOATS = new Set(['float16', 'bfloat16', 'float32', 'float64']);
/** Objects larger than this are listed but not read automatically (click "load" to read one). */
export const AUTO_LOAD_BYTES = 64 << 20;

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

/** Counts the bytes a reader pulls out of `blob` (shadows slice on this one File only). */
function counting(blob) {
  const counter = { bytes: 0, reads: 0 };
  blob.slice = function (start, end, type) {
    const b = Blob.prototype.slice.call(this, start, end, type);
    counter.bytes += b.size;
    counter.reads++;
    return b;
  };
  return counter;
}

function numbers(api, dtype, data) {
  if (dtype === 'float16' || dtype === 'bfloat16') return api.widen(dtype, data);
  if (dtype === 'int64' || dtype === 'uint64') return Float64Array.from(data, Number);
  return data;
}

/** A row of the object table, from metadata alone (nothing read yet). */
function describe(reader, name) {
  const m = reader.metadata(name);
  const parts = Object.entries(m.parts);
  const nbytes = parts.reduce((n, [, p]) => n + p.nbytes, 0);
  const stored = parts.reduce((n, [, p]) => n + p.length, 0);
  const encodings = [...new Set(parts.map(([, p]) => p.encoding ?? 'raw'))];
  const shards = [...new Set(parts.map(([, p]) => p.shard).filter((s) => s !== undefined))];
  const dtype = m.dtype ?? parts.map(([pn, p]) => `${pn}:${p.type ?? p.dtype}`).join(' ');
  return { name, layout: m.layout, dtype: m.dtype, dtypeLabel: dtype, shape: m.shape, nbytes, stored, encodings, shards, parts: parts.length };
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

function plot(row, obj, api) {
  return plotValues(row.name, obj.dtype, numbers(api, obj.dtype, obj.data), obj.shape, FLOATS.has(obj.dtype));
}

/**
 * Opens `file` (a Blob/File) with `api.open`, renders it into `container` and loads its objects.
 * Resolves to a summary { name, size, openBytes, openReads, objects: [{name, layout, dtype, shape,
 * nbytes, encodings, state, stats?}], error? }. Dispatches `zt-opened` on `document` right after
 * open (before any get) with that summary as detail.
 */
export async function showZt(api, file, container) {
  const section = el('section', { class: 'zt', data: { file: file.name } });
  container.append(section);
  const head = el('div', { class: 'meta' });
  section.append(el('h2', { textContent: file.name }), head);
  const summary = { name: file.name, size: file.size, objects: [] };
  const counter = counting(file);
  let reader;
  const t0 = performance.now();
  try {
    reader = await api.open(file);
  } catch (e) {
    summary.error = `${e.rule ? e.rule + ': ' : ''}${e.message}`;
    head.append(el('div', { class: 'err', textContent: summary.error }));
    section.dataset.state = 'error';
    document.dispatchEvent(new CustomEvent('zt-opened', { detail: summary }));
    return summary;
  }
  summary.openMs = performance.now() - t0;
  summary.openBytes = counter.bytes;
  summary.openReads = counter.reads;
  summary.dataShard = reader.dataShard;
  const rows = reader.keys().map((n) => describe(reader, n));
  summary.objects = rows.map((r) => ({ name: r.name, layout: r.layout, dtype: r.dtype, shape: r.shape, nbytes: r.nbytes, encodings: r.encodings, state: 'pending' }));
  document.dispatchEvent(new CustomEvent('zt-opened', { detail: summary }));

  const total = rows.reduce((n, r) => n + r.stored, 0);
  head.append(
    el('div', { textContent: `${bytes(file.size)} · ${rows.length} object${rows.length === 1 ? '' : 's'}${reader.dataShard ? ' (manifest-less data shard)' : ''}${reader.shards ? ` · shards: ${Object.keys(reader.shards).join(', ')}` : ''}` }),
    el('div', { class: 'opened', textContent: `open read ${bytes(counter.bytes)} in ${counter.reads} slices (header + tail${counter.reads > 2 ? ' + manifest' : ''}) of ${bytes(file.size)}, ${summary.openMs.toFixed(1)} ms` }),
  );
  const bar = el('progress', { max: Math.max(1, rows.length), value: 0 });
  const barText = el('span', { textContent: '' });
  section.append(el('div', { class: 'meta progress' }, bar, barText));

  const table = el('table');
  table.append(el('thead', {}, el('tr', {}, ...['name', 'layout', 'dtype', 'shape', 'bytes', 'stored', 'encoding', 'state'].map((h, i) => el('th', { textContent: h, class: i === 4 || i === 5 ? 'num' : '' })))));
  const tbody = el('tbody');
  table.append(tbody);
  section.append(table);
  const plots = el('div', { class: 'plots' });
  section.append(plots);

  const cells = new Map();
  for (const r of rows) {
    const state = el('td', { class: 'state', textContent: 'pending' });
    const tr = el('tr', { class: 'pending', data: { name: r.name } },
      el('td', { class: 'name', textContent: r.name }),
      el('td', { textContent: r.layout }),
      el('td', { textContent: r.dtypeLabel }),
      el('td', { textContent: `[${r.shape.join(', ')}]` }),
      el('td', { class: 'num', textContent: bytes(r.nbytes) }),
      el('td', { class: 'num', textContent: bytes(r.stored) }),
      el('td', { textContent: r.encodings.join(', ') + (r.shards.length ? ` (shard ${r.shards.join(', ')})` : '') }),
      state,
    );
    tbody.append(tr);
    cells.set(r.name, { tr, state });
  }

  let done = 0, loadedBytes = 0;
  const progress = () => {
    bar.value = done;
    barText.textContent = `${done}/${rows.length} objects loaded · parts read: ${bytes(loadedBytes)} of ${bytes(total)} · sliced from the file so far: ${bytes(counter.bytes)}`;
  };
  progress();
  const load = async (r, i) => {
    const { tr, state } = cells.get(r.name);
    const entry = summary.objects[i];
    tr.className = 'loading';
    state.textContent = 'loading…';
    try {
      if (r.shards.length) throw Object.assign(new Error(`lives in shard ${r.shards.join(', ')} (a File cannot resolve shards)`), { skip: true });
      const obj = await reader.get(r.name);
      loadedBytes += r.stored;
      if (r.layout === 'dense' && obj.dtype !== 'bool' && obj.dtype !== 'complex64' && obj.dtype !== 'complex128') {
        const { box, stats: s } = plot(r, obj, api);
        entry.stats = { min: s.min, max: s.max, mean: s.mean, count: s.count };
        plots.append(box);
      }
      entry.state = 'loaded';
      entry.copied = obj.copied;
      tr.className = 'loaded';
      state.textContent = r.layout === 'dense' ? (obj.copied ? 'loaded (decoded)' : 'loaded (view)') : `loaded (${Object.keys(obj.parts).length} parts)`;
    } catch (e) {
      entry.state = e.skip ? 'skipped' : 'failed';
      entry.error = `${e.rule ? e.rule + ': ' : ''}${e.message}`;
      tr.className = e.skip ? 'pending' : 'failed';
      state.textContent = e.skip ? `not loaded: ${e.message}` : `error: ${entry.error}`;
    }
  };
  for (const [i, r] of rows.entries()) {
    if (r.nbytes > AUTO_LOAD_BYTES) {
      const { state } = cells.get(r.name);
      state.textContent = '';
      state.append(el('button', { textContent: `load ${bytes(r.nbytes)}`, onclick: () => load(r, i) }));
      summary.objects[i].state = 'deferred';
    } else {
      await load(r, i);
    }
    done++;
    progress();
    await new Promise((res) => setTimeout(res, 0)); // let the progress bar paint between objects
  }
  section.dataset.state = 'done';
  return summary;
}
