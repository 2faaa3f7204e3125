// encode -> decode round trips for every dtype and kind; re-encoding golden vectors gives tenso's
// exact bytes; both backends encode identically.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { data, VECTORS, loadBackends, vectorCases, producedOptions, hex, plain } from './_helpers.mjs';

data(VECTORS);
const backends = await loadBackends();

function sample(dtype, n) {
  const bytes = new Uint8Array(n * { complex64: 8, complex128: 16, float64: 8, int64: 8, uint64: 8, float32: 4, int32: 4, uint32: 4, float16: 2, bfloat16: 2, int16: 2, uint16: 2 }[dtype] || n);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 37 + 11) & 0xff;
  if (dtype === 'bool') bytes.forEach((_, i) => (bytes[i] = i % 3 === 0 ? 1 : 0));
  return bytes;
}

const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'bool', 'complex64', 'complex128'];
const OPTIONS = [{}, { integrity: true }, { compress: true }, { compress: true, integrity: true }, { alignment: 1 }, { alignment: 16, integrity: true }, { alignment: 4096 }];

for (const { name, api } of backends) {
  describe(`${name} backend: round trips`, () => {
    for (const dtype of DTYPES) {
      it(`dense ${dtype} with every option set`, () => {
        for (const shape of [[0], [], [7], [3, 5], [2, 0, 4], [2, 3, 1, 2]]) {
          const n = shape.reduce((a, b) => a * b, 1);
          const raw = sample(dtype, n);
          const data = new api.DTYPES[dtype](raw.buffer);
          for (const o of OPTIONS) {
            const packet = api.encode({ dtype, shape, data }, o);
            const r = api.decode(packet);
            assert.equal(r.kind, 'dense');
            assert.equal(r.dtype, dtype);
            assert.deepEqual(r.shape, shape);
            assert.ok(r.data instanceof api.DTYPES[dtype]);
            assert.equal(hex(r.data), hex(raw), `${dtype} ${JSON.stringify(shape)} ${JSON.stringify(o)}`);
            assert.deepEqual(api.encode(r, o), packet, 'decode -> encode reproduces the packet');
          }
        }
      });
    }

    it('dtype and shape are inferred from a bare TypedArray', () => {
      for (const [arr, dtype] of [[new Float32Array(3), 'float32'], [new BigUint64Array(2), 'uint64'], [new Int8Array(5), 'int8']]) {
        const r = api.decode(api.encode(arr));
        assert.equal(r.dtype, dtype);
        assert.deepEqual(r.shape, [arr.length]);
        assert.equal(api.decode(api.encode({ data: arr })).dtype, dtype);
      }
    });

    it('bundles: plain objects, Maps, nesting, order, decoded bundles', () => {
      const value = {
        w: { dtype: 'float32', shape: [2, 2], data: Float32Array.from([1, 2, 3, 4]) },
        nested: new Map([['b', Int16Array.from([-1, 1])], ['a', { s: { kind: 'string', strings: ['x', 'ÿ', ''] } }]]),
        '': Uint8Array.from([9]),
      };
      for (const o of [{}, { integrity: true }, { compress: true }, { alignment: 8 }]) {
        const packet = api.encode(value, o);
        const r = api.decode(packet);
        assert.ok(r instanceof api.Bundle);
        assert.deepEqual(r.keys(), ['w', 'nested', '']);
        assert.deepEqual(Array.from(r.get('w').data), [1, 2, 3, 4]);
        assert.deepEqual(r.get('nested').keys(), ['b', 'a']);
        assert.deepEqual(r.get('nested').get('a').get('s').strings, ['x', 'ÿ', '']);
        assert.deepEqual(api.encode(r, o), packet);
        assert.equal(r.toObject().w, r.get('w'));
      }
      assert.deepEqual(api.decode(api.encode({})).entries, []);
    });

    it('sparse coo / csr / csc', () => {
      const cases = [
        { kind: 'sparse', format: 'coo', shape: [3, 4], data: Float32Array.from([1, 2]), row: Int32Array.from([0, 2]), col: Int32Array.from([3, 1]) },
        { kind: 'sparse', format: 'csr', shape: [2, 3], data: Float64Array.from([5, 6, 7]), indices: BigInt64Array.from([0n, 2n, 1n]), indptr: BigInt64Array.from([0n, 2n, 3n]) },
        { kind: 'sparse', format: 'csc', shape: [2, 2], dtype: 'float16', data: Uint16Array.from([0x3c00]), indices: Int32Array.from([1]), indptr: Int32Array.from([0, 0, 1]), indexDtypes: ['int32', 'int32'] },
      ];
      for (const s of cases) {
        const packet = api.encode(s);
        const r = api.decode(packet);
        assert.equal(r.format, s.format);
        assert.deepEqual(r.shape, s.shape);
        for (const k of s.format === 'coo' ? ['data', 'row', 'col'] : ['data', 'indices', 'indptr']) assert.equal(hex(r[k]), hex(s[k]), k);
        assert.deepEqual(api.encode(r), packet);
      }
      assert.throws(() => api.decode(api.encode({ ...cases[0], row: Int32Array.from([0, 7]) })), /outside/);
    });

    it('quantized: decode -> encode is exact; dequantize uses float32 arithmetic', () => {
      const q = {
        kind: 'quantized', qdtype: 'qint8', shape: [2, 2], scheme: 'per_channel', axis: 0, groupSize: 0,
        scales: Float32Array.from([0.5, 0.25]), zeroPoints: Float32Array.from([0, 1]), data: Int8Array.from([2, -2, 5, 1]),
      };
      const packet = api.encode(q);
      const r = api.decode(packet);
      assert.deepEqual(Array.from(r.dequantize()), [1, -1, 1, 0]);
      assert.deepEqual(api.encode(r), packet);
      assert.deepEqual(api.encode(q, { integrity: true }).length, packet.length + 8);
      assert.throws(() => api.decode(api.encode({ ...q, scales: Float32Array.from([1]), zeroPoints: Float32Array.from([0]) })).dequantize(), /scales/);
    });

    it('strings', () => {
      for (const strings of [[], [''], ['hello', 'wörld', '🎉', 'a\u0000b']]) {
        for (const o of [{}, { integrity: true }]) {
          const r = api.decode(api.encode({ kind: 'string', strings }, o));
          assert.deepEqual(r, { kind: 'string', strings });
        }
      }
    });

    it('encode errors are TensorlaneErrors with the core message', () => {
      assert.throws(() => api.encode({ dtype: 'float32', shape: [3], data: new Float32Array(2) }), (e) => e instanceof api.TensorlaneError && /need 12/.test(e.message));
      assert.throws(() => api.encode({ dtype: 'float128', data: new Float32Array(2) }), /unknown dtype/);
      assert.throws(() => api.encode({ data: new Float32Array(1) }, { alignment: 3 }), /power of two/);
      assert.throws(() => api.encode(42), TypeError);
    });

    describe('golden vectors re-encode to identical bytes', () => {
      for (const c of vectorCases('.')) {
        const exact = c.meta.reference_encoder_byte_exact === true;
        const compressed = (c.meta.header.flags & 4) !== 0;
        if (!exact && !compressed) continue;
        it(c.name + (exact ? '' : ' (compressed: lz4_flex frame, byte-exact with the std feature)'), () => {
          const input = c.bytes();
          const again = api.encode(api.decode(input), producedOptions(c.meta));
          assert.equal(Buffer.compare(Buffer.from(again), Buffer.from(input)), 0, `${c.name}: ${again.length} vs ${input.length} bytes`);
        });
      }
    });
  });
}

it('both backends encode identically', { skip: backends.length < 2 && 'one backend' }, () => {
  const [a, b] = backends.map((x) => x.api);
  const values = [
    { dtype: 'bfloat16', shape: [2, 2], data: Uint16Array.from([1, 2, 3, 4]) },
    { x: new Float32Array(1000).fill(0.5), y: { kind: 'string', strings: ['a', 'b'] } },
  ];
  for (const v of values) {
    for (const o of [{}, { compress: true, integrity: true }, { alignment: 32 }]) {
      assert.deepEqual(a.encode(v, o), b.encode(v, o));
      assert.deepEqual(plain(a.decode(a.encode(v, o))), plain(b.decode(b.encode(v, o))));
    }
  }
});
