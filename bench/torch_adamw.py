#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The PyTorch peer of bench-optim: torch.optim.AdamW stepping one f32
parameter of N elements on T threads (torch.set_num_threads(T)).

Same method as bench/optim.c: every step() is timed on its own for
--min-time seconds per round, foreach=False and foreach=True take turns for
--rounds rounds; a result is the fastest step with the median alongside.
Gradients are f32 and fixed (set once), the hyper-parameters torch's
defaults.  One JSON line per variant, the keys of bench-optim's.

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_adamw.py --n 16777216 --threads 2
"""
import argparse
import json
import statistics
import sys
import time


def machine():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16 << 20)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch.set_num_threads (set OMP_NUM_THREADS to the same)")
    ap.add_argument("--foreach", choices=["both", "false", "true"], default="both")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_adamw: no torch ({e})", file=sys.stderr)
        return 77
    if a.threads < 1:
        print("torch_adamw: --threads must be at least 1, not %d" % a.threads, file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    variants = {"both": [False, True], "false": [False], "true": [True]}[a.foreach]
    gen = torch.Generator().manual_seed(12345)
    state = {}
    for fe in variants:
        p = (torch.rand(a.n, generator=gen) - 0.5).requires_grad_()
        p.grad = 0.01 * (torch.rand(a.n, generator=gen) - 0.5)
        opt = torch.optim.AdamW([p], foreach=fe)
        opt.step()                      # state allocated, pages touched
        state[fe] = (p, opt, [])
    for _ in range(a.rounds):
        for fe in variants:
            p, opt, times = state[fe]
            end = time.perf_counter() + a.min_time
            calls = 0
            while time.perf_counter() < end or calls < 3:
                t0 = time.perf_counter()
                opt.step()
                times.append(time.perf_counter() - t0)
                calls += 1
    mach = machine()
    for fe in variants:
        times = state[fe][2]
        tmin = min(times)
        print(json.dumps({
            "bench": "optim", "impl": "torch", "op": "adamw", "machine": mach,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "foreach": fe, "grad_dtype": "f32", "n": a.n, "calls": len(times),
            "time_ms": round(tmin * 1e3, 3),
            "time_ms_median": round(statistics.median(times) * 1e3, 3),
            "gparam_s": round(a.n / tmin / 1e9, 4), "bytes_per_param": 28,
            "GBps": round(28 * a.n / tmin / 1e9, 3)}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
