#!/usr/bin/env node
// The npm package's command (`bin`): `npx tensorlane serve MODEL...` serves the web inspector this
// package ships (web-demo/, js/, wasm/pkg/) and the given model files from Node, for Node users
// without Rust. Same URL layout, Range, ETag and CORS behaviour as the Rust `tensorlane serve`
// (native/src/serve/):
//
//   /                        307 to /web-demo/
//   /web-demo/, /js/, /wasm/pkg/   the inspector (from this package's folder)
//   /files/{mount}/{path}    the served files: a folder is mounted under its own name with
//                            everything below it; a file under its folder's name, with only itself
//                            and the companion files its model names (shards, splits, external data)
//   /models                  JSON: every model under the served paths ({models: [{id, url, format,
//                            sources, tensors}], errors})
//   /tensors/, /ws           501: tensors as Tenso packets are the Rust server's (cargo install tensorlane-cli)
//
// Files: GET and HEAD with Accept-Ranges, Content-Length, a strong ETag (the file's identity,
// "size-mtime_ns-inode-ctime_ns" in hex, as the Rust server makes it), Last-Modified and
// Cache-Control: no-cache; If-Match /
// If-Unmodified-Since (412), If-None-Match / If-Modified-Since (304), then one Range (a-b, a-, -n)
// with If-Range: 206, or 416 with `Content-Range: bytes */size`; several ranges or a malformed
// header get the whole file (200). Paths are percent-decoded once; `.`/`..` components,
// backslashes and NULs are refused (400); a file reached through a symlink leading out of its
// mount is not found (404). CORS: any origin, GET/HEAD/OPTIONS, Range and the conditionals
// allowed, Content-Range/Content-Length/ETag/Accept-Ranges/Last-Modified/Content-Type exposed.
// Read-only (405 otherwise). `--token TOKEN` (or TENSORLANE_TOKEN) guards everything but the
// inspector's own files: `Authorization: Bearer TOKEN` or `?token=TOKEN` (401 otherwise).
import { createServer } from 'node:http';
import { createReadStream, readdirSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { timingSafeEqual } from 'node:crypto';

/** The package's folder: the inspector is its web-demo/, js/ and wasm/pkg/. */
const PACKAGE = fileURLToPath(new URL('..', import.meta.url));
const INSPECTOR = ['web-demo', 'js', 'wasm'];
const TYPES = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  mjs: 'text/javascript; charset=utf-8',
  json: 'application/json',
  wasm: 'application/wasm',
  css: 'text/css; charset=utf-8',
  png: 'image/png',
  md: 'text/plain; charset=utf-8',
  txt: 'text/plain; charset=utf-8',
  ts: 'text/plain; charset=utf-8',
};
const CORS = {
  'access-control-allow-origin': '*',
  'access-control-expose-headers': 'content-range,content-length,etag,accept-ranges,last-modified,content-type',
  vary: 'origin, access-control-request-method, access-control-request-headers',
};
const PREFLIGHT = {
  'access-control-allow-methods': 'GET,HEAD,OPTIONS',
  'access-control-allow-headers': 'range,if-range,if-none-match,if-modified-since,if-match,if-unmodified-since,authorization',
  'access-control-max-age': '3600',
};
/** What the Rust server's `format_from_name` knows (tensorlane-core detect.rs). */
const MODEL_NAME = /(\.safetensors\.index\.json|\.(safetensors|gguf|pt|pth|bin|ckpt|npy|npz|onnx|h5|hdf5|zt|tenso))$/i;

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The media type for a file name. */
function contentType(name) {
  const i = name.lastIndexOf('.');
  return (i >= 0 && TYPES[name.slice(i + 1)]) || 'application/octet-stream';
}

/** Percent-decodes a URL path once and splits it, refusing `.`, `..`, backslashes and NULs (400). */
export function components(raw) {
  let decoded;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    throw new HttpError(400, `${raw}: the path is not UTF-8 once percent-decoded`);
  }
  const out = [];
  for (const c of decoded.split('/')) {
    if (c === '') continue;
    if (c === '.' || c === '..' || c.includes('\\') || c.includes('\0')) {
      throw new HttpError(400, `${raw}: a path may not contain \`.\` or \`..\` components, backslashes or NULs`);
    }
    out.push(c);
  }
  return out;
}

/**
 * What a `Range` header asks of `size` bytes: null (the whole body: absent, malformed, another
 * unit or several ranges), 'unsatisfiable' (416), or [start, end) — as the Rust server's parse_range.
 */
export function parseRange(value, size) {
  const v = (value ?? '').trim();
  if (v.slice(0, 6).toLowerCase() !== 'bytes=') return null;
  const specs = v.slice(6).split(',').map((s) => s.trim()).filter(Boolean);
  if (specs.length !== 1 || !specs[0].includes('-')) return null;
  const at = specs[0].indexOf('-');
  const a = specs[0].slice(0, at).trim();
  const b = specs[0].slice(at + 1).trim();
  const digits = (s) => /^[0-9]+$/.test(s);
  if (a === '') {
    if (!digits(b)) return null;
    const n = BigInt(b);
    if (n === 0n || size === 0) return 'unsatisfiable';
    return [size - Number(n < BigInt(size) ? n : BigInt(size)), size];
  }
  if (!digits(a) || !(b === '' || digits(b))) return null;
  const first = BigInt(a);
  const last = b === '' ? null : BigInt(b);
  if (last !== null && last < first) return null;
  if (first >= BigInt(size)) return 'unsatisfiable';
  const end = last === null ? size : Number(last + 1n < BigInt(size) ? last + 1n : BigInt(size));
  return [Number(first), end];
}

/** Whether entity tag `tag` is in the If-Match / If-None-Match list (`weak`: W/ tags count). */
function tagListed(list, tag, weak) {
  return list.split(',').map((t) => t.trim()).some((t) => t === '*' || (t.startsWith('W/') ? weak && t.slice(2) === tag : t === tag));
}

/** A folder's last component as a mount name (as the Rust server names mounts). */
function mountName(dir) {
  const n = basename(dir).replace(/[/\\%?#]/g, '_');
  return n && n !== '.' && n !== '..' ? n : 'root';
}

/** Is `path` (canonical) inside `root` (canonical)? */
const inside = (root, path) => path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);

/**
 * The mounts for the served `paths`: [{name, root, only}] (`only`: for a file, the canonical
 * paths of the file and its companions). `open` (the package's) finds a model file's companions.
 */
export async function mountsOf(paths, open) {
  const mounts = [];
  for (const p of paths) {
    let canon;
    try {
      canon = realpathSync(p);
    } catch (e) {
      throw new Error(`serve ${p}: ${e.code === 'ENOENT' ? 'no such file or folder' : e.message}; give model files or folders that exist`);
    }
    let root = canon;
    let only = null;
    if (!statSync(canon).isDirectory()) {
      let model;
      try {
        model = open(canon);
      } catch (e) {
        throw new Error(`serve ${p}: cannot open it as a model (${e.message}); give a model file or a folder`);
      }
      root = dirname(canon);
      only = model.sources.map((s) => (s === '' ? canon : realpathSync(join(root, s))));
      model.close?.();
    }
    const base = mountName(root);
    let name = base;
    for (let k = 2; mounts.some((m) => m.name === name); k++) name = `${base}-${k}`;
    mounts.push({ name, root, only });
  }
  return mounts;
}

/** Sends the file `path` (canonical) for `req`, with the validators, conditionals and ranges. */
function sendFile(req, res, path, headers) {
  const st = statSync(path, { bigint: true });
  if (!st.isFile()) throw new HttpError(404, `${req.url}: not a file`);
  const size = Number(st.size);
  const hex = (n) => (n > 0n ? n : 0n).toString(16);
  const etag = `"${hex(st.size)}-${hex(st.mtimeNs)}-${hex(st.ino)}-${hex(st.ctimeNs)}"`;
  const mtime = new Date(Number(st.mtimeNs / 1_000_000_000n) * 1000);
  const modified = mtime.toUTCString();
  const h = req.headers;
  const base = { ...headers, etag, 'last-modified': modified, 'accept-ranges': 'bytes' };
  const bare = (status, extra = {}) => {
    res.writeHead(status, { ...base, ...extra });
    res.end();
  };
  const date = (s) => {
    const t = Date.parse(s ?? '');
    return Number.isNaN(t) ? null : t;
  };
  if (h['if-match'] !== undefined) {
    if (!tagListed(h['if-match'], etag, false)) return bare(412);
  } else if (date(h['if-unmodified-since']) !== null && mtime.getTime() > date(h['if-unmodified-since'])) {
    return bare(412);
  }
  if (h['if-none-match'] !== undefined) {
    if (tagListed(h['if-none-match'], etag, true)) return bare(304);
  } else if (date(h['if-modified-since']) !== null && mtime.getTime() <= date(h['if-modified-since'])) {
    return bare(304);
  }
  const ifRange = h['if-range'];
  const applies = req.method === 'GET' && (ifRange === undefined || (ifRange.startsWith('"') || ifRange.startsWith('W/') ? ifRange === etag : ifRange === modified));
  const range = applies && h.range !== undefined ? parseRange(h.range, size) : null;
  if (range === 'unsatisfiable') return bare(416, { 'content-range': `bytes */${size}`, 'content-length': '0' });
  const [start, end] = range ?? [0, size];
  const out = { ...base, 'content-type': contentType(basename(path)), 'content-length': String(end - start), 'cache-control': 'no-cache' };
  if (range) out['content-range'] = `bytes ${start}-${end - 1}/${size}`;
  res.writeHead(range ? 206 : 200, out);
  if (req.method === 'HEAD' || end === start) return res.end();
  // A file that shrinks meanwhile ends the stream early: the client sees a short body.
  const stream = createReadStream(path, { start, end: end - 1 });
  stream.on('error', () => res.destroy());
  stream.pipe(res);
}

/** `comps` under `root` (canonical), symlinks followed, which must stay inside it (else 404). */
function locate(root, comps, shown) {
  let canon;
  try {
    canon = realpathSync(join(root, ...comps));
  } catch (e) {
    throw new HttpError(404, `${shown}: not found (${e.code})`);
  }
  if (!inside(root, canon)) throw new HttpError(404, `${shown}: not found (it leads outside the served folder)`);
  return canon;
}

/** The path of a file under the mounts as a /files/ URL, or null. */
function urlOf(mounts, path) {
  for (const m of mounts) {
    if (!inside(m.root, path) || (m.only && !m.only.includes(path))) continue;
    const rel = path.slice(m.root.length).split(sep).filter(Boolean);
    return `/files/${[m.name, ...rel].map(encodeURIComponent).join('/')}`;
  }
  return null;
}

/** `/models`: every model file under the mounts, opened with the package's `open`. */
function listModels(mounts, open) {
  const models = [];
  const errors = [];
  for (const m of mounts) {
    const found = [];
    if (m.only) found.push(m.only[0]);
    else {
      const stack = [[m.root, 0]];
      while (stack.length) {
        const [dir, depth] = stack.pop();
        let entries = [];
        try {
          entries = readdirSync(dir, { withFileTypes: true });
        } catch {}
        for (const e of entries) {
          const p = join(dir, e.name);
          if (e.isDirectory()) {
            if (depth < 16) stack.push([p, depth + 1]);
          } else if (MODEL_NAME.test(e.name)) {
            try {
              const c = realpathSync(p);
              if (inside(m.root, c) && statSync(c).isFile()) found.push(c);
            } catch {}
          }
        }
      }
      found.sort();
    }
    for (const path of found) {
      const id = `${m.name}/${path.slice(m.root.length).split(sep).filter(Boolean).join('/')}`;
      try {
        const model = open(path);
        const paths = model.sources.map((s) => (s === '' ? path : join(dirname(path), s)));
        models.push({
          id,
          url: urlOf(mounts, path),
          format: model.format,
          sources: paths.map((p) => ({ url: urlOf(mounts, p), size: statSync(p).size })),
          tensors: model.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
        });
        model.close?.();
      } catch (e) {
        errors.push({ id, error: e.message });
      }
    }
  }
  return { models, errors };
}

/** Whether `path` is the inspector's own code, which the token does not guard. */
const isPublic = (path) => path === '/' || path === '/web-demo' || ['/web-demo/', '/js/', '/wasm/'].some((p) => path.startsWith(p));

/**
 * Starts the server: `paths` (model files and folders), `host`, `port` (0: a free one), `token`
 * (or null), `open` (the package's open(), for companions and /models). Resolves to
 * { server, url, mounts }.
 */
export async function serve({ paths, host = '127.0.0.1', port = 8080, token = null, open }) {
  const mounts = await mountsOf(paths, open);
  const secret = token ? Buffer.from(token) : null;
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const raw = url.pathname;
    const reply = (status, body, headers = {}) => {
      res.writeHead(status, { ...CORS, 'content-type': 'text/plain; charset=utf-8', ...headers });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    try {
      if (req.method === 'OPTIONS') {
        res.writeHead(200, { ...CORS, ...PREFLIGHT, 'content-length': '0' });
        return res.end();
      }
      if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, 'this server is read-only: GET, HEAD and OPTIONS only\n', { allow: 'GET, HEAD, OPTIONS' });
      if (secret && !isPublic(raw)) {
        const bearer = req.headers.authorization?.startsWith('Bearer ') ? req.headers.authorization.slice(7).trim() : null;
        const same = (s) => s !== null && s !== undefined && Buffer.from(s).length === secret.length && timingSafeEqual(Buffer.from(s), secret);
        if (!same(bearer) && !same(url.searchParams.get('token'))) {
          return reply(401, 'this server needs its token: send `Authorization: Bearer TOKEN` (or ?token=TOKEN)\n', { 'www-authenticate': 'Bearer' });
        }
      }
      if (raw === '/') return reply(307, '', { location: `/web-demo/${url.search}` });
      if (raw === '/web-demo') return reply(308, '', { location: `/web-demo/${url.search}` });
      if (raw === '/models') {
        const body = JSON.stringify(listModels(mounts, open));
        return reply(200, body, { 'content-type': 'application/json' });
      }
      if (raw === '/ws' || raw.startsWith('/tensors/')) {
        return reply(501, `${raw}: tensors as Tenso packets (/tensors/, /ws) are served by the Rust tensorlane serve (cargo install tensorlane-cli); this Node server has the inspector, /files/ and /models\n`);
      }
      if (raw.startsWith('/files/')) {
        const comps = components(raw.slice(7));
        if (!comps.length) throw new HttpError(404, '/files/: name a mount and a file (see /models)');
        const m = mounts.find((x) => x.name === comps[0]);
        if (!m) throw new HttpError(404, `${raw}: no mount named "${comps[0]}" (see /models)`);
        const path = locate(m.root, comps.slice(1), raw);
        if (m.only && !m.only.includes(path)) throw new HttpError(404, `${raw}: not found (this mount serves one model's files)`);
        return sendFile(req, res, path, CORS);
      }
      const comps = components(raw);
      if (!INSPECTOR.includes(comps[0]) || (comps[0] === 'wasm' && comps[1] !== 'pkg')) {
        throw new HttpError(404, `${raw}: not found (this server has /web-demo/, /js/, /wasm/pkg/, /files/ and /models)`);
      }
      let path = locate(PACKAGE, comps, raw);
      if (statSync(path).isDirectory()) {
        if (!raw.endsWith('/')) return reply(308, '', { location: `${raw}/` });
        path = locate(PACKAGE, [...comps, 'index.html'], raw);
      }
      return sendFile(req, res, path, CORS);
    } catch (e) {
      if (res.headersSent) return res.destroy();
      if (e instanceof HttpError) return reply(e.status, `${e.message}\n`);
      return reply(500, `${raw}: ${e.message}\n`);
    }
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const a = server.address();
  const shownHost = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return { server, url: `http://${shownHost}:${a.port}`, mounts };
}

const USAGE = `usage: tensorlane serve PATH... [--bind HOST:PORT] [--token TOKEN]
  Serves the web inspector and the model files or folders PATH... (a folder with everything below
  it; a file with its companion files) with HTTP Range, ETag and CORS, read-only.
  --bind HOST:PORT   the address to listen on (default 127.0.0.1:8080; port 0 picks a free one).
                     Anything but loopback exposes the files to the network: use --token with it.
  --token TOKEN      a bearer token every data request must carry (default: $TENSORLANE_TOKEN)
  tensorlane --version   prints the version`;

/** Runs the command line `argv` (without node and the script). */
async function main(argv) {
  const { version, open } = await import('./node.js');
  if (argv[0] === '--version' || argv[0] === '-V') return console.log(version);
  if (argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') return console.log(USAGE);
  if (argv[0] !== 'serve') {
    console.error(`error: ${argv[0] === undefined ? 'no command given' : `unknown command "${argv[0]}"`}: this Node command has \`serve\` (the Rust tensorlane binary has the rest: cargo install tensorlane-cli)\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const paths = [];
  let bind = '127.0.0.1:8080';
  let token = process.env.TENSORLANE_TOKEN || null;
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (argv[i + 1] === undefined) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--bind') bind = value();
    else if (a.startsWith('--bind=')) bind = a.slice(7);
    else if (a === '--token') token = value();
    else if (a.startsWith('--token=')) token = a.slice(8);
    else if (a === '--help' || a === '-h') return console.log(USAGE);
    else if (a.startsWith('-')) throw new Error(`unknown option ${a}`);
    else paths.push(a);
  }
  if (!paths.length) throw new Error('name the model files or folders to serve: tensorlane serve MODEL...');
  const m = /^(.*):(\d+)$/.exec(bind);
  if (!m) throw new Error(`--bind ${bind}: give HOST:PORT, e.g. 127.0.0.1:8080`);
  const { url, mounts } = await serve({ paths, host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]), token, open: (p) => open(p) });
  for (const mount of mounts) console.error(`serving ${mount.only ? mount.only[0] : mount.root} at ${url}/files/${encodeURIComponent(mount.name)}/`);
  console.error(`web inspector: this package's (${version}, ${PACKAGE})`);
  if (token) console.error('a token is required: Authorization: Bearer TOKEN, or ?token=TOKEN');
  console.error(`models: ${url}/models`);
  console.error('press Ctrl-C to stop');
  // The URL to open, alone on stdout (scripts and tests read it).
  console.log(`${url}/web-demo/`);
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => process.exit(0));
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((e) => {
    console.error(`error: ${e.message}`);
    process.exitCode = e instanceof HttpError ? 1 : 2;
  });
}
