// Shared JavaScript layer of both backends (N-API addon and wasm).
//
// A backend exposes four low-level entry points (see wasm/src/lib.rs and node/src/lib.rs, which
// share wasm/src/common.rs):
//   decodeRaw(input: Uint8Array, bits, maxDecompressedBytes) -> { json, owned: Uint8Array[] }
//   encodeRaw(planJson, buffers: Uint8Array[])               -> Uint8Array
//   dequantizeRaw(planJson, buffers: Uint8Array[])           -> Float32Array
//   new RawStreamDecoder(maxPacketBytes, maxBufferedBytes)   -> { push, next, buffered }
// Everything user-facing (views, classes, option handling, errors) is built here, once, so the
// two backends return identical results for the same input.

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** dtype -> [TypedArray constructor, bytes per TypedArray element] */
export const DTYPES = Object.freeze({
  float32: Float32Array,
  float64: Float64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  int8: Int8Array,
  int16: Int16Array,
  int32: Int32Array,
  int64: BigInt64Array,
  uint8: Uint8Array,
  uint16: Uint16Array,
  uint32: Uint32Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
  complex64: Float32Array,
  complex128: Float64Array,
});

const INFER = new Map([
  [Float32Array, 'float32'],
  [Float64Array, 'float64'],
  [Int8Array, 'int8'],
  [Int16Array, 'int16'],
  [Int32Array, 'int32'],
  [BigInt64Array, 'int64'],
  [Uint8Array, 'uint8'],
  [Uint8ClampedArray, 'uint8'],
  [Uint16Array, 'uint16'],
  [Uint32Array, 'uint32'],
  [BigUint64Array, 'uint64'],
]);

/** The dtype a TypedArray implies when none is given. */
export function inferDtype(data) {
  for (const [ctor, name] of INFER) if (data instanceof ctor) return name;
  if (typeof Float16Array !== 'undefined' && data instanceof Float16Array) return 'float16';
  throw new TypeError(`cannot infer a dtype from ${Object.prototype.toString.call(data)}; pass {dtype}`);
}

/** An error from the codec. `offset` is the byte offset the core reports ("at byte N"). */
export class TensorlaneError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'TensorlaneError';
    const m = /\(at byte (\d+)(?:, in "(.*)")?\)$/.exec(message);
    this.offset = m ? Number(m[1]) : undefined;
    this.path = m && m[2] !== undefined ? m[2] : '';
  }
}

function rethrow(e) {
  if (e instanceof TensorlaneError) throw e;
  throw new TensorlaneError(e && e.message !== undefined ? e.message : String(e), { cause: e });
}

// ---------------------------------------------------------------------------------------------
// half-precision widening (exact: every float16/bfloat16 value is a float32)

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

function f16ToF32(h) {
  const s = (h & 0x8000) << 16;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) {
    const v = m * 5.960464477539063e-8; // 2^-24: subnormals and zero
    return s ? -v : v;
  }
  if (e === 0x1f) {
    u32buf[0] = s | 0x7f800000 | (m << 13);
    return f32buf[0];
  }
  u32buf[0] = s | ((e + 112) << 23) | (m << 13);
  return f32buf[0];
}

/** Widens raw float16 or bfloat16 bits to a new Float32Array. */
export function widen(dtype, bits) {
  const out = new Float32Array(bits.length);
  if (dtype === 'bfloat16') {
    const u = new Uint32Array(out.buffer);
    for (let i = 0; i < bits.length; i++) u[i] = bits[i] << 16;
  } else {
    for (let i = 0; i < bits.length; i++) out[i] = f16ToF32(bits[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// decoded values

/** A dict of packets in wire order; `get` follows tenso (the last duplicate wins). */
export class Bundle {
  constructor(entries) {
    this.kind = 'bundle';
    /** @type {Array<[string, any]>} */
    this.entries = entries;
  }
  get(key) {
    for (let i = this.entries.length - 1; i >= 0; i--) if (this.entries[i][0] === key) return this.entries[i][1];
    return undefined;
  }
  has(key) {
    return this.entries.some(([k]) => k === key);
  }
  keys() {
    return this.entries.map(([k]) => k);
  }
  get size() {
    return this.entries.length;
  }
  [Symbol.iterator]() {
    return this.entries[Symbol.iterator]();
  }
  /** A plain object (the last duplicate wins). */
  toObject() {
    const o = {};
    for (const [k, v] of this.entries) o[k] = v;
    return o;
  }
}

const backendOf = new WeakMap();

/** A quantized tensor: `value = (q - zeroPoint) * scale` per slice. */
export class Quantized {
  constructor(fields, backend) {
    Object.assign(this, fields);
    if (backend) backendOf.set(this, backend);
  }
  /** Dequantizes with the core's float32 arithmetic (a new Float32Array). */
  dequantize() {
    const backend = backendOf.get(this) ?? defaultBackend;
    if (!backend) throw new TensorlaneError('no backend loaded');
    const buffers = [];
    const value = quantizedPlan(this, buffers);
    try {
      return toF32(backend.dequantizeRaw(JSON.stringify({ value }), buffers));
    } catch (e) {
      rethrow(e);
    }
  }
}

let defaultBackend = null;

function toF32(a) {
  return a instanceof Float32Array && a.constructor === Float32Array ? a : new Float32Array(a);
}

function bitsToF32(bits) {
  return new Float32Array(new Uint32Array(bits).buffer);
}

/** A typed view (or copy) of `len` bytes at `off` of `bytes` for `dtype`. */
function typed(dtype, bytes, off, len, forceCopy) {
  const Ctor = DTYPES[dtype];
  const size = Ctor.BYTES_PER_ELEMENT;
  const abs = bytes.byteOffset + off;
  if (!forceCopy && abs % size === 0 && LITTLE_ENDIAN) {
    return { data: new Ctor(bytes.buffer, abs, len / size), copied: false };
  }
  const copy = bytes.slice(off, off + len);
  return { data: new Ctor(copy.buffer, 0, len / size), copied: true };
}

function bytesOf(d, input, owned) {
  if (d.own !== undefined) {
    const o = owned[d.own];
    return { bytes: o, off: 0, len: o.byteLength, own: true };
  }
  return { bytes: input, off: d.off, len: d.len, own: false };
}

function denseFrom(d, input, owned, opts) {
  const { bytes, off, len, own } = bytesOf(d, input, owned);
  let { data, copied } = typed(d.dtype, bytes, off, len, false);
  copied = copied || own;
  if (opts.widen && (d.dtype === 'float16' || d.dtype === 'bfloat16')) {
    data = widen(d.dtype, data);
    copied = true;
  }
  return { kind: 'dense', dtype: d.dtype, shape: d.shape, data, copied };
}

function build(d, input, owned, opts, backend) {
  switch (d.kind) {
    case 'dense':
      return denseFrom(d, input, owned, opts);
    case 'bundle':
      return new Bundle(d.entries.map(([k, v]) => [k, build(v, input, owned, opts, backend)]));
    case 'sparse': {
      const [a, b, c] = d.components.map((x) => denseFrom(x, input, owned, opts));
      const names = d.format === 'coo' ? ['row', 'col'] : ['indices', 'indptr'];
      return {
        kind: 'sparse',
        format: d.format,
        shape: d.shape,
        dtype: a.dtype,
        data: a.data,
        [names[0]]: b.data,
        [names[1]]: c.data,
        indexDtypes: [b.dtype, c.dtype],
        copied: a.copied || b.copied || c.copied,
      };
    }
    case 'quantized': {
      const { bytes, off, len, own } = bytesOf(d, input, owned);
      return new Quantized(
        {
          kind: 'quantized',
          qdtype: d.qdtype,
          shape: d.shape,
          scheme: d.scheme,
          schemeCode: d.schemeCode,
          axis: d.axis,
          groupSize: d.groupSize,
          scales: bitsToF32(d.scales),
          zeroPoints: bitsToF32(d.zeroPoints),
          data: new Uint8Array(bytes.buffer, bytes.byteOffset + off, len),
          copied: own,
        },
        backend,
      );
    }
    case 'string': {
      const { bytes, off, len } = bytesOf(d, input, owned);
      const view = new DataView(bytes.buffer, bytes.byteOffset + off, len);
      const n = d.count;
      const payload = off + 8 * (n + 1);
      const dec = new TextDecoder('utf-8', { ignoreBOM: true });
      const strings = new Array(n);
      let prev = Number(view.getBigUint64(0, true));
      for (let i = 0; i < n; i++) {
        const next = Number(view.getBigUint64(8 * (i + 1), true));
        strings[i] = dec.decode(bytes.subarray(payload + prev, payload + next));
        prev = next;
      }
      return { kind: 'string', strings };
    }
    default:
      throw new TensorlaneError(`unknown descriptor kind ${d.kind}`);
  }
}

const DECODE_DEFAULTS = {
  verifyIntegrity: true,
  requireIntegrity: false,
  allowTrailingBytes: true,
  allowV2: false,
  strictKeys: false,
  validateSparse: true,
};

function decodeBits(o) {
  const v = (k) => (o[k] === undefined ? DECODE_DEFAULTS[k] : !!o[k]);
  return (
    (v('verifyIntegrity') ? 1 : 0) |
    (v('requireIntegrity') ? 2 : 0) |
    (v('allowTrailingBytes') ? 4 : 0) |
    (v('allowV2') ? 8 : 0) |
    (v('strictKeys') ? 16 : 0) |
    (v('validateSparse') ? 32 : 0)
  );
}

/** `f(x)`, or, when `x` is a Promise, a Promise of `f` of its value (sync and async sources share one path). */
export const then = (x, f) => (x instanceof Promise ? x.then(f) : f(x));

/** Whether `x` is a Blob (a File too); false where Blob does not exist. */
export function isBlob(x) {
  return typeof Blob !== 'undefined' && x instanceof Blob;
}

/**
 * `input` (a Uint8Array, an ArrayBuffer/SharedArrayBuffer or another ArrayBuffer view) as a
 * Uint8Array over the same memory; anything else is a TypeError that says `expected`.
 */
export function asBytes(input, expected = 'decode expects a Uint8Array, an ArrayBuffer or another ArrayBuffer view') {
  if (input instanceof Uint8Array) return input;
  if (input instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && input instanceof SharedArrayBuffer)) {
    return new Uint8Array(input);
  }
  if (ArrayBuffer.isView(input)) return new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  throw new TypeError(expected);
}

// ---------------------------------------------------------------------------------------------
// encode plans

function byteView(data, what) {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError(`${what} must be a TypedArray, DataView or ArrayBuffer`);
}

function push(buffers, bytes) {
  buffers.push(bytes);
  return buffers.length - 1;
}

function shapeOf(v, data, dtype) {
  if (v.shape === undefined || v.shape === null) {
    const lanes = dtype === 'complex64' || dtype === 'complex128' ? 2 : 1;
    const n = data instanceof ArrayBuffer ? data.byteLength : data.length;
    return [Math.floor(n / lanes)];
  }
  return Array.from(v.shape, Number);
}

function densePlan(v, buffers) {
  const data = v.data;
  const dtype = v.dtype ?? (data instanceof ArrayBuffer || data instanceof DataView ? 'uint8' : inferDtype(data));
  return { kind: 'dense', dtype, shape: shapeOf(v, data, dtype), b: push(buffers, byteView(data, 'data')) };
}

function quantizedPlan(v, buffers) {
  const f32 = (a) => byteView(a instanceof Float32Array ? a : Float32Array.from(a), 'scales');
  const schemes = { per_tensor: 0, per_channel: 1, per_group: 2 };
  const schemeCode = v.schemeCode ?? schemes[v.scheme];
  if (schemeCode === undefined) throw new TypeError(`unknown quantization scheme ${v.scheme}`);
  return {
    kind: 'quantized',
    qdtype: v.qdtype,
    shape: Array.from(v.shape, Number),
    schemeCode,
    axis: (Number(v.axis ?? 0) + 256) % 256,
    groupSize: Number(v.groupSize ?? 0),
    scales: push(buffers, f32(v.scales)),
    zeroPoints: push(buffers, f32(v.zeroPoints)),
    b: push(buffers, byteView(v.data, 'data')),
  };
}

function isDenseLike(v) {
  return (
    (ArrayBuffer.isView(v.data) || v.data instanceof ArrayBuffer) &&
    (v.shape === undefined || Array.isArray(v.shape)) &&
    (v.dtype === undefined || typeof v.dtype === 'string')
  );
}

function plan(v, buffers, depth) {
  if (depth > 64) throw new TensorlaneError('values nested deeper than 64 levels');
  if (v === null || typeof v !== 'object') throw new TypeError(`cannot encode ${typeof v}`);
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return densePlan({ data: v }, buffers);
  if (v instanceof Map) {
    return { kind: 'bundle', entries: Array.from(v, ([k, x]) => [String(k), plan(x, buffers, depth + 1)]) };
  }
  if (v instanceof Bundle || (v.kind === 'bundle' && Array.isArray(v.entries))) {
    return { kind: 'bundle', entries: v.entries.map(([k, x]) => [String(k), plan(x, buffers, depth + 1)]) };
  }
  switch (v.kind) {
    case 'dense':
      return densePlan(v, buffers);
    case 'quantized':
      return quantizedPlan(v, buffers);
    case 'string': {
      const enc = new TextEncoder();
      const parts = v.strings.map((s) => enc.encode(String(s)));
      const payload = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
      let at = 0;
      for (const p of parts) {
        payload.set(p, at);
        at += p.length;
      }
      return { kind: 'string', lengths: parts.map((p) => p.length), b: push(buffers, payload) };
    }
    case 'sparse': {
      const [i1, i2] = v.format === 'coo' ? [v.row, v.col] : [v.indices, v.indptr];
      if (!i1 || !i2) throw new TypeError(`sparse ${v.format} needs ${v.format === 'coo' ? 'row and col' : 'indices and indptr'}`);
      const idt = v.indexDtypes ?? [];
      return {
        kind: 'sparse',
        format: v.format,
        shape: Array.from(v.shape, Number),
        components: [
          densePlan({ data: v.data, dtype: v.dtype }, buffers),
          densePlan({ data: i1, dtype: idt[0] }, buffers),
          densePlan({ data: i2, dtype: idt[1] }, buffers),
        ],
      };
    }
    default:
      break;
  }
  if (v.kind === undefined && isDenseLike(v)) return densePlan(v, buffers);
  // A plain object is a bundle of its own enumerable entries.
  return { kind: 'bundle', entries: Object.entries(v).map(([k, x]) => [k, plan(x, buffers, depth + 1)]) };
}

function toPlainU8(b) {
  return b.constructor === Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

// ---------------------------------------------------------------------------------------------
// the API

/** Builds the public API over a backend. */
export function makeApi(backend) {
  if (!defaultBackend) defaultBackend = backend;

  function decode(input, options = {}) {
    const bytes = asBytes(input);
    let raw;
    try {
      raw = backend.decodeRaw(bytes, decodeBits(options), options.maxDecompressedBytes ?? -1);
    } catch (e) {
      rethrow(e);
    }
    const d = JSON.parse(raw.json);
    return build(d, bytes, raw.owned, options, backend);
  }

  function encode(value, options = {}) {
    const buffers = [];
    const p = {
      value: plan(value, buffers, 0),
      options: {
        integrity: !!options.integrity,
        compress: !!options.compress,
        alignment: options.alignment ?? 64,
        compressInContainers: options.compressInContainers ?? true,
        skipIncompressible: !!options.skipIncompressible,
        sparseIntegrity: !!options.sparseIntegrity,
      },
    };
    try {
      return toPlainU8(backend.encodeRaw(JSON.stringify(p), buffers));
    } catch (e) {
      rethrow(e);
    }
  }

  class StreamDecoder {
    #raw;
    constructor({ maxPacketBytes, maxBufferedBytes } = {}) {
      this.#raw = new backend.RawStreamDecoder(maxPacketBytes ?? -1, maxBufferedBytes ?? -1);
    }
    /** Adds received bytes (any chunking). */
    push(chunk) {
      try {
        this.#raw.push(asBytes(chunk));
      } catch (e) {
        rethrow(e);
      }
    }
    /** The next whole packet (a new Uint8Array), or null until enough bytes were pushed. */
    next() {
      let p;
      try {
        p = this.#raw.next();
      } catch (e) {
        rethrow(e);
      }
      return p === undefined || p === null ? null : toPlainU8(p);
    }
    /** Bytes held and not yet returned. */
    get buffered() {
      return this.#raw.buffered();
    }
    /** Yields every whole packet from an (async) iterable of chunks; throws on a partial tail. */
    async *packets(source) {
      for await (const chunk of source) {
        this.push(chunk);
        for (let p = this.next(); p !== null; p = this.next()) yield p;
      }
      if (this.buffered !== 0) {
        throw new TensorlaneError(`stream ended inside a packet (${this.buffered} bytes buffered)`);
      }
    }
  }

  /** Decodes every packet of an (async) iterable of chunks. */
  async function* decodeStream(source, options = {}) {
    const s = new StreamDecoder(options);
    for await (const p of s.packets(source)) yield decode(p, options);
  }

  /**
   * Writes a `.zt` v2 file and returns its bytes (canonical form unless `{canonical: false}`).
   * `entries`: an object, a Map or an array of [name, value]; a value is a TypedArray (1-D), a
   * dense `{dtype?, shape?, data}`, or `{layout, shape, attributes?, parts: {name: {dtype, type?,
   * data}}}`. `options.attributes` sets file attributes (JSON values). Read it back with open().
   */
  function writeZt(entries, options = {}) {
    const list = entries instanceof Map ? [...entries] : Array.isArray(entries) ? entries : Object.entries(entries);
    const buffers = [];
    const buf = (data) => buffers.push(data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength)) - 1;
    const objects = list.map(([name, v]) => {
      if (ArrayBuffer.isView(v)) v = { data: v };
      if (v.parts) {
        const parts = Object.entries(v.parts).map(([pn, p]) => ({ name: pn, dtype: p.dtype ?? inferDtype(p.data), type: p.type, buf: buf(p.data) }));
        return { name, shape: v.shape, layout: v.layout ?? 'dense', attributes: v.attributes, parts };
      }
      const dtype = v.dtype ?? inferDtype(v.data);
      const per = (DTYPES[dtype]?.BYTES_PER_ELEMENT ?? 1) * (dtype === 'complex64' || dtype === 'complex128' ? 2 : 1);
      const shape = v.shape ?? [v.data.byteLength / per];
      return { name, shape, layout: 'dense', attributes: v.attributes, parts: [{ name: 'data', dtype, buf: buf(v.data) }] };
    });
    try {
      return toPlainU8(backend.ztWriteRaw(JSON.stringify({ canonical: options.canonical ?? true, attributes: options.attributes, objects }), buffers));
    } catch (e) {
      throw new TensorlaneError(`writeZt: ${e?.message ?? e}`, { cause: e });
    }
  }

  return {
    decode,
    encode,
    StreamDecoder,
    decodeStream,
    writeZt,
    widen,
    Bundle,
    Quantized,
    TensorlaneError,
    DTYPES,
    /** Input bytes the last decode copied into wasm memory (always 0 for the addon). */
    copiedBytes: () => backend.copiedBytes(),
    backend: backend.name,
  };
}
