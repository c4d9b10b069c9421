#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A checkpoint holds the training state's values and is readable by
PyTorch (docs/checkpoints.md).

Usage: checkpoint_check.py TRAIN_MLP

Trains examples/train_mlp (AdamW, a linear warm-up schedule, no shuffling)
for 6 steps with --checkpoint-every 6 and --save-final, then reads
CHECKPOINT/model.safetensors by the format's rules with nothing but json +
struct (every "param/<name>" tensor must hold the final weights' bytes,
dtype and shape), and with torch: torch.frombuffer on those bytes and,
when the `safetensors` package is importable, safetensors.torch.load_file,
each equal to the final weights.  The manifest's size for the file is
checked, and its XXH64 with the `xxhash` package when importable.

Values, not only a round trip: the manifest's step is 6 and micro_step 0;
rank0.safetensors' master weights are the final weights bit for bit, and
its AdamW moments (optim/exp_avg/, optim/exp_avg_sq/) are, within
rounding, the moments of torch.optim.AdamW after the same 6 steps from the
same initial weights and batches (a checkpoint of zeros, or of the moments
of another step, fails); and a run resumed from the checkpoint to step 12
ends bitwise equal to an uninterrupted 12-step run (a load that drops the
step, the moments or the schedule's position does not).

Exit status: 0 pass, 1 fail, 77 skipped (no torch; the json + struct
checks have then passed).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

LR, STEPS, BATCH, SAMPLES = 0.01, 6, 16, 64
# The moments against torch.optim.AdamW: largest |difference| over the
# tensor's largest |value|; observed 1.87e-7 (exp_avg_sq/fc0.weight).
TOL_MOMENTS = 5e-7
ARGS = ["--hidden", "16", "--layers", "2", "--samples", str(SAMPLES), "--batch-size",
        str(BATCH), "--no-eval", "--test-samples", "0", "--no-shuffle", "--lr", str(LR),
        "--set", "optimizer.type=adamw", "--set", "scheduler.type=linear",
        "--set", "scheduler.warmup_steps=2", "--set", "scheduler.total_steps=12"]


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


def train(exe, *extra):
    r = subprocess.run([exe, *ARGS, *extra], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        print("FAIL: train_mlp", " ".join(extra), "exited", r.returncode)
    return r


def torch_moments(torch, d):
    """torch.optim.AdamW's exp_avg and exp_avg_sq after STEPS steps of the
    run whose --save-init files are in d (a linear warm-up over 2 steps from
    0, then linear decay to 0 at step 12: get_linear_schedule_with_warmup)."""
    def load(path):
        return {k: to_torch(torch, v) if v[0] != "I64" else
                torch.frombuffer(bytearray(v[2]), dtype=torch.int64).reshape(v[1])
                for k, v in read_st(path).items()}
    p = load(os.path.join(d, "init.safetensors"))
    data = load(os.path.join(d, "data.safetensors"))
    x, y = data["x"], data["y"]
    n_layers = len(p) // 2
    layers = []
    for l in range(n_layers):
        w = p[f"fc{l}.weight"]
        m = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            m.weight.copy_(w)
            m.bias.copy_(p[f"fc{l}.bias"])
        layers.append(m)
    params = {f"fc{l}.{n}": getattr(m, n) for l, m in enumerate(layers)
              for n in ("weight", "bias")}
    opt = torch.optim.AdamW(list(params.values()), lr=LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: k / 2 if k < 2 else max(0.0, (12 - k) / 10))
    per_epoch = -(-SAMPLES // BATCH)
    for k in range(STEPS):
        start = (k % per_epoch) * BATCH
        idx = torch.arange(start, start + BATCH) % SAMPLES
        h = x[idx]
        for l, m in enumerate(layers):
            h = m(h)
            if l < n_layers - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return {f"optim/{s}/{k}": opt.state[q][s] for k, q in params.items()
            for s in ("exp_avg", "exp_avg_sq")}


def main():
    exe = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        if train(exe, "--steps", "6", "--checkpoint-every", "6", "--project-dir",
                 os.path.join(tmp, "p"), "--save-init", os.path.join(tmp, "init"),
                 "--save-final", os.path.join(tmp, "final.st")).returncode != 0:
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
        if man.get("step") != 6 or man.get("micro_step") != 0:
            print(f"FAIL: manifest step {man.get('step')!r}, micro_step "
                  f"{man.get('micro_step')!r}; expected 6 and 0")
            return 1
        # rank 0 of one process holds every master and optimizer tensor
        state = read_st(os.path.join(ckpt, "rank0.safetensors"))
        for k, v in final.items():
            m = state.get("master/" + k)
            if m is None or m != v:
                print(f"FAIL: rank0.safetensors: master/{k} is not the final weights")
                return 1
        moments = sorted(f"optim/{s}/{k}" for k in final for s in ("exp_avg", "exp_avg_sq"))
        if [k for k in moments if k not in state]:
            print(f"FAIL: rank0.safetensors lacks {[k for k in moments if k not in state]}")
            return 1
        # resumed at step 6 to step 12 == 12 steps straight, bit for bit
        if (train(exe, "--steps", "12", "--save-final", os.path.join(tmp, "straight.st"))
                .returncode != 0):
            return 1
        r = train(exe, "--steps", "12", "--resume", ckpt, "--save-final",
                  os.path.join(tmp, "resumed.st"))
        if r.returncode != 0:
            return 1
        if "trained 6 steps" not in r.stdout + r.stderr:
            print(r.stdout, r.stderr)
            print("FAIL: the resumed run did not say it trained 6 steps")
            return 1
        straight = read_st(os.path.join(tmp, "straight.st"))
        resumed = read_st(os.path.join(tmp, "resumed.st"))
        if straight != resumed:
            diff = [k for k in straight if straight[k] != resumed.get(k)]
            print(f"FAIL: resumed from step 6, the weights at step 12 differ from an "
                  f"uninterrupted run's: {diff}")
            return 1
        print(f"ok: manifest step 6; master weights; resumed to 12 bitwise equal "
              f"({len(straight)} tensors)")
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
        want_m = torch_moments(torch, os.path.join(tmp, "init"))
        for k in moments:
            got = to_torch(torch, state[k])
            ref = want_m[k]
            scale = ref.abs().max().item()
            d = (got - ref).abs().max().item() / max(scale, 1e-30)
            print(f"{k:26s} largest {scale:.3e}, |accel - torch| / largest {d:.2e}")
            if got.shape != ref.shape or not d <= TOL_MOMENTS or scale == 0:
                print(f"FAIL: rank0.safetensors: {k} is not torch.optim.AdamW's after 6 steps")
                return 1
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
