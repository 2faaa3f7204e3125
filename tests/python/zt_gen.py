"""Writes random .zt files with ztensor 2.1.2 for the live cross-check (native/tests/zt_live.rs).

    python zt_gen.py OUT_DIR SEED

Writes, into OUT_DIR:
  canonical.zt       ztensor.Writer(path) (canonical form): a dense object of every storage dtype,
                     logical types (bool, f8_*, f4_e2m1, complex64/128), a scalar, zero-size tensors,
                     a tied (byte-identical) tensor, CSR / COO / quant_group / mx objects, object and
                     file attributes, a non-ASCII (NFC) name
  noncanonical.zt    Writer(path, canonical=False, align=4096): the same objects, inserted in
                     reverse order, with the larger dense ones stored as zt.zstd-seekable/1
  manifest.json      every object: layout, shape, attributes, and per part dtype, logical type,
                     the part's bytes (hex) and their sha256; the file attributes; which objects
                     are encoded in noncanonical.zt
"""
import hashlib
import json
import os
import sys

import numpy as np
import ztensor

DTYPES = {  # zt dtype -> numpy dtype
    "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "u64": np.uint64, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8,
}


def rand_bytes(rng, dtype, n):
    width = np.dtype(DTYPES[dtype]).itemsize
    return rng.integers(0, 256, size=n * width, dtype=np.uint8).tobytes()


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    objects = {}  # name -> {layout, shape, attributes, parts: {pname: (dtype, logical, bytes)}}

    def dense(name, dtype, shape, data, logical=None, attributes=None):
        objects[name] = {"layout": "dense", "shape": list(shape), "attributes": attributes,
                         "parts": {"data": (dtype, logical, data)}}

    for dt in DTYPES:
        shape = [int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 4)))]
        dense(f"dense.{dt}", dt, shape, rand_bytes(rng, dt, int(np.prod(shape))))
    # A larger tensor (several 64 KiB pages, several zstd frames when encoded), compressible.
    big = (np.arange(600_000, dtype=np.float32) % 97).astype(np.float32)
    dense("big.f32", "f32", [600_000], big.tobytes())
    dense("scalar.f64", "f64", [], np.float64(rng.standard_normal()).tobytes())
    dense("zero.a", "f32", [0, 3], b"")
    dense("zero.b", "i16", [0], b"")
    dense("tied.a", "f32", [2, 3], np.arange(6, dtype=np.float32).tobytes())
    dense("tied.b", "f32", [6], np.arange(6, dtype=np.float32).tobytes())
    dense("logical.bool", "u8", [5], bytes(rng.integers(0, 2, size=5, dtype=np.uint8)), logical="bool")
    for lt in ["f8_e4m3fn", "f8_e5m2", "f8_e4m3fnuz", "f8_e5m2fnuz", "f8_e8m0"]:
        dense(f"logical.{lt}", "u8", [7], rand_bytes(rng, "u8", 7), logical=lt)
    dense("logical.f4_e2m1", "u8", [6], rand_bytes(rng, "u8", 3), logical="f4_e2m1")
    dense("logical.complex64", "f32", [3], rand_bytes(rng, "f32", 6), logical="complex64")
    dense("logical.complex128", "f64", [2], rand_bytes(rng, "f64", 4), logical="complex128")
    dense("attrs", "i32", [2], rand_bytes(rng, "i32", 2),
          attributes={"role": "bias", "n": 3, "neg": -7, "pi": 3.5, "flag": True, "none": None,
                      "list": [1, 2.5, "x"], "nested": {"a": {"b": [0]}}})
    dense("caf\u00e9.w", "u8", [2], b"\x01\x02")
    # Profiles.
    objects["csr"] = {"layout": "zt.sparse_csr/1", "shape": [2, 3], "attributes": None, "parts": {
        "values": ("f32", None, np.array([1, 2, 3], np.float32).tobytes()),
        "indices": ("u32", None, np.array([0, 2, 1], np.uint32).tobytes()),
        "indptr": ("u32", None, np.array([0, 2, 3], np.uint32).tobytes())}}
    objects["coo"] = {"layout": "zt.sparse_coo/1", "shape": [4, 5], "attributes": None, "parts": {
        "values": ("f64", None, np.array([1.5, -2.0], np.float64).tobytes()),
        "coords": ("u64", None, np.array([0, 3, 4, 1], np.uint64).tobytes())}}
    objects["q4"] = {"layout": "zt.quant_group/1", "shape": [2, 16], "attributes": {
        "axis": 1, "bits": 4, "group_size": 8,
        "packing": {"word": "u32", "order": "lsb_first", "per_word": 8},
        "scale_form": "f32_factors", "zero_point": {"form": "implied", "value": 8}}, "parts": {
        "data": ("u32", None, np.array([1985229328, 4275878552] * 2, np.uint32).tobytes()),
        "scales": ("f32", None, np.array([0.5, 0.25, 1.0, 2.0], np.float32).tobytes())}}
    objects["mx"] = {"layout": "zt.mx/1", "shape": [1, 32], "attributes": {
        "block_size": 32, "scale_form": "e8m0_exponent"}, "parts": {
        "data": ("u8", "f4_e2m1", bytes(range(16))),
        "scales": ("u8", "f8_e8m0", bytes([127]))}}
    file_attrs = {"producer": "zt_gen", "seed": seed, "pi": 3.5, "neg": -42,
                  "nested": {"list": [1, 2.5, None, True]}}

    def add(w, name, obj, encoding=None):
        parts = {}
        for pname, (dt, lt, data) in obj["parts"].items():
            p = {"dtype": dt, "data": np.frombuffer(data, np.uint8)}
            if lt is not None:
                p["logical"] = lt
            if encoding is not None:
                p["encoding"] = encoding
            parts[pname] = p
        kw = {"layout": obj["layout"]}
        if obj["attributes"] is not None:
            kw["attributes"] = obj["attributes"]
        w.add_object(name, obj["shape"], parts, **kw)

    names = sorted(objects, key=lambda n: n.encode())
    w = ztensor.Writer(os.path.join(out, "canonical.zt"))
    w.set_attributes(file_attrs)
    for n in names:
        add(w, n, objects[n])
    w.finish()

    encoded = [n for n in names if objects[n]["layout"] == "dense" and
               len(objects[n]["parts"]["data"][2]) >= 16]
    w = ztensor.Writer(os.path.join(out, "noncanonical.zt"), canonical=False, align=4096)
    for n in reversed(names):
        add(w, n, objects[n], encoding="zt.zstd-seekable/1" if n in encoded else None)
    w.finish()

    manifest = {"seed": seed, "attributes": file_attrs, "encoded": encoded, "order": names, "objects": {
        n: {"layout": o["layout"], "shape": o["shape"], "attributes": o["attributes"], "parts": {
            p: {"dtype": dt, "logical": lt, "hex": data.hex(), "sha256": hashlib.sha256(data).hexdigest()}
            for p, (dt, lt, data) in o["parts"].items()}}
        for n, o in objects.items()}}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
