// Benchmarks of the web model inspector (web-demo/index.html) in Debian's Chromium (headless,
// playwright-core, the wasm build in the page's Worker), printed as a Markdown table for
// BENCHMARKS.md. Run: `node scripts/bench_inspector.mjs` (needs ~1.1 GB free in the temp dir).
//  1. A 50 GB sparse safetensors (1 GiB tensors, truncate: no data blocks) listed by URL (HTTP
//     Range from web-demo/serve.mjs; requests and bytes counted at the server) and picked as a
//     File (the reader's own count): wall time from the request to body[data-state=ready].
//  2. Statistics + histogram of a 1 GiB float32 tensor from a File, in one Worker and then in the
//     default number (spans in helper Workers): MB/s of tensor bytes (the core reads them twice:
//     summary pass, then histogram pass), the longest
//     main-thread task (PerformanceObserver 'longtask') and the page's peak JS heap while it runs
//     (performance.memory of the page; the Worker's own heap is not in it), and the peak RSS of
//     all Chromium processes above the idle page's.
//     The same for a Q4_K tensor in a GGUF (BENCH_Q4K_MIB, default 512 MiB of blocks): MB/s of
//     quantized bytes, over the values the core dequantizes.
//  3. A safetensors with N tiny tensors: listing time (the core's parse) and the longest task while
//     the virtual table scrolls through all rows.
import { spawnSync } from 'node:child_process';
import { closeSync, ftruncateSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '../web-demo/serve.mjs';
import { launch, missing } from '../tests/browser/_chromium.mjs';
import { safetensorsFile, sparseSafetensors } from '../tests/js/_model_files.mjs';

if (missing) throw new Error(missing);
const MANY = Number(process.env.BENCH_MANY ?? 100000);

/** A real (not sparse) 1 GiB float32 safetensors: one 1-D tensor of a sine pattern with some zeros. */
function gibFile(dir) {
  const n = (1 << 30) / 4;
  const header = JSON.stringify({ w: { dtype: 'F32', shape: [n], data_offsets: [0, n * 4] } });
  const json = header + ' '.repeat((8 - (header.length % 8)) % 8);
  const file = join(dir, 'one-gib.safetensors');
  const fd = openSync(file, 'w');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, len);
  writeSync(fd, Buffer.from(json));
  const chunk = new Float32Array(1 << 22);
  for (let at = 0; at < n; at += chunk.length) {
    for (let i = 0; i < chunk.length; i++) chunk[i] = (at + i) % 97 === 0 ? 0 : Math.sin((at + i) * 1e-3);
    writeSync(fd, new Uint8Array(chunk.buffer));
  }
  closeSync(fd);
  return { file, numel: n };
}

/** A GGUF v3 file with one Q4_K tensor `q` of ~`mib` MiB of blocks (seeded random nibbles and scales, small positive d and dmin). */
function q4kFile(dir, mib) {
  const blocks = Math.floor((mib << 20) / 144);
  const name = Buffer.from('q');
  const head = Buffer.alloc(Math.ceil((4 + 4 + 8 + 8 + 8 + name.length + 4 + 8 + 4 + 8) / 32) * 32);
  let o = head.write('GGUF', 0);
  o = head.writeUInt32LE(3, o);
  o = head.writeBigUInt64LE(1n, o); // tensors
  o = head.writeBigUInt64LE(0n, o); // metadata keys
  o = head.writeBigUInt64LE(BigInt(name.length), o);
  o += name.copy(head, o);
  o = head.writeUInt32LE(1, o); // n_dims
  o = head.writeBigUInt64LE(BigInt(blocks * 256), o);
  o = head.writeUInt32LE(12, o); // GGML_TYPE_Q4_K
  head.writeBigUInt64LE(0n, o);
  const file = join(dir, 'q4k.gguf');
  const fd = openSync(file, 'w');
  writeSync(fd, head);
  let seed = 0x9e3779b9;
  const chunk = Buffer.alloc(144 * 4096);
  for (let b = 0; b < blocks; b += 4096) {
    const n = Math.min(4096, blocks - b);
    for (let i = 0; i < n * 144; i += 4) {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      chunk.writeUInt32LE(seed, i);
    }
    for (let k = 0; k < n; k++) {
      chunk.writeUInt16LE(0x2000 | ((b + k) * 37) % 0x0fff, k * 144);
      chunk.writeUInt16LE(0x2000 | ((b + k) * 91) % 0x0fff, k * 144 + 2);
    }
    writeSync(fd, chunk, 0, n * 144);
  }
  closeSync(fd);
  return { file, stored: blocks * 144 };
}

/** Resident bytes of every Chromium process (from /proc). */
function chromiumRss() {
  let total = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!/chrom/i.test(cmd.split('\0')[0])) continue;
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) total += Number(m[1]) * 1024;
    } catch {}
  }
  return total;
}

const dir = mkdtempSync(join(tmpdir(), 'tensorlane-bench-inspector-'));
const rows = [];
const log = [];
const generated = new Map();
try {
  const sparse = sparseSafetensors(dir);
  generated.set('sparse.safetensors', { path: sparse.file });
  generated.set('many.safetensors', safetensorsFile(Array.from({ length: MANY }, (_, i) => [`model.layers.${Math.floor(i / 8)}.w${i % 8}`, { dtype: 'F16', shape: [1], data: new Uint8Array(2) }])));
  const { server, url } = await serve({ generated, log });
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const ready = () => page.waitForFunction(() => document.body.dataset.state !== 'loading', null, { timeout: 600000 });
  await page.goto(`${url}/web-demo/`);
  await ready();
  await page.evaluate(() => window.inspector.ready);

  // 1. 50 GB by URL and by File.
  log.length = 0;
  let t0 = performance.now();
  await page.evaluate(() => window.inspector.openUrl('/gen/sparse.safetensors'));
  await ready();
  let ms = performance.now() - t0;
  const reqs = log.filter((e) => e.path === '/gen/sparse.safetensors');
  const sent = reqs.reduce((n, e) => n + e.bytes, 0);
  const byUrl = await page.evaluate(() => window.inspector.models.at(-1));
  rows.push([`list a 50 GB sparse safetensors (${sparse.tensors} tensors) by URL`, `${byUrl.listMs.toFixed(0)} ms in the page (${ms.toFixed(0)} ms seen by the driver)`, `${sent} B in ${reqs.length} request(s) = ${((100 * sent) / sparse.size).toExponential(2)} % of ${sparse.size} B`]);
  t0 = performance.now();
  await page.setInputFiles('#files', sparse.file);
  await ready();
  ms = performance.now() - t0;
  const picked = await page.evaluate(() => window.inspector.models.at(-1));
  rows.push(['list the same file picked as a File', `${picked.listMs.toFixed(0)} ms in the page, ${picked.openMs.toFixed(0)} ms of it open() in the Worker (${ms.toFixed(0)} ms seen by the driver)`, `${picked.bytesRead} B in ${picked.reads} reads = ${((100 * picked.bytesRead) / sparse.size).toExponential(2)} %`]);

  // 2. Stats of a 1 GiB float32 tensor from a File.
  const gib = gibFile(dir);
  await page.goto(`${url}/web-demo/`);
  await ready();
  await page.evaluate(() => window.inspector.ready);
  await page.setInputFiles('#files', gib.file);
  await ready();
  // Baseline, same page and file: reading the File in 4 MiB slices on the page's thread, nothing else.
  const rawMs = await page.evaluate(async () => {
    const f = window.inspector.models.at(-1).file;
    const t = performance.now();
    for (let o = 0; o < f.size; o += 4 << 20) await f.slice(o, o + (4 << 20)).arrayBuffer();
    return performance.now() - t;
  });
  rows.push(['baseline: read the same 1 GiB File once in 4 MiB slices (no work)', `${rawMs.toFixed(0)} ms = ${((1 << 30) / 1e6 / (rawMs / 1000)).toFixed(0)} MB/s`, 'what the machine gives one read pass right now']);
  // One Worker (the reads wait while it sums), then the default (one per core, 4 to 8: spans in
  // helper Workers), same page and file; then a Q4_K tensor the same way.
  async function timeStats(tensor, stored, what) {
    for (const workers of (process.env.BENCH_WORKERS ?? '1,auto').split(',').map((w) => (w === 'auto' ? undefined : Number(w)))) {
      const idle = chromiumRss();
      await page.evaluate((workers) => {
        window.inspector.statsWorkers = workers;
        document.getElementById('tensor').dataset.statsState = '';
        window.__long = [];
        window.__obs?.disconnect();
        window.__obs = new PerformanceObserver((l) => window.__long.push(...l.getEntries().map((e) => e.duration)));
        window.__obs.observe({ type: 'longtask', buffered: false });
        window.__heap = 0;
        window.__sampler = setInterval(() => (window.__heap = Math.max(window.__heap, performance.memory?.usedJSHeapSize ?? 0)), 50);
      }, workers);
      let rss = idle;
      const sampler = setInterval(() => (rss = Math.max(rss, chromiumRss())), 200);
      const t0 = performance.now();
      await page.evaluate((tensor) => {
        window.inspector.switchView('tensors');
        window.inspector.openTensor(tensor);
      }, tensor);
      await page.waitForFunction(() => document.getElementById('tensor').dataset.statsState === 'done', null, { timeout: 600000, polling: 50 });
      const ms = performance.now() - t0;
      clearInterval(sampler);
      const r = await page.evaluate(() => {
        clearInterval(window.__sampler);
        return { long: Math.max(0, ...window.__long), heap: window.__heap, used: document.getElementById('tensor').dataset.statsWorkers };
      });
      const mbs = stored / 1e6 / (ms / 1000);
      const who = `${r.used} Worker${r.used === '1' ? '' : 's'}${workers === undefined ? ' (the default: one per core, 4 to 8)' : ''}`;
      rows.push([`stats + histogram of ${what} from a File, ${who}`, `${ms.toFixed(0)} ms = ${mbs.toFixed(0)} MB/s of stored bytes (${(2 * mbs).toFixed(0)} MB/s read: two passes)`, `longest main-thread task ${r.long.toFixed(0)} ms; page JS heap peak ${(r.heap / 2 ** 20).toFixed(0)} MiB; Chromium RSS +${((rss - idle) / 2 ** 20).toFixed(0)} MiB`]);
    }
  }
  await timeStats('w', 1 << 30, 'a 1 GiB float32 tensor');
  const q4k = q4kFile(dir, Number(process.env.BENCH_Q4K_MIB ?? 512));
  await page.setInputFiles('#files', q4k.file);
  await ready();
  await timeStats('q', q4k.stored, `a ${(q4k.stored / 2 ** 20).toFixed(0)} MiB Q4_K tensor (dequantized values)`);

  // 3. MANY tensors: listing and scrolling the virtual table.
  await page.goto(`${url}/web-demo/?view=tensors`);
  await ready();
  await page.evaluate(() => window.inspector.ready);
  t0 = performance.now();
  await page.evaluate(() => window.inspector.openUrl('/gen/many.safetensors'));
  await ready();
  ms = performance.now() - t0;
  const scroll = await page.evaluate(async () => {
    window.inspector.switchView('tensors');
    const long = [];
    const obs = new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration)));
    obs.observe({ type: 'longtask' });
    const g = document.getElementById('grid');
    const frames = [];
    let last = performance.now();
    for (let i = 0; i < 200; i++) {
      g.scrollTop = (g.scrollHeight * i) / 200;
      await new Promise((r) => requestAnimationFrame(r));
      const now = performance.now();
      frames.push(now - last);
      last = now;
    }
    obs.disconnect();
    frames.sort((a, b) => a - b);
    const js = window.inspector.rowTimes.slice(-200).sort((a, b) => a - b);
    return { long: Math.max(0, ...long), p50: frames[100], max: frames.at(-1), dom: g.querySelectorAll('.row').length, js50: js[js.length >> 1], jsMax: js.at(-1) };
  });
  rows.push([`${MANY} tensors: list by URL, then scroll the table top to bottom in 200 jumps`, `list ${ms.toFixed(0)} ms`, `redraw (JS) p50 ${scroll.js50.toFixed(2)} ms, max ${scroll.jsMax.toFixed(2)} ms; frame p50 ${scroll.p50.toFixed(1)} ms, max ${scroll.max.toFixed(1)} ms, longest task ${scroll.long.toFixed(0)} ms; ${scroll.dom} rows in the DOM`]);

  await browser.close();
  server.closeAllConnections();
  server.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const cpu = spawnSync('sh', ['-c', "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], { encoding: 'utf8' }).stdout.trim();
console.log(`Chromium ${process.env.CHROMIUM ?? '/usr/bin/chromium'} headless, ${cpu}, ${new Date().toISOString().slice(0, 10)}, load average ${load}\n`);
console.log('| case | time | bytes / notes |\n|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);
