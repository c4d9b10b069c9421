#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A checkpoint's model.safetensors is readable by PyTorch (docs/checkpoints.md).

Usage: checkpoint_check.py TRAIN_MLP

Trains examples/train_mlp for 6 steps with --checkpoint-every 6 and
--save-final, then reads CHECKPOINT/model.safetensors by the format's rules
with nothing but json + struct (every "param/<name>" tensor must hold the
final weights' bytes, dtype and shape), and with torch: torch.frombuffer on
those bytes and, when the `safetensors` package is importable,
safetensors.torch.load_file, each equal to the final weights.  The
manifest's size for the file is checked, and its XXH64 with the `xxhash`
package when importable.

Exit status: 0 pass, 1 fail, 77 skipped (no torch; the json + struct
checks have then passed).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile



def read_st(path):
    """{name: (dtype, shape, bytes)} by the format's rules."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert 0 <= a <= b <= len(data), (path, name, a, b)
        end = max(end, b)
        out[name] = (t["dtype"], t["shape"], data[a:b])
    assert end == len(data), (path, "the offsets do not cover the data", end, len(data))
    return out


def to_torch(torch, entry):
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    dtype, shape, b = entry
    return torch.frombuffer(bytearray(b), dtype=dtypes[dtype]).reshape(shape)


def main():
    exe = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        args = [exe, "--hidden", "16", "--samples", "64", "--batch-size", "16",
                "--no-eval", "--test-samples", "0", "--steps", "6",
                "--checkpoint-every", "6", "--project-dir", os.path.join(tmp, "p"),
                "--save-final", os.path.join(tmp, "final.st")]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            print("FAIL: train_mlp exited", r.returncode)
            return 1
        ckpt = os.path.join(tmp, "p", "checkpoint_6")
        model = read_st(os.path.join(ckpt, "model.safetensors"))
        final = read_st(os.path.join(tmp, "final.st"))
        want = sorted("param/" + k for k in final)
        if sorted(model) != want:
            print(f"FAIL: tensors {sorted(model)}, expected {want}")
            return 1
        for k, v in final.items():
            if model["param/" + k] != v:
                print(f"FAIL: param/{k}: dtype, shape or bytes differ from the final weights")
                return 1
        man = json.load(open(os.path.join(ckpt, "manifest.json")))
        ent = man["files"]["model.safetensors"]
        path = os.path.join(ckpt, "model.safetensors")
        if ent["size"] != os.path.getsize(path):
            print("FAIL: manifest size", ent["size"], "file", os.path.getsize(path))
            return 1
        try:
            import xxhash
            h = xxhash.xxh64(open(path, "rb").read(), seed=0).hexdigest()
            if h != ent["xxh64"]:
                print("FAIL: manifest xxh64", ent["xxh64"], "file", h)
                return 1
        except ImportError:
            print("note: the xxhash package is not importable; size checked only")
        try:
            import torch
        except ImportError:
            print(f"skipped: torch is not importable ({len(final)} tensors passed the "
                  "json + struct checks)")
            return 77
        model = {k: to_torch(torch, v) for k, v in model.items()}
        final = {k: to_torch(torch, v) for k, v in final.items()}
        readers = [("torch.frombuffer", model)]
        try:
            from safetensors.torch import load_file
            readers.append(("safetensors.torch.load_file",
                            load_file(os.path.join(ckpt, "model.safetensors"))))
        except ImportError:
            print("note: the safetensors package is not importable; format reader only")
        for who, got in readers:
            if sorted(got) != want:
                print(f"FAIL: {who}: tensors {sorted(got)}, expected {want}")
                return 1
            for k, v in final.items():
                g = got["param/" + k]
                if g.shape != v.shape or g.dtype != v.dtype or not torch.equal(g, v):
                    print(f"FAIL: {who}: param/{k} differs from the final weights")
                    return 1
        print("PASS:", len(final), "tensors,", ", ".join(w for w, _ in readers))
        return 0


sys.exit(main())
