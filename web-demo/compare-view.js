// The compare view of the model inspector: two models (ctx.sources[0] = A, [1] = B) compared in a
// Worker (compare-worker.js, the package's compare()). Shows summary counts, a sortable table of
// the tensors both hold (largest change first), the names only in A or only in B, and changed
// dtypes/shapes; a progress bar and a cancel button while it runs. Clicking a row calls
// ctx.selectTensor(0, name) (alt-click: B's tensor).
//
// Stable hooks: the root's `data-compare-state` is `loading`, `running`, `done`, `cancelled` or
// `error`; each table row has `data-tensor`, `data-max-abs`, `data-cosine` (and `data-rel-l2`,
// `data-mean-abs`) with the numbers as JavaScript prints them. `?cchunk=` sets compare()'s
// chunkBytes (bytes read per slice); `?csort=`, `?cdir=` and `?cchanged=1` (changed only) are
// the table's state.
//
// mount(el, ctx) -> { unmount() }; ctx = { sources, selectTensor, params, setParam }.

const STYLE_ID = 'tl-compare-style';
const CSS = `
.tl-compare { font: 13px/1.4 system-ui, sans-serif; color: #1d2433; display: flex; flex-direction: column; gap: 10px; min-width: 0; }
.tl-compare .tl-c-head { display: flex; align-items: center; gap: 10px; flex-wrap: wrap; }
.tl-compare .tl-c-title { font-weight: 600; font-size: 15px; }
.tl-compare .tl-c-progress { flex: 1 1 200px; height: 8px; background: #e4e8f0; border-radius: 4px; overflow: hidden; }
.tl-compare .tl-c-progress > div { height: 100%; width: 0; background: #3b6fd8; transition: width .1s; }
.tl-compare button { font: inherit; padding: 3px 10px; border: 1px solid #b8c2d6; background: #fff; border-radius: 4px; cursor: pointer; }
.tl-compare button:hover { background: #eef2fa; }
.tl-compare .tl-c-cards { display: flex; gap: 8px; flex-wrap: wrap; }
.tl-compare .tl-c-card { border: 1px solid #d7dce6; border-radius: 6px; padding: 6px 10px; min-width: 90px; background: #fafbfd; }
.tl-compare .tl-c-card b { display: block; font-size: 18px; }
.tl-compare .tl-c-card span { color: #5b6478; font-size: 12px; }
.tl-compare .tl-c-tablewrap { max-height: 60vh; overflow: auto; border: 1px solid #d7dce6; border-radius: 6px; }
.tl-compare table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
.tl-compare th, .tl-compare td { padding: 3px 8px; border-bottom: 1px solid #eef0f5; text-align: right; white-space: nowrap; }
.tl-compare th { position: sticky; top: 0; background: #f1f4f9; cursor: pointer; user-select: none; z-index: 1; }
.tl-compare th[data-dir="desc"]::after { content: " ▼"; font-size: 10px; }
.tl-compare th[data-dir="asc"]::after { content: " ▲"; font-size: 10px; }
.tl-compare td.tl-c-name, .tl-compare th.tl-c-name { text-align: left; max-width: 420px; overflow: hidden; text-overflow: ellipsis; }
.tl-compare tbody tr { cursor: pointer; }
.tl-compare tbody tr:hover { background: #eef4ff; }
.tl-compare .tl-c-bar { display: inline-block; height: 8px; background: #e0674f; vertical-align: middle; margin-right: 6px; border-radius: 2px; }
.tl-compare .tl-c-lists { display: grid; grid-template-columns: repeat(auto-fit, minmax(240px, 1fr)); gap: 8px; }
.tl-compare .tl-c-list { border: 1px solid #d7dce6; border-radius: 6px; padding: 6px 10px; max-height: 220px; overflow: auto; }
.tl-compare .tl-c-list h4 { margin: 0 0 4px; font-size: 13px; }
.tl-compare .tl-c-list li { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; }
.tl-compare .tl-c-error { color: #a3261b; background: #fdf0ee; border: 1px solid #f0c4bd; padding: 6px 10px; border-radius: 6px; overflow-wrap: anywhere; }
.tl-compare .tl-c-muted { color: #6b7385; }
`;

function injectStyle() {
  if (document.getElementById(STYLE_ID)) return;
  const s = document.createElement('style');
  s.id = STYLE_ID;
  s.textContent = CSS;
  document.head.append(s);
}

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

/** A number for a table cell: 4 significant digits, exponent when small or large. */
export function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  if (!Number.isFinite(v)) return v > 0 ? '∞' : '-∞';
  if (v === 0) return '0';
  const a = Math.abs(v);
  return a < 1e-3 || a >= 1e6 ? v.toExponential(3) : v.toPrecision(4);
}

/**
 * A cosine similarity that tells a near 1 from 1: exactly 1 is "1"; within 1e-3 of 1 it is
 * written as 1 − d (0.999995 is "1 − 5.0e-6"); else 6 significant digits.
 */
export function fmtCos(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  if (v === 1) return '1';
  const d = 1 - v;
  if (d > 0 && d < 1e-3) return `1 − ${d.toExponential(1)}`;
  return String(Number(v.toPrecision(6)));
}

const fmtBytes = (n) => (n >= 1 << 30 ? `${(n / (1 << 30)).toFixed(2)} GiB` : n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`);
const shapeText = (s) => `[${s.join(', ')}]`;

const COLUMNS = [
  { key: 'name', label: 'tensor', cls: 'tl-c-name', text: (t) => t.name },
  { key: 'dtype', label: 'dtype', text: (t) => t.dtype },
  { key: 'shape', label: 'shape', text: (t) => shapeText(t.shape), sortBy: (t) => t.count },
  { key: 'relL2', label: 'rel. L2', text: (t) => fmt(t.relL2) },
  { key: 'maxAbs', label: 'max |a−b|', text: (t) => fmt(t.maxAbs) },
  { key: 'meanAbs', label: 'mean |a−b|', text: (t) => fmt(t.meanAbs) },
  // Equal values are cosine 1 (the sums may round to 1 − 1e-16).
  { key: 'cosine', label: 'cosine', text: (t) => (t.maxAbs === 0 && !t.nonfinite ? '1' : fmtCos(t.cosine)) },
  { key: 'nonfinite', label: 'NaN/Inf pairs', text: (t) => String(t.nonfinite) },
];

/** Mounts the compare view in `el`. */
export function mount(el, ctx) {
  injectStyle();
  const root = h('div', { class: 'tl-compare', dataset: { compareState: 'loading' } });
  el.append(root);
  const [A, B] = ctx.sources ?? [];
  const title = h('div', { class: 'tl-c-title' }, `Compare ${A?.name ?? '?'} (A) with ${B?.name ?? '?'} (B)`);
  const bar = h('div');
  const progress = h('div', { class: 'tl-c-progress', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100' }, bar);
  const status = h('span', { class: 'tl-c-muted' }, 'starting…');
  const cancel = h('button', { type: 'button', onclick: () => worker?.postMessage({ cmd: 'cancel' }) }, 'Cancel');
  const body = h('div');
  root.append(h('div', { class: 'tl-c-head' }, title, progress, status, cancel), body);

  let worker = null;
  let result = null;
  let sortKey = ctx.params?.get('csort') ?? 'relL2';
  let sortDir = ctx.params?.get('cdir') ?? (sortKey === 'name' || sortKey === 'cosine' ? 'asc' : 'desc');
  // "changed only": the tensors whose values differ at all (`?cchanged=1`).
  let changedOnly = ctx.params?.get('cchanged') === '1';
  const changed = (t) => t.maxAbs !== 0 || t.nonfinite > 0 || Number.isNaN(t.maxAbs);

  const setState = (s) => (root.dataset.compareState = s);
  const fail = (msg) => {
    setState('error');
    progress.hidden = true;
    cancel.hidden = true;
    status.textContent = '';
    body.replaceChildren(h('div', { class: 'tl-c-error', role: 'alert' }, msg));
  };

  if (!A || !B) {
    fail('Open two models to compare them (A and B).');
    return { unmount: () => root.remove() };
  }

  const plain = (s) => ({ name: s.name, file: s.file, url: s.url });
  worker = new Worker(new URL('./compare-worker.js', import.meta.url), { type: 'module' });
  worker.onerror = (e) => fail(`the compare worker failed to start: ${e.message ?? e}`);
  worker.onmessage = ({ data }) => {
    if (data.type === 'ready') {
      setState('running');
      const chunkBytes = Number(ctx.params?.get('cchunk')) || undefined;
      worker.postMessage({ cmd: 'compare', a: plain(A), b: plain(B), companionsA: A.companions, companionsB: B.companions, chunkBytes });
    } else if (data.type === 'progress') {
      const pct = data.bytesTotal ? (100 * data.bytesDone) / data.bytesTotal : 0;
      bar.style.width = `${pct.toFixed(1)}%`;
      progress.setAttribute('aria-valuenow', pct.toFixed(0));
      status.textContent = `${data.tensorsDone} / ${data.tensorsTotal} tensors · ${fmtBytes(data.bytesDone)} of ${fmtBytes(data.bytesTotal)}`;
    } else if (data.type === 'done') {
      result = data.result;
      bar.style.width = '100%';
      progress.hidden = true;
      cancel.hidden = true;
      const mbps = data.ms > 0 ? result.bytesCompared / 1e6 / (data.ms / 1000) : 0;
      status.textContent = `${fmtBytes(result.bytesCompared)} compared in ${(data.ms / 1000).toFixed(2)} s (${mbps.toFixed(0)} MB/s)`;
      render();
      setState('done');
      worker.terminate();
      worker = null;
    } else if (data.type === 'error') {
      if (data.aborted) {
        setState('cancelled');
        progress.hidden = true;
        cancel.hidden = true;
        status.textContent = 'cancelled';
      } else fail(data.error.message);
      worker?.terminate();
      worker = null;
    }
  };

  function render() {
    const r = result;
    const s = r.summary;
    const card = (n, label) => h('div', { class: 'tl-c-card' }, h('b', {}, String(n)), h('span', {}, label));
    const cards = h(
      'div',
      { class: 'tl-c-cards' },
      card(s.tensorsA, 'tensors in A'),
      card(s.tensorsB, 'tensors in B'),
      card(s.compared, 'compared'),
      card(r.tensors.filter((t) => t.maxAbs > 0).length, 'with any change'),
      card(s.changed, 'dtype/shape changed'),
      card(s.onlyA, 'only in A'),
      card(s.onlyB, 'only in B'),
    );
    const only = h('input', { type: 'checkbox', class: 'tl-c-changed' });
    only.checked = changedOnly;
    only.addEventListener('change', () => {
      changedOnly = only.checked;
      ctx.setParam?.('cchanged', changedOnly ? '1' : null);
      const wrap = body.querySelector('.tl-c-tablewrap');
      if (wrap) wrap.replaceWith(table());
    });
    const filter = h('label', { class: 'tl-c-muted' }, only, ` changed only (${r.tensors.filter(changed).length} of ${r.tensors.length})`);
    const parts = [cards, filter, table()];
    const list = (title, items, text) =>
      h('div', { class: 'tl-c-list' }, h('h4', {}, `${title} (${items.length})`), items.length ? h('ul', {}, ...items.slice(0, 2000).map((x) => h('li', { dataset: { tensor: x.name } }, text(x)))) : h('span', { class: 'tl-c-muted' }, 'none'));
    parts.push(
      h(
        'div',
        { class: 'tl-c-lists' },
        list('Only in A', r.onlyA, (t) => `${t.name} ${t.dtype} ${shapeText(t.shape)}`),
        list('Only in B', r.onlyB, (t) => `${t.name} ${t.dtype} ${shapeText(t.shape)}`),
        list('Changed dtype or shape', r.changed, (c) => `${c.name}: ${c.a.dtype} ${shapeText(c.a.shape)} → ${c.b.dtype} ${shapeText(c.b.shape)}`),
        ...(r.errors.length ? [list('Not compared', r.errors, (e) => `${e.name}: ${e.message}`)] : []),
      ),
    );
    body.replaceChildren(...parts);
  }

  function sorted() {
    const col = COLUMNS.find((c) => c.key === sortKey) ?? COLUMNS[3];
    const key = col.sortBy ?? ((t) => t[col.key]);
    const sign = sortDir === 'asc' ? 1 : -1;
    return [...result.tensors].sort((x, y) => {
      const a = key(x);
      const b = key(y);
      if (typeof a === 'string') return sign * a.localeCompare(b);
      const na = Number.isNaN(a);
      const nb = Number.isNaN(b);
      if (na || nb) return na - nb; // NaN last either way
      return sign * (a - b);
    });
  }

  function table() {
    const rows = changedOnly ? sorted().filter(changed) : sorted();
    const maxRel = Math.max(1e-300, ...result.tensors.map((t) => (Number.isFinite(t.relL2) ? t.relL2 : 0)));
    const head = h(
      'tr',
      {},
      ...COLUMNS.map((c) =>
        h('th', { class: c.cls ?? '', dataset: { key: c.key, ...(c.key === sortKey ? { dir: sortDir } : {}) }, scope: 'col', title: 'sort', onclick: () => resort(c.key) }, c.label),
      ),
    );
    const tbody = h('tbody');
    const frag = document.createDocumentFragment();
    for (const t of rows) {
      const tr = h('tr', { dataset: { tensor: t.name, maxAbs: String(t.maxAbs), meanAbs: String(t.meanAbs), relL2: String(t.relL2), cosine: String(t.cosine) }, title: `${t.name}: click for A's tensor, alt-click for B's` });
      for (const c of COLUMNS) {
        const td = h('td', { class: c.cls ?? '' });
        if (c.key === 'relL2') {
          const w = Number.isFinite(t.relL2) ? Math.max(1, Math.round((40 * t.relL2) / maxRel)) : 40;
          td.append(h('span', { class: 'tl-c-bar', style: `width:${w}px` }));
        }
        td.append(c.text(t));
        tr.append(td);
      }
      frag.append(tr);
    }
    tbody.append(frag);
    tbody.addEventListener('click', (e) => {
      const tr = e.target.closest('tr[data-tensor]');
      if (tr) ctx.selectTensor?.(e.altKey ? 1 : 0, tr.dataset.tensor);
    });
    return h('div', { class: 'tl-c-tablewrap' }, h('table', {}, h('thead', {}, head), tbody));
  }

  function resort(key) {
    if (key === sortKey) sortDir = sortDir === 'asc' ? 'desc' : 'asc';
    else {
      sortKey = key;
      sortDir = key === 'name' || key === 'dtype' || key === 'cosine' ? 'asc' : 'desc';
    }
    ctx.setParam?.('csort', sortKey);
    ctx.setParam?.('cdir', sortDir);
    const wrap = body.querySelector('.tl-c-tablewrap');
    if (wrap) wrap.replaceWith(table());
  }

  return {
    unmount() {
      worker?.terminate();
      worker = null;
      root.remove();
    },
  };
}
