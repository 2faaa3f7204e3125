"""NumPy (float64) reference statistics for the JavaScript stats tests (tests/js/stats.test.mjs,
tests/browser/stats.test.mjs).

    python stats_reference.py stats < REQUESTS.json > RESULTS.json
    python stats_reference.py special OUT.safetensors

`stats`: REQUESTS is a JSON list of {id, dtype, numel, file, edges}: `file` holds a tensor's C-order
little-endian bytes as a tensorlane reader returned them (the tests check them against the
fixture manifest's sha256 first), `dtype` its element type name (NumPy/ml_dtypes names, or a ggml
type such as Q4_K, which gguf.quants.dequantize turns into float32 as llama.cpp does), `edges` the
histogram edges the binding returned. Prints {id: {count, finite, min, max, mean, std, zeros, nan,
pos_inf, neg_inf, counts}}: every value widened to float64; min, max, mean, std (population,
ddof=0) over the finite values (null when there are none); zeros counts +0 and -0; `counts` is
np.histogram of the finite values over exactly `edges` (right edge closed, as NumPy does), and
`edges` NumPy's own (np.histogram_bin_edges of the finite values, as many bins). Complex values
count as their two float parts; float4_e2m1fn is unpacked two per byte, low nibble first.

`special`: writes a safetensors file (safetensors.numpy.save_file) whose tensors hold NaN, +Inf,
-Inf, -0.0 and ordinary values in float32, float16 and bfloat16, for the non-finite cases.
"""
import json
import sys

import ml_dtypes
import numpy as np

GGML_PLAIN = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
              "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64"}


def values(dtype, raw, numel):
    """The tensor's values as float64 (complex: real and imaginary parts, two values each)."""
    dtype = GGML_PLAIN.get(dtype, dtype)
    if dtype in ("complex64", "complex128"):
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).view(
            np.float32 if dtype == "complex64" else np.float64).astype(np.float64)
    if dtype == "float4_e2m1fn":
        # Two per byte, low nibble first (safetensors F4 / ml_dtypes float4_e2m1fn_x2 packing).
        b = np.frombuffer(raw, dtype=np.uint8)
        nib = np.stack([b & 0x0F, b >> 4], axis=-1).ravel()[:numel]
        return nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    if dtype == "bool":
        return np.frombuffer(raw, dtype=np.uint8).astype(bool).astype(np.float64)
    if hasattr(ml_dtypes, dtype) and not hasattr(np, dtype):
        return np.frombuffer(raw, dtype=getattr(ml_dtypes, dtype)).astype(np.float64)
    if hasattr(np, dtype):
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(np.float64)
    from gguf import quants
    from gguf.constants import GGMLQuantizationType

    q = GGMLQuantizationType[dtype]
    return quants.dequantize(np.frombuffer(raw, dtype=np.uint8), q).astype(np.float64).ravel()


def stats(dtype, raw, numel, edges):
    x = values(dtype, raw, numel)
    fin = x[np.isfinite(x)]
    out = {
        "count": int(x.size),
        "finite": int(fin.size),
        "zeros": int(np.count_nonzero(x == 0)),
        "nan": int(np.count_nonzero(np.isnan(x))),
        "pos_inf": int(np.count_nonzero(x == np.inf)),
        "neg_inf": int(np.count_nonzero(x == -np.inf)),
        "min": float(fin.min()) if fin.size else None,
        "max": float(fin.max()) if fin.size else None,
        "mean": float(fin.mean()) if fin.size else None,
        "std": float(fin.std()) if fin.size else None,
    }
    if edges is not None and len(edges) >= 2:
        counts, _ = np.histogram(fin, bins=np.asarray(edges, dtype=np.float64))
        out["counts"] = [int(c) for c in counts]
        # NumPy's own edges for that many bins over the finite values' range.
        out["edges"] = [float(e) for e in np.histogram_bin_edges(fin, bins=len(edges) - 1)]
    return out


def special(path):
    from safetensors.numpy import save_file

    base = np.array([1.5, np.nan, np.inf, -np.inf, 0.0, -0.0, -2.25, 3.0, np.nan, 1e3, -7.0, 0.125],
                    dtype=np.float32)
    save_file({
        "f32": base.reshape(3, 4),
        "f16": base.astype(np.float16),
        "bf16": base.astype(ml_dtypes.bfloat16).reshape(2, 6),
        "all_nan": np.full(5, np.nan, dtype=np.float32),
    }, path)


def main():
    if sys.argv[1:2] == ["special"]:
        special(sys.argv[2])
        return
    if sys.argv[1:2] != ["stats"]:
        sys.exit(__doc__)
    out = {}
    for r in json.load(sys.stdin):
        with open(r["file"], "rb") as f:
            raw = f.read()
        out[r["id"]] = stats(r["dtype"], raw, r["numel"], r.get("edges"))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
