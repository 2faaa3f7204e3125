"""Writes random HDF5 files with h5py for the live cross-check (native/tests/formats_live_hdf5.rs).

Usage: formats_gen_hdf5.py OUT_DIR SEED

Each file mixes numeric dtypes (every integer width, float16/32/64, bool, complex64/128, both byte
orders), shapes (0-d, empty, 1-4 dims), layouts (contiguous, compact, chunked with grids that do
not divide the shape, resizable dimensions so libver='latest' uses fixed-array, extensible-array
and v2 B-tree chunk indexes, sometimes paged), filters (gzip, shuffle, fletcher32), partly
written chunked datasets and never-written contiguous ones (fill values), nested groups (some
with many links, some tracking creation order), attributes, and a string dataset that must be
skipped. Files are written with libver 'earliest' and 'latest', one with a 512-byte user block.

Prints JSON: {"files": [{"file", "libver", "tensors": [{"name", "dtype", "shape", "sha256",
"attributes"?}], "skipped": [...], "attributes": {...}, "group_attributes": {...}}]}, with the
values h5py reads back (C order, little-endian, one byte per bool).
"""

import hashlib
import json
import os
import sys

import h5py
import numpy as np

INT = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]
FLOAT = ["f2", "f4", "f8"]


def rand_array(rng, code, shape):
    if code == "b1":
        return rng.integers(0, 2, size=shape).astype(bool)
    if code[0] in "c":
        real = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return real.astype(code)
    if code[0] == "f":
        return rng.standard_normal(shape).astype(code)
    info = np.iinfo(code)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=code)


def rand_dtype(rng):
    code = rng.choice(INT + FLOAT + ["b1", "c8", "c16"])
    if code in ("i1", "u1", "b1"):
        return np.dtype(code)
    order = rng.choice(["<", ">"])
    return np.dtype(order + code)


def rand_shape(rng):
    r = rng.random()
    if r < 0.1:
        return ()
    if r < 0.18:
        return tuple(int(x) for x in rng.integers(0, 3, size=rng.integers(1, 3))) + (0,)
    rank = int(rng.integers(1, 5))
    return tuple(int(x) for x in rng.integers(1, 7 if rank > 2 else 13, size=rank))


def le_bytes(a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.astype(np.uint8).tobytes()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def json_value(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [json_value(x) for x in v.tolist()] if v.ndim else json_value(v.item())
    if isinstance(v, (np.generic,)):
        return json_value(v.item())
    if isinstance(v, list):
        return [json_value(x) for x in v]
    if isinstance(v, complex):
        return [v.real, v.imag]
    return v


def add_attrs(rng, obj):
    for k in range(int(rng.integers(0, 4))):
        kind = rng.integers(0, 4)
        name = f"attr{k}"
        if kind == 0:
            obj.attrs[name] = int(rng.integers(-1000, 1000))
        elif kind == 1:
            obj.attrs[name] = float(rng.standard_normal())
        elif kind == 2:
            obj.attrs[name] = f"text {int(rng.integers(0, 100))}"
        else:
            obj.attrs[name] = rng.standard_normal(int(rng.integers(1, 4))).astype("f4")


def make_dataset(rng, parent, name, libver):
    dt = rand_dtype(rng)
    shape = rand_shape(rng)
    data = rand_array(rng, dt.str.lstrip("<>|="), shape).astype(dt)
    kind = rng.choice(["contiguous", "compact", "chunked", "chunked", "partial", "unwritten"])
    if shape == () or 0 in shape:
        kind = "contiguous" if kind != "compact" or shape == () else "chunked"
        if shape == () and kind == "chunked":
            kind = "contiguous"
    if kind == "compact" and data.nbytes > 4000:
        kind = "contiguous"
    if kind == "contiguous":
        parent.create_dataset(name, data=data)
    elif kind == "compact":
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
        tid = h5py.h5t.py_create(dt)
        dsid = h5py.h5d.create(parent.id, name.encode(), tid, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data), mtype=tid)
    elif kind == "unwritten":
        fill = rand_array(rng, dt.str.lstrip("<>|="), ()).astype(dt)[()] if rng.random() < 0.5 else None
        parent.create_dataset(name, shape=shape, dtype=dt, fillvalue=fill)
    else:
        chunks = tuple(int(rng.integers(1, d + 1)) if d > 0 else 1 for d in shape)
        maxshape = tuple(None if d == 0 or rng.random() < 0.3 else d for d in shape)
        kw = {"chunks": chunks, "maxshape": maxshape}
        if rng.random() < 0.5:
            kw["compression"] = "gzip"
            kw["compression_opts"] = int(rng.integers(1, 10))
        if rng.random() < 0.4:
            kw["shuffle"] = True
        if rng.random() < 0.3:
            kw["fletcher32"] = True
        if kind == "partial":
            kw["fillvalue"] = rand_array(rng, dt.str.lstrip("<>|="), ()).astype(dt)[()]
            d = parent.create_dataset(name, shape=shape, dtype=dt, **kw)
            # Write only the first half along dimension 0: later chunks are never allocated.
            half = shape[0] // 2
            if half:
                d[:half] = data[:half]
        else:
            parent.create_dataset(name, data=data, **kw)
    if rng.random() < 0.3:
        add_attrs(rng, parent[name])


def big_chunked(f, rng):
    """Many chunks: fixed array paging, extensible array super blocks, a deep v2 B-tree."""
    f.create_dataset("many_chunks/fixed", data=np.arange(2500, dtype="<i2"), chunks=(1,))
    f.create_dataset("many_chunks/ext", data=rng.standard_normal(3000).astype("<f4"), chunks=(1,), maxshape=(None,))
    f.create_dataset("many_chunks/bt2", data=np.arange(40 * 40, dtype=">i4").reshape(40, 40),
                     chunks=(1, 1), maxshape=(None, None), compression="gzip")


def write_file(path, rng, libver, userblock):
    kw = {"libver": libver}
    if userblock:
        kw["userblock_size"] = 512
    with h5py.File(path, "w", **kw) as f:
        add_attrs(rng, f)
        f.attrs["title"] = "live"
        groups = [f]
        for g in range(int(rng.integers(1, 4))):
            parent = groups[int(rng.integers(0, len(groups)))]
            grp = parent.create_group(f"g{g}", track_order=bool(rng.random() < 0.3))
            add_attrs(rng, grp)
            groups.append(grp)
        for i in range(int(rng.integers(6, 14))):
            parent = groups[int(rng.integers(0, len(groups)))]
            make_dataset(rng, parent, f"d{i:02d}", libver)
        many = f.create_group("many")
        for i in range(int(rng.integers(9, 20))):
            many.create_dataset(f"x{i:02d}", data=rng.integers(0, 100, size=i + 1).astype("<i2"))
        f.create_dataset("strings", data=np.array([b"ab", b"cd"]))
        if rng.random() < 0.5:
            big_chunked(f, rng)


def describe(path, libver):
    out = {"file": os.path.basename(path), "libver": libver, "tensors": [], "skipped": []}
    with h5py.File(path, "r") as f:
        out["attributes"] = {k: json_value(v) for k, v in f.attrs.items()}
        out["group_attributes"] = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                if len(obj.attrs):
                    out["group_attributes"][name] = {k: json_value(v) for k, v in obj.attrs.items()}
                return
            if obj.dtype.kind not in "iufbc":
                out["skipped"].append(name)
                return
            a = obj[()]
            t = {
                "name": name,
                "dtype": a.dtype.name,
                "shape": list(obj.shape),
                "sha256": hashlib.sha256(le_bytes(np.asarray(a))).hexdigest(),
            }
            if len(obj.attrs):
                t["attributes"] = {k: json_value(v) for k, v in obj.attrs.items()}
            out["tensors"].append(t)

        f.visititems(visit)
    return out


def main():
    out_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    files = []
    for k, (libver, ub) in enumerate([("earliest", False), ("latest", False), ("earliest", True), ("latest", True)]):
        path = os.path.join(out_dir, f"live-{k}-{libver}.h5")
        write_file(path, rng, libver, ub)
        files.append(describe(path, libver))
    print(json.dumps({"seed": seed, "h5py": h5py.__version__, "hdf5": h5py.version.hdf5_version, "files": files}))


if __name__ == "__main__":
    main()
