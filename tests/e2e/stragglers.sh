#!/usr/bin/env bash
# Straggler scores: one rank of 4 made twice as slow (--inject-fault slow:5:0:2) is the only one
# below 0.75, named in the step lines and in timings.h5's straggler_score; 50 steps unperturbed
# on this 2-core machine (2 ranks, one thread each) flag nobody; on pp 2 each stage is scored
# only against itself (the last one computes the head), so both score exactly 1.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
# About 30 ms of compute a step: scheduling jitter stays well below the factor looked for.
model=(--set model.n_embd=128 --set train.seq_len=32 --set train.batch_size=16
       --set run.log_every=10 --set run.checkpoint_every=-1 --set run.eval_every=0)
run() {  # NAME RANKS STEPS [args...]
  local name=$1 ranks=$2 steps=$3
  shift 3
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/tiny.toml "${model[@]}" \
    --set run.steps="$steps" --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { tail "$work/$name.log"; fail "$name"; }
}
# scores NAME: each rank's lowest score over the run, then its last
scores() {
  /usr/bin/python3 -c "
import h5py, numpy as np
s = h5py.File('$work/$1/tiny/timings.h5')['straggler_score'][:]
assert np.isnan(s[:7]).all() and not np.isnan(s[7:]).any(), 'NaN only in the first 7 steps'
print(' '.join(f'{v:.2f}' for v in np.nanmin(s, axis=0)), '|', ' '.join(f'{v:.2f}' for v in s[-1]),
      '|', ' '.join(f'{v:.2f}' for v in np.nanmax(s, axis=0)))"
}

# The slowed rank is rank 0, the rank that writes every step line naming a straggler: with rank 2
# slowed instead, a healthy rank 0 on four ranks sharing two cores fell to 0.72-0.75 for most steps
# of a run (2 runs in 8 on a 2-core VM named it); slowing rank 0, 22 runs of 22 passed there, the
# healthy ranks' lowest scores 0.77-1.00.
run slow 4 30 --set parallel.dp=4 --inject-fault slow:5:0:2
read -r -a low <<< "$(scores slow | cut -d'|' -f1)"
for r in 1 2 3; do
  awk -v v="${low[$r]}" 'BEGIN { exit !(v >= 0.75) }' || fail "rank $r fell to ${low[$r]}"
done
last=$(scores slow | cut -d'|' -f2 | awk '{print $1}')
awk -v v="$last" 'BEGIN { exit !(v < 0.75) }' || fail "the slowed rank 0 scores $last"
grep -q "^step    30/30 .* | slow: rank 0 0\.[0-9]*$" "$work/slow.log" ||
  fail "the step line does not name rank 0 alone"
! grep "| slow:" "$work/slow.log" | grep -q "rank [123] " || fail "a step line names another rank"
echo "slow:5:0:2 on rank 0 of 4: lowest scores $(scores slow | cut -d'|' -f1)(rank 0 ends at $last)"

run steady 2 50 --set parallel.dp=2
! grep -q "| slow:" "$work/steady.log" || fail "an unperturbed run named a straggler"
echo "50 steps unperturbed, 2 ranks: lowest scores $(scores steady | cut -d'|' -f1)"
read -r -a low <<< "$(scores steady | cut -d'|' -f1)"
for r in 0 1; do
  awk -v v="${low[$r]}" 'BEGIN { exit !(v >= 0.75) }' || fail "unperturbed rank $r fell to ${low[$r]}"
done

run stages 2 30 --set parallel.pp=2
! grep -q "| slow:" "$work/stages.log" || fail "pp 2 named a straggler"
[ "$(scores stages)" = "1.00 1.00 | 1.00 1.00 | 1.00 1.00" ] ||
  fail "pp 2: each stage alone in its section should score 1, got $(scores stages)"
echo "pp 2, stages scored apart: every score 1"
echo "stragglers: ok"
