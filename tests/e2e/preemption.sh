#!/usr/bin/env bash
# Preemption, as a cluster delivers it (4 ranks, dp 2 x tp 2):
#  - SIGUSR1 to one rank mid-run: every rank stops after the same step, a checkpoint of that step
#    is written, one line says why and how to continue, exit status 4; --resume auto then
#    finishes the run bit-identical to an uninterrupted one;
#  - SIGTERM does the same, and more SIGTERMs during the shutdown leave exit status 4;
#  - run.stop_signals = none leaves the signal's default (the job dies);
#  - run.max_minutes stops before the budget runs out, with a checkpoint and exit status 4;
#  - a bad signal name is refused before the run starts.
set -uo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
steps=300  # the signals arrive after step 10; the reference and the resumed run go to the end
common=(--config inputs/tiny.toml --set run.steps=$steps --set run.eval_every=0
        --set run.checkpoint_every=0 --set parallel.dp=2 --set parallel.tp=2)
fail() { echo "FAIL: $*"; exit 1; }
run4() {  # out_dir args...: 4 ranks in the background; sets pid
  local out=$1
  shift
  mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.out_dir="$out" "$@" \
    > "$out.log" 2>&1 &
  pid=$!
}
# signal NAME out: once the run has made a few steps, sends NAME to its rank 1 only.
signal_rank1() {
  local name=$1 out=$2
  for _ in $(seq 600); do
    grep -q "^step    10/" "$out.log" 2>/dev/null && break
    sleep 0.1
  done
  local ranks
  mapfile -t ranks < <(pgrep -f -- "run.out_dir=$out( |$)" | sort -n)
  ((${#ranks[@]} >= 2)) || fail "$name: no ranks found for $out"
  # pgrep lists mpirun first, then its four ranks in launch order.
  kill -s "$name" "${ranks[2]}"
}

run4 "$work/reference" --set run.log_every=1
wait $pid || fail "reference run"

run4 "$work/usr1" --set run.log_every=1
signal_rank1 USR1 "$work/usr1"
wait $pid
rc=$?
[ $rc -eq 4 ] || { tail -5 "$work/usr1.log"; fail "SIGUSR1: exit status $rc, expected 4"; }
line=$(grep "^stopping after step" "$work/usr1.log") || fail "SIGUSR1: no stopping line"
echo "$line"
stopped=$(sed -E 's/^stopping after step ([0-9]+)\/.*/\1/' <<<"$line")
[[ $line == *"on SIGUSR1: checkpoint $work/usr1/tiny/checkpoints/step_$(printf %06d "$stopped").h5; continue with --resume auto" ]] ||
  fail "SIGUSR1: unexpected line"
((stopped < steps)) || fail "SIGUSR1: stopped only at the end"
grep -q "^PERFORMANCE steps=$stopped " "$work/usr1.log" || fail "SIGUSR1: PERFORMANCE does not count the steps made"
mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.out_dir="$work/usr1" \
  --resume auto > "$work/usr1_resumed.log" 2>&1 || fail "resume after SIGUSR1"
grep -q "resumed from .*step_$(printf %06d "$stopped").h5 at step $stopped" "$work/usr1_resumed.log" ||
  fail "did not resume from step $stopped"
$check compare "$work/reference/tiny/timings.h5" "$work/usr1/tiny/timings.2.h5" \
  --from-step $((stopped + 1)) --min-steps 1 --exact || exit 1

run4 "$work/term"
signal_rank1 TERM "$work/term"
wait $pid
rc=$?
[ $rc -eq 4 ] || fail "SIGTERM: exit status $rc, expected 4"
grep -q "^stopping after step [0-9]*/$steps on SIGTERM: checkpoint" "$work/term.log" || fail "SIGTERM: no stopping line"

# SIGTERMs that keep coming while the run stops and shuts down (after its stop checkpoint, while
# MPI and Kokkos finalise) leave the clean stop's exit status 4, not death by the signal (143).
for attempt in 1 2 3; do
  "$trident" train "${common[@]}" --set parallel.dp=1 --set parallel.tp=1 --set run.log_every=1 \
    --set run.out_dir="$work/late$attempt" > "$work/late$attempt.log" 2>&1 &
  late=$!
  for _ in $(seq 600); do
    grep -q "^step    10/" "$work/late$attempt.log" 2>/dev/null && break
    sleep 0.1
  done
  while kill -TERM $late 2>/dev/null; do sleep 0.002; done
  wait $late
  rc=$?
  [ $rc -eq 4 ] || { tail -3 "$work/late$attempt.log"; fail "SIGTERMs during shutdown: exit status $rc, expected 4"; }
done

run4 "$work/unhandled" --set run.stop_signals=none
signal_rank1 USR1 "$work/unhandled"
wait $pid
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 4 ] || fail "run.stop_signals = none: exit status $rc"
! grep -q "^stopping after" "$work/unhandled.log" || fail "run.stop_signals = none still stopped gracefully"

"$trident" train "${common[@]}" --set parallel.dp=1 --set parallel.tp=1 \
  --set run.out_dir="$work/budget" --set run.max_minutes=0.00001 > "$work/budget.log" 2>&1
rc=$?
[ $rc -eq 4 ] || fail "run.max_minutes: exit status $rc, expected 4"
grep "^stopping after step 1/$steps on the time budget run.max_minutes" "$work/budget.log" ||
  fail "run.max_minutes: no stopping line"
[ -f "$work/budget/tiny/checkpoints/step_000001.h5" ] || fail "run.max_minutes: no checkpoint"

"$trident" train "${common[@]}" --set parallel.dp=1 --set parallel.tp=1 \
  --set run.stop_signals=USR1,KILL > "$work/bad.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "bad signal name: exit status $rc"
grep -q "run.stop_signals = 'USR1,KILL' must be a comma-separated list of TERM, INT, USR1, USR2, HUP, or none" \
  "$work/bad.log" || fail "bad signal name: message"
echo "preemption: ok"
