// A tiny static server for the web demo and the browser tests: serves the repository root at /
// (the test data at /tests/data/) and, at /gen/<name>, what tests register: bytes in memory or
// `{path}` of a file on disk (a temp dir's 50 GB sparse file). Every file is served with HTTP
// Range (single ranges `a-b`, open-ended `a-` and suffix `-n`; 206 with Content-Range, 416 with
// `bytes */size` past the end; several ranges get the whole body, as RFC 9110 allows), a strong
// ETag with If-Match (412), If-None-Match (304) and If-Range, Accept-Ranges, HEAD, and CORS
// (any origin; Range/If-* allowed, Content-Range/ETag exposed; OPTIONS preflight).
// Run `node web-demo/serve.mjs [port]` and open http://127.0.0.1:<port>/web-demo/.
import { createServer } from 'node:http';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
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
const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'GET, HEAD, OPTIONS',
  'access-control-allow-headers': 'Range, If-Match, If-None-Match, If-Range',
  'access-control-expose-headers': 'Content-Range, Content-Length, ETag, Accept-Ranges',
  'access-control-max-age': '600',
};

/** ETags of in-memory bodies: one serial per Uint8Array object (a replaced body gets a new tag). */
const SERIALS = new WeakMap();
let serial = 0;
function memoryTag(bytes) {
  if (!SERIALS.has(bytes)) SERIALS.set(bytes, ++serial);
  return `"gen-${SERIALS.get(bytes)}-${bytes.byteLength}"`;
}

/**
 * The byte range a `Range` header asks of a `size`-byte body: `{start, end}` (inclusive),
 * `'unsatisfiable'`, or null (no usable single range: send the whole body).
 */
export function parseRange(header, size) {
  const m = /^bytes=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header ?? '');
  if (!m || (m[1] === '' && m[2] === '')) return null;
  if (m[1] === '') {
    const n = Number(m[2]);
    if (n === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (m[2] !== '' && Number(m[2]) < start) return null;
  if (start >= size) return 'unsatisfiable';
  return { start, end };
}

const matches = (list, etag) => list.split(',').some((t) => t.trim() === '*' || t.trim() === etag || t.trim() === `W/${etag}`);

/**
 * Starts the server; `generated` maps /gen/<name> to bytes or `{path}`; `log` (an array) receives
 * `{method, path, range, status, bytes}` per request (for tests that count what a reader fetched);
 * `faults(req)` may return a status to answer instead (for retry tests). Resolves to { server, url }.
 */
export function serve({ port = 0, generated = new Map(), log = null, faults = null } = {}) {
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const entry = { method: req.method, path, range: req.headers.range ?? null, status: 0, bytes: 0 };
    log?.push(entry);
    const finish = (status, headers, body) => {
      entry.status = status;
      res.writeHead(status, { ...CORS, 'cache-control': 'no-store', ...headers });
      if (body === undefined || req.method === 'HEAD') return res.end();
      if (typeof body === 'string' || body instanceof Uint8Array) {
        entry.bytes = body.length;
        return res.end(body);
      }
      body.on('data', (c) => (entry.bytes += c.length));
      body.on('error', () => res.destroy());
      body.pipe(res);
    };
    try {
      if (req.method === 'OPTIONS') return finish(204, {});
      if (req.method !== 'GET' && req.method !== 'HEAD') return finish(405, { allow: 'GET, HEAD, OPTIONS', 'content-type': 'text/plain' }, 'GET or HEAD only');
      const fault = faults?.(req);
      if (fault) return finish(fault, { 'content-type': 'text/plain' }, `injected ${fault}`);
      // What to send: bytes in memory, or a file (size and a strong ETag from its stat).
      let mem = null;
      let file = null;
      let type = 'application/octet-stream';
      let size, etag;
      if (path.startsWith('/gen/')) {
        const g = generated.get(path.slice(5));
        if (g instanceof Uint8Array) mem = g;
        else if (g?.path) file = g.path;
        else throw Object.assign(new Error('missing'), { code: 'ENOENT' });
        type = TYPES[extname(path)] ?? type;
      } else {
        file = normalize(join(ROOT, path.slice(1)));
        if (!file.startsWith(ROOT.endsWith(sep) ? ROOT : ROOT + sep) && file !== ROOT) throw Object.assign(new Error('outside'), { code: 'ENOENT' });
        if ((await stat(file)).isDirectory()) file = join(file, 'index.html');
        type = TYPES[extname(file)] ?? type;
      }
      if (mem) {
        size = mem.byteLength;
        etag = memoryTag(mem);
      } else {
        const st = await stat(file);
        size = st.size;
        etag = `"${st.size.toString(16)}-${Math.floor(st.mtimeMs * 1000).toString(16)}-${st.ino.toString(16)}"`;
      }
      const headers = { 'content-type': type, etag, 'accept-ranges': 'bytes' };
      const ifMatch = req.headers['if-match'];
      if (ifMatch && !ifMatch.split(',').some((t) => t.trim() === '*' || t.trim() === etag)) return finish(412, { etag, 'content-type': 'text/plain' }, `the file's ETag is ${etag}, not ${ifMatch}`);
      const ifNone = req.headers['if-none-match'];
      if (ifNone && matches(ifNone, etag)) return finish(304, { etag });
      const ifRange = req.headers['if-range'];
      let range = ifRange && ifRange.trim() !== etag ? null : parseRange(req.headers.range, size);
      if (range === 'unsatisfiable') return finish(416, { 'content-range': `bytes */${size}`, 'content-type': 'text/plain', etag }, `range ${req.headers.range} is past the end (${size} bytes)`);
      const body = (start, end) => (mem ? mem.subarray(start, end + 1) : end < start ? '' : createReadStream(file, { start, end }));
      if (range) {
        return finish(206, { ...headers, 'content-range': `bytes ${range.start}-${range.end}/${size}`, 'content-length': range.end - range.start + 1 }, body(range.start, range.end));
      }
      return finish(200, { ...headers, 'content-length': size }, body(0, size - 1));
    } catch (e) {
      finish(e.code === 'ENOENT' || e.code === 'ENOTDIR' ? 404 : 500, { 'content-type': 'text/plain' }, String(e.message));
    }
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}` })));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { url } = await serve({ port: Number(process.argv[2] ?? 8080) });
  console.log(`tensorlane web demo: ${url}/web-demo/`);
}
