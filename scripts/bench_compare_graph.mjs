// Benchmarks of the inspector's compare and graph (issue 11, items 5 and 6), printed as a table:
//   node scripts/bench_compare_graph.mjs [MIB]      (default 1024: two checkpoints of 1 GiB each)
// 1. compare() of two float32 safetensors checkpoints of MIB MiB each (tests/python/compare_ref.py
//    big, b = a + noise) in Node with the addon (paths: mapped by the host) and with the wasm build
//    (paths read through a file descriptor), and in Chromium's Worker (the compare view of
//    tests/browser/harness/view.html over Files); MB/s counts the bytes of both files.
// 2. The graph view on a 5,046-node ONNX model (tests/python/onnx_graph_ref.py gen, 420 blocks) in
//    Chromium: time from mount to data-graph-state=done with its repeated blocks collapsed (the
//    default) and as if its nodes had no block names (?blocks=off: consecutive segments), and the
//    elkjs layout time alone.
// Needs the formats venv, scripts/build-js.sh and Debian's Chromium. Writes the files to a temp
// folder and removes them.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { venvPython } from '../tests/js/_stats_reference.mjs';
import { serve } from '../web-demo/serve.mjs';
import { launch, missing } from '../tests/browser/_chromium.mjs';

const MIB = Number(process.argv[2] ?? 1024);
const dir = mkdtempSync(join(tmpdir(), 'tensorlane-bench-cg-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
const py = (script, args) => {
  const r = spawnSync(venvPython(), [fileURLToPath(new URL(`../tests/python/${script}`, import.meta.url)), ...args], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout);
};
py('compare_ref.py', ['big', dir, String(MIB)]);
const a = join(dir, 'a.safetensors');
const b = join(dir, 'b.safetensors');
const total = statSync(a).size + statSync(b).size;
const rows = [];

function nodeRun(backend) {
  const code = `const api = await import(${JSON.stringify(new URL('../js/node.js', import.meta.url).href)});
    const t = performance.now();
    const r = await api.compare(api.open(${JSON.stringify(a)}), api.open(${JSON.stringify(b)}));
    const ms = performance.now() - t;
    console.log(JSON.stringify({ backend: api.backendName, ms, compared: r.tensors.length }));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', code], { env: { ...process.env, TENSORLANE_BACKEND: backend }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

for (const backend of ['addon', 'wasm']) {
  nodeRun(backend); // warm the page cache
  const best = [nodeRun(backend), nodeRun(backend)].sort((x, y) => x.ms - y.ms)[0];
  rows.push([`compare ${MIB} MiB + ${MIB} MiB f32, Node ${best.backend} (paths)`, `${(best.ms / 1000).toFixed(2)} s`, `${(total / 1e6 / (best.ms / 1000)).toFixed(0)} MB/s`]);
}

if (missing) {
  console.warn(`# Chromium rows skipped: ${missing}`);
} else {
  const { server, url } = await serve();
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const mountView = async (view, files, extra = '') => {
      await page.goto(`${url}/tests/browser/harness/view.html?view=${view}${extra}`);
      await page.waitForFunction(() => window.harnessReady === true);
      for (const [k, f] of Object.entries(files)) await page.setInputFiles(`#${k}`, f);
      await page.click('#go');
      return page.evaluate(() => window.mountedAt);
    };
    for (let i = 0; i < 2; i++) {
      await mountView('compare', { a, b });
      await page.waitForSelector('[data-compare-state="done"], [data-compare-state="error"]', { timeout: 600000 });
      const ms = await page.evaluate(() => performance.now() - window.mountedAt);
      const heap = await page.evaluate(() => performance.memory?.usedJSHeapSize ?? 0);
      if (i === 1) rows.push([`compare ${MIB} MiB + ${MIB} MiB f32, Chromium Worker (wasm, Files)`, `${(ms / 1000).toFixed(2)} s`, `${(total / 1e6 / (ms / 1000)).toFixed(0)} MB/s (page heap ${(heap / 1e6).toFixed(0)} MB)`]);
    }
    const big = join(dir, 'graph-420.onnx');
    const { nodes } = py('onnx_graph_ref.py', ['gen', big, '420']);
    for (const [label, extra] of [['collapsed blocks', ''], ['no block names (?blocks=off: segments)', '&blocks=off']]) {
      const t0 = await mountView('graph', { a: big }, extra);
      await page.waitForSelector('[data-graph-state="done"], [data-graph-state="error"]', { timeout: 600000 });
      const ms = (await page.evaluate(() => performance.now())) - t0;
      const layout = await page.getAttribute('.tl-graph', 'data-layout-ms');
      const boxes = await page.getAttribute('.tl-graph', 'data-drawn-boxes');
      rows.push([`graph view, ${nodes} nodes, ${label} (${boxes} boxes), Chromium`, `${(ms / 1000).toFixed(2)} s to done`, `elkjs layout ${layout} ms`]);
    }
  } finally {
    await browser.close();
    server.close();
  }
}

const w = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length), 8));
console.log(`| ${'what'.padEnd(w[0])} | ${'time'.padEnd(w[1])} | ${'rate'.padEnd(w[2])} |`);
console.log(`| ${'-'.repeat(w[0])} | ${'-'.repeat(w[1])} | ${'-'.repeat(w[2])} |`);
for (const r of rows) console.log(`| ${r[0].padEnd(w[0])} | ${r[1].padEnd(w[1])} | ${r[2].padEnd(w[2])} |`);
