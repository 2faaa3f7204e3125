// Minimal safetensors and GGUF writers for the lazy-open tests (Node and Chromium): large files
// whose headers are small, so a reader that fetches only what it needs reads a tiny part of them.
// Not a test file itself.

import { closeSync, ftruncateSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const enc = new TextEncoder();

function u32(n) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, true);
  return b;
}
function u64(n) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(n), true);
  return b;
}
function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/**
 * A safetensors file: `tensors` is [[name, {dtype (ST name), shape, data: Uint8Array}]] in data
 * order; `metadata` goes to `__metadata__`. Returns the bytes.
 */
export function safetensorsFile(tensors, metadata) {
  const header = {};
  if (metadata) header.__metadata__ = metadata;
  let at = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.data.byteLength] };
    at += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  return concat([u64(json.length), enc.encode(json), ...tensors.map(([, t]) => t.data)]);
}

const GGUF_TYPES = { UINT16: 2, UINT32: 4, INT32: 5, STRING: 8, ARRAY: 9 };

function ggufString(s) {
  const b = enc.encode(s);
  return concat([u64(b.byteLength), b]);
}

/**
 * A GGUF v3 file. `kv`: [[key, {type: 'UINT16' | 'UINT32' | 'INT32' | 'STRING', value}] | [key, {type: 'ARRAY',
 * item: 'STRING', value: [...]}]]; `tensors`: [[name, {type (ggml id), ne (fastest first), data}]].
 * Tensor data is aligned to 32 bytes. Returns the bytes.
 */
export function ggufFile(kv, tensors) {
  const parts = [enc.encode('GGUF'), u32(3), u64(tensors.length), u64(kv.length)];
  for (const [key, v] of kv) {
    parts.push(ggufString(key), u32(GGUF_TYPES[v.type]));
    if (v.type === 'UINT32' || v.type === 'INT32') parts.push(u32(v.value));
    else if (v.type === 'UINT16') parts.push(new Uint8Array([v.value & 0xff, v.value >> 8]));
    else if (v.type === 'STRING') parts.push(ggufString(v.value));
    else {
      parts.push(u32(GGUF_TYPES[v.item]), u64(v.value.length));
      for (const x of v.value) parts.push(v.item === 'STRING' ? ggufString(x) : u32(x));
    }
  }
  let offset = 0;
  const data = [];
  for (const [name, t] of tensors) {
    parts.push(ggufString(name), u32(t.ne.length), ...t.ne.map(u64), u32(t.type), u64(offset));
    const pad = (32 - (t.data.byteLength % 32)) % 32;
    data.push(t.data, new Uint8Array(pad));
    offset += t.data.byteLength + pad;
  }
  const head = concat(parts);
  return concat([head, new Uint8Array((32 - (head.byteLength % 32)) % 32), ...data]);
}

/** float32 -> float16 bits (round to nearest even; values in the normal range). */
export function f16(v) {
  const f = new Float32Array([v]);
  const x = new Uint32Array(f.buffer)[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = ((x >>> 23) & 0xff) - 127 + 15;
  if (v === 0) return sign;
  let mant = (x >>> 13) & 0x3ff;
  const rest = x & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && mant & 1)) mant++;
  return sign | ((exp << 10) + mant);
}

/**
 * `nblocks` Q8_0 blocks (f16 scale + 32 int8) and the float32 values gguf.quants.dequantize gives
 * for them (scale, widened to float32, times each int8).
 */
export function q8_0(nblocks) {
  const bytes = new Uint8Array(nblocks * 34);
  const dv = new DataView(bytes.buffer);
  const values = new Float32Array(nblocks * 32);
  const widen = (h) => {
    const e = (h >> 10) & 0x1f, m = h & 0x3ff, s = h & 0x8000 ? -1 : 1;
    return s * (e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15));
  };
  for (let b = 0; b < nblocks; b++) {
    const d = f16(0.01 * (b + 1));
    dv.setUint16(b * 34, d, true);
    for (let i = 0; i < 32; i++) {
      const q = ((b * 32 + i) % 255) - 127;
      dv.setInt8(b * 34 + 2 + i, q);
      values[b * 32 + i] = Math.fround(Math.fround(widen(d)) * q);
    }
  }
  return { bytes, values };
}

/**
 * The two big test models: `big.safetensors` (a 64 MiB float32 matrix and two small tensors) and
 * `big.gguf` (a tokenizer-sized string array of metadata, a 64 MiB F32 matrix, a small Q8_0
 * tensor). Returns {safetensors, gguf, expect}.
 */
export function bigModels() {
  const side = 4096;
  const big = new Uint8Array(side * side * 4);
  const bias = new Float32Array([1, 2, 3, 4]);
  const half = new Uint16Array([f16(1.5), f16(-2), f16(0.25)]);
  const safetensors = safetensorsFile(
    [
      ['bias', { dtype: 'F32', shape: [4], data: new Uint8Array(bias.buffer) }],
      ['half', { dtype: 'F16', shape: [3], data: new Uint8Array(half.buffer.slice(0)) }],
      ['weight', { dtype: 'F32', shape: [side, side], data: big }],
    ],
    { format: 'pt', producer: 'tensorlane tests' },
  );
  const tokens = Array.from({ length: 10000 }, (_, i) => `token-${i}`);
  const q = q8_0(8);
  const gguf = ggufFile(
    [
      ['general.architecture', { type: 'STRING', value: 'llama' }],
      ['general.alignment', { type: 'UINT32', value: 32 }],
      ['tokenizer.ggml.tokens', { type: 'ARRAY', item: 'STRING', value: tokens }],
    ],
    [
      ['blk.0.ffn.weight', { type: 8, ne: [64, 4], data: q.bytes }],
      ['token_embd.weight', { type: 0, ne: [side, side], data: big }],
      ['output_norm.weight', { type: 0, ne: [4], data: new Uint8Array(bias.buffer) }],
    ],
  );
  return { safetensors, gguf, expect: { side, bias: [...bias], half: [1.5, -2, 0.25], q8: q.values, tokens: tokens.length } };
}

/** A GGUF model split in two (as llama-gguf-split names and tags the parts): [[file name, bytes]]. */
export function ggufSplits(prefix = 'model') {
  const a = new Float32Array([1, 2, 3, 4]);
  const b = new Float32Array([5, 6, 7, 8, 9, 10]);
  const tags = (no) => [
    ['split.no', { type: 'UINT16', value: no }],
    ['split.count', { type: 'UINT16', value: 2 }],
    ['split.tensors.count', { type: 'INT32', value: 2 }],
  ];
  return [
    [`${prefix}-00001-of-00002.gguf`, ggufFile([['general.architecture', { type: 'STRING', value: 'llama' }], ...tags(0)], [['a', { type: 0, ne: [4], data: new Uint8Array(a.buffer) }]])],
    [`${prefix}-00002-of-00002.gguf`, ggufFile(tags(1), [['b', { type: 0, ne: [3, 2], data: new Uint8Array(b.buffer) }]])],
  ];
}

/** A sparse safetensors file of about `gb` GB (truncate: no data blocks written): its path and header length. */
export function sparseSafetensors(dir, gb = 50) {
  const header = {};
  const each = 1 << 30; // 1 GiB float32 tensors
  let at = 0;
  const n = Math.ceil((gb * 1e9) / each);
  for (let i = 0; i < n; i++) {
    header[`model.layers.${i}.weight`] = { dtype: 'F32', shape: [each / 4 / 1024, 1024], data_offsets: [at, at + each] };
    at += each;
  }
  header['model.norm.weight'] = { dtype: 'F32', shape: [4], data_offsets: [at, at + 16] };
  at += 16;
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const file = join(dir, 'sparse-50gb.safetensors');
  const fd = openSync(file, 'w');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, len, 0, 8, 0);
  writeSync(fd, Buffer.from(json), 0, json.length, 8);
  writeSync(fd, Buffer.from(new Float32Array([1, 2, 3, 4]).buffer), 0, 16, 8 + json.length + at - 16);
  ftruncateSync(fd, 8 + json.length + at);
  closeSync(fd);
  return { file, size: 8 + json.length + at, headerBytes: 8 + json.length, tensors: n + 1 };
}
