// Views vs copies: decoded TypedArrays share the caller's ArrayBuffer when aligned, copy otherwise,
// and (wasm) never point into wasm memory, so memory growth cannot detach them.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadBackends, shifted, sha256, hex } from './_helpers.mjs';

const backends = await loadBackends();

for (const { name, api } of backends) {
  describe(`${name} backend: views`, () => {
    it('an aligned dense body is a view on the input ArrayBuffer', () => {
      const values = Float32Array.from({ length: 1000 }, (_, i) => i * 0.5);
      const packet = api.encode({ dtype: 'float32', shape: [10, 100], data: values });
      const r = api.decode(packet);
      assert.equal(r.copied, false);
      assert.ok(r.data instanceof Float32Array);
      assert.equal(r.data.buffer, packet.buffer);
      assert.equal(r.data.byteOffset, 64);
      assert.deepEqual(r.data, values);
      packet[64] ^= 0xff; // writes through the input are visible through the view
      assert.notEqual(r.data[0], values[0]);
    });

    it('a view honours the input byteOffset; a misaligned one is a copy', () => {
      const values = Float64Array.from([1.5, -2.25, 3, 1e300]);
      const packet = api.encode({ data: values });
      const at8 = shifted(packet, 8);
      const r8 = api.decode(at8);
      assert.equal(r8.copied, false);
      assert.equal(r8.data.buffer, at8.buffer);
      assert.equal(r8.data.byteOffset, 8 + 64);
      for (const shift of [1, 3, 4]) {
        const mis = shifted(packet, shift);
        const r = api.decode(mis);
        assert.equal(r.copied, true, `shift ${shift}`);
        assert.notEqual(r.data.buffer, mis.buffer);
        assert.ok(r.data instanceof Float64Array);
        assert.deepEqual(r.data, values);
      }
    });

    it('accepts ArrayBuffer and Buffer inputs', () => {
      const packet = api.encode({ data: Int32Array.from([1, 2, 3]) });
      const ab = packet.slice().buffer;
      const r = api.decode(ab);
      assert.equal(r.data.buffer, ab);
      const buf = Buffer.from(packet);
      assert.deepEqual(Array.from(api.decode(buf).data), [1, 2, 3]);
    });

    it('float16 and bfloat16 are raw Uint16Array bits unless widened', () => {
      const f16 = Uint16Array.from([0x3c00, 0xc000, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0x8000, 0x3555]);
      const bf16 = Uint16Array.from([0x3f80, 0xbfc0, 0x3e80, 0x7f80]);
      const a = api.decode(api.encode({ dtype: 'float16', data: f16 }));
      assert.ok(a.data instanceof Uint16Array);
      assert.equal(a.copied, false);
      const w = api.decode(api.encode({ dtype: 'float16', data: f16 }), { widen: true });
      assert.ok(w.data instanceof Float32Array);
      assert.equal(w.copied, true);
      assert.deepEqual(Array.from(w.data), [1, -2, 2 ** -24, Infinity, -Infinity, NaN, -0, 0.333251953125]);
      const b = api.decode(api.encode({ dtype: 'bfloat16', data: bf16 }), { widen: true });
      assert.deepEqual(Array.from(b.data), [1, -1.5, 0.25, Infinity]);
    });

    it('complex is interleaved floats; bool is Uint8Array; 64-bit ints are BigInt arrays', () => {
      const c = api.decode(api.encode({ dtype: 'complex64', shape: [2], data: Float32Array.from([1, 2, 3, 4]) }));
      assert.ok(c.data instanceof Float32Array);
      assert.equal(c.data.length, 4);
      assert.deepEqual(c.shape, [2]);
      const b = api.decode(api.encode({ dtype: 'bool', data: Uint8Array.from([1, 0, 1]) }));
      assert.equal(b.dtype, 'bool');
      assert.ok(b.data instanceof Uint8Array);
      const i = api.decode(api.encode({ data: BigInt64Array.from([-1n, 2n ** 62n]) }));
      assert.equal(i.dtype, 'int64');
      assert.deepEqual(Array.from(i.data), [-1n, 2n ** 62n]);
    });

    it('compressed bodies are copies', () => {
      const values = new Float32Array(4096).fill(1.25);
      const r = api.decode(api.encode({ data: values }, { compress: true }));
      assert.equal(r.copied, true);
      assert.deepEqual(r.data, values);
    });

    it('errors carry the byte offset', () => {
      const packet = api.encode({ data: new Float32Array(8) }, { integrity: true });
      packet[70] ^= 1;
      assert.throws(() => api.decode(packet), (e) => e instanceof api.TensorlaneError && e.offset === 64 + 32 && /at byte 96/.test(e.message));
      assert.throws(() => api.decode(new Uint8Array(3)), (e) => e.offset === 3);
    });
  });
}

const wasm = backends.find((b) => b.name === 'wasm')?.api;

describe('wasm backend: what crosses into wasm memory', { skip: !wasm && 'wasm backend not under test' }, () => {
  it('a large dense packet copies only its header into wasm memory', () => {
    const packet = wasm.encode({ data: new Float32Array(1 << 18).fill(3) }); // 1 MiB body
    const r = wasm.decode(packet);
    assert.equal(r.data.buffer, packet.buffer);
    assert.ok(wasm.copiedBytes() <= 256, `copied ${wasm.copiedBytes()}`);
    const b = wasm.encode({ a: { data: new Float32Array(1 << 16) }, b: { data: new Uint8Array(1 << 20) } });
    wasm.decode(b);
    assert.ok(wasm.copiedBytes() < 1024, `bundle copied ${wasm.copiedBytes()}`);
  });

  it('views stay valid across wasm memory growth (they are over JS memory)', () => {
    const memory = wasm.wasmMemory();
    const before = memory.buffer.byteLength;
    const kept = [];
    for (let i = 0; i < 64; i++) {
      const values = Int32Array.from({ length: 4096 }, (_, j) => i * 4096 + j);
      const packet = wasm.encode({ dtype: 'int32', shape: [64, 64], data: values });
      const r = wasm.decode(packet);
      assert.equal(r.data.buffer, packet.buffer);
      kept.push([r.data, sha256(values)]);
    }
    // Force growth: decompressing 16 MiB bodies allocates inside wasm memory.
    for (let i = 0; i < 4; i++) {
      const big = wasm.decode(wasm.encode({ data: new Uint8Array(16 << 20).fill(i) }, { compress: true }));
      assert.equal(big.copied, true);
      assert.equal(big.data[12345], i);
    }
    assert.ok(memory.buffer.byteLength > before, `wasm memory grew (${before} -> ${memory.buffer.byteLength})`);
    for (const [view, digest] of kept) {
      assert.equal(view.length, 4096, 'not detached');
      assert.notEqual(view.buffer, memory.buffer);
      assert.equal(sha256(view), digest);
    }
    assert.ok(hex(kept[0][0]).startsWith('00000000'));
  });
});
