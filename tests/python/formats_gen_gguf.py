"""Writes GGUF files with the gguf package (pinned in tests/python/formats_requirements.txt) and
prints, as JSON on stdout, what a reader must find in them: metadata values with their GGUF
types, tensors with their ggml type, row-major shape, sha256 of the stored bytes (C order,
little-endian) and, for every type gguf.quants can dequantize, the sha256 of
gguf.quants.dequantize's float32 output.

    formats_gen_gguf.py OUT_DIR SEED

Files (all random from SEED):
  types.gguf   every type gguf.quants dequantizes: quantized from float32 where the package can
               quantize, and random blocks for every block type (random bytes; blocks whose
               dequantized values are not all finite are redrawn, so NaN payloads never matter);
               plain F32/F16/BF16/F64/I8/I16/I32/I64; metadata of every value type, nested arrays
  v2.gguf      types.gguf with its version field set to 2 (v2 and v3 little-endian files are
               laid out alike)
  be.gguf      a big-endian GGUF (GGUFWriter endianess=BIG) with plain tensors and metadata
  split-0000N-of-0000M.gguf  a split set (GGUFWriter split_max_tensors)
Used by native/tests/formats_live_gguf.rs.
"""
import hashlib
import json
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFEndian, GGUFValueType, GGUFWriter, GGMLQuantizationType as Q, quants
from gguf.constants import GGML_QUANT_SIZES

np.seterr(all="ignore")  # random blocks may hold inf/NaN scales; such blocks are redrawn

QUANTIZABLE = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.TQ1_0, Q.TQ2_0, Q.MXFP4}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def deq_sha(raw: np.ndarray, qtype: Q) -> str:
    out = quants.dequantize(raw, qtype)
    assert out.dtype == np.float32, (qtype, out.dtype)
    return sha(np.ascontiguousarray(out).astype("<f4").tobytes())


def float_entry(t: str, v: float) -> dict:
    """A float metadata value, with the bits of its double so the comparison is exact."""
    return {"type": t, "value": v, "bits": struct.unpack("<Q", struct.pack("<d", v))[0]}


class Gen:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def random_blocks(self, qtype: Q, n_blocks: int) -> np.ndarray:
        _, size = GGML_QUANT_SIZES[qtype]
        blocks = self.rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
        for _ in range(1000):
            out = quants.dequantize(blocks, qtype).reshape(n_blocks, -1)
            bad = ~np.isfinite(out).all(axis=1)
            if not bad.any():
                return blocks
            blocks[bad] = self.rng.integers(0, 256, size=(int(bad.sum()), size), dtype=np.uint8)
        raise RuntimeError(f"could not draw finite {qtype.name} blocks")

    def shape(self, block: int) -> tuple[int, ...]:
        lead = tuple(int(x) for x in self.rng.integers(1, 4, size=int(self.rng.integers(0, 3))))
        return (*lead, block * int(self.rng.integers(1, 4)))

    def metadata(self) -> list[tuple[str, dict, tuple]]:
        """(key, manifest entry, (value, GGUF type, sub type)) for every value type."""
        r = self.rng
        out = []

        def scalar(key, t, v):
            out.append((key, {"type": t.name, "value": v}, (v, t, None)))

        scalar("live.u8", GGUFValueType.UINT8, int(r.integers(0, 256)))
        scalar("live.i8", GGUFValueType.INT8, int(r.integers(-128, 128)))
        scalar("live.u16", GGUFValueType.UINT16, int(r.integers(0, 1 << 16)))
        scalar("live.i16", GGUFValueType.INT16, int(r.integers(-(1 << 15), 1 << 15)))
        scalar("live.u32", GGUFValueType.UINT32, int(r.integers(0, 1 << 32)))
        scalar("live.i32", GGUFValueType.INT32, int(r.integers(-(1 << 31), 1 << 31)))
        scalar("live.u64", GGUFValueType.UINT64, int(r.integers(0, 1 << 63)) * 2 + 1)
        scalar("live.i64", GGUFValueType.INT64, -int(r.integers(0, 1 << 62)) * 2)
        scalar("live.bool", GGUFValueType.BOOL, bool(r.integers(0, 2)))
        scalar("live.str", GGUFValueType.STRING, "".join(r.choice(list("abcé✓ \n"), size=int(r.integers(0, 12)))))
        f32 = float(np.float32(r.normal()))
        out.append(("live.f32", float_entry("FLOAT32", f32), (f32, GGUFValueType.FLOAT32, None)))
        f64 = float(r.normal() * 1e100)
        out.append(("live.f64", float_entry("FLOAT64", f64), (f64, GGUFValueType.FLOAT64, None)))
        n = int(r.integers(1, 6))
        u16s = [int(x) for x in r.integers(0, 1 << 16, size=n)]
        out.append(("live.arr.u16", {"type": "ARRAY", "item_type": "UINT16", "value": u16s},
                    (u16s, GGUFValueType.ARRAY, GGUFValueType.UINT16)))
        f32s = [float(np.float32(x)) for x in r.normal(size=n)]
        out.append(("live.arr.f32", {"type": "ARRAY", "item_type": "FLOAT32",
                                     "value": [float_entry("FLOAT32", v) for v in f32s]},
                    (f32s, GGUFValueType.ARRAY, GGUFValueType.FLOAT32)))
        strs = ["tok%d" % int(x) for x in r.integers(0, 1000, size=n)]
        out.append(("live.arr.str", {"type": "ARRAY", "item_type": "STRING", "value": strs},
                    (strs, GGUFValueType.ARRAY, None)))
        nested = [[int(x) for x in r.integers(-5, 5, size=int(r.integers(1, 4)))] for _ in range(n)]
        out.append(("live.arr.nested", {"type": "ARRAY", "item_type": "ARRAY", "value": [
            {"type": "ARRAY", "item_type": "INT32", "value": v} for v in nested]},
            (nested, GGUFValueType.ARRAY, None)))
        return out


def write(path: Path, arch: str, meta, tensors, **kw) -> None:
    w = GGUFWriter(path, arch, **kw)
    for key, _, (v, t, sub) in meta:
        w.add_key_value(key, v, t, sub_type=sub)
    for name, arr, raw_dtype in tensors:
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dense_tensors(g: Gen, kinds) -> list:
    out = []
    for dt in kinds:
        shape = g.shape(1)
        if dt.kind == "f":
            arr = g.rng.normal(size=shape).astype(dt)
        else:
            info = np.iinfo(dt)
            arr = g.rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        out.append((f"dense.{dt.name}", arr, None))
    return out


def describe(tensors, dequantize=True) -> list[dict]:
    out = []
    for name, arr, raw_dtype in tensors:
        if raw_dtype is None:
            qtype = {"float32": Q.F32, "float16": Q.F16, "float64": Q.F64, "int8": Q.I8, "int16": Q.I16,
                     "int32": Q.I32, "int64": Q.I64}[arr.dtype.name]
            shape = list(arr.shape)
        else:
            qtype = raw_dtype
            block, size = GGML_QUANT_SIZES[qtype]
            shape = [*arr.shape[:-1], arr.shape[-1] // size * block]
        le = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"))
        e = {"name": name, "ggml_type": qtype.name, "shape": shape, "sha256": sha(le.tobytes())}
        if dequantize and (qtype in (Q.F32, Q.F16) or qtype in quants._type_traits):
            e["dequantized_sha256"] = deq_sha(le.view(np.uint8) if raw_dtype is not None else le, qtype)
        out.append(e)
    return out


def main() -> None:
    out_dir, seed = Path(sys.argv[1]), int(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    g = Gen(seed)
    files = []

    # types.gguf
    meta = g.metadata()
    tensors = dense_tensors(g, [np.dtype(t) for t in ("float32", "float16", "float64", "int8", "int16", "int32", "int64")])
    bf16 = g.rng.normal(size=g.shape(1)).astype(np.float32)
    tensors.append(("dense.bf16", quants.quantize(bf16, Q.BF16), Q.BF16))
    for qtype in sorted(quants._type_traits, key=int):
        block, size = GGML_QUANT_SIZES[qtype]
        if block == 1:
            continue
        shape = g.shape(block)
        n_blocks = int(np.prod(shape)) // block
        blocks = g.random_blocks(qtype, n_blocks).reshape(*shape[:-1], shape[-1] // block * size)
        tensors.append((f"random.{qtype.name}", blocks, qtype))
        if qtype in QUANTIZABLE:
            data = g.rng.normal(size=g.shape(block)).astype(np.float32)
            tensors.append((f"quantized.{qtype.name}", quants.quantize(data, qtype), qtype))
    write(out_dir / "types.gguf", "live", meta, tensors)
    all_meta = {"general.architecture": {"type": "STRING", "value": "live"}, **{k: e for k, e, _ in meta}}
    desc = describe(tensors)
    files.append({"file": "types.gguf", "metadata": all_meta, "tensors": desc})

    # v2.gguf: the same file as version 2.
    b = bytearray((out_dir / "types.gguf").read_bytes())
    assert b[4:8] == struct.pack("<I", 3)
    b[4:8] = struct.pack("<I", 2)
    (out_dir / "v2.gguf").write_bytes(bytes(b))
    files.append({"file": "v2.gguf", "metadata": all_meta, "tensors": desc})

    # be.gguf: big-endian, plain tensors.
    meta = g.metadata()
    tensors = dense_tensors(g, [np.dtype(t) for t in ("float32", "float16", "float64", "int16", "int32", "int64")])
    write(out_dir / "be.gguf", "live", meta, tensors, endianess=GGUFEndian.BIG)
    files.append({"file": "be.gguf", "big_endian": True,
                  "metadata": {"general.architecture": {"type": "STRING", "value": "live"}, **{k: e for k, e, _ in meta}},
                  "tensors": describe(tensors, dequantize=False)})

    # A split set of 2 tensors per file.
    n = int(g.rng.integers(3, 7))
    tensors = []
    for i in range(n):
        qtype = [Q.Q8_0, Q.Q4_0, None][i % 3]
        data = g.rng.normal(size=(2, 64)).astype(np.float32)
        tensors.append((f"blk.{i}.weight", data if qtype is None else quants.quantize(data, qtype), qtype))
    write(out_dir / "split.gguf", "live", [], tensors, split_max_tensors=2)
    count = (n + 1) // 2
    first = f"split-00001-of-{count:05d}.gguf"
    assert (out_dir / first).exists(), sorted(p.name for p in out_dir.iterdir())
    files.append({"file": first, "split_count": count,
                  "tensors": describe(tensors)})

    json.dump({"seed": seed, "files": files}, sys.stdout)


if __name__ == "__main__":
    main()
