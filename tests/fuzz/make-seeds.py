#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/fuzz/make-seeds.py: writes the seed corpora of the fuzz targets
# (tests/fuzz/corpus/<target>/) from the formats' definitions: well-formed
# inputs and near misses.  The files are committed; rerun after a format
# change:  python3 tests/fuzz/make-seeds.py
# Files named regress-* are inputs that once found a bug, added with the fix;
# this script leaves them alone.
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- manifest: a checkpoint's manifest.json (format version 2) --------------
def manifest(**kw):
    m = {"format": "accel-checkpoint", "format_version": 2, "accel_version": "0.1.0",
         "world_size": 2, "strategy": "ddp", "plugins": [{"name": "ddp", "state_version": 2}],
         "step": 10, "micro_step": 0, "samplers": 1,
         "scheduler": {"step": 10, "lr": 0.001},
         "files": {"model.safetensors": {"size": 200, "xxh64": "7c006acda3ba8d0d",
                                         "header_xxh64": "1111111111111111"},
                   "rank0.safetensors": {"size": 300, "xxh64": "41d761f774bc7f52",
                                         "header_xxh64": "2222222222222222",
                                         "blobs": {"sampler/0": "3333333333333333"}},
                   "rank1.safetensors": {"size": 300, "xxh64": "97ca08216057389f",
                                         "header_xxh64": "4444444444444444"}},
         "tensors": {
             "param/w": {"dtype": "F32", "shape": [2, 3], "slices": [
                 {"file": "model.safetensors", "key": "param/w", "offset": 0, "count": 6,
                  "xxh64": "0123456789abcdef"}]},
             "master/w": {"dtype": "F32", "shape": [2, 3], "slices": [
                 {"file": "rank0.safetensors", "key": "master/w@0", "offset": 0, "count": 3,
                  "xxh64": "00000000000000aa"},
                 {"file": "rank1.safetensors", "key": "master/w@3", "offset": 3, "count": 3,
                  "xxh64": "00000000000000bb"}]},
             "optim/exp_avg/b": {"dtype": "BF16", "shape": [], "slices": [
                 {"file": "rank0.safetensors", "key": "optim/exp_avg/b", "offset": 0,
                  "count": 1, "xxh64": "00000000000000cc"}]}}}
    m.update(kw)
    return json.dumps(m, indent=1)


put("manifest", "valid", manifest())
put("manifest", "empty-tensors", manifest(tensors={}))
put("manifest", "version-1", manifest(format_version=1))
put("manifest", "version-99", manifest(format_version=99))
put("manifest", "gap", manifest().replace('"count": 6', '"count": 5'))
put("manifest", "overlap", manifest().replace('"offset": 3', '"offset": 2'))
put("manifest", "file-escape", manifest().replace('"file": "rank1.safetensors"',
                                                  '"file": "../rank1.safetensors"'))
put("manifest", "bad-dtype", manifest().replace('"BF16"', '"Q4"'))
put("manifest", "huge-shape", manifest().replace('[2, 3]', '[4294967296, 4294967296, 8]'))
put("manifest", "bad-hex", manifest().replace('00000000000000aa', 'zz'))
put("manifest", "blobs-not-object", manifest().replace('{"sampler/0": "3333333333333333"}', '[1]'))
put("manifest", "not-json", manifest()[:-7])
put("manifest", "empty", "")
put("manifest", "array", "[]")

# ---- config: a config file's text, then "%%" and --set lines ----------------
cfgdir = os.path.join(ROOT, "examples", "configs")
for fn in sorted(os.listdir(cfgdir)):
    if fn.endswith(".json"):
        with open(os.path.join(cfgdir, fn), "rb") as f:
            put("config", "example-" + fn[:-5], f.read())
put("config", "sets", '{"backend": "shm"}\n%%\nseed=3\nfz.n=8\nfz.list=a,b\n'
    'fz.dev="nvme"\nfz.nested.x=0.25\nplugins=ddp\nmixed_precision=bf16\n')
put("config", "plugin-section", json.dumps(
    {"fz": {"flag": False, "n": 2, "nested": {"x": 1}, "name": "x", "dev": "none",
            "list": ["p", "q"]}, "gradient_accumulation_steps": 2}))
put("config", "bad-types", '{"fz": {"n": "two", "nested": 3, "list": [1]}, "seed": -1}')
put("config", "bad-json", '{"backend": "shm",')
put("config", "empty", "")
put("config", "deep", "[" * 64 + "]" * 64)

# ---- safetensors ---------------------------------------------------------------


def st(header, data=b"", pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


f32 = struct.pack("<6f", *range(6))
put("safetensors", "two-tensors", st(
    {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
     "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
     "__metadata__": {"format": "pt", "step": "7"}}, f32 + bytes(8)))
put("safetensors", "scalar-and-empty", st(
    {"s": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]},
     "e": {"dtype": "I32", "shape": [0, 5], "data_offsets": [8, 8]}}, bytes(8)))
put("safetensors", "all-dtypes", st(
    {n: {"dtype": d, "shape": [2], "data_offsets": [o, o + 2 * s]}
     for n, d, s, o in [("a", "F64", 8, 0), ("b", "I64", 8, 16), ("c", "F32", 4, 32),
                        ("d", "I32", 4, 40), ("e", "F16", 2, 48), ("f", "BF16", 2, 52),
                        ("g", "F8_E4M3", 1, 56), ("h", "F8_E5M2", 1, 58), ("i", "U8", 1, 60)]},
    bytes(62)))
put("safetensors", "gap", st({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
                             bytes(8)))
put("safetensors", "overlap", st(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)))
put("safetensors", "short-data", st({"w": {"dtype": "F32", "shape": [4],
                                           "data_offsets": [0, 16]}}, bytes(8)))
put("safetensors", "huge-shape", st({"w": {"dtype": "F32", "shape": [2**62, 4],
                                           "data_offsets": [0, 16]}}, bytes(16)))
put("safetensors", "header-too-long", struct.pack("<Q", 2**40) + b"{}")
put("safetensors", "truncated", b"\x10\x00\x00")

# ---- store: frames of the rendezvous protocol (docs/launch.md) ----------------
MAGIC, VERSION = 0x41435354, 1
HELLO, SET, GET, ADD, WAIT, BARRIER, BYE, EXITED = range(1, 9)


def frame(body):
    return struct.pack(">I", len(body)) + body


def s(b):
    b = b if isinstance(b, bytes) else b.encode()
    return struct.pack(">I", len(b)) + b


def hello(rank, world=2, flags=1, magic=MAGIC, ver=VERSION):
    return frame(struct.pack(">BIIIII", HELLO, magic, ver, rank, world, flags))


def op(code, *parts):
    return frame(bytes([code]) + b"".join(parts))


def i64(v):
    return struct.pack(">q", v)


put("store", "session", hello(0) + op(SET, s("k"), s("v")) + op(GET, i64(0), s("k")) +
    op(ADD, i64(5), s("n")) + op(ADD, i64(-2), s("n")) + op(WAIT, i64(0), struct.pack(">I", 2),
    s("k"), s("n")) + op(BYE))
put("store", "get-missing-then-wait", hello(0) + op(GET, i64(0), s("nope")) +
    op(GET, i64(100), s("nope")))
put("store", "add-not-int", hello(0) + op(SET, s("t"), s("text")) + op(ADD, i64(1), s("t")) +
    op(ADD, i64(2**63 - 1), s("big")) + op(ADD, i64(1), s("big")))
put("store", "barrier", hello(0) + op(BARRIER, i64(50), s("b1")) + op(BARRIER, i64(0), s("b1")))
put("store", "primary-rank1", hello(1, flags=0) + op(SET, s("x"), s("1")) + op(BYE))
put("store", "wrong-world", hello(0, world=3))
put("store", "wrong-version", hello(0, ver=9))
put("store", "bad-magic", hello(0, magic=1))
put("store", "no-hello", op(SET, s("k"), s("v")))
put("store", "key-with-nul", hello(0) + op(SET, s(b"a\0b"), s("v")))
put("store", "short-frame", hello(0) + struct.pack(">I", 100) + b"\x02")
put("store", "zero-frame", hello(0) + struct.pack(">I", 0))
put("store", "wait-many", hello(0) + op(WAIT, i64(0), struct.pack(">I", 70000)))
put("store", "observer-exited", hello(0, flags=2) + op(EXITED, struct.pack(">I", 1),
    s("exited with status 0")))
put("store", "observer-bad", hello(0, flags=2) + op(EXITED, struct.pack(">I", 7), s("x")) +
    op(SET, s("k"), s("v")))
put("store", "observer-then-hello", hello(0, flags=2) + hello(0))
# flag 4: a u64 job token follows (a store made over MPI wants it; the fuzzed
# store has none, so both are refused before anything is recorded)
put("store", "hello-token", frame(struct.pack(">BIIIIIQ", HELLO, MAGIC, VERSION, 0, 2, 4,
                                              0x5EED)) + op(SET, s("k"), s("v")))
put("store", "hello-token-short", frame(struct.pack(">BIIIII", HELLO, MAGIC, VERSION, 0, 2, 5)) +
    op(SET, s("k"), s("v")))
put("store", "observer-token", frame(struct.pack(">BIIIIIQ", HELLO, MAGIC, VERSION, 0, 2, 6, 7)) +
    op(EXITED, struct.pack(">I", 1), s("x")))
sys.exit(0)
