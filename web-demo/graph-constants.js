// Small constant values of an ONNX graph, for drawing them inside the nodes as Netron does
// (`Div(B = 1.414)`, `Reshape(shape = [-1, 16])`, `Constant(value = [[0, 1, 2], [3, 4, 5]])`).
// Used by graph-worker.js, off the page's thread.
//
// - Initializers of at most MAX_VALUES elements: their values by the package's reader.values().
// - `Constant` nodes' `value` tensors (the core's graph reader gives only their type and shape):
//   read here from the ModelProto's bytes. Only the graph's nodes are walked (field 1 of
//   GraphProto, which writers put first); initializers and everything after the nodes are skipped
//   unread, and a node larger than MAX_NODE_BYTES is skipped, so a multi-GB model costs the bytes
//   of its node list, read in windows of WINDOW bytes.

/** Constants with at most this many elements are shown. */
export const MAX_VALUES = 8;
/** A node message larger than this is not read (a Constant with a small value is a few dozen bytes). */
const MAX_NODE_BYTES = 64 << 10;
/** Bytes read at a time while walking the node list. */
const WINDOW = 256 << 10;
/** The walk stops after this many bytes of nodes (a graph's node list is rarely past a few MiB). */
const MAX_WALK_BYTES = 64 << 20;

/** ONNX TensorProto.DataType -> [name, bytes per element, DataView getter] for raw_data. */
const RAW = {
  1: ['float', 4, (v, o) => v.getFloat32(o, true)],
  2: ['uint8', 1, (v, o) => v.getUint8(o)],
  3: ['int8', 1, (v, o) => v.getInt8(o)],
  4: ['uint16', 2, (v, o) => v.getUint16(o, true)],
  5: ['int16', 2, (v, o) => v.getInt16(o, true)],
  6: ['int32', 4, (v, o) => v.getInt32(o, true)],
  7: ['int64', 8, (v, o) => Number(v.getBigInt64(o, true))],
  9: ['bool', 1, (v, o) => (v.getUint8(o) ? 1 : 0)],
  11: ['double', 8, (v, o) => v.getFloat64(o, true)],
  12: ['uint32', 4, (v, o) => v.getUint32(o, true)],
  13: ['uint64', 8, (v, o) => Number(v.getBigUint64(o, true))],
};

/** A value as short text: integers as they are, others to 4 significant digits. */
function num(x) {
  if (Number.isInteger(x)) return String(x);
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  return String(Number(x.toPrecision(4)));
}

/** `values` of a tensor of `shape` as text: a scalar bare, else nested brackets (`[[0, 1], [2, 3]]`). */
export function valuesText(values, shape) {
  const dims = (shape ?? []).map(Number);
  if (dims.length === 0) return num(values[0]);
  let at = 0;
  const nest = (d) => {
    const n = dims[d];
    const parts = [];
    for (let i = 0; i < n; i++) parts.push(d === dims.length - 1 ? num(values[at++]) : nest(d + 1));
    return `[${parts.join(', ')}]`;
  };
  return nest(0);
}

/** Reads `(offset, length)` of the source as a Uint8Array, in WINDOW-byte windows kept one at a time. */
function windowed(read, size) {
  let base = -1;
  let win = null;
  return async (offset, length) => {
    if (offset < 0 || offset + length > size) throw new RangeError(`bytes [${offset}, +${length}) are past the file's ${size} bytes`);
    if (win && offset >= base && offset + length <= base + win.byteLength) return win.subarray(offset - base, offset - base + length);
    if (length > WINDOW) return read(offset, length);
    base = offset;
    win = await read(offset, Math.min(WINDOW, size - offset));
    return win.subarray(0, length);
  };
}

/** A varint at `offset` of the source: [value, bytes]; values past 2^53 are approximated (lengths never are). */
async function varintAt(at, offset, end) {
  const b = await at(offset, Math.min(10, end - offset));
  let v = 0;
  let mul = 1;
  for (let i = 0; i < b.length; i++) {
    v += (b[i] & 0x7f) * mul;
    if (!(b[i] & 0x80)) return [v, i + 1];
    mul *= 128;
  }
  throw new Error(`a varint at byte ${offset} runs past its message`);
}

/** A varint in `buf` at `p`: [value, next position]. */
function varint(buf, p) {
  let v = 0;
  let mul = 1;
  for (;;) {
    if (p >= buf.length) throw new Error('a varint runs past its message');
    const c = buf[p++];
    v += (c & 0x7f) * mul;
    if (!(c & 0x80)) return [v, p];
    mul *= 128;
  }
}

/** The fields of a message in `buf`: [{number, wire, value, start, end}] (LEN: bytes [start, end)). */
function fields(buf) {
  const out = [];
  let p = 0;
  while (p < buf.length) {
    let key;
    [key, p] = varint(buf, p);
    const number = Math.floor(key / 8);
    const wire = key % 8;
    if (wire === 0) {
      let v;
      const s = p;
      [v, p] = varint(buf, p);
      out.push({ number, wire, value: v, start: s, end: p });
    } else if (wire === 1) {
      out.push({ number, wire, start: p, end: p + 8 });
      p += 8;
    } else if (wire === 5) {
      out.push({ number, wire, start: p, end: p + 4 });
      p += 4;
    } else if (wire === 2) {
      let n;
      [n, p] = varint(buf, p);
      out.push({ number, wire, start: p, end: p + n });
      p += n;
    } else throw new Error(`wire type ${wire} is not used by ONNX`);
    if (p > buf.length) throw new Error('a field runs past its message');
  }
  return out;
}

const text = (buf, f) => new TextDecoder().decode(buf.subarray(f.start, f.end));

/** Packed or single varints of repeated field `number` (signed 64-bit read as a Number). */
function varints(buf, list, number) {
  const out = [];
  for (const f of list) {
    if (f.number !== number) continue;
    if (f.wire === 0) out.push(f.value >= 2 ** 63 ? f.value - 2 ** 64 : f.value);
    else if (f.wire === 2) {
      for (let p = f.start; p < f.end; ) {
        let v;
        [v, p] = varint(buf, p);
        out.push(v >= 2 ** 63 ? v - 2 ** 64 : v);
      }
    }
  }
  return out;
}

/**
 * A TensorProto's values when it holds at most MAX_VALUES elements of a numeric type:
 * `{dtype, shape, values}`, else null (too large, external data, or a type not shown).
 */
export function smallTensor(buf) {
  const list = fields(buf);
  const shape = varints(buf, list, 1);
  const type = list.find((f) => f.number === 2)?.value ?? 0;
  const numel = shape.reduce((a, b) => a * b, 1);
  if (!(numel <= MAX_VALUES) || list.some((f) => f.number === 13 || f.number === 14)) return null; // external data
  const raw = list.find((f) => f.number === 9);
  let values = null;
  if (raw) {
    const r = RAW[type];
    if (!r || raw.end - raw.start !== numel * r[1]) return null;
    const view = new DataView(buf.buffer, buf.byteOffset + raw.start, raw.end - raw.start);
    values = Array.from({ length: numel }, (_, i) => r[2](view, i * r[1]));
  } else if (type === 1) {
    // float_data (4): packed fixed32, or one fixed32 a field.
    values = [];
    for (const f of list.filter((x) => x.number === 4)) {
      const view = new DataView(buf.buffer, buf.byteOffset + f.start, f.end - f.start);
      for (let o = 0; o + 4 <= f.end - f.start; o += 4) values.push(view.getFloat32(o, true));
    }
  } else if (type === 11) {
    values = [];
    for (const f of list.filter((x) => x.number === 10)) {
      const view = new DataView(buf.buffer, buf.byteOffset + f.start, f.end - f.start);
      for (let o = 0; o + 8 <= f.end - f.start; o += 8) values.push(view.getFloat64(o, true));
    }
  } else if (type === 7) values = varints(buf, list, 7);
  else if ([2, 3, 4, 5, 6, 9].includes(type)) values = varints(buf, list, 5).map((v) => (v >= 2 ** 31 ? v - 2 ** 32 : v));
  else if (type === 12 || type === 13) values = varints(buf, list, 11);
  else return null;
  if (values.length !== numel) return null;
  return { dtype: RAW[type]?.[0] ?? String(type), shape, values };
}

/**
 * The `value` tensors of the graph's `Constant` nodes with at most MAX_VALUES elements, by node
 * index (the position in GraphProto.node, as the core's graph reader numbers them): Map(index ->
 * {dtype, shape, values}). `read(offset, length)` resolves to those bytes of the ONNX file of
 * `size` bytes.
 */
export async function constantNodes(read, size) {
  const at = windowed(read, size);
  const out = new Map();
  // ModelProto: find graph (7).
  let p = 0;
  let graph = null;
  while (p < size) {
    const [key, n] = await varintAt(at, p, size);
    p += n;
    const wire = key % 8;
    if (wire === 2) {
      const [len, m] = await varintAt(at, p, size);
      p += m;
      if (Math.floor(key / 8) === 7) {
        graph = [p, p + len];
        break;
      }
      p += len;
    } else if (wire === 0) p += (await varintAt(at, p, size))[1];
    else if (wire === 1) p += 8;
    else if (wire === 5) p += 4;
    else throw new Error(`byte ${p}: wire type ${wire} is not used by ONNX`);
  }
  if (!graph) return out;
  let [q, end] = graph;
  if (end > size) throw new Error(`the graph runs past the end of the file (${end} > ${size} bytes)`);
  let index = 0;
  let seenNodes = false;
  while (q < end && q - graph[0] < MAX_WALK_BYTES) {
    const [key, n] = await varintAt(at, q, end);
    q += n;
    const number = Math.floor(key / 8);
    if (key % 8 !== 2) {
      // The node list is over once another field comes (writers put GraphProto.node first).
      if (seenNodes) break;
      q += key % 8 === 0 ? (await varintAt(at, q, end))[1] : key % 8 === 1 ? 8 : 4;
      continue;
    }
    const [len, m] = await varintAt(at, q, end);
    q += m;
    if (number !== 1) {
      if (seenNodes) break;
      q += len;
      continue;
    }
    seenNodes = true;
    if (len <= MAX_NODE_BYTES) {
      const node = await at(q, len);
      const list = fields(node);
      const op = list.find((f) => f.number === 4);
      if (op && text(node, op) === 'Constant') {
        for (const a of list.filter((f) => f.number === 5)) {
          const attr = node.subarray(a.start, a.end);
          const af = fields(attr);
          const name = af.find((f) => f.number === 1);
          const t = af.find((f) => f.number === 5);
          if (name && t && text(attr, name) === 'value') {
            const v = smallTensor(attr.subarray(t.start, t.end));
            if (v) out.set(index, v);
          }
        }
      }
    }
    q += len;
    index++;
  }
  return out;
}
