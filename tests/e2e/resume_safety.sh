#!/usr/bin/env bash
# Resuming is safe by default (4 ranks, dp 2 x tp 2):
#  - a config that changes what the remaining steps compute (optim.lr, run.seed) is refused with
#    exit 2, naming each change, before anything is written; --allow-config-change accepts it and
#    the run lists every difference;
#  - a layout change (dp 4, ZeRO-1) is accepted and listed, and continues the run to 1e-5;
#  - ranks launched with different configs (an MPMD launch) are refused before any work;
#  - a data file whose tokens changed under the same name is refused, named, unless
#    --allow-config-change.
set -uo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=8 --set run.eval_every=0
        --set run.checkpoint_every=4)
layout=(--set parallel.dp=2 --set parallel.tp=2)
fail() { echo "FAIL: $*"; exit 1; }
run4() {  # name args...
  local name=$1
  shift
  mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.out_dir="$work/$name" "$@" \
    > "$work/$name.log" 2>&1
}
run4 full "${layout[@]}" || fail "first run"
ckpt="$work/full/tiny/checkpoints/step_000004.h5"

run4 lr "${layout[@]}" --set optim.lr=0.002 --set run.seed=7 --resume "$ckpt"
rc=$?
[ $rc -eq 2 ] || fail "a changed lr and seed: exit status $rc, expected 2"
grep -q "changes what the remaining steps compute: run.seed 1234 -> 7, optim.lr 0.001 -> 0.002; pass --allow-config-change" \
  "$work/lr.log" || { cat "$work/lr.log"; fail "the refusal does not name the changes"; }
[ ! -e "$work/lr" ] || fail "a refused resume wrote $work/lr"

run4 lr_allowed "${layout[@]}" --set optim.lr=0.002 --resume "$ckpt" --allow-config-change ||
  fail "--allow-config-change"
grep -q "^resume: optim.lr = 0.002 (checkpoint: 0.001); changes the remaining run" "$work/lr_allowed.log" ||
  fail "the allowed change is not listed"

run4 relaid --set parallel.dp=4 --set zero.stage=1 --resume "$ckpt" || fail "a layout change"
grep -q "^resume: parallel.dp = 4 (checkpoint: 2)$" "$work/relaid.log" || fail "dp change not listed"
grep -q "^resume: zero.stage = 1 (checkpoint: 0)$" "$work/relaid.log" || fail "zero change not listed"
$check compare "$work/full/tiny/timings.h5" "$work/relaid/tiny/timings.h5" --from-step 5 \
  --min-steps 4 --rtol 1e-5 || exit 1

mpirun --oversubscribe -np 2 "$trident" train "${common[@]}" --set run.out_dir="$work/mpmd" \
  : -np 2 "$trident" train "${common[@]}" --set run.out_dir="$work/mpmd" --set run.seed=9 \
  > "$work/mpmd.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "mixed configs: exit status $rc, expected 2"
grep -q "ranks 2, 3 hold a different configuration than rank 0" "$work/mpmd.log" ||
  { cat "$work/mpmd.log"; fail "mixed configs: message"; }
[ ! -e "$work/mpmd" ] || fail "mixed configs wrote $work/mpmd"
# The data itself: a copy of the training file with two token blocks swapped (same size, same
# name in the config) is refused, naming it, before anything is written; --allow-config-change
# accepts it with a line. A checkpoint records its data files (ckpt info shows them).
cp data/kjv_val.bin "$work/val.bin"
python3 - "$work/val.bin" "$work/val_shuffled.bin" <<'PY'
import sys
data = bytearray(open(sys.argv[1], 'rb').read())
a, b, n = 1024 + 2 * 100, 1024 + 2 * 5000, 2 * 1000
data[a:a + n], data[b:b + n] = data[b:b + n], data[a:a + n]
open(sys.argv[2], 'wb').write(data)
PY
run4 data "${layout[@]}" --set data.val="$work/val.bin" || fail "a run on the copied data"
data_ckpt="$work/data/tiny/checkpoints/step_000004.h5"
"$trident" ckpt info "$data_ckpt" > "$work/info.txt" || fail "ckpt info"
grep -q "^data  *val [0-9]* xxh3_64:[0-9a-f]\{16\} $work/val.bin$" "$work/info.txt" ||
  { cat "$work/info.txt"; fail "ckpt info does not show the data files"; }
cp "$work/val_shuffled.bin" "$work/val.bin"
run4 data_changed "${layout[@]}" --set data.val="$work/val.bin" --resume "$data_ckpt"
rc=$?
[ $rc -eq 2 ] || fail "changed data: exit status $rc, expected 2"
grep -q "trident: error: resuming from '$data_ckpt': the val data file '$work/val.bin' holds other tokens than the checkpoint was trained on" \
  "$work/data_changed.log" || { cat "$work/data_changed.log"; fail "changed data: message"; }
[ ! -e "$work/data_changed" ] || fail "a refused resume on changed data wrote something"
run4 data_allowed "${layout[@]}" --set data.val="$work/val.bin" --resume "$data_ckpt" \
  --allow-config-change || fail "changed data with --allow-config-change"
grep -q "^resume: the val data file '$work/val.bin' holds other tokens .* (--allow-config-change)" \
  "$work/data_allowed.log" || fail "changed data allowed: no line"
echo "resume safety: ok"
