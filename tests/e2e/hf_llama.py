# Tiny LlamaForCausalLM and MixtralForCausalLM directories, hostile variants, a float64 forward, compares.
"""Usage:
  hf_llama.py make DIR [--dtype F32|BF16] [--shards N] [--tied] [--extras] [--seed S]
                       [--scale K]      matrices drawn K times wider (distinct greedy tokens)
                       [--experts E]    a MixtralForCausalLM instead: every MLP a sparse MoE block
                                        of E experts of width 88, top-2, softmax router
                       L=2, hidden 32, 4 heads, 2 key/value heads (grouped-query attention),
                       intermediate 88, vocab 256, 16 positions, rms_norm_eps 1e-5,
                       rope_theta 10000; an untied lm_head unless --tied. --extras adds what
                       checkpoints carry besides the parameters: each layer's
                       self_attn.rotary_emb.inv_freq, and with --tied a copy of the embedding
                       as lm_head.weight
  hf_llama.py logits DIR PROMPT   the next-token logits after PROMPT's bytes, one per line, by a
                                  float64 PyTorch LlamaForCausalLM written here from its
                                  definition (RMSNorm, rotate-half RoPE, grouped-query attention,
                                  SwiGLU; Mixtral's sparse MoE block: softmax over the experts,
                                  the top 2 renormalised), the context cut to the last max_position_embeddings
                                  tokens as trident generate does
  hf_llama.py greedy DIR PROMPT N the N tokens greedy decoding appends to PROMPT's bytes by the
                                  same forward, as hex; the smallest margin between the best and
                                  second-best logit on stderr
  hf_llama.py compare A B         every tensor of directory A equals B's byte for byte (names as
                                  they are; rotary_emb.inv_freq ignored, and lm_head.weight too
                                  when A's config ties it), and the config keys trident reads
                                  agree
  hf_llama.py hostile SRC OUT     variants of SRC (an untied F32 model, one model.safetensors)
                                  under OUT/<case>/; prints "<case>\t<text the error must
                                  contain>" per case

The safetensors files are written by hf_files.py's writer (from the format's specification), and
the forward from Hugging Face's modeling_llama definition, both independently of trident.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_files import (HostileCases, cli, decode, encode, greedy_decode, read_dir,  # noqa: E402
                      report, tensor_differences, write_dir)

L, C, NH, KVH, FF, V, T = 2, 32, 4, 2, 88, 256, 16
HS = C // NH


def llama_tensors(rng, scale=1.0, tied=False, experts=0):
    """LlamaForCausalLM's parameters in its state dict's order (MixtralForCausalLM's with
    experts > 0); Linear weights [out, in]."""
    def matrix(rows, cols):
        return rng.normal(0, 0.02 * scale, (rows, cols))

    t = {"model.embed_tokens.weight": matrix(V, C)}
    for layer in range(L):
        p = f"model.layers.{layer}."
        t[p + "self_attn.q_proj.weight"] = matrix(NH * HS, C)
        t[p + "self_attn.k_proj.weight"] = matrix(KVH * HS, C)
        t[p + "self_attn.v_proj.weight"] = matrix(KVH * HS, C)
        t[p + "self_attn.o_proj.weight"] = matrix(C, NH * HS)
        if experts:
            t[p + "block_sparse_moe.gate.weight"] = rng.normal(0, 0.5, (experts, C))
            for e in range(experts):
                q = f"{p}block_sparse_moe.experts.{e}."
                t[q + "w1.weight"] = matrix(FF, C)
                t[q + "w2.weight"] = matrix(C, FF)
                t[q + "w3.weight"] = matrix(FF, C)
        else:
            t[p + "mlp.gate_proj.weight"] = matrix(FF, C)
            t[p + "mlp.up_proj.weight"] = matrix(FF, C)
            t[p + "mlp.down_proj.weight"] = matrix(C, FF)
        t[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, C)
        t[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, C)
    t["model.norm.weight"] = 1 + rng.normal(0, 0.1, C)
    if not tied:
        t["lm_head.weight"] = matrix(V, C)
    return t


def config_json(dtype, tied=False, experts=0):
    if experts:
        return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": V,
                "hidden_size": C, "intermediate_size": FF, "num_hidden_layers": L,
                "num_attention_heads": NH, "num_key_value_heads": KVH, "head_dim": HS,
                "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                "hidden_act": "silu", "attention_dropout": 0.0, "initializer_range": 0.02,
                "num_local_experts": experts, "num_experts_per_tok": 2,
                "output_router_logits": False, "router_aux_loss_coef": 0.02,
                "router_jitter_noise": 0.0, "sliding_window": None, "bos_token_id": 1,
                "eos_token_id": 2, "tie_word_embeddings": tied,
                "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
            "hidden_size": C, "intermediate_size": FF, "num_hidden_layers": L,
            "num_attention_heads": NH, "num_key_value_heads": KVH, "head_dim": HS,
            "max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
            "attention_dropout": 0.0, "mlp_bias": False, "initializer_range": 0.02,
            "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": tied,
            "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}


def make(out, dtype="F32", shards=1, tied=False, extras=False, seed=0, scale=1.0, experts=0):
    os.makedirs(out, exist_ok=True)
    tensors = llama_tensors(np.random.default_rng(seed), scale, tied, experts)
    entries = [(k, dtype, v.shape, encode(v, dtype)) for k, v in tensors.items()]
    if extras:  # what older transformers saved besides the parameters
        inv_freq = 1.0 / 10000.0 ** (np.arange(0, HS, 2) / HS)
        for layer in range(L):
            entries.append((f"model.layers.{layer}.self_attn.rotary_emb.inv_freq", "F32",
                            inv_freq.shape, encode(inv_freq, "F32")))
        if tied:
            entries.append(("lm_head.weight", dtype, (V, C),
                            encode(tensors["model.embed_tokens.weight"], dtype)))
    write_dir(out, config_json(dtype, tied, experts), entries, shards, indent=2)


def forward(path):
    """A function from token ids to the last position's logits (float64 torch tensor)."""
    import torch

    cfg = json.load(open(os.path.join(path, "config.json")))
    w = {k: torch.from_numpy(decode(*v).copy()) for k, v in read_dir(path).items()
         if not k.endswith(".rotary_emb.inv_freq")}
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hidden = cfg["hidden_size"]
    hs = hidden // heads
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]

    def rms_norm(x, name):  # LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * weight
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[name]

    def linear(x, name):  # nn.Linear without bias: x @ W^T
        return x @ w[name].T

    def sparse_moe(h, p):
        # MixtralSparseMoeBlock: softmax over every expert's router logit, the top k of those
        # probabilities renormalised to sum to 1, each chosen expert's SwiGLU (w2(silu(w1 h) *
        # w3 h)) weighted by its probability and summed.
        probs = torch.softmax(linear(h, p + "gate.weight"), dim=-1)
        weights, chosen = torch.topk(probs, cfg["num_experts_per_tok"], dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(cfg["num_local_experts"]):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            q = f"{p}experts.{e}."
            y = linear(torch.nn.functional.silu(linear(h[token], q + "w1.weight")) *
                       linear(h[token], q + "w3.weight"), q + "w2.weight")
            out = out.index_add(0, token, y * weights[token, slot, None])
        return out

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def logits(ids):
        n = len(ids)
        x = w["model.embed_tokens.weight"][torch.tensor(ids)]
        inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
        freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()  # [n, hs]
        mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)
        for layer in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            h = rms_norm(x, p + "input_layernorm.weight")
            q = linear(h, p + "self_attn.q_proj.weight").view(n, heads, hs).transpose(0, 1)
            k = linear(h, p + "self_attn.k_proj.weight").view(n, kv_heads, hs).transpose(0, 1)
            v = linear(h, p + "self_attn.v_proj.weight").view(n, kv_heads, hs).transpose(0, 1)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            # repeat_kv: query head j reads key/value head j // (heads / kv_heads)
            k = k.repeat_interleave(heads // kv_heads, dim=0)
            v = v.repeat_interleave(heads // kv_heads, dim=0)
            att = torch.softmax(q @ k.transpose(1, 2) / hs ** 0.5 + mask, dim=-1)
            y = (att @ v).transpose(0, 1).reshape(n, heads * hs)
            x = x + linear(y, p + "self_attn.o_proj.weight")
            h = rms_norm(x, p + "post_attention_layernorm.weight")
            if cfg.get("model_type") == "mixtral":
                x = x + sparse_moe(h, p + "block_sparse_moe.")
                continue
            f = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj.weight")) * \
                linear(h, p + "mlp.up_proj.weight")
            x = x + linear(f, p + "mlp.down_proj.weight")
        return rms_norm(x, "model.norm.weight")[-1] @ head.T

    return logits, cfg["max_position_embeddings"]


def logits(path, prompt):
    fn, block = forward(path)
    context = list(prompt.encode()) or [ord("\n")]
    for value in fn(context[-block:]).tolist():
        print(f"{value:.17g}")
    return 0


def greedy(path, prompt, count):
    fn, block = forward(path)
    return greedy_decode(lambda ids: fn(ids).numpy(), block, prompt, count)


CONFIG_KEYS = {"model_type": None, "hidden_size": None, "intermediate_size": None,
               "num_attention_heads": None, "num_hidden_layers": None,
               "num_key_value_heads": None, "vocab_size": None, "max_position_embeddings": None,
               "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
               "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
               "rope_scaling": None, "num_local_experts": None, "num_experts_per_tok": None,
               "sliding_window": None}


def compare(a, b):
    ca = json.load(open(os.path.join(a, "config.json")))
    cb = json.load(open(os.path.join(b, "config.json")))
    tied = ca.get("tie_word_embeddings", False)

    def keep(t):
        return {k: v for k, v in t.items()
                if not k.endswith(".rotary_emb.inv_freq") and not (tied and k == "lm_head.weight")}
    ta, tb = keep(read_dir(a)), keep(read_dir(b))
    problems = tensor_differences(a, b, ta, tb)
    for key, default in CONFIG_KEYS.items():
        if ca.get(key, default) != cb.get(key, default):
            problems.append(f"config.json {key}: {ca.get(key, default)!r} vs "
                            f"{cb.get(key, default)!r}")
    return report(problems, f"{len(ta)} tensors and {len(CONFIG_KEYS)} config keys")


def hostile(src, out):
    """Each case: a copy of src with one thing wrong; prints the case and what the error names."""
    case = HostileCases(src, out, json.load(open(os.path.join(src, "config.json"))))
    entries = case.entries
    if case.config.get("model_type") == "mixtral":
        return hostile_mixtral(case)

    def without(name):
        return [e for e in entries if e[0] != name]

    def reshaped(name, shape):
        n = int(np.prod(shape)) * 4
        return [(k, d, shape, (b * 2)[:n]) if k == name else (k, d, s, b) for k, d, s, b in entries]

    k_proj = "model.layers.1.self_attn.k_proj.weight"
    case("k_proj_missing", f"tensor '{k_proj}' is missing", entries_=without(k_proj))
    head = "lm_head.weight"
    case("head_missing", f"tensor '{head}' is missing", entries_=without(head))
    # v_proj sized for 4 key/value heads (multi-head attention) where the config says 2.
    v_proj = "model.layers.0.self_attn.v_proj.weight"
    case("v_proj_kv_heads", f"tensor '{v_proj}' has shape [{NH * HS}, {C}], the config gives "
         f"[{KVH * HS}, {C}]", entries_=reshaped(v_proj, (NH * HS, C)))
    up = "model.layers.1.mlp.up_proj.weight"
    case("up_proj_transposed", f"tensor '{up}' has shape [{C}, {FF}]",
         entries_=reshaped(up, (C, FF)))
    extra = "model.layers.0.self_attn.q_proj.bias"
    case("extra_tensor", f"tensor '{extra}' is not a LlamaForCausalLM parameter",
         entries_=entries + [(extra, "F32", (C,), b"\0" * 4 * C)])
    prefixed = "model.embed_tokens.weight"
    case("gpt2_prefix", f"tensor '{prefixed}' is missing",
         entries_=[("transformer." + k if k == prefixed else k, d, s, b)
                   for k, d, s, b in entries])
    # Tensors consistent with 3 key/value heads, which do not divide the 4 query heads.
    kv3 = [(k, d, (3 * HS, C), (b * 2)[:4 * 3 * HS * C])
           if k.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")) else (k, d, s, b)
           for k, d, s, b in entries]
    case("kv_heads_not_dividing", "config.json: model.n_kv_head = 3 must divide model.n_head = 4", entries_=kv3,
         config=lambda c: c.update(num_key_value_heads=3))
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    case("q_proj_int32", f"tensor '{q_proj}' has dtype I32",
         override=lambda h: h[q_proj].update(dtype="I32"))
    case.overlap()
    case("rope_scaling", "rope_scaling",
         config=lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 2.0}))
    case("attention_bias", "attention_bias is set", config=lambda c: c.update(attention_bias=True))
    case("mlp_bias", "mlp_bias is set", config=lambda c: c.update(mlp_bias=True))
    case("gelu", "hidden_act 'gelu' is not silu", config=lambda c: c.update(hidden_act="gelu"))
    case("head_dim", "head_dim 16", config=lambda c: c.update(head_dim=16))
    case("no_layers_key", "num_hidden_layers must be a positive integer",
         config=lambda c: c.pop("num_hidden_layers"))
    case("eps_string", "rms_norm_eps must be a positive number",
         config=lambda c: c.update(rms_norm_eps="1e-5"))
    case("tied_head_differs", "lm_head.weight differs from model.embed_tokens.weight",
         config=lambda c: c.update(tie_word_embeddings=True))
    emb = dict((k, b) for k, _, _, b in entries)["model.embed_tokens.weight"]
    case("tied_head_bf16", "lm_head.weight differs from model.embed_tokens.weight",
         entries_=[(k, "BF16", s, encode(decode("F32", s, emb), "BF16")) if k == head
                   else (k, d, s, b) for k, d, s, b in entries],
         config=lambda c: c.update(tie_word_embeddings=True))
    case.print()


def hostile_mixtral(case):
    """A Mixtral directory's hostile cases: an expert missing, one too many, a router for another
    count of experts, and config keys trident cannot compute."""
    entries, E = case.entries, case.config["num_local_experts"]
    w2 = f"model.layers.1.block_sparse_moe.experts.{E - 1}.w2.weight"
    case("expert_missing", f"tensor '{w2}' is missing",
         entries_=[e for e in entries if e[0] != w2])
    extra = f"model.layers.0.block_sparse_moe.experts.{E}.w1.weight"
    w1 = [e for e in entries if e[0].endswith("experts.0.w1.weight")][0]
    case("expert_extra", f"tensor '{extra}' is not a MixtralForCausalLM parameter",
         entries_=entries + [(extra,) + w1[1:]])
    gate = "model.layers.0.block_sparse_moe.gate.weight"
    case("gate_experts", f"tensor '{gate}' has shape [{E + 1}, {C}]",
         entries_=[(k, d, (E + 1, C), b + b[:4 * C]) if k == gate else (k, d, s, b)
                   for k, d, s, b in entries])
    case("top_k_above_experts", f"num_experts_per_tok {E + 1} exceeds num_local_experts {E}",
         config=lambda c: c.update(num_experts_per_tok=E + 1))
    case("sliding_window", "sliding_window 8 is shorter than max_position_embeddings",
         config=lambda c: c.update(sliding_window=8))
    case("no_experts_key", "num_local_experts must be a positive integer",
         config=lambda c: c.pop("num_local_experts"))
    case.print()


if __name__ == "__main__":
    sys.exit(cli(__doc__, make, [("--tied", {"action": "store_true"}),
                                 ("--experts", {"type": int, "default": 0})],
                 logits, greedy, compare, hostile))
