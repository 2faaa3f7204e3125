// open(url): a model or .zt file on an HTTP(S) server, read lazily with Range requests through
// `fetch` (Node >= 18 and browsers), the same way a Blob/File is read.
//
// `openRemote(url)` probes the object with one ranged GET of its first `probeBytes` (64 KiB, the
// first read every reader makes anyway): the 206's `Content-Range` gives the length and its
// `ETag` the version. Later reads are ranged GETs, split into parts of `partBytes` (8 MiB) with at
// most `concurrency` (8) in flight per file, retried with exponential backoff on 5xx/429 and
// network errors; every response is checked against the object's length and ETag (sent as
// `If-Match` when strong, and compared on the response), so an object replaced while it is read
// is an error, never mixed bytes. A `RemoteFile` has `size`, `name`, `slice(start, end)` (an
// object with `arrayBuffer()`) and `arrayBuffer()`, so the `.zt` reader reads it as it reads a Blob.

import { TensorlaneError } from './common.js';

/** Bytes of the first ranged GET (the probe): length, ETag and the header every reader reads first. */
export const PROBE_BYTES = 64 << 10;
/** Reads longer than this are split into parallel ranged GETs of this size. */
export const PART_BYTES = 8 << 20;
/** Ranged GETs in flight per file. */
export const CONCURRENCY = 8;
/** Retries of one request on 5xx/429 and network errors (backoff 100 ms, 200 ms, 400 ms, ...). */
export const RETRIES = 4;
/** A server that ignores Range (200 with the whole body) is accepted only for files this small. */
export const WHOLE_BODY_LIMIT = 16 << 20;

/** Whether `x` names an HTTP(S) resource: a URL object or a string starting with http:// or https://. */
export function isUrl(x) {
  return (typeof URL !== 'undefined' && x instanceof URL) || (typeof x === 'string' && /^https?:\/\//i.test(x));
}

function httpError(url, message, extra = {}) {
  const e = new TensorlaneError(`${url}: ${message}`);
  e.format = 'http';
  e.kind = extra.kind ?? 'http';
  e.url = String(url);
  if (extra.status !== undefined) e.status = extra.status;
  if (extra.offset !== undefined) e.offset = extra.offset;
  return e;
}

/** What an HTTP status means for someone opening a model, and what to do. */
function statusText(status) {
  if (status === 401 || status === 403) return `access denied (HTTP ${status}): the URL needs credentials or a signed URL`;
  if (status === 404 || status === 410) return `not found (HTTP ${status}): check the URL`;
  if (status === 412) return 'the file changed on the server while it was read (HTTP 412: its ETag no longer matches); open it again';
  if (status === 416) return 'the server refused the byte range (HTTP 416): the file is shorter than it said';
  if (status === 429) return 'too many requests (HTTP 429); try again later or lower {concurrency}';
  if (status >= 500) return `server error (HTTP ${status}); retried, still failing`;
  return `unexpected HTTP ${status}`;
}

const retryable = (status) => status >= 500 || status === 429;
const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(t), reject(signal.reason)), { once: true });
  });

/** Parses `Content-Range: bytes a-b/total` (`total` may be `*`). */
function contentRange(h) {
  const m = /^bytes\s+(?:(\d+)-(\d+)|\*)\/(\d+|\*)$/i.exec(h?.trim() ?? '');
  if (!m) return null;
  return { start: m[1] === undefined ? null : Number(m[1]), end: m[2] === undefined ? null : Number(m[2]), total: m[3] === '*' ? null : Number(m[3]) };
}

/** A counting semaphore: at most `n` holders. */
function limiter(n) {
  let active = 0;
  const queue = [];
  return async (f) => {
    if (active >= n) await new Promise((r) => queue.push(r));
    active++;
    try {
      return await f();
    } finally {
      active--;
      queue.shift()?.();
    }
  };
}

/**
 * A file on an HTTP(S) server, read with Range requests. Create it with `RemoteFile.open(url,
 * options)`. `requests` and `bytesFetched` count what went over the network.
 */
export class RemoteFile {
  #fetch;
  #limit;
  #head;
  constructor(url, options, probe) {
    /** The absolute URL. */
    this.url = url;
    /** The last path component (what the readers call the file). */
    this.name = decodeURIComponent(new URL(url).pathname.split('/').pop() || 'index');
    /** Bytes, from the probe's Content-Range. */
    this.size = probe.size;
    /** The ETag at open (null when the server sends none: then only the length is checked). */
    this.etag = probe.etag;
    this.options = options;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#limit = limiter(Math.max(1, options.concurrency ?? CONCURRENCY));
    this.#head = probe.head;
    this.requests = probe.requests;
    this.bytesFetched = probe.head.byteLength;
    this.retries = probe.retries;
  }

  /** The first bytes, fetched by the probe (a reader starts from them instead of asking again). */
  get head() {
    return this.#head;
  }

  /** Probes `url` (one ranged GET of its first bytes) and resolves to a RemoteFile. */
  static async open(url, options = {}) {
    const base = typeof location !== 'undefined' ? location.href : undefined;
    let abs;
    try {
      abs = new URL(String(url), base).href;
    } catch {
      throw httpError(url, 'not a valid URL', { kind: 'url' });
    }
    const state = { requests: 0, retries: 0 };
    const probeBytes = options.probeBytes ?? PROBE_BYTES;
    const res = await request(options.fetch ?? globalThis.fetch.bind(globalThis), abs, { Range: `bytes=0-${probeBytes - 1}` }, options, state, 'opening');
    let size, head;
    const etag = res.headers.get('etag');
    if (res.status === 206) {
      const cr = contentRange(res.headers.get('content-range'));
      if (!cr || cr.total === null || cr.start !== 0) {
        await res.body?.cancel?.();
        throw httpError(abs, `the 206 response has no usable Content-Range (${JSON.stringify(res.headers.get('content-range'))}); a cross-origin server must send Access-Control-Expose-Headers: Content-Range, ETag`, { kind: 'range', status: 206 });
      }
      size = cr.total;
      head = new Uint8Array(await res.arrayBuffer());
      if (head.byteLength !== Math.min(probeBytes, size)) throw httpError(abs, `the server sent ${head.byteLength} bytes for the first ${Math.min(probeBytes, size)}`, { kind: 'range', status: 206 });
    } else if (res.status === 416) {
      const cr = contentRange(res.headers.get('content-range'));
      await res.body?.cancel?.();
      if (cr?.total !== 0) throw httpError(abs, statusText(416), { kind: 'range', status: 416 });
      size = 0;
      head = new Uint8Array(0);
    } else if (res.status === 200) {
      // The server ignores Range: acceptable for a small file (read whole once), never for a model.
      const len = Number(res.headers.get('content-length') ?? NaN);
      if (!(len <= WHOLE_BODY_LIMIT)) {
        await res.body?.cancel?.();
        throw httpError(abs, `the server does not support Range requests (it answered a ranged GET with HTTP 200 and ${Number.isFinite(len) ? `${len} bytes` : 'a body of unknown length'}); models are read in ranges, serve the file with Range support (e.g. tensorlane serve, nginx, any object store)`, { kind: 'range', status: 200 });
      }
      head = new Uint8Array(await res.arrayBuffer());
      size = head.byteLength;
    } else {
      await res.body?.cancel?.();
      throw httpError(abs, statusText(res.status), { status: res.status });
    }
    return new RemoteFile(abs, options, { size, etag, head, ...state });
  }

  /** Bytes [offset, offset + len) (checked against the object's length and ETag). */
  async read(offset, len, signal) {
    if (!(Number.isSafeInteger(offset) && Number.isSafeInteger(len) && offset >= 0 && len >= 0 && offset + len <= this.size)) {
      throw httpError(this.url, `read [${offset}, +${len}) is outside the file's ${this.size} bytes`, { kind: 'range', offset });
    }
    const head = this.#head;
    if (offset + len <= head.byteLength) return head.slice(offset, offset + len);
    const out = new Uint8Array(len);
    // What the probe already holds is not fetched again.
    let from = 0;
    if (offset < head.byteLength) {
      from = head.byteLength - offset;
      out.set(head.subarray(offset));
    }
    const part = Math.max(1, this.options.partBytes ?? PART_BYTES);
    const jobs = [];
    for (let at = from; at < len; at += part) {
      const n = Math.min(part, len - at);
      jobs.push(this.#limit(() => this.#part(offset + at, n, signal)).then((b) => out.set(b, at)));
    }
    await Promise.all(jobs);
    return out;
  }

  async #part(offset, len, signal) {
    const headers = { Range: `bytes=${offset}-${offset + len - 1}` };
    // If-Match needs a strong ETag (a weak one never matches); the response's ETag is compared too.
    if (this.etag && !this.etag.startsWith('W/') && this.options.ifMatch !== false) headers['If-Match'] = this.etag;
    const state = { requests: 0, retries: 0 };
    try {
      for (let attempt = 0; ; attempt++) {
        const res = await request(this.#fetch, this.url, headers, { ...this.options, signal: signal ?? this.options.signal }, state, `reading bytes [${offset}, +${len})`);
        if (res.status !== 206) {
          await res.body?.cancel?.();
          if (res.status === 200) throw httpError(this.url, `the server ignored the Range of bytes [${offset}, +${len}) (HTTP 200)`, { kind: 'range', status: 200, offset });
          throw httpError(this.url, `${statusText(res.status)} (bytes [${offset}, +${len}))`, { status: res.status, offset, kind: res.status === 412 ? 'changed' : 'http' });
        }
        const etag = res.headers.get('etag');
        const cr = contentRange(res.headers.get('content-range'));
        if ((this.etag && etag && etag !== this.etag) || (cr && cr.total !== null && cr.total !== this.size)) {
          await res.body?.cancel?.();
          throw httpError(this.url, `the file changed on the server while it was read (ETag ${this.etag} at open, ${etag} now; length ${this.size} at open, ${cr?.total} now); open it again`, { kind: 'changed', offset });
        }
        if (cr && (cr.start !== offset || cr.end !== offset + len - 1)) {
          await res.body?.cancel?.();
          throw httpError(this.url, `asked for bytes ${offset}-${offset + len - 1}, the server sent ${cr.start}-${cr.end}`, { kind: 'range', offset });
        }
        let body;
        try {
          body = new Uint8Array(await res.arrayBuffer());
        } catch (e) {
          // Aborted by the caller: the abort, not a network error. A connection dropped mid-body:
          // retried like a failed request.
          if (e?.name === 'AbortError' || signal?.aborted) throw e;
          if (attempt >= (this.options.retries ?? RETRIES)) throw httpError(this.url, `the connection failed while reading bytes [${offset}, +${len}): ${e?.message ?? e}`, { kind: 'network', offset });
          state.retries++;
          await sleep(100 * 2 ** attempt, signal);
          continue;
        }
        if (body.byteLength !== len) {
          if (attempt >= (this.options.retries ?? RETRIES)) throw httpError(this.url, `the server sent ${body.byteLength} bytes for the ${len} of [${offset}, +${len})`, { kind: 'range', offset });
          state.retries++;
          await sleep(100 * 2 ** attempt, signal);
          continue;
        }
        this.bytesFetched += len;
        return body;
      }
    } finally {
      this.requests += state.requests;
      this.retries += state.retries;
    }
  }

  /** A Blob-like view of [start, end) for the `.zt` reader: `{ size, arrayBuffer() }`. */
  slice(start = 0, end = this.size) {
    const s = Math.max(0, Math.min(this.size, start));
    const e = Math.max(s, Math.min(this.size, end));
    return { size: e - s, arrayBuffer: async () => (await this.read(s, e - s)).buffer };
  }

  /** The whole file (what `.zt` verify() reads). */
  async arrayBuffer() {
    return (await this.read(0, this.size)).buffer;
  }

  /** A RemoteFile for `name` relative to this one (a shard, split or external data file), same options. */
  sibling(name) {
    return RemoteFile.open(new URL(name.split('/').map(encodeURIComponent).join('/'), this.url).href, this.options);
  }
}

/**
 * One GET with `headers`, retried on network errors and 5xx/429 with exponential backoff (the
 * last retryable answer is returned to the caller to explain). Network errors are explained
 * (CORS in a browser).
 */
async function request(fetchFn, url, headers, options, state, what) {
  const retries = options.retries ?? RETRIES;
  for (let attempt = 0; ; attempt++) {
    let res;
    state.requests++;
    try {
      res = await fetchFn(url, { headers, signal: options.signal, cache: 'no-store', credentials: options.credentials ?? 'same-origin' });
    } catch (e) {
      if (e?.name === 'AbortError' || options.signal?.aborted) throw e;
      if (attempt < retries) {
        state.retries++;
        await sleep(100 * 2 ** attempt, options.signal);
        continue;
      }
      const cors = typeof window !== 'undefined' || typeof WorkerGlobalScope !== 'undefined';
      throw httpError(url, `the request failed while ${what} (${e?.cause?.code ?? e?.message ?? e}; ${attempt + 1} tries)${cors ? ': the server is unreachable, or it is on another origin and does not allow this page by CORS (it must send Access-Control-Allow-Origin, allow the Range and If-Match headers, and expose Content-Range and ETag)' : ': the server is unreachable'}`, { kind: 'network' });
    }
    if (retryable(res.status) && attempt < retries) {
      await res.body?.cancel?.();
      state.retries++;
      const after = Number(res.headers.get('retry-after'));
      await sleep(Number.isFinite(after) && after > 0 ? Math.min(after * 1000, 5000) : 100 * 2 ** attempt, options.signal);
      continue;
    }
    return res;
  }
}
