#!/usr/bin/env bash
# Batch-size LR scaling: a weak-scaling pair (dp 1 at 4 sequences, dp 2 at 8) with linear and
# sqrt scaling records and applies base lr x 2 and x sqrt(2); the lr is printed at start-up.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
base=(--config inputs/tiny.toml --set run.steps=3 --set run.eval_every=0 --set optim.lr=1e-3
      --set optim.warmup_steps=0 --set optim.base_batch_tokens=64)  # 4 sequences x 16 tokens
for scaling in linear sqrt; do
  "$trident" train "${base[@]}" --set optim.lr_scaling=$scaling --set train.batch_size=4 --set run.out_dir="$work/$scaling-1" \
    > "$work/$scaling-1.log"
  mpirun -np 2 --oversubscribe "$trident" train "${base[@]}" --set optim.lr_scaling=$scaling \
    --set train.batch_size=8 --set run.out_dir="$work/$scaling-2" > "$work/$scaling-2.log"
  grep "^lr:" "$work/$scaling-2.log"
done
/usr/bin/python3 - "$work" <<'PY'
import math, sys
import h5py
work = sys.argv[1]
for scaling, factor in [("linear", 2.0), ("sqrt", math.sqrt(2.0))]:
    with h5py.File(f"{work}/{scaling}-1/tiny/timings.h5") as one, \
         h5py.File(f"{work}/{scaling}-2/tiny/timings.h5") as two:
        assert float(one.attrs["peak_lr"]) == 1e-3, one.attrs["peak_lr"]
        peak = float(two.attrs["peak_lr"])
        assert abs(peak - 1e-3 * factor) < 1e-12, (scaling, peak)
        lr1, lr2 = one["lr"][:], two["lr"][:]
        assert abs(lr2[0] - 1e-3 * factor) < 1e-12 and all(
            abs(b / a - factor) < 1e-9 for a, b in zip(lr1, lr2)), (lr1, lr2)
        print(f"{scaling}: batch x2 -> lr x{peak / 1e-3:.4f} on every step {list(lr2)}")
PY
