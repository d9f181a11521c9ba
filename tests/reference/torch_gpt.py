# Rebuilds trident's GPT-2 in PyTorch from dump_reference's HDF5 file and checks loss, logits,
# every parameter gradient and 10 AdamW steps against it, and trident's bf16 loss and gradients
# against torch.autocast(bf16); exits 1 naming any tensor that differs.
"""Usage: torch_gpt.py REFERENCE.h5

trident computes in float32. The reference runs the same parameters and batch in float64 (the
"truth" every tolerance below is measured against) and in float32 (printed next to trident's
error: it shows how far a correct float32 implementation lands from float64 on this input, so
a trident error far above that column points at a bug rather than rounding).

Error measure for a tensor: max |trident - ref| / max |ref| (max-abs difference normalised by
the reference's max-abs value). Normalising by the tensor's largest entry rather than element
by element keeps near-zero entries (whose relative error is meaningless) from dominating; a
real bug (wrong index, missing term, wrong scale, a different GELU) moves the largest entries
and gives errors far above the tolerances (see the examples next to them).
"""
import math
import sys

# A missing torch or h5py is a failure, not a skip: `make test` installs both (Debian's
# python3-torch and python3-h5py), so their absence means the set-up is broken.
import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Tolerances, each on the error measure above (trident fp32 vs torch fp64). The input is fixed,
# so the errors are deterministic for a given BLAS; the margins (8x or more over trident's
# measured error, 3x or more over the torch float32 column) cover other backends' summation
# orders (cuBLAS, threaded BLAS), which a correct float32 code keeps within that column's
# spread. Measured on the tiny model with dump_reference's spread parameters (OpenBLAS, Kokkos
# Serial): trident / torch-fp32 errors in brackets.
# For scale: erf GELU instead of tanh gives logits 3e-4, gradients >= 4e-4; a missing
# 1/sqrt(HS) attention scale gives logits 0.6.
# float32's unit roundoff is 6e-8; the forward chains ~10 reductions of length <= 4C = 128 and a
# log-sum-exp over V = 256. trident sums the per-token losses in double, hence its small error.
TOL_LOSS = 1e-6  # |loss - ref| / |ref|  [1.5e-8 / 2.3e-8]
TOL_LOGITS = 5e-6  # [6.5e-7 / 5.7e-7]
# Gradients add the backward chain and sums over N = B*T = 64 rows (weight and bias gradients,
# the scatter into wte/wpe), about doubling the forward's error.
TOL_GRAD = 1e-5  # [<= 1.3e-6 / <= 1.2e-6 over all 28 tensors]
# The mean loss before each of the 10 AdamW steps, absolute. A float32 loss near 5 is quantised
# at 4.8e-7 (one ulp), which is what the torch fp32 column shows. Getting the weight-decay set
# wrong (no decay, or decay on everything) moves the loss by 7e-5 to 1e-4 after one step.
TOL_ADAM_LOSS = 2e-6  # [<= 1.3e-7 / <= 6.1e-7]
# The parameters after the 10 steps, as max |trident - ref| / lr (in units of one step size).
# Adam divides each gradient element by its running RMS, so an element whose gradient is small
# next to float32 rounding takes steps partly set by the rounding, and the relative error of
# the gradient becomes an absolute error in step units. The key bias, whose gradient is exactly
# zero, is excluded below (there both columns are ~1.9 steps). A wrong decay set (none, or on
# everything) moves wte by 0.08 to 0.84 step sizes and a LayerNorm gain by 1.0.
TOL_ADAM_PARAM = 0.02  # [<= 5.0e-4 / <= 4.0e-4]
# bf16 compute (group "bf16": the same batch on the parameters rounded to bf16) against torch's
# float32 model on the same parameters under torch.autocast("cpu", bfloat16), on the same error
# measure. Both round to bf16 (unit roundoff 3.9e-3) in different places (trident rounds every
# op's output; autocast runs the matmuls in bf16 and keeps LayerNorm, softmax and the loss in
# float32), so they agree to a few bf16 roundings, not to float32's. Their distances to the fp64
# truth on the same parameters are printed beside them. For scale: a missing 1/sqrt(HS) or a
# dropped bias moves the loss by far more than TOL_BF16_LOSS.
# Measured (OpenBLAS, Kokkos OpenMP): loss 1.4e-4 apart, gradients at most 2.7e-2 apart; each is
# 1.7e-2 from the fp64 truth at worst. And trident's worst gradient may be at most
# BF16_TRUTH_RATIO times as far from the truth as autocast's: rounding more than a bf16 run
# should (fp16's range, a gradient rounded twice) shows there first.
TOL_BF16_LOSS = 2e-3
TOL_BF16_GRAD = 6e-2
BF16_TRUTH_RATIO = 2.0


def attr(f, name):
    v = f.attrs[name]
    return v.item() if hasattr(v, "item") else v


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.C, self.NH = C, NH
        # Output columns q | k | v; within each third, head h at columns h*HS..(h+1)*HS.
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        NH, HS = self.NH, C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, NH, HS).transpose(1, 2)  # [B, NH, T, HS]
        k = k.view(B, T, NH, HS).transpose(1, 2)
        v = v.view(B, T, NH, HS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.fc = nn.Linear(C, 4 * C)
        self.proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = CausalSelfAttention(C, NH)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = Mlp(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, L, C, NH, V, block_size):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(block_size, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # output projection tied to wte


def trident_name(torch_name):
    """trident's global parameter name for a torch parameter name (they agree but for wte/wpe)."""
    if torch_name in ("wte.weight", "wpe.weight"):
        return torch_name[: -len(".weight")]
    return torch_name


def build(f, dtype, group="params"):
    model = Gpt(attr(f, "n_layer"), attr(f, "n_embd"), attr(f, "n_head"), attr(f, "vocab_size"),
                attr(f, "block_size")).to(dtype)
    stored = set(f[group].keys())
    ours = {trident_name(n) for n, _ in model.named_parameters()}
    if stored != ours:
        fail_now(f"parameter sets differ: only in trident {sorted(stored - ours)}, "
                 f"only in torch {sorted(ours - stored)}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            data = f[group][trident_name(n)][()]
            if tuple(data.shape) != tuple(p.shape):
                fail_now(f"{trident_name(n)}: trident shape {data.shape}, torch {tuple(p.shape)}")
            p.copy_(torch.from_numpy(data).to(dtype))
    return model


def decays(name, p):
    """The usual GPT-2 rule: matrices (every Linear weight and both embeddings) decay; biases
    and LayerNorm gains do not. trident's table (src/model/params.cpp) must agree."""
    return p.dim() >= 2


def fail_now(msg):
    print(f"torch_gpt.py: FAIL: {msg}")
    sys.exit(1)


def rel_err(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.abs(ref).max()
    diff = np.abs(a - ref).max()
    return diff / scale if scale > 0 else diff


def loss_and_grads(model, idx, tgt, autocast=False):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(idx)
        flat = logits.view(-1, logits.shape[-1])
        loss = F.cross_entropy(flat.float() if autocast else flat, tgt.view(-1))
    loss.backward()
    grads = {trident_name(n): p.grad.detach().double().numpy() for n, p in model.named_parameters()}
    return loss.item(), logits.detach().double().view(-1, logits.shape[-1]).numpy(), grads


def adam_run(f, dtype, idx, tgt):
    """The 10-step AdamW run on one batch; returns the losses before each update and the final
    parameters."""
    model = build(f, dtype)
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decays(n, p)], "weight_decay": attr(f, "weight_decay")},
        {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=attr(f, "lr"), betas=(attr(f, "beta1"), attr(f, "beta2")),
                            eps=attr(f, "eps"), foreach=False)
    losses = []
    for _ in range(attr(f, "adam_steps")):
        opt.zero_grad(set_to_none=True)
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))
        loss.backward()
        losses.append(loss.item())
        opt.step()
    params = {trident_name(n): p.detach().double().numpy() for n, p in named}
    return np.array(losses), params


def check_bf16(f, idx, tgt, check):
    """trident's bf16 loss and gradients against torch autocast bf16 on the same bf16-rounded
    parameters; the 'torch fp32' column holds instead autocast's distance to the fp64 truth."""
    loss64, _, grads64 = loss_and_grads(build(f, torch.float64, "bf16/params"), idx, tgt)
    loss_ac, _, grads_ac = loss_and_grads(build(f, torch.float32, "bf16/params"), idx, tgt,
                                          autocast=True)
    loss_tr = float(f["bf16/loss"][()])
    print(f"bf16: loss trident {loss_tr:.6f}, torch autocast {loss_ac:.6f}, fp64 {loss64:.6f}; "
          f"trident vs fp64 {abs(loss_tr - loss64) / abs(loss64):.3e}")
    check("bf16 loss (vs autocast)", "[]", abs(loss_tr - loss_ac) / abs(loss_ac),
          abs(loss_ac - loss64) / abs(loss64), TOL_BF16_LOSS)
    worst_truth = 0.0
    for name in f["bf16/grads"].keys():
        g = f["bf16/grads"][name][()]
        worst_truth = max(worst_truth, rel_err(g, grads64[name]))
        check(f"bf16 grad {name} (vs autocast)", str(list(g.shape)), rel_err(g, grads_ac[name]),
              rel_err(grads_ac[name], grads64[name]), TOL_BF16_GRAD)
    worst_ac = max(rel_err(grads_ac[n], grads64[n]) for n in grads64)
    check("bf16 worst grad (vs fp64)", "max", worst_truth, worst_ac, BF16_TRUTH_RATIO * worst_ac)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    torch.set_num_threads(1)  # deterministic, and the test machines are shared
    failures = []
    rows = []

    def check(name, shape, err, err32, tol):
        ok = err <= tol
        rows.append((name, shape, err, err32, tol, ok))
        if not ok:
            failures.append(f"{name}: error {err:.3e} > tolerance {tol:.0e}")

    with h5py.File(sys.argv[1], "r") as f:
        idx = torch.from_numpy(f["batch/inputs"][()].astype(np.int64))
        tgt = torch.from_numpy(f["batch/targets"][()].astype(np.int64))
        m64, m32 = build(f, torch.float64), build(f, torch.float32)

        # The weight-decay sets must agree before the AdamW comparison means anything.
        for n, p in m64.named_parameters():
            theirs = bool(f["params"][trident_name(n)].attrs["weight_decay"])
            if theirs != decays(n, p):
                failures.append(f"{trident_name(n)}: trident weight_decay={theirs}, "
                                f"reference expects {decays(n, p)}")

        loss64, logits64, grads64 = loss_and_grads(m64, idx, tgt)
        loss32, logits32, grads32 = loss_and_grads(m32, idx, tgt)
        loss_tr = float(f["out/loss"][()])
        check("loss", "[]", abs(loss_tr - loss64) / abs(loss64), abs(loss32 - loss64) / abs(loss64),
              TOL_LOSS)
        check("logits", str(list(logits64.shape)), rel_err(f["out/logits"][()], logits64),
              rel_err(logits32, logits64), TOL_LOGITS)
        for name in f["params"].keys():  # HDF5 order; the table order is not needed here
            g = f["grads"][name][()]
            check(f"grad {name}", str(list(g.shape)), rel_err(g, grads64[name]),
                  rel_err(grads32[name], grads64[name]), TOL_GRAD)

        check_bf16(f, idx, tgt, check)

        losses64, after64 = adam_run(f, torch.float64, idx, tgt)
        losses32, after32 = adam_run(f, torch.float32, idx, tgt)
        losses_tr = f["out/losses10"][()]
        for s in range(len(losses64)):
            check(f"adamw loss step {s}", f"{losses64[s]:.6f}", abs(losses_tr[s] - losses64[s]),
                  abs(losses32[s] - losses64[s]), TOL_ADAM_LOSS)
        lr, C = attr(f, "lr"), attr(f, "n_embd")
        for name in f["params"].keys():
            p_tr, p64, p32 = f["params_after"][name][()], after64[name], after32[name]
            if name.endswith("attn.qkv.bias"):
                # The key bias adds q.b_k to every score of a query, which the softmax cancels:
                # its gradient is exactly zero, float32 rounding leaves ~1e-10, and Adam turns
                # that noise into full steps of random sign. Compare the q and v thirds only.
                keep = np.r_[0:C, 2 * C:3 * C]
                p_tr, p64, p32 = p_tr[keep], p64[keep], p32[keep]
            err = np.abs(p_tr - p64).max() / lr
            err32 = np.abs(p32 - p64).max() / lr
            check(f"adamw param {name}", str(list(p64.shape)), err, err32, TOL_ADAM_PARAM)

    width = max(len(r[0]) for r in rows)
    print("trident (fp32) vs torch fp64; 'torch fp32' = torch float32 vs float64 on the same input;"
          " bf16 rows: trident bf16 vs torch autocast bf16, 'torch fp32' = autocast vs fp64")
    print(f"{'tensor':<{width}}  {'shape/value':>12}  {'trident err':>11}  {'torch fp32':>11}"
          f"  {'tolerance':>9}  result")
    for name, shape, err, err32, tol, ok in rows:
        print(f"{name:<{width}}  {shape:>12}  {err:11.3e}  {err32:11.3e}  {tol:9.0e}  "
              f"{'ok' if ok else 'FAIL'}")
    grad_errs = [r[2] for r in rows if r[0].startswith("grad ")]
    print(f"summary: loss {rows[0][2]:.3e}, logits {rows[1][2]:.3e}, gradients max "
          f"{max(grad_errs):.3e} (median {float(np.median(grad_errs)):.3e}) over "
          f"{len(grad_errs)} tensors")
    if failures:
        for msg in failures:
            print(f"torch_gpt.py: FAIL: {msg}")
        return 1
    print("torch_gpt.py: all tensors within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
