#!/usr/bin/env bash
# Expert-parallel checkpoints hold every expert once, at its global index: train 20 steps of the
# tiny MoE at dp2 x tp2 (sequence parallel) with ep4 (two experts per rank, the fold over dp and
# tp) and ZeRO-1 (each rank writes its shard of the moments), save at step 10, and resume from it
# at the same layout, at dp4 ep2 with ZeRO-1 (the expert shards split over two replicas), at dp2
# ep2, tp2 ep2 and serially. Every run routes groups of 2 sequences (micro_batch_size 2), the
# same groups on every layout, so the next 10 losses match the uninterrupted run: bit for bit at
# the same layout, to 1e-5 elsewhere; ZeRO-2/3 load it too, and a checkpoint a ZeRO-3 run writes
# resumes serially. The checkpoint's expert tensors are checked whole against the serial
# run's reading of them (every expert present, none zero).
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/moe-tiny.toml --set run.steps=20 --set run.checkpoint_every=10
        --set run.eval_every=0 --set train.batch_size=8 --set train.micro_batch_size=2)
train() {  # name ranks dp ep [extra...]
  local name=$1 ranks=$2 dp=$3 ep=$4; shift 4
  mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" --set parallel.dp="$dp" --set parallel.ep="$ep" "$@" \
    > "$work/$name.log"
}
tp2=(--set parallel.tp=2 --set parallel.sequence_parallel=true)
train full 4 2 4 "${tp2[@]}" --set zero.stage=1
grep "^layout" "$work/full.log"
ckpt="$work/full/moe-tiny/checkpoints/step_000010.h5"
/usr/bin/python3 - "$ckpt" <<'PYEOF'
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as f:
    names = []
    f["params"].visit(lambda n: names.append(n) if ".moe.experts." in n else None)
    for n in names:
        t = np.asarray(f["params"][n])
        if t.shape[0] != 8 or not all(np.abs(t[e]).max() > 0 for e in range(8)):
            sys.exit(f"FAIL: {n} {t.shape} is not 8 experts, each written")
print(f"checkpoint: {len(names)} expert tensors, 8 experts each, every one written")
PYEOF
resume() {  # name exact|rtol ranks dp ep
  local name=$1 mode=$2; shift 2
  train "$name" "$@" --resume "$ckpt"
  $check compare "$work/full/moe-tiny/timings.h5" "$work/$name/moe-tiny/timings.h5" \
    --from-step 11 --min-steps 10 --routing $([ "$mode" = exact ] && echo --exact || echo --rtol 1e-5)
}
resume same exact 4 2 4 "${tp2[@]}" --set zero.stage=1
resume dp4_ep2 rtol 4 4 2 --set zero.stage=1
resume dp2_ep2 rtol 2 2 2
resume tp2_ep2 rtol 2 1 2 "${tp2[@]}"
resume serial rtol 1 1 1
# ZeRO-2/3 load their shards from it (each expert unit's part over its replicas) at dp4 x ep2 and
# dp2 x tp2 x ep2; a ZeRO-3 run at dp2 x tp2 x ep2 from the start writes the checkpoint a serial
# run resumes from.
resume dp4_ep2_zero3 rtol 4 4 2 --set zero.stage=3
resume tp2_ep2_zero2 rtol 4 2 2 "${tp2[@]}" --set zero.stage=2
train zero3_from 4 2 2 "${tp2[@]}" --set zero.stage=3
ckpt="$work/zero3_from/moe-tiny/checkpoints/step_000010.h5"
[[ -f $ckpt ]] || { echo "FAIL: the ZeRO-3 run wrote no step-10 checkpoint"; exit 1; }
resume from_zero3_serial rtol 1 1 1
echo "MoE resume across expert-parallel sizes: ok"
