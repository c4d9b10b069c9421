#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Charts of the benchmarks' JSON lines, as SVG files for docs/benchmarks.md.

  python3 bench/plot.py [-o DIR] [FILE.jsonl ...]

reads every JSON line of the files (default: bench/results/*.jsonl; other
lines, like the scripts' tables, are skipped) and writes into DIR (default
docs/img):

  comm-busbw.svg   bus bandwidth against message size, one panel per
                   collective and placement (all-reduce out of place and in
                   place, reduce-scatter, all-gather, broadcast), one line per
                   implementation: accel's backends (user and backend
                   buffers), Open MPI, gloo, the memory floor; from
                   {"bench":"comm",...} lines (accel bench comm,
                   bench/mpi_allreduce, bench/gloo_allreduce.py,
                   bench/memfloor).  A peer with only in-place results (gloo)
                   is drawn dashed in the out-of-place panel, as the tables
                   compare it.
  train-step.svg   ms per training step for each implementation and strategy
                   at each world size, with the range over rounds where the
                   data has one; from {"bench":"train_mlp",...} lines
                   (train_mlp --json, bench/torch_ddp_mlp.py,
                   bench/train-peers.sh's summaries).

Save the scripts' output to bench/results/NAME.jsonl (e.g. `ROUNDS=3 sh
bench/comm-peers.sh build > bench/results/comm-DATE.jsonl`) and run this
again; `make plots` does.  Needs matplotlib (Debian: python3-matplotlib).
Exit status 0, 1 when no file had a usable line, 2 on bad usage, 77 when
matplotlib is missing."""
import argparse
import glob
import json
import os
import sys

OPS = [("allreduce", False, "all-reduce"), ("allreduce", True, "all-reduce, in place"),
       ("reduce_scatter", False, "reduce-scatter"), ("allgather", False, "all-gather"),
       ("broadcast", False, "broadcast")]
NAMES = {"shm": "accel shm", "tcp": "accel tcp", "mpi": "accel mpi", "nccl": "accel nccl",
         "openmpi": "Open MPI", "gloo": "gloo", "floor": "memory floor"}


def load(paths):
    comm, train = [], []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("bench") == "comm" and "bytes" in r and "busbw_GBps" in r:
                    comm.append(r)
                elif r.get("bench") == "train_mlp" and "ms_per_step" in r and "world" in r:
                    if r.get("rank", 0) == 0:
                        train.append(r)
                elif r.get("bench") == "train_mlp-summary" and "ms_per_step" in r:
                    train.append(r)
    return comm, train


def bus_factor(op, n):
    return {"allreduce": 2.0 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "allgather": (n - 1) / n, "broadcast": 1.0}.get(op, 1.0)


def busbw(r):
    """GB/s from the time when the line has one: the printed busbw_GBps has 4
    decimals, which is 0 for the smallest sizes."""
    t = r.get("time_us")
    if t and t > 0 and r.get("world"):
        return r["bytes"] / (t * 1e-6) / 1e9 * bus_factor(r["op"], int(r["world"]))
    return r["busbw_GBps"]


def size_label(b, _pos=None):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return "%g %s" % (b / n, unit)
    return "%g B" % b


def peer_label(r):
    name = NAMES.get(r.get("backend"), r.get("backend", "?"))
    if r.get("buffers") == "backend":
        name += ", backend buffers"
    elif r.get("backend") in ("shm", "tcp", "mpi", "nccl") and r.get("buffers") == "user":
        name += ", user buffers"
    return name


def plot_comm(plt, comm, out):
    panels = [p for p in OPS if any(r["op"] == p[0] for r in comm)]
    if not panels:
        return None
    cols = 2
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(11, 3.6 * rows), squeeze=False)
    worlds = sorted({r.get("world", 0) for r in comm})
    from matplotlib.ticker import FuncFormatter, LogLocator
    # one colour per implementation in every panel
    labels = sorted({peer_label(r) for r in comm}, key=lambda l: (not l.startswith("accel"), l))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {l: cycle[i % len(cycle)] for i, l in enumerate(labels)}
    for ax, (op, inplace, title) in zip(axes.flat, panels):
        mine = [r for r in comm if r["op"] == op]
        peers = {}
        for r in mine:
            peers.setdefault(peer_label(r), []).append(r)
        for label in sorted(peers, key=lambda l: (not l.startswith("accel"), l)):
            rs = peers[label]
            same = [r for r in rs if bool(r.get("inplace")) == inplace]
            dashed = False
            if not same:
                # only the other placement: gloo's all-reduce is in place only
                if not inplace and all(r.get("inplace") for r in rs):
                    same, dashed = rs, True
                else:
                    continue
            pts = {}
            for r in same:   # the fastest where a size appears twice
                b = r["bytes"]
                pts[b] = max(pts.get(b, 0), busbw(r))
            xs = [x for x in sorted(pts) if pts[x] > 0]
            ax.plot(xs, [pts[x] for x in xs], marker="o", markersize=3,
                    linestyle="--" if dashed else "-", color=color[label],
                    label=label + (" (in place)" if dashed else ""))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=16))
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("Collectives, %s rank%s, bus bandwidth (higher is better)"
                 % ("/".join(str(w) for w in worlds), "" if worlds == [1] else "s"))
    fig.tight_layout()
    path = os.path.join(out, "comm-busbw.svg")
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path


def plot_train(plt, train, out):
    if not train:
        return None
    groups = {}
    for r in train:
        impl = r.get("impl", "?")
        strat = r.get("strategy") or ("ddp" if impl in ("accel", "pytorch-ddp") else "")
        key = impl + (" " + strat if strat and strat not in impl else "")
        groups.setdefault(key, {}).setdefault(int(r["world"]), []).append(r)
    worlds = sorted({w for g in groups.values() for w in g})
    keys = sorted(groups, key=lambda k: (not k.startswith("accel"), k))
    width = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, k in enumerate(keys):
        xs, ys, lo, hi = [], [], [], []
        for wi, w in enumerate(worlds):
            rs = groups[k].get(w)
            if not rs:
                continue
            ms = sorted(r["ms_per_step"] for r in rs)
            med = ms[len(ms) // 2]
            mn = min(r.get("ms_per_step_min", r["ms_per_step"]) for r in rs)
            mx = max(r.get("ms_per_step_max", r["ms_per_step"]) for r in rs)
            xs.append(wi + (i - (len(keys) - 1) / 2) * width)
            ys.append(med)
            lo.append(med - mn)
            hi.append(mx - med)
        bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=k)
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=2)
    ax.set_xticks(range(len(worlds)))
    ax.set_xticklabels(["%d process%s" % (w, "" if w == 1 else "es") for w in worlds])
    ax.set_ylabel("ms per training step (lower is better)")
    dims = sorted({r.get("dims", "") for r in train} - {""})
    ax.set_title("train_mlp step time%s" % (" (" + ", ".join(dims) + ")" if dims else ""))
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out, "train-step.svg")
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", default=os.path.join(here, "..", "docs", "img"),
                    help="output directory (default docs/img)")
    ap.add_argument("files", nargs="*", help="JSON-lines files (default bench/results/*.jsonl)")
    a = ap.parse_args()
    files = a.files or sorted(glob.glob(os.path.join(here, "results", "*.jsonl")))
    for f in files:
        if not os.path.isfile(f):
            ap.error("%s: no such file" % f)
    try:
        import matplotlib
        matplotlib.use("svg")
        matplotlib.rcParams["svg.hashsalt"] = "accel"   # the same input gives the same file
        matplotlib.rcParams["svg.fonttype"] = "none"    # text as text: smaller, searchable
        import matplotlib.pyplot as plt
    except ImportError:
        print("skipped: matplotlib is not installed (Debian: apt-get install "
              "python3-matplotlib)", file=sys.stderr)
        return 77
    comm, train = load(files)
    if not comm and not train:
        print("plot.py: no comm or train_mlp JSON lines in %s" % (", ".join(files) or "(none)"),
              file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    for p in (plot_comm(plt, comm, a.out), plot_train(plt, train, a.out)):
        if p:
            print("wrote", os.path.relpath(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
