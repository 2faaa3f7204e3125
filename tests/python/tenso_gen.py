#!/usr/bin/env python3
"""Writes random packets with tenso 0.24.0 for tensorlane to decode.

    tenso_gen.py OUTDIR [--seed N]

OUTDIR/<name>.tenso holds the exact bytes tenso wrote; OUTDIR/manifest.json describes what each
packet must decode to (schema in tenso_live_common.py). Deterministic for a given seed.
Covers every dense dtype tenso supports (15, bfloat16 via ml_dtypes), ranks 0..4 with empty
dimensions, integrity, compression and custom alignments; nested bundles; sparse COO/CSR/CSC;
QuantizedTensor.quantize for 4 qdtypes x 3 schemes (with the float32 input, so a peer can
reproduce the bytes); StringTensor; and tenso's own unreadable compressed bundle.
"""

import argparse
import json
import os
import sys
from importlib.metadata import version

import ml_dtypes
import numpy as np
import scipy.sparse as sp
import tenso

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tenso_live_common import dense_expect, quant_expect, sparse_expect  # noqa: E402

DTYPES = [
    "float32", "int32", "float64", "int64", "uint8", "uint16", "bool", "float16",
    "int8", "int16", "uint32", "uint64", "complex64", "complex128", "bfloat16",
]
SHAPES = [(), (7,), (3, 5), (2, 3, 4), (2, 1, 3, 2), (0,), (3, 0, 2)]
ALIGNMENTS = [64, 1, 8, 16, 128, 4096, 32]
COMBOS = [(a, i, c) for c in (False, True) for i in (False, True) for a in ALIGNMENTS]


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def random_array(rng, name, shape, low_entropy=False):
    dt = np_dtype(name)
    n = int(np.prod(shape)) if shape else 1
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if low_entropy:
            return rng.integers(0, 4, size=shape).astype(dt)
        a = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        if n >= 2:
            flat = a.reshape(-1)
            flat[0], flat[-1] = info.min, info.max
        return a
    if dt.kind == "c":
        part = np.float32 if name == "complex64" else np.float64
        re = random_array(rng, np.dtype(part).name, shape, low_entropy)
        im = random_array(rng, np.dtype(part).name, shape, low_entropy)
        a = np.empty(shape, dtype=dt)
        a.real, a.imag = re, im
        return a
    # floating point (float16, bfloat16, float32, float64)
    if low_entropy:
        vals = rng.choice(np.array([0.0, 1.0, -2.5, 0.125], dtype=np.float32), size=shape)
    else:
        vals = rng.standard_normal(size=shape).astype(np.float64) * 10.0 ** rng.integers(-3, 4, size=shape)
    a = np.asarray(vals).astype(dt)
    if n >= 6 and not low_entropy:
        flat = a.reshape(-1)
        picks = rng.choice(n, size=4, replace=False)
        for p, v in zip(picks, [np.nan, np.inf, -np.inf, -0.0]):
            flat[p] = v
    return a


class Writer:
    def __init__(self, outdir):
        self.outdir = outdir
        self.cases = []

    def add(self, name, packet, expect, **extra):
        path = os.path.join(self.outdir, name + ".tenso")
        with open(path, "wb") as f:
            f.write(bytes(packet))
        case = {"name": name, "file": name + ".tenso", **expect, **extra}
        self.cases.append(case)


def opts(alignment=64, integrity=False, compress=False):
    return {"alignment": alignment, "integrity": integrity, "compress": compress}


def dumps(obj, o):
    return tenso.dumps(obj, check_integrity=o["integrity"], compress=o["compress"], alignment=o["alignment"])


def gen_dense(w, rng):
    k = 0
    for i, name in enumerate(DTYPES):
        for j, shape in enumerate(SHAPES):
            a, integ, comp = COMBOS[(i * len(SHAPES) + j) % len(COMBOS)]
            o = opts(a, integ, comp)
            arr = random_array(rng, name, shape, low_entropy=comp and (k % 2 == 0))
            k += 1
            w.add(f"dense_{name}_r{len(shape)}_{'x'.join(map(str, shape)) or 'scalar'}_a{a}"
                  f"{'_int' if integ else ''}{'_lz4' if comp else ''}", dumps(arr, o), dense_expect(arr), options=o)
    # bigger bodies: 1 MiB float32, compression block-size boundaries, a two-block 4 MiB+ frame
    big = rng.standard_normal(1 << 18).astype(np.float32)
    w.add("dense_float32_1mib", dumps(big, opts()), dense_expect(big), options=opts())
    w.add("dense_float32_1mib_int", dumps(big, opts(integrity=True)), dense_expect(big), options=opts(integrity=True))
    for n in (65536, 65537, 262145):
        a = rng.integers(0, 3, size=n).astype(np.uint8)
        w.add(f"dense_uint8_{n}_lz4", dumps(a, opts(compress=True)), dense_expect(a), options=opts(compress=True))
    semi = np.repeat(rng.standard_normal(300_000).astype(np.float32), 4)  # 4.8 MB, two LZ4 blocks
    o = opts(compress=True, integrity=True, alignment=128)
    w.add("dense_float32_4_8mb_lz4_int_a128", dumps(semi, o), dense_expect(semi), options=o)
    rnd = rng.integers(0, 256, size=100_000).astype(np.uint8)  # incompressible: frame grows
    w.add("dense_uint8_incompressible_lz4", dumps(rnd, opts(compress=True)), dense_expect(rnd), options=opts(compress=True))
    # a non-contiguous input: tenso writes C order
    t = random_array(rng, "int16", (4, 6)).T
    w.add("dense_int16_transposed", dumps(t, opts()), dense_expect(t), options=opts())


def random_sparse(rng, fmt, shape, dtype, density=0.3):
    m = sp.random(*shape, density=density, format="coo", random_state=np.random.RandomState(int(rng.integers(1 << 31))))
    data = random_array(rng, dtype, (m.nnz,))
    m = sp.coo_matrix((data, (m.row, m.col)), shape=shape)
    return m.asformat(fmt)


def gen_sparse(w, rng):
    cases = [
        ("coo", (5, 7), "float32"), ("csr", (6, 4), "float64"), ("csc", (3, 9), "int64"),
        ("coo", (4, 4), "complex64"), ("csr", (8, 8), "int8"), ("csc", (5, 5), "bool"),
        ("csr", (4, 6), "uint16"), ("coo", (3, 3), "int32"),  # scipy has no float16/bfloat16 sparse
    ]
    for fmt, shape, dtype in cases:
        m = random_sparse(rng, fmt, shape, dtype)
        w.add(f"sparse_{fmt}_{dtype}_{shape[0]}x{shape[1]}", dumps(m, opts()), sparse_expect(m), options=opts())
    # COO with duplicate and unsorted coordinates (kept verbatim)
    m = sp.coo_matrix((np.array([1.0, 2.0, 3.0, 4.0], np.float32), (np.array([2, 0, 2, 1], np.int32),
                       np.array([1, 0, 1, 2], np.int32))), shape=(3, 3))
    w.add("sparse_coo_duplicates", dumps(m, opts()), sparse_expect(m), options=opts())
    # nnz = 0, int64 indices, a sparse *array*, options that tenso ignores for sparse
    m = sp.csr_matrix((4, 5), dtype=np.float32)
    w.add("sparse_csr_empty", dumps(m, opts()), sparse_expect(m), options=opts())
    m = random_sparse(rng, "coo", (6, 6), "float32")
    m = sp.coo_matrix((m.data, (m.row.astype(np.int64), m.col.astype(np.int64))), shape=m.shape)
    w.add("sparse_coo_int64_indices", dumps(m, opts()), sparse_expect(m), options=opts())
    m = sp.csc_array(random_sparse(rng, "csc", (4, 7), "float32"))
    w.add("sparse_csc_array", dumps(m, opts()), sparse_expect(m), options=opts())
    m = random_sparse(rng, "coo", (5, 5), "float64")
    w.add("sparse_coo_options_ignored", dumps(m, opts(16, True, True)), sparse_expect(m), options=opts(16, True, True))


QDTS = ["qint8", "quint8", "qint4", "quint4"]


def quant_params(shape):
    out = [("per_tensor", 0, 0)]
    for ax in range(len(shape)):
        out.append(("per_channel", ax, 0))
    out += [("per_group", 0, 5), ("per_group", 0, 7)]
    return out


def gen_quant(w, rng):
    shapes = [(4, 6), (3, 5), (2, 3, 5), (9,)]
    k = 0
    for qd in QDTS:
        for shape in shapes:
            for scheme, axis, gs in quant_params(shape):
                o = [opts(), opts(integrity=True), opts(alignment=8), opts(alignment=256, integrity=True)][k % 4]
                k += 1
                x = (rng.standard_normal(shape) * rng.uniform(0.01, 50) + rng.uniform(-5, 5)).astype(np.float32)
                if k % 7 == 0:
                    x = np.abs(x)  # all positive: zero point outside the range
                q = tenso.QuantizedTensor.quantize(x, qd, scheme=scheme, group_size=gs, axis=axis)
                name = f"quant_{qd}_{scheme}_{'x'.join(map(str, shape))}_ax{axis}_g{gs}_a{o['alignment']}" \
                       f"{'_int' if o['integrity'] else ''}"
                qin = {"shape": list(shape), "hex": x.astype("<f4").tobytes().hex(), "qdtype": qd, "scheme": scheme,
                       "axis": axis, "group_size": gs, "options": o}
                w.add(name, dumps(q, o), quant_expect(q), options=o, quantize_input=qin)
    # a constant input (scale 1, zero point 0) and a 0-d tensor
    for qd in QDTS:
        for shape, x in [((2, 3), np.full((2, 3), 3.25, np.float32)), ((), np.array(1.5, np.float32))]:
            q = tenso.QuantizedTensor.quantize(x, qd)
            qin = {"shape": list(shape), "hex": x.astype("<f4").tobytes().hex(), "qdtype": qd, "scheme": "per_tensor",
                   "axis": 0, "group_size": 0, "options": opts()}
            w.add(f"quant_{qd}_const_{len(shape)}d", dumps(q, opts()), quant_expect(q), options=opts(),
                  quantize_input=qin)


def gen_strings(w, rng):
    lists = {
        "mixed": ["hi", "", "world", "ñ", "日本語テキスト", "emoji 🦀🐍", "tab\tand\nnewline", "\x00nul"],
        "empty": [],
        "one_empty": [""],
        "many": ["".join(chr(int(c)) for c in rng.integers(32, 0x2FF, size=int(rng.integers(0, 40))))
                 for _ in range(300)],
        "long": ["x" * 100_000, "y"],
    }
    for name, items in lists.items():
        for integ in (False, True):
            st = tenso.StringTensor(items)
            w.add(f"string_{name}{'_int' if integ else ''}", st.dumps(check_integrity=integ),
                  {"kind": "string", "strings": items}, options=opts(integrity=integ))


def bundle_expect(d):
    entries = []
    for k, v in d.items():
        if isinstance(v, dict):
            entries.append([k, bundle_expect(v)])
        elif isinstance(v, tenso.QuantizedTensor):
            entries.append([k, quant_expect(v)])
        elif sp.issparse(v):
            entries.append([k, sparse_expect(v)])
        else:
            entries.append([k, dense_expect(v)])
    return {"kind": "bundle", "entries": entries}


def gen_bundles(w, rng):
    flat = {"weights": random_array(rng, "float32", (4, 4)), "ids": random_array(rng, "int64", (0,)),
            "mask": random_array(rng, "bool", (3,)), "half": random_array(rng, "bfloat16", (2, 2))}
    w.add("bundle_flat", dumps(flat, opts()), bundle_expect(flat), options=opts())
    q = tenso.QuantizedTensor.quantize(rng.standard_normal((3, 4)).astype(np.float32), "qint4", scheme="per_channel", axis=1)
    nested = {
        "layer0": {"w": random_array(rng, "float16", (2, 3)), "b": random_array(rng, "float64", ())},
        "layer1": {"inner": {"deep": random_array(rng, "uint16", (5,)), "c": random_array(rng, "complex128", (2,))},
                   "sparse": random_sparse(rng, "csr", (4, 5), "float32"),
                   "quant": q},
        "": random_array(rng, "int8", (3,)),
        "ключ ✓": random_array(rng, "uint64", (2, 2)),
    }
    for o, suffix in [(opts(), ""), (opts(integrity=True), "_int"), (opts(alignment=16), "_a16"),
                      (opts(alignment=1, integrity=True), "_a1_int")]:
        w.add("bundle_nested" + suffix, dumps(nested, o), bundle_expect(nested), options=o)
    w.add("bundle_empty", dumps({}, opts()), {"kind": "bundle", "entries": []}, options=opts())
    # tenso writes compressed leaves and then cannot read its own packet (spec 9.4 / 21.1)
    comp = {"a": np.zeros(64, np.float32), "b": {"c": np.arange(10, dtype=np.int32)}}
    packet = bytes(dumps(comp, opts(compress=True)))
    try:
        tenso.loads(packet)
        err = None
    except Exception as e:  # noqa: BLE001
        err = str(e)
    if err is None or "Unsupported or unknown dtype code: 0" not in err:
        sys.exit(f"tenso_gen: expected tenso to refuse its own compressed bundle, got {err!r}")
    w.add("bundle_compressed_by_tenso", packet, bundle_expect(comp), options=opts(compress=True),
          tenso_error="Unsupported or unknown dtype code: 0")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=20240)
    args = ap.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    w = Writer(args.outdir)
    gen_dense(w, rng)
    gen_sparse(w, rng)
    gen_quant(w, rng)
    gen_strings(w, rng)
    gen_bundles(w, rng)
    manifest = {
        "producer": f"tenso {version('tenso')} (numpy {np.__version__}, scipy {version('scipy')}, "
                    f"ml_dtypes {ml_dtypes.__version__}), tests/python/tenso_gen.py seed {args.seed}",
        "cases": w.cases,
    }
    with open(os.path.join(args.outdir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    print(f"tenso_gen: wrote {len(w.cases)} packets to {args.outdir}")


if __name__ == "__main__":
    main()
