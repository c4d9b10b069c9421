#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check that a checkpoint of a 16-bit run keeps f32 masters.

Usage: ckpt_masters.py CHECKPOINT_DIR bf16|f16

Reads every *.safetensors file of the checkpoint, puts each tensor
together from its slices (the accel.slices metadata: a tensor sharded by
zero or fsdp is split over the rank files), and for every parameter P
checks that
  - param/P (the working copy) has dtype BF16 / F16,
  - master/P has dtype F32 and the same number of elements,
  - param/P is master/P rounded to nearest even in that dtype, element for
    element (the strategy refreshes the working copy from the master),
  - some master value is finer than the 16-bit format (a master kept in
    16 bits, or rounded each step, would hold only 16-bit values).
Exit 0 when all hold, 1 otherwise (a line per failure), 2 on a bad file.
Standard library only."""
import glob
import json
import math
import os
import struct
import sys


def load_dir(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(path, "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        meta = header.pop("__metadata__", {}) or {}
        slices = {s["key"]: s for s in json.loads(meta.get("accel.slices", "[]"))}
        for key, v in header.items():
            s = slices.get(key, {"name": key, "offset": 0})
            b, e = v["data_offsets"]
            raw = blob[8 + n + b:8 + n + e]
            size = {"F32": 4, "BF16": 2, "F16": 2}.get(v["dtype"])
            if size is None:
                continue
            t = out.setdefault(s["name"], {"dtype": v["dtype"], "parts": []})
            if t["dtype"] != v["dtype"]:
                raise ValueError("%s: slices of %s in %s and %s" % (path, s["name"], t["dtype"],
                                                                  v["dtype"]))
            t["parts"].append((s["offset"], raw))
    for name, t in out.items():
        t["parts"].sort()
        t["raw"] = b"".join(r for _, r in t["parts"])
        del t["parts"]
    return out


def f32_values(raw):
    return struct.unpack("<%df" % (len(raw) // 4), raw)


def f32_bits(raw):
    return struct.unpack("<%dI" % (len(raw) // 4), raw)


def to_bf16(u):
    if (u & 0x7fffffff) > 0x7f800000:
        return None
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff


def to_f16(x):
    try:
        return struct.unpack("<H", struct.pack("<e", x))[0]   # round to nearest even
    except OverflowError:
        return 0xfc00 if x < 0 else 0x7c00


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("bf16", "f16"):
        print(__doc__)
        return 2
    d, fmt = sys.argv[1], sys.argv[2]
    want = "BF16" if fmt == "bf16" else "F16"
    try:
        ts = load_dir(d)
    except (OSError, ValueError) as e:
        print("ckpt_masters: %s" % e)
        return 2
    params = sorted(n[len("param/"):] for n in ts if n.startswith("param/"))
    bad, finer, total = 0, 0, 0
    if not params:
        print("FAIL: %s: no param/ tensors" % d)
        return 1
    for p in params:
        w, m = ts["param/" + p], ts.get("master/" + p)
        if w["dtype"] != want:
            print("FAIL: param/%s is %s, not %s" % (p, w["dtype"], want))
            bad += 1
            continue
        if m is None or m["dtype"] != "F32":
            print("FAIL: master/%s is %s, not F32" % (p, m["dtype"] if m else "missing"))
            bad += 1
            continue
        work = struct.unpack("<%dH" % (len(w["raw"]) // 2), w["raw"])
        if len(work) != len(m["raw"]) // 4:
            print("FAIL: %s: %d working values, %d master values" % (p, len(work),
                                                                    len(m["raw"]) // 4))
            bad += 1
            continue
        if fmt == "bf16":
            rounded = [to_bf16(u) for u in f32_bits(m["raw"])]
        else:
            rounded = [to_f16(x) for x in f32_values(m["raw"])]
        diff = [i for i, (a, b) in enumerate(zip(work, rounded)) if a != b]
        if diff:
            i = diff[0]
            print("FAIL: param/%s: %d of %d working values are not the master rounded; "
                  "first [%d]: 0x%04x, master %r rounds to 0x%04x"
                  % (p, len(diff), len(work), i, work[i], f32_values(m["raw"])[i],
                     rounded[i]))
            bad += 1
        if fmt == "bf16":
            finer += sum(1 for u in f32_bits(m["raw"]) if u & 0xffff)
        else:
            finer += sum(1 for x in f32_values(m["raw"])
                         if math.isfinite(x) and struct.unpack("<e", struct.pack("<e", x))[0] != x)
        total += len(work)
    if not bad and finer == 0:
        print("FAIL: every one of the %d master values is a %s value: masters kept in 16 bits?"
              % (total, fmt))
        bad += 1
    if bad:
        return 1
    print("ok: %d parameters, %d values: %s working copies are the f32 masters rounded; "
          "%d masters finer than %s" % (len(params), total, fmt, finer, fmt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
