// The npm package as a user gets it: scripts/pack.sh writes the tarballs, `npm install` puts them
// in a fresh project outside the repository, and that project's code uses them: Node ESM import,
// CJS require, `tsc --strict` against the shipped .d.ts, esbuild and Vite builds of a page run in
// Chromium (a packet and a safetensors File), and Node again without the platform package (the
// wasm backend, with one warning). Prints the installed sizes (addon, wasm, JS).
// Needs the tools of tests/pack/package.json (scripts/setup.sh: npm ci --prefix tests/pack).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { CI, launch, missing } from '../browser/_chromium.mjs';
import { inspectServed } from '../browser/_served_inspector.mjs';
import { BIN as RUST_BIN, startServe, missing as noRustBinary } from '../js/_serve.mjs';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DATA = join(ROOT, 'tests/data');
const TOOLS = fileURLToPath(new URL('./node_modules/', import.meta.url));
const version = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version;

const toolsMissing = ['esbuild', 'typescript', 'vite'].filter((t) => !existsSync(join(TOOLS, t, 'package.json')));
if (toolsMissing.length) throw new Error(`tests/pack needs ${toolsMissing.join(', ')}: run npm ci --prefix tests/pack (scripts/setup.sh does)`);

let work, app, tgz;
const run = (cmd, args, opts = {}) => execFileSync(cmd, args, { cwd: app, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...opts });
/** Runs a Node consumer of the installed package; returns its JSON line and its stderr. */
function consumer(file, env = {}) {
  const r = spawnSync(process.execPath, [file, DATA], { cwd: app, encoding: 'utf8', env: { ...process.env, TENSORLANE_BACKEND: '', ...env } });
  assert.equal(r.status, 0, `${file} failed:\n${r.stderr}`);
  return { ...JSON.parse(r.stdout.trim().split('\n').pop()), stderr: r.stderr };
}

before(() => {
  work = mkdtempSync(join(tmpdir(), 'tensorlane-pack-'));
  tgz = join(work, 'tgz');
  execFileSync('bash', [join(ROOT, 'scripts/pack.sh'), tgz], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  app = join(work, 'app');
  cpSync(fileURLToPath(new URL('./consumer/', import.meta.url)), app, { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  // The tarballs only; the registry is asked for nothing else but the other platforms'
  // optional packages, which npm skips when they are unpublished or do not fit this machine.
  run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', join(tgz, `tensorlane-${version}.tgz`), ...readdirSync(tgz).filter((f) => f !== `tensorlane-${version}.tgz`).map((f) => join(tgz, f))]);
});
after(() => {
  if (work && !process.env.TENSORLANE_KEEP_PACK) rmSync(work, { recursive: true, force: true });
});

describe('the packed npm package, installed in a fresh project', () => {
  it('pack.sh writes the main package (JS + wasm, no addon) and the platform package (the addon)', () => {
    const files = readdirSync(tgz).sort();
    assert.ok(files.includes(`tensorlane-${version}.tgz`), files.join());
    const platform = files.filter((f) => f !== `tensorlane-${version}.tgz`);
    assert.equal(platform.length, 1, `one platform package built here: ${files}`);
    const main = run('tar', ['tzf', join(tgz, `tensorlane-${version}.tgz`)]).split('\n');
    assert.ok(main.includes('package/wasm/pkg/tensorlane_wasm_bg.wasm'), main.join('\n'));
    assert.ok(main.includes('package/js/node.cjs') && main.includes('package/js/index.d.ts'), main.join('\n'));
    assert.ok(main.includes('package/LICENSE-MIT') && main.includes('package/LICENSE-APACHE'), main.join('\n'));
    assert.deepEqual(main.filter((f) => f.endsWith('.node')), [], 'the main package ships no addon');
    assert.ok(main.includes('package/web-demo/index.html') && main.includes('package/js/cli.js'), 'the inspector and the bin');
    const manifest = JSON.parse(readFileSync(join(app, 'node_modules/tensorlane/package.json'), 'utf8'));
    const dir = join(app, 'node_modules/@tensorlane');
    const [name] = readdirSync(dir);
    const platforms = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).tensorlanePlatforms;
    assert.deepEqual(manifest.optionalDependencies, Object.fromEntries(platforms.map((p) => [`@tensorlane/${p}`, version])));
    assert.ok(platforms.includes(name), `${name} in ${platforms}`);
    assert.equal(manifest.scripts, undefined, 'no dev scripts (prepack) in the published manifest');
    const pp = JSON.parse(readFileSync(join(dir, name, 'package.json'), 'utf8'));
    assert.ok(existsSync(join(dir, name, pp.main)), `${pp.main} in @tensorlane/${name}`);
    assert.deepEqual([pp.os, pp.cpu], [[process.platform], [process.arch]]);
  });

  it('npm pack without Rust stops in prepack and says what to do', { skip: ['/usr/bin/cargo', '/bin/cargo'].some(existsSync) && 'cargo is installed system-wide' }, () => {
    // A machine with Node but no cargo (PATH and HOME without ~/.cargo/bin): prepack cannot build
    // the wasm and must fail before npm writes a tarball.
    const r = spawnSync('bash', [join(ROOT, 'scripts/prepack.sh')], { cwd: ROOT, encoding: 'utf8', env: { PATH: '/usr/bin:/bin', HOME: work } });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /cargo is not on PATH/);
    assert.match(r.stderr, /scripts\/pack\.sh OUTDIR/);
  });

  it('Node ESM: import uses the addon from the platform package', () => {
    const r = consumer('node-esm.mjs');
    assert.deepEqual(r.problems, []);
    assert.equal(r.backend, 'addon');
    assert.equal(r.defaultBackend, 'addon');
    assert.equal(r.tensors, 3);
  });

  it('Node CJS: require gives the same, ready without awaiting', () => {
    const r = consumer('node-cjs.cjs');
    assert.deepEqual(r.problems, []);
    assert.equal(r.backend, 'addon');
    assert.deepEqual(r.syncShape, [5]);
  });

  it('TypeScript: tsc --strict on a consumer file against the shipped .d.ts', () => {
    const r = spawnSync(process.execPath, [join(TOOLS, 'typescript/bin/tsc'), '-p', '.'], { cwd: app, encoding: 'utf8' });
    assert.equal(r.status, 0, `tsc:\n${r.stdout}${r.stderr}`);
  });

  describe('bundled pages in Chromium', { skip: missing && !CI ? missing : false }, () => {
    let browser;
    const roots = {};
    const servers = [];
    const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };
    /** Serves `root` at / (Vite writes absolute /assets/ URLs) and tests/data at /data/. */
    async function serve(root) {
      const server = createServer((req, res) => {
        const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
        const parts = path.split('/').slice(1);
        const [dir, rest] = parts[0] === 'data' ? [DATA, parts.slice(1)] : [root, parts];
        const file = join(dir, ...rest);
        if (rest.includes('..') || !existsSync(file) || !statSync(file).isFile()) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
      });
      await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
      servers.push(server);
      return `http://127.0.0.1:${server.address().port}`;
    }
    before(async () => {
      // esbuild as the README says (the tensorlane/esbuild plugin); Vite with no configuration.
      run(process.execPath, ['build-esbuild.mjs', join(TOOLS, 'esbuild'), join(app, 'dist-esbuild')]);
      cpSync(join(app, 'index.html'), join(app, 'dist-esbuild/index.html'));
      run(process.execPath, [join(TOOLS, 'vite/bin/vite.js'), 'build', '--logLevel', 'warn', '--outDir', 'dist-vite']);
      roots.esbuild = join(app, 'dist-esbuild');
      roots.vite = join(app, 'dist-vite');
      browser = await launch();
    });
    after(async () => {
      await browser?.close();
      for (const s of servers) s.close();
    });
    for (const tool of ['esbuild', 'vite']) {
      it(`${tool}: the page decodes a packet and opens a safetensors File (wasm)`, async () => {
        const page = await browser.newPage();
        const errors = [];
        page.on('pageerror', (e) => errors.push(e.message));
        page.on('response', (r) => r.status() >= 400 && errors.push(`${r.status()} ${r.url()}`));
        await page.goto(`${await serve(roots[tool])}/index.html`);
        const result = await page.waitForFunction(() => window.result, null, { timeout: 30_000 }).then((h) => h.jsonValue(), (e) => ({ problems: [`${e.message}; page errors: ${errors}`] }));
        await page.close();
        assert.deepEqual(errors, []);
        assert.deepEqual(result.problems, []);
        assert.equal(result.backend, 'wasm');
        assert.equal(result.tensors, 3);
        // run() started its bundled Worker, which answered: no WebGPU in this Chromium, or a token.
        assert.match(result.run, /^(no-webgpu: |ran 1$)/, `${tool}: run() in the bundle`);
      });
    }
  });

  it('installed sizes: addon, wasm (< 1 MB gzipped), JS', () => {
    const pkg = join(app, 'node_modules/tensorlane');
    const [platform] = readdirSync(join(app, 'node_modules/@tensorlane'));
    const size = (f) => statSync(f).size;
    const addon = join(app, 'node_modules/@tensorlane', platform, `tensorlane.${platform}.node`);
    const wasm = join(pkg, 'wasm/pkg/tensorlane_wasm_bg.wasm');
    const js = [...readdirSync(join(pkg, 'js')).map((f) => join(pkg, 'js', f)), join(pkg, 'wasm/pkg/tensorlane_wasm.js')];
    const rows = [
      [`addon (@tensorlane/${platform})`, size(addon), gzipSync(readFileSync(addon)).length],
      ['wasm', size(wasm), gzipSync(readFileSync(wasm)).length],
      ['JS + .d.ts (js/, wasm glue)', js.reduce((n, f) => n + size(f), 0), js.reduce((n, f) => n + gzipSync(readFileSync(f)).length, 0)],
      ...readdirSync(tgz).map((f) => [`tarball ${f}`, size(join(tgz, f)), null]),
    ];
    const kb = (n) => (n === null ? '' : `${(n / 1024).toFixed(0)} KiB`);
    console.log(`installed sizes\n| what | bytes | gzip -6 |\n|---|---:|---:|\n${rows.map(([w, b, g]) => `| ${w} | ${kb(b)} | ${kb(g)} |`).join('\n')}`);
    assert.ok(rows[1][2] < 1_000_000, `wasm is ${rows[1][2]} bytes gzipped: over 1 MB`);
  });

  describe('npx tensorlane serve: the inspector from Node, like the Rust server', () => {
    let child, base, rust;
    let stderr = '';
    const FIXTURE = join(DATA, 'fixtures/sample.safetensors');
    before(async () => {
      // npx finds the installed package's bin (node_modules/.bin/tensorlane): no registry. In a
      // process group of its own: npm exec does not pass a signal on to the server it runs.
      child = spawn('npx', ['--no-install', 'tensorlane', 'serve', FIXTURE, '--bind', '127.0.0.1:0'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      child.stderr.on('data', (d) => (stderr += d));
      base = await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`npx tensorlane serve printed no URL within 60 s:\n${stderr}`)), 60000);
        child.on('exit', (code) => reject(new Error(`npx tensorlane serve exited (${code}):\n${stderr}`)));
        createInterface({ input: child.stdout }).once('line', (line) => {
          clearTimeout(timer);
          resolve(line.trim().replace(/^(http:\/\/[^/]+).*$/, '$1'));
        });
      });
      if (!noRustBinary) rust = await startServe([FIXTURE]);
    });
    after(async () => {
      if (child?.exitCode === null) {
        const done = new Promise((r) => child.once('exit', r));
        process.kill(-child.pid, 'SIGINT');
        await done;
      }
      await rust?.stop();
    });

    it('the package ships the inspector pages and the bin', async () => {
      const pkg = join(app, 'node_modules/tensorlane');
      for (const f of ['web-demo/index.html', 'web-demo/inspector.js', 'web-demo/inspector-worker.js', 'web-demo/vendor/elkjs/elk-worker.min.js', 'js/cli.js']) assert.ok(existsSync(join(pkg, f)), f);
      assert.ok(!existsSync(join(pkg, 'web-demo/serve.mjs')), 'not the checkout\'s development server');
      assert.deepEqual(JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8')).bin, { tensorlane: './js/cli.js' });
      // stderr and stdout are two pipes: the lines before the URL may still be on their way.
      for (let i = 0; i < 50 && !stderr.includes('press Ctrl-C'); i++) await new Promise((r) => setTimeout(r, 100));
      assert.match(stderr, /web inspector: this package's/);
    });

    it('Chromium opens the served model by URL and computes its statistics; the page shows the version', { skip: missing && !CI ? missing : false, timeout: 120000 }, async () => {
      const browser = await launch();
      try {
        const r = await inspectServed(browser, base, `${base}/files/fixtures/sample.safetensors`, 'w', join(ROOT, 'tests/out/npx-serve-inspector.png'));
        assert.deepEqual(r.problems, []);
        assert.deepEqual(r.rows, ['b', 'flag', 'w']);
        assert.equal(r.state, 'done');
        assert.deepEqual([r.stats.count, r.stats.min, r.stats.max, r.stats.mean], [12, 0, 11, 5.5]);
        assert.equal(r.version, `tensorlane ${version}`);
      } finally {
        await browser.close();
      }
    });

    it('a non-loopback --bind without a token is refused (exit 2) with the Rust server\'s message', () => {
      const env = { ...process.env, TENSORLANE_TOKEN: '' };
      const n = spawnSync('npx', ['--no-install', 'tensorlane', 'serve', FIXTURE, '--bind', '0.0.0.0:0'], { cwd: app, encoding: 'utf8', env, timeout: 60000 });
      assert.equal(n.status, 2, n.stderr);
      assert.match(n.stderr, /error: --bind 0\.0\.0\.0:0 is not a loopback address.*--token.*--public/);
      if (noRustBinary) return;
      const r = spawnSync(RUST_BIN, ['serve', FIXTURE, '--bind', '0.0.0.0:0'], { encoding: 'utf8', env, timeout: 60000 });
      assert.equal(r.status, 2, r.stderr);
      assert.ok(n.stderr.includes(r.stderr.trim()), `npx: ${n.stderr}\nrust: ${r.stderr}`);
    });

    /** One raw request (no URL normalisation, any method): { status, headers, body }. */
    const raw = (url, method, headers) =>
      new Promise((resolve, reject) => {
        const req = request(url, { method, headers }, (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        });
        req.on('error', reject);
        req.end();
      });

    it('Range, ETag, conditionals, CORS and refusals behave as the Rust server on the same file', { skip: noRustBinary ?? false }, async () => {
      const path = '/files/fixtures/sample.safetensors';
      const first = await raw(`${base}${path}`, 'GET', {});
      const etag = first.headers.etag;
      const modified = first.headers['last-modified'];
      const cases = [
        ['GET', {}],
        ['HEAD', {}],
        ['GET', { range: 'bytes=0-9' }],
        ['GET', { range: 'bytes=-16' }],
        ['GET', { range: 'bytes=280-' }],
        ['GET', { range: 'bytes=-1000' }],
        ['GET', { range: 'bytes=286-' }],
        ['GET', { range: 'bytes=0-1,4-5' }],
        ['GET', { range: 'bytes=5-2' }],
        ['GET', { range: 'items=0-1' }],
        ['GET', { 'if-none-match': etag }],
        ['GET', { 'if-none-match': '"other"' }],
        ['GET', { 'if-match': '"other"' }],
        ['GET', { 'if-modified-since': modified }],
        ['GET', { range: 'bytes=0-3', 'if-range': etag }],
        ['GET', { range: 'bytes=0-3', 'if-range': '"other"' }],
        ['GET', { origin: 'http://elsewhere.example' }],
        ['OPTIONS', { origin: 'http://elsewhere.example', 'access-control-request-method': 'GET', 'access-control-request-headers': 'range' }],
        ['POST', {}],
      ];
      const keep = ['content-range', 'content-length', 'accept-ranges', 'cache-control', 'content-type', 'etag', 'last-modified', 'access-control-allow-origin'];
      for (const [method, headers] of cases) {
        const [n, r] = await Promise.all([raw(`${base}${path}`, method, headers), raw(`${rust.base}${path}`, method, headers)]);
        const what = `${method} ${JSON.stringify(headers)}`;
        assert.equal(n.status, r.status, `${what}: status`);
        if (n.status < 400 || n.status === 416) {
          for (const k of keep) assert.equal(n.headers[k], r.headers[k], `${what}: ${k}`);
          assert.deepEqual(n.body, r.body, `${what}: body`);
        }
        if (method === 'OPTIONS') {
          for (const k of ['access-control-allow-methods', 'access-control-allow-headers']) {
            const set = (v) => (v ?? '').toLowerCase().split(',').map((x) => x.trim()).sort();
            assert.deepEqual(set(n.headers[k]), set(r.headers[k]), `${what}: ${k}`);
          }
        }
      }
      // The same refusals: a `..` (percent-encoded too), a file the mount does not serve, no mount.
      for (const p of ['/files/fixtures/%2e%2e/README.md', '/files/fixtures/manifest.json', '/files/nope/x', '/nothing']) {
        const [n, r] = await Promise.all([raw(`${base}${p}`, 'GET', {}), raw(`${rust.base}${p}`, 'GET', {})]);
        assert.equal(n.status, r.status, p);
      }
    });
  });

  it("README.md's JavaScript blocks run against the installed package", () => {
    const blocks = [...readFileSync(join(ROOT, 'README.md'), 'utf8').matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
    assert.ok(blocks.length >= 2, `${blocks.length} js blocks in README.md`);
    blocks.forEach((code, i) => {
      // A block that says it is for the browser needs a page (WebGPU, the DOM): the consumer's
      // Vite and esbuild pages above run run() in Chromium instead.
      if (code.startsWith('// browser')) return;
      // Written into the consumer project (so 'tensorlane' is the installed package), run from
      // the repository root (the paths the README names).
      writeFileSync(join(app, `readme-${i}.mjs`), code);
      const r = spawnSync(process.execPath, [join(app, `readme-${i}.mjs`)], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, TENSORLANE_BACKEND: 'addon' } });
      assert.equal(r.status, 0, `README.md js block ${i + 1} failed:\n${code}\n${r.stderr}`);
    });
  });

  it('without the platform package: the wasm backend loads and says so once', () => {
    rmSync(join(app, 'node_modules/@tensorlane'), { recursive: true, force: true });
    for (const file of ['node-esm.mjs', 'node-cjs.cjs']) {
      const r = consumer(file);
      assert.deepEqual(r.problems, []);
      assert.equal(r.backend, 'wasm', file);
      assert.equal(r.defaultBackend, 'wasm', file);
      assert.equal(r.stderr.split('TENSORLANE_WASM_FALLBACK').length - 1, 1, `one warning from ${file}:\n${r.stderr}`);
      assert.match(r.stderr, /@tensorlane\/[a-z0-9-]+: not installed/);
    }
    // Chosen on purpose: no warning.
    const quiet = consumer('node-esm.mjs', { TENSORLANE_BACKEND: 'wasm' });
    assert.equal(quiet.backend, 'wasm');
    assert.doesNotMatch(quiet.stderr, /TENSORLANE_WASM_FALLBACK/);
  });
});
