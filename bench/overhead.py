#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/overhead.py: what accel itself costs per training step, from profiles
of examples/train_mlp (run by bench/overhead.sh; docs/benchmarks.md, section
train_mlp, explains the method).

Every cost of a step is put in one of four classes:

  comm       the comm backend (its shared object, e.g. comm-shm.so, including
             its thread, its waits and what it calls)
  optimizer  the optimizer arithmetic (functions named with --optim-func)
  accel      everything else done inside accel's own objects (libaccel and
             the plugins, e.g. ddp.so), with what they call in libc/libm:
             unit hooks, bucket bookkeeping, gradient statistics, zeroing,
             step logic, sampler, parameter lookups, argument checks, ...
  program    the rest: the program's own math (GEMMs in the BLAS, loss,
             data loading), its libc calls, the dynamic loader, ...

The "accel" share is the framework overhead; it is also split into
accel_ops (the element-wise passes over whole gradient buffers, functions
accel_ops_* of core/ops_cpu.c, with the libc calls under them) and
accel_rest (hooks, bookkeeping, sampler, step logic, lookups, checks).

  perf      (time) samples of `perf record -e cpu-clock --call-graph dwarf`,
            kept when inside the timed steps (train_mlp --json prints their
            CLOCK_MONOTONIC bounds; perf records with -k monotonic).  A sample
            is comm if any frame of its stack is in the comm backend, else
            optimizer if any frame is an optimizer function, else accel if
            any frame is in an accel object, else program.
  callgrind (instructions) two runs that differ only in the number of timed
            steps; per-step costs are the differences divided by the
            difference in steps.  accel = the inclusive cost of the calls
            from the program into accel objects, minus the calls from accel
            objects into the comm backend and into optimizer functions.

Usage:
  overhead.py perf --comm-obj comm-shm.so --accel-obj libaccel.so --accel-obj ddp.so
      --optim-func NAME ... --json FILE --script FILE [--json FILE --script FILE ...]
  overhead.py callgrind (same object/function options) --steps A B
      --out FILE_A FILE_B [--out FILE_A FILE_B ...]
Prints JSON lines: one per run (rank) and one summary.
"""
import argparse
import collections
import json
import os
import re
import statistics
import sys

CLASSES = ("accel", "comm", "optimizer", "program")
OPS_PREFIX = "accel_ops_"   # core/ops_cpu.c: element-wise kernels on whole buffers


class Classifier:
    def __init__(self, a):
        self.comm = a.comm_obj
        self.accel = a.accel_obj
        self.optim = set(a.optim_func)

    @staticmethod
    def _match(obj, names):
        base = os.path.basename(obj or "")
        return any(base == n or base.startswith(n + ".") for n in names)

    def is_comm(self, obj):
        return self._match(obj, self.comm)

    def is_accel(self, obj):
        return self._match(obj, self.accel)

    def is_optim(self, fn):
        return fn in self.optim


# ---- perf ---------------------------------------------------------------------

FRAME = re.compile(r"^\s*[0-9a-f]+ (.*) \((.*)\)$")


def perf_samples(path):
    """Yield (time, [(symbol, dso), ...] leaf first) from `perf script`."""
    t, frames = None, []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if t is not None:
                    yield t, frames
                t, frames = None, []
                continue
            if line[0] not in " \t":
                m = re.search(r"\s(\d+\.\d+):", line)
                t = float(m.group(1)) if m else None
                frames = []
                continue
            m = FRAME.match(line)
            if m:
                sym, dso = m.groups()
                sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
                frames.append((sym, dso))
    if t is not None:
        yield t, frames


def perf_run(cl, json_path, script_path):
    with open(json_path) as f:
        info = next(json.loads(l) for l in f if l.startswith('{"bench"'))
    t0, t1 = info["t_start"], info["t_end"]
    counts = collections.Counter()
    by_fn = collections.Counter()     # accel samples by innermost accel function
    by_entry = collections.Counter()  # accel samples by outermost accel function
    for t, frames in perf_samples(script_path):
        if t is None or t < t0 or t > t1:
            continue
        if any(cl.is_comm(d) for _, d in frames):
            cls = "comm"
        elif any(cl.is_optim(s) for s, _ in frames):
            cls = "optimizer"
        else:
            acc = [s for s, d in frames if cl.is_accel(d)]
            cls = "accel" if acc else "program"
            if acc:
                by_fn[acc[0]] += 1
                by_entry[acc[-1]] += 1
        counts[cls] += 1
    total = sum(counts.values())
    steps = info["steps"]
    ms = info["ms_per_step"]
    row = {"bench": "train_mlp-overhead", "method": "perf", "world": info["world"],
           "rank": info.get("rank", 0), "steps": steps, "samples": total,
           "ms_per_step": ms}
    for c in CLASSES:
        row[c + "_pct"] = round(100.0 * counts[c] / total, 2) if total else None
    # Per step in ms of CPU time: each sample stands for the same slice of
    # CPU time; scale by the CPU time the run measured.  (The shares are of
    # CPU time, not of the wall time of a step, which other load on the
    # machine stretches.)
    cpu = info.get("cpu_ms_per_step")
    if cpu and total:
        row["accel_ms_per_step"] = round(cpu * counts["accel"] / total, 3)
    # The element-wise passes over whole gradient buffers (core/ops_cpu.c,
    # called by the strategy) apart from the rest (hooks, bookkeeping, ...).
    ops = sum(v for k, v in by_fn.items() if k.startswith(OPS_PREFIX))
    row["accel_ops_pct"] = round(100.0 * ops / total, 2) if total else None
    row["accel_rest_pct"] = round(100.0 * (counts["accel"] - ops) / total, 2) if total else None
    row["accel_top"] = {k: round(100.0 * v / total, 2) for k, v in by_fn.most_common(12)}
    row["accel_entry"] = {k: round(100.0 * v / total, 2) for k, v in by_entry.most_common(8)}
    return row, counts


# ---- callgrind ------------------------------------------------------------------


def callgrind_parse(path):
    """Self costs per (obj, fn) and inclusive costs per call edge, from a file
    written with --compress-strings=no --compress-pos=no (one event: Ir).
    `cob=` names the callee's object for the next call only; otherwise the
    callee is in the caller's object."""
    self_cost = collections.Counter()
    edges = collections.Counter()   # ((obj, fn), (cobj, cfn)) -> inclusive
    total = 0
    ob = fn = cob = cfn = None
    in_call = False
    with open(path, errors="replace") as f:
        for line in f:
            c0 = line[:1]
            if c0.isdigit() or c0 in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if in_call:
                    edges[((ob, fn), (cob or ob, cfn))] += cost
                    in_call, cob = False, None
                else:
                    self_cost[(ob, fn)] += cost
                    total += cost
            elif line.startswith("fn="):
                fn, cob = line[3:].strip(), None
            elif line.startswith("ob="):
                ob = line[3:].strip()
            elif line.startswith("cob="):
                cob = line[4:].strip()
            elif line.startswith("cfn="):
                cfn = line[4:].strip()
            elif line.startswith("calls="):
                in_call = True
    return self_cost, edges, total


def callgrind_classify(cl, self_cost, edges, total):
    """Costs per class; see the module doc."""
    def accel_fn(k):
        return cl.is_accel(k[0])
    entry = sum(c for (a, b), c in edges.items() if not accel_fn(a) and not cl.is_comm(a[0])
                and accel_fn(b))
    to_comm = sum(c for (a, b), c in edges.items() if accel_fn(a) and cl.is_comm(b[0]))
    to_optim = sum(c for (a, b), c in edges.items()
                   if accel_fn(a) and not cl.is_optim(a[1]) and cl.is_optim(b[1]))
    comm_self = sum(c for k, c in self_cost.items() if cl.is_comm(k[0]))
    comm_out = sum(c for (a, b), c in edges.items() if cl.is_comm(a[0]) and not cl.is_comm(b[0]))
    out = {"accel": entry - to_comm - to_optim,
           "optimizer": to_optim,
           "comm_total": comm_self + comm_out,
           "total": total}
    # Per accel function: own instructions plus what it calls outside accel
    # and the backend (libc, libm), optimizer functions apart.
    per_fn = collections.Counter()
    for k, c in self_cost.items():
        if accel_fn(k) and not cl.is_optim(k[1]):
            per_fn[k[1]] += c
    for (a, b), c in edges.items():
        if accel_fn(a) and not cl.is_optim(a[1]) and not accel_fn(b) and not cl.is_comm(b[0]):
            per_fn[a[1]] += c
    return out, per_fn


def callgrind_main(a, cl):
    rows = []
    sa, sb = a.steps
    if sb <= sa:
        sys.exit("overhead.py: --steps A B needs B > A")
    for fa, fb in a.out:
        ca, pa = callgrind_classify(cl, *callgrind_parse(fa))
        cb, pb = callgrind_classify(cl, *callgrind_parse(fb))
        n = sb - sa
        d = {k: (cb[k] - ca[k]) / n for k in ca}
        fn = {k: (pb[k] - pa[k]) / n for k in set(pa) | set(pb)}
        m = re.search(r"w(\d+)\.r?(\d+)", os.path.basename(fb))
        program_like = d["total"] - d["accel"] - d["optimizer"] - d["comm_total"]
        row = {"bench": "train_mlp-overhead", "method": "callgrind",
               "world": int(m.group(1)) if m else None, "rank": int(m.group(2)) if m else None,
               "ir_per_step": round(d["total"]), "accel_ir": round(d["accel"]),
               "optimizer_ir": round(d["optimizer"]), "comm_ir": round(d["comm_total"]),
               "program_ir": round(program_like),
               "accel_pct": round(100 * d["accel"] / d["total"], 3),
               "accel_pct_without_comm": round(100 * d["accel"] / (d["total"] - d["comm_total"]), 3),
               "accel_ops_pct": round(100 * sum(v for k, v in fn.items()
                                                if k.startswith(OPS_PREFIX)) / d["total"], 3),
               "accel_rest_pct": round(100 * (d["accel"] - sum(
                   v for k, v in fn.items() if k.startswith(OPS_PREFIX))) / d["total"], 3),
               "accel_top": {k: round(v) for k, v in sorted(fn.items(), key=lambda kv: -kv[1])[:12]
                             if round(v)}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("method", choices=("perf", "callgrind"))
    ap.add_argument("--comm-obj", action="append", default=[])
    ap.add_argument("--accel-obj", action="append", default=[])
    ap.add_argument("--optim-func", action="append", default=[])
    ap.add_argument("--json", action="append", default=[], help="train_mlp --json output")
    ap.add_argument("--script", action="append", default=[], help="perf script output")
    ap.add_argument("--steps", type=int, nargs=2, help="callgrind: timed steps of runs A, B")
    ap.add_argument("--out", nargs=2, action="append", default=[],
                    help="callgrind: output files of runs A and B (one pair per rank)")
    a = ap.parse_args()
    cl = Classifier(a)
    if a.method == "callgrind":
        rows = callgrind_main(a, cl)
        for w in sorted({r["world"] for r in rows}, key=lambda x: x or 0):
            rs = [r for r in rows if r["world"] == w]
            print(json.dumps({"bench": "train_mlp-overhead-summary", "method": "callgrind",
                              "world": w, "ranks": len(rs),
                              "accel_pct": round(statistics.mean(r["accel_pct"] for r in rs), 3),
                              "accel_pct_without_comm": round(statistics.mean(
                                  r["accel_pct_without_comm"] for r in rs), 3),
                              "accel_ops_pct": round(statistics.mean(
                                  r["accel_ops_pct"] for r in rs), 3),
                              "accel_rest_pct": round(statistics.mean(
                                  r["accel_rest_pct"] for r in rs), 3),
                              "accel_ir_per_step": round(statistics.mean(
                                  r["accel_ir"] for r in rs))}))
        return 0
    if len(a.json) != len(a.script) or not a.json:
        sys.exit("overhead.py perf: give one --json per --script")
    rows = []
    for j, s in zip(a.json, a.script):
        row, _ = perf_run(cl, j, s)
        m = re.search(r"w(\d+)\.r?(\d+)", os.path.basename(s))
        if m:
            row["rank"] = int(m.group(2))
        rows.append(row)
        print(json.dumps(row), flush=True)
    for w in sorted({r["world"] for r in rows}):
        rs = [r for r in rows if r["world"] == w]
        s = {"bench": "train_mlp-overhead-summary", "method": "perf", "world": w,
             "ranks": len(rs), "samples": sum(r["samples"] for r in rs)}
        for c in CLASSES + ("accel_ops", "accel_rest"):
            s[c + "_pct"] = round(statistics.mean(r[c + "_pct"] for r in rs), 2)
        vals = [r["accel_ms_per_step"] for r in rs if "accel_ms_per_step" in r]
        if vals:
            s["accel_ms_per_step"] = round(statistics.mean(vals), 3)
        print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
