# Rebuilds trident's Llama in PyTorch from dump_reference's HDF5 file and checks loss, logits,
# every parameter gradient and 10 AdamW steps against it, and trident's bf16 loss and gradients
# against torch.autocast(bf16); exits 1 naming any tensor that differs.
"""Usage: torch_llama.py REFERENCE.h5

The model is written from the Llama definition (Hugging Face LlamaForCausalLM: RMSNorm,
rotate-half RoPE, grouped-query attention, SwiGLU, no biases), not from trident's code; only
the parameter names and the packing of q | kv and gate | up follow trident's layout. A Mixture
of Experts config (n_experts > 0) puts Hugging Face's Mixtral sparse-MoE block on its MoE
layers, and its balancing losses in the objective (SparseMoe).

trident computes in float32. The reference runs the same parameters and batch in float64 (the
"truth" every tolerance below is measured against) and in float32 (printed next to trident's
error: it shows how far a correct float32 implementation lands from float64 on this input, so
a trident error far above that column points at a bug rather than rounding).

Error measure for a tensor: max |trident - ref| / max |ref| (max-abs difference normalised by
the reference's max-abs value), as in torch_gpt.py.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_harness import Tolerances, attr, fail_now, load_params, main  # noqa: E402

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

TOLERANCES = Tolerances(loss=TOL_LOSS, logits=TOL_LOGITS, grad=TOL_GRAD, adam_loss=TOL_ADAM_LOSS,
                        adam_param=TOL_ADAM_PARAM, bf16_loss=TOL_BF16_LOSS,
                        bf16_grad=TOL_BF16_GRAD, bf16_truth_ratio=BF16_TRUTH_RATIO)


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


class ExpertStack(nn.Module):
    """Every expert's copy of one projection, stacked along a leading expert dimension."""

    def __init__(self, E, rows, cols):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, rows, cols))


class SparseMoe(nn.Module):
    """Hugging Face's MixtralSparseMoeBlock: a softmax router over all experts (computed in
    float32 or wider, outside autocast, as trident's router), the top-k probabilities
    renormalised, each token's chosen experts' SwiGLU outputs summed with those weights.
    Parameters in trident's layout: router [E, C] (Mixtral's gate), experts.fc [E, 2F, C]
    (each expert's w1 rows, then its w3 rows), experts.proj [E, C, F] (w2). The balancing
    losses: Hugging Face's load_balancing_loss_func on this group divided by k (trident's
    convention, docs/moe.md), and the z-loss mean logsumexp(logits)^2. With `shared` > 0, DeepSeek's
    shared experts: one SwiGLU MLP of shared x hidden that every token runs, added to the output
    (moe.shared.fc and moe.shared.proj)."""

    def __init__(self, C, E, k, hidden, shared=0):
        super().__init__()
        self.E, self.k, self.hidden = E, k, hidden
        self.router = nn.Linear(C, E, bias=False)
        self.experts = nn.ModuleDict({"fc": ExpertStack(E, 2 * hidden, C),
                                      "proj": ExpertStack(E, C, hidden)})
        if shared > 0:
            self.shared = SwiGlu(C, shared * hidden)
        self.aux = self.z = None
        self.forced = None  # [N, k] experts to route to instead of the top-k (see build)

    def forward(self, x):
        B, T, C = x.shape
        flat = x.reshape(B * T, C)
        wide = torch.float64 if flat.dtype == torch.float64 else torch.float32
        with torch.autocast("cpu", enabled=False):
            logits = flat.to(wide) @ self.router.weight.to(wide).t()
        probs = logits.softmax(dim=-1)
        weights, chosen = probs.topk(self.k, dim=-1)
        if self.forced is not None:
            chosen = self.forced
            weights = probs.gather(1, chosen)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros(B * T, C, dtype=torch.float32 if torch.is_autocast_cpu_enabled()
                          else flat.dtype)
        if hasattr(self, "shared"):
            out = out + self.shared(flat).to(out.dtype)
        for e in range(self.E):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            gate, up = (flat[token] @ self.experts["fc"].weight[e].t()).split(self.hidden, -1)
            y = (F.silu(gate) * up) @ self.experts["proj"].weight[e].t()
            out = out.index_add(0, token, (y * weights[token, slot, None].to(y.dtype)).to(out.dtype))
        mask = F.one_hot(chosen, self.E).to(probs.dtype)  # [N, k, E]
        hf_aux = self.E * (mask.mean(dim=0) * probs.mean(dim=0)[None, :]).sum()
        self.aux = hf_aux / self.k
        self.z = torch.logsumexp(logits, dim=-1).pow(2).mean()
        return out.view(B, T, C).to(x.dtype)


class Block(nn.Module):
    def __init__(self, C, NH, KVH, hidden, theta, eps, moe=None):
        super().__init__()
        self.ln_1 = RMSNorm(C, eps)
        self.attn = Attention(C, NH, KVH, theta)
        self.ln_2 = RMSNorm(C, eps)
        if moe is None:
            self.mlp = SwiGlu(C, hidden)
        else:
            self.moe = SparseMoe(C, *moe)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + (self.mlp if hasattr(self, "mlp") else self.moe)(self.ln_2(x))


class Llama(nn.Module):
    """moe: None, or (E, k, expert width, every, aux coefficient, z coefficient, shared experts):
    layer l holds a SparseMoe when l % every == 0, and extra_loss is the coefficients times the sums of its
    blocks' balancing losses (the objective trident's backward differentiates)."""

    def __init__(self, L, C, NH, KVH, hidden, V, theta, eps, tied, moe=None):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.moe_coeffs = moe[4:6] if moe else None
        self.h = nn.ModuleList(
            Block(C, NH, KVH, hidden, theta, eps,
                  moe[:3] + moe[6:] if moe and layer % moe[3] == 0 else None)
            for layer in range(L))
        self.ln_f = RMSNorm(C, eps)
        self.lm_head = None if tied else nn.Linear(C, V, bias=False)
        self.extra_loss = None

    def forward(self, idx):
        x = self.wte(idx)
        for block in self.h:
            x = block(x)
        if self.moe_coeffs:
            aux_coeff, z_coeff = self.moe_coeffs
            moes = [b.moe for b in self.h if hasattr(b, "moe")]
            self.extra_loss = (aux_coeff * sum(m.aux for m in moes)
                               + z_coeff * sum(m.z for m in moes))
        x = self.ln_f(x)
        return x @ self.wte.weight.t() if self.lm_head is None else self.lm_head(x)


def trident_name(torch_name):
    """trident's global parameter name for a torch parameter name (they agree but for wte and
    lm_head, which trident names without ".weight")."""
    if torch_name in ("wte.weight", "lm_head.weight"):
        return torch_name[: -len(".weight")]
    return torch_name


def build(f, dtype, group="params"):
    """The model with `group`'s parameters. For the bf16 group of a Mixture of Experts, its MoE
    blocks route as trident's bf16 run did (bf16/moe_choice): a token within bf16 rounding of a
    tie may route either way, and the comparison is of the arithmetic under one routing (the
    fp32 comparison checks the routing itself against the float64 truth)."""
    family = f.attrs.get("family")
    if family != "llama":
        fail_now(f"family is {family!r}, not 'llama' (torch_gpt.py checks GPT-2)")
    moe = None
    if attr(f, "n_experts") > 0:
        moe = (attr(f, "n_experts"), attr(f, "top_k"), attr(f, "expert_ffn_hidden"),
               attr(f, "moe_layer_every"), float(attr(f, "aux_loss_coeff")),
               float(attr(f, "z_loss_coeff")), attr(f, "n_shared_experts"))
    model = Llama(attr(f, "n_layer"), attr(f, "n_embd"), attr(f, "n_head"), attr(f, "n_kv_head"),
                  attr(f, "ffn_hidden"), attr(f, "vocab_size"), float(attr(f, "rope_theta")),
                  float(attr(f, "norm_eps")), bool(attr(f, "tie_embeddings")), moe).to(dtype)
    if group == "bf16/params" and "bf16/moe_choice" in f:
        choices = torch.from_numpy(f["bf16/moe_choice"][()].astype(np.int64))
        moes = [b.moe for b in model.h if hasattr(b, "moe")]
        if len(moes) != choices.shape[0]:
            fail_now(f"bf16/moe_choice holds {choices.shape[0]} MoE blocks, the model {len(moes)}")
        for moe_block, chosen in zip(moes, choices):
            moe_block.forced = chosen.reshape(-1, chosen.shape[-1])
    return load_params(f, group, model, dtype, trident_name)


if __name__ == "__main__":
    # strict: the grads, params_after and bf16/grads groups must hold exactly the model's
    # tensors, and out/losses10 one loss per AdamW step.
    sys.exit(main(__doc__, build, trident_name, TOLERANCES, strict=True))
