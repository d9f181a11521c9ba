#!/usr/bin/env bash
# Faults end the job with a message, never a hang (4 ranks, dp 2 x tp 2):
#  - a rank killed mid-run (SIGKILL): the job ends within 60 s naming the rank;
#  - a rank hung in its forward: every rank's watchdog (run.watchdog_seconds = 5) prints its
#    phase and the job ends within 60 s;
#  - a rank killed inside a checkpoint write: the previous checkpoint stays loadable and
#    --resume auto continues from it, bit-identical to an uninterrupted run;
#  - a non-finite loss stops the run naming the step (exit 3).
set -uo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=6 --set run.eval_every=0
        --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2)
fail() { echo "FAIL: $*"; exit 1; }
timed() {  # name args...: runs 4 ranks under a 120 s guard, prints rc and seconds
  local name=$1
  shift
  local start=$SECONDS
  timeout 120 mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1
  rc=$?
  elapsed=$((SECONDS - start))
  echo "$name: exit $rc after $elapsed s"
}
timed killed --inject-fault kill:3:1
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a killed rank: exit status $rc"
[ $elapsed -le 60 ] || fail "a killed rank: the job took $elapsed s to end"
grep -E "rank 1 .*(signal 9|Killed)" "$work/killed.log" || fail "the message does not name rank 1"

timed hung --set run.watchdog_seconds=5 --inject-fault hang:3:2
[ $rc -ne 0 ] || fail "a hung rank: exit status 0"
[ $elapsed -le 60 ] || fail "a hung rank: the job took $elapsed s to end"
grep "watchdog" "$work/hung.log"
grep -q "watchdog: rank 2 has been in phase forward of step 3" "$work/hung.log" ||
  fail "the hung rank's phase is not reported"
[ "$(grep -c "watchdog: rank [0-9] has been in phase" "$work/hung.log")" -eq 4 ] ||
  fail "not every rank reported its phase"

timed reference
[ $rc -eq 0 ] || fail "reference run"
timed interrupted --inject-fault kill-in-checkpoint:4:1
[ $rc -ne 0 ] || fail "killed inside a checkpoint write: exit status 0"
ls "$work/interrupted/tiny/checkpoints"
[ ! -e "$work/interrupted/tiny/checkpoints/step_000004.h5" ] || fail "a half-written checkpoint has its final name"
# The requeued job: the same command line with --resume auto.
mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.out_dir="$work/interrupted" \
  --resume auto > "$work/resumed.log" 2>&1 || fail "resume after the interrupted write"
grep -q "resumed from .*step_000002.h5 at step 2" "$work/resumed.log" || fail "did not resume from step 2"
$check compare "$work/reference/tiny/timings.h5" "$work/interrupted/tiny/timings.2.h5" \
  --from-step 3 --min-steps 4 --exact || exit 1

"$trident" train --config inputs/tiny.toml --set run.steps=20 --set optim.lr=1e6 \
  --set optim.max_norm=0 --set run.out_dir="$work/nan" > "$work/nan.log" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "a non-finite loss: exit status $rc, expected 3"
grep -E "error: loss is -?(nan|inf) at step [0-9]+; stopping" "$work/nan.log" || fail "no message"
echo "faults: ok"
