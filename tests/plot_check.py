#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/plot.py on a small sample of the benchmarks' raw output (JSON lines
mixed with table lines, a rank-1 train_mlp line, a line too short to use):
both SVG files are written, parse as XML, and name the panels and the
implementations of the sample.  Exit 77 when matplotlib is not installed.
Usage: plot_check.py SRCDIR"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

src = sys.argv[1]
try:
    import matplotlib  # noqa: F401
except ImportError:
    print("skipped: matplotlib is not installed (python3-matplotlib)")
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    sample = os.path.join(tmp, "sample.jsonl")
    with open(sample, "w") as f:
        f.write("  allreduce 8 2 f32 ... (a table line)\n")
        for backend, buffers, t8, t1m in (("shm", "user", 0.7, 200.0), ("shm", "backend", 0.6, 100.0),
                                          ("openmpi", "user", 0.9, 350.0)):
            for nbytes, t in ((8, t8), (1 << 20, t1m)):
                for op in ("allreduce", "allgather"):
                    f.write(json.dumps({"bench": "comm", "op": op, "bytes": nbytes, "time_us": t,
                                        "busbw_GBps": 0.0, "world": 2, "backend": backend,
                                        "buffers": buffers, "inplace": False}) + "\n")
        f.write(json.dumps({"bench": "comm", "op": "allreduce", "bytes": 8, "time_us": 200,
                            "busbw_GBps": 0.0, "world": 2, "backend": "gloo", "buffers": "user",
                            "inplace": True}) + "\n")
        f.write(json.dumps({"bench": "comm", "op": "allreduce"}) + "\n")   # unusable
        for impl, world, rank, ms in (("accel", 1, 0, 18.7), ("accel", 2, 0, 20.2),
                                      ("accel", 2, 1, 99.0), ("pytorch-ddp", 2, 0, 44.5)):
            f.write(json.dumps({"bench": "train_mlp", "impl": impl, "world": world, "rank": rank,
                                "ms_per_step": ms, "dims": "784-16-10"}) + "\n")
    out = os.path.join(tmp, "img")
    r = subprocess.run([sys.executable, os.path.join(src, "bench", "plot.py"), "-o", out, sample],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for name, words in (("comm-busbw.svg", ["all-reduce", "all-gather", "accel shm, user buffers",
                                            "accel shm, backend buffers", "Open MPI",
                                            "gloo (in place)", "bus bandwidth"]),
                        ("train-step.svg", ["accel ddp", "pytorch-ddp", "1 process",
                                            "2 processes", "784-16-10", "20.2", "44.5"])):
        path = os.path.join(out, name)
        assert os.path.getsize(path) > 1000, name
        root = ET.parse(path).getroot()
        assert root.tag.endswith("svg"), root.tag
        text = " ".join(t for t in root.itertext())
        for w in words:
            assert w in text, "%s lacks %r" % (name, w)
        # the rank-1 line (99 ms) is not drawn
        assert name != "train-step.svg" or "99.0" not in text, "rank 1 plotted"
    # no usable line: exit 1 with a message
    empty = os.path.join(tmp, "empty.jsonl")
    open(empty, "w").write("nothing here\n")
    r = subprocess.run([sys.executable, os.path.join(src, "bench", "plot.py"), "-o", out, empty],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "no comm or train_mlp JSON lines" in r.stderr, r.stderr
# docs/benchmarks.md shows both charts (committed in docs/img, valid SVG),
# each above the tables that follow it, and one command regenerates them
md = open(os.path.join(src, "docs", "benchmarks.md")).read()
for name in ("comm-busbw.svg", "train-step.svg"):
    ref = "](img/%s)" % name
    assert ref in md, "docs/benchmarks.md does not show img/%s" % name
    root = ET.parse(os.path.join(src, "docs", "img", name)).getroot()
    assert root.tag.endswith("svg"), name
    assert "\n|" in md[md.index(ref):], "no table after img/%s" % name
assert "bench/plot.py" in open(os.path.join(src, "Makefile")).read(), "no `make plots`"
print("ok: plot.py wrote both charts from the sample; docs/benchmarks.md shows them")
