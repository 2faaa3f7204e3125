// The inspector travels with the binary: `cargo install --path cli` into a temporary root, the
// binary copied to a folder outside any checkout and run there with this checkout's web-demo/,
// js/ and wasm/ hidden from it (empty folders bind-mounted over them in a private mount namespace,
// `unshare -rm`; where that is not allowed the binary still runs from outside the checkout and
// must say it serves its built-in inspector). `tensorlane serve` serves the inspector from
// memory: Chromium opens a served model by URL and computes a tensor's statistics, and the page
// shows the binary's version. The embedded files answer with their content types, ETags (304),
// Cache-Control and Range.
//
// The install is a debug build into this checkout's target/ (CARGO_TARGET_DIR); the embedding
// (cli/build.rs) is the same in debug and release. It resolves features for the CLI alone, so it
// reuses little of a workspace build (56-79 s on a 2-core machine after `cargo test
// --workspace`). TENSORLANE_INSTALLED_BIN=PATH tests that binary instead: scripts/test.sh passes
// target/debug/tensorlane, built with the inspector embedded by its earlier steps.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ARGS, CHROMIUM, chromium, launch, missing } from './_chromium.mjs';
import { inspectServed } from './_served_inspector.mjs';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const VERSION = /^\[workspace\.package\][^[]*?^version = "([^"]+)"/ms.exec(readFileSync(join(ROOT, 'Cargo.toml'), 'utf8'))[1];
const OUT = join(ROOT, 'tests/out');
/** Whether a private mount namespace can hide the checkout's inspector from the binary. */
const canHide = spawnSync('unshare', ['-rm', 'true']).status === 0;

describe('the installed tensorlane binary serves its built-in inspector, no checkout needed', { skip: missing ?? false }, () => {
  let work, away, child, base;
  let stderr = '';
  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'tensorlane-installed-'));
    let bin = process.env.TENSORLANE_INSTALLED_BIN;
    if (!bin) {
      const t0 = Date.now();
      execFileSync('cargo', ['install', '--path', join(ROOT, 'cli'), '--root', join(work, 'root'), '--debug', '--locked', '--quiet'], {
        cwd: ROOT,
        env: { ...process.env, CARGO_TARGET_DIR: join(ROOT, 'target'), CARGO_INCREMENTAL: '0' },
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      console.log(`cargo install --path cli --debug: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      bin = join(work, 'root/bin/tensorlane');
    }
    // Outside the checkout: the binary and a model, in a temporary folder.
    away = join(work, 'away');
    mkdirSync(join(away, 'models'), { recursive: true });
    copyFileSync(bin, join(away, 'tensorlane'));
    copyFileSync(join(ROOT, 'tests/data/fixtures/sample.safetensors'), join(away, 'models/sample.safetensors'));
    copyFileSync(join(ROOT, 'tests/data/llm/tiny-llama-Q4_K.gguf'), join(away, 'models/tiny-llama-Q4_K.gguf'));
    const args = ['serve', join(away, 'models'), '--bind', '127.0.0.1:0'];
    if (canHide) {
      const empty = join(work, 'empty');
      mkdirSync(empty);
      const hide = ['web-demo', 'js', 'wasm'].map((d) => `mount --bind ${empty} ${join(ROOT, d)}`).join(' && ');
      child = spawn('unshare', ['-rm', 'sh', '-c', `${hide} && exec "$0" "$@"`, join(away, 'tensorlane'), ...args], { cwd: away, stdio: ['ignore', 'pipe', 'pipe'] });
    } else {
      console.log('unshare -rm is not allowed here: the checkout stays visible, the binary runs from outside it');
      child = spawn(join(away, 'tensorlane'), args, { cwd: away, stdio: ['ignore', 'pipe', 'pipe'] });
    }
    child.stderr.on('data', (d) => (stderr += d));
    base = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`tensorlane serve printed no URL within 60 s:\n${stderr}`)), 60000);
      child.on('exit', (code) => reject(new Error(`tensorlane serve exited (${code}):\n${stderr}`)));
      createInterface({ input: child.stdout }).once('line', (line) => {
        clearTimeout(timer);
        resolve(line.trim().replace(/^(http:\/\/[^/]+).*$/, '$1'));
      });
    });
  });
  after(async () => {
    if (child && child.exitCode === null) {
      const done = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT');
      await done;
    }
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('says it serves the built-in inspector, and the checkout is out of its sight', async () => {
    // stderr and stdout are two pipes: the lines before the URL may still be on their way.
    for (let i = 0; i < 50 && !stderr.includes('press Ctrl-C'); i++) await new Promise((r) => setTimeout(r, 100));
    assert.match(stderr, new RegExp(`web inspector: built in \\(tensorlane ${VERSION.replaceAll('.', '\\.')}, \\d+ files`), stderr);
  });

  it('Chromium opens the served model by URL and computes its statistics; the page shows the version', { timeout: 120000 }, async () => {
    const browser = await launch();
    try {
      mkdirSync(OUT, { recursive: true });
      const r = await inspectServed(browser, base, `${base}/files/models/sample.safetensors`, 'w', join(OUT, 'installed-inspector.png'));
      assert.deepEqual(r.problems, []);
      assert.deepEqual(r.rows, ['b', 'flag', 'w']);
      assert.equal(r.state, 'done');
      // w = arange(12) as float32.
      assert.equal(r.stats.count, 12);
      assert.equal(r.stats.min, 0);
      assert.equal(r.stats.max, 11);
      assert.equal(r.stats.mean, 5.5);
      assert.equal(r.version, `tensorlane ${VERSION}`);
    } finally {
      await browser.close();
    }
  });

  it('the Run view generates with the served model on WebGPU: every module its worker imports is embedded, the tokens are `tensorlane run`\'s', { timeout: 120000 }, async () => {
    const prompt = [1, 300, 45, 120];
    const max = 3;
    const model = join(away, 'models/tiny-llama-Q4_K.gguf');
    const cli = spawnSync(join(away, 'tensorlane'), ['run', model, '--tokens', prompt.join(','), '--max-new-tokens', String(max), '--context', '64', '--cache-type', 'f32', '--json'], { encoding: 'utf8' });
    assert.equal(cli.status, 0, cli.stderr);
    const want = JSON.parse(cli.stdout).tokens;
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: [...ARGS.filter((a) => a !== '--disable-gpu'), '--enable-unsafe-webgpu'] });
    try {
      const page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
      const failed = [];
      page.on('response', (r) => r.status() >= 400 && failed.push(`${r.status()} ${r.url()}`));
      await page.goto(`${base}/web-demo/?url=${encodeURIComponent(`${base}/files/models/tiny-llama-Q4_K.gguf`)}&view=run&tokens=${prompt.join(',')}&max=${max}&context=64&device=webgpu`);
      await page.waitForSelector('.run-view[data-run-state=done], .run-view[data-run-state=error]', { timeout: 90000 });
      mkdirSync(OUT, { recursive: true });
      await page.screenshot({ path: join(OUT, 'installed-run-view.png'), fullPage: true });
      assert.equal(await page.getAttribute('.run-view', 'data-run-state'), 'done', await page.textContent('.run-view .rv-msg'));
      assert.deepEqual(JSON.parse(await page.textContent('[data-run-tokens]')), want);
      assert.equal(await page.getAttribute('.run-view', 'data-run-device'), 'webgpu');
      assert.deepEqual(failed, []);
    } finally {
      await browser.close();
    }
  });

  it('serves the embedded files with content types, ETags (304), no-cache and ranges', async () => {
    const wasm = await fetch(`${base}/wasm/pkg/tensorlane_wasm_bg.wasm`);
    assert.equal(wasm.status, 200);
    assert.equal(wasm.headers.get('content-type'), 'application/wasm');
    assert.equal(wasm.headers.get('cache-control'), 'no-cache');
    const size = (await wasm.arrayBuffer()).byteLength;
    assert.equal(Number(wasm.headers.get('content-length')), size);
    const etag = wasm.headers.get('etag');
    assert.match(etag, /^"[0-9a-f]+-[0-9a-f]{16}"$/);
    assert.equal((await fetch(`${base}/wasm/pkg/tensorlane_wasm_bg.wasm`, { headers: { 'if-none-match': etag } })).status, 304);
    const part = await fetch(`${base}/wasm/pkg/tensorlane_wasm_bg.wasm`, { headers: { range: 'bytes=0-3' } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get('content-range'), `bytes 0-3/${size}`);
    assert.deepEqual([...new Uint8Array(await part.arrayBuffer())], [0, 0x61, 0x73, 0x6d]);
    assert.equal((await fetch(`${base}/wasm/pkg/tensorlane_wasm_bg.wasm`, { headers: { range: `bytes=${size}-` } })).status, 416);
    const page = await fetch(`${base}/web-demo/`);
    assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.match(await page.text(), /tensorlane inspector/);
    assert.equal((await fetch(`${base}/js/browser.js`)).headers.get('content-type'), 'text/javascript; charset=utf-8');
    const index = await fetch(`${base}/`, { redirect: 'manual' });
    assert.equal(index.headers.get('location'), '/web-demo/');
    // What the inspector is not: the checkout's tests/data/ and development server, Node-only modules.
    for (const p of ['/tests/data/fixtures/sample.safetensors', '/js/node.js', '/web-demo/serve.mjs']) assert.equal((await fetch(`${base}${p}`)).status, 404, p);
  });
});
