#!/usr/bin/env python3
"""Quantizes a GGUF with llama.cpp's own quantizer (the prebuilt library of node-llama-cpp
3.21.1, llama.cpp release v0.4.0), so a random-weight model gets the same type mix a downloaded
file of that name has:

    python3 scripts/llama_quantize.py IN.gguf OUT.gguf FTYPE [THREADS]

FTYPE is a name of `enum llama_ftype` (include/llama.h of the release): Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0, Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, Q3_K_M, Q2_K, or its number.
"""
import ctypes
import os
import sys
from pathlib import Path

FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
    "Q5_K_M": 17, "Q6_K": 18, "BF16": 32,
}


def bins() -> Path:
    root = Path(__file__).resolve().parent.parent / "tests/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
    if not (root / "libllama.v0.4.0.so").exists():
        sys.exit(f"llama.cpp's library is not at {root}: run `npm ci` in tests/llama (scripts/setup.sh)")
    return root


def main() -> None:
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    src, dst, ftype = sys.argv[1], sys.argv[2], sys.argv[3]
    threads = int(sys.argv[4]) if len(sys.argv) == 5 else 0
    ft = FTYPES.get(ftype.upper()) if not ftype.isdigit() else int(ftype)
    if ft is None:
        sys.exit(f"unknown FTYPE {ftype!r}: one of {', '.join(FTYPES)} or a number of enum llama_ftype")
    if not Path(src).is_file():
        sys.exit(f"no input model at {src}")
    b = bins()
    for lib in ("libggml-base.so", "libggml.v0.4.0.so"):
        ctypes.CDLL(str(b / lib), mode=ctypes.RTLD_GLOBAL)
    llama = ctypes.CDLL(str(b / "libllama.v0.4.0.so"))
    # llama_model_quantize_params (include/llama.h): nthread and ftype are its first two int32
    # fields; the 64-byte struct (returned by value through a hidden pointer) is received into a
    # larger buffer, so a later release that grew it would still not write past it.
    class Params(ctypes.Structure):
        _fields_ = [("raw", ctypes.c_uint8 * 512)]

    llama.llama_model_quantize_default_params.restype = Params
    buf = llama.llama_model_quantize_default_params()
    ints = ctypes.cast(ctypes.byref(buf), ctypes.POINTER(ctypes.c_int32))
    ints[0] = threads
    ints[1] = ft
    llama.llama_model_quantize.restype = ctypes.c_uint32
    llama.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
    rc = llama.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(buf))
    if rc != 0:
        sys.exit(f"llama_model_quantize({src} -> {dst}, ftype {ft}) failed with {rc}")


if __name__ == "__main__":
    main()
