#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch peer of examples/gpt2 for bench/gpt2-cpu.sh: the same GPT-2
(pre-LN blocks, causal attention, GELU tanh, tied LM head, GPT-2's
initialisation), AdamW, random tokens, on the CPU with one thread per
process; --world N runs N processes with DistributedDataParallel (gloo).
Prints one JSON line: tokens/s over the timed steps (after --warmup).

Usage: gpt2_torch.py --layers L --heads H --dim C --seq-len T --vocab V
                     --batch-size B(global) --steps N [--warmup W] [--world N]"""
import argparse
import json
import math
import os
import time

# One thread per process means the BLAS too: Debian's PyTorch does its
# float GEMMs in OpenBLAS (libblas.so.3), whose pthread build starts one
# thread per core when it is loaded and which torch.set_num_threads does
# not limit; so say it before torch loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402 (after the thread settings)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, c, h, t):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.m_proj = nn.Linear(4 * c, c)
        # a plain attribute: DDP over gloo cannot broadcast a bool buffer
        self.mask = torch.tril(torch.ones(t, t, dtype=torch.bool))

    def attend(self, q, k, v):
        """Causal attention written out as accel-gpt2 computes it (a
        materialised softmax); q, k, v are (batch, heads, T, head size)."""
        t = q.shape[2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[3])
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
        return att @ v

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = self.attend(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.m_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """block: makes one block (default: Block(a.dim, a.heads, a.seq_len))."""

    def __init__(self, a, block=None):
        super().__init__()
        self.wte = nn.Embedding(a.vocab, a.dim)
        self.wpe = nn.Embedding(a.seq_len, a.dim)
        if block is None:
            def block():
                return Block(a.dim, a.heads, a.seq_len)
        self.h = nn.ModuleList(block() for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.dim)
        for n, p in self.named_parameters():
            if n.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.layers) if n.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0, std)

    def forward(self, idx, tgt):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()   # tied head
        # .float(): the loss in f32 under mixed precision (a no-op in f32)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tgt.reshape(-1))


def worker(rank, a):
    torch.set_num_threads(1)
    if a.world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(0)
    model = GPT(a)
    if a.world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    b = a.batch_size // a.world
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, a.vocab, (b, a.seq_len + 1), generator=g)
    t0 = None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            t0 = time.perf_counter()
        loss = model(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dt = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"bench": "gpt2", "impl": "pytorch", "torch": torch.__version__,
                          "world": a.world, "tokens_per_s": a.steps * a.batch_size * a.seq_len / dt,
                          "loss": float(loss)}), flush=True)
    if a.world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for k in ("layers", "heads", "dim", "seq-len", "vocab", "batch-size", "steps"):
        p.add_argument("--" + k, type=int, required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--world", type=int, default=1)
    a = p.parse_args()
    if a.world > 1:
        mp.spawn(worker, args=(a,), nprocs=a.world)
    else:
        worker(0, a)


if __name__ == "__main__":
    main()
