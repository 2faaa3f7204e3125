"""Writes random safetensors files with safetensors 0.8.0 for the live cross-check
(native/tests/formats_live_safetensors.rs).

    python formats_gen_safetensors.py OUT_DIR SEED

Writes into OUT_DIR:
  file-K.safetensors   safetensors.numpy.save_file of random tensors: every dtype the numpy
                       binding writes plus bfloat16 and the float8 types through ml_dtypes, shapes
                       with 0-d and zero-size tensors, random __metadata__ (non-ASCII included)
  packed.safetensors   float4_e2m1fn_x2 (packed float4, two per byte) through safetensors.serialize_file
  sharded/             a sharded set: shards written with save_file and a transformers-style
                       model.safetensors.index.json

Prints JSON on stdout: per file its path, metadata and tensors in data-offset order (name, dtype
as a NumPy name, shape, nbytes, sha256 of the C-order little-endian bytes, st_dtype); for the
sharded set the index path and its tensors in weight_map order with their shard. Every file is
read back with safetensors.safe_open and compared before it is reported.
"""
import hashlib
import json
import os
import struct
import sys

import ml_dtypes
import numpy as np
from safetensors import TensorSpec, safe_open, serialize_file
from safetensors.numpy import save_file

# NumPy dtype name -> safetensors dtype; ml_dtypes supplies the ones NumPy lacks.
DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
    "uint32": "U32", "int32": "I32", "uint64": "U64", "int64": "I64",
    "float16": "F16", "float32": "F32", "float64": "F64", "complex64": "C64",
    "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0",
}
TEXT = ["", "a", "naïve café ✓", '{"json": [1, 2]}', "line\nbreak", "tab\tand \"quotes\"", "日本語"]


def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def random_array(rng, name):
    dt = np_dtype(name)
    rank = int(rng.integers(0, 4))
    shape = tuple(int(d) for d in rng.integers(0, 5, size=rank))
    if rng.random() < 0.15 and rank:
        shape = shape[:-1] + (0,)
    n = int(np.prod(shape, dtype=np.int64))
    if name == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def describe(path, arrays, names=None):
    """The tensors of `path` in data-offset order, checked against safe_open."""
    h = header(path)
    order = sorted((k for k in h if k != "__metadata__"), key=lambda k: tuple(h[k]["data_offsets"]))
    out = []
    with safe_open(path, framework="np") as f:
        assert sorted(f.keys()) == sorted(arrays), (path, f.keys())
    for k in order:
        a, dtype = arrays[k]
        data = np.ascontiguousarray(a).tobytes()
        out.append({
            "name": k, "dtype": dtype, "shape": list(h[k]["shape"]), "nbytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "st_dtype": h[k]["dtype"],
        })
    # The numpy binding cannot load the ml_dtypes types; compare those through the raw header.
    with open(path, "rb") as f:
        blob = f.read()
    start = 8 + struct.unpack("<Q", blob[:8])[0]
    for t in out:
        b, e = h[t["name"]]["data_offsets"]
        assert hashlib.sha256(blob[start + b:start + e]).hexdigest() == t["sha256"], (path, t["name"])
    return out


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    report = {"seed": seed, "files": []}
    names = list(DTYPES)
    for k in range(6):
        arrays = {}
        for i in range(int(rng.integers(1, 12))):
            dtype = names[int(rng.integers(0, len(names)))]
            arrays[f"layer.{i}.{dtype}"] = (random_array(rng, dtype), dtype)
        metadata = {f"key{j}": TEXT[int(rng.integers(0, len(TEXT)))] for j in range(int(rng.integers(0, 4)))}
        path = os.path.join(out, f"file-{k}.safetensors")
        save_file({n: a for n, (a, _) in arrays.items()}, path, metadata=metadata or None)
        report["files"].append({"path": path, "metadata": metadata, "tensors": describe(path, arrays)})

    # Packed float4: storage shape (.., k) bytes, header shape (.., 2k) elements.
    arrays, keep, specs = {}, [], {}
    for i in range(3):
        storage = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(1, 3))))
        raw = rng.integers(0, 256, size=storage, dtype=np.uint8)
        keep.append(raw)
        specs[f"f4.{i}"] = TensorSpec(dtype="float4_e2m1fn_x2", shape=list(storage), data_ptr=raw.ctypes.data,
                                      data_len=raw.nbytes)
        arrays[f"f4.{i}"] = (raw, "float4_e2m1fn")
    path = os.path.join(out, "packed.safetensors")
    serialize_file(specs, path, metadata={"packing": "float4_e2m1fn_x2"})
    report["files"].append({"path": path, "metadata": {"packing": "float4_e2m1fn_x2"},
                            "tensors": describe(path, arrays)})

    # A sharded set.
    shard_dir = os.path.join(out, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    shards = int(rng.integers(2, 4))
    arrays = {}
    for i in range(int(rng.integers(shards, 10))):
        dtype = names[int(rng.integers(0, len(names)))]
        arrays[f"model.layers.{i}.weight"] = (random_array(rng, dtype), dtype)
    weight_map, total = {}, 0
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: a for j, (n, a) in enumerate(arrays.items()) if j % shards == s}
        save_file({n: a for n, (a, _) in part.items()}, os.path.join(shard_dir, fname), metadata={"format": "np"})
        for n, (a, _) in part.items():
            weight_map[n] = fname
            total += a.nbytes
    weight_map = dict(sorted(weight_map.items()))
    index = os.path.join(shard_dir, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    tensors = []
    for n, fname in weight_map.items():
        a, dtype = arrays[n]
        data = np.ascontiguousarray(a).tobytes()
        tensors.append({"name": n, "dtype": dtype, "shape": list(a.shape), "nbytes": len(data),
                        "sha256": hashlib.sha256(data).hexdigest(), "shard": fname})
    report["index"] = {"path": index, "total_size": total, "tensors": tensors}
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
