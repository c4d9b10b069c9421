#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/torch_ddp_mlp.py: the PyTorch peer of examples/train_mlp.

The same model and step as `accel launch -n N -- train_mlp`: an MLP
784-1024-1024-10 (torch.nn.Linear layers, ReLU between them), mean softmax
cross-entropy over each rank's samples, AdamW (lr 1e-3, betas (0.9, 0.999),
eps 1e-8, weight_decay 0.01: torch's defaults and accel's), wrapped in
DistributedDataParallel over the gloo backend (default buckets, 25 MiB), one
process per rank on this machine, each limited to one thread.

Data are synthetic (random inputs and labels, a few batches generated up front
and cycled), since the speed of a step does not depend on the values.  After
--warmup untimed steps, every one of --steps steps is timed on rank 0 (the
ranks run in lock-step: backward waits for the gradient all-reduce).  Prints
one JSON line:

  {"bench":"train_mlp","impl":"pytorch-ddp","world":2,"batch_per_rank":128,
   "steps":..,"ms_per_step":..,"ms_per_step_median":..,"samples_per_s":..,
   "cpu_ms_per_step":..,"ms_fwd_bwd":..,"ms_optimizer":..,"host":..}

ms_per_step is the mean over the timed steps (wall time / steps);
samples_per_s counts the global batch (world * batch_per_rank) per second;
cpu_ms_per_step is rank 0's process CPU time (all its threads) per step.
ms_fwd_bwd and ms_optimizer split the mean step into forward+backward
(including DDP's all-reduce, which backward waits for) and optimizer.step().

Usage: bench/torch_ddp_mlp.py [--world 2] [--batch 128] [--steps 100]
           [--warmup 10] [--hidden 1024] [--layers 2] [--inputs 784]
           [--classes 10] [--threads 1]
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2, help="ranks (processes)")
    ap.add_argument("--batch", type=int, default=128, help="samples per rank per step")
    ap.add_argument("--steps", type=int, default=100, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2, help="hidden layers")
    ap.add_argument("--inputs", type=int, default=784)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--foreach", choices=("default", "true", "false"), default="default",
                    help="torch.optim.AdamW's foreach (default: torch's choice)")
    a = ap.parse_args()
    for k in ("world", "batch", "steps", "hidden", "inputs", "classes", "threads"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be >= 1")
    if a.warmup < 0 or a.layers < 0 or a.classes < 2:
        ap.error("--warmup and --layers must be >= 0, --classes >= 2")
    return a


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port, queue):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(1234)            # same initial model on every rank

    dims = [a.inputs] + [a.hidden] * a.layers + [a.classes]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    model = DDP(nn.Sequential(*layers))
    foreach = {"default": None, "true": True, "false": False}[a.foreach]
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=foreach)

    g = torch.Generator().manual_seed(100 + rank)
    n_batches = 8
    xs = [torch.randn(a.batch, a.inputs, generator=g) for _ in range(n_batches)]
    ys = [torch.randint(0, a.classes, (a.batch,), generator=g) for _ in range(n_batches)]

    def step(k, times):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[k % n_batches]), ys[k % n_batches])
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        if times is not None:
            times.append((t2 - t0, t1 - t0, t2 - t1))
        return loss

    for k in range(a.warmup):
        step(k, None)
    dist.barrier()
    times = []
    start, cpu0 = time.perf_counter(), time.process_time()
    for k in range(a.steps):
        loss = step(a.warmup + k, times)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    final_loss = float(loss)
    dist.barrier()
    if rank == 0:
        ms = 1e3 * elapsed / a.steps
        queue.put({
            "bench": "train_mlp",
            "impl": "pytorch-ddp",
            "world": a.world,
            "batch_per_rank": a.batch,
            "dims": "-".join(map(str, dims)),
            "steps": a.steps,
            "warmup": a.warmup,
            "ms_per_step": round(ms, 3),
            "ms_per_step_median": round(1e3 * statistics.median(t[0] for t in times), 3),
            "samples_per_s": round(a.world * a.batch / (ms / 1e3), 1),
            "cpu_ms_per_step": round(1e3 * cpu / a.steps, 3),
            "ms_fwd_bwd": round(1e3 * statistics.mean(t[1] for t in times), 3),
            "ms_optimizer": round(1e3 * statistics.mean(t[2] for t in times), 3),
            "loss": round(final_loss, 4),
            "threads": a.threads,
            "foreach": a.foreach,
            "torch": torch.__version__,
            "host": socket.gethostname(),
        })
    dist.destroy_process_group()


def main():
    a = parse()
    # Before torch is imported anywhere: one OpenMP thread per process (the
    # machine runs one rank per core; more threads oversubscribe it).
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, a, port, queue)) for r in range(a.world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [r for r, p in enumerate(procs) if p.exitcode != 0]
    if bad:
        print(f"torch_ddp_mlp: rank(s) {bad} failed", file=sys.stderr)
        return 1
    print(json.dumps(queue.get()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
