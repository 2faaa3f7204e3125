"""Writes ONNX models with the onnx package for native/tests/formats_live_onnx.rs.

Usage: formats_gen_onnx.py OUT_DIR SEED

Random dtypes (every ONNX type with a numpy/ml_dtypes equivalent) and shapes (0-d and empty
included), stored as raw_data (numpy_helper.from_array), as typed fields (helper.make_tensor with
raw=False: float_data, int32_data, int64_data, double_data, uint64_data), in a subgraph (an If
node's branches), and as external data in one file and in one file per tensor
(onnx.save_model(save_as_external_data=True, size_threshold=0)). The expected bytes are what
onnx.load + numpy_helper.to_array give back (C order, little-endian; float4 repacked two per byte,
low nibble first). Prints one JSON object on stdout.
"""

import hashlib
import json
import os
import sys

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DTYPES = [
    np.float32, np.float64, np.float16, ml_dtypes.bfloat16,
    np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64,
    np.bool_, np.complex64, np.complex128,
    ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn,
]


def random_array(rng, dt, shape):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    x = rng.standard_normal(shape) * 4
    if dt == np.dtype(ml_dtypes.float8_e8m0fnu):
        x = np.exp2(rng.integers(-20, 20, size=shape)).astype(np.float32)
    return x.astype(np.float32).astype(dt)


def random_shape(rng):
    rank = int(rng.integers(0, 4))
    dims = [int(d) for d in rng.integers(1, 6, size=rank)]
    if rank and rng.random() < 0.1:
        dims[int(rng.integers(0, rank))] = 0
    return dims


def reference_bytes(t, base_dir):
    """What the reference reader gives for tensor t, as C-order little-endian bytes."""
    a = numpy_helper.to_array(t, base_dir=base_dir)
    if a.dtype == np.dtype(ml_dtypes.float4_e2m1fn):
        codes = a.reshape(-1).view(np.uint8) & 0x0F
        if codes.size % 2:
            codes = np.append(codes, np.uint8(0))
        return str(a.dtype), list(a.shape), (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8).tobytes()
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    a = a.copy(order="C")
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return str(a.dtype), list(a.shape), a.tobytes()


def storage_of(t):
    if t.data_location == TensorProto.EXTERNAL:
        return "external"
    if t.HasField("raw_data"):
        return "raw_data"
    return helper.tensor_dtype_to_field(t.data_type)


def describe(path):
    """The tensors a reader must find in the model at `path`: main graph, then subgraphs."""
    base = os.path.dirname(path)
    m = onnx.load(path, load_external_data=False)
    out = []

    def walk(g, sub):
        for t in g.initializer:
            if t.data_type == TensorProto.STRING:
                continue
            dtype, shape, data = reference_bytes(t, base)
            entry = {
                "name": t.name, "dtype": dtype, "shape": shape, "nbytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), "storage": storage_of(t),
            }
            if sub:
                entry["subgraph"] = sub
            out.append(entry)

    def subgraphs(g, path):
        for n in g.node:
            for a in n.attribute:
                for sg in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    p = f"{path}/{n.name}/{a.name}" if path else f"{n.name}/{a.name}"
                    walk(sg, p)
                    subgraphs(sg, p)

    walk(m.graph, None)
    subgraphs(m.graph, "")
    skipped = [t.name for t in m.graph.initializer if t.data_type == TensorProto.STRING]
    return {
        "path": os.path.relpath(path, OUT),
        "tensors": out,
        "skipped": skipped,
        "producer_name": m.producer_name,
        "ir_version": m.ir_version,
        "metadata_props": {p.key: p.value for p in m.metadata_props},
    }


def make_model(inits, nodes=()):
    g = helper.make_graph(list(nodes), "live", [], [], initializer=inits)
    m = helper.make_model(g, producer_name="formats_gen_onnx", opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(m, {"seed": str(SEED), "purpose": "live cross-check"})
    return m


def tensors(rng, prefix, n, raw):
    out = []
    for i in range(n):
        dt = DTYPES[int(rng.integers(0, len(DTYPES)))]
        a = random_array(rng, dt, random_shape(rng))
        name = f"{prefix}{i}_{np.dtype(dt).name}"
        if raw:
            out.append(numpy_helper.from_array(a, name))
        else:
            code = helper.np_dtype_to_tensor_dtype(a.dtype)
            # 1-d values: onnx's FLOAT8E8M0 conversion fails on 0-d arrays.
            out.append(helper.make_tensor(name, code, a.shape, a.reshape(-1), raw=False))
    return out


OUT = sys.argv[1]
SEED = int(sys.argv[2])


def main():
    rng = np.random.default_rng(SEED)
    files = []

    # Every dtype once as raw_data and once in its typed field, then random ones.
    every_raw = [numpy_helper.from_array(random_array(rng, dt, random_shape(rng)), f"all_raw_{np.dtype(dt).name}")
                 for dt in DTYPES]
    every_typed = []
    for dt in DTYPES:
        a = random_array(rng, dt, random_shape(rng))
        every_typed.append(helper.make_tensor(f"all_typed_{np.dtype(dt).name}", helper.np_dtype_to_tensor_dtype(a.dtype),
                                              a.shape, a.reshape(-1), raw=False))
    strings = helper.make_tensor("words", TensorProto.STRING, [2], [b"a", b"bc"])
    p = os.path.join(OUT, "every_dtype.onnx")
    onnx.save_model(make_model(every_raw + every_typed + [strings]), p)
    files.append(p)

    p = os.path.join(OUT, "raw.onnx")
    onnx.save_model(make_model(tensors(rng, "r", 12, True)), p)
    files.append(p)

    p = os.path.join(OUT, "typed.onnx")
    onnx.save_model(make_model(tensors(rng, "t", 12, False)), p)
    files.append(p)

    # A subgraph: an If node whose branches have their own initializers.
    then_g = helper.make_graph([], "then", [], [], initializer=tensors(rng, "then", 2, True))
    else_g = helper.make_graph([], "else", [], [], initializer=tensors(rng, "else", 2, False))
    node = helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=then_g, else_branch=else_g)
    p = os.path.join(OUT, "subgraph.onnx")
    onnx.save_model(make_model(tensors(rng, "main", 3, True), [node]), p)
    files.append(p)

    # External data: one file, and one file per tensor.
    for one in (True, False):
        d = os.path.join(OUT, "ext_one" if one else "ext_many")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "model.onnx")
        m = make_model(tensors(rng, "e", 8, True) + tensors(rng, "k", 2, False))
        onnx.save_model(m, p, save_as_external_data=True, all_tensors_to_one_file=one,
                        location="model.onnx.data" if one else None, size_threshold=0)
        files.append(p)

    print(json.dumps({"seed": SEED, "onnx": onnx.__version__, "files": [describe(f) for f in files]}))


main()
