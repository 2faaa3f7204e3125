"""NumPy reference for compare() (js/compare.js over the core's DiffAccumulator), for
tests/js/compare.test.mjs, tests/browser/compare_graph.test.mjs and scripts/bench_compare.mjs.

    python compare_ref.py gen OUT_DIR SEED
        Writes a.safetensors and b.safetensors (safetensors.numpy.save_file) that differ the ways
        two checkpoints do: tensors only in A or only in B, a changed shape, a changed dtype
        (float32 in A, bfloat16 in B: still compared), fine-tuning-like noise in float32, float16,
        bfloat16, float64 and int32 tensors, NaN/Inf in some pairs, an all-zero A (relative L2
        infinite), an unchanged tensor, and one of 1,000,003 values (many slices). Prints the
        reference as JSON: {onlyA, onlyB, changed: [{name, dtypeChanged, shapeChanged}],
        tensors: {name: {count, nonfinite, maxAbs, meanAbs, relL2, cosine}}}, numbers computed by
        NumPy over a.astype(float64), b.astype(float64) (bfloat16 via ml_dtypes) of the pairs where
        both are finite; NaN is null, +Inf is "inf".

    python compare_ref.py gguf OUT_DIR SEED
        Writes a.gguf and b.gguf (gguf-py's GGUFWriter) holding the same float32 values quantized
        differently: Q8_0 against Q4_0, float32 against Q8_0, float16 against Q5_0, Q4_1 against
        float32, plus a tensor only in each. Prints the reference as for `gen`, over the values
        gguf.quants.dequantize gives (GGUFReader reading the files back).

    python compare_ref.py big OUT_DIR MIB
        Writes a.safetensors and b.safetensors of about MIB MiB each (float32 layers, b = a + noise),
        for the benchmark. Prints their sizes.
"""
import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import load_file, save_file


def f(v):
    v = float(v)
    if np.isnan(v):
        return None
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def reference(a, b):
    x = a.astype(np.float64).ravel()
    y = b.astype(np.float64).ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    xo, yo = x[ok], y[ok]
    d = xo - yo
    n = int(ok.sum())
    out = {"count": int(x.size), "nonfinite": int(x.size - n)}
    if n == 0:
        out.update(maxAbs=None, meanAbs=None, relL2=None, cosine=None)
        return out
    na, nb, nd = np.linalg.norm(xo), np.linalg.norm(yo), np.linalg.norm(d)
    rel = nd / na if na > 0 else (0.0 if nd == 0 else np.inf)
    cos = np.dot(xo, yo) / (na * nb) if na > 0 and nb > 0 else np.nan
    out.update(maxAbs=f(np.abs(d).max()), meanAbs=f(np.abs(d).mean()), relL2=f(rel), cosine=f(cos))
    return out


def gen(out, seed):
    rng = np.random.default_rng(seed)
    bf16 = ml_dtypes.bfloat16
    a, b = {}, {}

    def pair(name, base, noise, dtype_a, dtype_b=None):
        a[name] = base.astype(dtype_a)
        b[name] = (base + noise).astype(dtype_b or dtype_a)

    w = rng.standard_normal((64, 48)).astype(np.float32)
    pair("layers.0.attn.q.weight", w, 1e-3 * rng.standard_normal(w.shape), np.float32)
    pair("layers.0.attn.k.weight", w.T.copy(), 0.2 * rng.standard_normal(w.T.shape), np.float32)
    pair("layers.0.mlp.up.weight", rng.standard_normal((33, 17)), 1e-2 * rng.standard_normal((33, 17)), np.float16)
    pair("layers.0.mlp.down.weight", rng.standard_normal((17, 33)), 5e-2 * rng.standard_normal((17, 33)), bf16)
    pair("layers.0.norm.weight", np.ones(48), 1e-4 * rng.standard_normal(48), np.float64)
    pair("layers.0.bias.int", rng.integers(-1000, 1000, 100), rng.integers(-3, 4, 100), np.int32)
    pair("embed.weight", rng.standard_normal(1_000_003), 1e-3 * rng.standard_normal(1_000_003), np.float32)
    same = rng.standard_normal((8, 8)).astype(np.float32)
    a["lm_head.unchanged"], b["lm_head.unchanged"] = same, same.copy()
    # dtype changed (float32 -> bfloat16): compared; shape changed (same count): flagged, compared.
    pair("layers.1.cast", rng.standard_normal((16, 16)), np.zeros((16, 16)), np.float32, bf16)
    r = rng.standard_normal((4, 6)).astype(np.float32)
    a["layers.1.reshaped"], b["layers.1.reshaped"] = r, (r.reshape(6, 4) + np.float32(0.5))
    # shape changed with a different count: listed, not compared.
    a["layers.1.grown"], b["layers.1.grown"] = np.zeros((4, 4), np.float32), np.zeros((5, 4), np.float32)
    sp = rng.standard_normal(1000).astype(np.float32)
    spb = sp + np.float32(0.01)
    sp[[3, 500]] = [np.nan, np.inf]
    spb[[7, 500]] = [-np.inf, np.inf]
    a["layers.1.specials"], b["layers.1.specials"] = sp, spb
    a["layers.1.zero_a"], b["layers.1.zero_a"] = np.zeros(10, np.float32), np.arange(10, dtype=np.float32)
    a["only_in_a.weight"] = np.ones(3, np.float32)
    b["only_in_b.weight"] = np.ones((2, 2), np.float16)
    b["only_in_b.bias"] = np.zeros(5, bf16)
    out = Path(out)
    save_file(a, str(out / "a.safetensors"))
    save_file(b, str(out / "b.safetensors"))
    # Reload what was written, so the reference is over the file's values.
    la, lb = load_file(str(out / "a.safetensors")), load_file(str(out / "b.safetensors"))
    ref = {"onlyA": sorted(set(la) - set(lb)), "onlyB": sorted(set(lb) - set(la)), "changed": [], "tensors": {}}
    for name in sorted(set(la) & set(lb)):
        x, y = la[name], lb[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            ref["changed"].append({"name": name, "dtypeChanged": x.dtype != y.dtype, "shapeChanged": x.shape != y.shape})
        if x.size == y.size:
            ref["tensors"][name] = reference(x, y)
    print(json.dumps(ref))


def gguf_pair(out, seed):
    from gguf import GGMLQuantizationType as Q, GGUFReader, GGUFWriter, quants

    rng = np.random.default_rng(seed)
    out = Path(out)
    x = {n: rng.standard_normal(shape).astype(np.float32) for n, shape in
         [("blk.0.w", (4, 256)), ("blk.0.v", (8, 256)), ("blk.0.h", (3, 256)), ("blk.0.k", (2, 256))]}
    plan = {"blk.0.w": (Q.Q8_0, Q.Q4_0), "blk.0.v": (Q.F32, Q.Q8_0), "blk.0.h": (Q.F16, Q.Q5_0), "blk.0.k": (Q.Q4_1, Q.F32)}

    def enc(a, q):
        if q == Q.F32:
            return a, None
        if q == Q.F16:
            return a.astype(np.float16), None
        return quants.quantize(a, q), q

    for side, path in ((0, out / "a.gguf"), (1, out / "b.gguf")):
        w = GGUFWriter(str(path), "compare")
        for name, a in x.items():
            arr, raw = enc(a, plan[name][side])
            w.add_tensor(name, arr, raw_dtype=raw)
        w.add_tensor("only_in_a" if side == 0 else "only_in_b", np.ones((2, 32), np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    def values(path):
        r = GGUFReader(str(path))
        out = {}
        for t in r.tensors:
            if t.tensor_type in (Q.F32, Q.F16):
                out[t.name] = (np.asarray(t.data).astype(np.float64).ravel(), t.tensor_type.name)
            else:
                out[t.name] = (quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64).ravel(), t.tensor_type.name)
        return out

    va, vb = values(out / "a.gguf"), values(out / "b.gguf")
    ref = {"onlyA": sorted(set(va) - set(vb)), "onlyB": sorted(set(vb) - set(va)), "changed": [], "tensors": {}}
    for name in sorted(set(va) & set(vb)):
        (x1, ta), (y1, tb) = va[name], vb[name]
        if ta != tb:
            ref["changed"].append({"name": name, "dtypeChanged": True, "shapeChanged": False})
        ref["tensors"][name] = reference(x1, y1)
    print(json.dumps(ref))


def big(out, mib):
    rng = np.random.default_rng(1)
    out = Path(out)
    per = 16 << 20  # 16 MiB tensors
    n = max(1, (mib << 20) // per)
    a, b = {}, {}
    for i in range(n):
        x = rng.standard_normal(per // 4, dtype=np.float32)
        a[f"layers.{i}.weight"] = x
        b[f"layers.{i}.weight"] = x + np.float32(1e-3) * rng.standard_normal(per // 4, dtype=np.float32)
    save_file(a, str(out / "a.safetensors"))
    save_file(b, str(out / "b.safetensors"))
    print(json.dumps({"a": (out / "a.safetensors").stat().st_size, "b": (out / "b.safetensors").stat().st_size}))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "gguf":
        gguf_pair(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "big":
        big(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}; see the module docstring")
