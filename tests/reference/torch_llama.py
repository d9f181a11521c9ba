# Rebuilds trident's Llama in PyTorch from dump_reference's HDF5 file and checks loss, logits,
# every parameter gradient and 10 AdamW steps against it, and trident's bf16 loss and gradients
# against torch.autocast(bf16); exits 1 naming any tensor that differs.
"""Usage: torch_llama.py REFERENCE.h5

The model is written from the Llama definition (Hugging Face LlamaForCausalLM: RMSNorm,
rotate-half RoPE, grouped-query attention, SwiGLU, no biases), not from trident's code; only
the parameter names and the packing of q | kv and gate | up follow trident's layout.

trident computes in float32. The reference runs the same parameters and batch in float64 (the
"truth" every tolerance below is measured against) and in float32 (printed next to trident's
error: it shows how far a correct float32 implementation lands from float64 on this input, so
a trident error far above that column points at a bug rather than rounding).

Error measure for a tensor: max |trident - ref| / max |ref| (max-abs difference normalised by
the reference's max-abs value), as in torch_gpt.py.
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

# Tolerances, each on the error measure above (trident fp32 vs torch fp64), with torch_gpt.py's
# margins: 8x or more over trident's measured error, 3x or more over the torch float32 column.
# Measured on llama-tiny (4 layers, C = 32, 4 query / 2 kv heads, F = 88, untied head) with
# dump_reference's spread parameters (OpenBLAS, Kokkos Serial): trident / torch-fp32 errors in
# brackets.
# For scale: RoPE rotating the other way, GPT-J RoPE (interleaved pairs instead of halves), no
# RoPE, query head h reading kv head h % KVH instead of h // (NH/KVH), k and v halves of
# attn.kv swapped, or gate and up swapped each give logits 1.1 to 1.3, gradients 1.3 to 2.5 and
# the loss 1.8e-2 to 5.1e-2; RMSNorm's eps added outside the square root gives logits 8.0e-4,
# gradients 1.5e-3 and the loss 9.5e-6.
TOL_LOSS = 1e-6  # |loss - ref| / |ref|  [1.0e-8 / 6.3e-8]
TOL_LOGITS = 2e-5  # [1.6e-6 / 1.4e-6]
TOL_GRAD = 2e-5  # [<= 1.7e-6 / <= 2.1e-6 over all 31 tensors]
# The mean loss before each of the 10 AdamW steps, absolute (a float32 loss between 3 and 6.4 is
# quantised at 2.4e-7 to 4.8e-7). Getting the weight-decay set wrong (no decay, or decay on
# everything) moves the loss by 3e-5 to 8e-5 after one step.
TOL_ADAM_LOSS = 2e-6  # [<= 1.9e-7 / <= 5.6e-7]
# The parameters after the 10 steps, as max |trident - ref| / lr (in units of one step size);
# see torch_gpt.py for why Adam turns gradient rounding into step-sized errors (the worst here,
# in both columns, is the last layer's mlp.proj). No parameter has an identically zero gradient,
# so none is excluded; but an element whose gradient is by chance at rounding level fails both
# columns (with n_kv_head = 1, one gate weight's gradient is 7e-9 against 2e-2 in its row, and
# both columns are 0.5 steps off there). A wrong decay set moves wte by 0.12 (decay on
# everything) to 0.85 (none) step sizes and an RMSNorm gain by up to 1.2.
TOL_ADAM_PARAM = 0.02  # [<= 1.6e-3 / <= 2.7e-3]
# bf16 compute (group "bf16") against torch's float32 model on the same bf16-rounded parameters
# under torch.autocast("cpu", bfloat16), as in torch_gpt.py: autocast runs the matmuls and RoPE
# in bf16 and keeps RMSNorm, softmax and the loss in float32; trident rounds every op's output.
# Measured: loss 1.2e-4 apart (trident 1.4e-5, autocast 1.3e-4 from the fp64 truth); gradients
# at most 4.3e-2 apart, trident at most 3.6e-2 and autocast 5.9e-2 from the truth, so two
# correct bf16 runs land about that far apart. The structural bugs above move the bf16 loss by
# 1.8e-2 or more and the bf16 gradients by 1.3 or more. As in torch_gpt.py, trident's worst
# gradient may be at most BF16_TRUTH_RATIO times as far from the truth as autocast's.
TOL_BF16_LOSS = 2e-3
TOL_BF16_GRAD = 1e-1
BF16_TRUTH_RATIO = 2.0


def attr(f, name):
    v = f.attrs[name]
    return v.item() if hasattr(v, "item") else v


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_table(T, HS, theta, dtype):
    """cos and sin [T, HS] for positions 0..T-1, built in float64 (as trident's table) and
    rounded to `dtype`, the activations' (as HF does, which under autocast means bf16)."""
    inv_freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)  # [HS/2]
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angle = torch.cat((angle, angle), dim=-1)
    return angle.cos().to(dtype), angle.sin().to(dtype)


class Attention(nn.Module):
    def __init__(self, C, NH, KVH, theta):
        super().__init__()
        self.NH, self.KVH, self.HS, self.theta = NH, KVH, C // NH, theta
        # q rows: query heads in order, HS rows each; kv rows: k_proj's KVH heads, then v_proj's.
        self.q = nn.Linear(C, NH * self.HS, bias=False)
        self.kv = nn.Linear(C, 2 * KVH * self.HS, bias=False)
        self.proj = nn.Linear(NH * self.HS, C, bias=False)  # o_proj

    def forward(self, x):
        B, T, _ = x.shape
        NH, KVH, HS = self.NH, self.KVH, self.HS
        q = self.q(x).view(B, T, NH, HS).transpose(1, 2)  # [B, NH, T, HS]
        k, v = self.kv(x).split(KVH * HS, dim=2)
        k = k.reshape(B, T, KVH, HS).transpose(1, 2)  # [B, KVH, T, HS]
        v = v.reshape(B, T, KVH, HS).transpose(1, 2)
        cos, sin = rope_table(T, HS, self.theta, q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Grouped-query attention: query head h reads kv head h // (NH / KVH).
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HS)
        return self.proj(y)


class SwiGlu(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.hidden = hidden
        self.fc = nn.Linear(C, 2 * hidden, bias=False)  # rows: gate_proj, then up_proj
        self.proj = nn.Linear(hidden, C, bias=False)  # down_proj

    def forward(self, x):
        gate, up = self.fc(x).split(self.hidden, dim=-1)
        return self.proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, C, NH, KVH, hidden, theta, eps):
        super().__init__()
        self.ln_1 = RMSNorm(C, eps)
        self.attn = Attention(C, NH, KVH, theta)
        self.ln_2 = RMSNorm(C, eps)
        self.mlp = SwiGlu(C, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Llama(nn.Module):
    def __init__(self, L, C, NH, KVH, hidden, V, theta, eps, tied):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.h = nn.ModuleList(Block(C, NH, KVH, hidden, theta, eps) for _ in range(L))
        self.ln_f = RMSNorm(C, eps)
        self.lm_head = None if tied else nn.Linear(C, V, bias=False)

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return x @ self.wte.weight.t() if self.lm_head is None else self.lm_head(x)


def trident_name(torch_name):
    """trident's global parameter name for a torch parameter name (they agree but for wte and
    lm_head, which trident names without ".weight")."""
    if torch_name in ("wte.weight", "lm_head.weight"):
        return torch_name[: -len(".weight")]
    return torch_name


def same_names(f, group, model):
    """Fails unless HDF5 group `group` holds exactly the model's parameters."""
    stored = set(f[group].keys())
    ours = {trident_name(n) for n, _ in model.named_parameters()}
    if stored != ours:
        fail_now(f"{group}: tensor sets differ: only in trident {sorted(stored - ours)}, "
                 f"only in torch {sorted(ours - stored)}")


def build(f, dtype, group="params"):
    family = f.attrs.get("family")
    if family != "llama":
        fail_now(f"family is {family!r}, not 'llama' (torch_gpt.py checks GPT-2)")
    model = Llama(attr(f, "n_layer"), attr(f, "n_embd"), attr(f, "n_head"), attr(f, "n_kv_head"),
                  attr(f, "ffn_hidden"), attr(f, "vocab_size"), float(attr(f, "rope_theta")),
                  float(attr(f, "norm_eps")), bool(attr(f, "tie_embeddings"))).to(dtype)
    same_names(f, group, model)
    with torch.no_grad():
        for n, p in model.named_parameters():
            data = f[group][trident_name(n)][()]
            if tuple(data.shape) != tuple(p.shape):
                fail_now(f"{trident_name(n)}: trident shape {data.shape}, torch {tuple(p.shape)}")
            p.copy_(torch.from_numpy(data).to(dtype))
    return model


def decays(name, p):
    """Matrices (every Linear weight, the embedding and the head) decay; RMSNorm gains do not.
    trident's table (src/model/params.cpp) must agree."""
    return p.dim() >= 2


def fail_now(msg):
    print(f"torch_llama.py: FAIL: {msg}")
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
    m64 = build(f, torch.float64, "bf16/params")
    same_names(f, "bf16/grads", m64)
    loss64, _, grads64 = loss_and_grads(m64, idx, tgt)
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
        same_names(f, "grads", m64)
        same_names(f, "params_after", m64)

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
        if len(losses_tr) != len(losses64):
            failures.append(f"out/losses10: {len(losses_tr)} losses, expected {len(losses64)}")
        for s in range(min(len(losses64), len(losses_tr))):
            check(f"adamw loss step {s}", f"{losses64[s]:.6f}", abs(losses_tr[s] - losses64[s]),
                  abs(losses32[s] - losses64[s]), TOL_ADAM_LOSS)
        lr = attr(f, "lr")
        for name in f["params"].keys():
            p_tr, p64, p32 = f["params_after"][name][()], after64[name], after32[name]
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
            print(f"torch_llama.py: FAIL: {msg}")
        return 1
    print("torch_llama.py: all tensors within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
