"""Opens tensorlane-written .zt files with ztensor 2.1.2 and checks them (native/tests/zt_live.rs).

    python zt_check.py EXPECT_JSON

EXPECT_JSON: {"files": [{"path", "attributes" (or null), "objects": {name: {"layout", "shape",
"attributes" (or null), "parts": {pname: {"dtype", "logical", "sha256"}}}}}]}

For every file: ztensor.open lists exactly the expected objects; each object's layout, shape and
attributes match; each part's dtype, logical type and bytes (sha256 of tobytes()) match; and
ztensor.verify(path, deep=True) digest-verifies every part. Prints one line per file; exits 1 on
any mismatch.
"""
import hashlib
import json
import sys

import ztensor


def check_file(spec):
    path = spec["path"]
    errors = []
    src = ztensor.open(path)
    want = spec["objects"]
    if sorted(src.keys()) != sorted(want):
        errors.append(f"objects {sorted(src.keys())} != {sorted(want)}")
    if spec.get("attributes") is not None and src.attributes != spec["attributes"]:
        errors.append(f"file attributes {src.attributes!r} != {spec['attributes']!r}")
    nparts = 0
    for name, obj in want.items():
        if name not in src.keys():
            continue
        t = src[name]
        if t.layout != obj["layout"]:
            errors.append(f"{name}: layout {t.layout} != {obj['layout']}")
        if list(t.shape) != obj["shape"]:
            errors.append(f"{name}: shape {list(t.shape)} != {obj['shape']}")
        if sorted(t.parts) != sorted(obj["parts"]):
            errors.append(f"{name}: parts {t.parts} != {sorted(obj['parts'])}")
        for pname, p in obj["parts"].items():
            nparts += 1
            part = t[pname] if len(t.parts) > 1 else t
            if part.dtype != p["dtype"]:
                errors.append(f"{name}/{pname}: dtype {part.dtype} != {p['dtype']}")
            if part.logical != p["logical"]:
                errors.append(f"{name}/{pname}: logical {part.logical} != {p['logical']}")
            got = hashlib.sha256(part.tobytes()).hexdigest()
            if got != p["sha256"]:
                errors.append(f"{name}/{pname}: bytes sha256 {got} != {p['sha256']}")
    v = ztensor.verify(path, deep=True)
    if v.checked != nparts or v.undigested != 0:
        errors.append(f"verify: {v} for {nparts} parts")
    src.close()
    return errors, nparts


def main():
    with open(sys.argv[1]) as f:
        files = json.load(f)["files"]
    failed = False
    for spec in files:
        try:
            errors, n = check_file(spec)
        except Exception as e:  # noqa: BLE001 - reported, then the run fails
            errors, n = [f"{type(e).__name__}: {e}"], 0
        if errors:
            failed = True
            print(f"FAIL {spec['path']}:")
            for e in errors:
                print(f"  {e}")
        else:
            print(f"ok {spec['path']}: {len(spec['objects'])} objects, {n} parts verified")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
