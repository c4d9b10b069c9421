#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""End-to-end check of examples/train_mlp: 1 process, 2 processes and PyTorch
agree.

Usage: parity_check.py TRAIN_MLP_EXE   (env: ACCEL_CLI = the `accel` binary,
ACCEL_PLUGIN_PATH = where the comm backends and plugins are)

Runs train_mlp for a few SGD steps without shuffling on one process and under
`accel launch -n 2`, saving the initial parameters, the data set and the
final parameters, then checks that
  - both runs start from the same parameters and data (bit for bit),
  - on 2 processes every rank ends with the same parameters as rank 0, bit
    for bit (--save-final-ranks: each rank writes its own file; comparing
    rank 0 alone would miss a rank that diverged),
  - every tensor moved from its initial value by more than MOVED_FRAC of
    its largest initial magnitude (two runs that never stepped agree),
  - their final parameters agree to rounding (the gradient of the mean over
    the global batch equals the average of the per-process means),
  - torch.nn.Linear + ReLU + cross_entropy + torch.optim.SGD, started from
    init.safetensors on data.safetensors with the same batches, ends at the
    same parameters;
  - the same with AdamW and max_grad_norm (clip_grad_norm_), at 1 and 2
    processes; the clipping is confirmed by behaviour: the weights are
    far from PyTorch's without clipping (AdamW alone hardly notices a
    gradient summed instead of averaged; clipping some steps and not
    others makes the scale count).
The files are read with json + struct + torch.frombuffer (the safetensors
package is not in Debian bookworm; the files are the format it reads).

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

STEPS, BATCH, LR, SAMPLES = 12, 64, 0.1, 600   # 600 = 9 batches + 24: epoch ends
# Largest absolute differences allowed, about 2.7 times the worst observed
# over the three BLAS builds (dnnl, openblas, blis; x86-64 with AVX2+FMA),
# where parameters are below 0.5 and one f32 ulp is up to 3e-8:
TOL_PROCS = 4e-8   # 1 vs 2 processes: observed 1.49e-8
TOL_TORCH = 8e-8   # vs PyTorch: observed 2.98e-8 (fc2.weight, openblas and blis)
TOL_ACCUM = 4e-8   # 1 step of 64 vs 2 micro-steps of 32: observed 1.49e-8
# Training moved each tensor: its largest change, over its largest initial
# magnitude, above this (observed 0.059, fc1.weight, to 0.25, fc2.bias).
MOVED_FRAC = 1e-2
NPROCS = 2
# AdamW with clipping (adamw_clip): the learning rate, a max_grad_norm
# that clips some steps but not all (PyTorch's norms 0.63 .. 1.38: 6 of 12
# steps clipped), and eps 1e-4: with torch's 1e-8, elements whose gradient
# is nearly 0 take steps of about lr whose sign is rounding (observed
# 2.1e-5 vs PyTorch), which would hide a small defect.
LR_ADAMW, MAX_NORM, EPS = 0.01, 1.0, 1e-4
TOL_ADAMW_PROCS = 4e-7   # 1 vs 2 processes: observed 1.49e-7 (fc2.weight)
TOL_ADAMW_TORCH = 8e-7   # vs PyTorch: observed 2.98e-7 (fc2.weight)
CLIP_EFFECT = 1e-3       # vs PyTorch without clipping: observed 1.3e-2 apart
ARGS = ["--steps", str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR),
        "--samples", str(SAMPLES), "--test-samples", "128", "--hidden", "48",
        "--layers", "2", "--no-shuffle", "--log-every", "4", "--seed", "7",
        "--set", "optimizer.type=sgd"]


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    dt = {"F32": torch.float32, "I64": torch.int64}
    out = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(blob[8 + n + b:8 + n + e]),
                                  dtype=dt[v["dtype"]]).reshape(v["shape"])
    return meta, out


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if r.returncode != 0:
        print(f"FAIL: {what} exited with {r.returncode}\n{r.stdout}\n{r.stderr}")
        sys.exit(1)
    print(f"--- {what}\n{r.stdout.strip()}")


def reference(d, adamw=False, max_norm=0.0, norms=None):
    """The same training in PyTorch, from the files of run d: SGD, or AdamW
    (torch's betas, LR_ADAMW, EPS; accel's weight_decay default 0.01 on
    every tensor) with torch.nn.utils.clip_grad_norm_ when max_norm > 0.  The
    gradient norm before clipping of each step goes to norms."""
    _, p = load(os.path.join(d, "init.safetensors"))
    _, data = load(os.path.join(d, "data.safetensors"))
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
    params = [q for m in layers for q in m.parameters()]
    if adamw:
        opt = torch.optim.AdamW(params, lr=LR_ADAMW, eps=EPS, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(params, lr=LR)
    # Without shuffling an epoch is 0..N-1; the last global batch of an epoch
    # is filled up with the epoch's first samples (even_batches), and the
    # next epoch starts again at 0.
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
        if max_norm > 0:
            n = torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:
            n = torch.linalg.vector_norm(torch.stack([q.grad.norm() for q in params]))
        if norms is not None:
            norms.append(n.item())
        opt.step()
    return {f"fc{l}.{n}": getattr(m, n).detach()
            for l, m in enumerate(layers) for n in ("weight", "bias")}


def check_ranks(prefix, f2, bad):
    """Every rank's --save-final-ranks file against rank 0's, bit for bit;
    rank 0's own file against the --save-final file f2, also bit for bit."""
    ranks = []
    for r in range(NPROCS):
        path = f"{prefix}.rank{r}.safetensors"
        if not os.path.exists(path):
            bad.append(f"rank {r} wrote no {os.path.basename(path)}")
            continue
        m, fr = load(path)
        if m.get("rank") != str(r) or m.get("steps") != str(STEPS):
            bad.append(f"{os.path.basename(path)}: metadata {m}")
        ranks.append((r, fr))
    for r, fr in ranks:
        want = f2 if r == 0 else ranks[0][1]
        vs = "--save-final" if r == 0 else "rank 0"
        if sorted(fr) != sorted(want):
            bad.append(f"rank {r}: tensors {sorted(fr)}, {vs} has {sorted(want)}")
            continue
        diff = [k for k in want if not torch.equal(fr[k], want[k])]
        worst = max((fr[k] - want[k]).abs().max().item() for k in want)
        print(f"rank {r} vs {vs}: {len(want)} tensors, "
              f"{len(want) - len(diff)} bitwise equal (largest |diff| {worst:.2e})")
        for k in diff:
            n = (fr[k] != want[k]).sum().item()
            bad.append(f"rank {r}: {k} differs from {vs} in {n} of {fr[k].numel()} "
                       f"elements (largest |diff| {(fr[k] - want[k]).abs().max().item():.3g})")


def adamw_clip(exe, cli, tmp, bad):
    """AdamW with gradient clipping, 1 and 2 processes, against PyTorch.
    AdamW hardly notices a gradient off by a constant factor (gradients
    summed instead of averaged); clipping makes the scale count again, as
    long as some steps are clipped and some are not, which the PyTorch run
    confirms.  Clipping is confirmed by what it does: train_mlp's weights
    match PyTorch with clip_grad_norm_ and are far from PyTorch without."""
    args = [a for a in ARGS]
    args[args.index("--lr") + 1] = str(LR_ADAMW)
    args[args.index("optimizer.type=sgd")] = "optimizer.type=adamw"
    args += ["--set", f"max_grad_norm={MAX_NORM}", "--set", f"optimizer.params.eps={EPS}"]
    d1, d2 = os.path.join(tmp, "aw1"), os.path.join(tmp, "aw2")
    run([exe, *args, "--save-init", d1, "--save-final", os.path.join(d1, "final.safetensors")],
        "AdamW + clipping, 1 process")
    prefix = os.path.join(d2, "final")
    run([cli, "launch", "-n", str(NPROCS), "--", exe, *args, "--save-init", d2,
         "--save-final", os.path.join(d2, "final.safetensors"), "--save-final-ranks", prefix],
        f"AdamW + clipping, {NPROCS} processes")
    _, f1 = load(os.path.join(d1, "final.safetensors"))
    _, f2 = load(os.path.join(d2, "final.safetensors"))
    check_ranks(prefix, f2, bad)
    norms = []
    ref = reference(d1, adamw=True, max_norm=MAX_NORM, norms=norms)
    unclipped = reference(d1, adamw=True)
    n_clipped = sum(1 for n in norms if n > MAX_NORM)
    print(f"AdamW + clipping: PyTorch's gradient norms {min(norms):.3f} .. {max(norms):.3f}; "
          f"{n_clipped} of {STEPS} steps clipped at {MAX_NORM}")
    if not 0 < n_clipped < STEPS:
        bad.append(f"AdamW + clipping: {n_clipped} of {STEPS} steps clipped; the check needs "
                   "some clipped and some not (change MAX_NORM)")
    far = 0.0
    for k, want in ref.items():
        d12 = (f1[k] - f2[k]).abs().max().item()
        dref = (f1[k] - want).abs().max().item()
        dun = (f1[k] - unclipped[k]).abs().max().item()
        far = max(far, dun)
        print(f"{k:10s} |1p-2p| {d12:.2e}  |1p-torch| {dref:.2e}  "
              f"|1p-torch unclipped| {dun:.2e}")
        if d12 > TOL_ADAMW_PROCS:
            bad.append(f"AdamW + clipping: {k}: 1 and 2 processes differ by {d12:.3g}")
        if dref > TOL_ADAMW_TORCH:
            bad.append(f"AdamW + clipping: {k}: train_mlp and PyTorch differ by {dref:.3g}")
    if far < CLIP_EFFECT:
        bad.append(f"AdamW + clipping: train_mlp is within {far:.3g} of PyTorch without "
                   f"clipping (needs > {CLIP_EFFECT}): the clipping did nothing")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    exe = sys.argv[1]
    cli = os.environ.get("ACCEL_CLI")
    if not cli or not os.access(cli, os.X_OK):
        # not an outside prerequisite: meson test always sets it
        print("FAIL: ACCEL_CLI is not set to the accel binary (run through meson test)")
        return 1
    bad = []
    with tempfile.TemporaryDirectory(prefix="accel-mlp-") as tmp:
        d1, d2 = os.path.join(tmp, "np1"), os.path.join(tmp, "np2")
        run([exe, *ARGS, "--save-init", d1, "--save-final", os.path.join(d1, "final.safetensors")],
            "1 process")
        prefix = os.path.join(d2, "final")
        run([cli, "launch", "-n", str(NPROCS), "--", exe, *ARGS, "--save-init", d2,
             "--save-final", os.path.join(d2, "final.safetensors"),
             "--save-final-ranks", prefix], f"{NPROCS} processes")
        for f in ("init.safetensors", "data.safetensors"):
            _, a = load(os.path.join(d1, f))
            _, b = load(os.path.join(d2, f))
            for k in a:
                if not torch.equal(a[k], b[k]):
                    bad.append(f"{f}: {k} differs between 1 and 2 processes")
        meta, f1 = load(os.path.join(d1, "final.safetensors"))
        _, f2 = load(os.path.join(d2, "final.safetensors"))
        if meta.get("steps") != str(STEPS):
            bad.append(f"final metadata {meta}")
        check_ranks(prefix, f2, bad)
        _, init = load(os.path.join(d1, "init.safetensors"))
        ref = reference(d1)
        for k, want in ref.items():
            d12 = (f1[k] - f2[k]).abs().max().item()
            dref = (f1[k] - want).abs().max().item()
            moved = (f1[k] - init[k]).abs().max().item()
            frac = moved / max(init[k].abs().max().item(), 1e-30)
            print(f"{k:10s} |1p-2p| {d12:.2e}  |1p-torch| {dref:.2e}  "
                  f"(moved {moved:.2e} = {frac:.3f} of its largest initial value)")
            if d12 > TOL_PROCS:
                bad.append(f"{k}: 1 and 2 processes differ by {d12:.3g}")
            if dref > TOL_TORCH:
                bad.append(f"{k}: train_mlp and PyTorch differ by {dref:.3g}")
            if frac <= MOVED_FRAC:
                bad.append(f"{k}: did not train (moved {moved:.3g}, {frac:.3g} of its largest "
                           f"initial value, needs > {MOVED_FRAC})")
        # Gradient accumulation with the program overwriting its gradients
        # on each step's first micro-step (train_mlp uses
        # accel_set_grad_overwrite): 2 micro-steps of 32 == 1 step of 64.
        # 9 steps stay inside the first epoch (576 of 600 samples).
        a9 = [x for x in ARGS]
        a9[a9.index("--steps") + 1] = "9"
        b9 = [x for x in a9]
        b9[b9.index("--batch-size") + 1] = str(BATCH // 2)
        fa, fb = os.path.join(tmp, "b64.safetensors"), os.path.join(tmp, "acc2.safetensors")
        run([exe, *a9, "--save-final", fa], "1 process, 9 steps of 64")
        run([exe, *b9, "--set", "gradient_accumulation_steps=2", "--save-final", fb],
            "1 process, 9 steps of 2 x 32")
        _, ga = load(fa)
        _, gb = load(fb)
        for k in ga:
            d = (ga[k] - gb[k]).abs().max().item()
            print(f"{k:10s} |64 - 2x32| {d:.2e}")
            if d > TOL_ACCUM:
                bad.append(f"{k}: 1 step of 64 and 2 micro-steps of 32 differ by {d:.3g}")
        adamw_clip(exe, cli, tmp, bad)
    for b in bad:
        print("FAIL:", b)
    print("ok" if not bad else f"{len(bad)} check(s) failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
