#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The PyTorch peer of bench-optim-cuda: torch.optim.AdamW(fused=True) on N
f32 parameters in T tensors on the first CUDA device, and the device copy
bandwidth torch gets (Tensor.copy_) in the same process.

Same method as bench/optim-cuda.c: a timed batch is --steps steps followed
by one torch.cuda.synchronize(); the result is the fastest batch of
--rounds rounds, in ms per step.  One JSON line per result, the keys of
bench-optim-cuda's.  Exit 77 without torch or without a GPU.

    python3 bench/torch_adamw_cuda.py --n 100000000 --tensors 100
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000_000)
    ap.add_argument("--tensors", type=int, default=100)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--machine", default=None)
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"skipped: no torch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("skipped: no GPU (torch.cuda.is_available() is False)")
        return 77
    dev = torch.device("cuda", 0)
    mach = a.machine or torch.cuda.get_device_name(0)
    sizes = [a.n // a.tensors + (1 if i < a.n % a.tensors else 0) for i in range(a.tensors)]
    params = []
    for k in sizes:
        p = torch.full((k,), 0.5, device=dev, requires_grad=True)
        p.grad = torch.full((k,), 0.01, device=dev)
        params.append(p)
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
    cbytes = max(256 << 20, a.n * 4)
    ca = torch.zeros(cbytes, dtype=torch.uint8, device=dev)
    cb = torch.empty_like(ca)
    opt.step()
    cb.copy_(ca)
    torch.cuda.synchronize()
    best_step = best_copy = float("inf")
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            opt.step()
        torch.cuda.synchronize()
        best_step = min(best_step, (time.perf_counter() - t0) / a.steps)
        t0 = time.perf_counter()
        for s in range(a.steps):
            (ca if s & 1 else cb).copy_(cb if s & 1 else ca)
        torch.cuda.synchronize()
        best_copy = min(best_copy, (time.perf_counter() - t0) / a.steps)
    common = {"bench": "optim-cuda", "machine": mach, "torch": torch.__version__}
    print(json.dumps(dict(common, impl="torch", op="adamw", fused=True, n=a.n,
                          tensors=a.tensors, grad_dtype="f32", steps=a.steps,
                          rounds=a.rounds, time_ms=round(best_step * 1e3, 4),
                          gparam_s=round(a.n / best_step / 1e9, 3), bytes_per_param=28,
                          GBps=round(28 * a.n / best_step / 1e9, 1)),
                     separators=(",", ":")))
    print(json.dumps(dict(common, impl="torch", op="d2d-copy", bytes=cbytes, steps=a.steps,
                          rounds=a.rounds, time_ms=round(best_copy * 1e3, 4),
                          GBps=round(2 * cbytes / best_copy / 1e9, 1), counts="read+write"),
                     separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
