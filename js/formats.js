// open() for every model format, on both JavaScript backends: safetensors (+ shard index), GGUF,
// PyTorch, NumPy .npy/.npz, ONNX (+ external data), HDF5, .zt v2 (+ shards) and legacy .zt, and
// Tenso packet files: one catalog (the core's `formats::Catalog`) and one reader for all of them.
//
// The parsers are the core's (`tensorlane_core::formats`), run by the backend over a *sparse*
// copy of the file: a `FormatSession` (wasm/src/formats_common.rs, shared by the addon and the
// wasm build) holds only the byte ranges fetched so far. When a parser needs bytes it does not
// have, the session says which (`{need: {source, offset, len}}`); this module reads them from the
// source (a Buffer, a Blob, a file) and runs the step again, at most `maxRounds` times. Sequential
// reads grow geometrically (64 KiB, then as much as is already held there, up to 16 MiB a read),
// so a header of any size takes a handful of rounds; a jump elsewhere starts with 4 KiB. A 50 GB
// file lists by reading only its header-like bytes.
//
// Sources: bytes (Uint8Array/ArrayBuffer/view: everything is synchronous, tensors are views on
// them), a Blob/File (open and tensor() return Promises; each read is one blob.slice), and in Node
// a path (the addon maps the file; the wasm build reads it with a file descriptor on demand).
// Companions (safetensors shards, ONNX external data, .zt shards) come from `{companions: {name:
// source}}`, or, for a path, from the same folder, or, for a URL, from the URLs next to it. A .zt
// shard is asked for by its shard name with the file names it may have (`candidates`:
// `<stem>-<name>.zt`, `<name>`, `<name>.zt`); one that is found nowhere leaves the file readable and
// its tensors fail with kind 'companion' when read, as `tensorlane::model::Model` does.

import { DTYPES, TensorlaneError, asBytes, inferDtype, isBlob, then, widen } from './common.js';
import { RemoteFile, isUrl } from './http.js';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** First read of a file, and the smallest read after it. */
export const MIN_READ = 64 << 10;
/**
 * The smallest read where a parser jumps to bytes away from everything held (a zip directory, an
 * HDF5 object header): such structures are small and often scattered, so start small and grow.
 */
export const MIN_JUMP_READ = 4 << 10;
/**
 * A need this close past held bytes continues them (the gap is read too): structures packed
 * between small tensors (ONNX fields, npz members) are then read in a few growing reads instead
 * of one round each. Larger gaps (tensor data) are jumped over.
 */
export const GAP_FILL = 64 << 10;
/** The largest single read a sequential scan grows to. */
export const MAX_READ = 16 << 20;
/**
 * Default bound on fetch-and-retry rounds per open() or tensor(). Every round reads bytes not yet
 * held, so the bound only matters for files whose structures are scattered between large tensors
 * (an HDF5 file with a thousand datasets interleaved with their data takes about a round per
 * dataset, and each round parses the header again: listing such a file costs rounds^2/2 parses).
 */
export const MAX_ROUNDS = 4096;

/** Slices stats() requests ahead of the one it sums (lazy sources read while the core works). */
export const STATS_READ_AHEAD = 4;

/** Throws the signal's reason (an AbortError) when `signal` is aborted. */
function aborted(signal) {
  if (!signal?.aborted) return;
  if (signal.reason !== undefined) throw signal.reason;
  const e = new Error('stats: aborted');
  e.name = 'AbortError';
  throw e;
}

/**
 * Default `maxTensorBytes`: the most bytes tensor() and dequantize() allocate for one tensor read
 * whole (4 GiB, the core's `formats::DEFAULT_MAX_TENSOR_BYTES`). A tensor whose whole read needs
 * more (a compression bomb's declared size included) is refused with a TensorlaneError of kind
 * 'limit' before it is allocated (a Blob slice read, a member inflated, a view gathered); stats(), readBytes() and
 * reader() read in slices and are not limited. Views on bytes already in memory (or a mapped path)
 * allocate nothing and are not limited either.
 */
export const MAX_TENSOR_BYTES = 4 * 2 ** 30;

/** The `maxTensorBytes` of `options`, else `fallback`; a RangeError when it is not a non-negative safe integer. */
function tensorLimit(options, fallback = MAX_TENSOR_BYTES) {
  const n = options?.maxTensorBytes;
  if (n === undefined) return fallback;
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`maxTensorBytes must be a non-negative safe integer (bytes), not ${String(n)}`);
  return n;
}

/** Histogram bins of stats() unless {bins} says otherwise. */
export const STATS_BINS = 64;
/** The slice stats() reads at a time (whole elements or blocks of it). */
export const STATS_CHUNK_BYTES = 4 << 20;
/**
 * The most bytes of one tensor (or span) read over HTTP that stats() keeps in memory between its
 * two passes, so each byte is fetched once (a larger one is fetched twice, never held whole).
 */
export const STATS_KEEP_BYTES = 512 << 20;

/** TypedArrays of ggml's plain (not block-quantized) types. */
const GGML_PLAIN = { F32: 'float32', F16: 'float16', BF16: 'bfloat16', F64: 'float64', I8: 'int8', I16: 'int16', I32: 'int32', I64: 'int64' };

/** What open() accepts, for the TypeError it throws on anything else. */
const OPEN_EXPECTS = 'open expects a path (Node), an http(s) URL, a Uint8Array/Buffer, an ArrayBuffer, or a Blob/File';

/** The `.zt` rule names of a kind that is no rejection of the file. */
const ZT_RULE_OF_KIND = { unsupported: 'Unsupported', 'not-found': 'NotFound' };

/**
 * A TensorlaneError with the fields of a core FormatError ({format, kind, offset, tensor, message,
 * display}). A `.zt` error also has the spec's `rule` (the name its message starts with, also
 * after `read as .zt: `), the `object` (the tensor) and the `part` its message names.
 */
function formatError(e) {
  const err = new TensorlaneError(e.display ?? e.message);
  err.format = e.format;
  err.kind = e.kind;
  err.offset = e.offset ?? undefined;
  err.tensor = e.tensor ?? undefined;
  const rule = /(?:^|; read as \.zt: )([A-Z][A-Za-z0-9]+): /.exec(e.message ?? '');
  if (rule) err.rule = rule[1];
  if (e.format?.startsWith('zt')) {
    err.rule ??= ZT_RULE_OF_KIND[e.kind];
    err.object = err.tensor;
    const part = /\(part "((?:[^"\\]|\\.)*)"\)/.exec(e.message ?? '');
    if (part) err.part = part[1];
  }
  return err;
}

/** The core FormatError a backend threw as JSON in its message ({format, kind, ...}), or null. */
function parsedError(e) {
  try {
    const p = JSON.parse(e?.message);
    return p && typeof p === 'object' && typeof p.kind === 'string' ? p : null;
  } catch {
    return null;
  }
}

function jsError(format, kind, message, extra = {}) {
  return formatError({ format, kind, message, display: `${format}: ${message} [${kind}]`, ...extra });
}

/** Revives the tagged values of the catalog JSON ({$bigint}, {$float}, {$bytes}). */
function revive(_k, v) {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    const keys = Object.keys(v);
    if (keys.length === 1) {
      if (keys[0] === '$bigint') return BigInt(v.$bigint);
      if (keys[0] === '$float') return v.$float === 'nan' ? NaN : v.$float === 'inf' ? Infinity : -Infinity;
      if (keys[0] === '$bytes') return Uint8Array.from(v.$bytes.match(/../g) ?? [], (h) => parseInt(h, 16));
    }
  }
  return v;
}

/**
 * Parses a catalog from the core. The reviver (slow: V8 calls it for every value, seconds for
 * 100k tensors) runs only when the text holds a tagged value: the core writes them as
 * `{"$bigint":`, `{"$float":`, `{"$bytes":` (compact JSON), so text without `{"$` has none.
 */
function parseCatalog(json) {
  return json.includes('{"$') ? JSON.parse(json, revive) : JSON.parse(json);
}

// ---------------------------------------------------------------------------------------------
// Sources: {name, size, memory?: Uint8Array, read(offset, len) -> Uint8Array | Promise, path?}

/** A source over bytes in memory (`path`: the file they were mapped from, for companions). */
export function memorySource(bytes, name, path) {
  // A plain Uint8Array over the same memory (a Node Buffer's slice() would not copy).
  if (bytes.constructor !== Uint8Array) bytes = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { name, path, size: bytes.byteLength, memory: bytes, lazy: false, read: (o, l) => bytes.subarray(o, o + l) };
}

function blobSource(blob) {
  return {
    name: blob.name,
    size: blob.size,
    lazy: true,
    read: async (o, l) => new Uint8Array(await blob.slice(o, o + l).arrayBuffer()),
  };
}

/**
 * A source over a file on an HTTP(S) server (js/http.js: ranged GETs, bounded parallel, retried,
 * ETag-checked); an aborted `signal` aborts the read's requests in flight.
 */
function remoteSource(remote) {
  return { name: remote.name, size: remote.size, lazy: true, remote, read: (o, l, signal) => remote.read(o, l, signal) };
}

/** Whether `input` is opened over HTTP: a URL, or (where there are no paths: browsers) any string, resolved against the page. */
function isRemote(input, io) {
  return isUrl(input) || (typeof input === 'string' && !io.pathSource);
}

/** `input` as a source; `io.pathSource(path, options)` (Node) opens a path (read, or mapped with `{mmap: true}`). */
function toSource(input, io, name, options) {
  if (input instanceof RemoteFile) return remoteSource(input);
  if (typeof input === 'string') {
    if (!io.pathSource) throw new TypeError('open(path) needs Node; pass a Uint8Array or a Blob');
    return io.pathSource(input, options);
  }
  if (isBlob(input)) return blobSource(input);
  return memorySource(asBytes(input, OPEN_EXPECTS), name);
}

// ---------------------------------------------------------------------------------------------
// The driver: a generator yields thunks that read bytes; run() feeds their results back,
// synchronously while the reads are synchronous, through Promises once one is not.

/** `{ok, value}` or `{ok: false, error}` of `f()`, or a Promise of it when `f` returns one. */
function settle(f) {
  try {
    const v = f();
    if (v instanceof Promise) return v.then((value) => ({ ok: true, value }), (error) => ({ ok: false, error }));
    return { ok: true, value: v };
  } catch (error) {
    return { ok: false, error };
  }
}

function run(gen, input) {
  for (;;) {
    const r = gen.next(input);
    if (r.done) return r.value;
    const v = r.value();
    if (v instanceof Promise) return v.then((x) => run(gen, x));
    input = v;
  }
}

/** Sorted, disjoint [start, end) ranges a session holds for one source. */
function hold(ranges, start, end) {
  ranges.push([start, end]);
  ranges.sort((a, b) => a[0] - b[0]);
  const out = [];
  for (const r of ranges) {
    const last = out[out.length - 1];
    if (last && r[0] <= last[1]) last[1] = Math.max(last[1], r[1]);
    else out.push([...r]);
  }
  ranges.splice(0, ranges.length, ...out);
}

/**
 * The range to read for a need. A need at most GAP_FILL bytes past a held range continues it:
 * the read starts where that range ends (filling the gap) and is at least MIN_READ and as long
 * as the range (so a sequential scan doubles what it holds each round, up to MAX_READ a read).
 * A need anywhere else is a jump: a MIN_JUMP_READ window at the need.
 */
function plan(ranges, size, offset, len) {
  let start = offset;
  let run = 0;
  const before = ranges.filter(([s]) => s <= offset).pop();
  if (before && offset <= before[1] + GAP_FILL) {
    start = before[1];
    run = before[1] - before[0];
  }
  const need = offset + len - start;
  // A short run (the 8-byte peek at the magic) grows to MIN_READ in all, so reads stay on 64 KiB
  // boundaries (a .zt's first part starts on one: listing reads none of its bytes).
  const want = Math.max(need, run ? Math.max(MIN_READ - run, Math.min(MAX_READ, run)) : MIN_JUMP_READ);
  return [start, Math.min(size, start + want)];
}

/**
 * The model-format API of a backend. `io` (Node only): `pathSource(path) -> source`,
 * `companionPath(root, name) -> path | null`; with the addon also `openModel(path)` (a native
 * ModelFile: paths are opened by the host, see openNative) and `mapPath(path, options) ->
 * Uint8Array` (the file read, or with `{mmap: true}` a copy-on-write mapping).
 */
export function makeFormats(backend, io = {}) {
  class Context {
    constructor(main, options) {
      this.main = main;
      this.options = options;
      this.session = new backend.FormatSession(main.size, main.name ?? '', options.format ?? '');
      this.sources = new Map([['', main]]);
      this.held = new Map([['', []]]);
      this.bytesRead = 0;
      this.reads = 0;
      this.maxRounds = options.maxRounds ?? MAX_ROUNDS;
      this.maxTensorBytes = tensorLimit(options);
    }

    /**
     * Registers companion `name` with the session: found by `find` under its own name, or, for a
     * `.zt` shard (`candidates`: the file names it may have), under each of those in turn. A
     * shard found nowhere is registered as missing (its tensors fail when read), not an error.
     */
    *companion(name, candidates = []) {
      let src;
      if (candidates.length === 0) src = yield* this.find(name);
      else {
        const why = [];
        for (const file of candidates) {
          const r = yield () => settle(() => run(this.find(file)));
          if (r.ok) {
            src = r.value;
            break;
          }
          // Why a candidate was not there, where it says more than "not given".
          if (!/pass it as \{companions/.test(r.error.message)) why.push(r.error.message.replace(/^.*?needs its companion file /, '').replace(/ \[companion\]$/, ''));
        }
        if (!src) {
          const where = this.main.path ? `next to ${this.main.path}` : this.main.remote ? `next to ${this.main.remote.url}` : 'among {companions}';
          const message = `shard ${JSON.stringify(name)} of ${this.main.name || 'the file'} was not found ${where} (looked for ${candidates.join(', ')}${why.length ? `: ${why.join('; ')}` : ''}); its tensors cannot be read: pass the shard file as {companions: {${JSON.stringify(candidates[0])}: Blob | bytes | URL}}`;
          const err = jsError(this.format ?? 'zt', 'companion', message);
          const lazy = this.main.lazy;
          const read = () => {
            if (lazy) return Promise.reject(err);
            throw err;
          };
          this.sources.set(name, { name, size: 0, lazy, missing: message, read });
          this.held.set(name, []);
          this.session.addMissing(name, message);
          return this.sources.get(name);
        }
      }
      this.sources.set(name, src);
      this.held.set(name, []);
      this.session.addSource(name, src.size);
      return src;
    }

    /**
     * The source of companion file `name`: `options.companions` (a URL there is fetched), else
     * next to a path, else (a file opened by URL) the URL of `name` relative to it.
     */
    *find(name) {
      const given = this.options.companions;
      const base = name.split('/').pop();
      const input = given?.[name] ?? given?.[base];
      let why = 'pass it as {companions: {name: Blob | bytes | URL}}';
      const fail = (reason) => jsError(this.format ?? 'formats', 'companion', `the model needs its companion file '${name}': ${reason}`);
      if (input !== undefined && isRemote(input, io)) {
        const r = yield () => settle(() => RemoteFile.open(input, this.options));
        if (!r.ok) throw fail(r.error.message);
        return remoteSource(r.value);
      }
      if (input !== undefined) return toSource(input, io, base, this.options);
      if (this.main.remote) {
        const r = yield () => settle(() => this.main.remote.sibling(name));
        if (!r.ok) throw fail(r.error.message);
        return remoteSource(r.value);
      }
      if (this.main.path && io.companionPath) {
        const p = io.companionPath(this.main.path, name);
        try {
          return io.pathSource(p, this.options);
        } catch (e) {
          why = `cannot open ${p}: ${e.code ?? e.message}`;
        }
      }
      throw fail(why);
    }

    /** Yields the read of [start, end) of `name` and adds it to the session. */
    *fetch(name, start, end, transient, held) {
      if (end <= start) return;
      const src = this.sources.get(name);
      const bytes = yield () => src.read(start, end - start);
      this.bytesRead += bytes.byteLength;
      this.reads++;
      this.session.addPiece(name, start, bytes, transient);
      hold(held.get(name), start, end);
      this.options.onProgress?.({ phase: this.phase, bytesRead: this.bytesRead, reads: this.reads });
    }

    /** Runs `step()` until it gives a result, fetching what it needs (bounded). */
    *drive(step, transient, held = this.held) {
      for (let round = 0; round < this.maxRounds; round++) {
        const out = step();
        if (out !== null && out !== undefined) return out;
        const st = JSON.parse(this.session.status());
        if (st.error) throw formatError(st.error);
        if (st.delegate) return { delegate: st.delegate };
        const { source, offset, len, register, candidates } = st.need;
        if (register) {
          if (!this.sources.has(source)) yield* this.companion(source, candidates);
          continue;
        }
        if (!held.has(source)) held.set(source, []);
        const [s, e] = plan(held.get(source), this.sources.get(source).size, offset, len);
        // Every round reads bytes not held before: the loop cannot spin in place.
        if (e <= s) throw jsError(this.format ?? 'formats', 'io', `the reader asked again for bytes [${offset}, +${len}) of '${source || 'the file'}', which it holds`);
        yield* this.fetch(source, s, e, transient, held);
      }
      throw jsError(this.format ?? 'formats', 'limit', `gave up after ${this.maxRounds} fetch-and-parse rounds; raise {maxRounds} for a file this scattered`);
    }
  }

  function* openSteps(main, options) {
    const ctx = new Context(main, options);
    ctx.phase = 'open';
    // The first bytes (a URL's probe already holds its first 64 KiB: the parsers start from all of it).
    const peek = Math.min(main.remote ? Math.max(8, main.remote.head.byteLength) : 8, main.size);
    if (peek > 0) yield* ctx.fetch('', 0, peek, false, ctx.held);
    const json = yield* ctx.drive(() => ctx.session.open(), false);
    const cat = parseCatalog(json);
    ctx.format = cat.format;
    return new ModelReader(ctx, cat);
  }

  /**
   * Opens a model file of any supported format (detected by content; `{format}` forces one).
   * Bytes and (Node) paths give a reader at once; a Blob gives a Promise of a lazy reader.
   */
  function open(source, options = {}) {
    if (isRemote(source, io)) {
      // A URL: probed (one ranged GET of its first 64 KiB), then read like a Blob.
      return RemoteFile.open(source, options).then((remote) => run(openSteps(remoteSource(remote), options)));
    }
    if (typeof source === 'string' && io.openModel && options.format === undefined && options.companions === undefined) {
      const reader = openNative(source, options);
      if (reader) return reader;
    }
    const main = toSource(source, io, options.name, options);
    return run(openSteps(main, options));
  }

  /**
   * A path opened by the native host (`io.openModel`: the addon's ModelFile over
   * `tensorlane::model::Model`, which finds `.zt` shards next to the file), or null when no
   * format matches the content: the byte-range path then words the error as for bytes.
   */
  function openNative(path, options) {
    const maxTensorBytes = tensorLimit(options);
    let model;
    try {
      model = io.openModel(path);
    } catch (e) {
      const fe = parsedError(e);
      if (!fe) throw e;
      if (fe.kind === 'unsupported') return null;
      throw formatError(fe);
    }
    const cat = parseCatalog(model.catalog());
    return new ModelReader(new NativeContext(model, cat.sources, maxTensorBytes, options), cat);
  }

  /**
   * What a ModelReader reads through for a path the native host opened. The host reads the
   * file with pread, so a file truncated underneath is an error. With `{mmap: true}` zero-copy
   * tensors are views on a private copy-on-write mapping of their file (`io.mapPath`, made on the
   * first such read), which the caller promises stays as it is: a mapping handed to JavaScript has
   * no guard against truncation (SIGBUS). Without it every tensor is read by the host (a copy).
   */
  class NativeContext {
    constructor(model, sources, maxTensorBytes, options = {}) {
      this.model = model;
      this.maxTensorBytes = maxTensorBytes;
      this.options = options;
      this.mmap = options.mmap === true;
      /** Catalog source names and, at the same index, the files the host resolved them to. */
      this.names = sources;
      this.paths = model.sourcePaths();
      this.maps = new Map();
      this.sources = new Map();
      this.bytesRead = 0;
      this.reads = 0;
    }

    bytes(i, L, limit = this.maxTensorBytes) {
      if (L.zeroCopy && this.mmap) {
        const k = this.names.indexOf(L.source);
        let m = this.maps.get(k);
        if (!m) {
          m = io.mapPath(this.paths[k], this.options);
          if (m.constructor !== Uint8Array) m = new Uint8Array(m.buffer, m.byteOffset, m.byteLength);
          this.maps.set(k, m);
        }
        return m.subarray(L.offset, L.offset + L.length);
      }
      return this.#call(() => this.model.read(i, limit));
    }

    #call(f) {
      try {
        const out = f();
        return out instanceof Uint8Array && out.constructor !== Uint8Array ? new Uint8Array(out.buffer, out.byteOffset, out.byteLength) : out;
      } catch (e) {
        const fe = parsedError(e);
        throw fe ? formatError(fe) : e;
      }
    }

    /** Statistics by the host (`Model::stats`, over its map), with the same checks and result as statsSteps. */
    stats(i, t, options) {
      const bins = statsBins(options);
      const total = t.nbytes;
      const report = statsProgress(options.onProgress, total);
      const out = this.#call(() => this.model.stats(i, bins, options.chunkBytes ?? STATS_CHUNK_BYTES, options.onProgress ? (done) => report(done) : undefined));
      const r = JSON.parse(out);
      return statsResult(t, r.summary, r.histogram);
    }

    /** Part `part` of tensor `i` by the host (`Model::read_part`). */
    part(i, part, limit) {
      return this.#call(() => this.model.readPart(i, part, limit));
    }

    /** The file verified by the host (see ModelReader.verify). */
    verify() {
      return JSON.parse(this.#call(() => this.model.verify()));
    }

    /** The ONNX graph, by the addon over the model file (read, or mapped with `{mmap: true}`). */
    graph() {
      const m = io.mapPath(this.paths[0], this.options);
      return JSON.parse(this.#call(() => backend.onnxGraph(m)));
    }

    close() {
      this.model.close();
      this.maps.clear();
    }
  }

  class ModelReader {
    #ctx;
    #index;
    #turn = Promise.resolve();
    constructor(ctx, cat) {
      this.#ctx = ctx;
      /** The format: safetensors, safetensors-index, gguf, pt, pt-legacy, npy, npz, onnx, hdf5, zt, zt-v1, zt-v0, tenso. */
      this.format = cat.format;
      /** True when tensor() and dequantize() return Promises (Blob sources). */
      this.lazy = [...ctx.sources.values()].some((s) => s.lazy);
      /** Every tensor, in file order. */
      this.tensors = cat.tensors.map(entry);
      /** File-level metadata (safetensors __metadata__, GGUF key/values, .zt file attributes, ...). */
      this.metadata = cat.metadata;
      /** Entries that are not tensors: [{name, reason}]. */
      this.skipped = cat.skipped;
      /** Files read: '' is the opened file, the others are companions relative to it. */
      this.sources = cat.sources;
      this.#index = new Map(this.tensors.map((t, i) => [t.name, i]));
    }

    /** Bytes read from the sources so far (open included: what was handed to the parsers, and tensors read from Blobs or files), and in how many reads. */
    get bytesRead() {
      return this.#ctx.bytesRead;
    }
    get reads() {
      return this.#ctx.reads;
    }

    /** Tensor names in file order. */
    keys() {
      return this.tensors.map((t) => t.name);
    }

    /**
     * The listing entry of tensor `name` (throws a TensorlaneError with kind 'not-found', or
     * 'unsupported' with the reason for an entry the reader skipped).
     */
    info(name) {
      const i = this.#index.get(name);
      if (i === undefined) {
        const skip = this.skipped.find((s) => s.name === name);
        if (skip) throw jsError(this.format, 'unsupported', `${JSON.stringify(name)} is not readable here: ${skip.reason}`, { tensor: name });
        throw jsError(this.format, 'not-found', `no tensor named ${JSON.stringify(name)}`, { tensor: name });
      }
      return this.tensors[i];
    }

    /**
     * The tensor's C-order little-endian bytes: a view on the source when they are stored that
     * way. A read that allocates (a Blob or URL slice, an inflated or gathered tensor) is refused
     * over `options.maxTensorBytes` (else open()'s, else MAX_TENSOR_BYTES) before it starts.
     */
    #bytes(name, options) {
      const t = this.info(name);
      const i = this.#index.get(name);
      const ctx = this.#ctx;
      const L = t.layout;
      const limit = tensorLimit(options, ctx.maxTensorBytes);
      if (ctx instanceof NativeContext) return ctx.bytes(i, L, limit);
      if (L.zeroCopy) {
        const src = ctx.sources.get(L.source);
        if (src.missing) return src.read();
        if (!src.memory && L.length > limit) {
          const err = jsError(
            this.format,
            'limit',
            `tensor '${name}': reading it whole needs ${L.length} bytes, over the ${limit} bytes allowed by the maxTensorBytes option; raise the limit if the machine has the memory, or read it in slices with stats(), readBytes() or reader()`,
            { tensor: name },
          );
          if (this.lazy) return Promise.reject(err);
          throw err;
        }
        return run(
          (function* () {
            const b = yield () => src.read(L.offset, L.length);
            if (!src.memory) {
              ctx.bytesRead += b.byteLength;
              ctx.reads++;
            }
            return b;
          })(),
        );
      }
      const read = () => {
        ctx.phase = 'tensor';
        // What this read fetches is dropped when it ends; it starts from what open() holds.
        const held = new Map([...ctx.held].map(([k, v]) => [k, v.map((r) => [...r])]));
        return run(
          (function* () {
            if (L.storage === 'range' || L.storage === 'deflate' || L.storage === 'encoded') yield* ctx.fetch(L.source, L.offset, L.offset + L.length, true, held);
            const out = yield* ctx.drive(() => ctx.session.read(i, limit), true, held);
            return out instanceof Uint8Array ? out : new Uint8Array(out);
          })(),
        );
      };
      if (!this.lazy) return read();
      // Reads through the session take turns (they share its transient pieces).
      const turn = this.#turn.then(read);
      this.#turn = turn.catch(() => {});
      return turn;
    }

    /**
     * Tensor `name` as a TypedArray (see `index.d.ts`): a view on the caller's bytes (or the
     * mapped file) when the stored bytes are the tensor and aligned, else a copy. float16 and
     * bfloat16 are raw Uint16Array bits unless `{widen: true}`; float8/float4 and GGUF blocks
     * are raw Uint8Array bytes.
     */
    tensor(name, options = {}) {
      const t = this.info(name);
      return then(this.#bytes(name, options), (bytes) => {
        const dtype = t.ggml && !t.ggml.quantized ? GGML_PLAIN[t.dtype] ?? t.dtype : t.dtype;
        if (options.widen && (dtype === 'float16' || dtype === 'bfloat16')) return widen(dtype, typedOf('float16', bytes));
        return typedOf(dtype, bytes);
      });
    }

    /**
     * Part `part` of tensor `name`, a tensor stored as several parts (`layout.storage` 'parts': a
     * `.zt` sparse, group-quantized or MX object): a TypedArray of the part's dtype (raw
     * Uint8Array bytes for a type without one), decoded and checked against the part's digest,
     * under `maxTensorBytes`. A Promise for a Blob or URL source.
     */
    part(name, part, options = {}) {
      const t = this.info(name);
      const i = this.#index.get(name);
      const L = t.layout;
      const p = L.storage === 'parts' ? L.parts.find((x) => x.name === part) : undefined;
      if (!p) {
        const why = L.storage === 'parts' ? `its layout ${L.layoutId} has no part '${part}' (its parts: ${L.parts.map((x) => x.name).join(', ')})` : 'it is one array of elements, with no parts; read it with tensor()';
        const err = jsError(this.format, 'unsupported', `tensor '${name}': ${why}`, { tensor: name });
        if (this.lazy) return Promise.reject(err);
        throw err;
      }
      const ctx = this.#ctx;
      const limit = tensorLimit(options, ctx.maxTensorBytes);
      const typed = (bytes) => typedOf(p.dtype, bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
      if (ctx instanceof NativeContext) return typed(ctx.part(i, part, limit));
      return this.#sessionStep(function* (held) {
        const S = p.storage;
        if (S.source !== undefined && ctx.sources.get(S.source)?.missing === undefined) yield* ctx.fetch(S.source, S.offset, S.offset + S.length, true, held);
        return typed(yield* ctx.drive(() => ctx.session.readPart(i, part, limit), true, held));
      });
    }

    /**
     * Checks the whole file: a `.zt` v2 file by the container's deep verify (every rule, layout
     * profile, part and shard digest: `{format, checks, tensors, partsDigestChecked,
     * partsWithoutDigest, shardsChecked, unresolved, dataShard}`, `unresolved` naming the parts
     * in shards that were not found), any other format by every checksum it carries (zip CRC-32s,
     * ONNX SHA-1s, legacy `.zt` digests) and every tensor and part read in full (`{format,
     * checks, tensors}`). Throws the first failure (a `.zt` one with its `rule`). A Blob or URL
     * is read whole for this (a Promise).
     */
    verify() {
      const ctx = this.#ctx;
      if (ctx instanceof NativeContext) return ctx.verify();
      return this.#sessionStep(function* (held) {
        for (const [name, src] of ctx.sources) if (!src.missing) yield* ctx.fetch(name, 0, src.size, true, held);
        return JSON.parse(yield* ctx.drive(() => ctx.session.verify(), true, held));
      });
    }

    /** Runs `steps(held)` over the session (its pieces dropped when it ends), in turn with the other reads of a lazy reader. */
    #sessionStep(steps) {
      const ctx = this.#ctx;
      const go = () => {
        ctx.phase = 'tensor';
        return run(steps(new Map([...ctx.held].map(([k, v]) => [k, v.map((r) => [...r])]))));
      };
      if (!this.lazy) return go();
      const turn = this.#turn.then(go);
      this.#turn = turn.catch(() => {});
      return turn;
    }

    /**
     * Tensor `name` as float32 values: GGUF block-quantized tensors are dequantized by the core
     * (as `gguf.quants.dequantize`), float16/bfloat16 widened, other numbers converted.
     */
    dequantize(name, options = {}) {
      const t = this.info(name);
      if (t.ggml?.quantized) {
        return then(this.#bytes(name, options), (bytes) => {
          try {
            return backend.ggmlDequantize(t.ggml.type, bytes);
          } catch (e) {
            const parsed = parsedError(e);
            if (!parsed) throw e;
            throw formatError({ ...parsed, tensor: name });
          }
        });
      }
      const dtype = t.ggml ? GGML_PLAIN[t.dtype] : t.dtype;
      if (!dtype || !(dtype in DTYPES) || dtype === 'complex64' || dtype === 'complex128') {
        throw jsError(this.format, 'unsupported', `${t.dtype} values cannot be converted to float32 (read the raw bytes with tensor())`, { tensor: name });
      }
      return then(this.tensor(name, { widen: true, maxTensorBytes: options.maxTensorBytes }), (a) => (a instanceof Float32Array ? a : Float32Array.from(a, Number)));
    }

    /**
     * Statistics of tensor `name` (see `index.d.ts`): count, finite, min, max, mean, std, zeros,
     * nan, pos_inf, neg_inf and a histogram of the finite values over [min, max], computed by the
     * core in two passes over the tensor's stored bytes, read in slices of `chunkBytes` (4 MiB):
     * from a Blob (or a file the wasm build reads) each slice is one read, so a multi-GB tensor
     * is never held whole (a tensor that must be decoded first, inflated or gathered, is read
     * whole as by tensor()). A path the addon opened goes to the native host (Model::stats).
     * Synchronous for bytes and paths, a Promise for a Blob.
     */
    stats(name, options = {}) {
      const t = this.info(name);
      const L = t.layout;
      const ctx = this.#ctx;
      if (ctx instanceof NativeContext) return ctx.stats(this.#index.get(name), t, options);
      const src = L.zeroCopy ? ctx.sources.get(L.source) : undefined;
      // A Blob, URL or file descriptor: read slice by slice, straight from the source.
      if (src && !src.memory) return run(statsSteps(t, L.length, this.#sourceRead(L), options, keeps(src, L.length, options) ? new Map() : null));
      if (L.storage === 'deflate' && !L.view) {
        // Inflated by the core in chunkBytes pieces per pass (tensor_stats), never whole: a member
        // that declares a huge array costs its compressed bytes, not its declared size.
        const i = this.#index.get(name);
        const bins = statsBins(options);
        const chunk = options.chunkBytes ?? STATS_CHUNK_BYTES;
        const report = statsProgress(options.onProgress, t.nbytes);
        const steps = function* () {
          ctx.phase = 'tensor';
          const held = new Map([...ctx.held].map(([k, v]) => [k, v.map((r) => [...r])]));
          yield* ctx.fetch(L.source, L.offset, L.offset + L.length, true, held);
          const out = yield* ctx.drive(() => ctx.session.stats(i, bins, chunk), true, held);
          if (options.onProgress) report(2 * t.nbytes);
          const r = JSON.parse(out);
          return statsResult(t, r.summary, r.histogram);
        };
        if (!this.lazy) return run(steps());
        const turn = this.#turn.then(() => run(steps()));
        this.#turn = turn.catch(() => {});
        return turn;
      }
      return then(this.#bytes(name), (bytes) => run(statsSteps(t, bytes.byteLength, (o, n) => bytes.subarray(o, o + n), options)));
    }

    /**
     * Tensor `name` cut for statistics in parts, one part per Worker: at most `parts` spans
     * `{offset, bytes, elements}` of its stored bytes, in order, each a whole number of elements
     * and blocks (core `stats::split`). Run `statsSummaryPart` on every span, merge the parts with
     * `mergeSummaries`, run `statsHistogramPart` on every span with that summary, and put it
     * together with `mergeStats`: the numbers are those of `stats()` (counts, min, max and the
     * histogram exactly; mean and std to rounding). Only a tensor stored as-is
     * (`layout.zeroCopy`) is read by span; any other is a TensorlaneError (use `stats()`).
     */
    statsSpans(name, parts) {
      const t = this.#spanned(name).t;
      const numel = t.shape.reduce((n, d) => n * Number(d), 1);
      if (!(Number.isInteger(parts) && parts >= 1)) throw new RangeError(`statsSpans: parts must be a positive integer, got ${parts}`);
      const flat = statsGuard(t, () => backend.statsSplit(t.dtype, t.ggml ? t.ggml.type : -1, numel, Math.min(parts, 0xffffffff)));
      const out = [];
      for (let i = 0; i < flat.length; i += 3) out.push({ offset: flat[i], bytes: flat[i + 1], elements: flat[i + 2] });
      return out;
    }

    /**
     * Pass 1 of tensor `name`'s statistics over one span of `statsSpans`: the part's state as
     * numbers (a Float64Array, which postMessage copies exactly) for `mergeSummaries`. Options as
     * stats() (`chunkBytes`, `readAhead`, `signal`, `onProgress` over the span's bytes). A Promise
     * for a Blob or URL.
     */
    statsSummaryPart(name, span, options = {}) {
      const { t, read } = this.#spanned(name, span);
      // Over HTTP the span's slices are kept for pass 2 (statsHistogramPart of the same span), so
      // each byte is fetched once; only the last tensor's statistics are kept.
      const key = `${name}\0${span.offset}\0${span.bytes}`;
      for (const k of this.#kept.keys()) if (!k.startsWith(`${name}\0`)) this.#kept.delete(k);
      const src = this.#ctx.sources?.get(t.layout.source);
      const store = keeps(src, span.bytes, options) ? new Map() : null;
      if (store) this.#kept.set(key, store);
      else this.#kept.delete(key);
      return run(summarySteps(t, span, store ? keeping(read, store) : read, options, partProgress(options.onProgress, 'summary', span.bytes), 0));
    }

    /**
     * Pass 2 over one span: `{edges, counts}` of the span's finite values in `options.bins` bins
     * (64) over the merged `summary`'s [min, max], for `mergeStats`. Options as statsSummaryPart.
     */
    statsHistogramPart(name, span, summary, options = {}) {
      const { t, read } = this.#spanned(name, span);
      const key = `${name}\0${span.offset}\0${span.bytes}`;
      const store = this.#kept.get(key);
      this.#kept.delete(key);
      return run(histogramSteps(t, span, store ? kept(read, store) : read, summary, options, partProgress(options.onProgress, 'histogram', span.bytes), 0));
    }

    /** A tensor stored as-is, checked span and a reader of its stored bytes by offset. */
    #spanned(name, span) {
      const t = this.info(name);
      const L = t.layout;
      if (!L.zeroCopy) throw jsError(this.format, 'unsupported', `tensor '${name}' is not stored as-is (${L.storage}${L.bigEndian ? ', big-endian' : ''}), so it cannot be read in spans; use stats()`, { tensor: name });
      if (span !== undefined) {
        const { offset, bytes, elements } = span ?? {};
        if (![offset, bytes, elements].every((v) => Number.isSafeInteger(v) && v >= 0) || offset + bytes > L.length) {
          throw new RangeError(`statsSpans: ${JSON.stringify(span)} is not a span of tensor '${name}' (${L.length} bytes); pass one statsSpans() gave`);
        }
      }
      const ctx = this.#ctx;
      if (ctx instanceof NativeContext) {
        // The host reads the tensor (or maps it with {mmap: true}) once per part, as readBytes.
        const i = this.#index.get(name);
        let bytes;
        return { t, read: (o, n) => (bytes ??= ctx.bytes(i, L)).subarray(o, o + n) };
      }
      return { t, read: this.#sourceRead(L) };
    }

    /**
     * The stored bytes [offset, offset + length) of a tensor stored as-is (`layout.zeroCopy`),
     * read from its source alone: one slice of a Blob, ranged GETs of a URL, a view of bytes or
     * a mapped path. Other layouts (inflated, gathered, big-endian) are a TensorlaneError.
     */
    readBytes(name, offset = 0, length) {
      const t = this.info(name);
      const L = t.layout;
      if (!L.zeroCopy) throw jsError(this.format, 'unsupported', `tensor '${name}' is not stored as-is (${L.storage}${L.bigEndian ? ', big-endian' : ''}); read it whole with tensor()`, { tensor: name });
      length ??= L.length - offset;
      if (!(Number.isSafeInteger(offset) && Number.isSafeInteger(length) && offset >= 0 && length >= 0 && offset + length <= L.length)) {
        throw new RangeError(`readBytes: [${offset}, +${length}) is outside tensor '${name}' (${L.length} bytes)`);
      }
      const ctx = this.#ctx;
      if (ctx instanceof NativeContext) return ctx.bytes(this.#index.get(name), L).subarray(offset, offset + length);
      return this.#sourceRead(L)(offset, length);
    }

    /**
     * `read(offset, len, signal?)` of the stored bytes of a tensor stored as-is, from its source
     * (a URL's requests in flight abort with `signal`), counted in bytesRead and reads unless the
     * source is memory.
     */
    /** Pass 1's slices of a span read over HTTP, for pass 2: `name\0offset\0bytes` → Map(offset → bytes). */
    #kept = new Map();

    #sourceRead(L) {
      const ctx = this.#ctx;
      const src = ctx.sources.get(L.source);
      return (o, n, signal) =>
        then(src.read(L.offset + o, n, signal), (b) => {
          if (!src.memory) {
            ctx.bytesRead += b.byteLength;
            ctx.reads++;
          }
          return b;
        });
    }

    /**
     * Elements [start, start + count) of tensor `name` as numbers (C order), reading only their
     * bytes when the tensor is stored as-is (GGUF: the whole blocks around them): GGUF blocks
     * dequantized by the core, float16/bfloat16/float8/float4 decoded, integers and bools as
     * numbers. A Float64Array for float64 and 32/64-bit integers, else a Float32Array. Other
     * layouts are read whole once by tensor() and sliced. Complex tensors are refused.
     */
    values(name, start = 0, count) {
      const t = this.info(name);
      const numel = t.shape.reduce((n, d) => n * Number(d), 1);
      count ??= numel - start;
      if (!(Number.isSafeInteger(start) && Number.isSafeInteger(count) && start >= 0 && count >= 0 && start + count <= numel)) {
        throw new RangeError(`values: [${start}, +${count}) is outside tensor '${name}' (${numel} elements)`);
      }
      if (t.ggml?.quantized) {
        const { blockSize, typeSize, type } = t.ggml;
        const b0 = Math.floor(start / blockSize);
        const b1 = Math.ceil((start + count) / blockSize);
        const skip = start - b0 * blockSize;
        const dq = (bytes) => {
          try {
            return backend.ggmlDequantize(type, bytes).subarray(skip, skip + count);
          } catch (e) {
            const parsed = parsedError(e);
            if (!parsed) throw e;
            throw formatError({ ...parsed, tensor: name });
          }
        };
        if (t.layout.zeroCopy) return then(this.readBytes(name, b0 * typeSize, (b1 - b0) * typeSize), dq);
        return then(this.#bytes(name), (all) => dq(all.subarray(b0 * typeSize, b1 * typeSize)));
      }
      const dtype = t.ggml ? GGML_PLAIN[t.dtype] ?? t.dtype : t.dtype;
      const dec = DECODE[dtype];
      if (!dec) throw jsError(this.format, 'unsupported', `${t.dtype} values cannot be shown as numbers (read the raw bytes with tensor())`, { tensor: name });
      const [per, num] = dec.perByte ? [1, 2] : [dec.size, 1]; // float4: two elements a byte
      const b0 = Math.floor((start * per) / num);
      const b1 = Math.ceil(((start + count) * per) / num);
      const cut = (bytes) => dec.decode(bytes).subarray(start - (b0 * num) / per, start - (b0 * num) / per + count);
      if (t.layout.zeroCopy) return then(this.readBytes(name, b0, b1 - b0), cut);
      return then(this.#bytes(name), (all) => cut(all.subarray(b0, b1)));
    }

    /**
     * A reader of tensor `name`'s stored bytes (C order, little-endian, as tensor() sees them)
     * by range: `{length, lazy, read(offset, len)}`, `read` giving a Uint8Array (a Promise of
     * one for a Blob source). Straight from a Blob or a file the wasm build reads, one read per
     * call; from memory or a mapped file, views; a tensor that must be decoded first (inflated,
     * gathered) is decoded once, on the first read. compare() reads through it.
     */
    byteReader(name) {
      const t = this.info(name);
      const L = t.layout;
      const ctx = this.#ctx;
      const src = !(ctx instanceof NativeContext) && L.zeroCopy ? ctx.sources.get(L.source) : undefined;
      if (src && !src.memory) {
        return {
          length: L.length,
          lazy: !!src.lazy,
          read: (o, n) =>
            then(src.read(L.offset + o, n), (b) => {
              ctx.bytesRead += b.byteLength;
              ctx.reads++;
              return b;
            }),
        };
      }
      let whole = null;
      return {
        length: Number(t.nbytes),
        lazy: this.lazy,
        read: (o, n) => {
          whole ??= then(this.#bytes(name), (b) => (whole = b));
          return then(whole, (b) => b.subarray(o, o + n));
        },
      };
    }

    /**
     * The computation graph of an ONNX model (see index.d.ts: nodes with op types, inputs,
     * outputs and attribute summaries; graph inputs/outputs; initializer names; opsets;
     * producer), read by the core from the model's header bytes. A Promise for a Blob source.
     * Other formats throw (kind 'unsupported').
     */
    graph() {
      if (this.format !== 'onnx') throw jsError(this.format, 'unsupported', 'only ONNX models have a computation graph');
      const ctx = this.#ctx;
      if (ctx instanceof NativeContext) return ctx.graph();
      const read = () => {
        ctx.phase = 'graph';
        return run(
          (function* () {
            const out = yield* ctx.drive(() => ctx.session.graph(), false);
            return JSON.parse(out);
          })(),
        );
      };
      if (!this.lazy) return read();
      const turn = this.#turn.then(read);
      this.#turn = turn.catch(() => {});
      return turn;
    }

    /** Frees the backend's session (wasm memory) and closes file descriptors; the reader cannot read tensors afterwards. */
    close() {
      this.#ctx.close?.();
      this.#ctx.session?.free?.();
      for (const s of this.#ctx.sources.values()) s.close?.();
    }
  }

  /** The core's errors while a tensor's statistics are made, with the tensor's name added. */
  function statsGuard(t, f) {
    try {
      return f();
    } catch (e) {
      const fe = parsedError(e);
      throw fe ? formatError({ ...fe, tensor: t.name, display: `${fe.display} (tensor '${t.name}')` }) : e;
    }
  }

  /**
   * Pushes bytes [span.offset, span.offset + span.bytes) of a tensor, read by `read(offset, len)`
   * (bytes, or a Promise of them) in slices of `chunkBytes`, into `acc` (a StatsSummary or
   * StatsHistogram). Up to `readAhead` slices are requested ahead, so a Blob or URL reads while
   * the core sums; `report(base + done)` after each slice.
   */
  function* feed(acc, span, read, options, report, base) {
    const step = Math.max(1, Math.floor(options.chunkBytes ?? STATS_CHUNK_BYTES));
    const depth = Math.max(1, Math.floor(options.readAhead ?? STATS_READ_AHEAD));
    const end = span.offset + span.bytes;
    const ahead = [];
    let next = span.offset;
    for (let o = span.offset; o < end; ) {
      while (ahead.length < depth && next < end) {
        const n = Math.min(step, end - next);
        const p = read(next, n, options.signal);
        if (p instanceof Promise) p.catch(() => {}); // awaited below; not "unhandled" when abandoned
        ahead.push([n, p]);
        next += n;
      }
      const [n, p] = ahead.shift();
      const b = yield () => p;
      aborted(options.signal);
      acc.push(b);
      o += n;
      report(base + o - span.offset);
    }
  }

  /**
   * Whether pass 1 keeps the slices it reads of `bytes` bytes for pass 2: over HTTP (a remote
   * source, where a second read is a second download) up to `options.keepBytes` (STATS_KEEP_BYTES).
   */
  function keeps(src, bytes, options) {
    return !!src?.remote && bytes <= (options.keepBytes ?? STATS_KEEP_BYTES);
  }
  /** `read` that keeps each slice in `store` by offset. */
  function keeping(read, store) {
    return (o, n, signal) => then(read(o, n, signal), (b) => (store.set(o, b), b));
  }
  /**
   * `read` that takes the slices `store` holds (each once), reading only what is not there; a
   * Promise either way, as the source's reads (a pass over a URL stays a Promise).
   */
  function kept(read, store) {
    return (o, n, signal) => {
      const b = store.get(o);
      store.delete(o);
      return b && b.byteLength === n ? Promise.resolve(b) : read(o, n, signal);
    };
  }

  /** Pass 1 over one span of tensor `t` (`{name, dtype, shape, ggml?}`): its StatsPart numbers. */
  function* summarySteps(t, span, read, options, report, base) {
    aborted(options.signal);
    const s = statsGuard(t, () => new backend.StatsSummary(t.dtype, t.ggml ? t.ggml.type : -1, span.elements, span.bytes));
    try {
      yield* feed(s, span, read, options, report, base);
      return Float64Array.from(s.part());
    } finally {
      s.free?.();
    }
  }

  /** Pass 2 over one span: the histogram of its finite values over the whole tensor's [min, max]. */
  function* histogramSteps(t, span, read, summary, options, report, base) {
    aborted(options.signal);
    const h = statsGuard(t, () => new backend.StatsHistogram(t.dtype, t.ggml ? t.ggml.type : -1, span.elements, summary.finite, summary.min ?? NaN, summary.max ?? NaN, statsBins(options)));
    try {
      if (summary.finite > 0) yield* feed(h, span, read, options, report, base);
      const out = JSON.parse(statsGuard(t, () => h.finish()));
      return { edges: Float64Array.from(out.edges, (v) => v ?? NaN), counts: out.counts };
    } finally {
      h.free?.();
    }
  }

  /**
   * The two passes of the core's statistics over `total` stored bytes of tensor `t`, read by
   * `read(offset, len)` in slices of whole elements or blocks. Pass 1 summarises; pass 2 bins the
   * finite values over [min, max]. Progress counts up to twice the bytes (as the native driver's).
   */
  function* statsSteps(t, total, read, options, store = null) {
    statsBins(options);
    const numel = t.shape.reduce((n, d) => n * Number(d), 1);
    const span = { offset: 0, bytes: total, elements: numel };
    const report = statsProgress(options.onProgress, total);
    const part = yield* summarySteps(t, span, store ? keeping(read, store) : read, options, report, 0);
    const summary = mergeSummaries([part]);
    const histogram = yield* histogramSteps(t, span, store ? kept(read, store) : read, summary, options, report, total);
    report(2 * total);
    return statsResult(t, summary, histogram);
  }

  /**
   * The summary of StatsPart numbers from `reader.statsSummaryPart` over the spans of one tensor
   * (`reader.statsSpans`), merged in span order: `{count, finite, min, max, mean, std, zeros, nan,
   * pos_inf, neg_inf}` (`null` for min, max, mean and std when no value is finite).
   */
  function mergeSummaries(parts) {
    const all = new Float64Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    try {
      return JSON.parse(backend.statsSummaryOfParts(all));
    } catch (e) {
      const fe = parsedError(e);
      throw fe ? formatError(fe) : e;
    }
  }

  /**
   * Statistics of values in memory (see `index.d.ts`): `data` is a TypedArray (or bytes) holding
   * `dtype` elements as tensor() returns them (float16/bfloat16 as raw Uint16Array bits), `shape`
   * defaults to one dimension. Synchronous; the same numbers as `reader.stats()`.
   */
  function stats(tensor, options = {}) {
    const { data, name = '' } = tensor ?? {};
    if (!ArrayBuffer.isView(data)) throw new TypeError('stats expects {dtype, shape?, data: TypedArray}');
    const dtype = tensor.dtype ?? inferDtype(data);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const shape = tensor.shape ?? [data.length];
    return run(statsSteps({ name, dtype, shape }, bytes.byteLength, (o, n) => bytes.subarray(o, o + n), options));
  }

  /**
   * Statistics made in parts (`reader.statsSpans`, one span per Worker) put together: the object
   * `reader.stats()` gives, from tensor `t` (`reader.info(name)`), the merged summary
   * (mergeSummaries) and each span's histogram (`reader.statsHistogramPart`), whose counts add up.
   */
  function mergeStats(t, summary, histograms) {
    const first = histograms[0];
    if (!first) throw new RangeError('mergeStats needs the histogram of at least one span');
    const counts = [...first.counts];
    for (const h of histograms.slice(1)) {
      if (h.edges.length !== first.edges.length || h.edges.some((e, i) => !Object.is(e, first.edges[i]))) {
        throw new RangeError('mergeStats: the spans\' histograms have different edges (each must use the merged summary and the same bins)');
      }
      h.counts.forEach((c, i) => (counts[i] += c));
    }
    return statsResult(t, summary, { edges: first.edges, counts });
  }

  return { open, stats, mergeSummaries, mergeStats, MIN_READ, MAX_READ };
}

/** The histogram's bin count from stats() options (default STATS_BINS); a RangeError when it is not a positive integer. */
function statsBins(options) {
  const bins = options.bins ?? STATS_BINS;
  if (!Number.isInteger(bins) || bins < 1) throw new RangeError(`stats: bins must be a positive integer, got ${bins}`);
  return bins;
}

/** onProgress for one pass over one span (statsSummaryPart, statsHistogramPart). */
function partProgress(onProgress, phase, total) {
  if (!onProgress) return () => {};
  return (done) => onProgress({ phase, bytesDone: done, bytesTotal: total });
}

/** The calls `onProgress({phase, bytesDone, bytesTotal})` a stats driver makes, as `report(done)`
 * where `done` counts up to twice `total` bytes (pass 1, then pass 2). */
function statsProgress(onProgress, total) {
  if (!onProgress) return () => {};
  return (done) => onProgress({ phase: done <= total && total > 0 ? 'summary' : 'histogram', bytesDone: done, bytesTotal: 2 * total });
}

/** The object stats() returns, from the backend's summary and histogram JSON (null: NaN). */
function statsResult(t, summary, histogram) {
  const num = (v) => v ?? NaN;
  return {
    name: t.name,
    dtype: t.dtype,
    shape: t.shape,
    count: summary.count,
    finite: summary.finite,
    min: num(summary.min),
    max: num(summary.max),
    mean: num(summary.mean),
    std: num(summary.std),
    zeros: summary.zeros,
    nan: summary.nan,
    pos_inf: summary.pos_inf,
    neg_inf: summary.neg_inf,
    histogram: { edges: Float64Array.from(histogram.edges, num), counts: histogram.counts },
  };
}

/** float8 decoders: the 256 values of each byte (ml_dtypes' conversions). */
function f8Table(expBits, bias, kind) {
  const mBits = 7 - expBits;
  const out = new Float32Array(256);
  for (let b = 0; b < 256; b++) {
    const sign = b & 0x80 ? -1 : 1;
    const e = (b >> mBits) & ((1 << expBits) - 1);
    const m = b & ((1 << mBits) - 1);
    const maxE = (1 << expBits) - 1;
    let v;
    if (kind === 'fnuz' && b === 0x80) v = NaN;
    else if (kind === 'fn' && e === maxE && m === (1 << mBits) - 1) v = NaN;
    else if (kind === 'ieee' && e === maxE) v = m ? NaN : sign * Infinity;
    else if (e === 0) v = sign * (m / (1 << mBits)) * 2 ** (1 - bias);
    else v = sign * (1 + m / (1 << mBits)) * 2 ** (e - bias);
    out[b] = v;
  }
  return out;
}
const F8 = {
  float8_e4m3fn: f8Table(4, 7, 'fn'),
  float8_e4m3fnuz: f8Table(4, 8, 'fnuz'),
  float8_e5m2: f8Table(5, 15, 'ieee'),
  float8_e5m2fnuz: f8Table(5, 16, 'fnuz'),
  float8_e8m0fnu: Float32Array.from({ length: 256 }, (_, b) => (b === 255 ? NaN : 2 ** (b - 127))),
};
const F4E2M1 = Float32Array.from({ length: 16 }, (_, n) => (n & 8 ? -1 : 1) * [0, 0.5, 1, 1.5, 2, 3, 4, 6][n & 7]);
const copyOf = (bytes) => Uint8Array.prototype.slice.call(bytes).buffer;
const lookup = (table) => (bytes) => Float32Array.from(bytes, (b) => table[b]);
/** Per dtype: element size and a decoder of little-endian bytes into a Float32Array/Float64Array. */
const DECODE = {
  float32: { size: 4, decode: (b) => new Float32Array(copyOf(b)) },
  float64: { size: 8, decode: (b) => new Float64Array(copyOf(b)) },
  float16: { size: 2, decode: (b) => widen('float16', new Uint16Array(copyOf(b))) },
  bfloat16: { size: 2, decode: (b) => widen('bfloat16', new Uint16Array(copyOf(b))) },
  int8: { size: 1, decode: (b) => Float32Array.from(new Int8Array(copyOf(b))) },
  uint8: { size: 1, decode: (b) => Float32Array.from(b) },
  bool: { size: 1, decode: (b) => Float32Array.from(b, (x) => (x ? 1 : 0)) },
  int16: { size: 2, decode: (b) => Float32Array.from(new Int16Array(copyOf(b))) },
  uint16: { size: 2, decode: (b) => Float32Array.from(new Uint16Array(copyOf(b))) },
  int32: { size: 4, decode: (b) => Float64Array.from(new Int32Array(copyOf(b))) },
  uint32: { size: 4, decode: (b) => Float64Array.from(new Uint32Array(copyOf(b))) },
  int64: { size: 8, decode: (b) => Float64Array.from(new BigInt64Array(copyOf(b)), Number) },
  uint64: { size: 8, decode: (b) => Float64Array.from(new BigUint64Array(copyOf(b)), Number) },
  float4_e2m1fn: { perByte: 2, decode: (b) => Float32Array.from({ length: 2 * b.length }, (_, i) => F4E2M1[i & 1 ? b[i >> 1] >> 4 : b[i >> 1] & 15]) },
  ...Object.fromEntries(Object.entries(F8).map(([k, t]) => [k, { size: 1, decode: lookup(t) }])),
};

/** The listing entry a user sees for one catalog tensor. */
function entry(t) {
  const s = t.storage;
  const layout = { storage: s.kind, source: s.source, offset: s.offset, length: s.length, zeroCopy: t.zeroCopy, bigEndian: t.bigEndian, view: t.view ?? undefined };
  if (s.kind === 'deflate') Object.assign(layout, { inflated: s.inflated, skip: s.skip });
  if (s.kind === 'encoded') Object.assign(layout, { codec: s.codec, decoded: s.decoded });
  if (s.kind === 'parts') Object.assign(layout, { layoutId: s.layout, parts: s.parts });
  const e = { name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes, layout, attributes: t.attributes };
  if (t.ggml) e.ggml = t.ggml;
  return e;
}

/** A TypedArray for `dtype` over `bytes`: a view when aligned (little-endian host), else a copy. */
function typedOf(dtype, bytes) {
  const Ctor = DTYPES[dtype] ?? Uint8Array;
  const size = Ctor.BYTES_PER_ELEMENT;
  if (bytes.byteLength % size !== 0) return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (LITTLE_ENDIAN && bytes.byteOffset % size === 0) return new Ctor(bytes.buffer, bytes.byteOffset, bytes.byteLength / size);
  const copy = Uint8Array.prototype.slice.call(bytes);
  return new Ctor(copy.buffer, 0, copy.byteLength / size);
}

/**
 * Where companion `name` of the model at `root` is (Node): `name` relative to the model's folder.
 * The core has already refused names that leave that folder.
 */
export function companionPath(root, name) {
  const sep = root.includes('\\') && !root.includes('/') ? '\\' : '/';
  const dir = root.includes(sep) ? root.slice(0, root.lastIndexOf(sep) + 1) : '';
  return dir + name;
}
