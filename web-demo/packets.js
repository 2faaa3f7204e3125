// The page: sends packet URLs to the worker, draws one card (kind/dtype/shape/view-or-copy and a
// histogram) per tensor. Also exposes `window.demo` for the browser tests and benchmarks.
import * as tensorlane from '../js/browser.js';
import { fmt, histogram, showModel } from './model-view.js';

const DEFAULT_PACKETS = [
  'large_float32_256x1024', 'bundle_with_sparse', 'quant_qint8_per_channel_axis1', 'dtype_bfloat16',
  'compress_tile_f64_integrity', 'string_mixed_utf8', 'bundle_nested',
].map((n) => `/tests/data/vectors/tenso/${n}.tenso`);

const params = new URLSearchParams(location.search);
// ?packets= (empty) opens the page with no packets, e.g. to drop model or .zt files into it.
const packets = params.has('packets') ? params.get('packets').split(',').filter(Boolean) : DEFAULT_PACKETS;
const cards = document.getElementById('cards');
const status = document.getElementById('status');

function card(result, leaf) {
  const el = document.createElement('div');
  el.className = 'card';
  const title = document.createElement('h2');
  title.textContent = `${result.name.split('/').pop()}${leaf && leaf.path !== '(top level)' ? ` › ${leaf.path}` : ''}`;
  el.append(title);
  const meta = document.createElement('div');
  meta.className = 'meta';
  if (result.error) {
    meta.innerHTML = `<span class="err"></span>`;
    meta.firstChild.textContent = result.error;
    el.append(meta);
    return el;
  }
  const tags = [leaf.kind, leaf.dtype, `[${leaf.shape.join('×')}]`, leaf.format, leaf.scheme].filter(Boolean);
  meta.innerHTML = tags.map((t) => `<span class="tag">${t}</span>`).join('');
  if (leaf.copied !== undefined) {
    const v = document.createElement('span');
    v.className = `tag ${leaf.copied ? 'copy' : 'view'}`;
    v.textContent = leaf.copied ? 'copy' : 'view on fetched buffer';
    meta.append(v);
  }
  const lines = [];
  if (leaf.stats) {
    const s = leaf.stats;
    lines.push(`n=${s.count} min=${fmt(s.min)} max=${fmt(s.max)} mean=${fmt(s.mean)} std=${fmt(s.std)}`);
    if (s.nan || s.inf) lines.push(`NaN=${s.nan} Inf=${s.inf}`);
  }
  if (leaf.preview) lines.push(JSON.stringify(leaf.preview));
  lines.push(`packet ${result.size} B, decoded in ${result.decodeMs.toFixed(2)} ms`);
  for (const l of lines) {
    const d = document.createElement('div');
    d.textContent = l;
    meta.append(d);
  }
  el.append(meta);
  if (leaf.stats) {
    const c = document.createElement('canvas');
    el.append(c);
    requestAnimationFrame(() => histogram(c, leaf.stats));
  }
  el.dataset.kind = leaf.kind;
  return el;
}

function render(result) {
  if (result.error) return cards.append(card(result));
  for (const leaf of result.leaves.slice(0, 12)) cards.append(card(result, leaf));
}

// --- worker plumbing
const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
let nextId = 0;
const pending = new Map();
const workerReady = new Promise((resolve) => {
  worker.addEventListener('message', ({ data }) => {
    if (data.ready) return resolve(data.backend);
    pending.get(data.id)?.(data);
    pending.delete(data.id);
  });
});
function inWorker(msg, transfer = []) {
  const id = nextId++;
  return new Promise((resolve) => {
    pending.set(id, resolve);
    worker.postMessage({ id, ...msg }, transfer);
  });
}

// --- opening local files: model files (.zt included) lazily as Blobs on this thread, packets whole in the worker
const TENSO_MAGIC = [0x54, 0x4e, 0x53, 0x4f]; // TNSO
async function kindOf(file) {
  if (/\.tenso$/i.test(file.name)) return 'tenso';
  if (/\.(zt|safetensors|json|gguf|pt|pth|bin|npy|npz|onnx|data|h5|hdf5)$/i.test(file.name)) return 'model';
  const head = new Uint8Array(await file.slice(0, 4).arrayBuffer());
  return TENSO_MAGIC.every((b, i) => head[i] === b) ? 'tenso' : 'model';
}
const ztContainer = document.getElementById('zt-files');
let opening = Promise.resolve();
function openFiles(files) {
  // Files dropped together are each other's companions (shards next to their index, ONNX
  // external data): indexes and graphs open first, and a file a model read is not listed again.
  const list = [...files].sort((a, b) => Number(/\.(json|onnx)$/i.test(b.name)) - Number(/\.(json|onnx)$/i.test(a.name)));
  const companions = Object.fromEntries(list.map((f) => [f.name, f]));
  const used = new Set();
  opening = opening.then(async () => {
    document.body.dataset.files = 'loading';
    for (const f of list) {
      if (used.has(f.name)) continue;
      const kind = await kindOf(f);
      if (kind === 'model') {
        status.textContent = `opening ${f.name}…`;
        const others = Object.fromEntries(Object.entries(companions).filter(([n]) => n !== f.name));
        const s = await showModel(tensorlane, f, ztContainer, others);
        for (const src of s.sources ?? []) if (src) used.add(src.split('/').pop());
        // A sharded .zt names its shards, found among the files by these names.
        const stem = f.name.replace(/\.[^.]*$/, '');
        if (s.format === 'zt') for (const src of s.sources.slice(1)) for (const n of [`${stem}-${src}.zt`, src, `${src}.zt`]) used.add(n);
        window.demo.models.push(s);
        status.textContent = s.error ? `${f.name}: ${s.error}` : `${f.name}: ${s.format}, ${s.tensors.length} tensors`;
      } else {
        const bytes = await f.arrayBuffer();
        render(await inWorker({ bytes, name: f.name }, [bytes]));
      }
    }
    document.body.dataset.files = 'done';
  });
  return opening;
}
document.getElementById('files').addEventListener('change', (ev) => openFiles(ev.target.files));
const drop = document.getElementById('drop');
for (const t of ['dragenter', 'dragover']) document.addEventListener(t, (ev) => { ev.preventDefault(); drop.classList.add('over'); });
document.addEventListener('dragleave', (ev) => { if (!ev.relatedTarget) drop.classList.remove('over'); });
document.addEventListener('drop', (ev) => {
  ev.preventDefault();
  drop.classList.remove('over');
  if (ev.dataTransfer?.files?.length) openFiles(ev.dataTransfer.files);
});

// --- test / benchmark hooks (main thread, same package)
function npyFloat32(values) {
  let header = `{'descr': '<f4', 'fortran_order': False, 'shape': (${values.length},), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const out = new Uint8Array(10 + header.length + values.byteLength);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, header.length & 0xff, header.length >> 8]);
  out.set(new TextEncoder().encode(header), 10);
  out.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), 10 + header.length);
  return out;
}

/** npyjs 1.x's parse, reduced to what a float32 C-order array needs (the baseline). */
function parseNpy(arrayBuffer) {
  const headerLength = new DataView(arrayBuffer.slice(8, 10)).getUint8(0);
  const offsetBytes = 10 + headerLength;
  const hcontents = new TextDecoder('utf-8').decode(new Uint8Array(arrayBuffer.slice(10, 10 + headerLength)));
  const header = JSON.parse(hcontents.toLowerCase().replace(/'/g, '"').replace('(', '[').replace(/,*\),*/g, ']'));
  if (header.descr !== '<f4') throw new Error('baseline handles <f4 only');
  return { dtype: 'float32', data: new Float32Array(arrayBuffer, offsetBytes), shape: header.shape, fortranOrder: header.fortran_order };
}

function timeIt(fn, budgetMs = 300, maxIter = 20000) {
  fn(); // warm up
  let iters = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < budgetMs && iters < maxIter) {
    fn();
    iters++;
    if ((iters & 15) === 0 || budgetMs < 1e9) t = performance.now();
  }
  return { us: ((t - t0) * 1000) / iters, iters };
}

async function bench(sizes = [4 << 10, 1 << 20, 64 << 20]) {
  const rows = [];
  for (const size of sizes) {
    const values = new Float32Array(size / 4);
    for (let i = 0; i < values.length; i++) values[i] = Math.sin(i);
    const packet = tensorlane.encode({ dtype: 'float32', shape: [values.length], data: values });
    const checked = tensorlane.encode({ dtype: 'float32', shape: [values.length], data: values }, { integrity: true });
    const npy = npyFloat32(values).buffer;
    const r = tensorlane.decode(packet);
    const p = parseNpy(npy);
    if (r.data.buffer !== packet.buffer || r.data[7] !== p.data[7]) throw new Error('bench sanity check failed');
    const view = timeIt(() => tensorlane.decode(packet));
    const integrity = timeIt(() => tensorlane.decode(checked), 600, 2000);
    const npyjs = timeIt(() => parseNpy(npy));
    rows.push({ bytes: size, decodeUs: view.us, decodeIters: view.iters, integrityUs: integrity.us, integrityIters: integrity.iters, npyUs: npyjs.us, npyIters: npyjs.iters, copiedIntoWasm: (tensorlane.decode(packet), tensorlane.copiedBytes()) });
  }
  return rows;
}

async function decodeUrl(url) {
  const buf = await (await fetch(url)).arrayBuffer();
  const input = new Uint8Array(buf);
  const d = tensorlane.decode(input);
  const leaf = d.kind === 'bundle' ? [...d].map(([, v]) => v).find((v) => v.kind === 'dense') : d;
  return {
    kind: d.kind,
    dtype: leaf?.dtype,
    shape: leaf?.shape,
    copied: leaf?.copied,
    sharesFetchedBuffer: leaf ? leaf.data.buffer === buf : null,
    byteOffset: leaf?.data.byteOffset,
    first: leaf ? Array.from(leaf.data.subarray(0, 4), Number) : null,
    copiedIntoWasm: tensorlane.copiedBytes(),
  };
}

window.demo = { tensorlane, decodeUrl, bench, parseNpy, npyFloat32, results: [], models: [], openFiles };

const backend = await workerReady;
status.textContent = `worker ready (${backend}); decoding ${packets.length} packets…`;
const results = await Promise.all(packets.map((url) => inWorker({ url })));
results.forEach(render);
window.demo.results = results;
status.textContent = `${results.length} packets decoded in the worker (${backend} backend)`;
document.body.dataset.done = 'true';
