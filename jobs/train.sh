#!/usr/bin/env bash
# One long training run that outlives its time limit: Slurm signals the ranks before it, trident checkpoints and exits 4, the job requeues itself and continues with --resume auto.
#SBATCH --job-name=trident-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=04:00:00
#SBATCH --signal=USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
USAGE="usage: sbatch [--nodes=N --ntasks-per-node=R --time=T] jobs/train.sh

Trains CONFIG on RANKS ranks into RUNS_DIR/train/RUN_NAME/, always with --resume auto, so that
every start of the job continues the run from its newest valid checkpoint. Five minutes before
the time limit Slurm sends SIGUSR1 to the ranks (--signal=USR1@300): trident finishes the step,
writes a checkpoint and exits with status 4, and this script requeues the job (scontrol requeue;
the job keeps its id, and --open-mode=append keeps one log). A preemption (SIGTERM) does the
same. The job ends when the run reaches run.steps, or fails on any other exit status, which is
never requeued (a bad config would fail forever). Resubmitting the script later continues the
run too; RUN_NAME picks it.

experiment environment variables:
  RANKS                      ranks of the run (default: all of the allocation)
  RUN_NAME                   the run's directory name (default: the config's run.name)
  MAX_REQUEUES=20            stop requeueing after this many restarts (SLURM_RESTART_COUNT)
  STEPS                      run.steps (default: the config's)

Outside Slurm (LAUNCHER=mpirun) the run stops at exit status 4 and says to start it again.
"
common=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/jobs/lib/common.sh
[[ -f $common ]] || { echo "train: no $common; submit from a trident checkout" >&2 && exit 2; }
source "$common"
steps_given=${STEPS-}
JOB_SWEEP=0 job_init train "$USAGE
$JOB_COMMON_USAGE" "$@"
set -uo pipefail

RANKS=${RANKS:-$JOB_MAX_RANKS}
MAX_REQUEUES=${MAX_REQUEUES:-20}
job_require_count RANKS 1
job_require_count MAX_REQUEUES 0
RUN_NAME=${RUN_NAME:-$(job_resolve --ranks "$RANKS" | toml_value run name)} ||
  job_die "CONFIG=$CONFIG does not resolve on $RANKS ranks"
[[ -n $RUN_NAME ]] || job_die "no run name: set RUN_NAME"
# One path component: RUN_NAME=../.. once wrote outside RUNS_DIR.
[[ $RUN_NAME != */* && $RUN_NAME != . && $RUN_NAME != .. ]] ||
  job_die "RUN_NAME='$RUN_NAME' must be one path component (no '/', not '.' or '..')"
out=${RUNS_DIR:-$TRIDENT_ROOT/runs}/train
dir=$out/$RUN_NAME
mkdir -p "$dir" || job_die "cannot create $dir"
restart=${SLURM_RESTART_COUNT:-0}
sets=(--set "run.out_dir=$out" --set "run.name=$RUN_NAME")
[[ -n $steps_given ]] && sets+=(--set "run.steps=$steps_given")
[[ ${#JOB_EXTRA_SETS[@]} -gt 0 ]] && sets+=("${JOB_EXTRA_SETS[@]/#/--set=}")
if [[ $JOB_LAUNCHER == srun ]]; then
  cmd=(srun --ntasks="$RANKS" ${SRUN_ARGS-} "$TRIDENT" train --config "$CONFIG" "${sets[@]}"
    --resume auto)
else
  job_rank_output "$dir/trident.log"
  cmd=(mpirun -np "$RANKS" --oversubscribe ${MPIRUN_ARGS-} "${JOB_RANK_OUTPUT[@]}" "$TRIDENT" train
    --config "$CONFIG" "${sets[@]}" --resume auto)
fi
job_log "train: job $JOB_ID (start $((restart + 1))) via $JOB_LAUNCHER, $RANKS ranks, config" \
  "$CONFIG; run directory $dir; log $dir/trident.log"
printf '%q ' "${cmd[@]}" >"$dir/command"
echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) job $JOB_ID start $((restart + 1))" >>"$dir/trident.log"
earlier_lines=$(wc -l <"$dir/trident.log")
rm -f "$dir/stopped"
job_child "$dir/trident.log" "${cmd[@]}"
# This start's milestones, in the job's own log.
this_start=$(tail -n +$((earlier_lines + 1)) "$dir/trident.log")
grep -E "^(resumed from|stopping after|run .* is already complete|PERFORMANCE)" <<<"$this_start" |
  sed 's/^/  /'
rc=$(job_run_status "$JOB_RC" "$dir")
case $rc in
  0)
    job_log "train: run complete"
    echo completed >"$dir/status"
    exit 0
    ;;
  4)
    echo stopped >"$dir/status"
    if ((JOB_DEADLINE == 2)); then
      job_log "train: cancelled; the checkpoint is kept: submit again to continue"
      exit 4
    elif [[ $JOB_LAUNCHER != srun ]]; then
      job_log "train: stopped early with a checkpoint; run the script again to continue"
      exit 4
    elif ((restart >= MAX_REQUEUES)); then
      job_log "train: stopped early, and MAX_REQUEUES=$MAX_REQUEUES restarts are used up"
      exit 4
    fi
    job_log "train: stopped early with a checkpoint; requeueing job $JOB_ID"
    scontrol requeue "$JOB_ID" || job_die "scontrol requeue $JOB_ID failed; submit again to continue"
    exit 0
    ;;
  *)
    echo failed >"$dir/status"
    job_log "train: failed with exit status $rc (not requeued); see $dir/trident.log"
    tail -n 5 "$dir/trident.log" | sed 's/^/  /'
    exit "$rc"
    ;;
esac
