#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""accel's SGD and AdamW kernels against torch.optim, bit for bit.

Usage: optim_torch_check.py TOOL   (TOOL: the test-optim program; it runs
the steps with `--tool IN OUT`, see tests/test-optim.c)

For every case: random parameters, 20 steps of random gradients (f32, or
f16/bf16 converted to f32 as a mixed-precision master copy does) multiplied
by a grad scale, a learning rate that changes every step, two parameter
groups (the second without weight decay), the first group stepped by accel
as three ranges at odd offsets.  torch.optim.SGD / AdamW (foreach=False, and
AdamW also foreach=True) run the same steps; parameters and optimizer state
must be identical after every step, with accel's vector kernel and with its
portable one.

Bit-identity needs PyTorch's AVX2/AVX-512 kernels, which fuse multiply-adds
the way accel's kernels do.  On a CPU with AVX2 and FMA they are what torch
dispatches to, and accel must have selected its avx2-fma kernel: anything
else is a FAIL, never a looser comparison.  Exit 77 when torch is not
installed, or when the CPU has no AVX2+FMA (torch's default kernels round
differently there, so there is nothing bit-exact to compare against)."""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: no torch ({e})")
    sys.exit(77)

STEPS = 20
N0, N1 = 1013, 37   # not multiples of the vector width: torch's scalar tails too


def capability():
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def cpu_has_avx2_fma():
    """From /proc/cpuinfo, independently of torch and of accel."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return "avx2" in flags and "fma" in flags
    except OSError:
        pass
    return False


def run_tool(tool, case, p0, lrs, grads_bits, kernel):
    gdt = case["gdtype"]
    hdr = " ".join([
        f"type={case['type']}", f"beta1={case.get('beta1', 0.9)!r}",
        f"beta2={case.get('beta2', 0.999)!r}", f"eps={case.get('eps', 1e-8)!r}",
        f"wd={case['wd']!r}", f"momentum={case.get('momentum', 0.0)!r}",
        f"dampening={case.get('dampening', 0.0)!r}",
        f"nesterov={int(case.get('nesterov', False))}", f"gdtype={gdt}",
        f"scale={case['scale']!r}", f"n0={N0}", f"n1={N1}", f"steps={STEPS}", "splits=3",
        f"kernel={kernel}"])
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in"), os.path.join(d, "out")
        with open(inp, "wb") as f:
            f.write(hdr.encode() + b"\n")
            f.write(p0.astype("<f4").tobytes())
            f.write(np.asarray(lrs, dtype="<f8").tobytes())
            for g in grads_bits:
                f.write(g.tobytes())
        r = subprocess.run([tool, "--tool", inp, out], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: {tool} --tool: {r.stderr.strip()}")
        want = "avx2-fma" if kernel == "auto" else kernel
        if f"kernel {want}" not in r.stdout.split("\n"):
            sys.exit(f"FAIL: kernel {kernel} on a CPU with AVX2+FMA should run {want}; "
                     f"the tool says: {r.stdout.strip()!r}")
        raw = np.fromfile(out, dtype="<f4")
    ns = 2 if case["type"] == "adamw" else (1 if case.get("momentum", 0) else 0)
    n = N0 + N1
    return raw.reshape(STEPS, 1 + ns, n)


def torch_steps(case, p0, lrs, grads, foreach):
    a = torch.tensor(p0[:N0].copy(), requires_grad=True)
    b = torch.tensor(p0[N0:].copy(), requires_grad=True)
    groups = [{"params": [a]}, {"params": [b], "weight_decay": 0.0}]
    if case["type"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(case.get("beta1", 0.9),
                                                          case.get("beta2", 0.999)),
                                eps=case.get("eps", 1e-8), weight_decay=case["wd"],
                                foreach=foreach)
        names = ["exp_avg", "exp_avg_sq"]
    else:
        opt = torch.optim.SGD(groups, lr=lrs[0], momentum=case.get("momentum", 0.0),
                              dampening=case.get("dampening", 0.0),
                              nesterov=case.get("nesterov", False), weight_decay=case["wd"],
                              foreach=foreach)
        names = ["momentum_buffer"] if case.get("momentum", 0) else []
    res = []
    for t in range(STEPS):
        for grp in opt.param_groups:
            grp["lr"] = lrs[t]
        g = grads[t].float()
        g.mul_(case["scale"])     # unscale / clip: one f32 multiply
        a.grad = g[:N0].clone()
        b.grad = g[N0:].clone()
        opt.step()
        rows = [torch.cat([a.detach(), b.detach()]).numpy().copy()]
        for nm in names:
            rows.append(torch.cat([opt.state[a][nm], opt.state[b][nm]]).numpy().copy())
        res.append(np.stack(rows))
    return np.stack(res)


def ulps(x, y):
    xi = x.view(np.int32).astype(np.int64)
    yi = y.view(np.int32).astype(np.int64)
    xi = np.where(xi < 0, -(xi & 0x7fffffff), xi)
    yi = np.where(yi < 0, -(yi & 0x7fffffff), yi)
    return np.abs(xi - yi)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tool = sys.argv[1]
    torch.set_num_threads(1)
    cap = capability()
    if not cpu_has_avx2_fma():
        print(f"skipped: this CPU has no AVX2+FMA (torch capability {cap}): torch's kernels "
              f"do not fuse multiply-adds there, so they cannot match accel bit for bit")
        return 77
    if not (cap.startswith("AVX2") or cap.startswith("AVX512")):
        print(f"FAIL: the CPU has AVX2+FMA but torch {torch.__version__} dispatches to {cap} "
              f"(ATEN_CPU_CAPABILITY set?): a bit-exact comparison is not possible")
        return 1
    print(f"torch {torch.__version__}, CPU capability {cap}: bit-exact comparison")
    cases = [
        dict(type="sgd", wd=0.0),
        dict(type="sgd", wd=1e-2),
        dict(type="sgd", wd=0.0, momentum=0.9),
        dict(type="sgd", wd=1e-3, momentum=0.9, dampening=0.3),
        dict(type="sgd", wd=1e-2, momentum=0.9, nesterov=True),
        dict(type="sgd", wd=0.0, momentum=0.5, dampening=0.5),
        dict(type="adamw", wd=1e-2),
        dict(type="adamw", wd=0.1, beta1=0.8, beta2=0.95, eps=1e-6),
        dict(type="adamw", wd=0.0, eps=1e-3),
    ]
    rng = np.random.default_rng(20240601)
    failures = 0
    checked = 0
    for ci, case in enumerate(cases):
        for gdt, scale in (("f32", 1.0), ("f16", 0.25), ("bf16", 0.37)):
            case = dict(case, gdtype=gdt, scale=scale)
            lr0 = 0.05 if case["type"] == "sgd" else 3e-3
            lrs = [lr0 * min(1.0, (t + 1) / 5) * (1 - 0.03 * t) for t in range(STEPS)]
            p0 = rng.standard_normal(N0 + N1).astype(np.float32)
            grads, bits = [], []
            for t in range(STEPS):
                g = rng.standard_normal(N0 + N1).astype(np.float32)
                g[::7] *= 1e-3
                g[::53] = 0
                tg = torch.from_numpy(g)
                if gdt == "f16":
                    tg = tg.half()
                    bits.append(tg.numpy().view(np.uint16))
                elif gdt == "bf16":
                    tg = tg.bfloat16()
                    bits.append(tg.view(torch.int16).numpy().view(np.uint16))
                else:
                    bits.append(g)
                grads.append(tg)
            foreachs = (False, True) if case["type"] == "adamw" else (False,)
            refs = {fe: torch_steps(case, p0, lrs, grads, fe) for fe in foreachs}
            for kernel in ("auto", "generic"):
                mine = run_tool(tool, case, p0, lrs, bits, kernel)
                for fe, ref in refs.items():
                    checked += 1
                    label = (f"case {ci} {case} kernel {kernel} vs torch foreach={fe}")
                    if mine.shape != ref.shape:
                        print(f"FAIL {label}: shapes {mine.shape} vs {ref.shape}")
                        failures += 1
                        continue
                    for t in range(STEPS):
                        bad = np.nonzero(mine[t].view(np.int32) != ref[t].view(np.int32))
                        if bad[0].size:
                            k, i = bad[0][0], bad[1][0]
                            print(f"FAIL {label}: step {t + 1}: {bad[0].size} values differ, "
                                  f"first array {k} element {i}: accel {mine[t][k][i]!r} "
                                  f"torch {ref[t][k][i]!r} "
                                  f"(max {ulps(mine[t], ref[t]).max()} ulp)")
                            failures += 1
                            break
    if failures:
        print(f"{failures} of {checked} comparisons FAILED")
    else:
        print(f"{checked} comparisons of {STEPS} steps x {N0 + N1} elements: identical bits")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
