// A tiny static server for the web demo and the browser tests: serves the repository root at /
// (the test data at /tests/data/) and in-memory packets registered by tests at /gen/.
// Run `node web-demo/serve.mjs [port]` and open http://127.0.0.1:<port>/web-demo/.
import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.css': 'text/css',
  '.png': 'image/png',
  '.d.ts': 'text/plain',
};

/** Starts the server; `generated` maps /gen/<name> to bytes. Resolves to { server, url }. */
export function serve({ port = 0, generated = new Map() } = {}) {
  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
      let body;
      let type = 'application/octet-stream';
      if (path.startsWith('/gen/')) {
        body = generated.get(path.slice(5));
      } else {
        let file = normalize(join(ROOT, path.slice(1)));
        if (!file.startsWith(ROOT.endsWith(sep) ? ROOT : ROOT + sep) && file !== ROOT) throw Object.assign(new Error('outside'), { code: 'ENOENT' });
        if ((await stat(file)).isDirectory()) file = join(file, 'index.html');
        body = await readFile(file);
        type = TYPES[extname(file)] ?? type;
      }
      if (!body) throw Object.assign(new Error('missing'), { code: 'ENOENT' });
      res.writeHead(200, { 'content-type': type, 'content-length': body.length, 'cache-control': 'no-store' });
      res.end(body);
    } catch (e) {
      res.writeHead(e.code === 'ENOENT' || e.code === 'ENOTDIR' ? 404 : 500, { 'content-type': 'text/plain' });
      res.end(String(e.message));
    }
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}` })));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { url } = await serve({ port: Number(process.argv[2] ?? 8080) });
  console.log(`tensorlane web demo: ${url}/web-demo/`);
}
