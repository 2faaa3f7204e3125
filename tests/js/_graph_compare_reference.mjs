// References for compare() and reader.graph() (tests/js/compare.test.mjs,
// tests/js/onnx_graph.test.mjs, tests/browser/compare_graph.test.mjs): tests/python/compare_ref.py
// (NumPy over two safetensors checkpoints) and tests/python/onnx_graph_ref.py (the `onnx`
// library), run by the formats venv. Not a test file.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { venvPython } from './_stats_reference.mjs';

const PY_DIR = fileURLToPath(new URL('../python/', import.meta.url));

function py(script, args) {
  const r = spawnSync(venvPython(), [join(PY_DIR, script), ...args], { encoding: 'utf8', maxBuffer: 512 << 20 });
  if (r.status !== 0) throw new Error(`${script} ${args[0]} failed (${r.status}):\n${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** A temporary folder removed at exit. */
export function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Writes a.safetensors and b.safetensors into a new temp folder: {dir, a, b, ref} (ref: NumPy's, see compare_ref.py). */
export function checkpointPair(seed = 7) {
  const dir = tempDir('tensorlane-compare-');
  const ref = py('compare_ref.py', ['gen', dir, String(seed)]);
  return { dir, a: join(dir, 'a.safetensors'), b: join(dir, 'b.safetensors'), ref };
}

/** Writes a.gguf and b.gguf (the same values quantized differently) into a new temp folder: {a, b, ref}. */
export function ggufPair(seed = 3) {
  const dir = tempDir('tensorlane-compare-gguf-');
  const ref = py('compare_ref.py', ['gguf', dir, String(seed)]);
  return { dir, a: join(dir, 'a.gguf'), b: join(dir, 'b.gguf'), ref };
}

/** Writes the generated ONNX model of `layers` repeated blocks: {path, nodes}. */
export function bigGraph(layers, dir = tempDir('tensorlane-graph-')) {
  const path = join(dir, `graph-${layers}.onnx`);
  const { nodes } = py('onnx_graph_ref.py', ['gen', path, String(layers)]);
  return { path, nodes };
}

/**
 * A transformer-like ONNX model whose norm nodes are named /model/layers/N/ln1/* and the rest
 * /model/layers.N/* (tests/python/onnx_mixed_gen.py): {path, nodes, perLayer}.
 */
export function mixedNamesGraph(layers, dir = tempDir('tensorlane-graph-')) {
  const path = join(dir, `mixed-${layers}.onnx`);
  const { nodes, per_layer } = py('onnx_mixed_gen.py', [path, String(layers)]);
  return { path, nodes, perLayer: per_layer };
}

/** The onnx library's graph of the model at `path`. */
export const onnxReference = (path) => py('onnx_graph_ref.py', ['ref', path]);

const num = (v) => (v === null ? NaN : v === 'inf' ? Infinity : v === '-inf' ? -Infinity : v);

/** Checks that `close(x, y)` for floats within `rel` relative (NaN equals NaN, infinities exact). */
function close(got, want, rel, ctx) {
  if (Number.isNaN(want) || !Number.isFinite(want)) return assert.ok(Object.is(got, want) || (Number.isNaN(got) && Number.isNaN(want)), `${ctx}: ${got} != ${want}`);
  assert.ok(Math.abs(got - want) <= rel * Math.max(Math.abs(want), 1e-300), `${ctx}: ${got} != ${want} (rel ${rel})`);
}

/** Checks a CompareResult (or its plain JSON) against compare_ref.py's reference. */
export function assertCompare(got, ref, ctx) {
  assert.deepEqual(got.onlyA.map((t) => t.name).sort(), ref.onlyA, `${ctx}: only in A`);
  assert.deepEqual(got.onlyB.map((t) => t.name).sort(), ref.onlyB, `${ctx}: only in B`);
  const ch = got.changed.map((c) => ({ name: c.name, dtypeChanged: c.dtypeChanged, shapeChanged: c.shapeChanged })).sort((x, y) => (x.name < y.name ? -1 : 1));
  assert.deepEqual(ch, ref.changed, `${ctx}: changed dtype/shape`);
  assert.deepEqual(got.tensors.map((t) => t.name).sort(), Object.keys(ref.tensors).sort(), `${ctx}: compared tensors`);
  assert.deepEqual(got.errors, [], `${ctx}: no errors`);
  for (const t of got.tensors) {
    const w = ref.tensors[t.name];
    const c = `${ctx} / ${t.name}`;
    assert.equal(t.count, w.count, `${c}: count`);
    assert.equal(t.nonfinite, w.nonfinite, `${c}: nonfinite`);
    // max |a-b| of float64 differences is exact; sums within float rounding.
    close(t.maxAbs, num(w.maxAbs), 0, `${c}: maxAbs`);
    close(t.meanAbs, num(w.meanAbs), 1e-10, `${c}: meanAbs`);
    close(t.relL2, num(w.relL2), 1e-10, `${c}: relL2`);
    close(t.cosine, num(w.cosine), 1e-12, `${c}: cosine`);
  }
  // Largest change first.
  const rel = got.tensors.map((t) => (Number.isNaN(t.relL2) ? -1 : t.relL2));
  assert.ok(rel.every((v, i) => i === 0 || rel[i - 1] >= v), `${ctx}: sorted by relative L2, descending (${rel})`);
}

/** Checks reader.graph() against the onnx library's view. */
export function assertGraph(got, want, ctx) {
  for (const k of ['name', 'ir_version', 'producer_name', 'producer_version', 'opset_import', 'inputs', 'outputs', 'initializers']) {
    assert.deepEqual(got[k], want[k], `${ctx}: ${k}`);
  }
  assert.equal(got.nodes.length, want.nodes.length, `${ctx}: node count`);
  got.nodes.forEach((n, i) => {
    const w = want.nodes[i];
    const c = `${ctx}: node #${i} ${w.name}`;
    assert.deepEqual([n.name, n.op_type, n.domain, n.inputs, n.outputs], [w.name, w.op_type, w.domain, w.inputs, w.outputs], c);
    assert.deepEqual(n.attributes.map((a) => [a.name, a.kind]), w.attributes.map((a) => [a.name, a.kind]), `${c}: attributes`);
    n.attributes.forEach((a, j) => {
      const v = w.attributes[j].value;
      if (a.kind === 'int') assert.equal(a.summary, String(v), `${c}: ${a.name}`);
      if (a.kind === 'float') assert.equal(Math.fround(Number(a.summary)), Math.fround(v), `${c}: ${a.name}`);
      if (a.kind === 'ints') {
        const shown = a.summary.replace(/^\[|\]$/g, '').split(', ').filter((s) => /^-?\d+$/.test(s)).map(Number);
        assert.deepEqual(shown, v.slice(0, 8), `${c}: ${a.name}`);
      }
    });
  });
}
