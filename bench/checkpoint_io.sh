#!/usr/bin/env bash
# Checkpoint write and read time and bandwidth for gpt2-124m at 1, 2, 4, 8 ranks (dp, ZeRO-1:
# each rank writes its shard through parallel HDF5, and reads back what it holds), against the
# file's size. Write: the io phase of the checkpointing step (slowest rank); read: the load, from
# the "resumed from ... in X s" line (slowest rank). One BLAS thread per rank.
# usage: bench/checkpoint_io.sh BUILD_DIR [RANKS...]
set -euo pipefail
build=${1:?usage: bench/checkpoint_io.sh BUILD_DIR [RANKS...]}
shift

ranks_list=("$@")
[ $# -gt 0 ] || ranks_list=(1 2 4 8)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=$build/checkpoint_io
rm -rf "$out" && mkdir -p "$out"
model=(--config inputs/small.toml --set model.name=gpt2-124m --set model.n_layer=12
       --set model.n_embd=768 --set model.n_head=12 --set model.vocab_size=50257
       --set model.block_size=1024 --set train.seq_len=16 --set train.batch_size=8
       --set run.eval_every=0 --set run.eval_batches=1 --set zero.stage=1)
rows=()
for ranks in "${ranks_list[@]}"; do
  name=ranks$ranks
  mpirun -np "$ranks" --oversubscribe "$build/src/trident" train "${model[@]}" --set run.steps=1 \
    --set run.out_dir="$out/$name" --set run.name=write > "$out/$name.write.log"
  ckpt=$out/$name/write/checkpoints/step_000001.h5
  mpirun -np "$ranks" --oversubscribe "$build/src/trident" train "${model[@]}" --set run.steps=2 \
    --set run.out_dir="$out/$name" --set run.name=read --resume "$ckpt" --allow-config-change \
    > "$out/$name.read.log"
  read_s=$(grep -o "in [0-9.]* s" "$out/$name.read.log" | head -1 | awk '{print $2}')
  rows+=("$ranks=$out/$name/write/timings.h5=$ckpt=$read_s")
done
/usr/bin/python3 - "${rows[@]}" <<'PY'
import os
import sys
import h5py

MB = 1e6
print("gpt2-124m checkpoint (parameters + AdamW moments, fp32), ZeRO-1 over dp")
print("| ranks | file MB | write s | write MB/s | read s | read MB/s |")
print("|---|---|---|---|---|---|")
for row in sys.argv[1:]:
    ranks, timings, ckpt, read_s = row.split("=")
    with h5py.File(timings) as f:
        write_s = float(f["phase_seconds"][-1, :, 8].max())  # io, slowest rank
    size = os.path.getsize(ckpt) / MB
    read_s = float(read_s)
    print(f"| {ranks} | {size:.1f} | {write_s:.2f} | {size / write_s:.0f} | {read_s:.2f} | "
          f"{size / read_s:.0f} |")
PY
