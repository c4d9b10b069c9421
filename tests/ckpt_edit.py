#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Rewrite one tensor or blob of a checkpoint, keeping the checkpoint
self-consistent, so that a load sees wrong *values* (what a damaged or
foreign writer could leave) rather than a checksum mismatch.

Usage: ckpt_edit.py DIR NAME [--dtype DT] [--shape A,B,...] [--values V,V,...]
                   [--element K=V]

NAME is a tensor of the manifest (scaler/state, fp8/scale/fc0.weight,
compress/layout, master/fc0.weight, ...) held in one slice, or a blob
(compress/residual.0) of one rank file.  The new tensor has dtype DT
(safetensors' names: F64, F32, I64, ...; default: the saved one), shape
A,B (default: the saved one; "" for a scalar) and values V (Python
literals: nan, inf, -1, 3.5; default: the saved values converted, cut or
padded with zeros); --element K=V then sets element K alone.  A blob
takes its values as f32 (its bytes are the plugin's).  The safetensors file is rewritten (header, offsets, data),
and the manifest's entries for it updated: the tensor's dtype, shape and
slice (count, checksum), the file's size, checksum and header checksum,
the blob's checksum.  The manifest's own checksum (manifest_xxh64) is
dropped, as an accel before it wrote manifests: a reader checks the
fields by name instead (docs/checkpoints.md).

XXH64 is implemented here (the xxhash package is not always installed).
"""
import json
import math
import os
import struct
import sys

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    acc = (acc + lane * P2) & M64
    return (_rotl(acc, 31) * P1) & M64


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * P1 + P4) & M64


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64
        lanes = struct.unpack_from("<%dQ" % (n // 32 * 4), data)
        for k in range(0, len(lanes), 4):
            v1 = _round(v1, lanes[k])
            v2 = _round(v2, lanes[k + 1])
            v3 = _round(v3, lanes[k + 2])
            v4 = _round(v4, lanes[k + 3])
        i = n // 32 * 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        (k1,) = struct.unpack_from("<Q", data, i)
        h ^= _round(0, k1)
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        (k,) = struct.unpack_from("<I", data, i)
        h ^= (k * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    h ^= h >> 32
    return h


FMT = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "U8": "B"}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def write_st(path, header, blobs):
    """header: {name: {dtype, shape}} (+ __metadata__), blobs: {name: bytes}."""
    out, data = {}, b""
    if "__metadata__" in header:
        out["__metadata__"] = header["__metadata__"]
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b = blobs[name]
        out[name] = {"dtype": t["dtype"], "shape": t["shape"],
                     "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(out, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    raw = struct.pack("<Q", len(h)) + h
    with open(path, "wb") as f:
        f.write(raw + data)
    return raw, raw + data


def value(s):
    return float(s) if any(c in s for c in ".eEn") else int(s)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    d, name, opts = args[0], args[1], {}
    rest = args[2:]
    while rest:
        if rest[0] not in ("--dtype", "--shape", "--values", "--element") or len(rest) < 2:
            sys.exit("ckpt_edit.py: bad option %r\n%s" % (rest[0], __doc__))
        opts[rest[0][2:]] = rest[1]
        rest = rest[2:]
    mpath = os.path.join(d, "manifest.json")
    m = json.load(open(mpath))
    t = m["tensors"].get(name)
    blob = None
    if t is not None:
        if len(t["slices"]) != 1:
            sys.exit("ckpt_edit.py: %s has %d slices; one is supported" % (name, len(t["slices"])))
        fname, key = t["slices"][0]["file"], t["slices"][0]["key"]
    else:
        for fname, f in m["files"].items():
            if name in f.get("blobs", {}):
                blob, key = name, name
                break
        else:
            sys.exit("ckpt_edit.py: %s: no tensor or blob %s" % (d, name))
    fpath = os.path.join(d, fname)
    header, data = read_st(fpath)
    e = header[key]
    old = data[e["data_offsets"][0]:e["data_offsets"][1]]
    if blob:
        dtype, shape = "F32", [len(old) // 4]
        vals = list(struct.unpack("<%df" % shape[0], old))
    else:
        dtype, shape = e["dtype"], e["shape"]
        vals = list(struct.unpack("<%d%s" % (len(old) // struct.calcsize(FMT[dtype]), FMT[dtype]),
                                  old))
    dtype = opts.get("dtype", dtype)
    if "shape" in opts:
        shape = [int(x) for x in opts["shape"].split(",") if x != ""]
    count = math.prod(shape)
    if "values" in opts:
        vals = [value(x) for x in opts["values"].split(",")]
        if len(vals) != count:
            sys.exit("ckpt_edit.py: %d values for shape %s" % (len(vals), shape))
    vals = (vals + [0] * count)[:count]
    if "element" in opts:
        k, v = opts["element"].split("=")
        vals[int(k)] = value(v)
    if dtype.startswith("I") or dtype == "U8":
        vals = [int(v) for v in vals]
    new = struct.pack("<%d%s" % (count, FMT[dtype]), *vals)
    blobs = {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
             for k, v in header.items() if k != "__metadata__"}
    blobs[key] = new
    if blob:
        header[key]["shape"] = [len(new)]
    else:
        header[key]["dtype"], header[key]["shape"] = dtype, shape
    head, raw = write_st(fpath, header, blobs)
    f = m["files"][fname]
    f["size"], f["xxh64"], f["header_xxh64"] = (len(raw), "%016x" % xxh64(raw),
                                                "%016x" % xxh64(head))
    if blob:
        f["blobs"][blob] = "%016x" % xxh64(new)
    else:
        t["dtype"], t["shape"] = dtype, shape
        t["slices"][0]["count"] = count
        t["slices"][0]["xxh64"] = "%016x" % xxh64(new)
    m.pop("manifest_xxh64", None)
    with open(mpath, "w") as out:
        json.dump(m, out, indent=1)


if __name__ == "__main__":
    main()
