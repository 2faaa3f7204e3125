// NumPy reference statistics for the stats suites (tests/js/stats.test.mjs,
// tests/browser/stats.test.mjs): tests/python/stats_ref.py run by the formats venv
// (tests/python/setup_formats_venv.sh: numpy, ml_dtypes, gguf, safetensors). Not a test file.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const PY_DIR = fileURLToPath(new URL('../python/', import.meta.url));
export const FIXTURES = new URL('../data/fixtures/', import.meta.url);
export const fixturePath = (file) => fileURLToPath(new URL(file, FIXTURES));

let python;
/** The formats venv's python (created on first use; a failure is an error, not a skip). */
export function venvPython() {
  if (python) return python;
  const r = spawnSync('bash', [join(PY_DIR, 'setup_formats_venv.sh')], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tests/python/setup_formats_venv.sh failed (${r.status}):\n${r.stderr}`);
  python = r.stdout.trim().split('\n').pop();
  return python;
}

function runPy(args, input) {
  const r = spawnSync(venvPython(), [join(PY_DIR, 'stats_ref.py'), ...args], { input, encoding: 'utf8', maxBuffer: 256 << 20 });
  if (r.status !== 0) throw new Error(`stats_ref.py ${args[0]} failed (${r.status}):\n${r.stderr}`);
  return r.stdout;
}

/** Writes the NaN/±Inf safetensors file (float32, float16, bfloat16, all-NaN) and returns its path. */
export function specialFile() {
  const dir = mkdtempSync(join(tmpdir(), 'tensorlane-stats-'));
  const file = join(dir, 'special.safetensors');
  runPy(['special', file]);
  return file;
}

/**
 * NumPy's statistics of each case `{id, dtype, shape, bytes, edges}` (`bytes`: the tensor's
 * stored bytes as a reader returns them; `edges`: the histogram edges the binding gave).
 */
export function reference(cases) {
  const dir = mkdtempSync(join(tmpdir(), 'tensorlane-stats-ref-'));
  const requests = cases.map((c, i) => {
    const file = join(dir, `${i}.bin`);
    writeFileSync(file, c.bytes);
    return { id: c.id, dtype: c.dtype, numel: c.shape.reduce((n, d) => n * d, 1), file, edges: [...c.edges] };
  });
  return JSON.parse(runPy(['stats'], JSON.stringify(requests)));
}

const close = (a, b) => Math.abs(a - b) <= 1e-6 * Math.abs(b);

/** Asserts that binding statistics `got` match NumPy's `want` (see the rules). */
export function assertMatches(got, want, ctx) {
  for (const k of ['count', 'finite', 'zeros', 'nan', 'pos_inf', 'neg_inf']) assert.equal(got[k], want[k], `${ctx}: ${k}`);
  if (want.finite === 0) {
    for (const k of ['min', 'max', 'mean', 'std']) assert.ok(Number.isNaN(got[k]), `${ctx}: ${k} is NaN without finite values`);
  } else {
    assert.equal(got.min, want.min, `${ctx}: min`);
    assert.equal(got.max, want.max, `${ctx}: max`);
    assert.ok(close(got.mean, want.mean) || got.mean === want.mean, `${ctx}: mean ${got.mean} vs NumPy ${want.mean}`);
    assert.ok(close(got.std, want.std) || got.std === want.std, `${ctx}: std ${got.std} vs NumPy ${want.std}`);
  }
  assert.ok(got.histogram.edges instanceof Float64Array, `${ctx}: edges are a Float64Array`);
  assert.deepEqual([...got.histogram.edges], want.edges, `${ctx}: edges are NumPy's`);
  assert.deepEqual(got.histogram.counts, want.counts, `${ctx}: histogram counts`);
  assert.equal(got.histogram.counts.reduce((n, c) => n + c, 0), want.finite, `${ctx}: every finite value binned`);
}

/** A plain, comparable form of a stats result (edges as an array). */
export const plainStats = (s) => ({ ...s, histogram: { edges: [...s.histogram.edges], counts: s.histogram.counts } });

const FOREIGN = new Set(['safetensors', 'safetensors-index', 'gguf', 'pt', 'npy', 'npz', 'onnx', 'hdf5']);

/** The manifest's readable foreign model-format entries (`.zt` and Tenso ones: tests/js/converted_same_as_safetensors.test.mjs). */
export function modelEntries() {
  const manifest = JSON.parse(readFileSync(new URL('manifest.json', FIXTURES), 'utf8'));
  return manifest.files.filter((e) => e.expect === 'read' && FOREIGN.has(e.format));
}

const dir = (file) => file.slice(0, file.lastIndexOf('/') + 1);

/** The companion files of an entry: {name relative to the model: fixture path}. */
export function companionsOf(e) {
  const out = {};
  for (const c of e.companions ?? []) out[c.slice(dir(e.file).length)] = c;
  for (const t of e.tensors ?? []) if (t.shard) out[t.shard] = dir(e.file) + t.shard;
  return out;
}

/**
 * NumPy's (ml_dtypes', gguf-py's for GGUF blocks) float64 values of each case `{id, dtype, shape,
 * bytes}` as bit patterns (BigInt), so NaN and -0 compare exactly.
 */
export function referenceValues(cases) {
  const dir = mkdtempSync(join(tmpdir(), 'tensorlane-values-ref-'));
  const requests = cases.map((c, i) => {
    const file = join(dir, `${i}.bin`);
    writeFileSync(file, c.bytes);
    return { id: c.id, dtype: c.dtype, numel: c.shape.reduce((n, d) => n * d, 1), file };
  });
  const out = JSON.parse(runPy(['values'], JSON.stringify(requests)));
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, v.map((h) => BigInt(`0x${h}`))]));
}

/** The float64 bit patterns of `values` (any numeric TypedArray or array), as referenceValues gives them. */
export function bitsOf(values) {
  const f = Float64Array.from(values, Number);
  return [...new BigUint64Array(f.buffer)];
}
