#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The PyTorch + Hugging Face Accelerate peer of `train_mlp --device cuda`:
the same MLP (784-HIDDEN-...-10, torch.nn.Linear + ReLU, mean cross-entropy),
the same batch, AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay
0.01, fused=True), on one GPU, in f32 (no TF32), bf16 (Accelerator
mixed_precision="bf16": autocast, f32 parameters and gradients), fp16
(Accelerator "fp16": autocast and its GradScaler) or fp8 (Accelerator
"fp8" with whichever FP8 backend accelerate finds; where none is installed
or it cannot run this model, the bf16 run instead).  Without the
accelerate package (or with --no-accelerate) plain PyTorch does the same:
torch.autocast for bf16/fp16 (fp16 with torch.amp.GradScaler), bf16 for
fp8, and loss.backward(); the JSON line says which ("impl":
"pytorch-accelerate" or "pytorch", "accelerate": its version or null,
"precision": what ran, e.g. "bf16 (fp8 unavailable: ...)").

A step is what train_mlp's is: gather the batch from a data set on the
device by a random index, forward, backward (accelerator.backward), the
optimizer step, zero_grad(set_to_none=True).  WARMUP untimed steps, then
--steps timed ones between two torch.cuda.synchronize(); --rounds rounds,
the fastest reported.  One JSON line with the keys of train_mlp --json
(bench, impl, dims, batch_per_rank, ms_per_step, samples_per_s) plus dtype,
torch and accelerate versions.  Exit 77 without torch or a GPU.

    python3 bench/torch_accel_mlp.py --hidden 4096 --batch-size 4096 --dtype bf16
"""
import argparse
import json
import socket
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=784)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", choices=["f32", "bf16", "fp16", "fp8"], default="bf16")
    ap.add_argument("--max-grad-norm", type=float, default=0.0,
                    help="clip the gradient norm to this (Accelerator.clip_grad_norm_, or "
                    "torch.nn.utils.clip_grad_norm_); 0: no clipping")
    ap.add_argument("--no-accelerate", action="store_true",
                    help="plain PyTorch (autocast) even where accelerate is installed")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"skipped: no torch ({e})")
        return 77
    accelerate = None
    if not a.no_accelerate:
        try:
            import accelerate
            from accelerate import Accelerator
        except ImportError as e:
            print(f"note: no accelerate ({e}); plain PyTorch with autocast", file=sys.stderr)
            accelerate = None
    if not torch.cuda.is_available():
        print("skipped: no GPU (torch.cuda.is_available() is False)")
        return 77
    # exact f32 GEMMs, as train_mlp's cuBLASLt f32 (CUBLAS_COMPUTE_32F)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dims = [a.inputs] + [a.hidden] * a.layers + [a.classes]

    def build(precision):
        """(step function, precision that ran) for mixed_precision `precision`"""
        acc = None
        if accelerate is not None:
            acc = Accelerator(mixed_precision={"f32": "no"}.get(precision, precision))
            dev = acc.device
        else:
            dev = torch.device("cuda", 0)
        torch.manual_seed(0)
        mods = []
        for i in range(len(dims) - 1):
            mods.append(torch.nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                mods.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*mods).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01, fused=True)
        if acc is not None:
            model, opt = acc.prepare(model, opt)
        x = torch.randn(a.samples, a.inputs, device=dev)
        y = torch.randint(0, a.classes, (a.samples,), device=dev)
        half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        scaler = torch.amp.GradScaler("cuda") if acc is None and precision == "fp16" else None

        def step():
            idx = torch.randint(0, a.samples, (a.batch_size,), device=dev)
            if acc is not None:
                loss = F.cross_entropy(model(x[idx]), y[idx])
                acc.backward(loss)
            else:
                with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
                    loss = F.cross_entropy(model(x[idx]), y[idx])
                (scaler.scale(loss) if scaler else loss).backward()
                if scaler:
                    scaler.unscale_(opt)
            if a.max_grad_norm > 0:
                if acc is not None:
                    acc.clip_grad_norm_(model.parameters(), a.max_grad_norm)
                else:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)

        return step, acc

    ran = a.dtype
    if a.dtype == "fp8" and accelerate is None:
        ran = "bf16 (fp8 needs accelerate and an FP8 backend)"
        step, acc = build("bf16")
    elif a.dtype == "fp8":
        try:
            step, acc = build("fp8")
            step()   # an FP8 backend that cannot run the model fails here
        except Exception as e:   # noqa: BLE001 - any backend failure means: no fp8 peer
            msg = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            print(f"note: Accelerator(mixed_precision='fp8') failed ({msg}); bf16 instead",
                  file=sys.stderr)
            ran = f"bf16 (fp8 unavailable: {msg})"
            try:
                from accelerate.state import AcceleratorState
                AcceleratorState._reset_state(True)
            except Exception:   # noqa: BLE001 - older accelerate: nothing to reset
                pass
            step, acc = build("bf16")
    else:
        step, acc = build(a.dtype)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / a.steps)
    print(json.dumps({"bench": "train_mlp",
                      "impl": "pytorch-accelerate" if acc is not None else "pytorch",
                      "device": "cuda",
                      "dtype": a.dtype, "precision": ran, "world": 1, "dims": "-".join(map(str, dims)),
                      "batch_per_rank": a.batch_size, "steps": a.steps, "warmup": a.warmup,
                      "rounds": a.rounds, "max_grad_norm": a.max_grad_norm or None,
                      "ms_per_step": round(best * 1e3, 4),
                      "samples_per_s": round(a.batch_size / best, 1),
                      "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "accelerate": accelerate.__version__ if accelerate else None,
                      "host": socket.gethostname()},
                     separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
