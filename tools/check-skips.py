#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail when a test skipped that this machine can run.

Usage: check-skips.py [--assume FACT=0|1 ...] BUILD_DIR_OR_TESTLOG...

Reads meson's test log (BUILD_DIR/meson-logs/testlog.json, one JSON object
per test) and checks every test whose result is SKIP against the table
below: a test may skip only for the outside prerequisites listed for it,
and only when this machine lacks one of them (probed here, the way the test
probes it).  Any other skip -- a test not in the table, or one whose
prerequisites are all present -- is reported with the test's own
"skipped: ..." line, and the exit status is 1.  A missing or empty log is
an error too (exit 1): nothing ran.

Given a build directory, it also checks that the tests meson registers
only where a capability was found at configure time (MPI, CUDA, NCCL,
cuBLASLt, python3: REGISTERED_WHEN below) are registered
(BUILD_DIR/meson-info/intro-tests.json) wherever this machine has that
capability, unless the build disabled it on purpose (its meson option set
to disabled): a test that vanished at configure time is reported as NOT
REGISTERED and the exit status is 1.

--assume FACT=0|1 replaces a probe (for tests of this script; facts:
%(facts)s).

CI runs it after `make test` and after `make test-asan` (.ci/run);
docs/testing.md explains the policy.
"""
import json
import os
import shutil
import subprocess
import sys

PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"


def run_ok(cmd, shell=False):
    try:
        r = subprocess.run(cmd, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=60, text=True)
    except (OSError, subprocess.TimeoutExpired):
        return False, ""
    return r.returncode == 0, r.stdout


def probe_gpu():
    if not shutil.which("nvidia-smi"):
        return False
    ok, out = run_ok(["nvidia-smi", "-L"])
    return ok and any(line.startswith("GPU ") for line in out.splitlines())


def probe_fp8_gpu():
    """A GPU of compute capability >= 8.9 (FP8 tensor cores: Ada, Hopper)."""
    if not shutil.which("nvidia-smi"):
        return False
    ok, out = run_ok(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    caps = []
    for line in out.splitlines() if ok else []:
        try:
            caps.append(float(line.strip()))
        except ValueError:
            pass
    return any(c >= 8.9 for c in caps)


def probe_import(module):
    return run_ok([PYTHON, "-c", f"import {module}"])[0]


def probe_avx2_fma():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return "avx2" in flags and "fma" in flags
    except OSError:
        pass
    return False


def probe_mpi():
    """What meson's dependency('mpi') and find_program('mpirun') need: an
    MPI C compiler wrapper or pkg-config file, and mpirun."""
    if not shutil.which("mpirun"):
        return False
    if shutil.which("mpicc"):
        return True
    return any(run_ok(["pkg-config", "--exists", m])[0] for m in ("ompi-c", "mpich", "mpi"))


def cuda_prefix():
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda"


def probe_cuda_toolkit():
    p = cuda_prefix()
    return os.access(os.path.join(p, "bin", "nvcc"), os.X_OK) and any(
        os.path.exists(os.path.join(p, d, "libcudart.so")) for d in ("lib64", "lib"))


def probe_nccl():
    """nccl.h and libnccl.so where meson looks (without nccl_home)."""
    p = cuda_prefix()
    prefixes = [os.environ.get("NCCL_HOME", ""), p, "/usr"]
    inc = any(os.path.exists(os.path.join(q, "include", "nccl.h")) for q in prefixes if q)
    lib = any(os.path.exists(os.path.join(q, d, "libnccl.so")) for q in prefixes if q
              for d in ("lib64", "lib", "lib/x86_64-linux-gnu"))
    return probe_cuda_toolkit() and inc and lib


def probe_cublaslt():
    p = cuda_prefix()
    return probe_cuda_toolkit() and any(
        os.path.exists(os.path.join(p, d, "libcublasLt.so")) for d in ("lib64", "lib"))


def probe_ipv6():
    return run_ok([PYTHON, "-c", "import socket; s = socket.socket(socket.AF_INET6); "
                   "s.bind(('::1', 0))"])[0]


# The probes mirror the tests' own (tests/test-shm-ns.sh, test-zero-nvme.c --ns, test-tcp-vanish.sh,
# test-mpi-host.sh, test-store.c --ipv6, test-nccl.c --gpu, the Python
# checks' imports, optim_torch_check.py's CPU check).
FACTS = {
    "gpu": ("a GPU [probe: nvidia-smi -L]", probe_gpu),
    "fp8_gpu": ("a GPU of compute capability >= 8.9 [probe: nvidia-smi --query-gpu=compute_cap]",
                probe_fp8_gpu),
    "torch": (f"PyTorch [probe: {PYTHON} -c 'import torch'; Debian python3-torch]",
              lambda: probe_import("torch")),
    "numpy": (f"numpy [probe: {PYTHON} -c 'import numpy'; Debian python3-numpy]",
              lambda: probe_import("numpy")),
    "avx2_fma": ("a CPU with AVX2 and FMA [probe: /proc/cpuinfo flags]", probe_avx2_fma),
    "pid_mount_ns": ("unprivileged pid and mount namespaces [probe: unshare -Urpf, unshare -rm]",
                     lambda: run_ok(["unshare", "-Urpf", "--mount-proc", "true"])[0] and
                     run_ok(["unshare", "-rm", "sh", "-c",
                             "mount -t tmpfs -o size=1m tmpfs /dev/shm"])[0]),
    "mount_ns": ("a private mount namespace to mount ramfs in [probe: unshare -m, or unshare -rm]",
                 lambda: any(run_ok(["unshare", flag, "sh", "-c",
                                     "mount -t ramfs none /mnt"])[0] for flag in ("-m", "-rm"))),
    "net_ns": ("a private network namespace with ip [probe: unshare -rn; iproute2]",
               lambda: bool(shutil.which("ip")) and
               run_ok(["unshare", "-rn", "sh", "-c", "ip link set lo up"])[0]),
    "uts_ns": ("a host name of one's own [probe: unshare -u hostname]",
               lambda: run_ok(["unshare", "-u", "sh", "-c", "hostname accel-probe"])[0]),
    "ipv6": ("IPv6 loopback [probe: bind to ::1]", probe_ipv6),
    "python3": ("python3 [probe: python3 on PATH]", lambda: bool(shutil.which("python3"))),
    "libyaml": ("libyaml [probe: pkg-config --exists yaml-0.1; Debian libyaml-dev]",
                lambda: run_ok(["pkg-config", "--exists", "yaml-0.1"])[0]),
    "matplotlib": (f"matplotlib [probe: {PYTHON} -c 'import matplotlib'; Debian "
                   "python3-matplotlib]", lambda: probe_import("matplotlib")),
    "mpi": ("MPI [probe: mpirun, and mpicc or pkg-config ompi-c/mpich]", probe_mpi),
    "cuda_toolkit": ("the CUDA toolkit [probe: nvcc and libcudart.so under nvcc's prefix or "
                     "/usr/local/cuda]", probe_cuda_toolkit),
    "nccl": ("NCCL [probe: nccl.h and libnccl.so under $NCCL_HOME, the CUDA prefix or /usr]",
             probe_nccl),
    "cublaslt": ("cuBLASLt [probe: libcublasLt.so under the CUDA prefix]", probe_cublaslt),
}

# test name -> the outside prerequisites whose absence lets it skip.
MAY_SKIP = {
    "nccl-gpu": ["gpu"],
    "cuda": ["gpu"],
    "mlp-cuda": ["gpu"],
    "train-mlp-gpu": ["gpu"],
    "checkpoint-gpu": ["gpu"],
    "fsdp-gpu": ["gpu"],
    "gpt2-cuda": ["gpu"],
    "gpt2-cuda-train": ["gpu"],
    "fp8-gpu": ["fp8_gpu"],
    "fp8-recipe-gpu": ["fp8_gpu"],
    "train-mlp-fp8-gpu": ["fp8_gpu"],
    "optim-torch": ["torch", "avx2_fma"],
    "safetensors-python": ["torch"],
    "train-mlp-parity": ["torch"],
    "checkpoint-python": ["torch"],
    "localsgd-numpy": ["numpy"],
    "shm-ns": ["pid_mount_ns"],
    "zero-nvme-ns": ["mount_ns"],
    "tcp-vanish": ["net_ns"],
    "mpi-store-remote": ["uts_ns"],
    "mpi-store-unreachable": ["uts_ns"],
    "store-ipv6": ["ipv6"],
    "config-cli-core": ["python3"],
    "docs": ["python3"],
    "config-cli-accelerate": ["python3", "libyaml"],
    "plot": ["matplotlib"],
}

# test name -> the capabilities found at configure time that make meson
# register it (tests/meson.build's conditions), and the meson options that
# disable them on purpose.  Where this machine has every capability and no
# option disabled one, the test must be registered.
REGISTERED_WHEN = {}
for _t in ("mpi", "mpi-own-init", "mpi-init-single", "mpi-init-timeout", "mpi-core-timeout",
           "mpi-groups-values", "mpi-groups-late", "mpi-store-remote", "mpi-store-unreachable"):
    REGISTERED_WHEN[_t] = ["mpi"]
for _t in ("nccl-boot-mpi", "nccl-boot-store", "nccl-boot-auto", "nccl-boot-nest"):
    REGISTERED_WHEN[_t] = ["mpi", "nccl"]
for _t in ("cuda", "cuda-no-gpu"):
    REGISTERED_WHEN[_t] = ["cuda_toolkit"]
for _t in ("nccl", "nccl-gpu"):
    REGISTERED_WHEN[_t] = ["nccl"]
for _t in ("mlp-cuda", "checkpoint-gpu", "train-mlp-gpu", "fsdp-gpu"):
    REGISTERED_WHEN[_t] = ["cuda_toolkit", "cublaslt", "python3"]
REGISTERED_WHEN["gpt2-cuda"] = ["cuda_toolkit", "cublaslt"]
REGISTERED_WHEN["gpt2-cuda-train"] = ["cuda_toolkit", "cublaslt", "python3"]
for _t in ("optim-torch", "safetensors-python", "checkpoint-python", "train-mlp-parity",
           "check-skips", "plot"):
    REGISTERED_WHEN[_t] = ["python3"]
# fact -> the meson options whose value "disabled" removes it on purpose
OPTION_OF = {"mpi": ["mpi"], "cuda_toolkit": ["cuda"], "nccl": ["cuda", "nccl"],
             "cublaslt": ["cuda", "cublaslt"]}

__doc__ = __doc__ % {"facts": ", ".join(FACTS)}


class Machine:
    def __init__(self, assumed):
        self.known = dict(assumed)

    def has(self, fact):
        if fact not in self.known:
            self.known[fact] = bool(FACTS[fact][1]())
        return self.known[fact]


def skip_reason(stdout):
    for line in (stdout or "").splitlines():
        if "skipped" in line.lower():
            return line.strip()
    return "(no 'skipped:' line in its output)"


def check(log_path, machine):
    """Returns the number of problems found in one test log."""
    try:
        with open(log_path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        print(f"check-skips: FAIL: cannot read {log_path}: {e.strerror}")
        return 1
    except json.JSONDecodeError as e:
        print(f"check-skips: FAIL: {log_path} is not meson's test log: {e}")
        return 1
    if not entries:
        print(f"check-skips: FAIL: {log_path} lists no test")
        return 1
    bad = expected = 0
    for e in entries:
        if e.get("result") != "SKIP":
            continue
        name = e.get("name", "?").split(" / ")[-1]
        reason = skip_reason(e.get("stdout"))
        facts = MAY_SKIP.get(name)
        if facts is None:
            print(f"check-skips: UNEXPECTED SKIP: {name}: it has no outside prerequisite that "
                  f"may be missing, so a skip means it did not run: {reason}")
            bad += 1
            continue
        missing = [f for f in facts if not machine.has(f)]
        if missing:
            print(f"check-skips: expected skip: {name}: this machine lacks "
                  f"{'; '.join(FACTS[f][0] for f in missing)}")
            expected += 1
        else:
            print(f"check-skips: UNEXPECTED SKIP: {name}: this machine has "
                  f"{'; '.join(FACTS[f][0] for f in facts)}, so it must run: {reason}")
            bad += 1
    print(f"check-skips: {log_path}: {len(entries)} tests, {expected} expected skip(s), "
          f"{bad} unexpected")
    return bad


def check_registered(build_dir, machine):
    """Returns the number of tests this machine should have registered in
    build_dir that meson did not register."""
    info = os.path.join(build_dir, "meson-info")
    try:
        with open(os.path.join(info, "intro-tests.json")) as f:
            names = {t["name"] for t in json.load(f)}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"check-skips: FAIL: cannot read the registered tests of {build_dir} "
              f"(meson-info/intro-tests.json): {e}")
        return 1
    disabled = set()
    try:
        with open(os.path.join(info, "intro-buildoptions.json")) as f:
            disabled = {o["name"] for o in json.load(f) if o.get("value") == "disabled"}
    except (OSError, ValueError, KeyError, TypeError):
        pass   # an older meson: every option counts as enabled
    bad = 0
    for name, facts in REGISTERED_WHEN.items():
        if name in names:
            continue
        off = [o for f in facts for o in OPTION_OF.get(f, []) if o in disabled]
        if off:
            print(f"check-skips: not registered, as configured: {name} (-D{off[0]}=disabled)")
            continue
        missing = [f for f in facts if not machine.has(f)]
        if missing:
            print(f"check-skips: not registered, as expected: {name}: this machine lacks "
                  f"{'; '.join(FACTS[f][0] for f in missing)}")
            continue
        print(f"check-skips: NOT REGISTERED: {name}: this machine has "
              f"{'; '.join(FACTS[f][0] for f in facts)}, but meson did not register the test "
              f"in {build_dir} (see meson-logs/meson-log.txt for why it was not found)")
        bad += 1
    print(f"check-skips: {build_dir}: {len(names)} tests registered, {bad} missing")
    return bad


def main(argv):
    assumed = {}
    paths = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--assume" and i + 1 < len(argv):
            k, _, v = argv[i + 1].partition("=")
            if k not in FACTS or v not in ("0", "1"):
                print(f"check-skips: --assume {argv[i + 1]}: expected FACT=0|1 with FACT one of "
                      f"{', '.join(FACTS)}", file=sys.stderr)
                return 2
            assumed[k] = v == "1"
            i += 2
        elif a.startswith("-"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            paths.append(a)
            i += 1
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    machine = Machine(assumed)
    problems = 0
    for p in paths:
        if os.path.isdir(p):
            problems += check_registered(p, machine)
            p = os.path.join(p, "meson-logs", "testlog.json")
        problems += check(p, machine)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
