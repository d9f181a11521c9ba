# Writes tiny GPT2LMHeadModel directories (config.json + safetensors), hostile variants of them, and compares tensors.
"""Usage:
  hf_files.py make DIR [--dtype F32|BF16] [--prefix P] [--shards N] [--extras] [--seed S]
                       [--scale K]      matrices drawn K times wider (distinct greedy tokens)
  hf_files.py hostile SRC OUT     variants of SRC (one F32 model.safetensors) under OUT/<case>/;
                                  prints "<case> <text the error must contain>" per case
  hf_files.py compare A B         every parameter of directory A equals B's byte for byte
                                  (names compared without the "transformer." prefix)
  hf_files.py logits DIR PROMPT   the next-token logits of PROMPT's bytes by the same float64
                                  GPT-2 (below), one a line
  hf_files.py greedy DIR PROMPT N the N tokens greedy decoding appends to PROMPT's bytes, by a
                                  float64 GPT-2 written here from Hugging Face's definition
                                  (Conv1D x @ W + b, gelu_new, LayerNorm eps 1e-5, tied head),
                                  the context cut to the last n_positions tokens as trident
                                  generate does; prints them as hex, and the smallest margin
                                  between the best and second-best logit

The safetensors layout is written here from its specification (8-byte little-endian header
length, JSON header of dtype / shape / data_offsets, then the data), independently of trident.
hf_llama.py uses the same reader and writers, hostile-case writer, greedy loop, tensor comparison
and command line (cli).
"""
import copy
import json
import os
import shutil
import struct
import sys

import numpy as np

L, C, NH, V, T = 2, 32, 4, 256, 16


def gpt2_tensors(rng, scale=1.0):
    """GPT2LMHeadModel's parameters (GPT2Model names), Conv1D weights [in, out]."""
    t = {"wte.weight": rng.normal(0, 0.02, (V, C)), "wpe.weight": rng.normal(0, 0.01, (T, C))}
    for layer in range(L):
        h = f"h.{layer}."
        t[h + "ln_1.weight"] = 1 + rng.normal(0, 0.1, C)
        t[h + "ln_1.bias"] = rng.normal(0, 0.1, C)
        t[h + "attn.c_attn.weight"] = rng.normal(0, 0.02, (C, 3 * C))
        t[h + "attn.c_attn.bias"] = rng.normal(0, 0.02, 3 * C)
        t[h + "attn.c_proj.weight"] = rng.normal(0, 0.02, (C, C))
        t[h + "attn.c_proj.bias"] = rng.normal(0, 0.02, C)
        t[h + "ln_2.weight"] = 1 + rng.normal(0, 0.1, C)
        t[h + "ln_2.bias"] = rng.normal(0, 0.1, C)
        t[h + "mlp.c_fc.weight"] = rng.normal(0, 0.02, (C, 4 * C))
        t[h + "mlp.c_fc.bias"] = rng.normal(0, 0.02, 4 * C)
        t[h + "mlp.c_proj.weight"] = rng.normal(0, 0.02, (4 * C, C))
        t[h + "mlp.c_proj.bias"] = rng.normal(0, 0.02, C)
    t["ln_f.weight"] = 1 + rng.normal(0, 0.1, C)
    t["ln_f.bias"] = rng.normal(0, 0.1, C)
    return {k: v * scale if v.ndim == 2 else v for k, v in t.items()}


def encode(array, dtype):
    a = np.ascontiguousarray(array, dtype=np.float32)
    if dtype == "F32":
        return a.tobytes()
    bits = a.view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return rounded.astype("<u2").tobytes()


def write_safetensors(path, entries, header_override=None):
    """entries: [(name, dtype, shape, bytes)] in order; returns nothing."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    if header_override:
        header_override(header)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, _, data in entries:
            f.write(data)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def read_dir(path):
    index = os.path.join(path, "model.safetensors.index.json")
    files = ([os.path.join(path, f) for f in set(json.load(open(index))["weight_map"].values())]
             if os.path.exists(index) else [os.path.join(path, "model.safetensors")])
    out = {}
    for f in files:
        out.update(read_safetensors(f))
    return out


def config_json(dtype):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
            "n_positions": T, "n_embd": C, "n_layer": L, "n_head": NH, "n_inner": None,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True,
            "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}


def make(out, dtype="F32", prefix="", shards=1, extras=False, seed=0, scale=1.0):
    os.makedirs(out, exist_ok=True)
    tensors = gpt2_tensors(np.random.default_rng(seed), scale)
    entries = [(prefix + k, dtype, v.shape, encode(v, dtype)) for k, v in tensors.items()]
    if extras:  # what older transformers saved besides the parameters
        for layer in range(L):
            mask = np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T)
            entries.append((f"{prefix}h.{layer}.attn.bias", "F32", mask.shape, mask.tobytes()))
            entries.append((f"{prefix}h.{layer}.attn.masked_bias", "F32", (), encode(-1e4, "F32")))
        entries.append(("lm_head.weight", dtype, (V, C), encode(tensors["wte.weight"], dtype)))
    write_dir(out, config_json(dtype), entries, shards)


def write_dir(out, config, entries, shards=1, indent=None):
    """A Hugging Face directory: config.json, and entries [(name, dtype, shape, bytes)] in
    model.safetensors, or with shards > 1 dealt round-robin into that many files and an index."""
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=indent)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), entries)
        return
    weight_map = {}
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = entries[k::shards]
        write_safetensors(os.path.join(out, name), part)
        weight_map.update({e[0]: name for e in part})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"))


class HostileCases:
    """Hostile directories OUT/<case>/, each a copy of a model (its model.safetensors entries
    [(name, dtype, shape, bytes)] and config.json) with one thing wrong."""

    def __init__(self, src, out, config):
        self.entries = [(k, d, s, b) for k, (d, s, b) in read_safetensors(
            os.path.join(src, "model.safetensors")).items()]
        self.out, self.config, self.cases = out, config, []

    def __call__(self, name, expect, entries_=None, override=None, raw=None, config=None):
        """Writes case `name`, whose import error must contain `expect`: the entries (or
        entries_), override(header) applied to the safetensors header, or the file's bytes
        `raw`; config(cfg) applied to a copy of the config."""
        d = os.path.join(self.out, name)
        os.makedirs(d, exist_ok=True)
        cfg = copy.deepcopy(self.config)
        if config:
            config(cfg)
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        path = os.path.join(d, "model.safetensors")
        if raw is not None:
            open(path, "wb").write(raw)
        else:
            write_safetensors(path, self.entries if entries_ is None else entries_, override)
        self.cases.append((name, expect))

    def overlap(self):
        """Case "overlap": the second tensor's bytes start 4 bytes into the first's."""
        (first, _, _, _), (second, _, _, data) = self.entries[:2]

        def move(h):
            start = h[first]["data_offsets"][0] + 4
            h[second]["data_offsets"] = [start, start + len(data)]
        self("overlap", "overlaps", override=move)

    def print(self):
        """One line per case: "<case>\t<text the error must contain>"."""
        for name, expect in self.cases:
            print(f"{name}\t{expect}")


def hostile(src, out):
    """Each case: a copy of src with one thing wrong; prints the case and what the error names."""
    case = HostileCases(src, out, config_json("F32"))
    entries = case.entries
    first, second = entries[0][0], entries[1][0]
    case.overlap()
    last = entries[-1][0]
    case("past_end", f"tensor '{last}'",
         override=lambda h: h[last].update(data_offsets=[h[last]["data_offsets"][0] + 8,
                                                         h[last]["data_offsets"][1] + 8]))
    good = open(os.path.join(src, "model.safetensors"), "rb").read()
    case("header_too_long", "header length", raw=struct.pack("<Q", len(good) * 4) + good[8:])
    case("short_file", "shorter than", raw=good[:5])
    case("not_json", "not a JSON object", raw=struct.pack("<Q", 8) + b"{nonsens" + good[8:])
    case("unknown_dtype", f"tensor '{first}': unknown dtype",
         override=lambda h: h[first].update(dtype="F33"))
    case("integer_dtype", f"tensor '{first}' has dtype I32",
         override=lambda h: h[first].update(dtype="I32"))
    missing = "h.1.mlp.c_fc.bias"
    case("missing_tensor", f"tensor '{missing}' is missing",
         entries_=[e for e in entries if not e[0].endswith(missing)])
    extra = "h.0.attn.rotary.inv_freq"
    case("extra_tensor", f"tensor '{extra}' is not a GPT2LMHeadModel parameter",
         entries_=entries + [(extra, "F32", (4,), b"\0" * 16)])
    shaped = "h.0.attn.c_proj.weight"
    case("shape_mismatch", f"{shaped}' has shape [{C}, {C // 2}]",
         entries_=[(k, d, (C, C // 2), b[:len(b) // 2]) if k.endswith(shaped) else (k, d, s, b)
                   for k, d, s, b in entries])
    case("transposed_conv1d", "h.0.mlp.c_fc.weight' has shape [128, 32]",
         entries_=[(k, d, (4 * C, C) if k.endswith("h.0.mlp.c_fc.weight") else s, b)
                   for k, d, s, b in entries])
    case("size_mismatch", f"tensor '{first}': data_offsets",
         override=lambda h: h[first].update(shape=[V, C + 1]))
    case("huge_shape", f"tensor '{first}'",
         override=lambda h: h[first].update(shape=[2 ** 40, 2 ** 40]))
    case("gap", "belong to no tensor", override=lambda h: h.pop(second))
    case("trailing_bytes", "last 4 bytes belong to no tensor", raw=good + b"\0" * 4)
    case("untied_head", "lm_head.weight differs",
         entries_=entries + [("lm_head.weight", "F32", (V, C), b"\1" * (4 * V * C))])
    # A one-byte copy of the tied head, once read as 16-bit floats past its end.
    case("byte_head", "tensor 'lm_head.weight' has dtype U8",
         entries_=entries + [("lm_head.weight", "U8", (V, C), b"\1" * (V * C))])
    nan_first = bytearray(entries[0][3])
    nan_first[12:16] = struct.pack("<f", float("nan"))
    case("nan_weight", f"tensor '{first}' holds nan at element 3",
         entries_=[(first, entries[0][1], entries[0][2], bytes(nan_first))] + entries[1:])
    case("huge_layers", "model.n_layer = 1073741824 must be between 1 and 1024",
         config=lambda c: c.update(n_layer=2 ** 30))
    case("typed_key", "activation_function is 5 (number), not a string",
         config=lambda c: c.update(activation_function=5))
    case("erf_gelu", "activation_function 'gelu'",
         config=lambda c: c.update(activation_function="gelu"))
    case("gpt_neox", "model_type 'gpt_neox' is not supported",
         config=lambda c: c.update(model_type="gpt_neox"))
    case.print()


def decode(dtype, shape, data):
    if dtype == "F32":
        return np.frombuffer(data, "<f4").astype(np.float64).reshape(shape)
    bits = np.frombuffer(data, "<u2").astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64).reshape(shape)


def gpt2_logits(path):
    """The float64 GPT-2 of the directory: a function from token ids to the last one's logits."""
    cfg = json.load(open(os.path.join(path, "config.json")))
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: decode(*v)
         for k, v in read_dir(path).items()}
    heads, block = cfg["n_head"], cfg["n_positions"]

    def norm(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w[name + ".weight"] + w[name + ".bias"]

    def conv1d(x, name):  # Hugging Face's Conv1D: weight [in, out]
        return x @ w[name + ".weight"] + w[name + ".bias"]

    def logits(ids):
        n = len(ids)
        x = w["wte.weight"][ids] + w["wpe.weight"][:n]
        hs = x.shape[1] // heads
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for layer in range(cfg["n_layer"]):
            h = f"h.{layer}."
            q, k, v = np.split(conv1d(norm(x, h + "ln_1"), h + "attn.c_attn"), 3, axis=-1)
            q, k, v = (t.reshape(n, heads, hs).transpose(1, 0, 2) for t in (q, k, v))
            att = q @ k.transpose(0, 2, 1) / np.sqrt(hs) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att @ v).transpose(1, 0, 2).reshape(n, -1)
            x = x + conv1d(y, h + "attn.c_proj")
            f = conv1d(norm(x, h + "ln_2"), h + "mlp.c_fc")
            f = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
            x = x + conv1d(f, h + "mlp.c_proj")
        return norm(x, "ln_f")[-1] @ w["wte.weight"].T

    return logits, cfg["n_positions"]


def greedy(path, prompt, count):
    logits, block = gpt2_logits(path)
    return greedy_decode(logits, block, prompt, count)


def greedy_decode(logits, block, prompt, count):
    """Prints the `count` tokens greedy decoding appends to prompt's bytes as hex, and on stderr
    the smallest margin between the best and second-best logit. logits(ids): the last position's
    logits (numpy), given at most the last `block` ids."""
    context, out, margin = list(prompt.encode()), [], np.inf
    for _ in range(count):
        last = logits(context[-block:])
        best = int(np.argmax(last))
        margin = min(margin, float(last[best] - np.partition(last, -2)[-2]))
        context.append(best)
        out.append(best)
    print(bytes(out).hex())
    print(f"smallest margin {margin:.3g}", file=sys.stderr)
    return 0


def logits_of(path, prompt):
    logits, block = gpt2_logits(path)
    for value in logits(list(prompt.encode())[-block:]):
        print(f"{value:.17g}")
    return 0


def compare(a, b):
    def strip(t):
        return {k[len("transformer."):] if k.startswith("transformer.") else k: v
                for k, v in t.items() if not (k.endswith(".attn.bias") or
                                              k.endswith(".attn.masked_bias") or
                                              k == "lm_head.weight")}
    ta, tb = strip(read_dir(a)), strip(read_dir(b))
    return report(tensor_differences(a, b, ta, tb), f"{len(ta)} tensors")


def tensor_differences(a, b, ta, tb):
    """What differs between directory a's tensors ta and b's tb ({name: (dtype, shape, bytes)}):
    tensors only in one, or with another dtype, shape or bytes."""
    problems = [f"{k}: only in {a}" for k in ta if k not in tb]
    problems += [f"{k}: only in {b}" for k in tb if k not in ta]
    for k in ta:
        if k in tb and ta[k] != tb[k]:
            problems.append(f"{k}: {ta[k][:2]} vs {tb[k][:2]}, bytes equal: {ta[k][2] == tb[k][2]}")
    return problems


def report(problems, compared):
    """Prints a DIFF line per problem and a count; the exit status (1 if any)."""
    for p in problems:
        print("DIFF", p)
    print(f"{compared} compared, {len(problems)} differ")
    return 1 if problems else 0


def cli(doc, make, make_options, logits, greedy, compare, hostile):
    """The command line of hf_files.py and hf_llama.py (their docstring `doc`): make DIR [options],
    logits DIR PROMPT, greedy DIR PROMPT N, compare A B, hostile SRC OUT (OUT emptied first);
    runs the one given with these functions and returns the exit status. make_options: (flag,
    add_argument keywords) pairs besides --dtype, --shards, --extras, --seed and --scale; make
    gets every option by name."""
    import argparse
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
    for flag, options in make_options:
        m.add_argument(flag, **options)
    m.add_argument("--shards", type=int, default=1)
    m.add_argument("--extras", action="store_true")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--scale", type=float, default=1.0)
    h = sub.add_parser("hostile")
    h.add_argument("src")
    h.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    lg = sub.add_parser("logits")
    lg.add_argument("dir")
    lg.add_argument("prompt")
    g = sub.add_parser("greedy")
    g.add_argument("dir")
    g.add_argument("prompt")
    g.add_argument("count", type=int)
    args = ap.parse_args()
    if args.command == "make":
        make(args.dir, **{k: v for k, v in vars(args).items() if k not in ("command", "dir")})
        return 0
    if args.command == "greedy":
        return greedy(args.dir, args.prompt, args.count)
    if args.command == "logits":
        return logits(args.dir, args.prompt)
    if args.command == "hostile":
        shutil.rmtree(args.out, ignore_errors=True)
        hostile(args.src, args.out)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(cli(__doc__, make, [("--prefix", {"default": ""})], logits_of, greedy, compare,
                 hostile))
