#!/usr/bin/env python3
"""Checks of token files that `trident prepare --tokenizer` wrote, decoding through the same
tokenizer service (tools/bpe/tokenizer_service.mjs) that generate uses:
  tokenizer_check.py roundtrip SERVICE DIR TEXT PREFIX   decode(ids) == the text
  tokenizer_check.py frame SERVICE DIR PREFIX DOCUMENTS [TOKEN=COUNT...]
      every document framed as the config says; each added TOKEN is one id, COUNT times
  tokenizer_check.py same A_PREFIX B_PREFIX               B's ids are A's, A closed by one EOS
PREFIX names PREFIX_train.bin and PREFIX_val.bin; their ids are read as one sequence."""
import json
import subprocess
import sys

import numpy as np


def read_ids(prefix):
    ids = []
    for split in ("train", "val"):
        path = f"{prefix}_{split}.bin"
        header = np.fromfile(path, dtype=np.int32, count=256)
        assert header[0] == 20240520, f"{path}: magic {header[0]}"
        dtype = {1: np.uint16, 2: np.uint32}[int(header[1])]
        body = np.fromfile(path, dtype=dtype, offset=1024)
        assert len(body) == header[2], f"{path}: {len(body)} ids, header says {header[2]}"
        ids.extend(int(t) for t in body)
    return ids


class Service:
    def __init__(self, script, directory):
        self.child = subprocess.Popen(["node", script, directory], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, encoding="utf-8")
        self.hello = json.loads(self.child.stdout.readline())

    def ask(self, request):
        self.child.stdin.write(json.dumps(request) + "\n")
        self.child.stdin.flush()
        return json.loads(self.child.stdout.readline())


def strip_frame(ids, hello):
    prefix, suffix, eos = hello["prefix"], hello["suffix"], hello["eos"]
    close = suffix + ([eos] if eos is not None and (not suffix or suffix[-1] != eos) else [])
    assert ids[:len(prefix)] == prefix, f"starts {ids[:4]}, not with the prefix {prefix}"
    assert ids[len(ids) - len(close):] == close, f"ends {ids[-4:]}, not with {close}"
    return ids[len(prefix):len(ids) - len(close)]


def main():
    kind = sys.argv[1]
    if kind == "roundtrip":
        script, directory, text_path, prefix = sys.argv[2:6]
        service = Service(script, directory)
        with open(text_path, encoding="utf-8") as f:
            text = f.read()
        ids = strip_frame(read_ids(prefix), service.hello)
        back = service.ask({"decode": ids})["text"]
        if back != text:
            at = next((i for i, (a, b) in enumerate(zip(back, text)) if a != b),
                      min(len(back), len(text)))
            sys.exit(f"decode(encode(text)) differs at character {at}: "
                     f"{back[at:at + 20]!r} instead of {text[at:at + 20]!r}")
        print(f"round trip: {len(text)} characters, {len(ids)} tokens")
    elif kind == "frame":
        script, directory, prefix, documents = sys.argv[2:6]
        with open(f"{directory}/tokenizer.json", encoding="utf-8") as f:
            added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
        service = Service(script, directory)
        hello, ids = service.hello, read_ids(prefix)
        eos, bos = hello["eos"], hello["bos"]
        assert eos is not None and ids.count(eos) == int(documents), \
            f"{ids.count(eos)} EOS ids ({eos}) for {documents} documents"
        starts = [0] + [i + 1 for i, t in enumerate(ids[:-1]) if t == eos]
        for s in starts:
            assert ids[s:s + len(hello["prefix"])] == hello["prefix"], \
                f"document at {s} starts {ids[s:s + 3]}, not {hello['prefix']}"
        for token, count in (arg.split("=") for arg in sys.argv[6:]):
            assert ids.count(added[token]) == int(count), \
                f"{token} (id {added[token]}) {ids.count(added[token])} times, not {count}"
        print(f"frame: {documents} documents, each {hello['prefix']} ... {eos} (BOS {bos}); "
              f"{' '.join(sys.argv[6:])}")
    elif kind == "same":
        a, b = read_ids(sys.argv[2]), read_ids(sys.argv[3])
        assert a[:-1] == b, f"{len(a)} and {len(b)} ids differ" + next(
            (f" first at {i}: {x} vs {y}" for i, (x, y) in enumerate(zip(a, b)) if x != y), "")
        print(f"same ids: {len(b)} tokens, then EOS {a[-1]}")
    else:
        sys.exit(f"unknown check {kind}")


if __name__ == "__main__":
    main()
