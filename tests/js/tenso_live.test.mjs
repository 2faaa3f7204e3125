// Live cross-check of the JS package (addon and wasm backends) with the real tenso 0.24.0 from PyPI.
//
// * tenso_gen.py (tests/python) writes random packets of every kind; the JS `decode` must give what
//   its manifest.json describes, and `encode` of the decoded value must give tenso's exact bytes.
// * The JS `encode` writes random dense tensors of every dtype (ranks 0..4, empty dims, integrity,
//   compression, custom alignments), strings and uncompressed bundles; tenso_check.py must read
//   them as described and re-encode them to the same bytes.
//
// The venv comes from tests/python/setup_venv.sh (tests/.venv). Skipped only when python3 is
// missing and CI is not "true"; in CI every setup failure is a test failure.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createHash } from 'node:crypto';

// Self-contained on purpose (no shared helper module): the same backend choice as the other suites.
const CI = process.env.CI === 'true';
const bytesOf = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const hex = (a) => Buffer.from(bytesOf(a)).toString('hex');
const sha256 = (a) => createHash('sha256').update(bytesOf(a)).digest('hex');

/** The backends under test: the addon (when built) and the wasm build, or TENSORLANE_BACKEND only. */
async function loadBackends() {
  const only = process.env.TENSORLANE_BACKEND;
  const out = [];
  if (only !== 'wasm') {
    const node = await import('../../js/node.js');
    if (node.backendName === 'addon') out.push({ name: 'addon', api: node });
    else if (CI || only === 'addon') throw new Error(`the N-API addon did not load: ${node.addonLoadError?.message}`);
    else console.warn(`# addon not built (${node.addonLoadError?.message}); testing the wasm backend only`);
  }
  if (only !== 'addon') out.push({ name: 'wasm', api: await import('../../js/wasm-node.js') });
  return out;
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PY_DIR = join(ROOT, 'tests', 'python');

/** The venv python, or null when the suite must be skipped (no python3 outside CI). */
function setupVenv() {
  const probe = spawnSync(process.env.PYTHON ?? 'python3', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    const why = probe.error?.message ?? probe.stderr;
    if (CI) throw new Error(`python3 is required in CI for the tenso live cross-check: ${why}`);
    return { skip: `python3 unavailable (${why})` };
  }
  const r = spawnSync('bash', [join(PY_DIR, 'setup_venv.sh')], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tests/python/setup_venv.sh failed (${r.status}):\n${r.stderr}`);
  return { python: r.stdout.trim().split('\n').pop() };
}

function runPy(python, script, args) {
  const r = spawnSync(python, [join(PY_DIR, script), ...args], { encoding: 'utf8', maxBuffer: 64 << 20 });
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

const venv = setupVenv();
const backends = venv.python ? await loadBackends() : [];

// ---------------------------------------------------------------------------------------------
// comparing with a manifest expectation

const f32hex = (a) => hex(Float32Array.from(a));

function checkDense(e, got, path, errs, { indexComponent = false } = {}) {
  if (got.dtype !== e.dtype) return errs.push(`${path}: dtype ${got.dtype} != ${e.dtype}`);
  if (JSON.stringify(got.shape.map(Number)) !== JSON.stringify(e.shape)) return errs.push(`${path}: shape ${got.shape} != ${e.shape}`);
  if (sha256(got.data) !== e.sha256) errs.push(`${path}: data differs (sha256)${indexComponent ? ' [index]' : ''}`);
}

function check(e, got, path, errs) {
  if (got?.kind !== e.kind) return errs.push(`${path}: kind ${got?.kind} != ${e.kind}`);
  switch (e.kind) {
    case 'dense':
      return checkDense(e, got, path, errs);
    case 'bundle': {
      const keys = got.entries.map(([k]) => k);
      const want = e.entries.map(([k]) => k);
      if (JSON.stringify(keys) !== JSON.stringify(want)) return errs.push(`${path}: keys ${JSON.stringify(keys)} != ${JSON.stringify(want)}`);
      e.entries.forEach(([k, v], i) => check(v, got.entries[i][1], `${path}[${JSON.stringify(k)}]`, errs));
      return;
    }
    case 'sparse': {
      if (got.format !== e.format) errs.push(`${path}: format ${got.format} != ${e.format}`);
      if (JSON.stringify(got.shape.map(Number)) !== JSON.stringify(e.shape)) errs.push(`${path}: shape ${got.shape} != ${e.shape}`);
      const names = e.format === 'coo' ? ['row', 'col'] : ['indices', 'indptr'];
      checkDense(e.components[0], { dtype: got.dtype, shape: [got.data.length / (got.dtype.startsWith('complex') ? 2 : 1)], data: got.data }, `${path}.data`, errs);
      names.forEach((n, i) => checkDense(e.components[i + 1], { dtype: got.indexDtypes[i], shape: [got[n].length], data: got[n] }, `${path}.${n}`, errs));
      return;
    }
    case 'quantized': {
      const fields = {
        qdtype: got.qdtype,
        shape: got.shape.map(Number),
        scheme: got.scheme,
        axis: got.axis,
        group_size: got.groupSize,
        scales_hex: f32hex(got.scales),
        zero_points_hex: f32hex(got.zeroPoints),
        data_hex: hex(got.data),
      };
      for (const [k, v] of Object.entries(fields)) {
        if (JSON.stringify(v) !== JSON.stringify(e[k])) errs.push(`${path}: ${k} ${JSON.stringify(v)} != ${JSON.stringify(e[k])}`);
      }
      if (e.dequantized_sha256 && sha256(got.dequantize()) !== e.dequantized_sha256) errs.push(`${path}: dequantize() differs`);
      return;
    }
    case 'string':
      if (JSON.stringify(got.strings) !== JSON.stringify(e.strings)) errs.push(`${path}: strings differ`);
      return;
    default:
      errs.push(`${path}: unknown kind ${e.kind}`);
  }
}

const sameBytes = (a, b) => a.length === b.length && Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.length), Buffer.from(b.buffer, b.byteOffset, b.length)) === 0;

// ---------------------------------------------------------------------------------------------
// deterministic random tensors

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ITEMSIZE = {
  float32: 4, float64: 8, float16: 2, bfloat16: 2, int8: 1, int16: 2, int32: 4, int64: 8,
  uint8: 1, uint16: 2, uint32: 4, uint64: 8, bool: 1, complex64: 8, complex128: 16,
};

function randomDense(api, rand, dtype, shape) {
  const n = shape.reduce((a, b) => a * b, 1);
  const bytes = new Uint8Array(n * ITEMSIZE[dtype]);
  const lowEntropy = rand() < 0.5;
  for (let i = 0; i < bytes.length; i++) bytes[i] = lowEntropy ? (i % 7 === 0 ? 0x3f : 0) : Math.floor(rand() * 256);
  if (dtype === 'bool') bytes.forEach((b, i) => (bytes[i] = b & 1));
  const Ctor = api.DTYPES[dtype];
  return { kind: 'dense', dtype, shape, data: new Ctor(bytes.buffer, 0, bytes.length / Ctor.BYTES_PER_ELEMENT) };
}

const denseExpect = (t) => {
  const e = { kind: 'dense', dtype: t.dtype, shape: t.shape, sha256: sha256(t.data) };
  if (t.data.byteLength <= 4096) e.hex = hex(t.data);
  return e;
};

// ---------------------------------------------------------------------------------------------

describe('tenso 0.24.0 live cross-check (JS package)', { skip: venv.skip }, () => {
  let genDir;
  let manifest;
  before(() => {
    genDir = mkdtempSync(join(tmpdir(), 'tenso-gen-'));
    const r = runPy(venv.python, 'tenso_gen.py', [genDir]);
    assert.ok(r.ok, `tenso_gen.py failed:\n${r.out}`);
    manifest = JSON.parse(readFileSync(join(genDir, 'manifest.json'), 'utf8'));
  });
  after(() => genDir && rmSync(genDir, { recursive: true, force: true }));

  it("resolves the package by name ('tensorlane')", async () => {
    const pkg = await import('tensorlane');
    assert.equal(typeof pkg.encode, 'function');
    assert.equal(typeof pkg.decode, 'function');
  });

  for (const { name: backend, api } of backends) {
    it(`${backend}: decodes every tenso packet as described and re-encodes it to tenso's bytes`, () => {
      const errs = [];
      const lz4Differs = [];
      let reencoded = 0;
      for (const c of manifest.cases) {
        const bytes = new Uint8Array(readFileSync(join(genDir, c.file)));
        let got;
        try {
          got = api.decode(bytes);
        } catch (err) {
          errs.push(`${c.name}: decode failed: ${err.message}`);
          continue;
        }
        check(c, got, c.name, errs);
        const o = c.options ?? {};
        let again;
        try {
          again = api.encode(got, { alignment: o.alignment, integrity: o.integrity, compress: o.compress });
        } catch (err) {
          errs.push(`${c.name}: re-encode failed: ${err.message}`);
          continue;
        }
        if (sameBytes(again, bytes)) reencoded++;
        else if (backend === 'wasm' && o.compress) lz4Differs.push(`${c.name} (${again.length} vs ${bytes.length} bytes)`);
        else errs.push(`${c.name}: re-encoded to other bytes (${again.length} vs ${bytes.length})`);
      }
      console.log(`# ${backend}: ${manifest.cases.length} tenso packets decoded, ${reencoded} re-encoded byte-identically`);
      // The wasm build compiles tensorlane-core without `std`, i.e. with the hand-written LZ4 frame
      // writer instead of lz4_flex's FrameEncoder: its compressed bodies are valid (tenso reads them,
      // see the next test) but not always tenso's exact bytes. Reported, not failed.
      if (lz4Differs.length) console.log(`# ${backend}: compressed bodies not byte-identical to tenso's: ${lz4Differs.join(', ')}`);
      assert.deepEqual(errs, [], `${errs.length} mismatches against tenso 0.24.0:\n${errs.join('\n')}`);
    });

    it(`${backend}: tenso reads what encode writes`, () => {
      const dir = mkdtempSync(join(tmpdir(), `tenso-js-${backend}-`));
      const rand = mulberry32(0x7e45024);
      const cases = [];
      const add = (name, value, opts, expect, extra = {}) => {
        const bytes = api.encode(value, opts);
        writeFileSync(join(dir, `${name}.tenso`), bytes);
        cases.push({ name, file: `${name}.tenso`, ...expect, options: { alignment: opts.alignment ?? 64, integrity: !!opts.integrity, compress: !!opts.compress }, ...extra });
        return bytes;
      };
      const shapes = [[], [5], [3, 4], [2, 3, 2], [1, 2, 1, 3], [0], [2, 0, 3]];
      const aligns = [64, 1, 8, 16, 32, 128, 4096];
      let k = 0;
      for (const dtype of Object.keys(ITEMSIZE)) {
        for (const shape of shapes) {
          const t = randomDense(api, rand, dtype, shape);
          const opts = { alignment: aligns[k % aligns.length], integrity: k % 3 === 1, compress: k % 4 >= 2 };
          add(`js_${dtype}_${shape.join('x') || 'scalar'}_${k}`, t, opts, denseExpect(t), { byte_exact: true });
          k++;
        }
      }
      const big = randomDense(api, rand, 'float32', [300000]);
      add('js_float32_big_lz4_int', big, { compress: true, integrity: true }, denseExpect(big), { byte_exact: true });
      const strings = ['hi', '', 'wörld', '日本', '🦀', 'tab\t'];
      add('js_strings', { kind: 'string', strings }, { integrity: true }, { kind: 'string', strings }, { byte_exact: true });
      const a = randomDense(api, rand, 'int16', [2, 3]);
      const b = randomDense(api, rand, 'bfloat16', [4]);
      const c = randomDense(api, rand, 'complex64', [3]);
      const bundle = new api.Bundle([['a', a], ['nested', new api.Bundle([['b', b], ['c', c]])], ['', randomDense(api, rand, 'uint64', [])]]);
      const bundleExpect = { kind: 'bundle', entries: [['a', denseExpect(a)], ['nested', { kind: 'bundle', entries: [['b', denseExpect(b)], ['c', denseExpect(c)]] }], ['', denseExpect(bundle.entries[2][1])]] };
      add('js_bundle', bundle, { integrity: true, alignment: 16 }, bundleExpect, { byte_exact: true });
      // compress inside a bundle: tenso cannot read it; without it (compressInContainers: false) it can
      add('js_bundle_compressed', bundle, { compress: true }, bundleExpect, { tenso_error: 'Unsupported or unknown dtype code: 0' });
      add('js_bundle_compress_not_in_containers', bundle, { compress: true, compressInContainers: false }, bundleExpect);
      writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ producer: `tensorlane JS (${backend} backend)`, cases }, null, 1));
      const r = runPy(venv.python, 'tenso_check.py', [dir, '--quiet']);
      console.log(`# ${r.out.trim().split('\n').pop()}`);
      assert.ok(r.ok, `tenso 0.24.0 does not read the JS package's packets as described:\n${r.out}`);
      rmSync(dir, { recursive: true, force: true });
    });
  }
});
