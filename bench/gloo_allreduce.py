#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The PyTorch gloo peer of `accel bench comm`.

Starts WORLD processes (torch.multiprocessing), joins them in a gloo process
group over TCP on 127.0.0.1, and times torch.distributed collectives the way
`accel bench comm` times accel's (see cli/comm-bench.h): sizes doubling
from --min-bytes to --max-bytes, `warmup` untimed calls, then `iters` timed
calls; time = median call of the slowest rank; algbw = bytes / time;
busbw = algbw x (2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and
all-gather, 1 for broadcast).  One JSON line per size, same keys as the C
benches, with "backend":"gloo".

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/gloo_allreduce.py --world 2 \\
        --op allreduce --max-bytes 64M --json

gloo has no reduce-scatter in some PyTorch versions; such an op is reported
on stderr and skipped.  torch's all_reduce works in place only.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

OPS = ["allreduce", "reduce_scatter", "allgather", "broadcast"]


def parse_bytes(s):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = s.strip().upper().rstrip("B").rstrip("I")
    num = t.rstrip("KMG")
    unit = t[len(num):]
    if not num.isdigit() or unit not in units:
        raise argparse.ArgumentTypeError("not a size: %r (use 8, 64K, 256M, 1G)" % s)
    return int(num) * units[unit]


def bus_factor(op, n):
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("reduce_scatter", "allgather"):
        return (n - 1) / n
    return 1.0


def counts(op, nbytes, elem, world):
    n = nbytes // elem
    if op in ("reduce_scatter", "allgather"):
        per = n // world
        return (per, per * world * elem) if per else (0, 0)
    return (n, n * elem) if n else (0, 0)


def values(torch, dtype, rank, n, offset=0):
    i = torch.arange(offset, offset + n, dtype=torch.int64)
    return ((i % 5) + (rank % 3)).to(dtype)


def expected(torch, dtype, op, rank, world, count):
    if op == "allreduce":
        return sum(values(torch, torch.float64, r, count) for r in range(world)).to(dtype)
    if op == "reduce_scatter":
        return sum(values(torch, torch.float64, r, count, rank * count)
                   for r in range(world)).to(dtype)
    if op == "allgather":
        return torch.cat([values(torch, dtype, r, count) for r in range(world)])
    return values(torch, dtype, 0, count)


def worker(rank, world, port, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dtypes = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
              "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64}
    dtype = dtypes[args.dtype]
    elem = torch.empty(0, dtype=dtype).element_size()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=world)
    host = socket.gethostname()
    ops = OPS if args.op == "all" else [args.op]
    status = 0
    if rank == 0 and not args.json:
        print("# comm benchmark: backend gloo (torch %s), user buffers, %d ranks, host %s"
              % (torch.__version__, world, host))
        print("# %-14s %12s %12s %5s %12s %12s %10s %10s %6s"
              % ("op", "bytes", "count", "type", "time(us)", "mean(us)", "algbw", "busbw",
                 "check"))
    for op in ops:
        b = args.min_bytes
        while b <= args.max_bytes:
            count, nbytes = counts(op, b, elem, world)
            b *= 2
            if not count:
                continue
            if op == "allreduce":
                # torch's all-reduce is in place only: the timed calls
                # reduce the previous result again; the checked call below
                # starts from the input.
                buf = values(torch, dtype, rank, count)
                src = buf.clone()

                def call():
                    dist.all_reduce(buf)

                def reset():
                    buf.copy_(src)
                out = buf
            elif op == "reduce_scatter":
                inp = values(torch, dtype, rank, count * world)
                out = torch.empty(count, dtype=dtype)

                def call():
                    dist.reduce_scatter_tensor(out, inp)
            elif op == "allgather":
                inp = values(torch, dtype, rank, count)
                out = torch.empty(count * world, dtype=dtype)
                outs = list(out.chunk(world))

                def call():
                    dist.all_gather(outs, inp)
            else:
                out = values(torch, dtype, rank, count)

                def call():
                    dist.broadcast(out, src=0)
            try:
                for _ in range(args.warmup):
                    call()
            except (RuntimeError, ValueError) as e:
                if rank == 0:
                    print("gloo_allreduce: %s is not supported by gloo here (%s); skipped"
                          % (op, str(e).splitlines()[0]), file=sys.stderr)
                break
            times = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1e6)
            t = torch.tensor([statistics.median(times), statistics.mean(times)],
                             dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if op == "allreduce":
                reset()
                call()
            ok = 1 if torch.equal(out, expected(torch, dtype, op, rank, world, count)) else -1
            okt = torch.tensor([ok], dtype=torch.int32)
            dist.all_reduce(okt, op=dist.ReduceOp.MIN)
            if okt.item() < 0:
                status = 1
            med, mean = t[0].item(), t[1].item()
            alg = nbytes / (med * 1e-6) / 1e9
            row = {"bench": "comm", "op": op, "dtype": args.dtype, "bytes": nbytes,
                   "count": count, "time_us": round(med, 3), "mean_us": round(mean, 3),
                   "algbw_GBps": round(alg, 4),
                   "busbw_GBps": round(alg * bus_factor(op, world), 4),
                   "world": world, "backend": "gloo", "buffers": "user",
                   "iters": args.iters, "check": "ok" if okt.item() > 0 else "WRONG",
                   "inplace": op in ("allreduce", "broadcast"), "host": host}
            if rank == 0:
                if args.json:
                    print(json.dumps(row, separators=(",", ":")), flush=True)
                else:
                    print("  %-14s %12d %12d %5s %12.2f %12.2f %10.3f %10.3f %6s"
                          % (op, nbytes, count, args.dtype, med, mean, alg,
                             row["busbw_GBps"], row["check"]), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if status:
        sys.exit(status)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2, help="processes (default 2)")
    p.add_argument("--op", choices=OPS + ["all"], default="allreduce")
    p.add_argument("--dtype", choices=["f32", "f64", "f16", "bf16", "i32", "i64"],
                   default="f32")
    p.add_argument("--min-bytes", type=parse_bytes, default=8)
    p.add_argument("--max-bytes", type=parse_bytes, default=256 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = p.parse_args()
    if args.world < 1 or args.iters < 1 or args.warmup < 0 or args.min_bytes < 1:
        p.error("--world and --iters must be >= 1, --warmup >= 0, --min-bytes >= 1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch.multiprocessing as mp
    except ImportError as e:
        print("gloo_allreduce: PyTorch is not installed for %s (%s); install python3-torch"
              % (sys.executable, e), file=sys.stderr)
        return 2
    mp.start_processes(worker, args=(args.world, free_port(), args), nprocs=args.world,
                       join=True, start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
