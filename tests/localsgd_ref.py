# SPDX-License-Identifier: MIT
"""Reference Local SGD for tests/test-localsgd.sh, independent of accel.

Re-implements, in numpy, what `accel launch -n WORLD -- train-parity` computes
with the localsgd strategy: the model, data and per-rank batches of
tests/progs/train-parity.c, torch's SGD (momentum, weight decay) and AdamW
update rules in f32 as accel's optimizer applies them, the warm-up steps that
average gradients, and the parameter (and optionally optimizer state)
averaging every `sync_every` steps.  Starts from the initial parameters
train-parity wrote with `--steps 0` and writes each rank's final parameters
in train-parity's format, to be checked with `train-parity --compare`.

usage: localsgd_ref.py INIT OUT_PREFIX --world N --steps S --batch B
           --sync-every K [--warmup W] [--average-state] --opt sgd|adamw
           --lr LR [--momentum M] [--weight-decay WD]
"""
import argparse
import sys

import numpy as np

DIMS = [8, 16, 16, 4]
N_SAMPLES = 4096
F32 = np.float32


def read_params(path):
    """name -> flat f32 array, in file order."""
    params = {}
    with open(path) as f:
        for line in f:
            name, idx, val = line.split()
            params.setdefault(name, []).append((int(idx), float(val)))
    out = {}
    for name, items in params.items():
        items.sort()
        out[name] = np.array([v for _, v in items], dtype=F32)
    return out


def write_params(path, params):
    with open(path, "w") as f:
        for name, arr in params.items():
            for i, v in enumerate(arr):
                f.write("%s %d %.9e\n" % (name, i, float(v)))


def inputs(idx):
    i = idx[:, None].astype(np.float64)
    j = np.arange(DIMS[0], dtype=np.float64)[None, :]
    return np.sin(0.37 * i + 1.3 * j) + 0.25 * np.cos(0.11 * i * (j + 1))


def targets(x):
    o = np.arange(DIMS[-1], dtype=np.float64)
    j = np.arange(DIMS[0], dtype=np.float64)
    w = np.sin(0.5 * (o[:, None] + 1) + j[None, :])
    return np.tanh(x @ w.T) + 0.1 * o[None, :]


def grads(p, first, n):
    """f32 gradients of the batch-mean loss 0.5 |y - t|^2 over samples
    [first, first + n), computed in double like train-parity."""
    x = inputs(np.arange(first, first + n))
    acts = [x]
    for l in range(3):
        W = p["fc%d.weight" % (l + 1)].astype(np.float64).reshape(DIMS[l + 1], DIMS[l])
        b = p["fc%d.bias" % (l + 1)].astype(np.float64)
        z = acts[-1] @ W.T + b
        acts.append(np.tanh(z) if l < 2 else z)
    d = (acts[-1] - targets(x)) / n
    g = {}
    for l in range(2, -1, -1):
        W = p["fc%d.weight" % (l + 1)].astype(np.float64).reshape(DIMS[l + 1], DIMS[l])
        g["fc%d.weight" % (l + 1)] = (d.T @ acts[l]).astype(F32).ravel()
        g["fc%d.bias" % (l + 1)] = d.sum(axis=0).astype(F32)
        if l > 0:
            d = (d @ W) * (1 - acts[l] ** 2)
    return g


def sgd(w, g, st, a, step):
    g = g.astype(np.float64)
    if a.weight_decay:
        g = g + a.weight_decay * w.astype(np.float64)
    if a.momentum:
        buf = g.astype(F32) if step == 1 else (a.momentum * st[0].astype(np.float64) + g).astype(F32)
        st[0] = buf
        g = buf.astype(np.float64)
    return (w.astype(np.float64) - a.lr * g).astype(F32)


def adamw(w, g, st, a, step):
    b1, b2, eps = 0.9, 0.999, 1e-8
    bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
    g = g.astype(np.float64)
    w = (w.astype(np.float64) * (1 - a.lr * a.weight_decay)).astype(F32)
    st[0] = (b1 * st[0].astype(np.float64) + (1 - b1) * g).astype(F32)
    st[1] = (b2 * st[1].astype(np.float64) + (1 - b2) * g * g).astype(F32)
    denom = np.sqrt(st[1].astype(np.float64)) / np.sqrt(bc2) + eps
    return (w.astype(np.float64) - a.lr / bc1 * st[0].astype(np.float64) / denom).astype(F32)


def mean_f32(arrays):
    total = arrays[0].astype(F32)
    for x in arrays[1:]:
        total = (total + x).astype(F32)
    return (total / F32(len(arrays))).astype(F32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("init")
    ap.add_argument("out")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--sync-every", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--average-state", action="store_true")
    ap.add_argument("--opt", choices=["sgd", "adamw"], required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--weight-decay", type=float, default=None)
    a = ap.parse_args()
    if a.weight_decay is None:
        a.weight_decay = 0.01 if a.opt == "adamw" else 0.0
    n_state = 2 if a.opt == "adamw" else (1 if a.momentum else 0)
    update = adamw if a.opt == "adamw" else sgd

    init = read_params(a.init)
    P = [{k: v.copy() for k, v in init.items()} for _ in range(a.world)]
    S = [{k: [np.zeros_like(v) for _ in range(n_state)] for k, v in init.items()}
         for _ in range(a.world)]
    micro = a.batch // a.world
    for step in range(1, a.steps + 1):
        G = [grads(P[r], (((step - 1) * a.batch) + r * micro) % (N_SAMPLES - 64), micro)
             for r in range(a.world)]
        if step <= a.warmup:
            # reduce_bucket: pre-divided by the world size, then summed.
            for k in init:
                parts = [(G[r][k] * F32(1.0 / a.world)).astype(F32) for r in range(a.world)]
                total = parts[0]
                for x in parts[1:]:
                    total = (total + x).astype(F32)
                for r in range(a.world):
                    G[r][k] = total.copy()
        for r in range(a.world):
            for k in init:
                P[r][k] = update(P[r][k], G[r][k], S[r][k], a, step)
        if step > a.warmup and (step - a.warmup) % a.sync_every == 0:
            for k in init:
                m = mean_f32([P[r][k] for r in range(a.world)])
                for r in range(a.world):
                    P[r][k] = m.copy()
                if a.average_state:
                    for s in range(n_state):
                        m = mean_f32([S[r][k][s] for r in range(a.world)])
                        for r in range(a.world):
                            S[r][k][s] = m.copy()
    for r in range(a.world):
        write_params("%s.%d" % (a.out, r), P[r])
    return 0


if __name__ == "__main__":
    sys.exit(main())
