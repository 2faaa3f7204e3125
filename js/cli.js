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
// header get the whole file (200). The body is read from the one open file the ETag describes,
// its identity checked after every 256 KiB piece: a file rewritten in place, truncated or
// extended meanwhile is a 503 before the answer starts, or a body cut off after (never a clean
// end with bytes of two versions). Paths are percent-decoded once; `.`/`..` components,
// backslashes and NULs are refused (400); a file reached through a symlink leading out of its
// mount is not found (404). CORS: any origin, GET/HEAD/OPTIONS, Range and the conditionals
// allowed, Content-Range/Content-Length/ETag/Accept-Ranges/Last-Modified/Content-Type exposed.
// Read-only (405 otherwise). `--token TOKEN` (or TENSORLANE_TOKEN) guards everything but the
// inspector's own files: `Authorization: Bearer TOKEN` (the scheme in any case) or `?token=TOKEN`
// (401 otherwise); the token is compared as SHA-256 digests in constant time, so neither its bytes
// nor its length show in the answer's timing. Error bodies name the URL path asked for, never the
// server's own path to a file.
//
// Connections, as the Rust server's (native/src/serve/listener.rs): at most `maxConnections` at
// once, one more answered at once with `503` + `Retry-After: 1` + `Connection: close` (never left
// waiting); a connection must send a request head within `headerTimeout` (from its accept, or from
// the first byte of a later request), and a kept-alive one with no request in flight, or a client
// that takes none of a response, is closed after `idleTimeout`; 0 turns either off. A request in
// flight (a long answer to a client that reads) is never cut. Node's own settings do the work:
// headersTimeout/requestTimeout (the head, checked every connectionsCheckingInterval),
// keepAliveTimeout (between requests) and the socket's inactivity timeout (a stalled write).
//
// The command (`main`) refuses a `--bind` outside loopback (127.0.0.0/8, ::1, IPv4-mapped
// loopback) without a token or `--public` (exit 2), with the Rust command's message.
import { createServer } from 'node:http';
import { BlockList, isIP } from 'node:net';
import { lookup } from 'node:dns/promises';
import { close, closeSync, fstat, fstatSync, openSync, read, readSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createHash, timingSafeEqual } from 'node:crypto';

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

/** `serve`'s `headerTimeout` default (ms), the Rust server's (native/src/serve/mod.rs). */
export const DEFAULT_HEADER_TIMEOUT_MS = 10_000;
/** `serve`'s `idleTimeout` default (ms), the Rust server's. */
export const DEFAULT_IDLE_TIMEOUT_MS = 30_000;
/** `serve`'s `maxConnections` default, the Rust command's (cli/src/serve.rs). */
export const DEFAULT_MAX_CONNECTIONS = 512;
/** The most `503` answers being written at once; a connection over both limits is closed unanswered. */
const REFUSING = 64;
/** The answer to a connection over the limit: the Rust server's bytes (listener.rs BUSY). */
const BUSY = Buffer.from(
  'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 71\r\nConnection: close\r\n\r\n' +
    'this server is serving its most connections (--max-connections); retry\n',
);

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

/** The most bytes of a file read at once for a body (the Rust server's CHUNK). */
const CHUNK = 256 << 10;

/** Whether two `fstat`s (bigint) describe the same version of a file: size, mtime, inode, ctime. */
const sameVersion = (a, b) => a.size === b.size && a.mtimeNs === b.mtimeNs && a.ino === b.ino && a.ctimeNs === b.ctimeNs;

/**
 * Sends the file `path` (canonical) for `req`, with the validators, conditionals and ranges;
 * `shown` (the URL path asked for) is what error bodies name.
 *
 * One open file gives the validators and the bytes. Every piece read is followed by an `fstat`:
 * a file written in place, truncated or extended since its identity (the ETag) was taken is a
 * `503` before the answer starts (a body of at most CHUNK bytes is read before it), or a body cut
 * off (fewer bytes than Content-Length, then the connection ends) after — as the Rust server does.
 */
function sendFile(req, res, path, shown, headers) {
  let fd;
  try {
    // Only a regular file is opened (opening a FIFO would wait for a writer).
    if (!statSync(path).isFile()) throw new HttpError(404, `${shown}: not a file`);
    fd = openSync(path, 'r');
  } catch (e) {
    if (e instanceof HttpError) throw e;
    throw new HttpError(404, `${shown}: not found (${e.code ?? 'unreadable'})`);
  }
  let handedOver = false;
  try {
    const st = fstatSync(fd, { bigint: true });
    if (!st.isFile()) throw new HttpError(404, `${shown}: not a file`);
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
    if (req.method === 'HEAD' || end === start) {
      res.writeHead(range ? 206 : 200, out);
      return res.end();
    }
    if (end - start <= CHUNK) {
      // Small: read now, so that a file that shrank or changed since its identity is a clean 503.
      const buf = Buffer.allocUnsafe(end - start);
      let why = null;
      try {
        const got = readSync(fd, buf, 0, buf.length, start);
        if (got !== buf.length) why = `${got} of ${buf.length} bytes: it was truncated`;
        else if (!sameVersion(st, fstatSync(fd, { bigint: true }))) why = 'it was written in place';
      } catch (e) {
        why = e.code ?? 'unreadable';
      }
      if (why) throw new HttpError(503, `${shown}: the file changed while it was read (${why}); retry`);
      res.writeHead(range ? 206 : 200, out);
      return res.end(buf);
    }
    res.writeHead(range ? 206 : 200, out);
    handedOver = true;
    pump(fd, st, start, end, res);
  } finally {
    if (!handedOver) closeSync(fd);
  }
}

/**
 * Writes bytes [start, end) of the open file `fd` (whose identity was `id`) to `res`, CHUNK
 * bytes at a time, the next read when the socket has taken the last; each read is followed by an
 * `fstat`, and a short read, an error or a changed identity cuts the response off. Closes `fd`.
 */
function pump(fd, id, start, end, res) {
  let pos = start;
  let reading = false;
  let over = false;
  const closeFd = () => {
    // Not while a read is in flight: the descriptor could be reused under it.
    if (!reading && fd !== null) {
      close(fd, () => {});
      fd = null;
    }
  };
  const stop = (cut) => {
    over = true;
    closeFd();
    if (cut) res.destroy();
  };
  res.once('close', () => stop(false));
  const next = () => {
    if (over) return closeFd();
    if (pos >= end) {
      stop(false);
      return res.end();
    }
    const buf = Buffer.allocUnsafe(Math.min(CHUNK, end - pos));
    reading = true;
    read(fd, buf, 0, buf.length, pos, (err, got) => {
      if (err || got !== buf.length || over) {
        reading = false;
        return stop(!over);
      }
      fstat(fd, { bigint: true }, (e2, now) => {
        reading = false;
        if (e2 || !sameVersion(id, now) || over) return stop(!over);
        pos += got;
        if (res.write(buf)) next();
        else res.once('drain', next);
      });
    });
  };
  next();
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
        errors.push({ id, error: hidePaths(e.message, mounts) });
      }
    }
  }
  return { models, errors };
}

/** The SHA-256 of `text` (UTF-8). */
const sha256 = (text) => createHash('sha256').update(text).digest();

/**
 * The credentials of an `Authorization: Bearer TOKEN` header, the scheme in any case (RFC 9110
 * §11.1), or null — as the Rust server's `bearer`.
 */
export function bearer(value) {
  if (typeof value !== 'string') return null;
  const v = value.trimStart();
  const at = v.indexOf(' ');
  if (at < 0 || v.slice(0, at).toLowerCase() !== 'bearer') return null;
  return v.slice(at + 1).trim();
}

/**
 * The first `token=` of a URL's query (`search`, with or without its `?`), percent-decoded once
 * with invalid UTF-8 replaced, `+` kept — as the Rust server reads it; null when there is none.
 */
function queryToken(search) {
  const kv = search.replace(/^\?/, '').split('&').find((p) => p.startsWith('token='));
  if (kv === undefined) return null;
  const v = kv.slice(6);
  const bytes = [];
  for (let i = 0; i < v.length; i++) {
    if (v[i] === '%' && /^[0-9a-fA-F]{2}$/.test(v.slice(i + 1, i + 3))) {
      bytes.push(parseInt(v.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(...Buffer.from(v[i]));
  }
  return Buffer.from(bytes).toString('utf8');
}

/**
 * `text` (an error's message) with the server's own paths put as URLs: a mount's folder as its
 * `/files/{mount}` and the package's folder as `/`, so that no answer shows where files live.
 */
function hidePaths(text, mounts) {
  let out = String(text);
  const roots = [...mounts.map((m) => [m.root, `/files/${encodeURIComponent(m.name)}`]), [PACKAGE.replace(/[\\/]+$/, ''), '']];
  // The longest first: a mount inside the package's folder is named by its mount.
  roots.sort((a, b) => b[0].length - a[0].length);
  for (const [root, url] of roots) if (root) out = out.split(root).join(url);
  return out;
}

/** The largest timeout Node's timers take (2^31 - 1 ms, about 24.8 days). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * How often Node checks the connections still receiving a request against the header timeout
 * (`ms`): a quarter of it, between 50 ms and 1 s, so that a slow head is closed within about a
 * quarter past the timeout (Node's default of 30 s would let it run long past).
 */
const checkEvery = (ms) => (ms > 0 ? Math.min(1000, Math.max(50, Math.floor(ms / 4))) : 30_000);

/**
 * Serves at most `max` connections of `server` at once: one more is answered at once with the
 * Rust server's `503` (BUSY), then closed; nothing waits in the kernel's backlog. Node's own
 * `server.maxConnections` drops the extra connection without an answer, so the accepted sockets
 * are counted here, in front of the HTTP server's own connection listener (the one listener
 * http.Server registers for 'connection').
 */
function bound(server, max) {
  const http = server.listeners('connection');
  if (http.length !== 1) throw new Error(`this Node's http.Server has ${http.length} connection listeners where one was expected; the connection limit cannot be put in front of it`);
  server.removeListener('connection', http[0]);
  let open = 0;
  let refusing = 0;
  server.on('connection', (socket) => {
    if (open < max) {
      open++;
      socket.once('close', () => open--);
      return http[0].call(server, socket);
    }
    if (refusing >= REFUSING) return socket.destroy();
    refusing++;
    socket.once('close', () => refusing--);
    refuse(socket);
  });
}

/**
 * Writes BUSY to `socket`, ends the sending side and reads what the client sent (at most 64 KiB,
 * at most a second) before closing, so that its unread request does not turn the close into a
 * reset that loses the answer (as the Rust server's `refuse`).
 */
function refuse(socket) {
  socket.setNoDelay(true);
  const done = () => {
    clearTimeout(timer);
    socket.destroy();
  };
  const timer = setTimeout(done, 1000);
  let read = 0;
  socket.on('error', done);
  socket.on('end', done);
  socket.on('data', (d) => {
    read += d.length;
    if (read >= 64 << 10) done();
  });
  socket.end(BUSY);
}

/** Loopback addresses: 127.0.0.0/8, ::1 and IPv4-mapped 127.0.0.0/8. */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');

/** Whether IP address `ip` (v4 or v6, no brackets) reaches only this machine. */
export function isLoopback(ip) {
  const family = isIP(ip);
  return family !== 0 && LOOPBACK.check(ip, family === 4 ? 'ipv4' : 'ipv6');
}

/**
 * The refusal of a non-loopback `--bind` (`shown` as given, `ip` the address it listens on) with
 * neither a token nor `--public`, or null when the bind is allowed: the Rust command's message.
 */
function publicRefusal(shown, ip, hasToken, isPublicBind) {
  if (isLoopback(ip) || hasToken || isPublicBind) return null;
  return `--bind ${shown} is not a loopback address, so anyone who can reach it could read the served files: add --token TOKEN (or set TENSORLANE_TOKEN) to require a token, or --public to serve them to everyone without one`;
}

/**
 * A duration as `--header-timeout` takes it, in milliseconds: a whole number with `ms`, `s` or
 * `m` (a bare number is seconds); `0` means no limit (the Rust command's parse_duration). Throws
 * on anything else, and past what Node's timers take.
 */
export function parseDuration(text) {
  const t = String(text).trim();
  const m = /^([0-9]*)(.*)$/s.exec(t);
  if (!m[1]) throw new Error(`${JSON.stringify(text)} is not a duration: give a whole number and a unit, as 10s, 500ms or 2m`);
  const unit = m[2].trim();
  const scale = new Map([['ms', 1n], ['', 1000n], ['s', 1000n], ['m', 60_000n]]).get(unit);
  if (scale === undefined) throw new Error(`${JSON.stringify(text)}: unknown unit ${JSON.stringify(unit)}; use ms, s or m (as 10s)`);
  const ms = BigInt(m[1]) * scale;
  if (ms > BigInt(MAX_TIMEOUT_MS)) throw new Error(`${JSON.stringify(text)} is too long: at most ${MAX_TIMEOUT_MS}ms (about 24 days); 0 turns the limit off`);
  return Number(ms);
}

/** Whether `path` is the inspector's own code, which the token does not guard. */
const isPublic = (path) => path === '/' || path === '/web-demo' || ['/web-demo/', '/js/', '/wasm/'].some((p) => path.startsWith(p));

/**
 * Starts the server: `paths` (model files and folders), `host`, `port` (0: a free one), `token`
 * (or null), `open` (the package's open(), for companions and /models), `maxConnections`
 * (default 512; 0 counts as 1), `headerTimeout` and `idleTimeout` (milliseconds, default 10 s
 * and 30 s; 0: no limit). It binds what it is given: the loopback rule is the command's. Resolves
 * to { server, url, mounts }.
 */
export async function serve({
  paths,
  host = '127.0.0.1',
  port = 8080,
  token = null,
  open,
  maxConnections = DEFAULT_MAX_CONNECTIONS,
  headerTimeout = DEFAULT_HEADER_TIMEOUT_MS,
  idleTimeout = DEFAULT_IDLE_TIMEOUT_MS,
}) {
  for (const [name, v] of [['headerTimeout', headerTimeout], ['idleTimeout', idleTimeout]]) {
    if (!Number.isInteger(v) || v < 0 || v > MAX_TIMEOUT_MS) throw new RangeError(`${name} ${v}: give whole milliseconds from 0 (no limit) to ${MAX_TIMEOUT_MS}`);
  }
  if (!Number.isInteger(maxConnections) || maxConnections < 0) throw new RangeError(`maxConnections ${maxConnections}: give a whole number (0 counts as 1)`);
  const mounts = await mountsOf(paths, open);
  const secret = token ? sha256(token) : null;
  const server = createServer(
    {
      // The head of a request within headerTimeout of the accept (or of the request's first
      // byte); Node wants requestTimeout >= headersTimeout, and for GET/HEAD the request is its
      // head. Both are checked for connections still receiving a request only.
      headersTimeout: headerTimeout,
      requestTimeout: headerTimeout,
      connectionsCheckingInterval: checkEvery(headerTimeout),
      // Between requests on a kept-alive connection (0: kept for good).
      keepAliveTimeout: idleTimeout,
      // Small answers (headers, 304s, 416s) at once, as the Rust server's set_nodelay.
      noDelay: true,
    },
    (req, res) => {
      // A client that takes none of the response (nor sends anything) for idleTimeout is closed;
      // one that reads resets it with every write. Node turns it off between requests (the
      // keep-alive timeout is on then), so it is set again for each request.
      req.socket.setTimeout(idleTimeout);
      const url = new URL(req.url, 'http://x');
      // The path as sent (as the Rust server reads it): a WHATWG URL would resolve `.`, `..` and
      // their percent-encoded forms before components() could refuse them.
      const raw = req.url.startsWith('/') ? req.url.replace(/[?#].*$/s, '') : url.pathname;
      const reply = (status, body, headers = {}) => {
        res.writeHead(status, { ...CORS, 'content-type': 'text/plain; charset=utf-8', 'content-length': String(Buffer.byteLength(body)), ...headers });
        res.end(req.method === 'HEAD' ? undefined : body);
      };
      try {
        if (req.method === 'OPTIONS') {
          res.writeHead(200, { ...CORS, ...PREFLIGHT, 'content-length': '0' });
          return res.end();
        }
        if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, 'this server is read-only: GET, HEAD and OPTIONS only\n', { allow: 'GET, HEAD, OPTIONS' });
        if (secret && !isPublic(raw)) {
          const same = (s) => s !== null && timingSafeEqual(sha256(s), secret);
          if (!same(bearer(req.headers.authorization)) && !same(queryToken(url.search))) {
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
          return sendFile(req, res, path, raw, CORS);
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
        return sendFile(req, res, path, raw, CORS);
      } catch (e) {
        if (res.headersSent) return res.destroy();
        if (e instanceof HttpError) return reply(e.status, `${e.message}\n`);
        return reply(500, `${raw}: ${hidePaths(e.message, mounts)}\n`);
      }
    },
  );
  bound(server, Math.max(1, maxConnections));
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const a = server.address();
  const shownHost = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return { server, url: `http://${shownHost}:${a.port}`, mounts };
}

const USAGE = `usage: tensorlane serve PATH... [--bind HOST:PORT] [--token TOKEN | --public]
  Serves the web inspector and the model files or folders PATH... (a folder with everything below
  it; a file with its companion files) with HTTP Range, ETag and CORS, read-only.
  --bind HOST:PORT        the address to listen on (default 127.0.0.1:8080; port 0 picks a free one).
                          Anything but loopback (127.0.0.0/8, ::1) exposes the files to the network,
                          and is refused unless --token or --public is given too.
  --token TOKEN           a bearer token every data request must carry (default: $TENSORLANE_TOKEN)
  --public                serve on a non-loopback --bind without a token: anyone who reaches the
                          address reads the files
  --max-connections N     the most connections served at once; one more is answered 503 with
                          Retry-After at once (default 512)
  --header-timeout TIME   how long a connection may take to send a request's head (from its accept,
                          or from the first byte of a later request): 10s, 500ms, 2m; 0 for no limit
                          (default 10s)
  --idle-timeout TIME     how long a kept-alive connection may be idle between requests, and a client
                          may take none of a response, before it is closed; 0 for no limit (default 30s)
  tensorlane --version    prints the version`;

/**
 * `host` and `port` as the Rust command shows a socket address: an IPv6 address in brackets,
 * compressed (RFC 5952, as WHATWG URLs write it), an IPv4-mapped one with its IPv4 part dotted.
 */
function shownBind(host, port) {
  if (isIP(host) !== 6) return `${host}:${port}`;
  let ip = new URL(`http://[${host}]/`).hostname.slice(1, -1);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(ip);
  if (mapped) {
    const [hi, lo] = [parseInt(mapped[1], 16), parseInt(mapped[2], 16)];
    ip = `::ffff:${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return `[${ip}]:${port}`;
}

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
  let isPublicBind = false;
  let maxConnections = DEFAULT_MAX_CONNECTIONS;
  let headerTimeout = DEFAULT_HEADER_TIMEOUT_MS;
  let idleTimeout = DEFAULT_IDLE_TIMEOUT_MS;
  const duration = (flag, v) => {
    try {
      return parseDuration(v);
    } catch (e) {
      throw new Error(`${flag} ${v}: ${e.message}`);
    }
  };
  const count = (flag, v) => {
    if (!/^[0-9]+$/.test(v.trim())) throw new Error(`${flag} ${v}: give a whole number of connections, as 512`);
    return Number(v.trim());
  };
  for (let i = 1; i < argv.length; i++) {
    let a = argv[i];
    let inline = null;
    const eq = a.indexOf('=');
    if (a.startsWith('--') && eq > 0) [a, inline] = [a.slice(0, eq), a.slice(eq + 1)];
    const value = () => {
      if (inline !== null) return inline;
      if (argv[i + 1] === undefined) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--bind') bind = value();
    else if (a === '--token') token = value();
    else if (a === '--public' && inline === null) isPublicBind = true;
    else if (a === '--max-connections') maxConnections = count(a, value());
    else if (a === '--header-timeout') headerTimeout = duration(a, value());
    else if (a === '--idle-timeout') idleTimeout = duration(a, value());
    else if (a === '--help' || a === '-h') return console.log(USAGE);
    else if (a.startsWith('-')) throw new Error(`unknown option ${argv[i]}`);
    else paths.push(a);
  }
  if (!paths.length) throw new Error('name the model files or folders to serve: tensorlane serve MODEL...');
  const m = /^(.*):(\d+)$/.exec(bind);
  if (!m) throw new Error(`--bind ${bind}: give HOST:PORT, e.g. 127.0.0.1:8080`);
  const host = m[1].replace(/^\[(.*)\]$/, '$1');
  // The address listen() takes: an IP as it is, a name as the first address it resolves to.
  let ip = host;
  if (!isIP(host)) {
    try {
      ip = (await lookup(host)).address;
    } catch (e) {
      throw new Error(`--bind ${bind}: cannot resolve ${host} (${e.code ?? e.message}); give an IP address, e.g. 127.0.0.1:8080`);
    }
  }
  const hasToken = !!token;
  const why = publicRefusal(shownBind(host, Number(m[2])), ip, hasToken, isPublicBind);
  if (why) throw new Error(why);
  const { server, url, mounts } = await serve({ paths, host, port: Number(m[2]), token: token || null, open: (p) => open(p), maxConnections, headerTimeout, idleTimeout });
  for (const mount of mounts) console.error(`serving ${mount.only ? mount.only[0] : mount.root} at ${url}/files/${encodeURIComponent(mount.name)}/`);
  console.error(`web inspector: this package's (${version}, ${PACKAGE})`);
  if (hasToken) console.error('a token is required: Authorization: Bearer TOKEN, or ?token=TOKEN');
  else if (!isLoopback(server.address().address)) console.error(`--public: serving to anyone who can reach ${shownBind(server.address().address, server.address().port)} without a token`);
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
