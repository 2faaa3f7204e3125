"""Writes random .npy and .npz files with NumPy for the live cross-check
(native/tests/formats_live_npy.rs).

    python formats_gen_npy.py OUT_DIR SEED

Writes into OUT_DIR:
  array-K.npy       np.save of a random array: dtypes b1, i1-i8, u1-u8, f2-f8, c8, c16; little-
                    and big-endian; C and Fortran order; 0-d and zero-size shapes
  versioned-K.npy   np.lib.format.write_array with an explicit format version (1.0, 2.0, 3.0)
  stored.npz        np.savez of several such arrays (stored members)
  compressed.npz    np.savez_compressed of several (deflated members)

Prints JSON on stdout: per file its path and tensors (name, dtype, shape, nbytes, sha256 of the
C-order little-endian bytes, stored_dtype and fortran_order as np.lib.format reads them from the
header, and for .npz the member). Every file is read back with np.load and compared first.
"""
import hashlib
import io
import json
import os
import sys
import zipfile

import numpy as np

CODES = ["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]


def random_array(rng):
    code = CODES[int(rng.integers(0, len(CODES)))]
    order = "<>"[int(rng.integers(0, 2))]
    dt = np.dtype(order + code)
    rank = int(rng.integers(0, 4))
    shape = tuple(int(d) for d in rng.integers(1, 5, size=rank))
    if rank and rng.random() < 0.15:
        shape = shape[:-1] + (0,)
    n = int(np.prod(shape, dtype=np.int64))
    if code == "b1":
        a = rng.integers(0, 2, size=shape).astype(dt)
    else:
        a = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)
    if rank >= 2 and rng.random() < 0.5:
        a = np.asfortranarray(a)
    return a


def same(x, y):
    """Identical dtype, shape and element bytes (NaN payloads included)."""
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes(order="C") == y.tobytes(order="C")


def expected(a):
    """The C-order little-endian bytes of `a` as the manifest describes them."""
    le = a.astype(a.dtype.newbyteorder("<"), copy=True)
    data = np.ascontiguousarray(le).tobytes()
    return {"dtype": le.dtype.name if le.dtype != np.bool_ else "bool", "shape": list(a.shape),
            "nbytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def header_of(fp):
    version = np.lib.format.read_magic(fp)
    # NumPy's own header parser (public for 1.0 and 2.0; 3.0 only through the private one).
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp)
    else:
        from numpy.lib import _format_impl
        shape, fortran, dtype = _format_impl._read_array_header(fp, version)
    return {"stored_dtype": np.lib.format.dtype_to_descr(dtype), "fortran_order": bool(fortran),
            "header_version": "%d.%d" % version}


def describe(a, fp):
    t = expected(a)
    t.update(header_of(fp))
    return t


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    files = []
    for k in range(12):
        a = random_array(rng)
        path = os.path.join(out, f"array-{k}.npy")
        np.save(path, a)
        back = np.load(path)
        assert same(back, a), path
        with open(path, "rb") as fp:
            files.append({"path": path, "npz": False, "tensors": [dict(describe(a, fp), name="array")]})
    for k, version in enumerate([(1, 0), (2, 0), (3, 0)]):
        a = random_array(rng)
        path = os.path.join(out, f"versioned-{k}.npy")
        with open(path, "wb") as fp:
            np.lib.format.write_array(fp, a, version=version)
        with open(path, "rb") as fp:
            t = dict(describe(a, fp), name="array")
        assert t["header_version"] == "%d.%d" % version
        files.append({"path": path, "npz": False, "tensors": [t]})
    for fname, save in [("stored.npz", np.savez), ("compressed.npz", np.savez_compressed)]:
        arrays = {f"arr_{i}": random_array(rng) for i in range(int(rng.integers(1, 7)))}
        arrays["scalar"] = np.array(rng.random(), dtype=">f8")
        path = os.path.join(out, fname)
        save(path, **arrays)
        tensors = []
        with zipfile.ZipFile(path) as z, np.load(path) as loaded:
            for info in z.infolist():
                name = info.filename[:-4]
                a = arrays[name]
                assert same(loaded[name], a), (path, name)
                fp = io.BytesIO(z.read(info.filename))
                t = dict(describe(a, fp), name=name, member=info.filename,
                         zip_method="deflate" if info.compress_type == zipfile.ZIP_DEFLATED else "stored")
                tensors.append(t)
        files.append({"path": path, "npz": True, "tensors": tensors})
    json.dump({"seed": seed, "files": files}, sys.stdout)


if __name__ == "__main__":
    main()
