#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch + Accelerate peer of accel-gpt2 --device cuda for
bench/gpt2-gpu.sh: the same GPT-2 (pre-LN blocks, causal attention, GELU
tanh, tied LM head, GPT-2's initialisation; the attention written out as
accel-gpt2 computes it, a materialised causal softmax, or with --sdpa
torch's scaled_dot_product_attention), AdamW (fused), random tokens, one
GPU, `Accelerator(mixed_precision=...)`; eager or `torch.compile`
(--compile).  Prints one JSON line: tokens/s over the timed steps (after
--warmup), the model FLOPs per token (accel-gpt2's count: 6 x (12 L C^2 +
V C) + 6 x 2 L T C) and the MFU against --peak-tflops, and the peak GPU
memory.

Usage: gpt2_torch_gpu.py [--layers 12 --heads 12 --dim 768 --seq-len 1024
                          --vocab 50257] [--batch-size 16] [--steps 20]
                         [--warmup 5] [--precision bf16|fp16|no]
                         [--compile] [--sdpa] [--peak-tflops 989]"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

from gpt2_torch import GPT, Block   # the model, shared with the CPU bench


class SdpaBlock(Block):
    """gpt2_torch.py's Block with its mask a (non-persistent) buffer, so that
    it moves to the GPU with the model, and with sdpa torch's
    scaled_dot_product_attention."""

    def __init__(self, c, h, t, sdpa):
        super().__init__(c, h, t)
        self.sdpa = sdpa
        mask = self.mask
        del self.mask
        self.register_buffer("mask", mask, persistent=False)

    def attend(self, q, k, v):
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return super().attend(q, k, v)


def flops_per_token(a):
    """accel-gpt2's gpt2_flops_per_token (examples/gpt2/gpt2_config.c)."""
    weights = a.layers * 12 * a.dim * a.dim + a.vocab * a.dim
    attn = a.layers * 2 * a.seq_len * a.dim
    return 6 * weights + 6 * attn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "no"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--sdpa", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=0.0)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("gpt2_torch_gpu.py: no CUDA device (torch.cuda.is_available() is False)")
        raise SystemExit(77)
    from accelerate import Accelerator   # imported here: --help works without it

    acc = Accelerator(mixed_precision=a.precision)
    torch.manual_seed(0)
    model = GPT(a, lambda: SdpaBlock(a.dim, a.heads, a.seq_len, a.sdpa))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    model, opt = acc.prepare(model, opt)
    if a.compile:
        model = torch.compile(model)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, a.vocab, (a.batch_size, a.seq_len + 1), generator=g).to(acc.device)
    torch.cuda.reset_peak_memory_stats()
    t0 = None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        loss = model(data[:, :-1], data[:, 1:])
        acc.backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tps = a.steps * a.batch_size * a.seq_len / dt
    fpt = flops_per_token(a)
    out = {"bench": "gpt2-gpu", "impl": "pytorch+accelerate", "torch": torch.__version__,
           "mode": "compile" if a.compile else "eager",
           "attention": "sdpa" if a.sdpa else "materialised", "precision": a.precision,
           "gpu": torch.cuda.get_device_name(), "tokens_per_s": tps,
           "tflops": tps * fpt * 1e-12,
           "peak_mem_mib": torch.cuda.max_memory_allocated() / 1048576.0,
           "loss": float(loss)}
    if a.peak_tflops > 0:
        out["mfu"] = tps * fpt / (a.peak_tflops * 1e12)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
