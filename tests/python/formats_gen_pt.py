"""Writes PyTorch-layout checkpoints with CPython's own pickler, for the live cross-check
native/tests/formats_live_pt.rs.

torch (a 5 GB CUDA build) is too large to install here, so this script stands in for it the way
the checkpoint format is defined: `torch.save` is `pickle.Pickler` with a `persistent_id` that
names storages, over tensors that reduce to `torch._utils._rebuild_tensor_v2` /
`_rebuild_tensor_v3` and Parameters that reduce to `_rebuild_parameter`. Stand-in `torch` and
`torch._utils` modules hold objects with those exact names, so the pickler writes the same
GLOBAL / BINPERSID / REDUCE stream torch does, at every protocol 1-5, in the zip layout and in
the legacy layout. Expected bytes come from numpy: the storage array viewed with the tensor's
offset, shape and strides (np.lib.stride_tricks.as_strided), copied in C order, little-endian.

Usage: formats_gen_pt.py OUT_DIR SEED  ->  JSON on stdout: [{file, variant, protocol,
byteorder, tensors: [{name, dtype, shape, sha256, parameter}], values}].
"""

import collections
import hashlib
import io
import json
import os
import pickle
import random
import struct
import sys
import types
import zipfile

import ml_dtypes
import numpy as np

# --- stand-in torch modules -------------------------------------------------------------------

torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
torch._utils = utils
sys.modules["torch"] = torch
sys.modules["torch._utils"] = utils


def _named(module, mod_name, name, obj):
    obj.__module__ = mod_name
    obj.__qualname__ = name
    obj.__name__ = name
    setattr(module, name, obj)
    return obj


for fn in ["_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter"]:
    _named(utils, "torch._utils", fn, (lambda *a: None))

# dtype name -> (storage class name or None for v3, numpy dtype)
DTYPES = {
    "float32": ("FloatStorage", np.dtype("<f4")),
    "float64": ("DoubleStorage", np.dtype("<f8")),
    "float16": ("HalfStorage", np.dtype("<f2")),
    "bfloat16": ("BFloat16Storage", np.dtype(ml_dtypes.bfloat16)),
    "int64": ("LongStorage", np.dtype("<i8")),
    "int32": ("IntStorage", np.dtype("<i4")),
    "int16": ("ShortStorage", np.dtype("<i2")),
    "int8": ("CharStorage", np.dtype("i1")),
    "uint8": ("ByteStorage", np.dtype("u1")),
    "bool": ("BoolStorage", np.dtype("?")),
    "complex64": ("ComplexFloatStorage", np.dtype("<c8")),
    "uint16": (None, np.dtype("<u2")),
    "uint32": (None, np.dtype("<u4")),
    "float8_e4m3fn": (None, np.dtype(ml_dtypes.float8_e4m3fn)),
    "float8_e5m2": (None, np.dtype(ml_dtypes.float8_e5m2)),
}

STORAGE_CLASSES = {}
for name, (cls_name, _) in DTYPES.items():
    if cls_name:
        STORAGE_CLASSES[name] = _named(torch, "torch", cls_name, type(cls_name, (), {}))
UntypedStorage = _named(torch, "torch", "UntypedStorage", type("UntypedStorage", (), {}))


class Dtype:
    """A torch.<dtype> object: pickles as the global torch.<name>, as torch.dtype does."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


Dtype.__module__ = "torch"
DTYPE_OBJECTS = {}
for name in DTYPES:
    DTYPE_OBJECTS[name] = Dtype(name)
    setattr(torch, name, DTYPE_OBJECTS[name])


class Storage:
    def __init__(self, key, dtype, array):
        self.key, self.dtype, self.array = key, dtype, array  # array: 1-d numpy, the elements


class Tensor:
    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride

    def __reduce_ex__(self, proto):
        od = collections.OrderedDict()
        args = (self.storage, self.offset, tuple(self.shape), tuple(self.stride), False, od)
        if DTYPES[self.storage.dtype][0] is None:
            return (utils._rebuild_tensor_v3, args + (DTYPE_OBJECTS[self.storage.dtype],))
        return (utils._rebuild_tensor_v2, args)

    def expected(self):
        # Gather through an unsigned view of the same item size (as_strided does not take the
        # ml_dtypes types); the bytes are the same.
        item = self.storage.array.dtype.itemsize
        a = self.storage.array.view(f"<u{item}")
        v = np.lib.stride_tricks.as_strided(
            a[self.offset :] if a.size else a,
            shape=self.shape,
            strides=[s * item for s in self.stride],
        )
        return np.ascontiguousarray(v).tobytes()


class Parameter:
    def __init__(self, tensor, requires_grad):
        self.tensor, self.requires_grad = tensor, requires_grad

    def __reduce_ex__(self, proto):
        return (utils._rebuild_parameter, (self.tensor, self.requires_grad, collections.OrderedDict()))


class Saver(pickle.Pickler):
    legacy = False

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            cls = STORAGE_CLASSES.get(obj.dtype, UntypedStorage)
            numel = obj.array.size if cls is not UntypedStorage else obj.array.nbytes
            pid = ("storage", cls, obj.key, "cpu", numel)
            return pid + (None,) if self.legacy else pid
        return None


# --- random checkpoints -----------------------------------------------------------------------


def random_array(rng, dtype, n):
    _, npd = DTYPES[dtype]
    if dtype == "bool":
        return rng.integers(0, 2, n).astype("?")
    if npd.kind in "iu":
        info = np.iinfo(npd)
        return rng.integers(info.min, info.max, n, dtype=npd, endpoint=True)
    if npd.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(npd)
    return rng.standard_normal(n).astype(npd)


def random_view(rng, storage_len):
    """(offset, shape, stride) inside a storage of storage_len elements."""
    kind = rng.choice(["full", "offset", "transposed", "strided", "scalar"])
    if kind == "scalar":
        return int(rng.integers(0, storage_len)), [], []
    if kind == "strided":
        step = int(rng.integers(2, 4))
        off = int(rng.integers(0, step))
        n = (storage_len - off + step - 1) // step
        return off, [n], [step]
    if kind == "transposed" and storage_len % 2 == 0:
        r, c = 2, storage_len // 2
        return 0, [c, r], [1, c]
    if kind == "offset":
        off = int(rng.integers(0, storage_len))
        return off, [storage_len - off], [1]
    return 0, [storage_len], [1]


def build(rng, pyrng):
    """A nested checkpoint object, its tensors (name, Tensor, is_parameter) and plain values."""
    storages, tensors, values = [], [], {}
    next_key = [0]

    def new_tensor(name):
        if storages and pyrng.random() < 0.25:
            st = pyrng.choice(storages)  # a second view of an existing storage
        else:
            dtype = pyrng.choice(sorted(DTYPES))
            n = int(rng.integers(1, 13))
            st = Storage(str(next_key[0]), dtype, random_array(rng, dtype, n))
            next_key[0] += 1
            storages.append(st)
        t = Tensor(st, *random_view(rng, st.array.size))
        if pyrng.random() < 0.2:
            tensors.append((name, t, True))
            return Parameter(t, pyrng.random() < 0.5)
        tensors.append((name, t, False))
        return t

    root = collections.OrderedDict() if pyrng.random() < 0.5 else {}
    for i in range(pyrng.randint(1, 4)):
        kind = pyrng.choice(["tensor", "dict", "list", "value"])
        key = f"k{i}"
        if kind == "tensor":
            root[key] = new_tensor(key)
        elif kind == "dict":
            root[key] = {f"w{j}": new_tensor(f"{key}.w{j}") for j in range(pyrng.randint(1, 3))}
        elif kind == "list":
            root[key] = [new_tensor(f"{key}.{j}") for j in range(pyrng.randint(1, 3))]
        else:
            v = pyrng.choice([3, 0.125, "text", None, True])
            root[key] = v
            values[key] = v
    return root, storages, tensors, values


def storage_bytes(st, big):
    a = st.array
    if big and a.dtype.itemsize > 1:
        if a.dtype.kind == "c":
            a = a.view(np.dtype(f"<f{a.dtype.itemsize // 2}")).astype(f">f{a.dtype.itemsize // 2}")
        elif a.dtype.kind in "iuf" and a.dtype.fields is None and a.dtype.str[0] in "<>":
            a = a.astype(a.dtype.newbyteorder(">"))
        else:  # bfloat16: swap the bytes of each element
            a = a.view("<u2").astype(">u2")
    return a.tobytes()


def write_zip(path, root, storages, protocol, big):
    buf = io.BytesIO()
    Saver(buf, protocol=protocol).dump(root)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "big" if big else "little")
        for st in storages:
            z.writestr(f"archive/data/{st.key}", storage_bytes(st, big))
        z.writestr("archive/version", "3\n")


def write_legacy(path, root, storages, protocol, big):
    out = io.BytesIO()
    pickle.dump(0x1950A86A20F9469CFC6C, out, protocol=protocol)
    pickle.dump(1001, out, protocol=protocol)
    pickle.dump(
        {"protocol_version": 1001, "little_endian": not big, "type_sizes": {"short": 2, "int": 4, "long": 4}},
        out,
        protocol=protocol,
    )
    s = Saver(out, protocol=protocol)
    s.legacy = True
    s.dump(root)
    pickle.dump([st.key for st in storages], out, protocol=protocol)
    for st in storages:
        numel = st.array.size if DTYPES[st.dtype][0] else st.array.nbytes
        out.write(struct.pack(">q" if big else "<q", numel))
        out.write(storage_bytes(st, big))
    with open(path, "wb") as f:
        f.write(out.getvalue())


def main():
    out_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    pyrng = random.Random(seed)
    files = []
    for i in range(40):
        root, storages, tensors, values = build(rng, pyrng)
        protocol = 1 + i % 5
        variant = pyrng.choice(["zip", "legacy"])
        big = pyrng.random() < 0.25
        if variant == "legacy" and any(DTYPES[st.dtype][0] is None for st in storages):
            variant = "zip"  # v3 (untyped storages) exists only in the zip format
        path = os.path.join(out_dir, f"ckpt-{i}.pt")
        (write_zip if variant == "zip" else write_legacy)(path, root, storages, protocol, big)
        files.append(
            {
                "file": path,
                "variant": variant,
                "protocol": protocol,
                "byteorder": "big" if big else "little",
                "values": values,
                "tensors": [
                    {
                        "name": name,
                        "dtype": t.storage.dtype,
                        "shape": t.shape,
                        "sha256": hashlib.sha256(t.expected()).hexdigest(),
                        "parameter": param,
                    }
                    for name, t, param in tensors
                ],
            }
        )
    json.dump(files, sys.stdout)


if __name__ == "__main__":
    main()
