#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compare two safetensors files of f32 tensors (train_mlp --save-final):
per tensor, the largest |a - b| over the largest |a|.

Usage: st_compare.py A B RTOL
Prints one line per tensor and a summary with the worst relative
difference; exit 0 when every tensor is within RTOL (0: bitwise), 1 when one
is not, 2 when the files cannot be compared (names, shapes, dtypes).
Standard library only (json, struct, array)."""
import array
import json
import math
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, v in header.items():
        if v["dtype"] != "F32":
            raise ValueError("%s: %s is %s, not F32" % (path, name, v["dtype"]))
        b, e = v["data_offsets"]
        a = array.array("f")
        a.frombytes(blob[8 + n + b:8 + n + e])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (v["shape"], a)
    return out


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    try:
        ta, tb = load(sys.argv[1]), load(sys.argv[2])
    except (OSError, ValueError, KeyError) as e:
        print("compare: %s" % e)
        return 2
    rtol = float(sys.argv[3])
    if sorted(ta) != sorted(tb):
        print("compare: tensors differ: %s vs %s" % (sorted(ta), sorted(tb)))
        return 2
    worst, bad, count = 0.0, 0, 0
    for name in sorted(ta):
        (sa, a), (sb, b) = ta[name], tb[name]
        if sa != sb:
            print("compare: %s has shape %s vs %s" % (name, sa, sb))
            return 2
        md = max((abs(x - y) if x == x and y == y else math.inf for x, y in zip(a, b)),
                 default=0.0)
        ma = max((abs(x) for x in a), default=0.0)
        rel = md / ma if ma > 0 else md
        count += len(a)
        worst = max(worst, rel)
        ok = rel <= rtol
        bad += not ok
        print("  %-12s %8d values: max difference %.3e, max |value| %.3e, relative %.3e%s"
              % (name, len(a), md, ma, rel, "" if ok else "  > %.1e" % rtol))
    print("compare: %d values in %d tensors, %d tensor(s) outside tolerance, max relative "
          "%.3e (tolerance %.1e)" % (count, len(ta), bad, worst, rtol))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
