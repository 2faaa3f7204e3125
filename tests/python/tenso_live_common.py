"""Shared helpers for the tenso 0.24.0 live cross-check scripts (tenso_gen.py, tenso_check.py).

Manifest schema (``manifest.json`` in a packet folder), written by tenso_gen.py and by
native/tests/tenso_live.rs:

    {"producer": "...", "cases": [CASE, ...]}

    CASE   = {"name": str, "file": "<name>.tenso", **EXPECT, "options": OPTIONS?,
              "tenso_error": str?,        # tenso.loads must raise an error containing this text
              "probe": bool?,             # a finding to report, not a hard requirement
              "quantize_input": QINPUT?}  # the float32 input the quantized packet came from
    EXPECT = {"kind": "dense", "dtype": numpy name, "shape": [int], "sha256": hex of C-order LE bytes,
              "hex": bytes (small tensors only)}
           | {"kind": "bundle", "entries": [[key, EXPECT], ...]}          (wire order)
           | {"kind": "sparse", "format": "coo"|"csr"|"csc", "shape": [r, c],
              "components": [EXPECT(dense) x 3]}                          (wire order)
           | {"kind": "quantized", "qdtype": "qint8"|..., "shape": [int], "scheme": "per_tensor"|...,
              "axis": int, "group_size": int, "scales_hex": f32 LE, "zero_points_hex": f32 LE,
              "data_hex": packed body, "dequantized_sha256": sha of float32 C-order bytes}
           | {"kind": "string", "strings": [str]}
    OPTIONS = {"alignment": int, "integrity": bool, "compress": bool}   (how the packet was written)
    QINPUT  = {"shape": [int], "hex": float32 LE, "qdtype": str, "scheme": str, "axis": int,
               "group_size": int, "options": OPTIONS}
"""

import hashlib

import numpy as np

SCHEMES = {0: "per_tensor", 1: "per_channel", 2: "per_group"}
QDTYPES = {16: "qint8", 17: "quint8", 18: "qint4", 19: "quint4"}


def c_bytes(a: np.ndarray) -> bytes:
    """C-order little-endian bytes of an array (the host is little-endian)."""
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def dense_expect(a: np.ndarray, hex_limit: int = 4096) -> dict:
    b = c_bytes(a)
    e = {"kind": "dense", "dtype": a.dtype.name, "shape": [int(d) for d in a.shape], "sha256": sha256(b)}
    if len(b) <= hex_limit:
        e["hex"] = b.hex()
    return e


def quant_expect(q) -> dict:
    return {
        "kind": "quantized",
        "qdtype": QDTYPES[int(q.dtype_code)],
        "shape": [int(d) for d in q.shape],
        "scheme": SCHEMES.get(int(q.quant_scheme), "unknown"),
        "axis": int(q.axis),
        "group_size": int(q.group_size),
        "scales_hex": np.asarray(q.scales, dtype="<f4").tobytes().hex(),
        "zero_points_hex": np.asarray(q.zero_points, dtype="<f4").tobytes().hex(),
        "data_hex": np.asarray(q.data, dtype=np.uint8).tobytes().hex(),
        "dequantized_sha256": sha256(c_bytes(np.asarray(q.dequantize(), dtype=np.float32))),
    }


def sparse_expect(m) -> dict:
    fmt = m.format
    if fmt == "coo":
        comps = [m.data, m.row, m.col]
    else:
        comps = [m.data, m.indices, m.indptr]
    return {
        "kind": "sparse",
        "format": fmt,
        "shape": [int(d) for d in m.shape],
        "components": [dense_expect(np.asarray(c)) for c in comps],
    }
