"""Live cross-check of `tensorlane convert` (cli/tests/formats_convert_live.rs).

    python formats_convert_check.py gen OUT_DIR SEED      (formats venv)
        Writes random .safetensors (safetensors.numpy.save_file), .npy and .npz (numpy) files with
        random shapes and dtypes into OUT_DIR; prints {"files": [{"path", "tensors": {name:
        {"dtype", "shape", "sha256"}}}]} with the sha256 of each tensor's C-order little-endian
        bytes.
    python formats_convert_check.py safetensors EXPECT_JSON   (formats venv)
        Opens every file with the safetensors library: safetensors.deserialize gives every
        tensor's dtype, shape and raw bytes; safe_open(framework="numpy") loads the dtypes numpy
        has. Both must match EXPECT_JSON exactly (same names, no others).
    python formats_convert_check.py zt EXPECT_JSON   (ztensor 2.1.2 venv)
        Opens every file with ztensor: every object's layout, shape, dtype, logical type and bytes
        must match, and ztensor.verify(deep=True) must check every part.

EXPECT_JSON has the shape `gen` prints. dtypes are NumPy-style names (`float8_e4m3fn`, `bool`,
`complex64`, ...) or a ggml block type (`Q8_0`), which a .zt file holds as `gguf.q8_0/1`.
Prints one line per file; exits 1 on any mismatch.
"""
import hashlib
import json
import os
import random
import sys

ST_NUMPY = {
    "BOOL": "bool", "F4": "float4_e2m1fn", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16", "U16": "uint16", "F16": "float16",
    "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
    "F64": "float64", "I64": "int64", "U64": "uint64",
}
# NumPy name -> (.zt storage dtype, .zt logical type)
ZT = {
    "float64": ("f64", None), "float32": ("f32", None), "float16": ("f16", None),
    "bfloat16": ("bf16", None), "int64": ("i64", None), "int32": ("i32", None),
    "int16": ("i16", None), "int8": ("i8", None), "uint64": ("u64", None), "uint32": ("u32", None),
    "uint16": ("u16", None), "uint8": ("u8", None), "bool": ("u8", "bool"),
    "complex64": ("f32", "complex64"), "complex128": ("f64", "complex128"),
    "float8_e4m3fn": ("u8", "f8_e4m3fn"), "float8_e5m2": ("u8", "f8_e5m2"),
    "float8_e4m3fnuz": ("u8", "f8_e4m3fnuz"), "float8_e5m2fnuz": ("u8", "f8_e5m2fnuz"),
    "float8_e8m0fnu": ("u8", "f8_e8m0"), "float4_e2m1fn": ("u8", "f4_e2m1"),
}
NUMPY_NATIVE = {
    "bool", "uint8", "int8", "int16", "uint16", "float16", "int32", "uint32", "float32",
    "complex64", "float64", "int64", "uint64",
}


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def le_bytes(a):
    import numpy as np

    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()


def gen(out_dir, seed):
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    r = random.Random(seed)
    st_dtypes = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                 "uint16", "uint32", "uint64", "bool"]
    npy_dtypes = st_dtypes + ["complex64", ">f4", ">i8", "<u2"]

    def array(dtype):
        shape = tuple(r.randint(0, 5) for _ in range(r.randint(0, 3)))
        dt = np.dtype(dtype)
        if dt.kind == "b":
            return rng.integers(0, 2, size=shape).astype(bool)
        if dt.kind == "c":
            return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
        if dt.kind == "f":
            return rng.standard_normal(shape).astype(dt)
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.newbyteorder("="))\
            .astype(dt)

    def entry(a):
        return {"dtype": np.dtype(a.dtype).newbyteorder("=").name, "shape": list(a.shape),
                "sha256": sha(le_bytes(a))}

    files = []
    for i in range(3):
        tensors = {f"layer{j}.{r.choice(['weight', 'bias', 'scale'])}{j}": array(r.choice(st_dtypes))
                   for j in range(r.randint(1, 8))}
        path = os.path.join(out_dir, f"random-{i}.safetensors")
        save_file(tensors, path, metadata={"seed": str(seed), "i": str(i)})
        files.append({"path": path, "tensors": {n: entry(a) for n, a in tensors.items()}})
    for i in range(4):
        a = array(r.choice(npy_dtypes))
        if a.ndim >= 2 and r.random() < 0.5:
            a = np.asfortranarray(a)
        path = os.path.join(out_dir, f"random-{i}.npy")
        np.save(path, a)
        files.append({"path": path, "tensors": {"array": entry(a)}})
    members = {f"m{j}": array(r.choice(npy_dtypes)) for j in range(r.randint(1, 5))}
    path = os.path.join(out_dir, "random.npz")
    np.savez_compressed(path, **members)
    files.append({"path": path, "tensors": {n: entry(a) for n, a in members.items()}})
    json.dump({"files": files}, sys.stdout)


def check_safetensors(spec):
    import numpy as np
    from safetensors import deserialize, safe_open

    errors = []
    path, want = spec["path"], spec["tensors"]
    with open(path, "rb") as f:
        items = deserialize(f.read())
    got = {n: {"dtype": ST_NUMPY.get(t["dtype"], t["dtype"]), "shape": list(t["shape"]),
               "sha256": sha(t["data"])} for n, t in items}
    if sorted(got) != sorted(want):
        errors.append(f"tensors {sorted(got)} != {sorted(want)}")
    for n, w in want.items():
        if n in got and got[n] != w:
            errors.append(f"{n}: {got[n]} != {w}")
    loaded = 0
    with safe_open(path, framework="numpy") as f:
        for n in f.keys():
            if want.get(n, {}).get("dtype") in NUMPY_NATIVE:
                a = f.get_tensor(n)
                loaded += 1
                if sha(np.ascontiguousarray(a).tobytes()) != want[n]["sha256"]:
                    errors.append(f"{n}: safe_open(numpy) bytes differ")
    return errors, f"{len(got)} tensors ({loaded} loaded through numpy)"


def check_zt(spec):
    import ztensor

    errors = []
    path, want = spec["path"], spec["tensors"]
    src = ztensor.open(path)
    if sorted(src.keys()) != sorted(want):
        errors.append(f"objects {sorted(src.keys())} != {sorted(want)}")
    for n, w in want.items():
        if n not in src.keys():
            continue
        t = src[n]
        if w["dtype"] in ZT:
            layout, (dtype, logical) = "dense", ZT[w["dtype"]]
        else:
            layout, dtype, logical = f"gguf.{w['dtype'].lower()}/1", "u8", None
        got = (t.layout, list(t.shape), t.dtype, t.logical, sha(t.tobytes()))
        exp = (layout, w["shape"], dtype, logical, w["sha256"])
        if got != exp:
            errors.append(f"{n}: (layout, shape, dtype, logical, sha256) {got} != {exp}")
    v = ztensor.verify(path, deep=True)
    if v.checked != len(want) or v.undigested != 0:
        errors.append(f"verify: {v} for {len(want)} parts")
    src.close()
    return errors, f"{len(want)} objects verified"


def main():
    mode = sys.argv[1]
    if mode == "gen":
        gen(sys.argv[2], int(sys.argv[3]))
        return
    check = {"safetensors": check_safetensors, "zt": check_zt}[mode]
    with open(sys.argv[2]) as f:
        files = json.load(f)["files"]
    failed = False
    for spec in files:
        try:
            errors, what = check(spec)
        except Exception as e:  # a file the library cannot open is a failure, with its reason
            errors, what = [f"{type(e).__name__}: {e}"], "not opened"
        if errors:
            failed = True
            print(f"FAIL {spec['path']}: {what}")
            for e in errors:
                print(f"  {e}")
        else:
            print(f"ok {spec['path']}: {what}")
    print(f"{mode}: {len(files)} files checked")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
