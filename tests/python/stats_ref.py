"""NumPy reference for the live cross-checks of core::stats: Rust (native/tests/stats_live.rs),
Node and Chromium (tests/js/stats.test.mjs, tests/browser/stats.test.mjs).

    python stats_ref.py gen OUT_DIR SEED
        Writes model files with the reference libraries, tensors chosen to test statistics:
          specials.npy      float32 with NaN, +Inf, -Inf, +0 and -0 sprinkled (300,001 values)
          offset.npy        float64 around 1e6 with small noise and a NaN (large mean, small std)
          allnan.npy        float32, every value NaN (no finite value)
          constant.npy      float16, every value 3.5 (min == max)
          empty.npy         float32 of shape (0, 4)
          big-endian.npy    '>f4' (read through a byte swap, not zero-copy)
          fortran.npy       float64 in Fortran order (read through a strided gather)
          ints.npz          np.savez_compressed (deflated): int64 and uint64 beyond 2**53, int8,
                            uint16, bool, complex128
          ml_dtypes.safetensors  safetensors.numpy: every bfloat16 bit pattern, every byte of each
                            float8 type (shuffled, 3 times over), bfloat16 normal values with NaN/Inf
        Prints the file names as JSON.

    python stats_ref.py ref JOBS_JSON
        JOBS_JSON is a list of {id, dtype, numel, bins, path}: `path` holds a tensor's bytes as
        tensorlane's reader gives them (C order, little-endian). For each, the values are made with
        the reference libraries (numpy dtypes; ml_dtypes for bfloat16, float8 and float4, packed
        two per byte low nibble first; gguf.quants.dequantize for ggml block types; complex as its
        real and imaginary parts, `x.view(float)`), as float64, and NumPy computes: count, finite,
        min, max, mean, std (ddof=0) over the finite values, zeros, nan, pos_inf, neg_inf, and
        np.histogram(finite, bins=bins, range=(min, max)) (without range when nothing is finite;
        where NumPy refuses with "Too many bins for data range", the documented substitute: one
        bin [min, max] holding every finite value).
        Prints {id: result} as JSON; every float is given as its IEEE-754 bits (an unsigned
        integer), so NaN and exact values survive JSON.

    python stats_ref.py stats < REQUESTS.json
        For the JavaScript tests (tests/js/stats.test.mjs, tests/browser/stats.test.mjs): REQUESTS
        is a list of {id, dtype, numel, file, edges}, `file` a tensor's bytes as above, `edges` the
        histogram edges the binding returned. Prints {id: {count, finite, min, max, mean, std,
        zeros, nan, pos_inf, neg_inf, counts, edges}}: the same statistics as `ref` (null where no
        value is finite), `counts` = np.histogram of the finite values over exactly `edges`, and
        `edges` NumPy's own (np.histogram_bin_edges of the finite values, as many bins).

    python stats_ref.py special OUT.safetensors
        Writes a safetensors file (safetensors.numpy.save_file) whose tensors hold NaN, +Inf, -Inf,
        -0.0 and ordinary values in float32, float16 and bfloat16, for the JavaScript tests.
"""
import json
import struct
import sys
from pathlib import Path

import ml_dtypes
import numpy as np


def gen(out: Path, seed: int) -> None:
    import safetensors.numpy as stn

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    files = []

    def save(name, arr):
        np.save(out / name, arr)
        back = np.load(out / name)
        assert back.dtype == arr.dtype and np.array_equal(back, arr, equal_nan=True), name
        files.append(name)

    x = rng.normal(size=300_001).astype(np.float32) * 3 + 1
    idx = rng.choice(x.size, size=400, replace=False)
    x[idx[:100]] = np.nan
    x[idx[100:180]] = np.inf
    x[idx[180:250]] = -np.inf
    x[idx[250:330]] = 0.0
    x[idx[330:]] = -0.0
    save("specials.npy", x)
    y = 1e6 + rng.normal(size=(500, 401)) * 1e-3
    y[7, 9] = np.nan
    save("offset.npy", y)
    save("allnan.npy", np.full((5, 7), np.nan, dtype=np.float32))
    save("constant.npy", np.full(1000, 3.5, dtype=np.float16))
    save("empty.npy", np.zeros((0, 4), dtype=np.float32))
    save("big-endian.npy", (rng.normal(size=(256, 129)) * 10).astype(">f4"))
    save("fortran.npy", np.asfortranarray(rng.normal(size=(300, 77))))

    ints = {
        "i64": np.concatenate([rng.integers(-(2**63), 2**63 - 1, size=5000, dtype=np.int64, endpoint=True),
                               np.array([2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63)], dtype=np.int64)]),
        "u64": np.concatenate([rng.integers(0, 2**64 - 1, size=5000, dtype=np.uint64, endpoint=True),
                               np.array([2**53 + 1, 2**64 - 1, 0], dtype=np.uint64)]),
        "i8": rng.integers(-128, 127, size=(40, 50), dtype=np.int8, endpoint=True),
        "u16": rng.integers(0, 65535, size=3001, dtype=np.uint16, endpoint=True),
        "b": rng.integers(0, 2, size=999).astype(bool),
        "c128": (rng.normal(size=700) + 1j * rng.normal(size=700)).astype(np.complex128),
    }
    np.savez_compressed(out / "ints.npz", **ints)
    files.append("ints.npz")

    st = {"bf16_all": np.arange(65536, dtype=np.uint16).view(ml_dtypes.bfloat16)}
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"):
        pats = np.concatenate([rng.permutation(256) for _ in range(3)]).astype(np.uint8)
        st[name] = pats.view(getattr(ml_dtypes, name)).reshape(3, 256)
    b = (rng.normal(size=70_000) * 5).astype(ml_dtypes.bfloat16)
    b[[3, 99, 1000]] = [np.nan, np.inf, -np.inf]
    st["bf16_normal"] = b
    stn.save_file(st, str(out / "ml_dtypes.safetensors"))
    # Read back by hand (safetensors.numpy writes the fnuz types but cannot load them).
    blob = (out / "ml_dtypes.safetensors").read_bytes()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    for k, v in st.items():
        a, b = header[k]["data_offsets"]
        assert blob[8 + hlen + a:8 + hlen + b] == v.view(np.uint8).tobytes(), k
        assert header[k]["shape"] == list(v.shape), k
    files.append("ml_dtypes.safetensors")
    json.dump(files, sys.stdout)


# GGUF's plain tensor types by their ggml names, as NumPy dtypes.
GGML_PLAIN = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
              "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64"}


def values(dtype: str, numel: int, raw: bytes) -> np.ndarray:
    """A tensor's values as float64 (complex: real and imaginary parts, two values each)."""
    dtype = GGML_PLAIN.get(dtype, dtype)
    u8 = np.frombuffer(raw, dtype=np.uint8)
    if dtype == "bool":
        return u8.astype(bool).astype(np.float64)
    if dtype == "float4_e2m1fn":
        nib = np.empty(u8.size * 2, dtype=np.uint8)
        nib[0::2] = u8 & 0xF
        nib[1::2] = u8 >> 4
        return nib[:numel].view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    if dtype in ("bfloat16",) or dtype.startswith("float8_"):
        return u8.view(getattr(ml_dtypes, dtype)).astype(np.float64)
    if dtype in ("complex64", "complex128"):
        return u8.view(np.dtype("<" + {"complex64": "f4", "complex128": "f8"}[dtype])).astype(np.float64)
    try:
        dt = np.dtype(dtype).newbyteorder("<")
    except TypeError:
        dt = None
    if dt is not None:
        return u8.view(dt).astype(np.float64)
    from gguf import GGMLQuantizationType as Q
    from gguf import quants

    return quants.dequantize(u8, Q[dtype]).astype(np.float64)


def bits(v) -> int:
    return struct.unpack("<Q", struct.pack("<d", float(v)))[0]


def ref(jobs_path: Path) -> None:
    out = {}
    for job in json.loads(jobs_path.read_text()):
        x = values(job["dtype"], job["numel"], Path(job["path"]).read_bytes()).ravel()
        fin = x[np.isfinite(x)]
        bins = job["bins"]
        if fin.size:
            lo, hi = fin.min(), fin.max()
            try:
                counts, edges = np.histogram(fin, bins=bins, range=(lo, hi))
            except ValueError as e:
                # "Too many bins for data range" (a constant beyond 2**53: +-0.5 is lost).
                # tensorlane documents one bin [min, max] with every finite value instead.
                assert "Too many bins" in str(e), e
                counts, edges = [fin.size], [lo, hi]
            s = dict(min=bits(lo), max=bits(hi), mean=bits(fin.mean()), std=bits(fin.std()))
        else:
            counts, edges = np.histogram(fin, bins=bins)
            s = dict(min=bits(np.nan), max=bits(np.nan), mean=bits(np.nan), std=bits(np.nan))
        s.update(
            count=int(x.size),
            finite=int(fin.size),
            zeros=int((fin == 0).sum()),
            nan=int(np.isnan(x).sum()),
            pos_inf=int((x == np.inf).sum()),
            neg_inf=int((x == -np.inf).sum()),
            edges=[bits(e) for e in edges],
            counts=[int(c) for c in counts],
        )
        out[str(job["id"])] = s
    json.dump(out, sys.stdout)


def stats(dtype, raw, numel, edges):
    """The `stats` command's result for one request."""
    x = values(dtype, numel, raw)
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
    """The `special` command: NaN, +-Inf and -0.0 among ordinary values, in three float types."""
    from safetensors.numpy import save_file

    base = np.array([1.5, np.nan, np.inf, -np.inf, 0.0, -0.0, -2.25, 3.0, np.nan, 1e3, -7.0, 0.125],
                    dtype=np.float32)
    save_file({
        "f32": base.reshape(3, 4),
        "f16": base.astype(np.float16),
        "bf16": base.astype(ml_dtypes.bfloat16).reshape(2, 6),
        "all_nan": np.full(5, np.nan, dtype=np.float32),
    }, path)


def stats_requests() -> None:
    out = {}
    for r in json.load(sys.stdin):
        out[r["id"]] = stats(r["dtype"], Path(r["file"]).read_bytes(), r["numel"], r.get("edges"))
    json.dump(out, sys.stdout)


def values_requests() -> None:
    """Each request's values ({id, dtype, numel, file}) as float64 bit patterns (hex): NaN survives JSON."""
    out = {}
    for r in json.load(sys.stdin):
        v = values(r["dtype"], r["numel"], Path(r["file"]).read_bytes())[: r["numel"]]
        out[r["id"]] = [format(bits(x), "016x") for x in v]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "gen":
        gen(Path(sys.argv[2]), int(sys.argv[3]))
    elif cmd == "ref":
        ref(Path(sys.argv[2]))
    elif cmd == "stats":
        stats_requests()
    elif cmd == "values":
        values_requests()
    elif cmd == "special":
        special(sys.argv[2])
    else:
        sys.exit(f"unknown command {cmd!r}: use gen, ref, stats, values or special")
