#!/usr/bin/env bash
# On a real Slurm cluster on localhost: sbatch jobs/train.sh, signal the run's ranks as Slurm does
# before the time limit, and check that the job requeues itself and the run continues to the end.
# usage: slurm_requeue.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
# `scancel --signal=USR1 JOB` delivers SIGUSR1 to the job's steps (the ranks), not to the batch
# shell, which is what the script's `#SBATCH --signal=USR1@300` makes Slurm do 300 s before the
# limit; sending it ourselves keeps the test short and its timing certain. Checks: the job ends
# COMPLETED after one restart, the log shows the stop (exit 4, checkpoint) and the resume from
# that step, the run directory holds two timings segments that read as every step once.
# A requeued job may start again only when its old credential has expired (120 s by default).
export SLURM_CRED_EXPIRE=10
source "$(dirname "$0")/slurm_cluster.sh" "$1" "$2" "$3" 1

steps=2000
run=$work/runs/train/requeued
cd "$src"
job=$(TRIDENT=$exe CONFIG=inputs/tiny.toml STEPS=$steps RUNS_DIR=$work/runs RUN_NAME=requeued \
  SETS="run.log_every=50 run.eval_every=0 run.checkpoint_every=100" \
  sbatch --parsable --output="$work/train.out" --nodes=1 --ntasks-per-node=2 jobs/train.sh)
echo "submitted job $job"
# The run is under way once its first checkpoint is in place (renamed only when complete; the
# log is no clock, as srun may pass the ranks' output on in bursts).
for _ in $(seq 1200); do
  [[ -f $run/checkpoints/step_000100.h5 ]] && break
  sleep 0.1
done
[[ -f $run/checkpoints/step_000100.h5 ]] || fail "the run did not reach step 100"
scancel --signal=USR1 "$job"
echo "sent SIGUSR1 to the ranks of job $job"
job_completes 360
[[ $(job_field Restarts) == 1 ]] || fail "restarts: $(job_field Restarts), want 1"
[[ $(job_field ExitCode) == 0:0 ]] || fail "exit code $(job_field ExitCode)"
line=$(grep "^stopping after step" "$run/trident.log") || fail "no stopping line"
stopped=$(sed -E 's/^stopping after step ([0-9]+)\/.*/\1/' <<<"$line")
[[ $line == *"on SIGUSR1: checkpoint $run/checkpoints/step_$(printf %06d "$stopped").h5; continue with --resume auto" ]] ||
  fail "stopping line: $line"
grep -q "train: stopped early with a checkpoint; requeueing job $job" "$work/train.out" ||
  fail "the script did not requeue"
grep -q "^resumed from $run/checkpoints/step_$(printf %06d "$stopped").h5 at step $stopped" \
  "$run/trident.log" || fail "the requeued job did not resume from step $stopped"
grep -q "^PERFORMANCE steps=$((steps - stopped)) ranks=2" "$run/trident.log" || fail "no final PERFORMANCE"
[[ $(cat "$run/status") == completed ]] || fail "status $(cat "$run/status")"
"$python" - "$src/analysis" "$run" "$steps" "$stopped" "$job" <<'PY' || fail "timings"
import sys
import h5py
sys.path.insert(0, sys.argv[1])
import trident_runs as tr
run_dir, steps, stopped, job = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
(run,) = tr.load_runs([run_dir], strict=True, warmup=None)
assert [s.rsplit("/", 1)[1] for s in run.segments] == ["timings.h5", "timings.2.h5"], run.segments
assert list(run.data["step"]) == list(range(1, steps + 1))
for name, first in (("timings.h5", 1), ("timings.2.h5", stopped + 1)):
    with h5py.File(f"{run_dir}/{name}") as f:
        assert f.attrs["slurm_job_id"] == job and int(f["step"][0]) == first, name
print(f"requeued once at step {stopped}; {steps} steps in 2 segments")
PY
job=
echo PASS
