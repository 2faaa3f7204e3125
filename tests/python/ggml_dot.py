#!/usr/bin/env python3
"""llama.cpp's own CPU dot products, for the kernel tests (llm/src/kernels.rs): the prebuilt
library of node-llama-cpp 3.21.1 (llama.cpp release v0.4.0, tests/llama/node_modules), its AVX2
build (`libggml-cpu-haswell.so`), called through ctypes.

    python3 tests/python/ggml_dot.py TYPE COLS ROWS.bin X.bin

TYPE is a weight type with a Q8_K activation product (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) or a Q8_0/Q8_1 one (Q8_0,
Q4_0, Q4_1, Q5_0, Q5_1), or Q4_K_8x8 / IQ4_NL_8x8: Q4_K / IQ4_NL rows (a multiple of 8)
interleaved as llama.cpp repacks them at load on an AVX2 CPU (`make_block_q4_Kx8` /
`make_block_iq4_nlx8` of ggml-cpu/repack.cpp) and multiplied by `ggml_gemv_q4_K_8x8_q8_K` /
`ggml_gemv_iq4_nl_8x8_q8_0`, the kernel its decode steps use for such a matrix; ROWS.bin holds
whole rows of COLS values in that type's stored blocks,
X.bin input vectors of COLS little-endian f32. Each input is quantized by llama.cpp's
`quantize_row_q8_K` (or `_q8_0` / `_q8_1`) and every row is multiplied with every input by its
`ggml_vec_dot_TYPE_q8_*`: prints one line per row, the f32 bit patterns (hex) of its products
with the inputs in order.
"""
import ctypes
import sys
from pathlib import Path

# type: (values per block, bytes per block, activation type, bytes per activation block)
TYPES = {
    "Q4_K": (256, 144, "q8_K", 292),
    "Q4_K_8x8": (256, 144, "q8_K", 292),
    "Q6_K": (256, 210, "q8_K", 292),
    "Q2_K": (256, 84, "q8_K", 292),
    "Q3_K": (256, 110, "q8_K", 292),
    "Q5_K": (256, 176, "q8_K", 292),
    "IQ4_XS": (256, 136, "q8_K", 292),
    "Q8_0": (32, 34, "q8_0", 34),
    "Q4_0": (32, 18, "q8_0", 34),
    "Q5_0": (32, 22, "q8_0", 34),
    "Q4_1": (32, 20, "q8_1", 36),
    "Q5_1": (32, 24, "q8_1", 36),
    "IQ4_NL_8x8": (32, 18, "q8_0", 34),
}


def repack_q4_k_8x8(blocks: list) -> bytes:
    """block_q4_Kx8 of eight Q4_K blocks (144 bytes each): llama.cpp's make_block_q4_Kx8 with an
    interleave of 8 bytes."""
    d = b"".join(b[0:2] for b in blocks)
    dmin = b"".join(b[2:4] for b in blocks)
    qs = bytearray(1024)
    for i in range(1024 // 8):
        src, off = i % 8, (i // 8) * 8
        qs[8 * i:8 * i + 8] = blocks[src][16 + off:16 + off + 8]
    sc = [b[4:16] for b in blocks]
    out = bytearray(96)
    for half in range(2):
        for i in range(4):
            if half == 0:
                s = [sc[j][i] & 63 for j in range(8)]
                m = [sc[j][i + 4] & 63 for j in range(8)]
            else:
                s = [((sc[j][i] & 192) >> 2) | (sc[j][i + 8] & 15) for j in range(8)]
                m = [((sc[j][i + 4] & 192) >> 2) | ((sc[j][i + 8] & 240) >> 4) for j in range(8)]
            o = 48 * half + 12 * i
            for k in range(4):
                out[o + k] = ((s[k] & 63) + ((s[k + 4] & 48) << 2)) & 0xFF
                out[o + 4 + k] = ((m[k] & 63) + ((m[k + 4] & 48) << 2)) & 0xFF
                out[o + 8 + k] = ((s[k + 4] & 15) + ((m[k + 4] & 15) << 4)) & 0xFF
    return d + dmin + bytes(out) + bytes(qs)


def repack_iq4_nl_8x8(blocks: list) -> bytes:
    """block_iq4_nlx8 of eight IQ4_NL blocks (18 bytes each): llama.cpp's make_block_iq4_nlx8 with
    an interleave of 8 bytes (the eight f16 scales, then the nibbles 8 bytes of a block at a time)."""
    d = b"".join(b[0:2] for b in blocks)
    qs = bytearray(128)
    for i in range(16):
        src, off = i % 8, (i // 8) * 8
        qs[8 * i:8 * i + 8] = blocks[src][2 + off:2 + off + 8]
    return d + bytes(qs)


# the repacked types: (the repacking, llama.cpp's gemv)
REPACKED = {
    "Q4_K_8x8": (repack_q4_k_8x8, "ggml_gemv_q4_K_8x8_q8_K"),
    "IQ4_NL_8x8": (repack_iq4_nl_8x8, "ggml_gemv_iq4_nl_8x8_q8_0"),
}


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    ty, cols, rows_path, x_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if ty not in TYPES:
        sys.exit(f"unknown TYPE {ty!r}: one of {', '.join(TYPES)}")
    block, size, act, act_size = TYPES[ty]
    if cols <= 0 or cols % block:
        sys.exit(f"COLS {cols} is not a whole number of {ty} blocks of {block}")
    lib = Path(__file__).resolve().parents[1] / "llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
    if not (lib / "libggml-cpu-haswell.so").exists():
        sys.exit(f"llama.cpp's CPU library is not in {lib}: run scripts/setup.sh (npm ci --prefix tests/llama)")
    ctypes.CDLL(str(lib / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(lib / "libggml-cpu-haswell.so"))
    # fills the library's f16 -> f32 table (its kernels read block scales through it)
    cpu.ggml_cpu_init.restype = None
    cpu.ggml_cpu_init()
    rows = Path(rows_path).read_bytes()
    xs = Path(x_path).read_bytes()
    row_bytes = cols // block * size
    if len(rows) % row_bytes or len(xs) % (4 * cols):
        sys.exit(f"{rows_path} is not whole rows of {row_bytes} bytes or {x_path} not whole inputs of {cols} f32")
    quantize = getattr(cpu, f"quantize_row_{act}")
    quantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    quantize.restype = None
    # ggml_vec_dot_q4_K_q8_K, ggml_vec_dot_q4_1_q8_1, ...: the type's name with a lower-case q
    # (ggml_vec_dot_iq4_xs_q8_K: all lower case)
    name = ty.removesuffix("_8x8").lower() if ty.startswith("IQ") else f"q{ty[1:4]}"
    dot = getattr(cpu, f"ggml_vec_dot_{name}_{act}")
    dot.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dot.restype = None
    qx = []
    for i in range(len(xs) // (4 * cols)):
        src = ctypes.create_string_buffer(xs[4 * cols * i:4 * cols * (i + 1)], 4 * cols)
        dst = ctypes.create_string_buffer(cols // block * act_size if act == "q8_K" else cols // 32 * act_size)
        quantize(ctypes.addressof(src), ctypes.addressof(dst), cols)
        qx.append(dst)
    if ty in REPACKED:
        n_rows = len(rows) // row_bytes
        if n_rows % 8:
            sys.exit(f"{ty} needs a multiple of 8 rows, not {n_rows}")
        nb = cols // block
        blk = lambda r, b: rows[row_bytes * r + size * b:row_bytes * r + size * (b + 1)]
        repack, gemv_name = REPACKED[ty]
        packed = b"".join(repack([blk(8 * x + j, b) for j in range(8)])
                          for x in range(n_rows // 8) for b in range(nb))
        w = ctypes.create_string_buffer(packed, len(packed))
        gemv = getattr(cpu, gemv_name)
        gemv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int, ctypes.c_int]
        gemv.restype = None
        res = []
        for q in qx:
            out = (ctypes.c_float * n_rows)()
            gemv(cols, ctypes.addressof(out), n_rows, ctypes.addressof(w), ctypes.addressof(q), 1, n_rows)
            res.append([f"{ctypes.c_uint32.from_buffer(ctypes.c_float(v)).value:08x}" for v in out])
        for r in range(n_rows):
            print(" ".join(res[i][r] for i in range(len(qx))))
        return
    out = ctypes.c_float()
    for r in range(len(rows) // row_bytes):
        w = ctypes.create_string_buffer(rows[row_bytes * r:row_bytes * (r + 1)], row_bytes)
        bits = []
        for q in qx:
            dot(cols, ctypes.addressof(out), 0, ctypes.addressof(w), 0, ctypes.addressof(q), 0, 1)
            bits.append(f"{ctypes.c_uint32.from_buffer(out).value:08x}")
        print(" ".join(bits))


if __name__ == "__main__":
    main()
