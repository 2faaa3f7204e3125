// compare(): two models (two readers from open()) tensor by tensor, on both backends.
//
// Names only in A, only in B, tensors whose dtype or shape changed, and for tensors present in
// both with the same element count: max |a-b|, mean |a-b|, relative L2 (|a-b| / |a|) and cosine
// similarity, computed by the core (`tensorlane_core::stats::DiffAccumulator`, the backend's
// `StatsDiff`) over both tensors' stored bytes read in bounded slices (`chunkBytes`, 4 MiB by
// default, of the wider side), so two checkpoints of any size are compared without holding
// either. Values are decoded as stats() decodes them (bf16/f16/float8 exactly, GGUF blocks
// dequantized as gguf-py does), so two quantizations of one model compare too.

/** Bytes of the wider tensor read at a time unless {chunkBytes} says otherwise. */
export const COMPARE_CHUNK_BYTES = 4 << 20;
/** Element counts of a slice are a multiple of this (every ggml block size divides it). */
const BLOCK_ELEMENTS = 256;

/** The element count of a shape. */
const numelOf = (shape) => shape.reduce((n, d) => n * Number(d), 1);
const sameShape = (a, b) => a.length === b.length && a.every((d, i) => Number(d) === Number(b[i]));
const num = (v) => (v === null || v === undefined ? NaN : v === 'inf' ? Infinity : v);

/** The core FormatError a backend threw as JSON in its message, or null. */
function parsed(e) {
  try {
    const p = JSON.parse(e?.message);
    return p && typeof p === 'object' && typeof p.kind === 'string' ? p : null;
  } catch {
    return null;
  }
}

function abortError(signal) {
  const reason = signal.reason;
  if (reason instanceof Error) return reason;
  if (typeof DOMException !== 'undefined') return new DOMException('compare was aborted', 'AbortError');
  const e = new Error('compare was aborted');
  e.name = 'AbortError';
  return e;
}

/**
 * Orders compared tensors by how much they changed: relative L2 first (scale-free), then max
 * |a-b|; tensors without numbers (no finite pair) last.
 */
export function byLargestChange(x, y) {
  const k = (t) => [Number.isNaN(t.relL2) ? -1 : t.relL2, Number.isNaN(t.maxAbs) ? -1 : t.maxAbs];
  const [a1, a2] = k(x);
  const [b1, b2] = k(y);
  return b1 - a1 || b2 - a2 || (x.name < y.name ? -1 : x.name > y.name ? 1 : 0);
}

/** The compare() of a backend (one that has `StatsDiff`). */
export function makeCompare(backend) {
  /**
   * Compares reader `a` with reader `b` (see index.d.ts). Always a Promise. `onProgress({phase:
   * 'compare', tensor, tensorsDone, tensorsTotal, bytesDone, bytesTotal})` is called after each
   * slice; `signal` (an AbortSignal) stops it between slices.
   */
  async function compare(a, b, options = {}) {
    const { onProgress, signal } = options;
    const chunk = Math.max(1, Math.floor(options.chunkBytes ?? COMPARE_CHUNK_BYTES));
    if (!a?.tensors || !b?.tensors) throw new TypeError('compare expects two readers from open()');
    const inB = new Map(b.tensors.map((t) => [t.name, t]));
    const inA = new Set(a.tensors.map((t) => t.name));
    const brief = (t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, nbytes: t.nbytes });
    const onlyA = a.tensors.filter((t) => !inB.has(t.name)).map(brief);
    const onlyB = b.tensors.filter((t) => !inA.has(t.name)).map(brief);
    const changed = [];
    const work = [];
    for (const ta of a.tensors) {
      const tb = inB.get(ta.name);
      if (!tb) continue;
      const shapeChanged = !sameShape(ta.shape, tb.shape);
      const dtypeChanged = ta.dtype !== tb.dtype;
      if (shapeChanged || dtypeChanged) {
        changed.push({ name: ta.name, a: { dtype: ta.dtype, shape: ta.shape }, b: { dtype: tb.dtype, shape: tb.shape }, dtypeChanged, shapeChanged });
      }
      // Values pair up when the element counts agree (a reshape keeps C order).
      if (numelOf(ta.shape) === numelOf(tb.shape)) work.push([ta, tb]);
    }
    const bytesTotal = work.reduce((n, [x, y]) => n + Number(x.nbytes) + Number(y.nbytes), 0);
    const tensors = [];
    const errors = [];
    let bytesDone = 0;
    let tensorsDone = 0;
    const report = (name) => onProgress?.({ phase: 'compare', tensor: name, tensorsDone, tensorsTotal: work.length, bytesDone, bytesTotal });
    report(null);
    for (const [ta, tb] of work) {
      if (signal?.aborted) throw abortError(signal);
      const numel = numelOf(ta.shape);
      const [na, nb] = [Number(ta.nbytes), Number(tb.nbytes)];
      let diff;
      try {
        diff = new backend.StatsDiff(ta.dtype, ta.ggml ? ta.ggml.type : -1, na, tb.dtype, tb.ggml ? tb.ggml.type : -1, nb, numel);
      } catch (e) {
        const fe = parsed(e);
        errors.push({ name: ta.name, kind: fe?.kind ?? 'error', message: fe?.display ?? e.message });
        bytesDone += na + nb;
        tensorsDone++;
        continue;
      }
      let next = null;
      try {
        const ra = a.byteReader(ta.name);
        const rb = b.byteReader(tb.name);
        // Elements per slice: `chunk` bytes of the wider side, whole 256-element groups.
        const wide = Math.max(na, nb) / Math.max(1, numel);
        const per = Math.max(BLOCK_ELEMENTS, Math.floor(chunk / wide / BLOCK_ELEMENTS) * BLOCK_ELEMENTS);
        // Byte ranges of the slice starting at element e0 (in proportion: exact at whole blocks;
        // the core carries any cut unit).
        const range = (e0) => {
          const e1 = Math.min(numel, e0 + per);
          const oa = Math.round((e0 / numel) * na);
          const ob = Math.round((e0 / numel) * nb);
          const ea = e1 === numel ? na : Math.round((e1 / numel) * na);
          const eb = e1 === numel ? nb : Math.round((e1 / numel) * nb);
          return [ra.read(oa, ea - oa), rb.read(ob, eb - ob)];
        };
        // The next slice is being read (a File, a URL) while this one is compared.
        next = numel > 0 ? range(0) : null;
        for (let e0 = 0; e0 < numel; e0 += per) {
          if (signal?.aborted) throw abortError(signal);
          let [xa, xb] = next;
          if (xa instanceof Promise || xb instanceof Promise) [xa, xb] = await Promise.all([xa, xb]);
          next = e0 + per < numel ? range(e0 + per) : null;
          if (diff.push) diff.push(xa, xb);
          else {
            diff.pushA(xa);
            diff.pushB(xb);
          }
          bytesDone += xa.byteLength + xb.byteLength;
          report(ta.name);
        }
        const d = JSON.parse(diff.diff());
        tensors.push({
          name: ta.name,
          dtype: ta.dtype === tb.dtype ? ta.dtype : `${ta.dtype} → ${tb.dtype}`,
          dtypeA: ta.dtype,
          dtypeB: tb.dtype,
          shape: ta.shape,
          count: d.count,
          nonfinite: d.nonfinite,
          maxAbs: num(d.max_abs),
          meanAbs: num(d.mean_abs),
          relL2: num(d.rel_l2),
          cosine: num(d.cosine),
          normA: num(d.norm_a),
          normB: num(d.norm_b),
          normDiff: num(d.norm_diff),
        });
      } catch (e) {
        if (e?.name === 'AbortError' || (signal?.aborted && e === signal.reason)) throw e;
        errors.push({ name: ta.name, kind: e.kind ?? 'error', message: e.message });
      } finally {
        // A prefetch left behind by an abort or an error settles quietly.
        if (next) for (const x of next) if (x instanceof Promise) x.catch(() => {});
        diff.free?.();
      }
      tensorsDone++;
      report(ta.name);
    }
    tensors.sort(byLargestChange);
    return {
      onlyA,
      onlyB,
      changed,
      tensors,
      errors,
      bytesCompared: bytesDone,
      summary: { tensorsA: a.tensors.length, tensorsB: b.tensors.length, common: a.tensors.length - onlyA.length, compared: tensors.length, changed: changed.length, onlyA: onlyA.length, onlyB: onlyB.length, errors: errors.length },
    };
  }
  return { compare };
}

