// Every golden vector (tenso 0.24.0) decodes to its JSON sidecar, on every backend, and both
// backends return identical results (values, view/copy status, error messages).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { data, VECTORS, loadBackends, vectorCases, hex, sha256, plain } from './_helpers.mjs';

data(VECTORS);
const backends = await loadBackends();

const num = (v) => (v === 'NaN' ? NaN : v === 'Infinity' ? Infinity : v === '-Infinity' ? -Infinity : v);
const flat = (v) => (Array.isArray(v) ? v.flatMap(flat) : [v]);

function checkValues(api, got, exp) {
  if (!exp.values) return;
  const want = flat(exp.values).map(num);
  let have;
  if (got.dtype === 'float16' || got.dtype === 'bfloat16') have = Array.from(api.widen(got.dtype, got.data));
  else if (got.dtype === 'bool') have = Array.from(got.data, (b) => b !== 0);
  else have = Array.from(got.data);
  if (got.dtype === 'int64' || got.dtype === 'uint64') {
    // JSON.parse rounds integers beyond 2^53 (data_sha256 covers those); compare the exact ones.
    want.forEach((x, i) => Number.isSafeInteger(x) && assert.equal(have[i], BigInt(x)));
  } else {
    assert.equal(have.length, want.length);
    for (let i = 0; i < want.length; i++) assert.ok(Object.is(have[i], want[i]) || have[i] === want[i], `value ${i}: ${have[i]} vs ${want[i]}`);
  }
}

function check(api, got, exp, where) {
  switch (exp.type) {
    case 'ndarray':
      assert.equal(got.kind, 'dense', where);
      assert.equal(got.dtype, exp.dtype, where);
      assert.deepEqual(got.shape, exp.shape, where);
      assert.equal(got.data.byteLength, exp.nbytes, where);
      if (exp.data_hex !== undefined) assert.equal(hex(got.data), exp.data_hex, where);
      assert.equal(sha256(got.data), exp.data_sha256, where);
      checkValues(api, got, exp);
      break;
    case 'bundle':
      assert.equal(got.kind, 'bundle', where);
      assert.deepEqual(got.keys(), exp.entries.map((e) => e.key), where);
      exp.entries.forEach((e, i) => check(api, got.entries[i][1], e.value, `${where}/${e.key}`));
      break;
    case 'sparse': {
      assert.equal(got.kind, 'sparse', where);
      assert.equal(got.format, exp.format, where);
      assert.deepEqual(got.shape, exp.shape, where);
      const arrays = exp.format === 'coo' ? [got.data, got.row, got.col] : [got.data, got.indices, got.indptr];
      const dtypes = [got.dtype, ...got.indexDtypes];
      exp.components.forEach((c, i) =>
        check(api, { kind: 'dense', dtype: dtypes[i], shape: [arrays[i].length], data: arrays[i] }, c, `${where}/${exp.component_names[i]}`),
      );
      break;
    }
    case 'quantized': {
      assert.equal(got.kind, 'quantized', where);
      assert.ok(got instanceof api.Quantized, where);
      assert.equal(got.qdtype, exp.qdtype, where);
      assert.deepEqual(got.shape, exp.shape, where);
      assert.equal(got.scheme, exp.scheme, where);
      assert.equal(got.schemeCode, exp.scheme_code, where);
      assert.equal(got.axis, exp.axis_wire, where);
      assert.equal(got.groupSize, exp.group_size, where);
      assert.equal(hex(got.scales), exp.scales_hex, where);
      assert.equal(hex(got.zeroPoints), exp.zero_points_hex, where);
      assert.equal(hex(got.data), exp.packed_hex, where);
      if (exp.dequantized) {
        const d = got.dequantize();
        assert.ok(d instanceof Float32Array);
        check(api, { kind: 'dense', dtype: 'float32', shape: exp.dequantized.shape, data: d }, exp.dequantized, `${where} dequantized`);
      }
      break;
    }
    case 'string':
      assert.equal(got.kind, 'string', where);
      assert.deepEqual(got.strings, exp.strings, where);
      break;
    default:
      assert.fail(`${where}: unexpected expected.type ${exp.type}`);
  }
}

const ITEMSIZE = { float32: 4, int32: 4, uint32: 4, float64: 8, int64: 8, uint64: 8, complex64: 4, complex128: 8, float16: 2, bfloat16: 2, int16: 2, uint16: 2 };

describe('golden vectors', () => {
  for (const { name, api } of backends) {
    describe(`${name} backend`, () => {
      for (const dir of ['.', 'decode_only']) {
        for (const c of vectorCases(dir)) {
          it(`${dir}/${c.name}`, () => {
            const input = c.bytes();
            const got = api.decode(input);
            check(api, got, c.meta.expected, c.name);
            // Views: an uncompressed top-level dense body whose offset suits its element type is
            // a view on the caller's ArrayBuffer; compressed bodies are copies.
            if (got.kind === 'dense') {
              const compressed = (c.meta.header.flags & 4) !== 0;
              const off = c.meta.layout?.body_offset;
              const size = ITEMSIZE[got.dtype] ?? 1;
              if (compressed) {
                assert.equal(got.copied, true);
                assert.notEqual(got.data.buffer, input.buffer);
              } else if (off !== undefined && off % size === 0) {
                assert.equal(got.copied, false);
                assert.equal(got.data.buffer, input.buffer, 'view shares the input ArrayBuffer');
                assert.equal(got.data.byteOffset, off);
              }
            }
          });
        }
      }
      for (const c of vectorCases('invalid')) {
        it(`invalid/${c.name}`, () => {
          const input = c.bytes();
          if (c.name === 'compressed_bundle_emitted_by_tenso') {
            const got = api.decode(input); // tenso cannot read its own compressed bundles; we can
            assert.equal(got.kind, 'bundle');
            assert.ok(got.size > 0);
            for (const [, v] of got) if (v.kind === 'dense') assert.equal(v.copied, true);
            return;
          }
          assert.throws(
            () => api.decode(input),
            (e) => e instanceof api.TensorlaneError && /\(at byte \d+/.test(e.message) && Number.isInteger(e.offset),
          );
        });
      }
      it('decode_only/v4_trailing_garbage is refused when trailing bytes are disallowed', () => {
        const c = vectorCases('decode_only').find((x) => x.name === 'v4_trailing_garbage');
        assert.throws(() => api.decode(c.bytes(), { allowTrailingBytes: false }), /follow the packet/);
      });
      it('requireIntegrity refuses a packet without a footer', () => {
        const c = vectorCases('.').find((x) => x.name === 'dtype_float32');
        assert.throws(() => api.decode(c.bytes(), { requireIntegrity: true }), /integrity/);
        const i = vectorCases('.').find((x) => x.name === 'integrity_float32_vec');
        assert.equal(api.decode(i.bytes(), { requireIntegrity: true }).kind, 'dense');
      });
    });
  }

  it('both backends return identical results for every vector (values, views, errors)', { skip: backends.length < 2 && 'one backend' }, () => {
    let n = 0;
    for (const dir of ['.', 'decode_only', 'invalid']) {
      for (const c of vectorCases(dir)) {
        for (const opts of [{}, { widen: true }, { verifyIntegrity: false, validateSparse: false }]) {
          const outcomes = backends.map(({ api }) => {
            const input = c.bytes();
            try {
              const r = api.decode(input, opts);
              return { ok: plain(r), shares: r.data ? r.data.buffer === input.buffer : null };
            } catch (e) {
              return { error: e.message, offset: e.offset };
            }
          });
          for (const o of outcomes.slice(1)) assert.deepStrictEqual(o, outcomes[0], `${dir}/${c.name} ${JSON.stringify(opts)}`);
          n++;
        }
      }
    }
    assert.ok(n > 300);
  });
});
