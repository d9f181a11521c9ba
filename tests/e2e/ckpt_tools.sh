#!/usr/bin/env bash
# `trident ckpt`: info names the model, the writing layout, the step and the [model] keys a
# config must hold (also as JSON); verify passes a good
# checkpoint and fails (exit 2, naming the dataset) a changed one; export writes an llm.c model
# file that a reader following llm.c's layout loads back into exactly the checkpoint's tensors.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
mpirun -np 4 --oversubscribe "$trident" train --config inputs/tiny.toml --set run.steps=4 \
  --set run.eval_every=0 --set parallel.dp=2 --set parallel.tp=2 --set zero.stage=1 \
  --set run.out_dir="$work/run" > "$work/train.log"
ckpt=$work/run/tiny/checkpoints/step_000004.h5
"$trident" ckpt info "$ckpt" | tee "$work/info.txt"
grep -q "model        tiny: gpt2 L=4 C=32 NH=4 V=256 block=32, 60096 parameters" "$work/info.txt"
grep -q "written by   dp=2 tp=2 pp=1" "$work/info.txt"
grep -q "step         4 " "$work/info.txt"
# The [model] keys a config must hold, printed as TOML lines and, with --json, as typed values.
grep -q "^\[model\] .*must hold" "$work/info.txt"
grep -q "^  n_layer = 4$" "$work/info.txt" && grep -q "^  family = 'gpt2'$" "$work/info.txt"
"$trident" ckpt info "$ckpt" --json > "$work/info.json"
/usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['model']['n_layer'] == 4 and d['model']['family'] == 'gpt2', d['model']
assert d['step'] == 4 and d['dp'] == 2 and d['tp'] == 2 and d['parameters'] == 60096, d
assert d['groups'] == ['params', 'optim/m', 'optim/v'], d['groups']
" "$work/info.json"
"$trident" ckpt verify "$ckpt" | tee "$work/verify.txt"
grep -q "156 datasets, 156 verified, 0 failing" "$work/verify.txt"
cp "$ckpt" "$work/changed.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    f['optim/v/h.2.ln_2.bias'][3] += 1.0
" "$work/changed.h5"
set +e
"$trident" ckpt verify "$work/changed.h5" > "$work/verify_bad.txt"
rc=$?
set -e
cat "$work/verify_bad.txt"
[ $rc -eq 2 ] && grep -q "FAIL optim/v/h.2.ln_2.bias: checksum" "$work/verify_bad.txt"
"$trident" ckpt export "$ckpt" --llmc "$work/model.bin"
/usr/bin/python3 - "$ckpt" "$work/model.bin" <<'PY'
import sys
import h5py
import numpy as np

# llm.c's reader (train_gpt2.c: gpt2_build_from_checkpoint, fill_in_parameter_sizes).
with open(sys.argv[2], "rb") as f:
    header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
    body = np.frombuffer(f.read(), dtype=np.float32)
assert header[0] == 20240326 and header[1] == 3, header[:2]
maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
sizes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln_1.weight", (L, C)), ("ln_1.bias", (L, C)),
         ("attn.qkv.weight", (L, 3 * C, C)), ("attn.qkv.bias", (L, 3 * C)),
         ("attn.proj.weight", (L, C, C)), ("attn.proj.bias", (L, C)), ("ln_2.weight", (L, C)),
         ("ln_2.bias", (L, C)), ("mlp.fc.weight", (L, 4 * C, C)), ("mlp.fc.bias", (L, 4 * C)),
         ("mlp.proj.weight", (L, C, 4 * C)), ("mlp.proj.bias", (L, C)), ("ln_f.weight", (C,)),
         ("ln_f.bias", (C,))]
total = sum(int(np.prod(s)) for _, s in sizes)
assert body.size == total, (body.size, total)
with h5py.File(sys.argv[1]) as f:
    p = f["params"]
    at = 0
    for name, shape in sizes:
        n = int(np.prod(shape))
        t = body[at:at + n].reshape(shape)
        at += n
        if name == "wte":
            assert np.array_equal(t[:V], p["wte"][:]) and not t[V:].any()
        elif name in ("wpe", "ln_f.weight", "ln_f.bias"):
            assert np.array_equal(t, p[name][:]), name
        else:
            for l in range(L):
                assert np.array_equal(t[l], p[f"h.{l}.{name}"][:]), (l, name)
print(f"llm.c file: header {list(header[:8])}, {total} parameters, every tensor equal")
PY
