#!/usr/bin/env bash
# jobs/train.sh relaunches a failed run by itself (LAUNCHER=mpirun): a rank killed at step 5
# resumes from the step-3 checkpoint to parameters bit-equal to an uninterrupted run's, and
# analysis/goodput.py counts step 4 as lost and the restart to within a second of the job log; a
# run that hangs before every new checkpoint stops after NO_PROGRESS relaunches, with trident
# doctor's host in the log and each start's flight records kept.
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
sets="run.checkpoint_every=3 run.eval_every=0"

# A trident that injects FAULT into the first start only (no checkpoint yet), then runs as is.
cat > "$work/faulty_once" <<SH
#!/usr/bin/env bash
[ "\$1" != train ] || [ -e "$work/runs/train/killed/checkpoints/step_000003.h5" ] ||
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
grep -q "^  resumed from .*step_000003.h5 at step 3" "$work/killed.out" ||
  { cat "$work/killed.out"; fail "the relaunch did not resume from step 3"; }
$check params-equal "$work/runs/train/clean/checkpoints/step_000008.h5" \
  "$work/runs/train/killed/checkpoints/step_000008.h5" || fail "parameters differ"
echo "killed at step 5, relaunched by itself from step 3: final parameters bit-equal"
# Goodput: step 4 ran twice (lost once); the restart, from the first launch's last step to the
# second process's start, is the job log's launch line's time after that step within a second
# (the process starts after mpirun has launched it).
/usr/bin/python3 analysis/goodput.py "$work/runs/train/killed" --out "$work/goodput" > "$work/goodput.out" ||
  { cat "$work/goodput.out"; fail "goodput.py"; }
/usr/bin/python3 - "$work" <<'PY' || fail "the goodput report"
import csv, datetime, re, sys
import h5py
work = sys.argv[1]
row = next(csv.DictReader(open(f"{work}/goodput/goodput.csv")))
assert row["lost_steps"] == "4", row
with h5py.File(f"{work}/runs/train/killed/timings.h5") as f:
    first_end, step4 = f["step_end_unix"][-1], f["step_seconds_max"][3]
    assert list(f["step"][()]) == [1, 2, 3, 4], f["step"][()]
log = open(f"{work}/runs/train/killed/trident.log").read()
stamp = re.search(r"^=== (\S+) job \S+ start 1 launch 2$", log, re.M).group(1)
launched = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
    tzinfo=datetime.timezone.utc).timestamp()
restart = float(row["restart_s"])
low, high = launched - first_end, launched - first_end + 1.0
assert low - 1e-6 <= restart <= high, (restart, low, high)
assert abs(float(row["lost_s"]) - step4) < 1e-9, (row["lost_s"], step4)
total = sum(float(row[k]) for k in ("productive_s", "checkpoint_s", "lost_s", "startup_s",
                                    "restart_s", "straggler_s", "other_s"))
assert abs(total - float(row["wall_s"])) < 1e-6, (total, row["wall_s"])
print(f"goodput {float(row['goodput']):.3f}: lost step 4 ({float(row['lost_s']):.3f} s), restart "
      f"{restart:.2f} s, {restart - low:.2f} s after the job log's relaunch line")
PY
# The plan's checkpoint interval from the measured write time (seconds per checkpoint written).
per_write=$(/usr/bin/python3 -c "
import csv; r = next(csv.DictReader(open('$work/goodput/goodput.csv')))
assert r['checkpoints'] == '3', r  # steps 3, 6 and 8
print(max(float(r['seconds_per_checkpoint']), 0.001))")
"$exe" plan --checkpoint-seconds "$per_write" --mtbf-hours 1 --restart-seconds 2 > "$work/plan.out" ||
  fail "plan --checkpoint-seconds"
grep -q "^checkpoint every .* min (Daly's optimum; Young's .* min) for .* s writes and a failure every 1 h with 2 s restarts: expected effective training time" "$work/plan.out" ||
  { cat "$work/plan.out"; fail "no checkpoint interval from plan"; }
cat "$work/plan.out"

rc=0
env "${common[@]}" RUN_NAME=hung SETS="run.checkpoint_every=2 run.eval_every=0 run.watchdog_seconds=8" TRIDENT="$work/hangs" \
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
