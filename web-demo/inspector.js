// The model inspector (web-demo/index.html): opens model files (picker, drag and drop) and URLs
// (HTTP Range; `?url=`) in a Web Worker (inspector-worker.js) through the package's own API, and
// draws: an overview (format, metadata, totals by dtype), a virtualised tensor table with search,
// filters, sort and a layer tree, and one tensor (stats and histogram streamed with progress and
// cancel, a block-downsampled heatmap, a paged value grid, .npy export). Compare and Graph views
// are mounted from compare-view.js / graph-view.js when those modules exist.
//
// Hooks for automated checks: body[data-state] = loading | ready | error; each table row has
// data-tensor; the stats panel (#tensor) has data-stats-state (running | done | cancelled | error)
// and [data-stat] cells. window.inspector exposes the models and the last export.

import { architecture, renderArchitecture } from './arch-view.js';

const $ = (id) => document.getElementById(id);
const ROW = 24;
const PAGE_ROWS = 16;
const PAGE_COLS = 8;

// --- formatting
export function fmt(x) {
  if (typeof x !== 'number') return String(x);
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Inf' : '-Inf';
  if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
  return Math.abs(x) >= 1e6 || (Math.abs(x) < 1e-4 && x !== 0) ? x.toExponential(4) : String(Number(x.toPrecision(6)));
}
export function bytes(n) {
  if (n === null || n === undefined) return '?';
  if (n < 1024) return `${n} B`;
  const u = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = -1;
  do {
    n /= 1024;
    i++;
  } while (n >= 1024 && i < u.length - 1);
  return `${n.toFixed(n < 10 ? 2 : 1)} ${u[i]}`;
}
const count = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)} k` : String(n));
/** A share as a percentage: 2 significant digits, whole numbers from 100 up (not 1.3e+3%). */
const pct = (x) => `${100 * x >= 100 ? Math.round(100 * x) : Number((100 * x).toPrecision(2))}%`;
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const dtypeOf = (t) => t.quant ?? t.dtype;

// --- the worker
const worker = new Worker(new URL('./inspector-worker.js', import.meta.url), { type: 'module' });
let nextId = 1;
const calls = new Map();
const workerReady = new Promise((resolve) => {
  worker.addEventListener('message', ({ data }) => {
    if (data.ready) {
      // One version for the page, its wasm and the server that embeds them (`tensorlane X.Y.Z`).
      $('version').textContent = data.version ?? '';
      return resolve(data.backend);
    }
    const c = calls.get(data.id);
    if (!c) return;
    if ('progress' in data) return c.onProgress?.(data.progress);
    if ('chunk' in data) return c.onChunk?.(data.chunk);
    calls.delete(data.id);
    if (data.error) c.reject(Object.assign(new Error(data.error.message), data.error));
    else c.resolve(data.result);
  });
});
/** A request to the worker: {promise, cancel()}. */
function call(op, args = {}, hooks = {}) {
  const id = nextId++;
  const promise = new Promise((resolve, reject) => {
    calls.set(id, { resolve, reject, ...hooks });
    worker.postMessage({ id, op, ...args });
  });
  return { id, promise, cancel: () => worker.postMessage({ op: 'cancel', target: id }) };
}

// --- page state
const models = [];
let active = -1;
let view = 'overview';
const params = new URLSearchParams(location.search);
function setParam(k, v) {
  if (v === null || v === undefined || v === '') params.delete(k);
  else params.set(k, v);
  const q = params.toString();
  history.replaceState(null, '', q ? `?${q}` : location.pathname);
}
const setState = (s) => (document.body.dataset.state = s);
/**
 * What the address restores on load besides the model (`url`, `compare`), the view and the tensor:
 * the table's search `q`, `dtype`, `size` and `sort` (`-key`: descending) for the first model
 * opened, and the tensor panel's heatmap block mode `hm`, `slice`, histogram `log` and value `page`.
 */
let restoring = {
  q: params.get('q') ?? '',
  dtype: params.get('dtype') ?? '',
  size: Number(params.get('size')) || 0,
  sort: params.get('sort'),
  slice: Number(params.get('slice')) || 0,
  page: Number(params.get('page')) || 0,
};
if (params.get('hm') === 'absmax') document.getElementById('hm-mode').value = 'absmax';
if (params.get('log') === '1') document.getElementById('h-log').checked = true;
function firstFilter() {
  const r = restoring;
  restoring = null;
  if (!r) return { search: '', dtype: '', size: 0, sortKey: null, sortDir: 1, sel: 0 };
  const sort = /^(-?)(\w+)$/.exec(r.sort ?? '');
  return { search: r.q, dtype: r.dtype, size: r.size, sortKey: sort && SORTS[sort[2]] ? sort[2] : null, sortDir: sort?.[1] ? -1 : 1, sel: 0 };
}

function showError(title, e) {
  const parts = [e.message];
  const where = [];
  // What the message does not already say (a reader's message names its rule, kind and offset).
  const says = (x) => String(e.message ?? '').includes(x);
  if (e.rule && !says(e.rule)) where.push(`rule ${e.rule}`);
  if (e.kind && !e.rule && !says(e.kind)) where.push(`${e.format ?? ''} ${e.kind}`.trim());
  if (e.offset !== undefined && e.offset !== null && !says(`at byte ${e.offset}`)) where.push(`at byte ${e.offset}`);
  if (e.tensor && !says(e.tensor)) where.push(`tensor ${e.tensor}`);
  if (e.status && !says(String(e.status))) where.push(`HTTP ${e.status}`);
  if (where.length) parts.push(where.join(' · '));
  $('error-title').textContent = title;
  $('error-text').textContent = parts.join('\n');
  $('error').classList.add('show');
  $('error').dataset.rule = e.rule ?? e.kind ?? '';
}
$('error').querySelector('.close').addEventListener('click', () => $('error').classList.remove('show'));

// --- opening
let queue = Promise.resolve();
/**
 * A new task: the worker's listing is taken apart (structured clone: 16,669 tensors of a 100k-node
 * graph, ~100 ms) in the task of its message, and the page's overview, chips and first view are
 * drawn in the next, not in the same (issue 26: no main-thread task over 200 ms).
 */
const nextTask = () => new Promise((res) => setTimeout(res, 0));
function addResults(results, origin) {
  let failed = null;
  let first = -1;
  for (const r of results) {
    if (r.error) {
      failed = r;
      models.push({ ...r, failed: true });
      continue;
    }
    models.push({ ...r, ...origin(r) });
    if (first < 0) first = models.length - 1;
  }
  if (failed) showError(`${failed.name} could not be opened`, failed.error);
  else $('error').classList.remove('show');
  if (first >= 0) activate(first);
  renderChips();
  setState(failed ? 'error' : 'ready');
  return results;
}
/** Opens Files (one model, or a set: index + shards, GGUF splits, ONNX + external data; several models at once). */
export function openFiles(files) {
  const list = [...files];
  if (!list.length) return queue;
  queue = queue.then(async () => {
    setState('loading');
    const t0 = performance.now();
    const byName = new Map(list.map((f) => [f.name, f]));
    const results = await call('open', { files: list }).promise;
    const listMs = performance.now() - t0;
    await nextTask();
    return addResults(results, (r) => ({ file: byName.get(r.name), files: list, listMs }));
  });
  return queue;
}
/** Opens a URL (HTTP Range reads in the worker). */
export function openUrl(url, { param = 'url' } = {}) {
  const abs = new URL(url, location.href).href;
  queue = queue.then(async () => {
    setState('loading');
    const t0 = performance.now();
    const results = await call('open', { url: abs }).promise;
    const listMs = performance.now() - t0;
    await nextTask();
    if (param && !results[0].error) setParam(param, url);
    return addResults(results, () => ({ url: abs, listMs }));
  });
  return queue;
}
function closeModel(i) {
  const m = models[i];
  if (!m.failed) call('close', { model: m.model });
  models.splice(i, 1);
  if (m.url && params.get('url') === m.url) setParam('url', null);
  if (active === i) {
    closeTensor();
    active = -1;
    const next = models.findIndex((x) => !x.failed);
    if (next >= 0) activate(next);
    else renderEmpty();
  } else if (active > i) active--;
  renderChips();
  if ($('tabs').querySelector(`[data-view=${view}]`)?.disabled) switchView('overview');
  if (!models.some((x) => x.failed)) $('error').classList.remove('show');
  setState(models.some((x) => x.failed) ? 'error' : 'ready');
}
function renderChips() {
  const box = $('models');
  box.textContent = '';
  models.forEach((m, i) => {
    const chip = document.createElement('span');
    chip.className = `chip${i === active ? ' active' : ''}${m.failed ? ' bad' : ''}`;
    chip.dataset.model = m.name;
    chip.title = m.failed ? m.error.message : `${m.format}, ${m.tensors.length} tensors`;
    const label = document.createElement('span');
    label.textContent = m.failed ? `${m.name} (refused)` : `${m.name} · ${m.format}`;
    const x = document.createElement('button');
    x.className = 'x';
    x.textContent = '×';
    x.title = 'close';
    x.setAttribute('aria-label', `close ${m.name}`);
    x.addEventListener('click', (ev) => {
      ev.stopPropagation();
      closeModel(i);
    });
    chip.append(label, x);
    chip.addEventListener('click', () => (m.failed ? showError(`${m.name} could not be opened`, m.error) : activate(i)));
    box.append(chip);
  });
  const ok = models.filter((m) => !m.failed);
  $('tabs').querySelector('[data-view=compare]').disabled = ok.length < 2;
  $('tabs').querySelector('[data-view=tensors]').disabled = !models[active] || models[active].failed;
  $('tabs').querySelector('[data-view=graph]').disabled = !(models[active]?.format === 'onnx');
  $('tabs').querySelector('[data-view=arch]').disabled = !archOf(models[active]);
  $('tabs').querySelector('[data-view=run]').disabled = !(models[active]?.format === 'gguf'); // run-view.js
}

function activate(i) {
  if (active !== i) closeTensor();
  active = i;
  const m = models[i];
  m.filter ??= firstFilter();
  renderOverview(m);
  // Under the graph the table is not seen: a 100k-node graph's 16k initializers are listed after
  // the first draw's tasks, not in the same one, and their tree is built in pieces (issue 26: no
  // main-thread task over 200 ms). Whoever sets m.tree first renders the table.
  const later = (f) => setTimeout(() => models[active] === m && f(), 0);
  if (!((view === 'graph' || params.get('view') === 'graph') && !params.get('tensor'))) renderTensors(m);
  else if (m.tree) later(() => renderTensors(m));
  else {
    later(() =>
      buildTreeInPieces(m.tensors, 25, () => models.includes(m) && !m.tree).then((tree) => {
        if (!tree || m.tree) return;
        m.tree = tree;
        later(() => renderTensors(m));
      }),
    );
  }
  renderChips();
  if ((view === 'compare' || view === 'graph' || view === 'arch' || view === 'run') && $('tabs').querySelector(`[data-view=${view}]`).disabled) switchView('overview');
  else if (view === 'compare' || view === 'graph' || view === 'run') mountView(view);
  else if (view === 'arch') renderArch();
}
function renderEmpty() {
  $('ov-empty').hidden = false;
  $('ov-body').hidden = true;
  $('gbody').textContent = '';
  $('tree').textContent = '';
  $('count').textContent = '';
}

// --- overview
function totals(m) {
  const by = new Map();
  let params = 0;
  let nbytes = 0;
  for (const t of m.tensors) {
    const k = dtypeOf(t);
    const e = by.get(k) ?? { dtype: k, tensors: 0, params: 0, bytes: 0 };
    e.tensors++;
    e.params += t.numel;
    e.bytes += t.nbytes ?? 0;
    by.set(k, e);
    params += t.numel;
    nbytes += t.nbytes ?? 0;
  }
  return { params, bytes: nbytes, rows: [...by.values()].sort((a, b) => b.params - a.params) };
}
function renderOverview(m) {
  $('ov-empty').hidden = true;
  $('ov-body').hidden = false;
  const tot = totals(m);
  m.totals = { tensors: m.tensors.length, params: tot.params, bytes: tot.bytes };
  $('ov-title').textContent = m.name;
  const facts = [
    ['format', m.format],
    ['source', m.url ?? `local file${m.sources.length > 1 ? 's' : ''}`],
    [m.sources.length > 1 ? `${m.name} size` : 'file size', m.size === null ? '—' : `${bytes(m.size)} (${m.size} bytes)${m.sources.length > 1 ? `; ${m.sources.length - 1} more files hold the rest` : ''}`],
    ['tensors', m.tensors.length],
    ['parameters', `${count(tot.params)} (${tot.params})`],
    ['tensor bytes', `${bytes(tot.bytes)} (${tot.bytes})`],
    ['read to list', m.bytesRead === null ? '—' : `${bytes(m.bytesRead)} in ${m.reads} reads${m.requests ? ` (${m.requests} HTTP requests)` : ''}${m.size && m.sources.length === 1 ? ` (${pct(m.bytesRead / m.size)} of the file)` : m.sources.length > 1 ? ` from ${m.sources.length} files` : ''}, ${m.openMs.toFixed(1)} ms`],
  ];
  if (m.sources.length > 1) facts.push(['companions', m.sources.slice(1).join(', ')]);
  if (m.skipped.length) facts.push(['skipped', m.skipped.map((s) => `${s.name} (${s.reason})`).join('; ')]);
  $('ov-facts').innerHTML = facts.map(([k, v]) => `<tr><th>${esc(k)}</th><td class="val" data-fact="${esc(k)}">${esc(v)}</td></tr>`).join('');
  $('ov-dtypes').innerHTML =
    '<tr><th>dtype</th><th class="num">tensors</th><th class="num">parameters</th><th class="num">bytes</th><th class="num">share</th></tr>' +
    tot.rows.map((r) => `<tr data-dtype="${esc(r.dtype)}"><td>${esc(r.dtype)}</td><td class="num">${r.tensors}</td><td class="num" data-params="${r.params}">${count(r.params)}</td><td class="num" data-bytes="${r.bytes}">${bytes(r.bytes)}</td><td class="num">${tot.params ? ((100 * r.params) / tot.params).toFixed(1) : 0}%</td></tr>`).join('') +
    `<tr><th>total</th><th class="num">${m.tensors.length}</th><th class="num">${count(tot.params)}</th><th class="num">${bytes(tot.bytes)}</th><th></th></tr>`;
  drawBars($('ov-chart'), tot.rows);
  $('ov-meta-title').textContent = `Metadata (${m.metadata.length} ${m.metadata.length === 1 ? 'key' : 'keys'})`;
  $('ov-meta').innerHTML = m.metadata.length
    ? m.metadata.map((r) => `<tr><td>${esc(r.key)}</td><td class="val">${esc(r.value)}</td></tr>`).join('')
    : '<tr><td class="muted">none</td></tr>';
}
function drawBars(c, rows) {
  const dpr = window.devicePixelRatio || 1;
  const W = c.clientWidth || 560;
  const H = Math.max(60, 26 * Math.min(rows.length, 12) + 10);
  c.width = W * dpr;
  c.height = H * dpr;
  c.style.height = `${H}px`;
  const g = c.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, W, H);
  const max = Math.max(1, ...rows.map((r) => r.params));
  g.font = '12px ui-monospace, monospace';
  rows.slice(0, 12).forEach((r, i) => {
    const y = 6 + i * 26;
    g.fillStyle = '#394252';
    g.fillText(r.dtype, 4, y + 14);
    const w = Math.max(1, ((W - 190) * r.params) / max);
    g.fillStyle = '#7f9fe0';
    g.fillRect(100, y + 3, w, 16);
    g.fillStyle = '#394252';
    g.fillText(count(r.params), 106 + w, y + 15);
  });
}

// --- architecture (arch-view.js): embedding → N × block → norm → head, from names and metadata
/** The active model's architecture, or null (computed once a model). */
function archOf(m) {
  if (!m || m.failed) return null;
  if (m.arch === undefined) m.arch = architecture(m.tensors, m.metadata);
  return m.arch;
}
function renderArch() {
  const a = archOf(models[active]);
  if (!a) return;
  $('arch-host').innerHTML = renderArchitecture(a);
}
$('arch-host').addEventListener('click', (ev) => {
  // A tensor of a part opens in the Tensors view (a block's: the first block's).
  const tr = ev.target.closest('[data-part-tensor]');
  const a = archOf(models[active]);
  if (!tr || !a) return;
  const inBlock = tr.closest('[data-part^="block."]');
  const name = inBlock ? `${a.prefix ? `${a.prefix}.` : ''}${a.block.first}.${tr.dataset.partTensor}` : tr.dataset.partTensor;
  switchView('tensors');
  openTensor(name);
});

// --- tensors: search, filter, sort, virtual rows, layer tree
export function matcher(q) {
  q = q.trim();
  if (!q) return () => true;
  const re = /^\/(.+)\/([a-z]*)$/.exec(q);
  if (re) {
    try {
      const r = new RegExp(re[1], re[2]);
      return (s) => r.test(s);
    } catch {
      return () => false;
    }
  }
  if (/[*?]/.test(q)) {
    const r = new RegExp(`^${q.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`, 'i');
    return (s) => r.test(s);
  }
  const low = q.toLowerCase();
  return (s) => s.toLowerCase().includes(low);
}
const SORTS = {
  name: (t) => t.name,
  dtype: dtypeOf,
  shape: (t) => t.shape.length * 1e18 + t.numel,
  params: (t) => t.numel,
  bytes: (t) => t.nbytes ?? -1,
  offset: (t) => t.offset ?? -1,
};
function filtered(m) {
  const f = m.filter;
  const match = matcher(f.search);
  let out = m.tensors.filter((t) => (!f.dtype || dtypeOf(t) === f.dtype) && (t.nbytes ?? 0) >= f.size && match(t.name));
  if (f.sortKey) {
    const key = SORTS[f.sortKey];
    const cmp = (a, b) => {
      const x = key(a);
      const y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * f.sortDir;
    };
    out = out.slice().sort(cmp);
  }
  return out;
}
const COLS = [['name', 'name'], ['dtype', 'dtype'], ['shape', 'shape'], ['params', 'parameters', 'num'], ['bytes', 'bytes', 'num'], ['offset', 'offset', 'num']];
let rowsNow = [];
function renderTensors(m) {
  const dsel = $('f-dtype');
  const seen = [...new Set(m.tensors.map(dtypeOf))].sort();
  dsel.innerHTML = '<option value="">all dtypes</option>' + seen.map((d) => `<option>${esc(d)}</option>`).join('');
  dsel.value = m.filter.dtype;
  $('search').value = m.filter.search;
  $('f-size').value = String(m.filter.size);
  m.tree ??= buildTree(m.tensors);
  renderTree(m);
  refilter(m);
}
function refilter(m, keepSel = false) {
  rowsNow = filtered(m);
  if (!keepSel) m.filter.sel = 0;
  // The totals of what the filters let through (parameters and bytes), not only the count.
  let np = 0;
  let nb = 0;
  for (const t of rowsNow) {
    np += t.numel;
    nb += t.nbytes ?? 0;
  }
  const c = $('count');
  c.textContent = `${rowsNow.length} of ${m.tensors.length} · ${count(np)} params · ${bytes(nb)}`;
  c.dataset.rows = String(rowsNow.length);
  c.dataset.params = String(np);
  c.dataset.bytes = String(nb);
  const f = m.filter;
  setParam('q', f.search);
  setParam('dtype', f.dtype);
  setParam('size', f.size || null);
  setParam('sort', f.sortKey ? `${f.sortDir < 0 ? '-' : ''}${f.sortKey}` : null);
  $('ghead').innerHTML = COLS.map(([k, label, cls]) => `<span data-sort="${k}" class="${cls ?? ''}">${label}${m.filter.sortKey === k ? (m.filter.sortDir > 0 ? ' ▲' : ' ▼') : ''}</span>`).join('');
  $('gbody').style.height = `${rowsNow.length * ROW}px`;
  $('gbody').style.position = 'relative';
  drawRows();
}
/** JavaScript time of the last table redraws (ms), for the benchmark. */
const rowTimes = [];
function drawRows() {
  const m = models[active];
  if (!m) return;
  const t0 = performance.now();
  const g = $('grid');
  const top = Math.max(0, g.scrollTop - ROW);
  const first = Math.max(0, Math.floor(top / ROW) - 5);
  const last = Math.min(rowsNow.length, Math.ceil((g.scrollTop + g.clientHeight) / ROW) + 5);
  let html = '';
  for (let i = first; i < last; i++) {
    const t = rowsNow[i];
    html +=
      `<div class="row${i === m.filter.sel ? ' sel' : ''}" style="top:${i * ROW}px" data-i="${i}" data-tensor="${esc(t.name)}">` +
      `<span title="${esc(t.name)}">${esc(t.name)}</span><span>${esc(dtypeOf(t))}</span><span>[${t.shape.join(', ')}]</span>` +
      `<span class="num">${count(t.numel)}</span><span class="num">${bytes(t.nbytes)}</span><span class="num">${t.offset ?? '—'}</span></div>`;
  }
  $('gbody').innerHTML = html;
  rowTimes.push(performance.now() - t0);
  if (rowTimes.length > 1000) rowTimes.shift();
}
let rowFrame = 0;
$('grid').addEventListener('scroll', () => {
  cancelAnimationFrame(rowFrame);
  rowFrame = requestAnimationFrame(drawRows);
});
$('ghead').addEventListener('click', (ev) => {
  const k = ev.target.closest('[data-sort]')?.dataset.sort;
  const m = models[active];
  if (!k || !m) return;
  m.filter.sortDir = m.filter.sortKey === k ? -m.filter.sortDir : 1;
  m.filter.sortKey = k;
  refilter(m);
});
$('gbody').addEventListener('click', (ev) => {
  const row = ev.target.closest('.row');
  if (!row) return;
  models[active].filter.sel = Number(row.dataset.i);
  drawRows();
  openTensor(row.dataset.tensor);
});
let searchTimer = 0;
$('search').addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    const m = models[active];
    if (!m) return;
    m.filter.search = $('search').value;
    refilter(m);
  }, 80);
});
$('f-dtype').addEventListener('change', () => models[active] && ((models[active].filter.dtype = $('f-dtype').value), refilter(models[active])));
$('f-size').addEventListener('change', () => models[active] && ((models[active].filter.size = Number($('f-size').value)), refilter(models[active])));

/** No children: the leaves (most of a tree's nodes) share it rather than each making a Map. */
const NO_KIDS = new Map();
/**
 * A trie of dotted names: {label, path, params, tensors, kids: Map, own}; `own`: the tensors named
 * exactly `path` (usually none or one). A block's structure (`sigOf`) and dtypes (`dtypesOf`) are
 * worked out only when its parent's children are shown: building the 16,669-initializer tree of a
 * 100k-node graph took 270-420 ms in one task when every level kept its tensors' relative names
 * and a Set of dtypes, mostly the garbage collector's (issue 26: no main-thread task over 200 ms).
 */
export function buildTree(tensors) {
  const root = treeRoot();
  for (const t of tensors) addToTree(root, t);
  return root;
}
/**
 * `buildTree` in pieces of about `sliceMs` each, yielding to the event loop between them, so a
 * model of any number of tensors lists without a long task; resolves to the tree, or to null when
 * `wanted()` turns false between pieces (the model was closed).
 */
export async function buildTreeInPieces(tensors, sliceMs = 25, wanted = () => true) {
  const root = treeRoot();
  let i = 0;
  while (i < tensors.length) {
    const t0 = performance.now();
    do for (const end = Math.min(i + 256, tensors.length); i < end; i++) addToTree(root, tensors[i]);
    while (i < tensors.length && performance.now() - t0 < sliceMs);
    if (i < tensors.length) {
      await new Promise((res) => setTimeout(res, 0));
      if (!wanted()) return null;
    }
  }
  return root;
}
const treeRoot = () => ({ label: '', path: '', params: 0, tensors: 0, kids: NO_KIDS, own: null });
function addToTree(root, t) {
  let n = root;
  n.params += t.numel;
  n.tensors++;
  for (const p of t.name.split('.')) {
    let k = n.kids.get(p);
    if (!k) {
      k = { label: p, path: n.path ? `${n.path}.${p}` : p, params: 0, tensors: 0, kids: NO_KIDS, own: null };
      if (n.kids === NO_KIDS) n.kids = new Map();
      n.kids.set(p, k);
    }
    k.params += t.numel;
    k.tensors++;
    n = k;
  }
  (n.own ??= []).push(t);
}
/**
 * The structure of a block, as a string equal for two nodes exactly when they hold the same
 * relative names, in the order the names first appear, with the same shapes (a quantized
 * checkpoint may store one layer's tensor in another dtype, Q4_K_M's Q6_K layers; that is the same
 * architecture, so dtypes are not part of it). Kept on the node once worked out.
 */
export function sigOf(node) {
  if (node.sig !== undefined) return node.sig;
  let s = node.own ? `[${node.own.map((t) => t.shape.join('x')).join(';')}]` : '';
  // Labels are length-prefixed, so no label can pass for another's brackets.
  for (const k of node.kids.values()) s += `${k.label.length}:${k.label}{${sigOf(k)}}`;
  node.sig = s;
  return s;
}
/** The dtypes (quantization types where quantized) of the tensors under `node`, kept once worked out. */
export function dtypesOf(node) {
  if (node.dtypes) return node.dtypes;
  const out = new Set(node.own?.map(dtypeOf));
  for (const k of node.kids.values()) for (const d of dtypesOf(k)) out.add(d);
  node.dtypes = out;
  return out;
}
/**
 * A node's children for display: runs of numbered children (layers.0 … layers.N) with the same
 * structure (`sigOf`: the same relative names and shapes) become one group that opens into its
 * first member, the representative, with the count of repeats.
 */
export function displayKids(node) {
  const kids = [...node.kids.values()];
  const out = [];
  const num = (k) => /^\d+$/.test(k.label);
  for (let i = 0; i < kids.length; ) {
    const k = kids[i];
    if (num(k)) {
      const sig = sigOf(k);
      let j = i + 1;
      while (j < kids.length && num(kids[j]) && sigOf(kids[j]) === sig) j++;
      if (j - i >= 2) {
        const run = kids.slice(i, j);
        let params = 0;
        let tensors = 0;
        for (const x of run) {
          params += x.params;
          tensors += x.tensors;
        }
        let dtypes = null;
        out.push({
          group: true,
          label: `${run[0].label}..${run[run.length - 1].label}`,
          repeat: run.length,
          members: run,
          rep: run[0],
          params,
          tensors,
          path: node.path,
          // The dtypes of all members, worked out when the group is opened (not for every group shown).
          get dtypes() {
            if (!dtypes) {
              dtypes = new Set();
              for (const x of run) for (const d of dtypesOf(x)) dtypes.add(d);
            }
            return dtypes;
          },
        });
        i = j;
        continue;
      }
    }
    out.push(k);
    i++;
  }
  return out;
}
const reEsc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
function renderTree(m) {
  const box = $('tree');
  box.textContent = '';
  const all = document.createElement('div');
  all.className = 'node';
  all.innerHTML = `<span class="label">(all)</span><span class="n">${count(m.tree.params)}</span>`;
  all.addEventListener('click', () => setSearch(m, ''));
  box.append(all, kidsOf(m, m.tree, 0, null));
}
function setSearch(m, q) {
  m.filter.search = q;
  $('search').value = q;
  refilter(m);
}
/**
 * The lines under `node`. `within`: null, or the repeated group whose representative `node` lies
 * in ({group, repeat}): each line then shows its parameters per layer and across the repeats, and
 * a click filters that part in every member of the group.
 */
function kidsOf(m, node, depth, within) {
  const wrap = document.createElement('div');
  wrap.className = 'kids';
  const shown = displayKids(node).slice(0, 500);
  if (depth > 64) return wrap;
  for (const k of shown) {
    const line = document.createElement('div');
    line.className = `node${k.group ? ' rep' : ''}`;
    const leaf = !k.group && k.kids.size === 0;
    const times = within ? within.repeat : 1;
    const n = k.params;
    const tot = within ? `<span class="tot" title="across the ${within.repeat} repeats">×${within.repeat} = ${count(n * times)}</span>` : '';
    line.innerHTML = `<span class="tw">${leaf ? '·' : '▸'}</span><span class="label">${esc(k.group ? `${k.label} ×${k.repeat}` : k.label)}</span><span class="n">${count(n)}</span>${tot}`;
    line.dataset.path = k.group ? `${k.path}.[${k.label}]` : k.path;
    line.dataset.params = String(n);
    if (within) line.dataset.total = String(n * times);
    if (k.group) line.dataset.repeat = String(k.repeat);
    line.title = k.group
      ? `${k.repeat} blocks with the same tensors: ${count(k.rep.params)} parameters and ${k.rep.tensors} tensors each, ${k.params} parameters in all`
      : `${k.path}: ${k.tensors} tensors, ${k.params} parameters${within ? ` (one layer; ${n * times} in all ${within.repeat})` : ''}`;
    let open = null;
    const toggle = () => {
      if (open) {
        open.remove();
        open = null;
        line.querySelector('.tw').textContent = '▸';
        return;
      }
      if (k.group) {
        // One representative layer (the first of the run) with its parts, not the run again.
        open = document.createElement('div');
        open.className = 'kids';
        const info = document.createElement('div');
        info.className = 'rep-info muted';
        info.dataset.repeat = String(k.repeat);
        info.dataset.perLayer = String(k.rep.params);
        info.dataset.total = String(k.params);
        const mixed = k.dtypes.size > 1 ? ` · dtypes vary: ${[...k.dtypes].join(', ')}` : '';
        info.textContent = `layer ${k.rep.label} of ${k.repeat} alike: ${count(k.rep.params)} params, ${k.rep.tensors} tensors each · ${count(k.params)} in all${mixed}`;
        const base = k.path ? `${reEsc(k.path)}\\.` : '';
        const sub = kidsOf(m, k.rep, depth + 1, { repeat: k.repeat * (within?.repeat ?? 1), members: k.members, base, rep: k.rep });
        open.append(info, sub);
      } else open = kidsOf(m, k, depth + 1, within);
      line.after(open);
      line.querySelector('.tw').textContent = '▾';
    };
    line.addEventListener('click', () => {
      if (leaf) return openTensor(k.path);
      if (k.group) setSearch(m, `/^${k.path ? `${reEsc(k.path)}\\.` : ''}(${k.members.map((x) => x.label).join('|')})\\./`);
      else if (within) setSearch(m, `/^${within.base}(${within.members.map((x) => x.label).join('|')})${reEsc(k.path.slice(within.rep.path.length))}\\./`);
      else setSearch(m, `${k.path}.*`);
      toggle();
    });
    wrap.append(line);
    // A lone child (model → layers) opens by itself, down to where the names branch.
    if (shown.length === 1 && !leaf && !k.group) toggle();
  }
  return wrap;
}

// --- one tensor
let job = null;
let current = null;
function cancelJob() {
  job?.cancel();
  job = null;
}
function closeTensor() {
  cancelJob();
  current = null;
  $('tensor').classList.remove('show');
  $('tensor').dataset.statsState = 'idle';
  for (const k of ['tensor', 'page', 'vcol', 'slice']) setParam(k, null);
}
$('t-close').addEventListener('click', closeTensor);
$('t-cancel').addEventListener('click', () => {
  if (!job) return;
  cancelJob();
});
const NUMERIC = (t) => !t.parts && !/^complex|^string|^\?/.test(t.dtype) && !['dense', 'sparse_coo', 'sparse_csr', 'quantized'].includes(t.dtype);

/** Opens tensor `name` of the active model: stats + histogram, then heatmap, then the first page of values. */
export async function openTensor(name, { page = 0, slice = 0, col = 0 } = {}) {
  const m = models[active];
  const t = m?.tensors.find((x) => x.name === name);
  if (!t) return;
  cancelJob();
  const at = rowsNow.indexOf(t);
  if (at >= 0 && m.filter.sel !== at) {
    m.filter.sel = at;
    drawRows();
  }
  current = { m, t, page: 0, col: 0, stats: null, heat: null };
  const mine = current;
  setParam('tensor', name);
  const panel = $('tensor');
  panel.classList.add('show');
  panel.dataset.tensor = name;
  $('t-name').textContent = name;
  $('t-info').textContent = `${dtypeOf(t)} · [${t.shape.join(', ')}] · ${count(t.numel)} values · ${bytes(t.nbytes)}${t.offset !== null ? ` · offset ${t.offset}${t.source ? ` in ${t.source}` : ''}` : ''}`;
  // How the format stores it (a .zt object's layout, parts, encodings, shards and digests).
  $('t-detail').textContent = t.detail;
  $('t-detail').hidden = !t.detail;
  for (const s of panel.querySelectorAll('[data-stat]')) {
    s.textContent = '…';
    delete s.dataset.value;
  }
  $('values').textContent = '';
  $('v-goto').value = '';
  $('v-goto').classList.remove('bad');
  $('npy-text').textContent = '';
  $('hover').textContent = '';
  clearCanvas($('hist'));
  clearCanvas($('heat'));
  $('hm-info').textContent = '';
  const nd = t.shape.length;
  const slices = nd > 2 ? t.shape.slice(0, -2).reduce((a, b) => a * b, 1) : 1;
  $('hm-slice-box').hidden = slices <= 1;
  $('hm-slice').max = String(slices - 1);
  $('hm-slice').value = String(Math.max(0, Math.min(slices - 1, slice)));
  setParam('slice', Number($('hm-slice').value) || null);
  if (!NUMERIC(t)) {
    panel.dataset.statsState = 'error';
    $('t-progress-text').textContent = t.parts ? `stored as parts under ${t.parts}: no statistics of the whole (its parts are listed above)` : `${t.dtype}: no statistics for this kind of tensor`;
    return;
  }
  panel.dataset.statsState = 'running';
  const bar = $('t-progress');
  bar.value = 0;
  $('t-progress-text').textContent = 'statistics…';
  const t0 = performance.now();
  job = call('stats', { model: m.model, name, bins: 64, workers: window.inspector.statsWorkers }, { onProgress: (f) => mine === current && (bar.value = f) });
  try {
    const s = await job.promise;
    if (mine !== current) return;
    current.stats = s;
    panel.dataset.statsWorkers = String(s.workers ?? 1);
    for (const el of panel.querySelectorAll('[data-stat]')) {
      el.textContent = fmt(s[el.dataset.stat]);
      el.dataset.value = Object.is(s[el.dataset.stat], -0) ? '-0' : String(s[el.dataset.stat]); // full precision, for checks
    }
    bar.value = 1;
    const ms = performance.now() - t0;
    const workers = s.workers > 1 ? `, ${s.workers} Workers` : '';
    $('t-progress-text').textContent = `statistics in ${ms.toFixed(0)} ms${t.nbytes >= 1 << 20 ? ` (${((2 * t.nbytes) / 1e6 / (ms / 1000)).toFixed(0)} MB/s over two passes${workers})` : ''}`;
    panel.dataset.statsState = 'done';
    drawHistogram();
  } catch (e) {
    if (mine !== current) return;
    const cancelled = e.name === 'AbortError';
    panel.dataset.statsState = cancelled ? 'cancelled' : 'error';
    $('t-progress-text').textContent = cancelled ? 'cancelled' : `error: ${e.message}`;
    for (const el of panel.querySelectorAll('[data-stat]')) el.textContent = '—';
    if (cancelled) return;
  }
  job = null;
  await showPage(page, col);
  if (nd >= 2 && mine === current) await drawHeat();
}

function clearCanvas(c) {
  c.getContext('2d').clearRect(0, 0, c.width, c.height);
}
function drawHistogram() {
  const s = current?.stats;
  if (!s) return;
  const c = $('hist');
  const dpr = window.devicePixelRatio || 1;
  const W = c.clientWidth || 900;
  const H = 140;
  c.width = W * dpr;
  c.height = H * dpr;
  const g = c.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, W, H);
  const counts = s.histogram.counts;
  const log = $('h-log').checked;
  const f = (x) => (log ? Math.log10(1 + x) : x);
  const max = Math.max(1e-9, ...counts.map(f));
  const bw = (W - 20) / counts.length;
  g.fillStyle = '#5b7fd0';
  counts.forEach((n, i) => {
    const h = ((H - 30) * f(n)) / max;
    g.fillRect(10 + i * bw, H - 20 - h, Math.max(1, bw - 1), h);
  });
  g.fillStyle = '#5b6575';
  g.font = '11px ui-monospace, monospace';
  const e = s.histogram.edges;
  g.fillText(fmt(e[0]), 10, H - 5);
  const right = fmt(e[e.length - 1]);
  g.fillText(right, W - 10 - g.measureText(right).width, H - 5);
  g.fillText(`${log ? 'log ' : ''}max ${count(Math.max(...counts))}`, 10, 10);
}
$('h-log').addEventListener('change', () => {
  setParam('log', $('h-log').checked ? '1' : null);
  drawHistogram();
});

/** Diverging blue–white–red around 0 (mean), white–red (absmax); NaN blocks grey. */
function color(v, lim, mode) {
  if (!Number.isFinite(v)) return [200, 204, 212];
  if (mode === 'absmax') {
    const a = Math.min(1, v / lim);
    return [245 - a * (245 - 194), 245 - a * (245 - 64), 245 - a * (245 - 43)];
  }
  const a = Math.max(-1, Math.min(1, v / lim));
  return a < 0 ? [245 + a * (245 - 44), 245 + a * (245 - 79), 245 + a * (245 - 168)] : [245 - a * (245 - 194), 245 - a * (245 - 64), 245 - a * (245 - 43)];
}
async function drawHeat() {
  const cur = current;
  const { m, t } = cur;
  const mode = $('hm-mode').value;
  const slice = Number($('hm-slice').value) || 0;
  $('hm-info').textContent = 'reading…';
  cancelJob();
  const bar = $('t-progress');
  job = call('heatmap', { model: m.model, name: t.name, slice, mode, maxW: 512, maxH: 512 }, { onProgress: (f) => cur === current && (bar.value = f) });
  let h;
  try {
    h = await job.promise;
  } catch (e) {
    if (cur === current) $('hm-info').textContent = e.name === 'AbortError' ? 'cancelled' : `error: ${e.message}`;
    return;
  } finally {
    if (cur === current) job = null;
  }
  if (cur !== current) return;
  cur.heat = h;
  const c = $('heat');
  c.width = h.w;
  c.height = h.h;
  const img = c.getContext('2d').createImageData(h.w, h.h);
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of h.data) if (Number.isFinite(v)) (lo = Math.min(lo, v)), (hi = Math.max(hi, v));
  const constant = !(hi > lo) || !(h.max > h.min);
  const lim = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
  for (let k = 0; k < h.data.length; k++) {
    const [r, g, b] = constant ? [228, 231, 236] : color(h.data[k], lim, mode);
    img.data.set([r, g, b, 255], 4 * k);
  }
  c.getContext('2d').putImageData(img, 0, 0);
  const scale = Math.max(1, Math.floor(Math.min(512 / h.w, 384 / h.h)));
  c.style.width = `${h.w * scale}px`;
  c.style.height = 'auto';
  c.dataset.constant = String(constant);
  $('hm-lo').textContent = constant ? '' : mode === 'absmax' ? '0' : fmt(-lim);
  $('hm-hi').textContent = constant ? '' : fmt(lim);
  const per = (n, what) => `${n} ${what}${n === 1 ? '' : 's'}`;
  const scaleNote = h.block ? `${h.block}×${h.block} elements a pixel` : `${per(h.blockR, 'row')} × ${per(h.blockC, 'column')} a pixel (not to scale)`;
  $('hm-info').textContent = `${h.rows} rows × ${h.cols} columns${h.slices > 1 ? ` (slice ${h.slice} of ${h.slices})` : ''} → ${h.w} px wide × ${h.h} px tall, ${scaleNote} (${mode})${constant ? ` · constant: every value is ${fmt(h.min)}` : ''}`;
  c.dataset.blockRows = String(h.blockR);
  c.dataset.blockCols = String(h.blockC);
}
$('hm-mode').addEventListener('change', () => {
  setParam('hm', $('hm-mode').value === 'mean' ? null : $('hm-mode').value);
  if (current) drawHeat();
});
$('hm-slice').addEventListener('change', () => {
  setParam('slice', current ? Number($('hm-slice').value) || null : null);
  if (current) drawHeat();
});
$('heat').addEventListener('mousemove', (ev) => {
  const h = current?.heat;
  if (!h) return;
  const c = ev.currentTarget;
  const x = Math.min(h.w - 1, Math.floor((ev.offsetX / c.clientWidth) * h.w));
  const y = Math.min(h.h - 1, Math.floor((ev.offsetY / c.clientHeight) * h.h));
  const r0 = y * h.blockR;
  const c0 = x * h.blockC;
  const r1 = Math.min(h.rows, r0 + h.blockR) - 1;
  const c1 = Math.min(h.cols, c0 + h.blockC) - 1;
  const one = h.blockR === 1 && h.blockC === 1;
  $('hover').textContent = `${!one ? `rows ${r0}–${r1}, cols ${c0}–${c1}` : `[${r0}, ${c0}]`}: ${h.mode === 'absmax' && !one ? 'max |v|' : !one ? 'mean' : 'value'} ${fmt(h.data[y * h.w + x])}`;
});

/**
 * The value grid's layout of tensor `t`: a matrix (2-D or more) as rows × its last dimension, the
 * leading dimensions flattened into rows; a vector as rows of PAGE_COLS.
 */
function gridOf(t) {
  const nd = t.shape.length;
  if (nd >= 2) {
    const cols = t.shape[nd - 1];
    return { matrix: true, cols, rows: cols ? t.numel / cols : 0, lead: t.shape.slice(0, -1) };
  }
  return { matrix: false, cols: PAGE_COLS, rows: Math.ceil(t.numel / PAGE_COLS), lead: null };
}
/** A row's label: its index, or its multi-index over the leading dimensions of an N-D tensor. */
function rowLabel(g, r) {
  if (!g.matrix) return String(r * PAGE_COLS);
  if (g.lead.length === 1) return String(r);
  const idx = [];
  for (let k = g.lead.length - 1, x = r; k >= 0; k--) {
    idx.unshift(x % g.lead[k]);
    x = Math.floor(x / g.lead[k]);
  }
  return `[${idx.join(', ')}]`;
}
/**
 * Shows the value grid's window: row page `page` (PAGE_ROWS rows) and column page `col`
 * (PAGE_COLS columns of a matrix); `hit`, a flat index to mark. Both are clamped and go to the
 * address (`page`, `vcol`).
 */
async function showPage(page, col = current?.col ?? 0, hit = null) {
  const cur = current;
  if (!cur) return;
  const g = gridOf(cur.t);
  const pages = Math.max(1, Math.ceil(g.rows / PAGE_ROWS));
  const colPages = g.matrix ? Math.max(1, Math.ceil(g.cols / PAGE_COLS)) : 1;
  page = Math.max(0, Math.min(pages - 1, page));
  col = Math.max(0, Math.min(colPages - 1, col));
  cur.page = page;
  cur.col = col;
  setParam('page', page || null);
  setParam('vcol', col || null);
  const r0 = page * PAGE_ROWS;
  const r1 = Math.min(g.rows, r0 + PAGE_ROWS);
  const c0 = g.matrix ? col * PAGE_COLS : 0;
  const c1 = g.matrix ? Math.min(g.cols, c0 + PAGE_COLS) : PAGE_COLS;
  $('v-page').textContent = g.matrix
    ? `rows ${rowLabel(g, r0)}–${rowLabel(g, Math.max(r0, r1 - 1))} of ${g.rows}, columns ${c0}–${Math.max(c0, c1 - 1)} of ${g.cols} (page ${page + 1}/${pages})`
    : `${r0 * PAGE_COLS}–${Math.min(cur.t.numel, r1 * PAGE_COLS) - 1} of ${cur.t.numel} (page ${page + 1}/${pages})`;
  $('v-left').disabled = col === 0;
  $('v-right').disabled = col >= colPages - 1;
  $('v-left').hidden = $('v-right').hidden = !g.matrix || colPages <= 1;
  if (r1 <= r0 || cur.t.numel === 0) return;
  // One read where the window's rows are contiguous (the whole width shown), else one per row.
  const width = c1 - c0;
  let rowsOf;
  try {
    const read = (start, count) => call('values', { model: cur.m.model, name: cur.t.name, start, count }).promise;
    if (!g.matrix || (c0 === 0 && c1 === g.cols)) {
      const rowLen = g.matrix ? g.cols : PAGE_COLS;
      const start = r0 * rowLen;
      const v = await read(start, Math.min(cur.t.numel, r1 * rowLen) - start);
      rowsOf = (r) => v.subarray((r - r0) * rowLen, Math.min(v.length, (r - r0 + 1) * rowLen));
    } else {
      const got = await Promise.all(Array.from({ length: r1 - r0 }, (_, k) => read((r0 + k) * g.cols + c0, width)));
      rowsOf = (r) => got[r - r0];
    }
  } catch (e) {
    if (cur === current) $('values').innerHTML = `<tr><td class="err">${esc(e.message)}</td></tr>`;
    return;
  }
  if (cur !== current || cur.page !== page || cur.col !== col) return;
  const heads = g.matrix ? Array.from({ length: width }, (_, j) => c0 + j) : Array.from({ length: PAGE_COLS }, (_, j) => `+${j}`);
  let html = `<tr><th></th>${heads.map((x) => `<th>${x}</th>`).join('')}</tr>`;
  for (let r = r0; r < r1; r++) {
    const v = rowsOf(r);
    html += `<tr><th>${rowLabel(g, r)}</th>`;
    for (let j = 0; j < heads.length; j++) {
      const i = g.matrix ? r * g.cols + c0 + j : r * PAGE_COLS + j;
      html += j < v.length ? `<td data-index="${i}" data-value="${Object.is(v[j], -0) ? '-0' : v[j]}"${i === hit ? ' class="hit"' : ''}>${fmt(v[j])}</td>` : '<td></td>';
    }
    html += '</tr>';
  }
  $('values').innerHTML = html;
  $('values').dataset.page = String(page);
  $('values').dataset.col = String(col);
}
/** Shows the page holding flat index `i`, or row `r`, column `c` ("r, c" or "i"), and marks it. */
function goTo(text) {
  const cur = current;
  if (!cur) return false;
  const g = gridOf(cur.t);
  const nums = String(text).split(/[\s,]+/).filter(Boolean).map(Number);
  if (!nums.length || nums.some((x) => !Number.isInteger(x) || x < 0)) return false;
  let i;
  if (nums.length === 2 && g.matrix) {
    if (nums[0] >= g.rows || nums[1] >= g.cols) return false;
    i = nums[0] * g.cols + nums[1];
  } else if (nums.length === 1) i = nums[0];
  else return false;
  if (i >= cur.t.numel) return false;
  const r = g.matrix ? Math.floor(i / g.cols) : Math.floor(i / PAGE_COLS);
  const c = g.matrix ? i % g.cols : 0;
  showPage(Math.floor(r / PAGE_ROWS), Math.floor(c / PAGE_COLS), i);
  return true;
}
$('v-prev').addEventListener('click', () => current && showPage(current.page - 1));
$('v-next').addEventListener('click', () => current && showPage(current.page + 1));
$('v-left').addEventListener('click', () => current && showPage(current.page, current.col - 1));
$('v-right').addEventListener('click', () => current && showPage(current.page, current.col + 1));
$('v-goto').addEventListener('keydown', (ev) => {
  if (ev.key !== 'Enter') return;
  ev.preventDefault();
  $('v-goto').classList.toggle('bad', !goTo($('v-goto').value));
});
/** Keys in the value grid: PageUp/PageDown a page of rows, Home/End the first/last, ←/→ columns. */
$('values').addEventListener('keydown', (ev) => {
  const cur = current;
  if (!cur) return;
  const last = Math.max(0, Math.ceil(gridOf(cur.t).rows / PAGE_ROWS) - 1);
  const to = { PageDown: [cur.page + 1, cur.col], PageUp: [cur.page - 1, cur.col], Home: [0, 0], End: [last, cur.col], ArrowRight: [cur.page, cur.col + 1], ArrowLeft: [cur.page, cur.col - 1] }[ev.key];
  if (!to) return;
  ev.preventDefault();
  ev.stopPropagation();
  showPage(...to);
});

// --- exports
const exported = { last: null };
function download(blob, name) {
  exported.last = { name, blob };
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
}
/** Streams tensor `name` as .npy: chunks from the worker into a Blob built from parts, or a file on disk (File System Access) where there is one and a person is driving. */
export async function exportNpy() {
  const cur = current;
  if (!cur) return null;
  const file = `${cur.t.name.replace(/[^\w.-]+/g, '_')}.npy`;
  let writable = null;
  if ('showSaveFilePicker' in window && !navigator.webdriver) {
    try {
      const h = await window.showSaveFilePicker({ suggestedName: file });
      writable = await h.createWritable();
    } catch {
      writable = null;
    }
  }
  const parts = [];
  let pending = Promise.resolve();
  $('npy-text').textContent = 'exporting…';
  cancelJob();
  job = call('npy', { model: cur.m.model, name: cur.t.name }, {
    onChunk: (b) => (writable ? (pending = pending.then(() => writable.write(b))) : parts.push(b)),
    onProgress: (f) => ($('t-progress').value = f),
  });
  try {
    const r = await job.promise;
    await pending;
    if (writable) await writable.close();
    else download(new Blob(parts, { type: 'application/octet-stream' }), file);
    $('npy-text').textContent = `${file}: ${bytes(r.bytes)} (${r.descr})`;
    return r;
  } catch (e) {
    await writable?.abort?.();
    $('npy-text').textContent = e.name === 'AbortError' ? 'export cancelled' : `export failed: ${e.message}`;
    return null;
  } finally {
    job = null;
  }
}
$('export-npy').addEventListener('click', exportNpy);
function listRows() {
  return rowsNow.map((t) => ({ name: t.name, dtype: dtypeOf(t), shape: t.shape, parameters: t.numel, bytes: t.nbytes, offset: t.offset, source: t.source }));
}
$('export-csv').addEventListener('click', () => {
  const q = (s) => `"${String(s).replace(/"/g, '""')}"`;
  const lines = ['name,dtype,shape,parameters,bytes,offset,source', ...listRows().map((r) => [q(r.name), q(r.dtype), q(r.shape.join('x')), r.parameters, r.bytes ?? '', r.offset ?? '', q(r.source)].join(','))];
  download(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }), `${models[active]?.name ?? 'model'}.tensors.csv`);
});
$('export-json').addEventListener('click', () => download(new Blob([JSON.stringify(listRows(), null, 1)], { type: 'application/json' }), `${models[active]?.name ?? 'model'}.tensors.json`));

// --- views: tabs, compare and graph modules
function switchView(v) {
  view = v;
  for (const b of $('tabs').querySelectorAll('button')) b.classList.toggle('active', b.dataset.view === v);
  for (const p of document.querySelectorAll('.panel')) p.classList.toggle('active', p.id === `view-${v}`);
  setParam('view', v === 'overview' ? null : v);
  // A table whose tree is still being built in pieces (the page opened on the graph) is filled now.
  if (v === 'tensors' && models[active] && !models[active].failed && !models[active].tree) renderTensors(models[active]);
  if (v === 'tensors') requestAnimationFrame(drawRows);
  if (v === 'compare' || v === 'graph' || v === 'run') mountView(v);
  if (v === 'arch') renderArch();
}
$('tabs').addEventListener('click', (ev) => {
  const b = ev.target.closest('button');
  if (b && !b.disabled) switchView(b.dataset.view);
});
const mounted = { compare: null, graph: null, run: null };
async function mountView(v) {
  const host = $(`${v}-host`);
  mounted[v]?.unmount?.();
  mounted[v] = null;
  const ok = models.filter((m) => !m.failed);
  const picks = v === 'compare' ? [models[active], ...ok.filter((m) => m !== models[active])].slice(0, 2) : [models[active]];
  if (picks.some((m) => !m || m.failed) || (v === 'compare' && picks.length < 2)) return;
  host.textContent = '';
  let mod;
  try {
    mod = v === 'compare' ? await import('./compare-view.js') : v === 'run' ? await import('./run-view.js') : await import('./graph-view.js');
  } catch (e) {
    host.innerHTML = `<div class="na" data-available="false">The ${v} view is not available in this build (${esc(e.message)}).</div>`;
    return;
  }
  const ctx = {
    // The other files of the same pick or drop go along as companions (ONNX external data, shards, splits).
    sources: picks.map((m) => ({
      name: m.name,
      file: m.file,
      url: m.url,
      companions: m.files ? Object.fromEntries(m.files.filter((f) => f !== m.file).map((f) => [f.name, f])) : undefined,
    })),
    selectTensor(i, name) {
      const k = models.indexOf(picks[i]);
      if (k < 0) return;
      activate(k);
      switchView('tensors');
      openTensor(name);
    },
    params: new URLSearchParams(params),
    setParam,
    showArchitecture: () => !$('tabs').querySelector('[data-view=arch]').disabled && switchView('arch'),
  };
  try {
    mounted[v] = mod.mount(host, ctx) ?? null;
  } catch (e) {
    host.innerHTML = `<div class="na err">The ${v} view failed: ${esc(e.message)}</div>`;
  }
}

// --- keyboard: ↑/↓ rows, Enter opens, / focuses the search, Esc closes
document.addEventListener('keydown', (ev) => {
  const typing = ev.target instanceof HTMLInputElement || ev.target instanceof HTMLSelectElement;
  if (ev.key === '/' && !typing && !$('tabs').querySelector('[data-view=tensors]').disabled) {
    ev.preventDefault();
    switchView('tensors');
    $('search').focus();
    return;
  }
  if (ev.key === 'Escape') {
    // In the search box (or any field) Esc leaves the field, its text kept (a search box would
    // clear itself); the next Esc closes the tensor.
    if (typing) {
      ev.preventDefault();
      return ev.target.blur();
    }
    if ($('error').classList.contains('show')) $('error').classList.remove('show');
    else closeTensor();
    return;
  }
  const m = models[active];
  if (!m || view !== 'tensors' || (typing && ev.target.id !== 'search')) return;
  const g = $('grid');
  const pageRows = Math.max(1, Math.floor(g.clientHeight / ROW) - 2);
  const move = { ArrowDown: 1, ArrowUp: -1, PageDown: pageRows, PageUp: -pageRows, Home: -Infinity, End: Infinity }[ev.key];
  // Home/End/PageUp/PageDown move in the table from the table or the search box (not in other fields).
  if (move !== undefined && (!typing || !['Home', 'End'].includes(ev.key))) {
    ev.preventDefault();
    m.filter.sel = Math.max(0, Math.min(rowsNow.length - 1, m.filter.sel + move));
    const y = m.filter.sel * ROW;
    if (y < g.scrollTop) g.scrollTop = y;
    else if (y + 2 * ROW > g.scrollTop + g.clientHeight) g.scrollTop = y + 2 * ROW - g.clientHeight;
    drawRows();
  } else if (ev.key === 'Enter' && rowsNow[m.filter.sel]) {
    ev.preventDefault();
    openTensor(rowsNow[m.filter.sel].name);
  }
});

// --- files: picker and drag and drop
$('files').addEventListener('change', (ev) => openFiles(ev.target.files));
for (const t of ['dragenter', 'dragover']) document.addEventListener(t, (ev) => (ev.preventDefault(), document.body.classList.add('dragging')));
document.addEventListener('dragleave', (ev) => !ev.relatedTarget && document.body.classList.remove('dragging'));
document.addEventListener('drop', (ev) => {
  ev.preventDefault();
  document.body.classList.remove('dragging');
  if (ev.dataTransfer?.files?.length) openFiles(ev.dataTransfer.files);
});
$('urlform').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const u = $('url').value.trim();
  if (u) openUrl(u);
});

window.inspector = {
  models,
  openFiles,
  openUrl,
  openTensor,
  exportNpy,
  exported,
  rowTimes,
  activate: (name) => activate(models.findIndex((m) => m.name === name)),
  get active() {
    return models[active];
  },
  switchView,
  /** Workers for one tensor's statistics (undefined: one per core, 4 to 8, for a tensor of 64 MiB or more; 1: no helpers). */
  statsWorkers: undefined,
  ready: null,
};

// --- start: ?url=, ?compare=, ?tensor=, ?view=
setState('loading');
window.inspector.ready = (async () => {
  const backend = await workerReady;
  document.body.dataset.backend = backend;
  const url = params.get('url');
  const compare = params.get('compare');
  const tensor = params.get('tensor');
  const v = params.get('view');
  const at = { page: Number(params.get('page')) || 0, col: Number(params.get('vcol')) || 0, slice: Number(params.get('slice')) || 0 };
  if (url) await openUrl(url);
  if (compare) await openUrl(compare, { param: 'compare' });
  if (url && compare) activate(models.findIndex((m) => m.url === new URL(url, location.href).href));
  if (!url && !compare) setState('ready');
  if (tensor && models[active]) {
    switchView('tensors');
    openTensor(tensor, at);
  }
  if (v && !$('tabs').querySelector(`[data-view=${v}]`)?.disabled) switchView(v);
})();
