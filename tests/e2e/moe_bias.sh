#!/usr/bin/env bash
# The aux-loss-free expert bias (DeepSeek-V3: sigmoid router, train.expert_bias_rate u) on one
# layout: losses, norms and gradients equal the serial run's (layout_vs_serial.sh, whose serial
# run takes two micro-batches per step), every step's bias is the serial run's bit for bit, and
# it moves by -u, 0 or +u per expert once per step (an update per micro-batch would move it twice
# in the serial run). Then the bias goes into the checkpoint: resuming at step 5 continues as
# the uninterrupted run did, bias and losses bit for bit.
set -euo pipefail
trident=$1 src=$2 work=$3
shift 3  # the layout: dp tp pp schedule v zero [offload sp ep]
rm -rf "$work" && mkdir -p "$work"
rate=0.01
sets="train.expert_bias_rate=$rate model.router=sigmoid"
LAYOUT_SETS="$sets" TRIDENT_TEST_RUN=moe-tiny \
  bash "$src/tests/e2e/layout_vs_serial.sh" "$trident" "$src" "$work/layout" "$@"
/usr/bin/python3 - "$work/layout" "$rate" <<'PYEOF'
import sys
import h5py
import numpy as np
work, rate = sys.argv[1], float(sys.argv[2])
def bias(run):
    with h5py.File(f"{work}/{run}/moe-tiny/timings.h5", "r") as f:
        return np.asarray(f["moe_expert_bias"], dtype=np.float64)
serial, layout = bias("serial"), bias("layout")
if not np.array_equal(serial, layout):
    sys.exit(f"FAIL: the expert bias differs from the serial run's:\n{serial[-1]}\n{layout[-1]}")
steps = np.diff(np.concatenate([np.zeros_like(serial[:1]), serial]), axis=0)
moved = np.abs(steps)
if not (np.isclose(moved, 0, atol=1e-6) | np.isclose(moved, rate, rtol=1e-4)).all():
    sys.exit(f"FAIL: a step moved the bias by other than 0 or {rate}: {np.unique(moved.round(6))}")
if not (moved > 0).any():
    sys.exit("FAIL: the bias never moved")
print(f"expert bias: the serial run's at all {len(serial)} steps, moving by 0 or {rate} per step "
      f"(last step's range {serial[-1].min():+.2f} to {serial[-1].max():+.2f})")
PYEOF
# The checkpoint holds the bias: resume at step 5 of a 10-step run.
cd "$src"
common=(--config inputs/moe-tiny.toml --set run.steps=10 --set run.checkpoint_every=5
        --set run.eval_every=0 --set train.batch_size=8)
for extra in $sets; do common+=(--set "$extra"); done
"$trident" train "${common[@]}" --set run.out_dir="$work/full" > "$work/full.log"
"$trident" train "${common[@]}" --set run.out_dir="$work/resumed" \
  --resume "$work/full/moe-tiny/checkpoints/step_000005.h5" > "$work/resumed.log"
/usr/bin/python3 "$src/tests/e2e/check_run.py" compare "$work/full/moe-tiny/timings.h5" \
  "$work/resumed/moe-tiny/timings.h5" --from-step 6 --min-steps 5 --exact
/usr/bin/python3 - "$work" <<'PYEOF'
import sys
import h5py
import numpy as np
work = sys.argv[1]
full = np.asarray(h5py.File(f"{work}/full/moe-tiny/timings.h5", "r")["moe_expert_bias"])
resumed = np.asarray(h5py.File(f"{work}/resumed/moe-tiny/timings.h5", "r")["moe_expert_bias"])
if not np.array_equal(full[5:], resumed):
    sys.exit("FAIL: the resumed run's expert bias differs from the uninterrupted run's")
print("resumed at step 5: the expert bias continues bit for bit")
PYEOF
