// The inspector's Web Worker: every model is opened and read here, through the package's own API
// (open, reader.stats, reader.values, reader.readBytes), so the page's thread only draws.
//
// Requests are `{id, op, ...}`; answers `{id, result}` or `{id, error}`, with `{id, progress}`
// and `{id, chunk}` (npy export) in between. `{op: 'cancel', target}` aborts a running request.
//   open     {files?: File[], url?: string}  -> [{model, ...description} | {name, error}]
//   close    {model}
//   stats    {model, name, bins, workers?}    -> TensorStats (streamed in chunkBytes slices; a large
//            tensor stored as-is is cut in spans, one per helper Worker: see statsInParallel)
//   values   {model, name, start, count}      -> Float64Array
//   heatmap  {model, name, slice, mode, maxW, maxH} -> {w, h, data, rows, cols, block, blockR, blockC, ...}
//   npy      {model, name}                    -> chunks of a .npy file, then {bytes, dtype}
// Helper Workers (this script again, started by the inspector's Worker) answer one more:
//   part     {model, open, name, span, summary?, bins} -> a span's StatsPart numbers (no summary)
//            or its histogram (with the merged summary); `open` says how to open the model
import * as tensorlane from '../js/browser.js';
import { architecture } from './arch-view.js';

/** Bytes read per slice while streaming statistics, heatmaps and exports (bounded memory, no 2 GiB read). */
const CHUNK_BYTES = 4 << 20;
/**
 * Statistics read a File or URL in larger slices, STATS_READ_AHEAD of them in flight (64 MiB a
 * Worker): Chromium's Blob reads pay a fixed cost per slice; with two Workers on 2 cores, 32 MiB
 * slices two deep ran a 1 GiB float32 tensor at 490-540 MB/s, 16 MiB three deep at 450-490 and
 * 8 MiB at 430-480 (BENCHMARKS.md, "Web model inspector").
 */
const STATS_SLICE_BYTES = 32 << 20;
const STATS_READ_AHEAD = 2;
/**
 * Statistics of a tensor of at least this many bytes stored as-is in a File or URL run in spans,
 * one per Worker (this one and helpers): a Worker's reads of a Blob wait while it sums, so one
 * Worker alternates between reading and summing, and two overlap them (BENCHMARKS.md, "Web model
 * inspector": 1 GiB float32 from a File, 1 vs 2 Workers on 2 cores).
 */
const PARALLEL_MIN_BYTES = 64 << 20;
/**
 * Workers for one tensor's statistics when the page does not say: one per core, at least 4 (a
 * Worker waiting for a read leaves its core to another: on 2 cores 4 Workers ran a 1 GiB float32
 * tensor at 535-567 MB/s, 2 at 485-526) and at most 8 (each has 64 MiB of reads in flight).
 */
const STATS_WORKERS = Math.max(4, Math.min(8, self.navigator?.hardwareConcurrency ?? 4));
/** A tensor that cannot be read by element range (inflated, gathered, a .zt part) is read whole only up to this. */
const WHOLE_LIMIT = 512 << 20;

/**
 * `fetch` through this Worker's fetch Worker (fetch-worker.js, started on first use): the body is
 * read there, so it keeps arriving while this Worker computes, and comes back as one transferred
 * ArrayBuffer. Answers what RemoteFile reads of a Response (status, headers, arrayBuffer(),
 * body.cancel()); a network error is a TypeError and an abort an AbortError, as fetch's.
 */
let net = null;
let nextFetch = 1;
const fetching = new Map();
function netFetch(url, init = {}) {
  if (!net) {
    net = new Worker(new URL('./fetch-worker.js', import.meta.url), { name: 'tensorlane fetch' });
    net.onmessage = ({ data }) => {
      const p = fetching.get(data.id);
      if (!p) return;
      fetching.delete(data.id);
      if (data.error) return p.reject(data.error.name === 'AbortError' ? new DOMException(data.error.message, 'AbortError') : new TypeError(data.error.message));
      const body = data.body;
      p.resolve({ status: data.status, ok: data.status >= 200 && data.status < 300, headers: new Headers(data.headers), arrayBuffer: async () => body ?? new ArrayBuffer(0), body: { cancel: async () => {} } });
    };
    net.onerror = (e) => {
      const err = new TypeError(`the fetch Worker failed: ${e.message ?? e}`);
      for (const p of fetching.values()) p.reject(err);
      fetching.clear();
      net = null;
    };
  }
  const signal = init.signal;
  if (signal?.aborted) return Promise.reject(signal.reason ?? new DOMException('aborted', 'AbortError'));
  const id = nextFetch++;
  const w = net;
  return new Promise((resolve, reject) => {
    const abort = () => {
      w.postMessage({ cancel: id });
      fetching.delete(id);
      reject(signal.reason ?? new DOMException('aborted', 'AbortError'));
    };
    signal?.addEventListener('abort', abort, { once: true });
    const done = (f) => (x) => (signal?.removeEventListener('abort', abort), f(x));
    fetching.set(id, { resolve: done(resolve), reject: done(reject) });
    w.postMessage({ id, url: String(url), init: { headers: init.headers, cache: init.cache, credentials: init.credentials } });
  });
}

const models = new Map();
let nextModel = 1;
const running = new Map();

/** The error fields the page shows (the reader's rule, kind, byte offset, tensor, HTTP status). */
function errorOf(e) {
  return { message: String(e?.message ?? e), name: e?.name, format: e?.format, kind: e?.kind, rule: e?.rule, offset: e?.offset, tensor: e?.tensor, status: e?.status, url: e?.url };
}

/** A metadata value as short text: long arrays (GGUF tokenizer vocabularies) collapsed to their first items and length. */
function short(v, depth = 0) {
  if (typeof v === 'bigint') return `${v}`;
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(7)));
  if (typeof v === 'string') return v.length > 200 ? `${JSON.stringify(v.slice(0, 200))}… (${v.length} chars)` : JSON.stringify(v);
  if (v instanceof Uint8Array) return `<${v.length} bytes>`;
  if (Array.isArray(v)) return `[${v.slice(0, 6).map((x) => short(x, depth + 1)).join(', ')}${v.length > 6 ? `, … ${v.length} items` : ''}]`;
  if (v && typeof v === 'object') {
    if (depth > 2) return '{…}';
    const e = Object.entries(v);
    return `{${e.slice(0, 8).map(([k, x]) => `${k}: ${short(x, depth + 1)}`).join(', ')}${e.length > 8 ? `, … ${e.length} keys` : ''}}`;
  }
  return String(v);
}

function metadataRows(reader) {
  const meta = reader.metadata ?? {};
  return Object.entries(meta).map(([key, v]) => ({ key, value: short(v), items: Array.isArray(v) ? v.length : null, type: Array.isArray(v) ? 'array' : v instanceof Uint8Array ? 'bytes' : typeof v }));
}

const numel = (shape) => shape.reduce((n, d) => n * Number(d), 1);

/**
 * What a format says about how a tensor is stored beyond offset and size (a .zt object's layout,
 * its parts with their types, encodings, shards and digests; a Tenso packet's kind and flags), as
 * one line; '' when nothing.
 */
function storageDetail(t) {
  const { layout, parts, kind, flags, packet } = t.attributes ?? {};
  // A Tenso packet: its kind, flags and place in the file.
  if (typeof kind === 'string' && Array.isArray(flags)) return `Tenso ${kind} packet #${packet} · flags ${flags.join(', ') || 'none'}`;
  if (typeof layout !== 'string' || !parts || typeof parts !== 'object') return '';
  const each = Object.entries(parts).map(([n, p]) => {
    const how = [p.type ?? p.dtype, `${p.length} B @${p.offset}`, p.encoding && `${p.encoding} → ${p.decoded_length} B`, p.shard !== undefined && `shard ${p.shard}`, p.digest].filter(Boolean);
    return `${n}: ${how.join(', ')}`;
  });
  return `layout ${layout} · ${each.join(' · ')}`;
}

/** The row the page shows for one listing entry. */
function entryOf(t) {
  return {
    name: t.name,
    dtype: t.dtype ?? '?',
    shape: t.shape.map(Number),
    numel: numel(t.shape),
    nbytes: t.nbytes,
    offset: t.layout?.offset ?? null,
    source: t.layout?.source ?? '',
    storage: t.layout?.storage ?? '',
    quant: t.ggml?.quantized ? t.ggml.name : null,
    /** A tensor stored as several parts (a .zt sparse/quantized object): its layout id; read part by part, no statistics. */
    parts: t.layout?.storage === 'parts' ? t.layout.layoutId : null,
    detail: storageDetail(t),
  };
}

/** What the page lists about a reader. */
function describe(model, name, size, reader, openMs) {
  const tensors = reader.tensors.map(entryOf);
  const metadata = metadataRows(reader);
  return {
    model,
    name,
    size,
    format: reader.format,
    tensors,
    metadata,
    // The Architecture tab's (arch-view.js), found here: for a 100k-tensor model it takes
    // a long task's time, which the page's thread would not answer input in.
    arch: architecture(tensors, metadata),
    skipped: reader.skipped ?? [],
    sources: reader.sources ?? [''],
    bytesRead: reader.bytesRead ?? null,
    reads: reader.reads ?? null,
    openMs,
  };
}

/** Opens dropped/picked files: indexes, graphs and first GGUF splits first; files a model read as companions are not opened again. */
async function openFiles(files) {
  const rank = (f) => (/\.(json|onnx)$/i.test(f.name) ? 0 : /-0*1-of-\d+\.gguf$/i.test(f.name) ? 1 : 2);
  const list = [...files].sort((a, b) => rank(a) - rank(b));
  const byName = Object.fromEntries(list.map((f) => [f.name, f]));
  const used = new Set();
  const out = [];
  for (const f of list) {
    if (used.has(f.name)) continue;
    const companions = Object.fromEntries(Object.entries(byName).filter(([n]) => n !== f.name));
    const t0 = performance.now();
    try {
      const reader = await tensorlane.open(f, { companions });
      const id = nextModel++;
      models.set(id, { id, reader, cache: null, how: { file: f, companions } });
      for (const s of reader.sources ?? []) if (s) used.add(s.split('/').pop());
      // A sharded .zt: its sources are shard names, found among the files by these names.
      if (reader.format === 'zt') {
        const stem = f.name.replace(/\.[^.]*$/, '');
        for (const s of reader.sources.slice(1)) for (const n of [`${stem}-${s}.zt`, s, `${s}.zt`]) if (byName[n]) used.add(n);
      }
      out.push(describe(id, f.name, f.size, reader, performance.now() - t0));
    } catch (e) {
      out.push({ name: f.name, size: f.size, error: errorOf(e) });
    }
  }
  // A file opened on its own before a later model read it as a companion (a .zt data shard) is dropped from the list.
  return out.filter((m) => {
    if (!used.has(m.name)) return true;
    if (m.model) {
      models.get(m.model)?.reader.close?.();
      models.delete(m.model);
    }
    return false;
  });
}

async function openUrl(url) {
  const t0 = performance.now();
  const abs = new URL(url, self.location.href).href;
  // The file's length from the first answer's Content-Range, and the requests made (for the overview).
  const seen = { requests: 0, size: null };
  const counted = async (u, init) => {
    seen.requests++;
    const r = await netFetch(u, init);
    if (seen.size === null && u === abs) {
      const m = /\/(\d+)\s*$/.exec(r.headers.get('content-range') ?? '');
      seen.size = m ? Number(m[1]) : r.status === 200 ? Number(r.headers.get('content-length')) : null;
    }
    return r;
  };
  try {
    const reader = await tensorlane.open(abs, { fetch: counted });
    const id = nextModel++;
    models.set(id, { id, reader, cache: null, how: { url: abs } });
    const name = decodeURIComponent(new URL(url, self.location.href).pathname.split('/').pop());
    const d = describe(id, name, seen.size, reader, performance.now() - t0);
    d.url = url;
    d.requests = seen.requests;
    return [d];
  } catch (e) {
    return [{ name: url, url, error: errorOf(e) }];
  }
}

function model(id) {
  const m = models.get(id);
  if (!m) throw new Error(`model ${id} is closed`);
  return m;
}

function aborted(signal) {
  if (signal.aborted) throw Object.assign(new Error('cancelled'), { name: 'AbortError' });
}

/** Values [start, start + count) of a tensor: by element range where the reader can, else from one whole read (cached). */
async function valuesOf(m, name, start, count) {
  const r = m.reader;
  const t = r.info(name);
  if (t.layout.zeroCopy || t.nbytes > WHOLE_LIMIT) return r.values(name, start, count);
  if (m.cache?.name !== name) {
    if (t.nbytes > WHOLE_LIMIT) throw new Error(`${name} is ${t.nbytes} bytes, not stored as-is: too large to decode whole here`);
    m.cache = { name, values: await r.values(name) };
  }
  return m.cache.values.subarray(start, start + count);
}

/** Elements per streamed slice for a tensor of `t`'s dtype. */
function sliceElements(t) {
  const per = t.numel > 0 && t.nbytes ? t.nbytes / t.numel : 4;
  return Math.max(1024, Math.floor(CHUNK_BYTES / Math.max(per, 1)));
}

/**
 * A tensor's statistics: `workers` (the page's choice, else STATS_WORKERS for a tensor of at
 * least PARALLEL_MIN_BYTES) Workers in spans when it is stored as-is in a File or URL, else one.
 */
async function stats(m, name, bins, signal, progress, asked) {
  const r = m.reader;
  const t = r.info(name);
  const workers = asked ?? (t.layout.length >= PARALLEL_MIN_BYTES ? STATS_WORKERS : 1);
  if (workers > 1 && m.how && t.layout.zeroCopy) return statsInParallel(m, t, bins, signal, progress, workers);
  const s = await r.stats(name, { bins, chunkBytes: STATS_SLICE_BYTES, readAhead: STATS_READ_AHEAD, signal, onProgress: (p) => progress(p.bytesDone / p.bytesTotal) });
  return { ...s, workers: 1 };
}

// --- Statistics in spans: this Worker takes span 0, helper Workers (this script) the others.
const helpers = [];
let nextPart = 1;
const parts = new Map();

/** Helper Worker `i`, started on first use. */
function helper(i) {
  while (helpers.length <= i) {
    const w = new Worker(new URL(import.meta.url), { type: 'module', name: `tensorlane stats helper ${helpers.length + 1}` });
    const ready = new Promise((resolve, reject) => {
      w.onerror = (e) => {
        // Before it is ready: it did not start. After: its parts in flight fail with it.
        const err = new Error(`a statistics helper Worker failed: ${e.message ?? e}`);
        reject(err);
        for (const [id, p] of parts) if (p.worker === w) (parts.delete(id), p.reject(err));
      };
      w.onmessage = ({ data }) => {
        if (data.ready) return resolve();
        const p = parts.get(data.id);
        if (!p) return;
        if ('progress' in data) return p.progress(data.progress);
        parts.delete(data.id);
        if (data.error) p.reject(Object.assign(new Error(data.error.message), data.error));
        else p.resolve(data.result);
      };
    });
    helpers.push({ w, ready });
  }
  return helpers[i];
}

/** One pass over one span in helper `i`; aborting `signal` cancels it there. */
async function inHelper(i, msg, signal, progress) {
  const h = helper(i);
  await h.ready;
  aborted(signal);
  const id = nextPart++;
  let fail;
  const done = new Promise((resolve, reject) => {
    fail = reject;
    parts.set(id, { resolve, reject, progress, worker: h.w });
  });
  // Cancelled: the helper is told to stop, and this part ends now (not when the helper answers).
  const cancel = () => {
    h.w.postMessage({ id: nextPart++, op: 'cancel', target: id });
    parts.delete(id);
    fail(Object.assign(new Error('cancelled'), { name: 'AbortError' }));
  };
  signal.addEventListener('abort', cancel, { once: true });
  h.w.postMessage({ id, op: 'part', ...msg });
  try {
    return await done;
  } finally {
    signal.removeEventListener('abort', cancel);
  }
}

/**
 * Both passes of a tensor's statistics in spans (the package's statsSpans / statsSummaryPart /
 * mergeSummaries / statsHistogramPart / mergeStats): span 0 here, the others in helpers that
 * open the same File or URL themselves. The result is reader.stats()'s (counts, min, max and
 * the histogram exactly; mean and std to rounding).
 */
async function statsInParallel(m, t, bins, signal, progress, workers) {
  const r = m.reader;
  const spans = r.statsSpans(t.name, workers);
  const done = new Array(spans.length).fill(0);
  const total = 2 * t.layout.length;
  const mark = (k, base) => (f) => {
    done[k] = base + f * spans[k].bytes;
    progress(done.reduce((a, b) => a + b, 0) / total);
  };
  const options = (k, base) => ({ bins, chunkBytes: STATS_SLICE_BYTES, readAhead: STATS_READ_AHEAD, signal, onProgress: (p) => mark(k, base)(p.bytesDone / p.bytesTotal) });
  const msg = (k, summary) => ({ model: m.id, open: m.how, name: t.name, span: spans[k], summary, bins });
  // Every span in flight: a failure anywhere cancels the rest (their errors are then the abort's).
  const all = async (run) => {
    const ac = new AbortController();
    const stop = () => ac.abort();
    signal.addEventListener('abort', stop, { once: true });
    try {
      return await Promise.all(spans.map((_, k) => run(k, ac.signal).catch((e) => (ac.abort(), Promise.reject(e)))));
    } finally {
      signal.removeEventListener('abort', stop);
    }
  };
  const summaries = await all((k, sig) => (k === 0 ? r.statsSummaryPart(t.name, spans[0], { ...options(0, 0), signal: sig }) : inHelper(k - 1, msg(k), sig, mark(k, 0))));
  const summary = tensorlane.mergeSummaries(summaries);
  const hists = await all((k, sig) => (k === 0 ? r.statsHistogramPart(t.name, spans[0], summary, { ...options(0, spans[0].bytes), signal: sig }) : inHelper(k - 1, msg(k, summary), sig, mark(k, spans[k].bytes))));
  return { ...tensorlane.mergeStats(t, summary, hists), workers: spans.length };
}

/** A helper's readers, by the inspector Worker's model id. */
const opened = new Map();

/** One pass over one span, in a helper. */
async function part(msg, signal, progress) {
  let reader = opened.get(msg.model);
  if (!reader) {
    reader = msg.open.url ? tensorlane.open(msg.open.url, { fetch: netFetch }) : tensorlane.open(msg.open.file, { companions: msg.open.companions });
    opened.set(msg.model, reader);
    reader.catch(() => opened.delete(msg.model)); // a failed open is tried again by the next part
  }
  const rd = await reader;
  const options = { bins: msg.bins, chunkBytes: STATS_SLICE_BYTES, readAhead: STATS_READ_AHEAD, signal, onProgress: (p) => progress(p.bytesDone / p.bytesTotal) };
  return msg.summary ? rd.statsHistogramPart(msg.name, msg.span, msg.summary, options) : rd.statsSummaryPart(msg.name, msg.span, options);
}

/**
 * A heatmap of one 2-D slice (the last two dimensions; `slice` indexes the flattened leading
 * ones): blocks of `block`×`block` elements (one block size on both axes keeps the aspect ratio),
 * each the mean or the absolute maximum of its finite values, streamed row band by row band.
 */
async function heatmap(m, t, slice, mode, maxW, maxH, signal, progress) {
  const nd = t.shape.length;
  const rows = nd >= 2 ? t.shape[nd - 2] : 1;
  const cols = nd >= 1 ? t.shape[nd - 1] : 1;
  const slices = nd > 2 ? t.shape.slice(0, nd - 2).reduce((a, b) => a * b, 1) : 1;
  if (!(slice >= 0 && slice < slices)) throw new RangeError(`slice ${slice} of ${slices}`);
  // One block size on both axes keeps the aspect ratio, unless that leaves a strip narrower than
  // MIN_SIDE pixels (a 32000×2048 embedding: 508×33 px): then rows and columns get their own
  // block sizes (the image is not to scale, and says so).
  const MIN_SIDE = 128;
  let blockR = Math.max(1, Math.ceil(rows / maxH), Math.ceil(cols / maxW));
  let blockC = blockR;
  if (Math.ceil(cols / blockC) < Math.min(MIN_SIDE, cols) || Math.ceil(rows / blockR) < Math.min(MIN_SIDE, rows)) {
    blockR = Math.max(1, Math.ceil(rows / maxH));
    blockC = Math.max(1, Math.ceil(cols / maxW));
  }
  const block = blockR === blockC ? blockR : null;
  const w = Math.ceil(cols / blockC);
  const h = Math.ceil(rows / blockR);
  const acc = new Float64Array(w * h);
  const cnt = new Float64Array(w * h);
  const base = slice * rows * cols;
  const band = Math.max(1, Math.floor(sliceElements(t) / cols));
  let min = Infinity;
  let max = -Infinity;
  for (let r0 = 0; r0 < rows; r0 += band) {
    aborted(signal);
    const n = Math.min(band, rows - r0);
    const v = await valuesOf(m, t.name, base + r0 * cols, n * cols);
    for (let i = 0; i < n; i++) {
      const by = Math.floor((r0 + i) / blockR) * w;
      for (let j = 0; j < cols; j++) {
        const x = v[i * cols + j];
        if (!Number.isFinite(x)) continue;
        if (x < min) min = x;
        if (x > max) max = x;
        const k = by + Math.floor(j / blockC);
        if (mode === 'absmax') {
          if (Math.abs(x) > acc[k]) acc[k] = Math.abs(x);
        } else acc[k] += x;
        cnt[k]++;
      }
    }
    progress((r0 + n) / rows);
  }
  const data = new Float32Array(w * h);
  for (let k = 0; k < data.length; k++) data[k] = cnt[k] === 0 ? NaN : mode === 'absmax' ? acc[k] : acc[k] / cnt[k];
  return { w, h, data, rows, cols, block, blockR, blockC, slices, slice, mode, min: Number.isFinite(min) ? min : NaN, max: Number.isFinite(max) ? max : NaN };
}

// --- .npy export (the format numpy.save writes: version 1.0 header, padded to 64 bytes)
const NPY_DESCR = { float32: '<f4', float64: '<f8', float16: '<f2', int8: '|i1', uint8: '|u1', int16: '<i2', uint16: '<u2', int32: '<i4', uint32: '<u4', int64: '<i8', uint64: '<u8', bool: '|b1', complex64: '<c8', complex128: '<c16' };

/** numpy.lib.format's header for a C-order array of `descr` and `shape` (with numpy's growth-axis spare space). */
export function npyHeader(descr, shape) {
  const repr = shape.length === 0 ? '()' : shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${repr}, }`;
  if (shape.length > 0) h += ' '.repeat(Math.max(0, 21 - String(shape[0]).length));
  const v2 = h.length + 1 + 10 >= 65536;
  const prefix = v2 ? 12 : 10;
  const pad = 64 - ((prefix + h.length + 1) % 64);
  h += `${' '.repeat(pad)}\n`;
  const out = new Uint8Array(prefix + h.length);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, v2 ? 2 : 1, 0]);
  const dv = new DataView(out.buffer);
  if (v2) dv.setUint32(8, h.length, true);
  else dv.setUint16(8, h.length, true);
  for (let i = 0; i < h.length; i++) out[prefix + i] = h.charCodeAt(i);
  return out;
}

async function npy(m, t, signal, chunk, progress) {
  const r = m.reader;
  const raw = NPY_DESCR[t.dtype] && !t.quant && r.info(t.name).layout.zeroCopy;
  // Stored as-is in a NumPy dtype: the file's bytes; otherwise float32 values (bf16, float8, GGUF blocks dequantized).
  const descr = raw ? NPY_DESCR[t.dtype] : t.dtype === 'float64' ? '<f8' : '<f4';
  const header = npyHeader(descr, t.shape);
  chunk(header);
  let total = header.byteLength;
  if (raw) {
    const len = r.info(t.name).layout.length;
    for (let o = 0; o < len; o += CHUNK_BYTES) {
      aborted(signal);
      const b = await r.readBytes(t.name, o, Math.min(CHUNK_BYTES, len - o));
      const copy = b.buffer.byteLength === b.byteLength && b.byteOffset === 0 ? b : b.slice();
      chunk(copy);
      total += copy.byteLength;
      progress((o + b.byteLength) / Math.max(1, len));
    }
  } else {
    const step = Math.floor(CHUNK_BYTES / 4);
    for (let s = 0; s < t.numel; s += step) {
      aborted(signal);
      const v = await valuesOf(m, t.name, s, Math.min(step, t.numel - s));
      const out = descr === '<f8' ? Float64Array.from(v) : Float32Array.from(v);
      chunk(new Uint8Array(out.buffer));
      total += out.byteLength;
      progress((s + v.length) / t.numel);
    }
  }
  return { bytes: total, descr };
}

self.onmessage = async ({ data: msg }) => {
  const { id, op } = msg;
  if (op === 'cancel') {
    running.get(msg.target)?.abort();
    return;
  }
  const ac = new AbortController();
  running.set(id, ac);
  let last = 0;
  const progress = (f) => {
    const now = performance.now();
    if (now - last < 50 && f < 1) return;
    last = now;
    self.postMessage({ id, progress: f });
  };
  try {
    let result;
    const transfer = [];
    if (op === 'open') {
      result = msg.url ? await openUrl(msg.url) : await openFiles(msg.files);
      // A model with a tensor big enough for statistics in spans: start the helpers now, so the
      // first statistics do not wait for them (they open the model when first asked).
      if (result.some((d) => d.tensors?.some((t) => t.nbytes >= PARALLEL_MIN_BYTES))) for (let i = 0; i < STATS_WORKERS - 1; i++) helper(i);
    }
    else if (op === 'close') {
      models.get(msg.model)?.reader.close?.();
      models.delete(msg.model);
      for (const h of helpers) h.w.postMessage({ id: 0, op: 'closePart', model: msg.model });
      result = true;
    } else if (op === 'closePart') {
      (await opened.get(msg.model)?.catch(() => null))?.close?.();
      opened.delete(msg.model);
      return;
    } else if (op === 'part') {
      result = await part(msg, ac.signal, progress);
    } else {
      const m = model(msg.model);
      if (!m.byName) m.byName = new Map(m.reader.tensors.map((x) => [x.name, x]));
      const found = m.byName.get(msg.name);
      if (!found) throw new Error(`no tensor named ${JSON.stringify(msg.name)}`);
      const t = entryOf(found);
      if (op === 'stats') {
        const s = await stats(m, msg.name, msg.bins ?? 64, ac.signal, progress, msg.workers);
        result = { ...s, histogram: { edges: [...s.histogram.edges], counts: s.histogram.counts } };
      } else if (op === 'values') {
        result = Float64Array.from(await valuesOf(m, msg.name, msg.start, msg.count));
        transfer.push(result.buffer);
      } else if (op === 'heatmap') {
        result = await heatmap(m, t, msg.slice ?? 0, msg.mode ?? 'mean', msg.maxW ?? 512, msg.maxH ?? 512, ac.signal, progress);
        transfer.push(result.data.buffer);
      } else if (op === 'npy') {
        result = await npy(m, t, ac.signal, (b) => self.postMessage({ id, chunk: b }, [b.buffer]), progress);
      } else throw new Error(`unknown op ${op}`);
    }
    self.postMessage({ id, result }, transfer);
  } catch (e) {
    self.postMessage({ id, error: errorOf(e) });
  } finally {
    running.delete(id);
  }
};
self.postMessage({ ready: true, backend: tensorlane.backendName, version: tensorlane.version });
