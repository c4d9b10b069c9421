#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/gpu-check.sh's summary: reads the logs in LOG_DIR and prints one
Markdown block for docs/benchmarks.md and the tests' tolerances:

  - each part's status (parts.txt: NAME STATUS SECONDS LIMIT);
  - the gpu suite: each test's result and duration, and every line it
    printed that puts an observed difference next to its tolerance (lines
    with "tolerance", "largest" or "not checked"), from gpu-testlog.json
    (meson's), else gpu-testlog.txt;
  - fp8-gemm.log: FP8 vs bf16 vs torch._scaled_mm, against the targets;
  - train-cuda.log: train_mlp per dtype against PyTorch + Accelerate, and
    accel fp8 against accel bf16;
  - gpt2-gpu.log: its table rows ("gpt2-row:" lines, so a run cut short
    still shows what finished) and its ratio lines;
  - bench-comm-cuda.log and optim-cuda.log when those parts ran.

Usage: gpu_summary.py LOG_DIR GPU_DESCRIPTION"""
import json
import os
import re
import subprocess
import sys

TOL_LINE = re.compile(r"tolerance|largest|not checked", re.IGNORECASE)
MAX_TOL_LINES = 40   # per test


def lines(logs, name):
    try:
        with open(os.path.join(logs, name), errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def json_lines(logs, name, bench):
    out = []
    for ln in lines(logs, name):
        if ln.startswith("{"):
            try:
                r = json.loads(ln)
            except ValueError:
                continue
            if r.get("bench") == bench:
                out.append(r)
    return out


def cuda_version():
    try:
        v = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release ([0-9.]+)", v)
        return m.group(1) if m else "?"
    except OSError:
        return "?"


def verdict(v, need):
    return "-" if v is None else ("met" if v >= need else "MISSED")


def fmt(v, f="%.3f"):
    return "-" if v is None else f % v


def parts(logs):
    print("parts (name: status, seconds / limit):")
    for ln in lines(logs, "parts.txt"):
        f = ln.split()
        if len(f) != 4:
            continue
        name, st, sec, lim = f
        what = {"0": "ok", "124": "TIMED OUT", "skipped": "SKIPPED (no time left)",
                "77": "skipped (exit 77)"}.get(st, "FAILED (status %s)" % st)
        print("  %s: %s, %s s / %s s" % (name, what, sec, lim))


def suite(logs):
    tests = []
    for ln in lines(logs, "gpu-testlog.json"):
        try:
            t = json.loads(ln)
        except ValueError:
            continue
        out = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
        tests.append((t.get("name", "?"), t.get("result", "?"), t.get("duration"), out))
    if not tests:
        txt = lines(logs, "gpu-testlog.txt")
        if not txt:
            print("gpu suite: no log (gpu-testlog.json / gpu-testlog.txt)")
            return
        tests.append(("(testlog.txt)", "?", None, "\n".join(txt)))
    print("gpu suite: %d test(s): %s" % (len(tests), ", ".join(
        "%s %s%s" % (n, r, " %.0f s" % d if isinstance(d, (int, float)) else "")
        for n, r, d, _ in tests)))
    for name, _, _, out in tests:
        got = [ln.strip() for ln in out.splitlines() if TOL_LINE.search(ln)]
        if not got:
            continue
        print("  %s:" % name)
        for ln in got[:MAX_TOL_LINES]:
            print("    " + ln)
        if len(got) > MAX_TOL_LINES:
            print("    ... %d more in the test log" % (len(got) - MAX_TOL_LINES))


def fp8_gemm(logs):
    ops = {r["op"]: r for r in json_lines(logs, "fp8-gemm.log", "fp8-gemm")}
    rat = json_lines(logs, "fp8-gemm.log", "fp8-gemm-ratio")
    if not ops:
        print("fp8 GEMM: no result (see fp8-gemm.log)")
        return
    r = rat[-1] if rat else {}
    size = next(iter(ops.values()))
    print("fp8 GEMM %dx%dx%d (TFLOP/s): %s" % (size.get("m", 0), size.get("n", 0),
                                               size.get("k", 0),
                                               "; ".join("%s %s" % (k, v.get("tflops"))
                                                         for k, v in sorted(ops.items()))))
    a, s = r.get("fp8_over_bf16"), r.get("fp8_over_scaled_mm")
    print("  fp8 / bf16 %s (need >= 1.60, %s); fp8 / torch._scaled_mm %s (need >= 0.95, %s)"
          % (fmt(a, "%.2f"), verdict(a, 1.6), fmt(s, "%.2f"), verdict(s, 0.95)))


def train(logs):
    t = json_lines(logs, "train-cuda.log", "train-cuda-ratio")
    if not t:
        print("train_mlp: no result (see train-cuda.log)")
        return
    for r in t:
        print("train_mlp %s batch %d %s: accel %s ms/step; %s %s ms; ratio %s "
              "(need >= 1.00, %s)"
              % (r["dims"], r["batch"], r["dtype"], fmt(r.get("accel_ms")),
                 r.get("peer") or "peer: not run", fmt(r.get("peer_ms")),
                 fmt(r.get("ratio"), "%.2f"), verdict(r.get("ratio"), 1.0)))
    by = {r["dtype"]: r for r in t}
    if "fp8" in by and "bf16" in by and by["fp8"].get("accel_ms"):
        print("  accel fp8 / accel bf16 step time: %.2f (below 1: fp8 is faster)"
              % (by["fp8"]["accel_ms"] / by["bf16"]["accel_ms"]))


def gpt2(logs):
    log = lines(logs, "gpt2-gpu.log")
    rows = [ln[len("gpt2-row: "):] for ln in log if ln.startswith("gpt2-row: ")]
    if not rows:
        print("gpt2: no result (see gpt2-gpu.log)")
        return
    head = [ln for ln in log if ln.startswith("GPU: ") and "GPT-2" in ln]
    print("gpt2 124M, batch 16 x 1024%s:" % (" (%s)" % head[-1][5:] if head else ""))
    print("  | run | tokens/s | TFLOP/s | MFU | memory |")
    print("  |---|---|---|---|---|")
    tps = {}
    for r in rows:
        print("  " + r)
        f = [c.strip() for c in r.strip().strip("|").split("|")]
        try:
            tps[f[0].replace("accel-gpt2 ", "accel-")] = float(f[1])
        except (IndexError, ValueError):
            pass

    def ratio(a, b):
        return tps[a] / tps[b] if tps.get(a) and tps.get(b) else None

    # from the rows, so that a run cut short still gives what it can
    e, c = ratio("accel-bf16", "torch-eager"), ratio("accel-bf16", "torch-compile")
    print("  accel bf16 / PyTorch eager %s (need >= 1.00, %s); / torch.compile %s (need >= "
          "0.90, %s); / torch.compile with SDPA %s"
          % (fmt(e, "%.2f"), verdict(e, 1.0), fmt(c, "%.2f"), verdict(c, 0.9),
             fmt(ratio("accel-bf16", "torch-compile-sdpa"), "%.2f")))
    print("  accel fp8 / accel bf16 tokens/s %s; --recompute / without %s (memory: the rows)"
          % (fmt(ratio("accel-fp8", "accel-bf16"), "%.2f"),
             fmt(ratio("accel-bf16-recompute", "accel-bf16"), "%.2f")))


def comm(logs):
    log = lines(logs, "bench-comm-cuda.log")
    if not log:
        return
    hdr = [ln for ln in log if ln.startswith("#")][:1]
    print("accel bench comm --device cuda header: %s" % (" | ".join(hdr) if hdr else "(none)"))


def optim(logs):
    o = json_lines(logs, "optim-cuda.log", "optim-cuda-ratio")
    if not lines(logs, "optim-cuda.log"):
        return
    if not o:
        print("fused AdamW: no result (see optim-cuda.log)")
        return
    o = o[-1]
    print("fused AdamW, %d f32 params in %d tensors: accel %.3f ms (%.0f GB/s); %s %s ms; "
          "ratio %s (need >= 1.00, %s); fraction of copy %.3f (need >= 0.85, %s)"
          % (o["n"], o["tensors"], o["accel_ms"], o["accel_GBps"],
             o.get("peer") or "torch: not run", fmt(o.get("peer_ms")),
             fmt(o.get("ratio"), "%.2f"), verdict(o.get("ratio"), 1.0),
             o["fraction_of_copy"], verdict(o["fraction_of_copy"], 0.85)))


def main():
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[-1], file=sys.stderr)
        return 2
    logs, gpu = sys.argv[1], sys.argv[2]
    day = subprocess.run(["date", "-u", "+%Y-%m-%d"], capture_output=True, text=True)
    print("```")
    print("GPU: %s; CUDA %s; run %s" % (gpu, cuda_version(), day.stdout.strip()))
    for f in (parts, fp8_gemm, train, gpt2, comm, optim, suite):
        f(logs)
    print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
