#!/usr/bin/env python3
"""Writes small Hugging Face tokenizer directories for the tests, BPE-trained on a text:
  make_tokenizers.py KIND OUT_DIR TRAIN_TEXT [--merges N]
KIND bytelevel: byte-level BPE with merges and Llama 3's split pattern; BOS from the
               post-processor (tokenizer_config.json is silent), EOS <|end_of_text|>.
     bytefallback: SentencePiece-style BPE (a "▁" normalizer, byte fallback to <0xNN> tokens)
               as Llama 2 and Mistral; tokenizer_config.json says add_bos_token, EOS </s>.
     special: GPT-2-style byte-level BPE with added special tokens <|user|> and <|assistant|>;
               no BOS, EOS <|endoftext|> from special_tokens_map.json."""
import argparse
import collections
import json
import os
import re

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_chars():
    """Byte-level BPE's printable spelling of each byte (bytes that print stand for themselves)."""
    chars, spare = [], 256
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174:
            chars.append(chr(b))
        else:
            chars.append(chr(spare))
            spare += 1
    return chars


def train_merges(words, merges):
    """The `merges` most frequent adjacent pairs, merged greedily over `words` (symbol tuples)."""
    counts = collections.Counter(words)
    learned = []
    for _ in range(merges):
        pairs = collections.Counter()
        for word, n in counts.items():
            for a, b in zip(word, word[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        learned.append((a, b))
        merged = collections.Counter()
        for word, n in counts.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        counts = merged
    return learned


def added(token_id, content, special=True):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


def bpe_model(vocab, merges, byte_fallback=False, unk=None):
    return {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": byte_fallback, "byte_fallback": byte_fallback,
            "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b in merges]}


def with_merges(vocab, merges):
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def byte_level(text, merges, specials, split):
    chars = byte_chars()
    pieces = re.findall(r" ?\w+| ?[^\w\s]+|\s+", text)
    words = [tuple(chars[b] for b in p.encode()) for p in pieces]
    learned = train_merges(words, merges)
    vocab = with_merges({c: i for i, c in enumerate(chars)}, learned)
    tokens = [added(len(vocab) + i, s) for i, s in enumerate(specials)]
    vocab.update({t["content"]: t["id"] for t in tokens})
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": not split}
    pre = level if not split else {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated",
         "invert": False}, level]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
            "normalizer": None, "pre_tokenizer": pre, "post_processor": level,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": bpe_model(vocab, learned)}


def template(bos, bos_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}


def byte_fallback(text, merges):
    normalized = "▁" + text.replace(" ", "▁")
    pieces = re.findall("▁?[^▁]+|▁", normalized)
    learned = train_merges([tuple(p) for p in pieces], merges)
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {s: i for i, s in enumerate(specials)}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for ch in sorted(set(normalized) - set(vocab)):
        if ord(ch) < 128 or ch == "▁":
            vocab[ch] = len(vocab)
    learned = [(a, b) for a, b in learned
               if all(c in vocab for c in a + b)]  # merges of characters the vocabulary holds
    vocab = with_merges(vocab, learned)
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(i, s) for i, s in enumerate(specials)],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": None, "post_processor": template("<s>", 1),
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": bpe_model(vocab, learned, byte_fallback=True, unk="<unk>")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["bytelevel", "bytefallback", "special"])
    parser.add_argument("out")
    parser.add_argument("text")
    parser.add_argument("--merges", type=int, default=40)
    a = parser.parse_args()
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    os.makedirs(a.out, exist_ok=True)
    files = {}
    if a.kind == "bytelevel":
        tok = byte_level(text, a.merges, ["<|begin_of_text|>", "<|end_of_text|>"], split=True)
        bos_id = tok["model"]["vocab"]["<|begin_of_text|>"]
        tok["post_processor"] = {"type": "Sequence", "processors": [
            tok["post_processor"], template("<|begin_of_text|>", bos_id)]}
        files["tokenizer_config.json"] = {"bos_token": "<|begin_of_text|>",
                                          "eos_token": "<|end_of_text|>"}
    elif a.kind == "bytefallback":
        tok = byte_fallback(text, a.merges)
        files["tokenizer_config.json"] = {
            "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
            "eos_token": {"content": "</s>", "lstrip": False, "normalized": False,
                          "rstrip": False, "single_word": False}, "unk_token": "<unk>"}
    else:
        tok = byte_level(text, a.merges, ["<|endoftext|>", "<|user|>", "<|assistant|>"],
                         split=False)
        files["special_tokens_map.json"] = {"eos_token": "<|endoftext|>"}
    files["tokenizer.json"] = tok
    for name, content in files.items():
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False)
    print(f"make_tokenizers: {a.kind} in {a.out}, {len(tok['model']['vocab'])} ids, "
          f"{len(tok['model']['merges'])} merges")


if __name__ == "__main__":
    main()
