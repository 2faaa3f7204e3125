"""What numpy.save writes for tensors of model fixtures, read by the reference libraries (not by
tensorlane): safetensors.numpy for safetensors, gguf-py (GGUFReader, gguf.quants.dequantize) for
GGUF. Usage: npy_ref.py OUT_DIR < [{"id", "file", "format", "name", "as_float32"}] (JSON on stdin);
writes OUT_DIR/<i>.npy per request. `as_float32`: saved as float32 values (how the inspector
exports bfloat16, float8 and GGUF blocks). Used by tests/browser/inspector.test.mjs."""
import json
import sys
from pathlib import Path

import ml_dtypes  # noqa: F401  (registers bfloat16/float8 with NumPy for safetensors)
import numpy as np


def load(req):
    if req["format"] == "safetensors":
        from safetensors import safe_open

        with safe_open(req["file"], framework="numpy") as f:
            return f.get_tensor(req["name"])
    if req["format"] == "gguf":
        from gguf import GGUFReader
        from gguf.quants import dequantize

        for t in GGUFReader(req["file"]).tensors:
            if t.name == req["name"]:
                shape = [int(d) for d in reversed(t.shape.tolist())]
                data = np.asarray(t.data)
                if t.tensor_type.name not in ("F32", "F16", "F64", "I8", "I16", "I32", "I64"):
                    data = dequantize(data, t.tensor_type)
                return data.reshape(shape)
        raise KeyError(req["name"])
    raise ValueError(req["format"])


def main():
    out = Path(sys.argv[1])
    for i, req in enumerate(json.load(sys.stdin)):
        a = np.ascontiguousarray(load(req))
        if req.get("as_float32"):
            a = a.astype(np.float32)
        np.save(out / f"{i}.npy", a)


if __name__ == "__main__":
    main()
