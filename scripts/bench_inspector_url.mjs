// Issue 26's bars in Debian's Chromium (headless, playwright-core), printed as a Markdown table
// for BENCHMARKS.md. Run: `node scripts/bench_inspector_url.mjs` (needs ~130 MB free in the temp dir
// and the formats venv for the ONNX model).
//  1. Statistics of a 125 MiB float32 tensor in the inspector, by URL (web-demo/serve.mjs, HTTP
//     Range, bytes counted at the server) and from a File: wall time from openTensor to
//     data-stats-state=done, in one Worker and in the default spans; Range bytes per tensor byte.
//     Beside them the floor of each path, same page, same run: a bare Worker fetching the file by
//     URL (one GET, arrayBuffer()) and reading the File (32 MiB Blob slices), and curl on the URL.
//  2. The graph view of a 5,046-node ONNX model (tests/python/onnx_graph_ref.py gen 420): first
//     draw collapsed (blocks found from the structure) and flat (`?blocks=off`, every node), and
//     pan/zoom frame times (wheel and drag events, one per animation frame) on the flat drawing,
//     fitted (the outline bitmap) and at scale 1 (the boxes in view): p50, p95 and max of the
//     frame intervals, and the longest main-thread task.
//  3. A 100k-node synthetic graph (onnx_graph_ref.py gen 8333: 100,004 nodes) opened collapsed
//     and flat: the longest main-thread task (PerformanceObserver 'longtask', installed before
//     the page's scripts) from navigation to drawn and through 60 pan/zoom frames, and where the
//     analysis ran (the graph Worker: data-analyze-ms).
//  4. (part `quiet`) Statistics by URL and from a File again, in a Chromium that no DevTools
//     client is attached to: playwright drives the browser over the DevTools protocol with its
//     Network domain enabled, which reports every response to the client, and that alone slows
//     Chromium's fetch by about 1.3x on this machine (a 125 MiB GET: 440-500 ms bare vs 600-640
//     ms under playwright, after the first) while a File read is untouched. So here Chromium is
//     started on a harness page (`stats-harness.html`, served beside the model) that opens the
//     inspector in an iframe, times the same openTensor to data-stats-state=done by URL and from
//     a File, alternately, ROUNDS times (default 3), and sends the times back in a request path
//     the server logs. Its File is made from the model's bytes fetched into a Blob (a page
//     cannot open a disk file without a person): a memory-backed File, read at least as fast as
//     a disk one, so the URL/File ratio here errs against the URL.
// BENCH_PARTS=stats,graph,big,quiet (the default: all) picks the parts.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { serve } from '../web-demo/serve.mjs';
import { spawn } from 'node:child_process';
import { ARGS, CHROMIUM, launch, missing } from '../tests/browser/_chromium.mjs';
import { safetensorsFile } from '../tests/js/_model_files.mjs';
import { bigGraph } from '../tests/js/_graph_compare_reference.mjs';

if (missing) throw new Error(missing);
const PARTS = new Set((process.env.BENCH_PARTS ?? 'stats,graph,big,quiet').split(','));
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const dir = mkdtempSync(join(tmpdir(), 'tensorlane-bench26-'));
const rows = [];
try {
  const n = (125 << 20) / 4;
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = Math.sin(i * 0.001) * (i % 7);
  const file = join(dir, 'embed.safetensors');
  writeFileSync(file, safetensorsFile([['embed', { dtype: 'F32', shape: [n / 2048, 2048], data: new Uint8Array(values.buffer) }]]));
  const g = bigGraph(420, dir);
  const generated = new Map([['embed.safetensors', { path: file }], ['graph.onnx', new Uint8Array(readFileSync(g.path))]]);
  if (PARTS.has('big')) generated.set('graph100k.onnx', new Uint8Array(readFileSync(bigGraph(8333, dir).path)));
  const log = [];
  const { server, url } = await serve({ generated, log });
  const browser = await launch();
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const ready = async (q) => {
    await page.goto(`${url}/web-demo/${q}`);
    await page.waitForFunction(() => window.inspector?.ready);
    await page.evaluate(() => window.inspector.ready);
  };
  const statsMs = async (workers) => {
    await page.evaluate((w) => (window.inspector.statsWorkers = w), workers);
    return page.evaluate(
      () =>
        new Promise((resolve) => {
          const panel = document.getElementById('tensor');
          const t0 = performance.now();
          new MutationObserver((_, o) => {
            if (['done', 'error'].includes(panel.dataset.statsState)) (o.disconnect(), resolve(performance.now() - t0));
          }).observe(panel, { attributes: true, attributeFilter: ['data-stats-state'] });
          window.inspector.openTensor('embed');
        }),
    );
  };
  // Long tasks from the first script on (buffered entries are not kept for 'longtask').
  await page.addInitScript(() => {
    window.__longest = 0;
    new PerformanceObserver((l) => l.getEntries().forEach((e) => (window.__longest = Math.max(window.__longest, e.duration)))).observe({ type: 'longtask' });
  });
  for (const workers of PARTS.has('stats') ? [1, undefined] : []) {
    await ready('?url=/gen/embed.safetensors&view=tensors');
    log.length = 0;
    const byUrl = await statsMs(workers);
    const sent = log.filter((e) => e.range).reduce((s, e) => s + e.bytes, 0);
    await ready('?view=tensors');
    await page.setInputFiles('#files', file);
    await page.waitForFunction(() => window.inspector.models.length === 1 && document.body.dataset.state === 'ready');
    const byFile = await statsMs(workers);
    if (workers === 1) {
      // The floor: bytes alone, no statistics, in a Worker of this page; curl on the same URL.
      const [fetchMs, blobMs] = await page.evaluate(async (u) => {
        const code = `onmessage = async ({ data }) => {
          const t0 = performance.now();
          await (await fetch(data.u)).arrayBuffer();
          const t1 = performance.now();
          for (let o = 0; o < data.file.size; o += 32 << 20) await data.file.slice(o, o + (32 << 20)).arrayBuffer();
          postMessage([t1 - t0, performance.now() - t1]);
        };`;
        const w = new Worker(URL.createObjectURL(new Blob([code], { type: 'text/javascript' })));
        const file = document.getElementById('files').files[0];
        return new Promise((res) => (w.onmessage = (e) => (w.terminate(), res(e.data))) && w.postMessage({ u, file }));
      }, `${url}/gen/embed.safetensors`);
      const curl = await new Promise((res) => execFile('curl', ['-s', '-o', '/dev/null', '-w', '%{time_total}', `${url}/gen/embed.safetensors`], (e, out) => res(e ? NaN : Number(out) * 1000)));
      const mbs = (ms) => `${((125 << 20) / 1e3 / ms).toFixed(0)} MB/s`;
      rows.push(['the bytes alone (125 MiB), no statistics', `Chromium fetch ${fetchMs.toFixed(0)} ms (${mbs(fetchMs)}), File ${blobMs.toFixed(0)} ms (${mbs(blobMs)}); curl ${curl.toFixed(0)} ms (${mbs(curl)})`, 'a Worker of the same page: one GET read by arrayBuffer(), and 32 MiB Blob slices of the File; curl on the same URL of web-demo/serve.mjs']);
    }
    rows.push([`statistics of a 125 MiB float32 tensor, ${workers === 1 ? 'one Worker' : 'default spans'}`, `URL ${byUrl.toFixed(0)} ms, File ${byFile.toFixed(0)} ms (URL/File ${(byUrl / byFile).toFixed(2)}x)`, `${(sent / (125 << 20)).toFixed(3)} B of Range per tensor byte (counted at the server until the statistics were done)`]);
  }
  // 2. The graph.
  for (const q of PARTS.has('graph') ? ['', '&blocks=off'] : []) {
    const t0 = Date.now();
    await ready(`?url=/gen/graph.onnx&view=graph${q}`);
    await page.waitForSelector('#graph-host [data-graph-state="done"]', { timeout: 120000 });
    const ms = Date.now() - t0;
    const d = await page.$eval('#graph-host [data-graph-state]', (e) => ({ ...e.dataset }));
    let frames = '';
    if (q) {
      // Once the idle-time making of the culled boxes' elements is done.
      await page.waitForFunction(() => ['all', undefined].includes(document.querySelector('#graph-host [data-graph-state]').dataset.made), null, { timeout: 60000 });
      const measure = (zoom) =>
        page.evaluate(async (zoom) => {
          const svg = document.querySelector('#graph-host svg');
          const r = svg.getBoundingClientRect();
          const root = svg.closest('[data-graph-state]');
          if (zoom) {
            // Fitted again, then to that scale around the middle of the view.
            root.querySelector('.tl-g-tools button').click();
            const now = Number(root.dataset.zoom);
            svg.dispatchEvent(new WheelEvent('wheel', { deltaY: -Math.log(zoom / now) / 0.0015, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2, bubbles: true, cancelable: true }));
            await new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(res)));
          }
          let longest = 0;
          const obs = new PerformanceObserver((l) => l.getEntries().forEach((e) => (longest = Math.max(longest, e.duration))));
          obs.observe({ type: 'longtask', buffered: false });
          const times = [];
          let last = performance.now();
          for (let i = 0; i < 120; i++) {
            if (i % 2) svg.dispatchEvent(new WheelEvent('wheel', { deltaY: i % 4 === 1 ? -150 : 150, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2, bubbles: true, cancelable: true }));
            else {
              svg.dispatchEvent(new PointerEvent('pointerdown', { clientX: 400, clientY: 400, pointerId: 1, bubbles: true }));
              // Drags there and back (each drag moves the view for good).
              const sign = i % 4 === 0 ? 1 : -1;
              svg.dispatchEvent(new PointerEvent('pointermove', { clientX: 400 + sign * 30, clientY: 400 - sign * 120, pointerId: 1, bubbles: true }));
              svg.dispatchEvent(new PointerEvent('pointerup', { clientX: 400 + sign * 30, clientY: 400 - sign * 120, pointerId: 1, bubbles: true }));
            }
            await new Promise((res) => requestAnimationFrame(res));
            const now = performance.now();
            times.push(now - last);
            last = now;
          }
          obs.disconnect();
          times.sort((a, b) => a - b);
          return { p50: times[60], p95: times[Math.floor(times.length * 0.95)], max: times.at(-1), longest, inDom: root.dataset.inDom };
        }, zoom);
      for (const [label, zoom] of [['fitted (outline)', null], ['at scale 1 (labels)', 1]]) {
        const f = await measure(zoom);
        frames += `; pan/zoom ${label}: frames p50 ${f.p50.toFixed(1)} ms, p95 ${f.p95.toFixed(1)} ms, max ${f.max.toFixed(1)} ms, longest task ${f.longest.toFixed(0)} ms, ${f.inDom} boxes and edges in the DOM`;
      }
    }
    rows.push([`graph of a 5,046-node ONNX model, ${q ? 'flat (?blocks=off)' : 'collapsed'}`, `drawn ${ms} ms after navigation`, `${d.drawnBoxes} boxes, ${d.layout} layout ${d.layoutMs} ms${frames}`]);
  }
  // 3. The 100k-node graph: the longest main-thread task while it opens and pans.
  for (const q of PARTS.has('big') ? ['', '&blocks=off'] : []) {
    const t0 = Date.now();
    await ready(`?url=/gen/graph100k.onnx&view=graph${q}`);
    await page.waitForSelector('#graph-host [data-graph-state="done"]', { timeout: 300000 });
    const ms = Date.now() - t0;
    const opened = await page.evaluate(() => window.__longest);
    const d = await page.$eval('#graph-host [data-graph-state]', (e) => ({ ...e.dataset }));
    const panned = await page.evaluate(async () => {
      window.__longest = 0;
      const svg = document.querySelector('#graph-host svg');
      const r = svg.getBoundingClientRect();
      let max = 0;
      let last = performance.now();
      for (let i = 0; i < 60; i++) {
        if (i % 2) svg.dispatchEvent(new WheelEvent('wheel', { deltaY: i % 4 === 1 ? -300 : 300, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2, bubbles: true, cancelable: true }));
        else {
          const sign = i % 4 === 0 ? 1 : -1;
          svg.dispatchEvent(new PointerEvent('pointerdown', { clientX: 400, clientY: 400, pointerId: 1, bubbles: true }));
          svg.dispatchEvent(new PointerEvent('pointermove', { clientX: 400 + sign * 30, clientY: 400 - sign * 200, pointerId: 1, bubbles: true }));
          svg.dispatchEvent(new PointerEvent('pointerup', { clientX: 400 + sign * 30, clientY: 400 - sign * 200, pointerId: 1, bubbles: true }));
        }
        await new Promise((res) => requestAnimationFrame(res));
        const now = performance.now();
        max = Math.max(max, now - last);
        last = now;
      }
      await new Promise((res) => setTimeout(res, 200));
      return { longest: window.__longest, frame: max };
    });
    rows.push([`graph of a 100,004-node ONNX model, ${q ? 'flat (?blocks=off)' : 'collapsed'}`, `drawn ${ms} ms after navigation`, `${d.drawnBoxes} boxes, analysis ${d.analyzeMs} ms in the graph Worker, ${d.layout} layout ${d.layoutMs} ms; longest main-thread task ${opened.toFixed(0)} ms while opening, ${panned.longest.toFixed(0)} ms over 60 pan/zoom frames (longest frame ${panned.frame.toFixed(0)} ms)`]);
  }
  await browser.close();
  // 4. Statistics with no DevTools client attached (see the top of this file).
  if (PARTS.has('quiet')) {
    writeFileSync(join(dir, 'stats-harness.html'), statsHarness(ROUNDS));
    generated.set('stats-harness.html', { path: join(dir, 'stats-harness.html') });
    log.length = 0;
    const chrome = spawn(CHROMIUM, [...ARGS, `--user-data-dir=${join(dir, 'profile')}`, `${url}/gen/stats-harness.html`], { stdio: 'ignore' });
    let done = null;
    for (const t0 = Date.now(); !done && Date.now() - t0 < 60000 * (1 + ROUNDS); ) {
      await new Promise((res) => setTimeout(res, 200));
      done = log.find((e) => e.path.startsWith('/gen/result/'));
    }
    chrome.kill();
    await new Promise((res) => (chrome.exitCode === null ? chrome.once('exit', res) : res()));
    if (!done) throw new Error('the stats harness sent no result in time');
    for (const r of done.path.slice('/gen/result/'.length).split(',')) {
      const [workers, byUrl, byFile, fetchMs] = r.split(':');
      rows.push([`statistics of a 125 MiB float32 tensor, ${workers === '1' ? 'one Worker' : 'default spans'}, no DevTools attached`, `URL ${byUrl} ms, File ${byFile} ms (URL/File ${(byUrl / byFile).toFixed(2)}x)`, `the bytes alone: one fetch ${fetchMs} ms (${((125 << 20) / 1e3 / fetchMs).toFixed(0)} MB/s); the File a Blob in memory`]);
    }
  }
  server.closeAllConnections();
  server.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log('| what | time | notes |\n|---|---|---|');
for (const r of rows) console.log(`| ${r.join(' | ')} |`);

/** The page of part 4: the inspector in an iframe, statistics of 'embed' by URL and from a File
 * (a Blob of the same bytes), one Worker and the default spans, `rounds` times; the times go
 * back as the path of a last request (`workers:url ms:file ms:bare fetch ms`, comma-separated). */
function statsHarness(rounds) {
  return `<!doctype html><meta charset="utf-8"><title>stats harness</title><body><script type="module">
const frame = (q) => new Promise((res) => {
  const f = document.createElement('iframe');
  f.style.cssText = 'width:1280px;height:900px';
  f.src = '/web-demo/' + q;
  f.onload = () => res(f);
  document.body.replaceChildren(f);
});
const ready = async (f) => {
  while (!f.contentWindow.inspector?.ready) await new Promise((r) => setTimeout(r, 20));
  await f.contentWindow.inspector.ready;
  return f.contentWindow;
};
const statsMs = (w) => new Promise((resolve) => {
  const panel = w.document.getElementById('tensor');
  const t0 = performance.now();
  new w.MutationObserver((_, o) => {
    if (['done', 'error'].includes(panel.dataset.statsState)) (o.disconnect(), resolve(performance.now() - t0));
  }).observe(panel, { attributes: true, attributeFilter: ['data-stats-state'] });
  w.inspector.openTensor('embed');
});
const blob = await (await fetch('/gen/embed.safetensors')).blob();
const out = [];
for (let r = 0; r < ${rounds}; r++) for (const workers of [1, undefined]) {
  let w = await ready(await frame('?url=/gen/embed.safetensors&view=tensors'));
  w.inspector.statsWorkers = workers;
  const byUrl = await statsMs(w);
  w = await ready(await frame('?view=tensors'));
  w.inspector.statsWorkers = workers;
  await w.inspector.openFiles([new File([blob], 'embed.safetensors')]);
  while (!(w.inspector.models.length === 1 && w.document.body.dataset.state === 'ready')) await new Promise((r) => setTimeout(r, 20));
  const byFile = await statsMs(w);
  const t0 = performance.now();
  await (await fetch('/gen/embed.safetensors', { cache: 'no-store' })).arrayBuffer();
  out.push([workers ?? 'spans', byUrl, byFile, performance.now() - t0].map((x) => (typeof x === 'number' ? x.toFixed(0) : x)).join(':'));
}
await fetch('/gen/result/' + out.join(','));
</script>`;
}
