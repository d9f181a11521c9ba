# Shared machinery of the jobs/ scripts: the guard, site profile, rank counts, one run per layout, statuses.
# Sourced, never run; every jobs/*.sh calls job_init first and job_finish last.
#
# A run's outputs: runs/<experiment>/<job id>/<layout>/ with timings.h5 (trident's), trident.log,
# run.json (what ran, exit code, seconds) and status: one word, `completed`, `failed` (non-zero
# exit, cancelled, or no timings.h5) or `timeout` (RUN_TIMEOUT or the job's time limit hit it);
# `running` is left only when the job was killed outright. The sweep directory holds sweep.json.

# The parameters every script takes, for its --help.
JOB_COMMON_USAGE="common environment variables:
  CONFIG=inputs/small.toml  run config (model, data, optimizer); the script sets the layout
  STEPS=30                  training steps per run
  WARMUP=3                  steps the analysis leaves out before taking medians
  SETS=\"k=v ...\"           extra trident overrides for every run, e.g. SETS=\"precision.compute=bf16\"
  RANKS_PER_NODE            ranks on each node (default: GPUS_PER_NODE, else Slurm's tasks per node,
                            else the cores here)
  GPUS_PER_NODE=0           GPUs per node (one rank each); 0 on CPU builds
  THREADS_PER_RANK          OpenMP threads of each rank, for its Kokkos kernels and GEMMs alike
                            (default: Slurm's --cpus-per-task, else OMP_NUM_THREADS, else 1);
                            R ranks x T threads: sbatch --ntasks-per-node=R --cpus-per-task=T
  SITE=local                jobs/machines/<SITE>/profile.sh: modules, launcher and NCCL settings
  RUN_TIMEOUT=0             seconds before one run is stopped and marked timeout (0: no limit)
  RUNS_DIR=runs             outputs go to RUNS_DIR/<experiment>/<job id>/<layout>/
  KEEP_CHECKPOINTS=0        1: each run writes a checkpoint at its end (0: none, run.checkpoint_every=-1)
  TRIDENT=build/src/trident, PYTHON=python3 (with h5py, numpy, pandas, matplotlib)
  LAUNCHER=mpirun           outside Slurm only: run every layout with mpirun on this machine"

job_die() {
  echo "${JOB_EXPERIMENT:-jobs}: error: $*" >&2
  exit 2
}

job_log() { echo "[$(date +%H:%M:%S)] $*"; }

# Resolves the repository, refuses to run outside Slurm unless asked, loads the site profile and
# the parameters every experiment shares. $1: the experiment name, $2: the script's usage text,
# then the script's own arguments (only -h/--help is taken; parameters are environment variables).
job_init() {
  JOB_EXPERIMENT=$1
  local usage=$2 arg
  shift 2
  for arg in "$@"; do
    case $arg in
      -h | --help)
        echo "$usage"
        exit 0
        ;;
      *) job_die "unknown argument '$arg': parameters are environment variables (see --help)" ;;
    esac
  done
  # sbatch runs a copy of the script from its spool directory, so the repository is found from
  # where the job was submitted (or TRIDENT_ROOT), not from the script's own path.
  TRIDENT_ROOT=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
  if [[ ! -f $TRIDENT_ROOT/jobs/lib/common.sh ]]; then
    job_die "$TRIDENT_ROOT is not a trident checkout; submit from the repository root" \
      "(cd trident && sbatch jobs/$JOB_EXPERIMENT.sh) or set TRIDENT_ROOT"
  fi
  cd "$TRIDENT_ROOT" || job_die "cannot enter $TRIDENT_ROOT"

  if [[ -n ${SLURM_JOB_ID-} ]]; then
    JOB_LAUNCHER=srun
    JOB_ID=$SLURM_JOB_ID
  elif [[ ${LAUNCHER-} == mpirun ]]; then
    JOB_LAUNCHER=mpirun
    JOB_ID=local-$(date +%Y%m%d-%H%M%S)-$$
  else
    cat >&2 <<EOF
$JOB_EXPERIMENT: not inside a Slurm allocation (SLURM_JOB_ID is unset).
  On a cluster, submit it from the repository root:
      sbatch jobs/$JOB_EXPERIMENT.sh                 (defaults in its #SBATCH lines)
      sbatch --nodes=4 --ntasks-per-node=8 jobs/$JOB_EXPERIMENT.sh
  or from an interactive allocation (salloc), run it with bash.
  On a workstation, without Slurm, every run goes through mpirun on this machine:
      LAUNCHER=mpirun RANKS_PER_NODE=4 bash jobs/$JOB_EXPERIMENT.sh
  Parameters: bash jobs/$JOB_EXPERIMENT.sh --help
EOF
    exit 2
  fi

  SITE=${SITE:-local}
  local profile=$TRIDENT_ROOT/jobs/machines/$SITE/profile.sh
  [[ -f $profile ]] || job_die "no site profile $profile (SITE=$SITE); see jobs/machines/"
  # shellcheck source=/dev/null
  source "$profile"

  TRIDENT=${TRIDENT:-$TRIDENT_ROOT/build/src/trident}
  PYTHON=${PYTHON:-python3}
  [[ -x $TRIDENT ]] || job_die "$TRIDENT is missing; build first (make build) or set TRIDENT"
  CONFIG=${CONFIG:-inputs/small.toml}
  [[ -f $CONFIG ]] || job_die "CONFIG=$CONFIG does not exist"
  CONFIGS=$(echo ${CONFIGS-})  # one line, e.g. from CONFIGS="$(ls dir/*.toml)"
  STEPS=${STEPS:-30}
  WARMUP=${WARMUP:-3}
  RUN_TIMEOUT=${RUN_TIMEOUT:-0}
  KEEP_CHECKPOINTS=${KEEP_CHECKPOINTS:-0}
  read -r -a JOB_EXTRA_SETS <<<"${SETS-}"  # extra overrides: SETS="precision.compute=bf16 ..."

  JOB_NODES=${SLURM_NNODES:-${SLURM_JOB_NUM_NODES:-1}}
  # Tasks the allocation gives each node: SLURM_TASKS_PER_NODE reads like "4(x2)" or "4,2".
  local allocated=
  if [[ -n ${SLURM_JOB_ID-} ]]; then
    allocated=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE%%[(,]*}}
    [[ -z $allocated && -n ${SLURM_NTASKS-} ]] && allocated=$((SLURM_NTASKS / JOB_NODES))
  fi
  # One rank per GPU on GPU nodes; otherwise what the allocation gave each node.
  if [[ -n ${RANKS_PER_NODE-} ]]; then
    :
  elif [[ ${GPUS_PER_NODE:-0} -gt 0 ]]; then
    RANKS_PER_NODE=$GPUS_PER_NODE
  else
    RANKS_PER_NODE=${allocated:-$(nproc)}
  fi
  ((RANKS_PER_NODE >= 1)) || job_die "RANKS_PER_NODE=$RANKS_PER_NODE must be at least 1"
  if [[ -n $allocated ]] && ((RANKS_PER_NODE > allocated)); then
    job_die "RANKS_PER_NODE=$RANKS_PER_NODE (or GPUS_PER_NODE) exceeds the $allocated tasks per" \
      "node of this allocation; submit with --ntasks-per-node=$RANKS_PER_NODE"
  fi
  JOB_MAX_RANKS=$((JOB_NODES * RANKS_PER_NODE))
  # One OpenMP pool per rank runs both the Kokkos kernels and the GEMMs (trident links OpenBLAS's
  # OpenMP flavour, which takes OMP_NUM_THREADS; OPENBLAS_NUM_THREADS would cap it).
  THREADS_PER_RANK=${THREADS_PER_RANK:-${SLURM_CPUS_PER_TASK:-${OMP_NUM_THREADS:-1}}}
  [[ $THREADS_PER_RANK =~ ^[1-9][0-9]*$ ]] ||
    job_die "THREADS_PER_RANK=$THREADS_PER_RANK must be a positive integer"
  if [[ -n ${SLURM_CPUS_PER_TASK-} ]] && ((THREADS_PER_RANK > SLURM_CPUS_PER_TASK)); then
    job_die "THREADS_PER_RANK=$THREADS_PER_RANK exceeds the $SLURM_CPUS_PER_TASK CPUs per task of" \
      "this allocation; submit with --cpus-per-task=$THREADS_PER_RANK"
  fi
  # srun reserves the CPUs per task the allocation has (it does not inherit sbatch's
  # --cpus-per-task, Slurm 22.05 to 23.02; with binding every rank would get a single core).
  JOB_SRUN_CPUS=()
  if [[ -n ${SLURM_CPUS_PER_TASK-} ]]; then
    JOB_SRUN_CPUS=(--cpus-per-task="$THREADS_PER_RANK")
  elif [[ -n ${SLURM_JOB_ID-} ]] && ((THREADS_PER_RANK > 1)); then
    job_log "note: $THREADS_PER_RANK threads per rank, but the allocation has one CPU per task;" \
      "submit with --cpus-per-task=$THREADS_PER_RANK to give each rank its cores"
  fi
  export OMP_NUM_THREADS=$THREADS_PER_RANK OPENBLAS_NUM_THREADS=$THREADS_PER_RANK
  # A site whose launcher gives each rank its own cores (BIND_THREADS=1 in its profile, with
  # srun --cpu-bind=cores) pins each thread to one of them; unbound otherwise, as on a shared
  # workstation where ranks outnumber the cores.
  if ((${BIND_THREADS:-0})); then
    export OMP_PROC_BIND=close OMP_PLACES=cores
  else
    export OMP_PROC_BIND=${OMP_PROC_BIND:-false}
  fi
  if ((RANKS_PER_NODE * THREADS_PER_RANK > $(nproc))); then
    job_log "note: $RANKS_PER_NODE ranks x $THREADS_PER_RANK threads per node oversubscribe" \
      "the $(nproc) cores here"
  fi

  SWEEP_DIR=${RUNS_DIR:-$TRIDENT_ROOT/runs}/$JOB_EXPERIMENT/$JOB_ID
  # JOB_SWEEP=0: one run with its own directory (jobs/train.sh), no sweep directory.
  if [[ ${JOB_SWEEP:-1} == 1 ]]; then
    mkdir -p "$SWEEP_DIR" || job_die "cannot create $SWEEP_DIR"
  fi
  JOB_COMPLETED=0
  JOB_FAILED=0
  JOB_TIMEOUT=0
  JOB_DEADLINE=0
  JOB_CHILD=
  # Slurm signals the batch shell (USR1, from --signal=B:USR1@120 in the headers) before the time
  # limit: stop the current run, record it as a timeout, skip the rest and still run the
  # analysis. TERM (scancel) stops the current run as failed.
  trap 'JOB_DEADLINE=1; job_log "time limit near: stopping"; job_stop_child' USR1
  trap 'JOB_DEADLINE=2; job_log "cancelled: stopping"; job_stop_child' TERM INT
  [[ ${JOB_SWEEP:-1} == 1 ]] &&
    job_log "$JOB_EXPERIMENT: job $JOB_ID via $JOB_LAUNCHER, $JOB_NODES node(s) x" \
      "$RANKS_PER_NODE rank(s), site $SITE, config ${CONFIGS:-$CONFIG}, $STEPS steps; outputs in $SWEEP_DIR"
  return 0
}

# TP, PP, SCHEDULE and ZERO_STAGE of a scaling study (the same at every size), and `micro`: the
# micro-batch override when MICRO_BATCH is set.
job_model_parallel_params() {
  TP=${TP:-1}
  PP=${PP:-1}
  SCHEDULE=${SCHEDULE:-1f1b}
  ZERO_STAGE=${ZERO_STAGE:-0}
  micro=()
  [[ -n ${MICRO_BATCH-} ]] && micro=(--set "train.micro_batch_size=$MICRO_BATCH")
  return 0
}

# Runs a command as the job's child, its output appended to LOG: job_child LOG COMMAND...; the
# exit status is left in JOB_RC. The traps stop the child (job_stop_child) on the job's signals.
job_child() {
  local log=$1
  shift
  "$@" >>"$log" 2>&1 &
  JOB_CHILD=$!
  ((JOB_DEADLINE)) && job_stop_child  # a signal that came before the child existed
  # A trapped signal interrupts `wait` (status > 128); wait again until the run has really ended
  # and take its own status (127: the first wait had already collected it).
  while true; do
    wait "$JOB_CHILD"
    JOB_RC=$?
    ((JOB_RC > 128)) || break
    if ! kill -0 "$JOB_CHILD" 2>/dev/null; then
      wait "$JOB_CHILD" 2>/dev/null
      local again=$?
      ((again != 127)) && JOB_RC=$again
      break
    fi
  done
  JOB_CHILD=
}

# The exit status of the run in DIR whose launcher returned RC: 4 when trident stopped early (a
# signal or run.max_minutes, after a checkpoint unless run.checkpoint_every = -1) and said so in
# DIR/stopped, whatever the launcher made of it (mpirun, signalled itself, exits 1 after its ranks
# exited 4, and may drop their last lines); RC otherwise. The caller removes DIR/stopped before the
# run starts: job_run_status RC DIR.
job_run_status() {
  if (($1 != 0)) && [[ -f $2/stopped ]]; then
    echo 4
  else
    echo "$1"
  fi
}

# Sets JOB_RANK_OUTPUT to the words that make an mpirun rank append its output to LOG itself:
# job_rank_output LOG. mpirun
# passes its ranks' output through a terminal that it stops reading once it is signalled, so a
# rank that prints after a SIGTERM to mpirun blocks there, and its stop (step, checkpoint, exit 4)
# never ends; without the terminal, a rank's lines also reach the log in full.
job_rank_output() {
  # shellcheck disable=SC2016 # the rank's shell expands them
  JOB_RANK_OUTPUT=(bash -c 'exec "$@" >>"$0" 2>&1' "$1")
}

# Asks the running child to stop. Under mpirun the ranks themselves get SIGTERM: mpirun, signalled
# itself, passes it on but SIGKILLs them one second later (odls_base_sigkill_timeout), too soon
# for a stop checkpoint, and then exits 1 whatever they did; left alone, it exits with their 4.
job_stop_child() {
  [[ -n $JOB_CHILD ]] || return 0
  if [[ $JOB_LAUNCHER == mpirun ]]; then
    local ranks
    ranks=$(job_leaf_processes "$JOB_CHILD")
    [[ -n $ranks ]] && kill -TERM $ranks 2>/dev/null && return 0
  fi
  kill -TERM "$JOB_CHILD" 2>/dev/null
  return 0
}

# The processes below PID that have no children of their own (mpirun's ranks, below a
# timeout(1) wrapper or not): job_leaf_processes PID.
job_leaf_processes() {
  local child children
  children=$(pgrep -P "$1")
  for child in $children; do
    if pgrep -P "$child" >/dev/null; then job_leaf_processes "$child"; else echo "$child"; fi
  done
}

# Prints the resolved config for `trident config` arguments, or fails with trident's reason.
job_resolve() {
  local extra=()
  [[ ${#JOB_EXTRA_SETS[@]} -gt 0 ]] && extra=("${JOB_EXTRA_SETS[@]/#/--set=}")
  "$TRIDENT" config --config "$CONFIG" ${extra[@]+"${extra[@]}"} "$@"
}

# The value of KEY in [SECTION] of a resolved config read on stdin.
toml_value() {
  awk -v want="[$1]" -v key="$2" '
    /^\[/ { section = $0 }
    section == want && $1 == key { v = $3; gsub(/\x27/, "", v); print v; exit }'
}

# Rank counts for a scaling study: RANK_COUNTS if given; with several nodes, 1, 2, 4, ... nodes
# (and all of them) of RANKS_PER_NODE ranks; on one node, unit, 2 unit, 4 unit, ... up to
# RANKS_PER_NODE, where unit = $1 (tp x pp, the smallest model-parallel group).
job_rank_counts() {
  local unit=$1 n counts=()
  if [[ -n ${RANK_COUNTS-} ]]; then
    echo "$RANK_COUNTS"
    return
  fi
  if ((JOB_NODES > 1)); then
    for ((n = 1; n < JOB_NODES; n *= 2)); do counts+=($((n * RANKS_PER_NODE))); done
    counts+=($((JOB_NODES * RANKS_PER_NODE)))
  else
    for ((n = unit; n <= RANKS_PER_NODE; n *= 2)); do counts+=("$n"); done
    # The whole node too when it is not a power of two times the unit (e.g. 6 GPUs).
    local last=0
    ((${#counts[@]})) && last=${counts[${#counts[@]} - 1]}
    ((RANKS_PER_NODE % unit == 0 && last < RANKS_PER_NODE)) && counts+=("$RANKS_PER_NODE")
  fi
  ((${#counts[@]})) || job_die "the model-parallel group of $unit ranks does not fit" \
    "RANKS_PER_NODE=$RANKS_PER_NODE; use more ranks per node or set RANK_COUNTS"
  echo "${counts[@]}"
}

json_escape() {
  local s=${1//$'\n'/ }
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '%s' "$s"
}

# Records the sweep itself: experiment, job, config, steps and the study's own parameters
# ("key=value" arguments, written as JSON strings).
job_write_sweep() {
  local kv extra=""
  for kv in "$@"; do extra+=", \"${kv%%=*}\": \"$(json_escape "${kv#*=}")\""; done
  cat >"$SWEEP_DIR/sweep.json" <<EOF
{"experiment": "$JOB_EXPERIMENT", "job_id": "$JOB_ID", "config": "$(json_escape "${CONFIGS:-$CONFIG}")", "steps": $STEPS, "warmup": $WARMUP, "launcher": "$JOB_LAUNCHER", "site": "$SITE", "nodes": $JOB_NODES, "ranks_per_node": $RANKS_PER_NODE, "threads_per_rank": $THREADS_PER_RANK, "started": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"$extra}
EOF
}

# Runs trident once: job_run NAME RANKS DP TP PP ZERO_STAGE GLOBAL_BATCH [--set KEY=VALUE ...].
# Returns 0 whatever happened (the status file says); a sweep goes on past a failed layout.
job_run() {
  local name=$1 ranks=$2 dp=$3 tp=$4 pp=$5 zero=$6 batch=$7
  shift 7
  local dir=$SWEEP_DIR/$name
  if ((JOB_DEADLINE)); then
    job_log "  $name: not started (job stopping)"
    return 0
  fi
  if [[ $JOB_LAUNCHER == srun ]] && ((ranks > JOB_MAX_RANKS)); then
    job_log "  skipping $name: $ranks ranks, the allocation has $JOB_NODES node(s) x" \
      "$RANKS_PER_NODE"
    return 0
  fi
  local nodes=$(((ranks + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
  # A requeued job (same id, same sweep directory) keeps what an earlier start completed and
  # measures the rest afresh (--overwrite below).
  if [[ $(cat "$dir/status" 2>/dev/null) == completed ]]; then
    job_log "  $name: completed in an earlier start of this job"
    JOB_COMPLETED=$((JOB_COMPLETED + 1))
    return 0
  fi
  mkdir -p "$dir"
  echo running >"$dir/status"
  local sets=(--set "run.out_dir=$SWEEP_DIR" --set "run.name=$name" --set "run.steps=$STEPS"
    --set "parallel.dp=$dp" --set "parallel.tp=$tp" --set "parallel.pp=$pp"
    --set "zero.stage=$zero" --set "train.batch_size=$batch"
    --set "run.checkpoint_every=$((KEEP_CHECKPOINTS ? 0 : -1))" --overwrite "$@")
  # Empty arrays under set -u need this form on bash < 4.4 (older cluster login nodes).
  [[ ${#JOB_EXTRA_SETS[@]} -gt 0 ]] && sets+=("${JOB_EXTRA_SETS[@]/#/--set=}")
  local cmd
  if [[ $JOB_LAUNCHER == srun ]]; then
    cmd=(srun --nodes="$nodes" --ntasks="$ranks" --ntasks-per-node="$((ranks < RANKS_PER_NODE ? ranks : RANKS_PER_NODE))"
      ${JOB_SRUN_CPUS[@]+"${JOB_SRUN_CPUS[@]}"} ${SRUN_ARGS-} "$TRIDENT" train --config "$CONFIG" "${sets[@]}")
  else
    # OpenMPI binds each rank to one core when the ranks fit the cores, which would put all of a
    # rank's threads on it: with several threads, T cores per rank, or no binding when R x T
    # oversubscribes this machine. Then idle OpenMP threads sleep at once (PASSIVE) rather than
    # spin on a core another rank needs; on cores of their own libgomp's default (spin a while,
    # then sleep) is faster, as the Makefile says.
    local bind=()
    if ((THREADS_PER_RANK > 1)); then
      if ((ranks * THREADS_PER_RANK <= $(nproc))); then
        bind=(--map-by "slot:PE=$THREADS_PER_RANK" --bind-to core)
      else
        bind=(--bind-to none -x "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}")
      fi
    fi
    job_rank_output "$dir/trident.log"
    cmd=(mpirun -np "$ranks" --oversubscribe ${bind[@]+"${bind[@]}"} ${MPIRUN_ARGS-}
      "${JOB_RANK_OUTPUT[@]}" "$TRIDENT" train --config "$CONFIG" "${sets[@]}")
  fi
  ((RUN_TIMEOUT > 0)) && cmd=(timeout --signal=TERM --kill-after=30 "$RUN_TIMEOUT" "${cmd[@]}")
  printf '%q ' "${cmd[@]}" >"$dir/command"
  local start rc
  start=$(date +%s.%N)
  : >"$dir/trident.log"
  rm -f "$dir/stopped"
  job_child "$dir/trident.log" "${cmd[@]}"
  rc=$JOB_RC
  local seconds status reason=""
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if ((rc == 0)) && [[ -f $dir/timings.h5 ]]; then
    status=completed
  elif ((rc == 0)); then
    status=failed reason="exit 0 but no timings.h5"
  elif ((JOB_DEADLINE == 1)); then
    status=timeout reason="stopped at the time limit"
  elif ((RUN_TIMEOUT > 0 && (rc == 124 || rc == 137))); then
    # timeout(1) exits 124, or 137 when the run ignored TERM for 30 s and was killed.
    status=timeout reason="RUN_TIMEOUT=$RUN_TIMEOUT s"
  elif rc=$(job_run_status "$rc" "$dir") && ((rc == 4)); then
    status=timeout reason="stopped early on a signal or run.max_minutes; see trident.log"
  elif ((JOB_DEADLINE == 2)); then
    status=failed reason="job cancelled"
  else
    status=failed reason="exit code $rc; see trident.log"
  fi
  cat >"$dir/run.json" <<EOF
{"experiment": "$JOB_EXPERIMENT", "job_id": "$JOB_ID", "layout": "$name", "nodes": $nodes, "ranks": $ranks, "threads_per_rank": $THREADS_PER_RANK, "dp": $dp, "tp": $tp, "pp": $pp, "zero_stage": $zero, "global_batch": $batch, "exit_code": $rc, "seconds": $seconds, "status": "$status", "reason": "$(json_escape "$reason")"}
EOF
  echo "$status" >"$dir/status"
  case $status in
    completed) JOB_COMPLETED=$((JOB_COMPLETED + 1)) ;;
    timeout) JOB_TIMEOUT=$((JOB_TIMEOUT + 1)) ;;
    *) JOB_FAILED=$((JOB_FAILED + 1)) ;;
  esac
  local perf
  perf=$(grep -o 'ms_per_step=[0-9.]* tokens_per_s=[0-9.]*' "$dir/trident.log" | tail -n 1)
  job_log "  $name: $status in ${seconds}s ${reason:+($reason) }$perf"
  if [[ $status != completed ]]; then tail -n 5 "$dir/trident.log" | sed 's/^/      /'; fi
  return 0
}

# Runs the experiment's analysis over the sweep and exits: 0 when every run completed, 1 otherwise
# (so Slurm marks the job FAILED and nobody mistakes a partial sweep for a whole one). Each
# argument is one analysis/ script with its options, e.g. "scaling.py --warmup 3".
job_finish() {
  job_log "$JOB_EXPERIMENT: $JOB_COMPLETED completed, $JOB_FAILED failed, $JOB_TIMEOUT timed out" \
    "in $SWEEP_DIR"
  local analysis analysis_rc=0 words
  for analysis in "$@"; do
    read -r -a words <<<"$analysis"
    if ((JOB_COMPLETED == 0)); then
      job_log "no completed run: skipping analysis/${words[0]}"
      continue
    fi
    job_log "analysis/$analysis $SWEEP_DIR"
    "$PYTHON" "$TRIDENT_ROOT/analysis/${words[0]}" "${words[@]:1}" "$SWEEP_DIR" || analysis_rc=1
  done
  ((JOB_FAILED + JOB_TIMEOUT == 0 && analysis_rc == 0 && JOB_COMPLETED > 0))
  exit $?
}
