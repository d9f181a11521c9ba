#!/usr/bin/env bash
# ZB-H1 against 1F1B on the same layouts: splitting each backward into an input-gradient pass and
# a deferred weight-gradient pass changes when gradients are computed, not what they are, so
# losses, gradient norms and first-step gradients match 1F1B bit for bit (fp32 with tp and ZeRO-2
# over dp; bf16 at pp 4; bf16 with sequence parallelism at tp 2), and the memory model predicts each rank's memory, the kept output
# gradients included, to the byte.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
run() {  # name ranks schedule extra --set arguments...
  local name=$1 ranks=$2 schedule=$3
  shift 3
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/tiny.toml \
    --set run.steps=6 --set run.eval_every=0 --set run.checkpoint_every=0 \
    --set train.batch_size=8 --set run.out_dir="$work/$name" \
    --set parallel.schedule="$schedule" "$@" --dump-grads "$work/$name.grads.h5" > "$work/$name.log"
  $check memory "$work/$name/tiny/timings.h5" --all-exact
}
same() {  # a b: bit-identical runs
  echo "== $2 vs $1"
  $check compare "$work/$1/tiny/timings.h5" "$work/$2/tiny/timings.h5" --min-steps 6 --exact --norms
  $check grads "$work/$1.grads.h5" "$work/$2.grads.h5" --rtol 0
}
tp2=(--set parallel.pp=2 --set parallel.tp=2 --set train.micro_batch_size=2)
run tp2_1f1b 4 1f1b "${tp2[@]}"
run tp2_zb 4 zb_h1 "${tp2[@]}"
same tp2_1f1b tp2_zb
grep -q "schedule=zb_h1" "$work/tp2_zb.log"
zero2=(--set parallel.pp=2 --set parallel.dp=2 --set zero.stage=2 --set train.micro_batch_size=1)
run zero2_1f1b 4 1f1b "${zero2[@]}"
run zero2_zb 4 zb_h1 "${zero2[@]}"
same zero2_1f1b zero2_zb
bf16=(--set parallel.pp=4 --set precision.compute=bf16 --set train.micro_batch_size=1)
run bf16_1f1b 4 1f1b "${bf16[@]}"
run bf16_zb 4 zb_h1 "${bf16[@]}"
same bf16_1f1b bf16_zb
sp=(--set parallel.pp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true
    --set precision.compute=bf16 --set train.micro_batch_size=2)
run sp_1f1b 4 1f1b "${sp[@]}"
run sp_zb 4 zb_h1 "${sp[@]}"
same sp_1f1b sp_zb
echo "zero bubble: ok"
