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
  MAX_RESTARTS=3             relaunches within the allocation after a failure (0: none)
  NO_PROGRESS=2              stop when this many relaunches in a row add no checkpoint
  STEPS                      run.steps (default: the config's)

A failure (a dead rank, the watchdog ending a hang, any exit status but 0 and 4) is relaunched
in the same allocation with --resume auto, up to MAX_RESTARTS times: trident doctor reads the
flight records first (kept as flight.start-N), and under srun a host it names is excluded when
the allocation has a node to spare. A run that fails NO_PROGRESS times in a row without a new
checkpoint stops with a message. Outside Slurm (LAUNCHER=mpirun) the same relaunches happen on
this machine; the run stops at exit status 4 and says to start it again.
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
MAX_RESTARTS=${MAX_RESTARTS:-3}
NO_PROGRESS=${NO_PROGRESS:-2}
job_require_count RANKS 1
job_require_count MAX_REQUEUES 0
job_require_count MAX_RESTARTS 0
job_require_count NO_PROGRESS 1
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
# The newest checkpoint's step (0: none): what a relaunch must improve on to count as progress.
newest_checkpoint() {
  local newest
  newest=$(ls "$dir/checkpoints" 2>/dev/null | sed -n 's/^step_0*\([0-9][0-9]*\)\.h5$/\1/p' |
    sort -n | tail -n 1)
  echo "${newest:-0}"
}
# The host `trident doctor` names as the one the others wait for, from this start's records.
hanging_host() {
  [[ -d $dir/flight ]] || return 0
  "$TRIDENT" doctor "$dir" 2>/dev/null | tee -a "$dir/trident.log" |
    sed -n 's/^the rank that hangs: rank [0-9]* (host \([^)]*\)).*/\1/p' | head -n 1
}
excluded=()
launch() {
  local exclude=()
  # srun spreads a step over every node of the allocation unless told fewer: the nodes left.
  ((${#excluded[@]})) && exclude=(--exclude="$(IFS=,; echo "${excluded[*]}")"
    --nodes=$((${SLURM_JOB_NUM_NODES:-1} - ${#excluded[@]})))
  if [[ $JOB_LAUNCHER == srun ]]; then
    cmd=(srun --ntasks="$RANKS" "${exclude[@]}" ${SRUN_ARGS-} "$TRIDENT" train --config "$CONFIG"
      "${sets[@]}" --resume auto)
  else
    job_rank_output "$dir/trident.log"
    cmd=(mpirun -np "$RANKS" --oversubscribe ${MPIRUN_ARGS-} "${JOB_RANK_OUTPUT[@]}" "$TRIDENT"
      train --config "$CONFIG" "${sets[@]}" --resume auto)
  fi
  printf '%q ' "${cmd[@]}" >"$dir/command"
  echo "=== $(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) job $JOB_ID start $((restart + 1))" \
    "launch $((relaunches + 1))" >>"$dir/trident.log"
  earlier_lines=$(wc -l <"$dir/trident.log")
  rm -f "$dir/stopped"
  job_child "$dir/trident.log" "${cmd[@]}"
  # This launch's milestones, in the job's own log.
  this_start=$(tail -n +$((earlier_lines + 1)) "$dir/trident.log")
  grep -E "^(resumed from|stopping after|run .* is already complete|PERFORMANCE)" <<<"$this_start" |
    sed 's/^/  /'
}
job_log "train: job $JOB_ID (start $((restart + 1))) via $JOB_LAUNCHER, $RANKS ranks, config" \
  "$CONFIG; run directory $dir; log $dir/trident.log"
relaunches=0 stalled=0
while true; do
  before=$(newest_checkpoint)
  launch
  rc=$(job_run_status "$JOB_RC" "$dir")
  ((rc == 0 || rc == 4 || JOB_DEADLINE)) && break
  after=$(newest_checkpoint)
  if ((after > before)); then stalled=0; else stalled=$((stalled + 1)); fi
  host=$(hanging_host)
  [[ -n $host ]] && job_log "train: trident doctor names host $host (the rank the others wait for)"
  [[ -d $dir/flight ]] && mv "$dir/flight" "$dir/flight.start-$((restart + 1)).$((relaunches + 1))"
  if ((relaunches >= MAX_RESTARTS)); then
    job_log "train: failed with exit status $rc, and MAX_RESTARTS=$MAX_RESTARTS relaunches are used up"
    break
  elif ((stalled >= NO_PROGRESS)); then
    job_log "train: failed with exit status $rc $stalled times in a row without a new" \
      "checkpoint (the newest is step $after): not relaunching a run that makes no progress;" \
      "see $dir/trident.log"
    break
  fi
  if [[ -n $host && $JOB_LAUNCHER == srun ]]; then
    per_node=${SLURM_NTASKS_PER_NODE:-$RANKS}
    per_node=${per_node%%[!0-9]*}  # "4(x2)" on some clusters
    nodes_needed=$(((RANKS + per_node - 1) / per_node))
    if ((${SLURM_JOB_NUM_NODES:-1} - ${#excluded[@]} - 1 >= nodes_needed)); then
      excluded+=("$host")
      job_log "train: leaving host $host out of the relaunch"
    else
      job_log "train: the allocation has no node to spare for host $host"
    fi
  fi
  relaunches=$((relaunches + 1))
  job_log "train: failed with exit status $rc at checkpoint step $after; relaunching with" \
    "--resume auto ($relaunches of MAX_RESTARTS=$MAX_RESTARTS)"
done
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
