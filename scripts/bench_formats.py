#!/usr/bin/env python3
"""Foreign formats, list and load: tensorlane vs each format's reference library, in one run.

    python3 scripts/bench_formats.py [--dir /tmp/formats_bench] [--iters 7] [--passes 3]
                                     [--formats safetensors gguf ...] [--python PY]
                                     [--write-md BENCHMARKS.md] [--cleanup] [--small]

* Data: a Llama-3.2-1B-shaped model (146 float16 tensors, 2.47 GB; `--small`: the same 146 names,
  hidden 256, ~47 MB) of deterministic pseudo-random float16 (no inf/NaN), written WITH EACH
  FORMAT'S REFERENCE LIBRARY, one format at a time, in the venv of
  tests/python/setup_formats_venv.sh (or --python):
    safetensors   `llama.safetensors`       safetensors.numpy.save_file
    gguf          `llama.gguf`              gguf.GGUFWriter, F16 tensors (streamed)
    npy           `npy/<name>.npy`          np.save, one file per tensor (what numpy users do)
    npz           `llama.npz`               np.savez (stored members)
    onnx          `llama.onnx` + `llama.onnx.data`   onnx.save_model(save_as_external_data=True)
    onnx-embedded `llama-embedded.onnx`     onnx.save_model, weights inside the protobuf; without
                                            embed_tokens (145 tensors, 1.95 GB) to stay under
                                            protobuf's 2 GiB limit
    pt            `llama.pt`                torch.save's zip layout written by this script (pickle
                                            opcodes + zipfile, 64-byte aligned stored members): torch
                                            cannot be installed here, so there is no reference writer,
                                            and no `torch.load(mmap=True)` to compare with
    hdf5          `llama.h5`                h5py, contiguous datasets in groups (model/layers/0/...)
    hdf5-gzip     `llama-gzip.h5`           h5py, chunks=True + gzip (level 4), not in the default set
  Files already in --dir are reused.
* tensorlane: `formats_bench bench PATH ITERS` (release build of native/examples/formats_bench.rs):
  listing (`formats::open`, already mapped / `MmapSource::open` + open / through pread, and the
  bytes one listing reads), read-all (every tensor's `formats::read`, zero-copy views of the
  mappings where the format allows, each byte touched), and the page-cache baselines over the same
  files in the same run: memcpy of each mapped file, one sequential sum, pread.
* Reference libraries, each in its own process, `--passes` passes, median: list (names, shapes,
  dtypes) and read-all (every tensor as an ndarray, every byte touched) the way users of each
  library do it; see WORKER below.
* "Touch every byte" is the same wrapping sum of little-endian u64 words from each tensor's first
  byte everywhere (Rust and numpy); every reader of a file must agree on the checksum, and every
  format holding the full model on the same checksum.
* Warm page cache: the Rust example and each Python worker are run twice, the second is reported.

The default run (8 formats, 2.47 GB each) takes about 15-20 minutes on a 2-vCPU VM and keeps
~20 GB of files in --dir for reruns (a format's files are deleted after its measurement when less
than 10 GB stay free); --cleanup deletes each format's files once it is measured (peak disk
~5 GB) and --dir at the end. Results are saved to DIR.results.json; --render redoes the tables. Peak memory is the safetensors and ONNX
writers (~5 GB: they hold the model and its serialization). --write-md replaces (or appends) the
"## Foreign formats: list and load" section of the given markdown file, with the machine and the
command. Exits 1 if any reader failed or a checksum disagrees (the tables show which).
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## Foreign formats: list and load"
EXE = os.path.join(ROOT, "target", "release", "examples", "formats_bench")

# key: (path in --dir given to tensorlane, every file or folder it consists of, description)
FORMATS = {
    "safetensors": ("llama.safetensors", ["llama.safetensors"], "`.safetensors`"),
    "gguf": ("llama.gguf", ["llama.gguf"], "GGUF v3, F16"),
    "npy": ("npy", ["npy"], "146 `.npy` (one per tensor)"),
    "npz": ("llama.npz", ["llama.npz"], "`.npz`, stored"),
    "onnx": ("llama.onnx", ["llama.onnx", "llama.onnx.data"], "ONNX + `.onnx.data`"),
    "onnx-embedded": ("llama-embedded.onnx", ["llama-embedded.onnx"], "ONNX, weights embedded (no embed_tokens)"),
    "pt": ("llama.pt", ["llama.pt"], "PyTorch zip (`torch.save` layout)"),
    "hdf5": ("llama.h5", ["llama.h5"], "HDF5, contiguous"),
    "hdf5-gzip": ("llama-gzip.h5", ["llama-gzip.h5"], "HDF5, chunked + gzip"),
}
DEFAULT = ["safetensors", "gguf", "npy", "npz", "onnx", "onnx-embedded", "pt", "hdf5"]
SLOW = {"hdf5-gzip"}  # decoded, not mapped: fewer passes
EMBEDDED = {"onnx-embedded"}  # holds the model without embed_tokens
NO_REFERENCE = {"pt": "torch cannot be installed here: no `torch.load(mmap=True)` to compare with"}

GEN = r"""
import json, os, sys, time
import numpy as np
d, fmt, small = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def shapes():
    # Llama-3.2-1B: hidden 2048, intermediate 8192, 16 layers, 8 KV heads of 64, vocab 128256,
    # tied embeddings; sorted by name. --small: the same names, smaller dimensions.
    h, i, kv, vocab = (256, 1024, 64, 32000) if small else (2048, 8192, 512, 128256)
    v = [("model.embed_tokens.weight", (vocab, h)), ("model.norm.weight", (h,))]
    for l in range(16):
        for n, s in (("self_attn.q_proj.weight", (h, h)), ("self_attn.k_proj.weight", (kv, h)),
                     ("self_attn.v_proj.weight", (kv, h)), ("self_attn.o_proj.weight", (h, h)),
                     ("mlp.gate_proj.weight", (i, h)), ("mlp.up_proj.weight", (i, h)),
                     ("mlp.down_proj.weight", (h, i)), ("input_layernorm.weight", (h,)),
                     ("post_attention_layernorm.weight", (h,))):
            v.append((f"model.layers.{l}.{n}", s))
    return sorted(v)

def tensor(k, shape):
    # Deterministic float16 from seed k; exponent bit 0 cleared, so never inf or NaN.
    bits = np.random.default_rng(k).integers(0, 1 << 16, size=shape, dtype=np.uint16)
    bits &= 0xFBFF
    return bits.view(np.float16)

class Lazy:  # an array made when numpy asks for it, so np.savez never holds the whole model
    def __init__(self, k, shape): self.k, self.shape = k, shape
    def __array__(self, dtype=None, copy=None): return tensor(self.k, self.shape)

t0 = time.perf_counter()
model = shapes()
if fmt == "safetensors":
    from safetensors.numpy import save_file
    save_file({n: tensor(k, s) for k, (n, s) in enumerate(model)}, os.path.join(d, "llama.safetensors"))
elif fmt == "gguf":
    import gguf
    w = gguf.GGUFWriter(os.path.join(d, "llama.gguf"), "llama")
    w.add_name("bench_formats")
    for n, s in model:
        w.add_tensor_info(n, s, np.dtype(np.float16), int(np.prod(s)) * 2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for k, (n, s) in enumerate(model):
        w.write_tensor_data(tensor(k, s))
    w.close()
elif fmt == "npy":
    os.makedirs(os.path.join(d, "npy"), exist_ok=True)
    for k, (n, s) in enumerate(model):
        np.save(os.path.join(d, "npy", n + ".npy"), tensor(k, s))
elif fmt == "npz":
    np.savez(os.path.join(d, "llama.npz"), **{n: Lazy(k, s) for k, (n, s) in enumerate(model)})
elif fmt in ("onnx", "onnx-embedded"):
    import onnx
    from onnx import helper, numpy_helper
    embedded = fmt == "onnx-embedded"
    inits = [numpy_helper.from_array(tensor(k, s), n) for k, (n, s) in enumerate(model)
             if not (embedded and n == "model.embed_tokens.weight")]
    m = helper.make_model(helper.make_graph([], "llama", [], [], initializer=inits), producer_name="bench_formats")
    if embedded:
        onnx.save_model(m, os.path.join(d, "llama-embedded.onnx"))
    else:
        onnx.save_model(m, os.path.join(d, "llama.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="llama.onnx.data", size_threshold=0)
elif fmt == "pt":
    # torch.save's zip layout (torch cannot be installed here): `llama/data.pkl` (protocol 2, an
    # OrderedDict of torch._utils._rebuild_tensor_v2 over HalfStorage persistent ids), one stored
    # member `llama/data/<k>` per storage, every member's data 64-byte aligned by an `FB` extra field.
    import struct, zipfile
    def binunicode(x):
        b = x.encode()
        return b"X" + struct.pack("<I", len(b)) + b
    def ints(xs):
        return b"(" + b"".join(b"J" + struct.pack("<i", x) for x in xs) + b"t"
    pkl = bytearray(b"\x80\x02ccollections\nOrderedDict\n)R(")
    for k, (n, s) in enumerate(model):
        stride = [int(np.prod(s[j + 1:])) for j in range(len(s))]
        pkl += binunicode(n) + b"ctorch._utils\n_rebuild_tensor_v2\n(("
        pkl += binunicode("storage") + b"ctorch\nHalfStorage\n" + binunicode(str(k)) + binunicode("cpu")
        pkl += b"J" + struct.pack("<i", int(np.prod(s))) + b"tQ" + b"J" + struct.pack("<i", 0)
        pkl += ints(s) + ints(stride) + b"\x89ccollections\nOrderedDict\n)RtR"
    pkl += b"u."
    with zipfile.ZipFile(os.path.join(d, "llama.pt"), "w", zipfile.ZIP_STORED) as z:
        def put(name, data):
            name = "llama/" + name
            pad = (-(z.fp.tell() + 30 + len(name) + 4)) % 64
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(zi, data)
        put("data.pkl", bytes(pkl))
        put(".format_version", b"1")
        put(".storage_alignment", b"64")
        put("byteorder", b"little")
        for k, (n, s) in enumerate(model):
            put(f"data/{k}", tensor(k, s).tobytes())
        put("version", b"3\n")
        put(".data/serialization_id", b"0" * 40)
elif fmt in ("hdf5", "hdf5-gzip"):
    import h5py
    gz = fmt == "hdf5-gzip"
    with h5py.File(os.path.join(d, "llama-gzip.h5" if gz else "llama.h5"), "w") as f:
        for k, (n, s) in enumerate(model):
            if gz:
                f.create_dataset(n.replace(".", "/"), data=tensor(k, s), chunks=True, compression="gzip")
            else:
                f.create_dataset(n.replace(".", "/"), data=tensor(k, s))
else:
    raise SystemExit("unknown format " + fmt)
print(json.dumps({"s": time.perf_counter() - t0}))
"""

WORKER = r"""
import json, os, statistics, sys, time
import numpy as np
MASK = (1 << 64) - 1
def touch(buf):  # wrapping sum of the little-endian u64 words from the first byte, then the tail bytes
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(a) // 8 * 8
    s = int(a[:n].view("<u8").sum(dtype=np.uint64)) + int(a[n:].sum())
    return s & MASK
def arr(x):  # an ndarray of any dtype, as its raw bytes (no copy when already C-contiguous)
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)
d, fmt, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
def run(f, n):
    times, out = [], None
    for _ in range(n):
        t = time.perf_counter(); out = f(); times.append(time.perf_counter() - t)
    return statistics.median(times), out
def list_time(f):  # median over enough listings to fill ~0.5 s (3 to 201)
    t = time.perf_counter(); f(); once = time.perf_counter() - t
    return run(f, max(3, min(201, int(0.5 / max(once, 1e-7)))))[0]
def total(pairs):  # (checksum, bytes, tensors) of an iterable of byte buffers
    s = n = k = 0
    for b in pairs:
        s += touch(b); n += b.nbytes; k += 1
    return s & MASK, n, k
from importlib.metadata import version

if fmt == "safetensors":
    from safetensors import safe_open
    path = os.path.join(d, "llama.safetensors")
    what = "safetensors " + version("safetensors")
    list_how = "`safe_open(framework=\"numpy\")` + `get_slice(k).get_shape()` for every key"
    read_how = "`safe_open(framework=\"numpy\")` + `get_tensor` for every key"
    def lst():
        with safe_open(path, framework="numpy") as f:
            return [(k, f.get_slice(k).get_shape()) for k in f.keys()]
    def read_all():
        with safe_open(path, framework="numpy") as f:
            return total(arr(f.get_tensor(k)) for k in f.keys())
elif fmt == "gguf":
    import gguf
    path = os.path.join(d, "llama.gguf")
    what = "gguf " + version("gguf")
    list_how = "`GGUFReader(path)` (parses every key/value and tensor info, maps the file)"
    read_how = "`GGUFReader(path)` + `t.data` (a view of its memmap) for every tensor"
    def lst():
        r = gguf.GGUFReader(path)
        return [(t.name, t.shape) for t in r.tensors]
    def read_all():
        r = gguf.GGUFReader(path)
        return total(arr(t.data) for t in r.tensors)
elif fmt == "npy":
    folder = os.path.join(d, "npy")
    names = sorted(os.listdir(folder))
    what = "numpy " + np.__version__
    list_how = "`np.load(mmap_mode=\"r\")` of every `.npy` (header parsed, file mapped)"
    read_how = "`np.load(mmap_mode=\"r\")` of every `.npy`"
    def lst():
        return [np.load(os.path.join(folder, n), mmap_mode="r").shape for n in names]
    def read_all():
        return total(arr(np.load(os.path.join(folder, n), mmap_mode="r")) for n in names)
elif fmt == "npz":
    path = os.path.join(d, "llama.npz")
    what = "numpy " + np.__version__
    list_how = "`np.load` (zip directory) + each member's header (`np.lib.format.read_array_header_*`)"
    read_how = "`np.load(path)[name]` for every member (read into a new array)"
    def lst():
        out = []
        with np.load(path) as z:
            for n in z.files:
                with z.zip.open(n + ".npy") as m:
                    v = np.lib.format.read_magic(m)
                    h = (np.lib.format.read_array_header_1_0 if v == (1, 0) else np.lib.format.read_array_header_2_0)(m)
                    out.append((n, h[0]))
        return out
    def read_all():
        with np.load(path) as z:
            return total(arr(z[n]) for n in z.files)
elif fmt in ("onnx", "onnx-embedded"):
    import onnx
    from onnx import numpy_helper
    path = os.path.join(d, "llama.onnx" if fmt == "onnx" else "llama-embedded.onnx")
    what = "onnx " + version("onnx")
    list_how = "`onnx.load(path, load_external_data=False)` + every initializer's name, dims, type"
    read_how = "`onnx.load(path)` + `numpy_helper.to_array` for every initializer"
    def lst():
        m = onnx.load(path, load_external_data=False)
        return [(i.name, list(i.dims), i.data_type) for i in m.graph.initializer]
    def read_all():
        m = onnx.load(path)
        return total(arr(numpy_helper.to_array(i)) for i in m.graph.initializer)
elif fmt in ("hdf5", "hdf5-gzip"):
    import h5py
    path = os.path.join(d, "llama.h5" if fmt == "hdf5" else "llama-gzip.h5")
    what = "h5py " + version("h5py")
    list_how = "`h5py.File` + `visititems` collecting every dataset's name, shape, dtype"
    read_how = "`h5py.File` + `f[name][()]` for every dataset"
    def datasets(f):
        out = []
        f.visititems(lambda n, o: out.append((n, o.shape, o.dtype)) if isinstance(o, h5py.Dataset) else None)
        return out
    def lst():
        with h5py.File(path, "r") as f:
            return datasets(f)
    def read_all():
        with h5py.File(path, "r") as f:
            return total(arr(f[n][()]) for n, _, _ in datasets(f))
elif fmt == "memmap":
    path = os.path.join(d, sys.argv[4])
    what = "numpy " + np.__version__
    list_how = read_how = "`np.memmap` of the whole file, one sum"
    lst = lambda: None
    def read_all():
        a = np.memmap(path, dtype=np.uint8, mode="r")
        return touch(a), a.nbytes, 1
else:
    raise SystemExit("unknown format " + fmt)

tl = list_time(lst)
listed = lst()
t, (s, n, k) = run(read_all, passes)
print(json.dumps({"what": what, "list_how": list_how, "read_how": read_how, "list_s": tl,
                  "listed": len(listed) if listed is not None else 0, "s": t, "bytes": n, "tensors": k,
                  "checksum": "%016x" % s}))
"""


def sh(cmd, **kw):
    shown = ["<GEN>" if a == GEN else "<WORKER>" if a == WORKER else a for a in cmd]
    print("+", " ".join(shown), file=sys.stderr, flush=True)
    return subprocess.run(cmd, **kw)


def last_json(cmd):
    """Runs cmd; its last stdout line as JSON, or {"error": ...}."""
    p = sh(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = p.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {p.returncode}: {tail}"}
    if p.returncode != 0 and "error" not in out:
        out["error"] = f"exit {p.returncode}"
    return out


def twice(cmd):
    """Runs cmd twice (the first warms the page cache); the second run's JSON."""
    first = last_json(cmd)
    return first if "error" in first else last_json(cmd)


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.0f GiB" % (int(f.readline().split()[1]) / 2**20)
    except OSError:
        pass
    load = "%.1f %.1f %.1f" % os.getloadavg()
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} vCPU, {mem} RAM, load average {load}"


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def remove(d, fmt):
    for f in FORMATS[fmt][1]:
        p = os.path.join(d, f)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)


def human(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def dur(s):
    return f"{s * 1e3:.0f} ms" if s >= 0.1 else f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} µs"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where the files go (default /tmp/formats_bench[_small])")
    ap.add_argument("--iters", type=int, default=7, help="passes of the Rust read-all (median)")
    ap.add_argument("--passes", type=int, default=3, help="passes of each Python read-all (median)")
    ap.add_argument("--formats", nargs="+", default=DEFAULT, choices=list(FORMATS), metavar="FMT",
                    help="formats to measure (default: %(default)s; also: hdf5-gzip)")
    ap.add_argument("--python", default=None, help="python with the reference libraries "
                    "(default: the venv of tests/python/setup_formats_venv.sh)")
    ap.add_argument("--write-md", default=None, help="replace or append the section in this markdown file")
    ap.add_argument("--cleanup", action="store_true", help="delete each format's files once measured")
    ap.add_argument("--small", action="store_true", help="a ~47 MB model, for a quick functional run")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="measure nothing: print (and --write-md) the tables of a saved DIR.results.json")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        finish(saved, args.write_md)
        return
    d = args.dir or ("/tmp/formats_bench_small" if args.small else "/tmp/formats_bench")
    os.makedirs(d, exist_ok=True)
    saved = {"machine": machine(), "command": "python3 scripts/bench_formats.py " + " ".join(sys.argv[1:]),
             "small": args.small, "iters": args.iters, "passes": args.passes}

    py = args.python
    if py is None:
        out = sh(["bash", os.path.join(ROOT, "tests", "python", "setup_formats_venv.sh")],
                 stdout=subprocess.PIPE, text=True, check=True)
        py = out.stdout.strip().splitlines()[-1]
    sh(["cargo", "build", "-q", "--release", "-p", "tensorlane", "--example", "formats_bench"], cwd=ROOT, check=True)

    results = {}
    memmap = None
    for fmt in args.formats:
        main_path, files, _ = FORMATS[fmt]
        r = results[fmt] = {}
        if not all(os.path.exists(os.path.join(d, f)) for f in files):
            remove(d, fmt)
            free = shutil.disk_usage(d).free
            need = (60 << 20) if args.small else (6 << 30)
            if free < need:
                r["error"] = f"only {human(free)} free in {d}; {human(need)} needed"
                continue
            g = last_json([py, "-c", GEN, d, fmt, "1" if args.small else "0"])
            if "error" in g:
                r["error"] = "writing: " + g["error"]
                remove(d, fmt)
                continue
            r["write_s"] = g["s"]
            os.sync()  # no writeback of the new file while it is measured
        path = os.path.join(d, main_path)
        slow = fmt in SLOW
        r["rust"] = twice([EXE, "bench", path, str(min(args.iters, 3) if slow else args.iters)])
        if fmt in NO_REFERENCE:
            r["ref"] = {"skip": NO_REFERENCE[fmt]}
        else:
            r["ref"] = twice([py, "-c", WORKER, d, fmt, str(min(args.passes, 2) if slow else args.passes)])
        if memmap is None and "error" not in r["rust"] and os.path.isfile(path):
            memmap = twice([py, "-c", WORKER, d, "memmap", "1" if slow else str(args.passes), main_path])
            memmap["file"] = main_path
        if args.cleanup or shutil.disk_usage(d).free < ((1 << 30) if args.small else (10 << 30)):
            remove(d, fmt)
        print(json.dumps({fmt: r}), file=sys.stderr, flush=True)

    saved.update(results=results, memmap=memmap)
    out = d.rstrip("/") + ".results.json"
    with open(out, "w") as f:
        json.dump(saved, f)
    print(f"results saved to {out} (re-render with --render {out})", file=sys.stderr)
    if args.cleanup:
        shutil.rmtree(d, ignore_errors=True)
    finish(saved, args.write_md)


def finish(saved, write_md):
    """Prints the tables; with write_md, replaces (or appends) the section there. Exits 1 on problems."""
    problems, text = report(saved)
    print(text)
    if write_md:
        body = f"{SECTION}\n\nMachine: {saved['machine']}.\n\nReproduce: `{saved['command']}`\n\n{text}\n"
        try:
            with open(write_md) as f:
                md = f.read()
        except FileNotFoundError:
            md = ""
        start = md.find(SECTION + "\n")
        if start < 0:
            md = md.rstrip("\n") + "\n\n" + body
        else:
            end = md.find("\n## ", start + len(SECTION))
            md = md[:start] + body + ("" if end < 0 else "\n" + md[end + 1:])
        with open(write_md, "w") as f:
            f.write(md)
    if problems:
        print("\n".join(["problems:"] + problems), file=sys.stderr)
        sys.exit(1)


def report(saved):
    results, memmap = saved["results"], saved["memmap"]
    problems = []
    full_sums = {}
    for fmt, r in results.items():
        for who in ("rust", "ref"):
            if "error" in r.get(who, {}):
                problems.append(f"{fmt} {who}: {r[who]['error']}")
        if "error" in r:
            problems.append(f"{fmt}: {r['error']}")
            continue
        rs, ref = r["rust"], r["ref"]
        if "error" in rs or "error" in ref or "skip" in ref:
            if "error" not in rs and fmt not in EMBEDDED:
                full_sums.setdefault((rs["checksum"], rs["payload_bytes"]), []).append(fmt)
            continue
        if rs["checksum"] != ref["checksum"] or rs["payload_bytes"] != ref["bytes"] or rs["tensors"] != ref["tensors"]:
            r["mismatch"] = True
            problems.append(f"{fmt}: tensorlane {rs['checksum']} / {rs['payload_bytes']} B / {rs['tensors']} tensors,"
                            f" {ref['what']} {ref['checksum']} / {ref['bytes']} B / {ref['tensors']} tensors")
        if fmt not in EMBEDDED:
            full_sums.setdefault((rs["checksum"], rs["payload_bytes"]), []).append(fmt)
    if len(full_sums) > 1:
        problems.append(f"the formats disagree on the model's checksum: {full_sums}")

    def ok(r):
        return "error" not in r and "error" not in r.get("rust", {"error": 1})

    lines = [
        "| listing, warm | tensors | model bytes | bytes read to list | % of model | `read_at` calls "
        "| tensorlane, mapped | `MmapSource::open` + list | through `pread` | reference library | reference list "
        "| reference / tensorlane |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for fmt, r in results.items():
        desc = FORMATS[fmt][2]
        if not ok(r):
            lines.append(f"| {desc} | error: {r.get('error') or r['rust']['error']} |" + " |" * 10)
            continue
        rs, ref = r["rust"], r["ref"]
        ref_list = ref_ratio = "–"
        ref_what = ref.get("error") or ref.get("skip", "")
        if "error" not in ref and "skip" not in ref:
            ref_what = f"{ref['what']}: {ref['list_how']}"
            ref_list = dur(ref["list_s"])
            ref_ratio = f"{ref['list_s'] / (rs['list_mmap_us'] / 1e6):.1f}×"
        lines.append(
            f"| {desc} | {rs['tensors']} | {human(rs['file_bytes'])} | {rs['list_bytes_read']:,} | "
            f"{rs['list_fraction'] * 100:.4f}% | {rs['list_read_calls']} | {dur(rs['list_mapped_us'] / 1e6)} | "
            f"{dur(rs['list_mmap_us'] / 1e6)} | {dur(rs['list_pread_us'] / 1e6)} | {ref_what} | {ref_list} | {ref_ratio} |")
    list_table = "\n".join(lines)

    lines = [
        "| read-all, warm page cache | tensorlane | GB/s | zero-copy | page-cache memcpy | vs memcpy | one sum "
        "| vs sum | pread | reference library | reference | GB/s | tensorlane vs reference |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for fmt, r in results.items():
        desc = FORMATS[fmt][2]
        if not ok(r):
            lines.append(f"| {desc} | error |" + " |" * 11)
            continue
        rs, ref = r["rust"], r["ref"]
        mark = " **checksum differs**" if r.get("mismatch") else ""
        ref_cells = f"{ref.get('error') or ref.get('skip')} | – | – | –"
        if "error" not in ref and "skip" not in ref:
            g = ref["bytes"] / ref["s"] / 1e9
            ref_cells = f"{ref['what']}: {ref['read_how']} | {dur(ref['s'])} | {g:.2f} | {ref['s'] / rs['read_mapped_s']:.2f}×"
        lines.append(
            f"| {desc}{mark} | {dur(rs['read_mapped_s'])} | {rs['read_mapped_gbps']:.2f} | "
            f"{rs['borrowed_tensors']}/{rs['tensors']} | {rs['baseline_memcpy_gbps']:.2f} GB/s | "
            f"{rs['ratio_read_vs_memcpy']:.2f}× | {rs['baseline_sum_mapped_gbps']:.2f} GB/s | "
            f"{rs['ratio_read_vs_sum_mapped']:.2f}× | {rs['baseline_pread_gbps']:.2f} GB/s | {ref_cells} |")
    read_table = "\n".join(lines)

    lines = [
        "| fresh mappings each pass (`MmapSource::open` + list + read-all) | tensorlane | GB/s | same sum over fresh "
        "mappings | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for fmt, r in results.items():
        if ok(r):
            rs = r["rust"]
            lines.append(f"| {FORMATS[fmt][2]} | {dur(rs['read_fresh_map_s'])} | {rs['read_fresh_map_gbps']:.2f} | "
                         f"{rs['baseline_sum_fresh_map_gbps']:.2f} GB/s | {rs['ratio_fresh_vs_sum_fresh_map']:.2f}× |")
    fresh_table = "\n".join(lines)

    bars = []
    for fmt, r in results.items():
        if not ok(r):
            bars.append(f"* {FORMATS[fmt][2]}: not measured ({r.get('error') or r['rust']['error']}).")
            continue
        rs, ref = r["rust"], r["ref"]
        frac, ms = rs["list_fraction"] * 100, rs["list_mmap_us"] / 1e3
        listed = "met" if frac < 1 and ms < 10 else "NOT met"
        if fmt in EMBEDDED:
            listed = (f"the issue's exception, weights inside the protobuf: {rs['list_bytes_read']:,} bytes in "
                      f"{rs['list_read_calls']} reads" + ("" if "error" in ref else
                                                          f"; `onnx.load` parses the whole file: {dur(ref['list_s'])}"))
        zero_copy = rs["borrowed_tensors"] == rs["tensors"]
        ratio = rs["ratio_read_vs_memcpy"]
        load = (f"read-all {ratio:.2f}× memcpy ({'met' if ratio >= 0.9 else 'NOT met'}, zero-copy)" if zero_copy
                else f"read-all {ratio:.2f}× memcpy ({rs['tensors'] - rs['borrowed_tensors']} tensors decoded, "
                     "not a zero-copy format)")
        vs = ("reference: " + (ref.get("error") or ref.get("skip"))) if ("error" in ref or "skip" in ref) else (
            f"{ref['s'] / rs['read_mapped_s']:.2f}× {ref['what']} ({'met' if ref['s'] > rs['read_mapped_s'] else 'NOT met'})")
        bars.append(f"* {FORMATS[fmt][2]}: listing reads {frac:.4f}% of the model in {ms:.2f} ms with "
                    f"`MmapSource::open` ({listed}); {load}; {vs}.")
    scale = "the `--small` model (146 tensors, ~47 MB) — a functional run, not the bars" if saved["small"] else \
        "Llama-3.2-1B shape, 146 float16 tensors, 2.47 GB"
    sums = "; ".join(f"{'/'.join(v)}: {k[0]} ({k[1]:,} bytes)" for k, v in full_sums.items())
    notes = [
        f"Model: {scale}, deterministic pseudo-random data, each file written by its reference library "
        f"(scripts/bench_formats.py). Rust: `native/examples/formats_bench.rs`, release build, medians of "
        f"{saved['iters']} interleaved passes; Python: medians of {saved['passes']}; every reader run twice, the second "
        f"reported (page cache warm). \"Read\" touches every byte (wrapping u64 sum) of every tensor as that reader "
        f"returns it; tensorlane and each reference agree on every checksum ({sums}).",
        "\"bytes read to list\" is what one listing asked of a counting `FileSource` (the bytes a browser or HTTP "
        "Range reader would fetch); \"% of model\" is against every file of the model, companions included. "
        "Baselines (memcpy, one sequential sum, pread) are over the same files in the same process and run.",
        "PyTorch `.pt`: torch cannot be installed here, so the file is written by the script in `torch.save`'s zip "
        "layout (protocol-2 pickle of `_rebuild_tensor_v2` over `HalfStorage`, stored 64-byte-aligned members) and "
        "there is no `torch.load(mmap=True)` to compare with; its checksum is checked against the other formats'.",
    ]
    if memmap and "error" not in memmap:
        notes.append(f"Python ceiling: `np.memmap` of the whole `{memmap['file']}` and one sum: {dur(memmap['s'])}, "
                     f"{memmap['bytes'] / memmap['s'] / 1e9:.2f} GB/s.")
    text = "\n\n".join(["\n\n".join(notes), list_table, read_table, fresh_table, "Bars:\n\n" + "\n".join(bars)])
    return problems, text


if __name__ == "__main__":
    main()
