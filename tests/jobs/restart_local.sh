#!/usr/bin/env bash
# jobs/train.sh relaunches a failed run by itself (LAUNCHER=mpirun): a rank killed at step 5
# resumes from the step-4 checkpoint to parameters bit-equal to an uninterrupted run's; a run that
# hangs before every new checkpoint stops after NO_PROGRESS relaunches, with trident doctor's
# host in the log and each start's flight records kept.
# usage: restart_local.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
set -euo pipefail
exe=$(realpath "$1")
src=$(realpath "$2")
work=$3
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
cd "$src"
unset SLURM_JOB_ID
fail() { echo "FAIL: $*" >&2; exit 1; }
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
common=(LAUNCHER=mpirun CONFIG=inputs/tiny.toml RUNS_DIR=$work/runs RANKS=2 STEPS=8)
sets="run.checkpoint_every=2 run.eval_every=0"

# A trident that injects FAULT into the first start only (no checkpoint yet), then runs as is.
cat > "$work/faulty_once" <<SH
#!/usr/bin/env bash
[ "\$1" != train ] || [ -e "$work/runs/train/killed/checkpoints/step_000002.h5" ] ||
  set -- "\$@" --inject-fault kill:5:1
exec "$exe" "\$@"
SH
# A trident whose rank 1 hangs in its first data-parallel operation of step 3, every start (the
# watchdog above the checkpoint writes' seconds on a loaded machine).
cat > "$work/hangs" <<SH
#!/usr/bin/env bash
[ "\$1" = train ] && set -- "\$@" --inject-fault hang-comm:3:1:dp
exec "$exe" "\$@"
SH
chmod +x "$work/faulty_once" "$work/hangs"

env "${common[@]}" RUN_NAME=clean SETS="$sets" TRIDENT="$exe" bash jobs/train.sh \
  > "$work/clean.out" 2>&1 || { cat "$work/clean.out"; fail "the uninterrupted run"; }
rc=0
env "${common[@]}" RUN_NAME=killed SETS="$sets" TRIDENT="$work/faulty_once" bash jobs/train.sh \
  > "$work/killed.out" 2>&1 || rc=$?
[[ $rc == 0 && $(cat "$work/runs/train/killed/status") == completed ]] ||
  { cat "$work/killed.out"; fail "the killed run: exit $rc"; }
grep -q "relaunching with --resume auto (1 of MAX_RESTARTS=3)" "$work/killed.out" ||
  { cat "$work/killed.out"; fail "no relaunch line"; }
grep -q "^  resumed from .*step_000004.h5 at step 4" "$work/killed.out" ||
  { cat "$work/killed.out"; fail "the relaunch did not resume from step 4"; }
$check params-equal "$work/runs/train/clean/checkpoints/step_000008.h5" \
  "$work/runs/train/killed/checkpoints/step_000008.h5" || fail "parameters differ"
echo "killed at step 5, relaunched by itself from step 4: final parameters bit-equal"

rc=0
env "${common[@]}" RUN_NAME=hung SETS="$sets run.watchdog_seconds=8" TRIDENT="$work/hangs" \
  NO_PROGRESS=2 bash jobs/train.sh > "$work/hung.out" 2>&1 || rc=$?
[[ $rc != 0 && $(cat "$work/runs/train/hung/status") == failed ]] ||
  { cat "$work/hung.out"; fail "the hanging run: exit $rc"; }
grep -q "2 times in a row without a new checkpoint (the newest is step 2): not relaunching" \
  "$work/hung.out" || { cat "$work/hung.out"; fail "no no-progress message"; }
[[ $(grep -c "trident doctor names host" "$work/hung.out") == 3 ]] ||
  { cat "$work/hung.out"; fail "trident doctor did not name the host after each hang"; }
[[ -d $work/runs/train/hung/flight.start-1.1 && -d $work/runs/train/hung/flight.start-1.3 ]] ||
  fail "flight records not kept per start: $(ls "$work/runs/train/hung")"
grep -q "^the rank that hangs: rank 1 " "$work/runs/train/hung/trident.log" ||
  fail "the log lacks the doctor's verdict"
echo "a run hanging before each new checkpoint: stopped after 2 relaunches without progress," \
  "rank 1 named by trident doctor after each of the 3 hangs"
echo "restart: ok"
