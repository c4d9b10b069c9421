#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Cross-check core/safetensors*.c against an independent reader and writer.

Usage: safetensors_check.py TEST_SAFETENSORS_EXE

1. The C writer (`TEST_SAFETENSORS_EXE --write-sample F`) writes a file with
   known values; this script parses it with nothing but json + struct, applies
   the format's rules itself (header length, padding, offsets covering the
   buffer) and decodes every tensor with torch.frombuffer, then compares with
   the values the C side was asked to write.
2. This script writes a file from the format description (tensors in a
   different order, unaligned, with metadata) and checks that the C reader
   (`TEST_SAFETENSORS_EXE --dump F`) sees the same names, dtypes, shapes and
   values.

The reader here follows the format description directly, because the
`safetensors` Python package is not packaged for Debian bookworm.  Files
written by accel are byte-for-byte the same format that
`safetensors.torch.load_file` reads; when that package is importable the
script also loads the C-written file with it and compares.

Exit status: 0 pass, 1 fail, 77 skipped (no torch).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skipped: no torch")
    sys.exit(77)

DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "U8": (torch.uint8, 1),
    # torch of this vintage has no float8 types: compare raw bytes.
    "F8_E4M3": (torch.uint8, 1),
    "F8_E5M2": (torch.uint8, 1),
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def read_safetensors(path):
    """Independent reader: returns (metadata, {name: (dtype, shape, tensor, (b, e))})."""
    with open(path, "rb") as f:
        blob = f.read()
    check(len(blob) >= 8, "file has the 8-byte length")
    (n,) = struct.unpack("<Q", blob[:8])
    check(n % 8 == 0, f"header length {n} is a multiple of 8")
    check(8 + n <= len(blob), "header fits in the file")
    raw = blob[8:8 + n]
    check(raw[:1] == b"{", "header starts with '{'")
    text = raw.decode("utf-8")
    check(text.rstrip(" ") == text.rstrip(), "header padding is spaces")
    header = json.loads(text)
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    out = {}
    spans = []
    for name, e in header.items():
        check(set(e) == {"dtype", "shape", "data_offsets"}, f"{name}: keys {sorted(e)}")
        dt, size = DTYPES[e["dtype"]]
        shape = e["shape"]
        b, end = e["data_offsets"]
        numel = 1
        for d in shape:
            numel *= d
        check(end - b == numel * size, f"{name}: span {end - b} == {numel} x {size}")
        check(b % size == 0, f"{name}: offset {b} aligned to {size}")
        chunk = bytearray(data[b:end])
        if numel:
            t = torch.frombuffer(chunk, dtype=dt).reshape(shape)
        else:
            t = torch.zeros(shape, dtype=dt)
        out[name] = (e["dtype"], shape, t, (b, end))
        spans.append((b, end, name))
    spans.sort()
    pos = 0
    for b, end, name in spans:
        check(b == pos, f"{name} starts at {b}, previous tensor ended at {pos}")
        pos = end
    check(pos == len(data), f"tensors cover the buffer ({pos} of {len(data)} bytes)")
    return meta, out


def expected_sample():
    """The values test-safetensors --write-sample writes (see write_sample())."""
    return {
        "f32": ("F32", [3, 4], torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25 - 1.0),
        "f64": ("F64", [5], torch.arange(5, dtype=torch.float64) / 3.0),
        "f16": ("F16", [2, 3], ((torch.arange(6) - 3) * 0.5).to(torch.float16).reshape(2, 3)),
        "bf16": ("BF16", [4], ((torch.arange(4) + 1) * 1.5).to(torch.bfloat16)),
        "i64": ("I64", [3], torch.tensor([-1, 1 << 40, 7], dtype=torch.int64)),
        "i32": ("I32", [2, 2], torch.tensor([[-5, 0], [5, 2147483647]], dtype=torch.int32)),
        "u8": ("U8", [6], torch.tensor([0, 1, 2, 127, 128, 255], dtype=torch.uint8)),
        "f8e4m3": ("F8_E4M3", [4], torch.tensor([0x38, 0x40, 0xB8, 0x00], dtype=torch.uint8)),
        "f8e5m2": ("F8_E5M2", [2], torch.tensor([0x3C, 0xC0], dtype=torch.uint8)),
        "empty": ("F32", [0, 3], torch.zeros(0, 3)),
        "scalar": ("F32", [], torch.tensor(42.5)),
    }


def c_to_python(exe, tmp):
    path = os.path.join(tmp, "from_c.safetensors")
    subprocess.run([exe, "--write-sample", path], check=True)
    meta, got = read_safetensors(path)
    check(meta == {"format": "pt", "producer": "accel test"}, f"metadata {meta}")
    want = expected_sample()
    check(sorted(got) == sorted(want), f"names {sorted(got)}")
    for name, (dtype, shape, t) in want.items():
        if name not in got:
            continue
        gdtype, gshape, gt, _ = got[name]
        check(gdtype == dtype, f"{name}: dtype {gdtype} want {dtype}")
        check(gshape == shape, f"{name}: shape {gshape} want {shape}")
        check(gt.dtype == t.dtype and torch.equal(gt, t), f"{name}: values {gt} want {t}")
    try:
        from safetensors.torch import load_file
    except ImportError:
        print("note: safetensors package not installed; checked against the format only")
    else:
        loaded = load_file(path)
        for name, (_, _, t) in want.items():
            if name.startswith("f8"):
                continue
            check(torch.equal(loaded[name], t), f"safetensors.torch: {name}")
    print(f"C writer -> Python reader: {len(want)} tensors checked")


def python_to_c(exe, tmp):
    """Write a file the way another producer might (its own order, no
    alignment of tensors) and read it with the C reader."""
    tensors = [
        ("layer.0.weight", "F32", torch.linspace(-2, 2, 15, dtype=torch.float32).reshape(3, 5)),
        ("mask", "U8", torch.tensor([1, 0, 1], dtype=torch.uint8)),
        ("half", "F16", torch.tensor([0.5, -65504.0, 1e-3], dtype=torch.float16)),
        ("ids", "I64", torch.tensor([[3, -4], [5, 1 << 50]], dtype=torch.int64)),
        ("bf", "BF16", torch.tensor([1.0, -3.25, 1e30], dtype=torch.bfloat16)),
        ("d", "F64", torch.tensor([3.141592653589793], dtype=torch.float64)),
    ]
    header = {"__metadata__": {"origin": "python", "step": "12"}}
    buf = bytearray()
    for name, dt, t in tensors:
        raw = t.contiguous().numpy().tobytes() if t.dtype != torch.bfloat16 else \
            t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape),
                        "data_offsets": [len(buf), len(buf) + len(raw)]}
        buf += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path = os.path.join(tmp, "from_py.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(buf))
    out = subprocess.run([exe, "--dump", path], check=True, capture_output=True, text=True).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    meta = {x["metadata"]: x["value"] for x in lines if "metadata" in x}
    check(meta == {"origin": "python", "step": "12"}, f"C reader metadata {meta}")
    seen = {x["name"]: x for x in lines if "name" in x}
    check(sorted(seen) == sorted(n for n, _, _ in tensors), f"C reader names {sorted(seen)}")
    for name, dt, t in tensors:
        x = seen.get(name)
        if x is None:
            continue
        check(x["dtype"] == dt, f"C reader {name}: dtype {x['dtype']}")
        check(x["shape"] == list(t.shape), f"C reader {name}: shape {x['shape']}")
        b, e = header[name]["data_offsets"]
        check(x["offsets"] == [b, e], f"C reader {name}: offsets {x['offsets']}")
        want = t.flatten().tolist() if not t.is_floating_point() else \
            t.to(torch.float64).flatten().tolist()
        check(x["values"] == want, f"C reader {name}: values {x['values']} want {want}")
    print(f"Python writer -> C reader: {len(tensors)} tensors checked")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="accel-st-py-") as tmp:
        c_to_python(exe, tmp)
        python_to_c(exe, tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
