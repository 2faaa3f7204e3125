#!/usr/bin/env python3
"""Checks that tenso 0.24.0 reads packets another implementation wrote, exactly as described.

    tenso_check.py INDIR [--quiet]

INDIR holds <name>.tenso packets and manifest.json (schema in tenso_live_common.py). For every
case, `tenso.loads` must give exactly the described value: dtype, shape, bit-exact bytes (sha256)
and np.array_equal with equal_nan for small tensors; quantized metadata, packed bytes and
dequantized values; string lists; scipy sparse matrices. Extra case fields:

  tenso_error       tenso must REFUSE the packet with an error containing this text
  probe             a finding to report (results.json), not a failure
  quantize_input    tenso quantizes the same float32 input and must produce the identical packet
  byte_exact        tenso re-encodes the decoded value with the case's options to identical bytes

Writes INDIR/results.json ({"cases": [{"name", "ok", "error"}], "passed", "failed"}) and exits
non-zero with a message per mismatch when any non-probe case fails.
"""

import argparse
import json
import os
import sys
import traceback

import ml_dtypes
import numpy as np
import scipy.sparse as sp
import tenso

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tenso_live_common import QDTYPES, SCHEMES, c_bytes, sha256  # noqa: E402


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def check_dense(e, obj, path, errs, index_component=False):
    if not isinstance(obj, np.ndarray):
        errs.append(f"{path}: expected an ndarray, tenso gave {type(obj).__name__}")
        return
    if list(obj.shape) != list(e["shape"]):
        errs.append(f"{path}: shape {list(obj.shape)} != expected {e['shape']}")
        return
    if index_component and obj.dtype.kind in "iu" and obj.dtype.name != e["dtype"]:
        # scipy may re-type index arrays when it builds the matrix; compare values then
        if "hex" in e:
            want = np.frombuffer(bytes.fromhex(e["hex"]), dtype=np_dtype(e["dtype"])).reshape(e["shape"])
            if not np.array_equal(want.astype(np.int64), obj.astype(np.int64)):
                errs.append(f"{path}: index values differ (dtype {obj.dtype.name} vs {e['dtype']})")
        return
    if obj.dtype.name != e["dtype"]:
        errs.append(f"{path}: dtype {obj.dtype.name} != expected {e['dtype']}")
        return
    got = c_bytes(obj)
    if sha256(got) != e["sha256"]:
        msg = f"{path}: data differs (sha256 {sha256(got)[:16]}.. != {e['sha256'][:16]}..)"
        if "hex" in e:
            want = bytes.fromhex(e["hex"])
            k = next((i for i in range(min(len(want), len(got))) if want[i] != got[i]), min(len(want), len(got)))
            msg += f"; first differing byte {k} of {len(want)}"
        errs.append(msg)
        return
    if "hex" in e:
        want = np.frombuffer(bytes.fromhex(e["hex"]), dtype=np_dtype(e["dtype"])).reshape(e["shape"])
        a, b = want, obj
        if e["dtype"] == "bfloat16":
            a, b = a.astype(np.float32), b.astype(np.float32)
        equal_nan = a.dtype.kind in "fc"
        if not np.array_equal(a, b, equal_nan=equal_nan):
            errs.append(f"{path}: np.array_equal(equal_nan={equal_nan}) is False although the bytes match")


def check_quant(e, obj, path, errs):
    if not isinstance(obj, tenso.QuantizedTensor):
        errs.append(f"{path}: expected a QuantizedTensor, tenso gave {type(obj).__name__}")
        return
    got = {
        "qdtype": QDTYPES.get(int(obj.dtype_code), str(obj.dtype_code)),
        "shape": [int(d) for d in obj.shape],
        "scheme": SCHEMES.get(int(obj.quant_scheme), "unknown"),
        "axis": int(obj.axis),
        "group_size": int(obj.group_size),
        "scales_hex": np.asarray(obj.scales, dtype="<f4").tobytes().hex(),
        "zero_points_hex": np.asarray(obj.zero_points, dtype="<f4").tobytes().hex(),
        "data_hex": np.asarray(obj.data, dtype=np.uint8).tobytes().hex(),
    }
    for k, v in got.items():
        if v != e[k]:
            errs.append(f"{path}: {k} {v!r} != expected {e[k]!r}")
    if errs or "dequantized_sha256" not in e:
        return
    dq = c_bytes(np.asarray(obj.dequantize(), dtype=np.float32))
    if sha256(dq) != e["dequantized_sha256"]:
        errs.append(f"{path}: dequantize() differs")


def check_sparse(e, obj, path, errs):
    if not sp.issparse(obj):
        errs.append(f"{path}: expected a scipy sparse matrix, tenso gave {type(obj).__name__}")
        return
    if obj.format != e["format"]:
        errs.append(f"{path}: format {obj.format} != expected {e['format']}")
        return
    if list(obj.shape) != list(e["shape"]):
        errs.append(f"{path}: shape {list(obj.shape)} != expected {e['shape']}")
        return
    names = ["data", "row", "col"] if obj.format == "coo" else ["data", "indices", "indptr"]
    for i, (n, ce) in enumerate(zip(names, e["components"])):
        check_dense(ce, np.asarray(getattr(obj, n)), f"{path}.{n}", errs, index_component=i > 0)


def check(e, obj, path, errs):
    kind = e["kind"]
    if kind == "dense":
        check_dense(e, obj, path, errs)
    elif kind == "quantized":
        check_quant(e, obj, path, errs)
    elif kind == "sparse":
        check_sparse(e, obj, path, errs)
    elif kind == "string":
        if not isinstance(obj, tenso.StringTensor):
            errs.append(f"{path}: expected a StringTensor, tenso gave {type(obj).__name__}")
        elif obj.to_list() != e["strings"]:
            got = obj.to_list()
            errs.append(f"{path}: strings differ ({len(got)} vs {len(e['strings'])} items; "
                        f"first difference at {next((i for i, (a, b) in enumerate(zip(got, e['strings'])) if a != b), min(len(got), len(e['strings'])))})")
    elif kind == "bundle":
        if not isinstance(obj, dict):
            errs.append(f"{path}: expected a dict, tenso gave {type(obj).__name__}")
            return
        want = dict(e["entries"])  # the last duplicate wins, as in tenso
        if list(obj.keys()) != list(want.keys()):
            errs.append(f"{path}: keys {list(obj.keys())} != expected {list(want.keys())}")
            return
        for k, v in want.items():
            check(v, obj[k], f"{path}[{k!r}]", errs)
    else:
        errs.append(f"{path}: unknown kind {kind!r} in the manifest")


def redump(obj, o):
    if isinstance(obj, tenso.StringTensor):
        return bytes(obj.dumps(check_integrity=o["integrity"]))
    return bytes(tenso.dumps(obj, check_integrity=o["integrity"], compress=o["compress"], alignment=o["alignment"]))


def run_case(indir, case):
    with open(os.path.join(indir, case["file"]), "rb") as f:
        packet = f.read()
    errs = []
    if "tenso_error" in case:
        try:
            tenso.loads(packet)
        except Exception as ex:  # noqa: BLE001
            if case["tenso_error"] not in str(ex):
                errs.append(f"tenso refused it, but with {type(ex).__name__}: {ex} (expected {case['tenso_error']!r})")
            return errs
        errs.append(f"tenso read it, but the manifest says tenso refuses it ({case['tenso_error']!r})")
        return errs
    try:
        obj = tenso.loads(packet)
    except Exception as ex:  # noqa: BLE001
        return [f"tenso.loads raised {type(ex).__name__}: {ex}"]
    check(case, obj, case["name"], errs)
    qin = case.get("quantize_input")
    if qin:
        x = np.frombuffer(bytes.fromhex(qin["hex"]), dtype="<f4").reshape(qin["shape"])
        q = tenso.QuantizedTensor.quantize(x, qin["qdtype"], scheme=qin["scheme"], group_size=qin["group_size"],
                                           axis=qin["axis"])
        mine = redump(q, qin["options"])
        if mine != packet:
            k = next((i for i in range(min(len(mine), len(packet))) if mine[i] != packet[i]), None)
            errs.append(f"tenso's quantize() of the same float32 input gives other bytes "
                        f"(len {len(mine)} vs {len(packet)}, first difference at byte {k})")
    if case.get("byte_exact") and not errs:
        mine = redump(obj, case["options"])
        if mine != packet:
            k = next((i for i in range(min(len(mine), len(packet))) if mine[i] != packet[i]), None)
            errs.append(f"tenso re-encodes it to other bytes (len {len(mine)} vs {len(packet)}, first difference at {k})")
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("indir")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    with open(os.path.join(args.indir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    results, failed, probes = [], [], []
    for case in manifest["cases"]:
        try:
            errs = run_case(args.indir, case)
        except Exception:  # noqa: BLE001
            errs = ["checker crashed:\n" + traceback.format_exc()]
        results.append({"name": case["name"], "ok": not errs, "error": "; ".join(errs) or None})
        if case.get("probe"):
            probes.append((case["name"], errs))
        elif errs:
            failed.append((case["name"], errs))
        elif not args.quiet:
            print(f"ok   {case['name']}")
    n_ok = sum(r["ok"] for r in results)
    with open(os.path.join(args.indir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": results, "passed": n_ok, "failed": len(results) - n_ok}, f, indent=1)
    for name, errs in probes:
        print(f"PROBE {name}: {'tenso reads it as described' if not errs else 'FAILS: ' + '; '.join(errs)}")
    for name, errs in failed:
        for err in errs:
            print(f"FAIL {name}: {err}", file=sys.stderr)
    print(f"tenso_check ({manifest.get('producer', '?')}): {n_ok}/{len(results)} cases as described, "
          f"{len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
