// The `maxTensorBytes` option of open()/tensor()/dequantize() on both backends (issue 15): a
// whole-tensor read that would allocate more than the limit is refused with a TensorlaneError of
// kind 'limit' naming the tensor, the size and the option, before the bytes are allocated (the
// core's ReadLimits through the bindings, for the addon's native host and the byte-range session
// alike); under the limit the same read gives the same bytes as without one. A generated .npz
// bomb (one deflated member whose npy header declares uint8[64 MiB], 64 KiB on disk) opened from
// a Blob: tensor() is refused by a low limit, while stats() inflates it in slices and counts every
// zero.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openAsBlob, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { crc32, deflateRawSync } from 'node:zlib';
import { DATA, data, loadBackends, sha256 } from './_helpers.mjs';

const FIXTURES = data(new URL('fixtures/', DATA));
const NPZ = fileURLToPath(new URL('sample_compressed.npz', FIXTURES));
const SAFETENSORS = fileURLToPath(new URL('sample.safetensors', FIXTURES));
const backends = await loadBackends();

/**
 * The limit error: kind 'limit', the tensor named, the option in the message, and the size the
 * whole read needs (at least `bytes`: an inflated member counts its .npy header too), returned.
 */
async function limitError(promise, name, bytes) {
  let err;
  await assert.rejects(promise, (e) => (err = e) !== undefined);
  assert.equal(err.name, 'TensorlaneError', err.stack);
  assert.equal(err.kind, 'limit', err.message);
  assert.equal(err.tensor, name);
  assert.ok(err.message.includes(`'${name}'`), err.message);
  assert.match(err.message, /maxTensorBytes/);
  const needs = Number(/needs (\d+) bytes/.exec(err.message)?.[1]);
  assert.ok(needs >= bytes && needs < bytes + 4096, `${err.message} (tensor of ${bytes} bytes)`);
  return needs;
}

/** A `.npy` header for `uint8[n]` (version 1.0, padded to 64 bytes). */
function npyHeaderU8(n) {
  let dict = `{'descr': '|u1', 'fortran_order': False, 'shape': (${n},), }`;
  const pad = 64 - ((10 + dict.length + 1) % 64);
  dict += ' '.repeat(pad % 64) + '\n';
  const out = Buffer.alloc(10 + dict.length);
  out.set([0x93, ...Buffer.from('NUMPY'), 1, 0]);
  out.writeUInt16LE(dict.length, 8);
  out.write(dict, 10, 'latin1');
  return out;
}

/** An .npz of one deflated member `name` holding `content`, built as Python's zipfile does. */
function npzOf(name, content) {
  const raw = deflateRawSync(content, { level: 9 });
  const fname = Buffer.from(name);
  const crc = crc32(content);
  const local = Buffer.alloc(30);
  local.writeUInt32LE(0x04034b50, 0);
  local.writeUInt16LE(20, 4);
  local.writeUInt16LE(8, 8); // deflate
  local.writeUInt32LE(crc, 14);
  local.writeUInt32LE(raw.length, 18);
  local.writeUInt32LE(content.length, 22);
  local.writeUInt16LE(fname.length, 26);
  const central = Buffer.alloc(46);
  central.writeUInt32LE(0x02014b50, 0);
  central.writeUInt16LE(20, 4);
  central.writeUInt16LE(20, 6);
  central.writeUInt16LE(8, 10);
  central.writeUInt32LE(crc, 16);
  central.writeUInt32LE(raw.length, 20);
  central.writeUInt32LE(content.length, 24);
  central.writeUInt16LE(fname.length, 28);
  central.writeUInt32LE(0, 42); // local header at 0
  const cdOffset = local.length + fname.length + raw.length;
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(1, 8);
  end.writeUInt16LE(1, 10);
  end.writeUInt32LE(central.length + fname.length, 12);
  end.writeUInt32LE(cdOffset, 16);
  return Buffer.concat([local, fname, raw, central, fname, end]);
}

const BOMB_N = 64 << 20;
const bomb = npzOf('bomb.npy', Buffer.concat([npyHeaderU8(BOMB_N), Buffer.alloc(BOMB_N)]));

for (const { name: backend, api } of backends) {
  test(`${backend}: maxTensorBytes refuses a deflated npz tensor over it from a path, bytes and a Blob`, async () => {
    const bytes = new Uint8Array(readFileSync(NPZ));
    const plain = api.open(bytes);
    const want = sha256(plain.tensor('a'));
    const n = plain.tensor('a').byteLength;
    assert.ok(n > 8, `tensor 'a' has ${n} bytes`);
    const opened = [
      ['path', api.open(NPZ, { maxTensorBytes: 8 })],
      ['bytes', api.open(bytes, { maxTensorBytes: 8 })],
      ['Blob', await api.open(new Blob([bytes]), { maxTensorBytes: 8 })],
    ];
    for (const [how, r] of opened) {
      // open()'s limit applies to every read; a call's own limit replaces it.
      const needs = await limitError(async () => r.tensor('a'), 'a', n);
      await limitError(async () => r.dequantize('a'), 'a', n);
      assert.equal(sha256(await r.tensor('a', { maxTensorBytes: needs })), want, how);
      assert.equal((await r.dequantize('a', { maxTensorBytes: needs })).length, n / plain.tensor('a').BYTES_PER_ELEMENT, how);
      await limitError(async () => r.tensor('a', { maxTensorBytes: needs - 1 }), 'a', n);
      // stats() reads in slices and is not limited.
      const s = await r.stats('a');
      assert.equal(s.count, plain.info('a').shape.reduce((x, y) => x * y, 1), how);
    }
    // The default (4 GiB) reads it, and a bad limit is a RangeError.
    assert.equal(sha256(api.open(NPZ).tensor('a')), want);
    assert.throws(() => api.open(bytes, { maxTensorBytes: -1 }), RangeError);
    assert.throws(() => plain.tensor('a', { maxTensorBytes: 1.5 }), RangeError);
  });

  test(`${backend}: maxTensorBytes limits a Blob slice of a zero-copy tensor, not a view on bytes`, async () => {
    const bytes = new Uint8Array(readFileSync(SAFETENSORS));
    const viewed = api.open(bytes, { maxTensorBytes: 1 });
    const big = viewed.tensors.find((t) => t.layout.zeroCopy && t.layout.length > 1);
    assert.ok(big, 'a zero-copy tensor of more than one byte');
    const want = sha256(viewed.tensor(big.name));
    const r = await api.open(await openAsBlob(SAFETENSORS), { maxTensorBytes: 1 });
    await limitError(r.tensor(big.name), big.name, big.layout.length);
    assert.equal(sha256(await r.tensor(big.name, { maxTensorBytes: big.layout.length })), want);
  });

  test(`${backend}: an npz bomb from a Blob: tensor() refused by the limit, stats() streams`, async () => {
    assert.ok(bomb.length < 256 << 10, `the bomb is ${bomb.length} bytes`);
    const r = await api.open(new Blob([bomb]), { maxTensorBytes: 1 << 20 });
    const t = r.info('bomb');
    assert.deepEqual([t.dtype, t.shape, t.layout.storage], ['uint8', [BOMB_N], 'deflate']);
    await limitError(r.tensor('bomb'), 'bomb', BOMB_N);
    const s = await r.stats('bomb', { bins: 4 });
    assert.deepEqual([s.count, s.finite, s.zeros, s.min, s.max, s.mean, s.nan], [BOMB_N, BOMB_N, BOMB_N, 0, 0, 0, 0]);
    // The session held the compressed member while it streamed, not the declared array.
    assert.ok(r.bytesRead < 1 << 20, `read ${r.bytesRead} bytes`);
  });
}
