# Times GPT-2 124M training steps in PyTorch on a GPU, in its best configuration: trident's peer in bench/gpu_check.sh.
"""PyTorch as its experts run GPT-2 on a GPU (nanoGPT / llm.c's PyTorch reference): scaled-dot-product
attention (flash attention), bf16 autocast with fp32 master weights, fused AdamW, TF32 for what
stays fp32, and `torch.compile` in --mode compile. The model and step are bench/torch_step.py's:
GPT-2 with a tied LM head (V = 50,257, unpadded, as trident's), AdamW (0.9/0.95, eps 1e-8, decay
0.1 on matrices), global-norm clipping at 1.0.

Prints one greppable line:
    torch_gpu mode=M device=D B=.. T=.. params=.. ms_per_step=.. tokens_per_s=.. mfu_percent=..
MFU counts 6 * params + 12 * L * C * T FLOP per token, trident's count, against --peak-tflops.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_step import GPT  # noqa: E402  (the same model as the CPU comparison)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    ap.add_argument("--peak-tflops", type=float, default=989.4, help="the device's bf16 peak")
    args = ap.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpu_step: error: torch sees no CUDA device")
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    B, T, C, NH = args.batch, args.seq, 768, 12
    # SDPA came with PyTorch 2.0 (the GPU machine's); Debian's 1.13, for the CPU smoke test, lacks it.
    sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    model = GPT(args.layers, C, NH, args.vocab, 1024, T, sdpa=sdpa).to(device)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **fused)
    forward = torch.compile(model) if args.mode == "compile" else model
    g = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, args.vocab, (B, T), generator=g).to(device)
    targets = torch.roll(tokens.view(-1), -1).view(B, T)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = forward(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    nparams = sum(p.numel() for p in params)
    flops_per_token = 6.0 * nparams + 12.0 * args.layers * C * T
    s = statistics.median(times)
    tok_s = B * T / s
    mfu = 100.0 * flops_per_token * tok_s / (args.peak_tflops * 1e12)
    name = torch.cuda.get_device_name(device).replace(" ", "_") if device.type == "cuda" else "cpu"
    print(f"torch_gpu mode={args.mode} device={name} torch={torch.__version__} B={B} T={T} "
          f"attention={'sdpa' if sdpa else 'explicit'} "
          f"params={nparams} warmup_s={warmup_s:.1f} ms_per_step={s * 1e3:.2f} "
          f"tokens_per_s={tok_s:.1f} mfu_percent={mfu:.2f} last_loss={loss.item():.4f}",
          flush=True)


if __name__ == "__main__":
    main()
