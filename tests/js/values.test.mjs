// reader.values(name, start, count) against NumPy, ml_dtypes and gguf-py (tests/python/stats_ref.py
// `values`): every tensor of a GGUF with each quantized type and of a safetensors with every dtype
// (bfloat16, float8 variants, float4, bool, 64-bit integers), whole and in windows that start and
// end inside GGUF blocks; opened as a path and as bytes, so both the native host's and the byte
// range reader's paths are checked. Values are compared as float64 bit patterns (NaN, -0 exact).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as tensorlane from '../../js/node.js';
import { bitsOf, fixturePath, referenceValues } from './_stats_reference.mjs';

describe('reader.values(): numbers of any dtype, read by element range', () => {
  it('match NumPy / ml_dtypes / gguf-py, whole and by window', { timeout: 120000 }, () => {
    const files = ['gguf/types.gguf', 'safetensors/dtypes.safetensors', 'gguf/tiny-llama.gguf'];
    const cases = [];
    for (const f of files) {
      const r = tensorlane.open(fixturePath(f));
      for (const t of r.tensors) {
        if (t.dtype.startsWith('complex')) {
          assert.throws(() => r.values(t.name), /cannot be shown as numbers/);
          continue;
        }
        const raw = r.tensor(t.name);
        cases.push({ id: `${f} / ${t.name}`, f, name: t.name, dtype: t.dtype, shape: t.shape, bytes: new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength) });
      }
    }
    const ref = referenceValues(cases);
    let windows = 0;
    for (const c of cases) {
      const want = ref[c.id];
      const numel = want.length;
      for (const r of [tensorlane.open(fixturePath(c.f)), tensorlane.open(readFileSync(fixturePath(c.f)))]) {
        assert.deepEqual(bitsOf(r.values(c.name)), want, `${c.id}: whole`);
        for (const [s, n] of [[1, numel - 2], [Math.floor(numel / 3), Math.min(37, numel - Math.floor(numel / 3))], [numel - 1, 1]]) {
          if (n <= 0 || s < 0) continue;
          assert.deepEqual(bitsOf(r.values(c.name, s, n)), want.slice(s, s + n), `${c.id}: [${s}, +${n})`);
          windows++;
        }
        assert.throws(() => r.values(c.name, numel, 1), RangeError);
      }
    }
    assert.ok(cases.some((c) => c.dtype === 'Q4_K') && cases.some((c) => c.dtype === 'float8_e4m3fnuz') && cases.some((c) => c.dtype === 'float4_e2m1fn'));
    assert.ok(windows > 100);
  });
});
