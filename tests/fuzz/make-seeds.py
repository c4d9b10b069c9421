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
# ---- import: "accelerate\n" + Accelerate YAML, else a DeepSpeed JSON config --
datadir = os.path.join(ROOT, "tests", "data")
for fn in sorted(os.listdir(datadir)):
    with open(os.path.join(datadir, fn), "rb") as f:
        body = f.read()
    if fn.startswith("accelerate-") and fn.endswith(".yaml"):
        put("import", "data-" + fn[:-5], b"accelerate\n" + body)
    elif fn.startswith("ds-") and fn.endswith(".json"):
        put("import", "data-" + fn[:-5], body)
put("import", "ds-all-keys", json.dumps({
    "gradient_accumulation_steps": "auto", "gradient_clipping": 1.0,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 12, "hysteresis": 3,
             "loss_scale_window": 500, "min_loss_scale": 2, "auto_cast": True, "x": 1},
    "bf16": {"enabled": False},
    "optimizer": {"type": "Adam", "params": {"lr": "auto", "betas": [0.9, 0.99], "eps": 1e-8,
                                             "weight_decay": 0.01, "adam_w_mode": True,
                                             "torch_adam": True}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 10,
                                                       "total_num_steps": "auto",
                                                       "warmup_max_lr": 0.002,
                                                       "cos_min_ratio": 0.1,
                                                       "warmup_type": "log"}},
    "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
                                                        "nvme_path": "/tmp"},
                          "overlap_comm": "auto", "unknown_zero_key": [1, {"a": None}]},
    "aio": {"block_size": 1048576, "queue_depth": 8},
    "train_batch_size": 32, "wall_clock_breakdown": False}, indent=1))
put("import", "ds-static-scale", '{"fp16": {"enabled": true, "loss_scale": 128, '
    '"hysteresis": 2}, "optimizer": {"type": "SGD", "params": {"momentum": 0.9, '
    '"weight_decay": "auto", "nesterov": true}}}')
put("import", "ds-both-precisions", '{"fp16": {"enabled": true}, "bf16": {"enabled": true}}')
put("import", "ds-bad-types", 'deepspeed\n{"fp16": 1, "optimizer": [], "scheduler": "x", '
    '"zero_optimization": {"stage": "auto"}, "aio": 3, "gradient_clipping": "big", '
    '"fp16": {"enabled": "maybe"}}')
put("import", "ds-duplicate-key", '{"gradient_clipping": 1, "gradient_clipping": 2}')
put("import", "ds-not-object", "[1, 2]")
put("import", "ds-bad-json", '{"zero_optimization": {"stage": 2,')
put("import", "ds-empty", "")
put("import", "acc-fsdp-ints", "accelerate\ndistributed_type: FSDP\nmixed_precision: fp8\n"
    "num_processes: 8\nnum_machines: 2\nmachine_rank: 1\nmain_process_ip: 10.0.0.1\n"
    "main_process_port: 29500\nfsdp_config:\n  fsdp_sharding_strategy: 2\n"
    "  fsdp_transformer_layer_cls_to_wrap: [Block, Attn, 3]\n  fsdp_offload_params: yes\n"
    "  fsdp_version: 2\n  other: ~\n  fsdp_unknown: auto\ngpu_ids: 0,1\n"
    "use_cpu: no\ndowncast_bf16: off\n")
put("import", "acc-deepspeed-inline", "accelerate\ndistributed_type: DEEPSPEED\n"
    "deepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: cpu\n"
    "  gradient_accumulation_steps: auto\n  gradient_clipping: 0\n"
    "  zero3_save_16bit_model: true\n  extra: [1, 2]\nnum_processes: 3\nnum_machines: 2\n")
put("import", "acc-deepspeed-file", "accelerate\ndistributed_type: DEEPSPEED\n"
    "deepspeed_config:\n  deepspeed_config_file: no-such-ds.json\n  zero_stage: 7\n")
put("import", "acc-anchors", "accelerate\nbase: &b {mixed_precision: bf16, n: 1.5e3}\n"
    "copy: *b\nlist: &l [1, -2, .5, 0x10, '3', \"x\\ty\", ~, null, True]\nagain: *l\n")
# aliases that double at each level: refused, not expanded 2^30 times
laughs = "accelerate\na0: &a0 [x, x]\n" + "".join(
    "a%d: &a%d [*a%d, *a%d]\n" % (i, i, i - 1, i - 1) for i in range(1, 31))
put("import", "acc-alias-bomb", laughs)
put("import", "acc-deep", "accelerate\nk: " + "[" * 100 + "]" * 100 + "\n")
put("import", "acc-self-alias", "accelerate\na: &a [*a, *a]\n")
put("import", "acc-bad-yaml", "accelerate\na: [1, 2\n")
put("import", "acc-list", "accelerate\n- 1\n- 2\n")
put("import", "acc-complex-key", "accelerate\n? [a, b]\n: 1\n")
put("import", "acc-empty", "accelerate\n")
put("import", "acc-two-docs", "accelerate\na: 1\n---\nb: 2\n")

# ---- tokens: the GPT-2 example's token file (docs/data.md) ---------------------


def tok(tokens, vocab=256, magic=b"ACCELTOK", version=1, n=None, extra=b""):
    n = len(tokens) if n is None else n
    return (magic + struct.pack("<IIQ", version, vocab, n) +
            struct.pack("<%dH" % len(tokens), *tokens) + extra)


put("tokens", "bytes", tok(list(b"hello, token file\n" * 8)))
put("tokens", "gpt2-vocab", tok([0, 50256, 1, 50255, 464, 3290] * 20, vocab=50257))
put("tokens", "max-vocab", tok([65535, 0, 32768], vocab=65536))
put("tokens", "empty", tok([]))
put("tokens", "one", tok([7]))
put("tokens", "token-at-vocab", tok([1, 2, 256, 3], vocab=256))
put("tokens", "vocab-1", tok([0, 0], vocab=1))
put("tokens", "vocab-too-big", tok([0, 1], vocab=65537))
put("tokens", "version-2", tok([0, 1], version=2))
put("tokens", "bad-magic", tok([0, 1], magic=b"ACCELTOX"))
put("tokens", "count-too-big", tok([0, 1], n=3))
put("tokens", "count-huge", tok([0, 1], n=2**63 + 1))
put("tokens", "count-wraps", tok([0, 1], n=2**63))
put("tokens", "odd-size", tok([0, 1], extra=b"\x00"))
put("tokens", "short-header", b"ACCELTOK\x01\x00")

# ---- elf: a plugin file for the loader's pre-check -----------------------------
EM_X86_64, ET_DYN, ET_EXEC, PT_LOAD, PT_DYNAMIC = 62, 3, 2, 1, 2


def elf(etype=ET_DYN, machine=EM_X86_64, cls=2, phoff=64, phnum=2, phentsize=56,
        shoff=0, shnum=0, shentsize=64, segs=None, size=None):
    """A little-endian ELF64 header + program headers (+ zero bytes to size)."""
    ident = b"\x7fELF" + bytes([cls, 1, 1]) + bytes(9)
    eh = ident + struct.pack("<HHIQQQIHHHHHH", etype, machine, 1, 0, phoff, shoff, 0, 64,
                             phentsize, phnum, shentsize, shnum, 0)
    if segs is None:
        segs = [(PT_LOAD, 0, 512), (PT_DYNAMIC, 256, 64)]
    ph = b"".join(struct.pack("<IIQQQQQQ", t, 5, off, off, off, fsz, fsz, 4096)
                  for t, off, fsz in segs)
    # program headers where phoff says, unless that is past any file
    body = eh + (bytes(max(0, phoff - len(eh))) + ph if phoff < 4096 else ph)
    size = 512 if size is None else size
    return body + bytes(max(0, size - len(body)))


put("elf", "minimal-so", elf())
put("elf", "with-sections", elf(shoff=512, shnum=2, size=640))
put("elf", "executable", elf(etype=ET_EXEC))
put("elf", "object", elf(etype=1))
put("elf", "other-machine", elf(machine=183))
put("elf", "class32", elf(cls=1))
put("elf", "class-bad", elf(cls=9))
put("elf", "no-phdrs", elf(phnum=0))
put("elf", "phentsize-bad", elf(phentsize=32))
put("elf", "phdrs-past-end", elf(phoff=500))
put("elf", "segment-past-end", elf(segs=[(PT_LOAD, 0, 4096)]))
put("elf", "sections-past-end", elf(shoff=480, shnum=4))
# offsets near 2^64: offset + size wraps to a small number, which must not
# pass as inside the file
put("elf", "segment-offset-wraps", elf(segs=[(PT_LOAD, 2**64 - 16, 32)]))
put("elf", "phoff-wraps", elf(phoff=2**64 - 56, phnum=2))
put("elf", "sections-wrap", elf(shoff=2**64 - 64, shnum=2))
put("elf", "truncated-header", elf()[:40])
put("elf", "magic-only", b"\x7fELF")
put("elf", "text", "#!/bin/sh\necho not a plugin\n")
put("elf", "empty", b"")
sys.exit(0)
