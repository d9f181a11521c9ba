# Times one GPT-2 124M training step in PyTorch on CPU, fp32 or bf16 autocast: trident's baseline.
"""The same model and step as bench/step_bench.cpp: GPT-2 with tied LM head, GELU (tanh),
LayerNorm eps 1e-5, AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only),
global-norm gradient clipping at 1.0. One step = zero_grad, forward + loss, backward, clip +
AdamW. Prints greppable `torch_*_seconds=` lines (medians over the timed steps).

--autocast bf16 is PyTorch's CPU mixed-precision recipe, the peer of trident's compute = "bf16":
forward + loss under torch.autocast("cpu", dtype=torch.bfloat16), backward outside it;
parameters, gradients and AdamW stay fp32, and no GradScaler (bf16 has fp32's exponent range).

Run with Debian's interpreter, which has python3-torch:
    /usr/bin/python3 bench/torch_step.py --threads 1
"""
import argparse
import contextlib
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, T, sdpa=False):
        super().__init__()
        self.NH = NH
        self.sdpa = sdpa  # F.scaled_dot_product_attention (flash attention on GPUs)
        self.ln_1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        HS = C // self.NH
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, HS).transpose(1, 2)
        k = k.view(B, T, self.NH, HS).transpose(1, 2)
        v = v.view(B, T, self.NH, HS).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.mlp_proj(self.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, block_size, T, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(block_size, C)
        self.blocks = nn.ModuleList(Block(C, NH, T, sdpa) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        # GPT-2 initialisation; residual projections scaled by 1/sqrt(2L).
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output projection
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--foreach", action="store_true",
                    help="AdamW's multi-tensor (foreach) implementation; PyTorch 1.13 uses it by "
                         "default only on CUDA, and on 2 CPU cores it was no faster")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--max-norm", type=float, default=1.0, help="0: no gradient clipping")
    ap.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: forward + loss under torch.autocast(\"cpu\", dtype=torch.bfloat16) "
                         "(fp32 parameters, gradients and AdamW; no GradScaler)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)  # one pool of args.threads, as on trident's side
    torch.manual_seed(1337)
    B, T, C, NH = args.batch, args.seq, 768, 12
    model = GPT(args.layers, C, NH, args.vocab, 1024, T)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=args.foreach)
    g = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, args.vocab, (B, T), generator=g)
    targets = torch.roll(tokens.view(-1), -1).view(B, T)
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    print(f"torch_config torch={torch.__version__} L={args.layers} C={C} NH={NH} V={args.vocab} "
          f"B={B} T={T} params={nparams} threads={torch.get_num_threads()} "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '')} "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')} "
          f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')} "
          f"steps={args.steps} warmup={args.warmup} max_norm={args.max_norm} "
          f"autocast={args.autocast}", flush=True)

    # The autocast region covers forward + loss only: autograd runs each op's backward in the
    # dtype its forward used, so backward needs no context of its own.
    def forward_context():
        if args.autocast == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)  # PyTorch's own advice: no memset, fresh grads
        t1 = time.perf_counter()
        with forward_context():
            loss = model(tokens, targets)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        if args.max_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, args.max_norm)
        opt.step()
        t4 = time.perf_counter()
        return (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0), loss.item()

    for _ in range(args.warmup):
        step()
    rows = []
    for i in range(args.steps):
        times, loss = step()
        rows.append(times)
        print(f"torch_step index={i} seconds={times[4]:.4f} loss={loss:.4f}", flush=True)
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"torch_zero_grads_seconds={med[0]:.4f}")
    print(f"torch_forward_seconds={med[1]:.4f}")
    print(f"torch_backward_seconds={med[2]:.4f}")
    print(f"torch_optimizer_seconds={med[3]:.4f}")
    print(f"torch_step_seconds={med[4]:.4f}", flush=True)


if __name__ == "__main__":
    main()
