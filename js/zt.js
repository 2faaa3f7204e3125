// `.zt` for both JavaScript backends: open(source) -> reader, writeZt(entries, options).
//
// The I/O happens here; the backend (N-API addon or wasm, sharing wasm/src/zt_common.rs) only
// validates and describes the image, decodes encoded parts, verifies, and writes:
//   ztOpenRaw(size, starts[], lens[], joined) -> JSON description (throws "<Rule>: ...")
//   ztDecodeRaw(stored, encoding, decodedLength) -> Uint8Array
//   ztVerifyRaw(bytes) -> JSON report
//   ztWriteRaw(planJson, buffers[]) -> Uint8Array
//
// Opening reads the first 8 bytes, the last 64 KiB (footer, and the manifest when it is there)
// and, when the manifest lies before that window, the manifest: never a part's bytes. Part bytes
// are read by get(): for in-memory sources (a Uint8Array/ArrayBuffer, or a Node path mapped by
// the addon) get() returns a TypedArray *view* on those bytes when the part is raw and aligned;
// a Blob/File is read lazily with blob.slice(), so open(blob), get() and verify() are async.

import { DTYPES, TensorlaneError, asBytes, inferDtype, isBlob, then, widen } from './common.js';
import { RemoteFile } from './http.js';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
/** Bytes read from the end of a file at open (the core's tail window). */
export const ZT_TAIL_WINDOW = 65536;

function ztError(e) {
  if (e instanceof TensorlaneError && e.rule !== undefined) return e;
  const message = e && e.message !== undefined ? e.message : String(e);
  const err = new TensorlaneError(message, { cause: e });
  const r = /^([A-Z][A-Za-z]+): /.exec(message);
  err.rule = r ? r[1] : undefined;
  const o = /at byte (\d+)/.exec(message);
  err.offset = o ? Number(o[1]) : undefined;
  const op = /object "((?:[^"\\]|\\.)*)"(?:, part "((?:[^"\\]|\\.)*)")?/.exec(message);
  err.object = op ? op[1] : undefined;
  err.part = op && op[2] !== undefined ? op[2] : undefined;
  return err;
}

function notFound(name) {
  const e = new TensorlaneError(`NotFound: no object ${JSON.stringify(name)}`);
  e.rule = 'NotFound';
  return e;
}

function toPlainU8(b) {
  return b instanceof Uint8Array && b.constructor === Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** The ranges open() needs: header, tail window and (if outside the window) the manifest. */
function plan(size, tail, tailStart) {
  const ranges = [];
  if (size < 48 || tail.byteLength < 40) return ranges;
  const dv = new DataView(tail.buffer, tail.byteOffset + tail.byteLength - 40, 40);
  const mo = Number(dv.getBigUint64(0, true));
  const ml = Number(dv.getBigUint64(8, true));
  // Only a manifest the core will go on to read is fetched; a bad footer fails before that.
  if (ml > 0 && ml <= 2 ** 30 && mo >= 4096 && mo % 4096 === 0 && mo + ml <= size - 40 && mo < tailStart) ranges.push([mo, ml]);
  return ranges;
}

/** Validates and describes an image from its pieces ([offset, Uint8Array]). */
function describe(backend, size, pieces) {
  const total = pieces.reduce((n, [, b]) => n + b.byteLength, 0);
  const joined = new Uint8Array(total);
  let at = 0;
  for (const [, b] of pieces) {
    joined.set(b, at);
    at += b.byteLength;
  }
  let json;
  try {
    json = backend.ztOpenRaw(size, pieces.map(([o]) => o), pieces.map(([, b]) => b.byteLength), joined);
  } catch (e) {
    throw ztError(e);
  }
  return JSON.parse(json);
}

/** A TypedArray for `dtype` over `bytes`: a view when aligned (little-endian host), else a copy. */
function typedZt(dtype, bytes) {
  const Ctor = DTYPES[dtype] ?? Uint8Array;
  const size = Ctor.BYTES_PER_ELEMENT;
  if (LITTLE_ENDIAN && bytes.byteOffset % size === 0) {
    return { data: new Ctor(bytes.buffer, bytes.byteOffset, bytes.byteLength / size), copied: false };
  }
  const copy = Uint8Array.prototype.slice.call(bytes); // a copy even for a Node Buffer
  return { data: new Ctor(copy.buffer, 0, copy.byteLength / size), copied: true };
}

/**
 * A `.zt` reader. `read(offset, length, shard)` returns the stored bytes (a Uint8Array, or a
 * Promise of one for Blob sources); `whole()` returns the whole file for verify().
 */
class ZtReader {
  #backend;
  #meta;
  #objects;
  #read;
  #whole;
  constructor(backend, meta, read, whole, lazy) {
    this.#backend = backend;
    this.#meta = meta;
    this.#objects = new Map(meta.objects.map((o) => [o.name, o]));
    this.#read = read;
    this.#whole = whole;
    /** True when get() and verify() return Promises (Blob/File sources). */
    this.lazy = lazy;
  }
  /** Always 'zt' (the same field as the other formats' readers). */
  get format() {
    return 'zt';
  }
  /**
   * Every object as a listing entry, in the shape the other formats' readers use: {name, dtype,
   * shape, nbytes, layout: {storage, source, offset, length, zeroCopy, encoding, ztLayout}, attributes}.
   */
  get tensors() {
    return this.keys().map((name) => {
      const o = this.#objects.get(name);
      const d = o.layout === 'dense' ? o.parts.find((p) => p.name === 'data') : undefined;
      const nbytes = o.parts.reduce((n, p) => n + p.nbytes, 0);
      const layout = d
        ? { storage: 'range', source: d.shard ?? '', offset: d.offset, length: d.length, zeroCopy: d.encoding === undefined, encoding: d.encoding, ztLayout: o.layout }
        : { storage: 'parts', ztLayout: o.layout, parts: o.parts.map((p) => p.name) };
      return { name, dtype: o.dtype ?? null, shape: o.shape, nbytes, layout, attributes: o.attributes ?? {} };
    });
  }
  /**
   * A dense object's values as a TypedArray (as get(name).data; float16/bfloat16 widened with
   * `{widen: true}`). Throws for other layouts: use get().
   */
  tensor(name, options = {}) {
    const o = this.#objects.get(name);
    if (!o) throw notFound(name);
    if (o.layout !== 'dense') {
      const e = new TensorlaneError(`Unsupported: ${JSON.stringify(name)} is a ${o.layout} object; read its parts with get()`);
      e.rule = 'Unsupported';
      throw e;
    }
    return then(this.get(name), (d) => (options.widen && (d.dtype === 'float16' || d.dtype === 'bfloat16') ? widen(d.dtype, d.data) : d.data));
  }
  /** Object names in bytewise order. */
  keys() {
    return [...this.#objects.keys()];
  }
  /** True for a manifest-less data shard (no objects). */
  get dataShard() {
    return this.#meta.dataShard;
  }
  /** File attributes (or undefined). */
  get attributes() {
    return this.#meta.attributes;
  }
  /** The shard table: {name: {size, digest}} (or undefined). */
  get shards() {
    return this.#meta.shards;
  }
  /** {layout, shape, dtype?, parts: {name: {dtype, type, encoding, nbytes, digest, offset, length, shard}}, attributes}. */
  metadata(name) {
    const o = this.#objects.get(name);
    if (!o) throw notFound(name);
    const parts = {};
    for (const p of o.parts) {
      parts[p.name] = {
        dtype: p.storage,
        type: p.type,
        encoding: p.encoding,
        nbytes: p.nbytes,
        digest: p.digest,
        offset: p.offset,
        length: p.length,
        shard: p.shard,
      };
    }
    return { layout: o.layout, shape: o.shape, dtype: o.dtype, parts, attributes: o.attributes };
  }
  #part(p) {
    return then(this.#read(p.offset, p.length, p.shard), (stored) => {
      if (p.encoding === undefined) return { bytes: stored, decoded: false };
      try {
        return { bytes: toPlainU8(this.#backend.ztDecodeRaw(stored, p.encoding, p.nbytes)), decoded: true };
      } catch (e) {
        throw ztError(e);
      }
    });
  }
  /**
   * A dense object: {dtype, shape, data, copied} with `data` a TypedArray view on the source when
   * possible. Other layouts: {layout, shape, attributes, parts: {name: {dtype, type, data}}}.
   */
  get(name) {
    const o = this.#objects.get(name);
    if (!o) throw notFound(name);
    if (o.layout === 'dense') {
      const p = o.parts.find((x) => x.name === 'data');
      return then(this.#part(p), ({ bytes, decoded }) => {
        const { data, copied } = typedZt(o.dtype, bytes);
        return { dtype: o.dtype, shape: o.shape, data, copied: copied || decoded };
      });
    }
    const all = o.parts.map((p) => this.#part(p));
    const finish = (done) => {
      const parts = {};
      o.parts.forEach((p, i) => {
        const { data, copied } = typedZt(p.type === undefined ? p.storage : p.dtype, done[i].bytes);
        parts[p.name] = { dtype: p.storage, type: p.type, data, copied: copied || done[i].decoded };
      });
      return { layout: o.layout, shape: o.shape, attributes: o.attributes, parts };
    };
    return all.some((x) => x instanceof Promise) ? Promise.all(all).then(finish) : finish(all);
  }
  /**
   * Deep verify (layout profiles, content rules, every part digest). Throws a TensorlaneError
   * whose `rule` names the broken rule. Returns {partsDigestChecked, partsWithoutDigest,
   * unresolved, dataShard}. A Blob source is read whole for this.
   */
  verify() {
    return then(this.#whole(), (bytes) => {
      try {
        return JSON.parse(this.#backend.ztVerifyRaw(bytes));
      } catch (e) {
        throw ztError(e);
      }
    });
  }
}

/**
 * The `.zt` API of a backend. `io` (Node only): `openPath(path, options) -> Uint8Array` (read;
 * mapped by the addon with `{mmap: true}`) and `shardPath(root, name) -> string | null`.
 */
export function makeZt(backend, io = {}) {
  function openBytes(bytes, path, options) {
    const size = bytes.byteLength;
    const tailStart = Math.max(0, size - ZT_TAIL_WINDOW);
    const tail = bytes.subarray(tailStart);
    const pieces = [[0, bytes.subarray(0, Math.min(8, size))], [tailStart, tail]];
    for (const [o, l] of plan(size, tail, tailStart)) pieces.push([o, bytes.subarray(o, o + l)]);
    const meta = describe(backend, size, pieces);
    const shardBytes = new Map();
    const read = (offset, length, shard) => {
      if (shard === undefined) return bytes.subarray(offset, offset + length);
      let s = shardBytes.get(shard);
      if (s === undefined) {
        const file = path !== undefined && io.shardPath ? io.shardPath(path, shard) : null;
        if (!file) {
          const e = new TensorlaneError(`Unsupported: the part lives in shard ${JSON.stringify(shard)}, which was not found${path ? ' next to ' + path : ' (open a path to resolve shards)'}`);
          e.rule = 'Unsupported';
          throw e;
        }
        s = io.openPath(file, options);
        const want = meta.shards?.[shard]?.size;
        if (s.byteLength !== want) {
          const e = new TensorlaneError(`ShardIdentity: ${file} is ${s.byteLength} bytes; the shard table says ${want}`);
          e.rule = 'ShardIdentity';
          throw e;
        }
        shardBytes.set(shard, s);
      }
      if (offset + length > s.byteLength) throw ztError(new Error(`BlobBounds: blob [${offset}, +${length}) runs past shard ${shard}`));
      return s.subarray(offset, offset + length);
    };
    return new ZtReader(backend, meta, read, () => bytes, false);
  }

  async function openBlob(blob, known, companions) {
    const size = blob.size;
    const tailStart = Math.max(0, size - ZT_TAIL_WINDOW);
    const get = async (o, l) => new Uint8Array(await blob.slice(o, o + l).arrayBuffer());
    // The first bytes may have been read already (open() looks at the magic to pick a reader).
    const first = known && known.byteLength >= Math.min(8, size) ? known.subarray(0, Math.min(8, size)) : get(0, Math.min(8, size));
    const [head, tail] = await Promise.all([first, get(tailStart, size - tailStart)]);
    const pieces = [[0, head], [tailStart, tail]];
    for (const [o, l] of plan(size, tail, tailStart)) pieces.push([o, await get(o, l)]);
    const meta = describe(backend, size, pieces);
    // A file opened by URL finds its shards as URLs next to it, named as shardPath() names files.
    const shards = new Map();
    const remoteShard = (shard) => {
      if (!shards.has(shard)) {
        const stem = blob.name.replace(/\.[^.]*$/, '');
        const tries = [`${stem}-${shard}.zt`, shard, `${shard}.zt`];
        const want = meta.shards?.[shard]?.size;
        shards.set(
          shard,
          (async () => {
            const why = [];
            for (const name of tries) {
              try {
                const f = await blob.sibling(name);
                if (want !== undefined && f.size !== want) throw new Error(`${f.url} has ${f.size} bytes, the shard table says ${want}`);
                return f;
              } catch (e) {
                why.push(e.message);
              }
            }
            const e = new TensorlaneError(`Unsupported: the part lives in shard ${JSON.stringify(shard)}, which was not found next to ${blob.url} (${why.join('; ')})`);
            e.rule = 'Unsupported';
            throw e;
          })(),
        );
      }
      return shards.get(shard);
    };
    // Blobs given as {companions} (files dropped together) are shards by the names shardPath() tries.
    const givenShard = (shard) => {
      const stem = (blob.name ?? '').replace(/\.[^.]*$/, '');
      const name = [`${stem}-${shard}.zt`, shard, `${shard}.zt`].find((n) => companions?.[n] !== undefined);
      if (name === undefined) return undefined;
      const f = companions[name];
      if (!isBlob(f)) throw new TypeError(`shard ${JSON.stringify(shard)}: a .zt opened from a Blob takes its shards as Blobs`);
      const want = meta.shards?.[shard]?.size;
      if (f.size !== want) {
        const e = new TensorlaneError(`ShardIdentity: ${name} is ${f.size} bytes; the shard table says ${want}`);
        e.rule = 'ShardIdentity';
        throw e;
      }
      return f;
    };
    const read = (offset, length, shard) => {
      if (shard !== undefined && companions) {
        let f;
        try {
          f = givenShard(shard);
        } catch (e) {
          return Promise.reject(e);
        }
        if (f) {
          if (offset + length > f.size) return Promise.reject(ztError(new Error(`BlobBounds: blob [${offset}, +${length}) runs past shard ${shard}`)));
          return f.slice(offset, offset + length).arrayBuffer().then((b) => new Uint8Array(b));
        }
      }
      if (shard !== undefined && blob instanceof RemoteFile) {
        return remoteShard(shard).then((f) => {
          if (offset + length > f.size) throw ztError(new Error(`BlobBounds: blob [${offset}, +${length}) runs past shard ${shard}`));
          return f.read(offset, length);
        });
      }
      if (shard !== undefined) {
        const e = new TensorlaneError(`Unsupported: the part lives in shard ${JSON.stringify(shard)}; pass the shard file as {companions: {name: Blob}}`);
        e.rule = 'Unsupported';
        return Promise.reject(e);
      }
      return get(offset, length);
    };
    return new ZtReader(backend, meta, read, async () => new Uint8Array(await blob.arrayBuffer()), true);
  }

  /**
   * Opens a `.zt` v2 file: a path (Node; read into memory, or mapped with `{mmap: true}`), a Uint8Array/ArrayBuffer (sync),
   * or a Blob/File (async: returns a Promise, and the reader's get()/verify() are async).
   * `options.head`: the file's first bytes when the caller already read them.
   */
  function open(source, options = {}) {
    if (typeof source === 'string') {
      if (!io.openPath) throw new TypeError('open(path) needs Node; pass a Uint8Array or a Blob');
      return openBytes(io.openPath(source, options), source, options);
    }
    // A RemoteFile (open(url)) reads like a Blob: size, slice(start, end).arrayBuffer().
    if (isBlob(source) || source instanceof RemoteFile) return openBlob(source, options.head, options.companions);
    return openBytes(asBytes(source, 'open expects a path (Node), a Uint8Array, an ArrayBuffer, or a Blob/File'), undefined);
  }

  /**
   * Writes a `.zt` v2 file and returns its bytes (canonical form unless `{canonical: false}`).
   * `entries`: an object, a Map or an array of [name, value]; a value is a TypedArray (1-D), a
   * dense `{dtype?, shape?, data}`, or `{layout, shape, attributes?, parts: {name: {dtype, type?,
   * data}}}`. `options.attributes` sets file attributes (JSON values).
   */
  function writeZt(entries, options = {}) {
    const list = entries instanceof Map ? [...entries] : Array.isArray(entries) ? entries : Object.entries(entries);
    const buffers = [];
    const buf = (data) => {
      buffers.push(data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      return buffers.length - 1;
    };
    const objects = list.map(([name, v]) => {
      if (ArrayBuffer.isView(v)) v = { data: v };
      if (v.parts) {
        const parts = Object.entries(v.parts).map(([pn, p]) => ({ name: pn, dtype: p.dtype ?? inferDtype(p.data), type: p.type, buf: buf(p.data) }));
        return { name, shape: v.shape, layout: v.layout ?? 'dense', attributes: v.attributes, parts };
      }
      const dtype = v.dtype ?? inferDtype(v.data);
      const itemsize = DTYPES[dtype]?.BYTES_PER_ELEMENT ?? 1;
      const per = dtype === 'complex64' || dtype === 'complex128' ? 2 : 1;
      const shape = v.shape ?? [v.data.byteLength / itemsize / per];
      return { name, shape, layout: 'dense', attributes: v.attributes, parts: [{ name: 'data', dtype, buf: buf(v.data) }] };
    });
    const p = { canonical: options.canonical ?? true, attributes: options.attributes, objects };
    try {
      return toPlainU8(backend.ztWriteRaw(JSON.stringify(p), buffers));
    } catch (e) {
      throw ztError(e);
    }
  }

  return { open, writeZt };
}
