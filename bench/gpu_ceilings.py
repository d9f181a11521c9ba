# Measures a GPU's ceilings with PyTorch for bench/gpu_check.sh: copy bandwidth, bf16 GEMMs (8192^3 and trident's own shapes), attention.
"""The ceilings a roofline divides by, measured on the device the check runs on:

- copy: a 1 GiB device-to-device copy (read + write bytes over time), GB/s;
- gemm8192: a bf16 8192^3 matrix product, TFLOP/s;
- every GEMM label of a trident profile table (--profile, `trident train --profile-step`'s
  <run dir>/profile_step_K.tsv): the same product in PyTorch (bf16 operands, transposes as the
  label says: "gemm16 NT 16384x2304x768" is C[16384, 2304] = A[16384, 768] B[2304, 768]^T,
  " x12" a batch of 12), its time beside trident's mean, written to --out as TSV;
- sdpa: causal scaled-dot-product attention at GPT-2 124M's shape (B 16, 12 heads of 64,
  T 1024), forward and forward + backward, ms. Without SDPA (PyTorch < 2.0) the same causal
  softmax(q k^T / sqrt(d)) v is timed written out. Where the profile holds cuDNN's attention
  (attention_cudnn_forward / _backward: one layer's call at that shape), --out gets those labels
  too, at SDPA's forward and its backward (forward + backward less forward).

Prints `key=value` lines (gpu_check.sh records them). --device cpu and --quick shrink every
shape for a smoke test on a host.
"""
import argparse
import csv
import math
import re
import sys
import time

import torch

LABEL = re.compile(r"^(gemm16_out|gemm16_batched|gemm_batched|gemm16|gemm) ([NT])([NT]) "
                   r"(\d+)x(\d+)x(\d+)(?: x(\d+))?$")


class Timer:
    def __init__(self, device, repeats):
        self.device, self.repeats = device, repeats

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def ms(self, fn):
        """Mean milliseconds of fn() over the repeats, after two untimed calls."""
        fn()
        fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(self.repeats):
            fn()
        self.sync()
        return 1e3 * (time.perf_counter() - start) / self.repeats


def operands(m, n, k, ta, tb, batch, dtype, device):
    """A and B stored as the label's transposes say (row-major, as trident's Views)."""
    shape_a = (k, m) if ta == "T" else (m, k)
    shape_b = (n, k) if tb == "T" else (k, n)
    if batch > 1:
        shape_a, shape_b = (batch,) + shape_a, (batch,) + shape_b
    a = torch.randn(shape_a, dtype=dtype, device=device)
    b = torch.randn(shape_b, dtype=dtype, device=device)
    op_a = a.transpose(-1, -2) if ta == "T" else a
    op_b = b.transpose(-1, -2) if tb == "T" else b
    return op_a, op_b


def gemm_rows(path, timer, dtype, device, scale):
    rows = []
    with open(path) as f:
        table = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        for r in table:
            match = LABEL.match(r["label"])
            if not match:
                continue
            kind, ta, tb = match.group(1), match.group(2), match.group(3)
            m, n, k = (max(1, int(match.group(i)) // scale) for i in (4, 5, 6))
            batch = int(match.group(7) or 1)
            a, b = operands(m, n, k, ta, tb, batch, dtype, device)
            ms = timer.ms(lambda: torch.matmul(a, b))
            flops = 2.0 * m * n * k * batch
            rows.append({"label": r["label"], "calls": int(r["calls"]),
                         "trident_mean_us": float(r["mean_us"]), "torch_mean_us": 1e3 * ms,
                         "torch_tflops": flops / (ms * 1e-3) / 1e12})
    return rows


def attention(timer, device, dtype, B, NH, T, HS):
    q, k, v = (torch.randn(B, NH, T, HS, dtype=dtype, device=device, requires_grad=True)
               for _ in range(3))
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()

    def forward():
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v

    def both():
        forward().sum().backward()

    with torch.no_grad():
        fwd = timer.ms(forward)
    return fwd, timer.ms(both), "sdpa" if sdpa is not None else "written out"


def attention_rows(path, fwd_ms, both_ms):
    """The profile's cuDNN attention labels at SDPA's times (one call: one layer at the check's
    shape)."""
    # Timing noise on a tiny host shape can put forward above forward + backward.
    per_call = {"attention_cudnn_forward": fwd_ms,
                "attention_cudnn_backward": max(both_ms - fwd_ms, 1e-6)}
    rows = []
    with open(path) as f:
        table = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        for r in table:
            ms = per_call.get(r["label"])
            if ms is None or int(r["calls"]) == 0:
                continue
            rows.append({"label": r["label"], "calls": int(r["calls"]),
                         "trident_mean_us": float(r["mean_us"]), "torch_mean_us": 1e3 * ms,
                         "torch_tflops": float("nan")})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", help="a trident profile table whose GEMM labels to time")
    ap.add_argument("--out", help="the GEMM labels' times as TSV")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="shapes divided by 64 (a host smoke test)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_ceilings: error: torch sees no CUDA device")
    torch.manual_seed(7)
    scale = 64 if args.quick else 1
    dtype = torch.bfloat16
    timer = Timer(device, args.repeats)

    n = (1 << 30) // 2 // scale  # 1 GiB of bf16
    src = torch.empty(n, dtype=dtype, device=device)
    dst = torch.empty_like(src)
    ms = timer.ms(lambda: dst.copy_(src))
    print(f"ceiling_copy_gbs={2 * 2 * n / (ms * 1e-3) / 1e9:.4g}")

    size = 8192 // scale
    a, b = operands(size, size, size, "N", "N", 1, dtype, device)
    ms = timer.ms(lambda: torch.matmul(a, b))
    # Four significant digits, not fixed decimals: a slow host (a bf16 GEMM without AVX512-BF16)
    # measures under 0.005 TFLOP/s, which two decimals print as 0.00.
    print(f"ceiling_gemm8192_tflops={2.0 * size ** 3 / (ms * 1e-3) / 1e12:.4g}")

    fwd, both, how = attention(timer, device, dtype, 16 // min(scale, 16), 12, 1024 // scale, 64)
    print(f'ceiling_attention_kind="{how}"')
    print(f"ceiling_attention_fwd_ms={fwd:.3f}")
    print(f"ceiling_attention_fwd_bwd_ms={both:.3f}")

    if args.profile:
        rows = gemm_rows(args.profile, timer, dtype, device, scale)
        if not rows:
            sys.exit(f"gpu_ceilings: error: no GEMM label in {args.profile}")
        trident_ms = sum(r["calls"] * r["trident_mean_us"] for r in rows) / 1e3
        torch_ms = sum(r["calls"] * r["torch_mean_us"] for r in rows) / 1e3
        print(f"ceiling_gemm_labels={len(rows)}")
        print(f"ceiling_gemm_labels_trident_ms={trident_ms:.3f}")
        print(f"ceiling_gemm_labels_torch_ms={torch_ms:.3f}")
        rows += attention_rows(args.profile, fwd, both)
        if args.out:
            with open(args.out, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
                w.writeheader()
                for r in rows:
                    w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})


if __name__ == "__main__":
    main()
