# Shared machinery of the jobs/ scripts: the guard, site profile, rank counts, one run per layout, statuses.
# Sourced, never run; every jobs/*.sh calls job_init first and job_finish last.
#
# A run's outputs: runs/<experiment>/<job id>/<layout>/ (<layout>_rep<k>/ with REPEATS > 1) with
# timings.h5 (trident's), trident.log, run.json (what ran, exit code, seconds) and status: one
# word, `completed`, `failed` (non-zero exit, cancelled, or no timings.h5) or `timeout`
# (RUN_TIMEOUT or the job's time limit hit it); `running` is left only when the job was killed
# outright. The sweep directory holds sweep.json (the study and its provenance) and, at the end,
# a copy of the job's own log (Slurm's .out).

# The parameters every script takes, for its --help.
JOB_COMMON_USAGE="common environment variables:
  CONFIG=inputs/small.toml  run config (model, data, optimizer); the script sets the layout
  STEPS=30                  training steps per run
  WARMUP=3                  steps the analysis leaves out before taking medians
  REPEATS=1                 runs of every layout (not convergence.sh, train.sh): <layout>_rep1 ..
                            <layout>_repN, round robin (every layout once, then again), so that a
                            drift of the machine spreads over the layouts; the analysis reports
                            the median over the repeats and their min-max spread
  SETS=\"k=v ...\"           extra trident overrides for every run, e.g. SETS=\"precision.compute=bf16\"
  RANKS_PER_NODE            ranks on each node (default: GPUS_PER_NODE, else Slurm's tasks per node,
                            else the CPUs here)
  GPUS_PER_NODE=0           GPUs per node (one rank each); 0 on CPU builds
  THREADS_PER_RANK          OpenMP threads of each rank, for its Kokkos kernels and GEMMs alike
                            (default: Slurm's --cpus-per-task, else OMP_NUM_THREADS, else 1);
                            R ranks x T threads: sbatch --ntasks-per-node=R --cpus-per-task=T
  SITE=local                jobs/machines/<SITE>/profile.sh: modules, launcher and NCCL settings
  RUN_TIMEOUT=0             seconds before one run is stopped and marked timeout (0: no limit)
  RUNS_DIR=runs             outputs go to RUNS_DIR/<experiment>/<job id>/<layout>/; a job refuses
                            a sweep directory another job made (after a cluster's job ids restart)
  KEEP_CHECKPOINTS=0        1: each run writes a checkpoint at its end (0: none, run.checkpoint_every=-1)
  TRIDENT=build/src/trident the program
  PYTHON                    the analysis interpreter (needs h5py, numpy, pandas, matplotlib);
                            default: python3 on PATH if it has them, else /usr/bin/python3; with
                            none, the runs go ahead and the job says what to install
  LAUNCHER=mpirun           outside Slurm only: run every layout with mpirun on this machine
  Values with commas (OMPI_MCA_btl=self,tcp) cannot go through sbatch --export=ALL,NAME=value
  (sbatch splits at every comma): export them in the submitting shell (sbatch passes the whole
  environment) or set them in the site profile."

# The modules the analysis/ scripts import, and where Debian and Ubuntu ship them.
JOB_ANALYSIS_MODULES="h5py numpy pandas matplotlib"
JOB_ANALYSIS_DEBIAN="apt-get install python3-h5py python3-numpy python3-pandas python3-matplotlib"
# The warnings (trident.log lines `warning: ...`) the job log has shown, each once per sweep.
declare -A JOB_WARNED=()
# The layouts job_run queued: each one's config and job_run arguments, shell-quoted.
JOB_QUEUE=()
# Their directory names, with what asked for each: two runs never share a directory.
declare -A JOB_QUEUED_NAMES=()

job_die() {
  echo "${JOB_EXPERIMENT:-jobs}: error: $*" >&2
  exit 2
}

job_log() { echo "[$(date +%H:%M:%S)] $*"; }

# Refuses a parameter that is not a whole number of at least MIN (and, given, at most MAX) before
# any arithmetic sees it: bash evaluates a variable inside (( )) or [[ -gt ]] as an expression,
# so RANKS_PER_NODE='a[$(cmd)]' would run cmd. Leaves the value in decimal. NAME MIN [MAX]
job_require_count() {
  local name=$1 min=$2 max=${3-} value=${!1-} ok=1
  [[ $value =~ ^[0-9]{1,9}$ ]] || ok=0
  ((ok)) && ((10#$value < min)) && ok=0
  ((ok)) && [[ -n $max ]] && ((10#$value > max)) && ok=0
  ((ok)) || job_die "$name='$value' must be a whole number from $min${max:+ to $max}"
  printf -v "$name" '%d' "$((10#$value))"
}

# The same for a list of numbers (RANK_COUNTS, ZERO_STAGES): each word one, the list not empty.
job_require_counts() {
  local name=$1 min=$2 max=${3-} value=${!1-} word
  [[ $value =~ ^[[:space:]]*[0-9]{1,9}([[:space:]]+[0-9]{1,9})*[[:space:]]*$ ]] ||
    job_die "$name='$value' must be whole numbers separated by spaces"
  for word in $value; do
    ((10#$word >= min)) && { [[ -z $max ]] || ((10#$word <= max)); } ||
      job_die "$name='$value': $word is not a whole number from $min${max:+ to $max}"
  done
}

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
  # The CPUs this job has on this node, counted once, before anything exports OMP_NUM_THREADS:
  # nproc obeys it (and OMP_THREAD_LIMIT), and would count THREADS_PER_RANK CPUs afterwards.
  JOB_NODE_CPUS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
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
  [[ -x $TRIDENT ]] || job_die "$TRIDENT is missing; build first (make program) or set TRIDENT"
  CONFIG=${CONFIG:-inputs/small.toml}
  [[ -f $CONFIG ]] || job_die "CONFIG=$CONFIG does not exist"
  CONFIGS=$(echo ${CONFIGS-})  # one line, e.g. from CONFIGS="$(ls dir/*.toml)"
  STEPS=${STEPS:-30}
  WARMUP=${WARMUP:-3}
  REPEATS=${REPEATS:-1}
  job_require_count STEPS 1
  job_require_count WARMUP 0
  job_require_count REPEATS 1
  # A study that measures no time (JOB_NO_REPEATS: why) runs once.
  [[ -n ${JOB_NO_REPEATS-} ]] && ((REPEATS > 1)) && job_die "REPEATS=$REPEATS: $JOB_NO_REPEATS"
  RUN_TIMEOUT=${RUN_TIMEOUT:-0}
  KEEP_CHECKPOINTS=${KEEP_CHECKPOINTS:-0}
  job_require_count RUN_TIMEOUT 0
  job_require_count KEEP_CHECKPOINTS 0 1
  [[ -z ${GPUS_PER_NODE-} ]] || job_require_count GPUS_PER_NODE 0
  [[ -z ${RANKS_PER_NODE-} ]] || job_require_count RANKS_PER_NODE 1
  [[ -z ${THREADS_PER_RANK-} ]] || job_require_count THREADS_PER_RANK 1
  [[ -z ${MICRO_BATCH-} ]] || job_require_count MICRO_BATCH 1
  [[ -z ${RANK_COUNTS-} ]] || job_require_counts RANK_COUNTS 1
  read -r -a JOB_EXTRA_SETS <<<"${SETS-}"  # extra overrides: SETS="precision.compute=bf16 ..."

  job_ranks_and_threads

  SWEEP_DIR=${RUNS_DIR:-$TRIDENT_ROOT/runs}/$JOB_EXPERIMENT/$JOB_ID
  JOB_COMPLETED=0
  JOB_FAILED=0
  JOB_TIMEOUT=0
  JOB_DEADLINE=0
  JOB_CHILD=
  # JOB_SWEEP=0: one run with its own directory (jobs/train.sh), no sweep directory.
  if [[ ${JOB_SWEEP:-1} == 1 ]]; then
    job_choose_python
    job_provenance_sources
    job_claim_sweep_dir
  fi
  # Slurm signals the batch shell (USR1, from --signal=B:USR1@120 in the headers) before the time
  # limit: stop the current run, record it as a timeout, skip the rest and still run the
  # analysis. TERM (scancel) stops the current run as failed.
  trap 'JOB_DEADLINE=1; job_log "time limit near: stopping"; job_stop_child' USR1
  trap 'JOB_DEADLINE=2; job_log "cancelled: stopping"; job_stop_child' TERM INT
  if [[ ${JOB_SWEEP:-1} == 1 ]]; then
    job_log "$JOB_EXPERIMENT: job $JOB_ID via $JOB_LAUNCHER, $JOB_NODES node(s) x" \
      "$RANKS_PER_NODE rank(s), site $SITE, config ${CONFIGS:-$CONFIG}, $STEPS steps," \
      "$REPEATS repeat(s); outputs in $SWEEP_DIR"
    job_log "$JOB_PROVENANCE_LINE"
    if ((JOB_PYTHON_OK)); then
      job_log "analysis interpreter: $PYTHON"
    else
      job_log "note: $JOB_PYTHON_PROBLEM. The runs go ahead; the analysis will be skipped"
    fi
    ((JOB_CONTINUES)) && job_log "requeued (start $((SLURM_RESTART_COUNT + 1)) of job $JOB_ID):" \
      "continuing its sweep; the runs it completed are kept"
  fi
  return 0
}

# Ranks per node and threads per rank from the allocation and the parameters; exports each
# rank's OpenMP settings.
job_ranks_and_threads() {
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
    RANKS_PER_NODE=${allocated:-$JOB_NODE_CPUS}
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
  if ((RANKS_PER_NODE * THREADS_PER_RANK > JOB_NODE_CPUS)); then
    job_log "note: $RANKS_PER_NODE ranks x $THREADS_PER_RANK threads per node oversubscribe" \
      "the $JOB_NODE_CPUS CPUs here"
  fi
}

# Chooses the analysis interpreter: PYTHON when set (it must run), else the first of python3 on
# PATH and /usr/bin/python3 that imports every module of JOB_ANALYSIS_MODULES. Sets PYTHON (a
# full path, as the job log prints it), JOB_PYTHON_OK (1: it has the modules), JOB_PYTHON_PROBLEM
# (why the analysis will be skipped and what to install) and JOB_JSON_PYTHON: an interpreter that
# runs, for the job's JSON records (any python3 has json).
job_choose_python() {
  local given=${PYTHON-} candidate path missing notes=() tried=" "
  JOB_PYTHON_OK=0 JOB_PYTHON_PROBLEM='' JOB_JSON_PYTHON=''
  if [[ -n $given ]]; then
    path=$(command -v "$given") || job_die "PYTHON=$given is not a program"
    missing=$(job_python_missing "$path") || job_die "PYTHON=$given ($path) does not run"
    PYTHON=$path JOB_JSON_PYTHON=$path
    if [[ -z $missing ]]; then
      JOB_PYTHON_OK=1
    else
      notes=("PYTHON=$given ($path) cannot import ${missing// /, }")
    fi
  else
    PYTHON=
    for candidate in python3 /usr/bin/python3; do
      if ! path=$(command -v "$candidate"); then
        notes+=("$candidate: not found")
        continue
      fi
      [[ $tried == *" $path "* ]] && continue
      tried+="$path "
      if ! missing=$(job_python_missing "$path"); then
        notes+=("$candidate ($path) does not run")
        continue
      fi
      JOB_JSON_PYTHON=${JOB_JSON_PYTHON:-$path}
      if [[ -z $missing ]]; then
        PYTHON=$path JOB_PYTHON_OK=1
        break
      fi
      notes+=("$candidate ($path) cannot import ${missing// /, }")
    done
    PYTHON=${PYTHON:-$JOB_JSON_PYTHON}
  fi
  [[ -n $JOB_JSON_PYTHON ]] || job_die "no Python 3 here (${notes[*]}); the job writes its" \
    "records with Python's json module: install python3, or set PYTHON"
  if ((!JOB_PYTHON_OK)); then
    local tried_all
    tried_all=$(printf '%s; ' "${notes[@]}")
    JOB_PYTHON_PROBLEM="no interpreter for the analysis: ${tried_all%; }. Install the modules"
    JOB_PYTHON_PROBLEM+=" (Debian, Ubuntu: $JOB_ANALYSIS_DEBIAN; elsewhere: ${PYTHON:-python3} -m pip"
    JOB_PYTHON_PROBLEM+=" install $JOB_ANALYSIS_MODULES) or set PYTHON to an interpreter that has"
    JOB_PYTHON_PROBLEM+=" them"
  fi
  return 0
}

# The modules of JOB_ANALYSIS_MODULES that interpreter $1 cannot import, on one line (empty: it
# has them all); fails when the interpreter does not run.
job_python_missing() {
  # shellcheck disable=SC2086 # one module name per argument
  "$1" -c '
import importlib, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        missing.append(name)
print(" ".join(missing))' $JOB_ANALYSIS_MODULES 2>/dev/null
}

# What the job runs on, for sweep.json's provenance and the job log: `trident env` (run here, in
# the batch shell, with the runs' environment exported) in JOB_TRIDENT_ENV and its summary in
# JOB_PROVENANCE_LINE; under Slurm, the job's submit time (JOB_SLURM_SUBMIT_TIME) and its log
# files (JOB_SLURM_OUTPUTS: StdOut, and StdErr when apart), from `scontrol show job`.
job_provenance_sources() {
  JOB_TRIDENT_ENV=$("$TRIDENT" env 2>/dev/null | grep '^{' | tail -n 1)
  JOB_PROVENANCE_LINE=$(JOB_JSON_SOURCE=$JOB_TRIDENT_ENV "$JOB_JSON_PYTHON" -c '
import json, os
e = json.loads(os.environ["JOB_JSON_SOURCE"] or "{}")
if not e:
    print("note: `trident env` printed nothing: sweep.json records no provenance of the program")
else:
    keys = ("trident_revision", "cpu_model", "host_simd", "node_cpus", "blas", "kokkos_backend")
    print("trident %s, %s (%s, %s CPUs), %s, Kokkos %s, " % tuple(e.get(k) for k in keys)
          + str(e.get("mpi", "")).split(",")[0])')
  JOB_SLURM_SUBMIT_TIME='' JOB_SLURM_OUTPUTS=()
  [[ -n ${SLURM_JOB_ID-} ]] || return 0
  local record line
  record=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null)
  JOB_SLURM_SUBMIT_TIME=$(grep -o 'SubmitTime=[^ ]*' <<<"$record" | head -n 1 | cut -d= -f2)
  # StdOut and StdErr take a line each (a path may hold spaces); one file unless --error split them.
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    [[ ${#JOB_SLURM_OUTPUTS[@]} -gt 0 && ${JOB_SLURM_OUTPUTS[0]} == "$line" ]] && continue
    JOB_SLURM_OUTPUTS+=("$line")
  done < <(sed -nE 's/^ *Std(Out|Err)=//p' <<<"$record")
  return 0
}

# A sweep directory belongs to the job that wrote its sweep.json, and a job refuses one another
# job made (exit 2, nothing written): Slurm's job ids start again at 1 when a cluster's state is
# reset, and a new job with an old id must not mix its runs into the old sweep. The same job
# started again (requeued: SLURM_RESTART_COUNT > 0, the same SLURM_JOB_ID and cluster) continues
# it and keeps the runs it completed; a first start never continues anything, so a recycled id
# is refused at its first start. (The submit time cannot tell the two apart: Slurm 22.05 sets it
# anew when it requeues a job.)
job_claim_sweep_dir() {
  JOB_CONTINUES=0
  local record=$SWEEP_DIR/sweep.json owner job cluster started
  if [[ -f $record ]]; then
    owner=$("$JOB_JSON_PYTHON" -c '
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except Exception as e:
    s = {"job_id": f"? (unreadable: {e})"}
print("\t".join(str(s.get(k) or "?") for k in ("job_id", "slurm_cluster", "started")))' "$record")
    IFS=$'\t' read -r job cluster started <<<"$owner"
    [[ $cluster == "?" ]] && cluster=
    if ((${SLURM_RESTART_COUNT:-0} > 0)) && [[ $job == "$JOB_ID" &&
      $cluster == "${SLURM_CLUSTER_NAME-}" ]]; then
      JOB_CONTINUES=1
    else
      local whose="job $job" submitted=
      [[ -n $cluster ]] && whose+=" of cluster $cluster"
      [[ -n $JOB_SLURM_SUBMIT_TIME ]] && submitted=", submitted $JOB_SLURM_SUBMIT_TIME"
      job_die "$SWEEP_DIR holds the sweep of another job: $whose, started $started (its" \
        "sweep.json); this is job $JOB_ID$submitted (a cluster whose job ids start again gives" \
        "old ids to new jobs). Nothing was written. Move the old sweep away (mv $SWEEP_DIR" \
        "$SWEEP_DIR.old) or submit with another RUNS_DIR (RUNS_DIR=runs-new sbatch ...)"
    fi
  fi
  mkdir -p "$SWEEP_DIR" || job_die "cannot create $SWEEP_DIR"
}

# TP, PP, SCHEDULE and ZERO_STAGE of a scaling study (the same at every size), and `micro`: the
# micro-batch override when MICRO_BATCH is set.
job_model_parallel_params() {
  TP=${TP:-1}
  PP=${PP:-1}
  job_require_count TP 1
  job_require_count PP 1
  SCHEDULE=${SCHEDULE:-1f1b}
  ZERO_STAGE=${ZERO_STAGE:-0}
  job_require_count ZERO_STAGE 0 3
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

# Writes a JSON object through Python's json module (any python3 has it), atomically:
# job_json FILE new|merge KEY=VALUE ... (merge: onto FILE's object). KEY=VALUE is a string,
# KEY:=VALUE a JSON value (numbers, true, null; a string when it does not parse), KEY~=FIELD the
# field of the JSON object in JOB_JSON_SOURCE (null when absent); a/b/c=... nests. JOB_JSON_INDENT
# indents.
JOB_JSON_WRITER='
import json, os, sys
path, mode = sys.argv[1], sys.argv[2]
doc = {}
if mode == "merge" and os.path.exists(path):
    with open(path) as f:
        doc = json.load(f)
source = json.loads(os.environ.get("JOB_JSON_SOURCE") or "{}")
for arg in sys.argv[3:]:
    key, _, value = arg.partition("=")
    if key.endswith(":"):
        key = key[:-1]
        try:
            value = json.loads(value)
        except ValueError:
            pass
    elif key.endswith("~"):
        key, value = key[:-1], source.get(value)
    *parents, last = key.split("/")
    node = doc
    for parent in parents:
        node = node.setdefault(parent, {})
    node[last] = value
with open(path + ".tmp", "w") as f:
    json.dump(doc, f, indent=int(os.environ.get("JOB_JSON_INDENT") or 0) or None)
    f.write("\n")
os.replace(path + ".tmp", path)
'
job_json() { "$JOB_JSON_PYTHON" -c "$JOB_JSON_WRITER" "$@"; }

# The repository's git revision and whether tracked files differ from it ("" and null when
# TRIDENT_ROOT is not the top of a git checkout, e.g. a copy of one inside another).
job_git_state() {
  JOB_GIT_REVISION='' JOB_GIT_DIRTY=null
  command -v git >/dev/null || return 0
  local top
  top=$(git -C "$TRIDENT_ROOT" rev-parse --show-toplevel 2>/dev/null) || return 0
  [[ $(cd "$top" && pwd -P) == $(cd "$TRIDENT_ROOT" && pwd -P) ]] || return 0
  JOB_GIT_REVISION=$(git -C "$TRIDENT_ROOT" rev-parse HEAD 2>/dev/null) || return 0
  if git -C "$TRIDENT_ROOT" diff --quiet HEAD -- 2>/dev/null; then
    JOB_GIT_DIRTY=false
  else
    JOB_GIT_DIRTY=true
  fi
}

# Records the sweep in sweep.json: experiment, job, config, steps, repeats, the study's own
# parameters ("key=value" arguments, as strings) and its provenance: what ran, where and how
# (the git revision, `trident env`'s program, CPU, BLAS, Kokkos and MPI, the launcher, the Slurm
# job, and every OMP_*, OPENBLAS_*, OMPI_MCA_* and TRIDENT_* variable the runs inherit). A
# requeued start keeps the first start's record and adds its restart count.
job_write_sweep() {
  local record=$SWEEP_DIR/sweep.json now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  if ((JOB_CONTINUES)); then
    JOB_JSON_INDENT=2 job_json "$record" merge "slurm_restart_count:=${SLURM_RESTART_COUNT:-0}" \
      "restarted=$now"
    return
  fi
  job_git_state
  local name provenance=(provenance/git_revision="$JOB_GIT_REVISION"
    provenance/git_dirty:="$JOB_GIT_DIRTY" provenance/trident_revision~=trident_revision
    provenance/cpu_model~=cpu_model provenance/cores_per_node~=node_cpus
    provenance/host_simd~=host_simd provenance/blas~=blas provenance/blas_kernel~=blas_kernel
    provenance/kokkos_backend~=kokkos_backend provenance/threads_per_rank~=threads_per_rank
    provenance/mpi~=mpi provenance/hostname~=hostname provenance/launcher="$JOB_LAUNCHER"
    provenance/slurm_job_id="${SLURM_JOB_ID-}" provenance/slurm_nodelist="${SLURM_JOB_NODELIST-}")
  [[ -n $JOB_TRIDENT_ENV ]] || provenance+=(provenance/cores_per_node:="$JOB_NODE_CPUS")
  provenance+=(provenance/env:={})
  for name in $(compgen -e | grep -E '^(OMP_|OPENBLAS_|OMPI_MCA_|TRIDENT_)' | sort); do
    provenance+=("provenance/env/$name=${!name}")
  done
  JOB_JSON_SOURCE=$JOB_TRIDENT_ENV JOB_JSON_INDENT=2 job_json "$record" new \
    "experiment=$JOB_EXPERIMENT" "job_id=$JOB_ID" "config=${CONFIGS:-$CONFIG}" "steps:=$STEPS" \
    "warmup:=$WARMUP" "repeats:=$REPEATS" "launcher=$JOB_LAUNCHER" "site=$SITE" \
    "nodes:=$JOB_NODES" "ranks_per_node:=$RANKS_PER_NODE" "threads_per_rank:=$THREADS_PER_RANK" \
    "started=$now" "slurm_cluster=${SLURM_CLUSTER_NAME-}" \
    "slurm_submit_time=$JOB_SLURM_SUBMIT_TIME" "slurm_restart_count:=${SLURM_RESTART_COUNT:-0}" \
    "trident=$TRIDENT" "python=$PYTHON" "$@" "${provenance[@]}" ||
    job_die "cannot write $record"
}

# Queues one layout of the study: job_run NAME RANKS DP TP PP ZERO_STAGE GLOBAL_BATCH
# [--set KEY=VALUE ...] (with the CONFIG of the moment). job_finish runs the queue.
job_run() {
  if [[ $JOB_LAUNCHER == srun ]] && (($2 > JOB_MAX_RANKS)); then
    job_log "  skipping $1: $2 ranks, the allocation has $JOB_NODES node(s) x $RANKS_PER_NODE"
    return 0
  fi
  # Two configs with one base name, or two variants with one value, would name one directory,
  # and the second would be counted completed without running.
  local what="$CONFIG ${*:2}"
  [[ -z ${JOB_QUEUED_NAMES[$1]-} ]] ||
    job_die "two runs of this study would share the directory $1: ${JOB_QUEUED_NAMES[$1]}" \
      "and $what; rename a config or change a variant"
  JOB_QUEUED_NAMES[$1]=$what
  JOB_QUEUE+=("$(printf '%q ' "$CONFIG" "$@")")
}

# Runs the queued layouts REPEATS times, round robin: every layout once, then every layout
# again, so that a drift of the machine (another job, the clock) spreads over all of them rather
# than landing on one, and a job stopped at its time limit has measured each layout at least once.
job_run_queue() {
  local repeat entry
  ((${#JOB_QUEUE[@]})) || return 0
  ((REPEATS > 1)) && job_log "${#JOB_QUEUE[@]} layout(s) x $REPEATS repeats, round robin"
  for ((repeat = 1; repeat <= REPEATS; repeat++)); do
    for entry in "${JOB_QUEUE[@]}"; do
      eval "job_run_one $repeat $entry"
    done
  done
  JOB_QUEUE=()
}

# Runs trident once: job_run_one REPEAT CONFIG LAYOUT RANKS DP TP PP ZERO_STAGE GLOBAL_BATCH
# [--set KEY=VALUE ...], into LAYOUT/, or LAYOUT_rep<REPEAT>/ with REPEATS > 1. Returns 0
# whatever happened (the status file says); a sweep goes on past a failed layout.
job_run_one() {
  local repeat=$1 CONFIG=$2 layout=$3 ranks=$4 dp=$5 tp=$6 pp=$7 zero=$8 batch=$9
  shift 9
  local name=$layout
  ((REPEATS > 1)) && name=${layout}_rep$repeat
  local dir=$SWEEP_DIR/$name
  if ((JOB_DEADLINE)); then
    job_log "  $name: not started (job stopping)"
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
  job_launch_command "$dir" "$ranks" "$nodes" "${sets[@]}"
  cmd=("${JOB_CMD[@]}")
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
  job_json "$dir/run.json" new "experiment=$JOB_EXPERIMENT" "job_id=$JOB_ID" "layout=$layout" \
    "run=$name" "repeat:=$repeat" "repeats:=$REPEATS" "config=$CONFIG" "nodes:=$nodes" \
    "ranks:=$ranks" "threads_per_rank:=$THREADS_PER_RANK" "dp:=$dp" "tp:=$tp" "pp:=$pp" \
    "zero_stage:=$zero" "global_batch:=$batch" "exit_code:=$rc" "seconds:=$seconds" \
    "status=$status" "reason=$reason"
  echo "$status" >"$dir/status"
  case $status in
    completed) JOB_COMPLETED=$((JOB_COMPLETED + 1)) ;;
    timeout) JOB_TIMEOUT=$((JOB_TIMEOUT + 1)) ;;
    *) JOB_FAILED=$((JOB_FAILED + 1)) ;;
  esac
  job_log "  $name: $status in ${seconds}s ${reason:+($reason) }$(job_step_times "$dir" "$status")"
  if [[ $status != completed ]]; then tail -n 5 "$dir/trident.log" | sed 's/^/      /'; fi
  job_repeat_warnings "$dir" "$name"
  return 0
}

# The launcher's command for one run, in JOB_CMD: job_launch_command DIR RANKS NODES
# TRIDENT_TRAIN_ARGUMENTS... (srun in an allocation, else mpirun, whose ranks append to
# DIR/trident.log themselves).
job_launch_command() {
  local dir=$1 ranks=$2 nodes=$3
  shift 3
  if [[ $JOB_LAUNCHER == srun ]]; then
    JOB_CMD=(srun --nodes="$nodes" --ntasks="$ranks" --ntasks-per-node="$((ranks < RANKS_PER_NODE ? ranks : RANKS_PER_NODE))"
      ${JOB_SRUN_CPUS[@]+"${JOB_SRUN_CPUS[@]}"} ${SRUN_ARGS-} "$TRIDENT" train --config "$CONFIG" "$@")
  else
    # OpenMPI binds each rank to one core when the ranks fit the cores, which would put all of a
    # rank's threads on it: with several threads, T cores per rank, or no binding when R x T
    # oversubscribes this machine (its CPUs counted before OMP_NUM_THREADS was exported). Then
    # idle OpenMP threads sleep at once (PASSIVE) rather than spin on a core another rank needs;
    # on cores of their own libgomp's default (spin a while, then sleep) is faster, as the
    # Makefile says.
    local bind=()
    if ((THREADS_PER_RANK > 1)); then
      if ((ranks * THREADS_PER_RANK <= JOB_NODE_CPUS)); then
        bind=(--map-by "slot:PE=$THREADS_PER_RANK" --bind-to core)
      else
        bind=(--bind-to none -x "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}")
      fi
    fi
    job_rank_output "$dir/trident.log"
    JOB_CMD=(mpirun -np "$ranks" --oversubscribe ${bind[@]+"${bind[@]}"} ${MPIRUN_ARGS-}
      "${JOB_RANK_OUTPUT[@]}" "$TRIDENT" train --config "$CONFIG" "$@")
  fi
}

# A run's step time, both ways and named (docs/slurm-and-analysis.md): trident's PERFORMANCE
# ms_per_step, the mean of the slowest rank's step time over steps 2..N, and the analysis's
# measure, the median of it over the steps after WARMUP that wrote no checkpoint, from
# timings.h5 (when the analysis interpreter has h5py): job_step_times DIR STATUS.
job_step_times() {
  local mean median=n/a
  mean=$(grep -o 'ms_per_step=[0-9.]*' "$1/trident.log" | tail -n 1 | cut -d= -f2)
  [[ -n $mean ]] || return 0
  if [[ $2 == completed ]] && ((JOB_PYTHON_OK)); then
    median=$("$PYTHON" -c '
import sys
import h5py
import numpy as np
with h5py.File(sys.argv[1], "r") as f:
    step = f["step_seconds_max"][:]
    phases = f.attrs["phases"]
    phases = (phases.decode() if isinstance(phases, bytes) else str(phases)).split(",")
    io = f["phase_seconds"][:, :, phases.index("io")].max(axis=1)
timed = (np.arange(len(step)) >= int(sys.argv[2])) & (io == 0)
print("%.2f" % (np.median(step[timed]) * 1e3) if timed.any() else "none")' \
      "$1/timings.h5" "$WARMUP" 2>/dev/null) || median=n/a
  fi
  echo "mean_ms_after_step1=$mean median_ms_after_warmup$WARMUP=$median"
}

# Repeats in the job log the warnings of a run (trident.log lines `warning: ...`), each distinct
# one once per sweep, naming the run it first came from: job_repeat_warnings DIR NAME.
job_repeat_warnings() {
  local line
  while IFS= read -r line; do
    [[ -n ${JOB_WARNED["$line"]+seen} ]] && continue
    JOB_WARNED["$line"]=$2
    job_log "  warning from $2 (each warning once per sweep): ${line#warning: }"
  done < <(grep -a '^warning: ' "$1/trident.log" 2>/dev/null | awk '!seen[$0]++')
}

# Runs the queued layouts (job_run_queue), then the experiment's analysis over the sweep, keeps
# the job's log in the sweep directory and exits: 0 when every run completed and the analysis
# ran, 1 otherwise (so Slurm marks the job FAILED and nobody mistakes a partial sweep for a whole
# one). Each argument is one analysis/ script with its options, e.g. "scaling.py --warmup 3"; the
# log shows each command as run, to paste into a shell later. Without an interpreter that has
# the modules, the analysis is skipped with what to install, and the commands are still shown.
job_finish() {
  job_run_queue
  job_log "$JOB_EXPERIMENT: $JOB_COMPLETED completed, $JOB_FAILED failed, $JOB_TIMEOUT timed out" \
    "in $SWEEP_DIR"
  local analysis analysis_rc=0 words cmd line
  if ((JOB_COMPLETED > 0 && !JOB_PYTHON_OK)); then
    job_log "skipping the analysis: $JOB_PYTHON_PROBLEM"
    analysis_rc=1
  fi
  for analysis in "$@"; do
    read -r -a words <<<"$analysis"
    if ((JOB_COMPLETED == 0)); then
      job_log "no completed run: skipping analysis/${words[0]}"
      continue
    fi
    cmd=("$PYTHON" "$TRIDENT_ROOT/analysis/${words[0]}" "${words[@]:1}" "$SWEEP_DIR")
    line=$(printf '%q ' "${cmd[@]}")
    if ((JOB_PYTHON_OK)); then
      job_log "analysis/${words[0]}:"
      echo "  ${line% }"
      "${cmd[@]}" || analysis_rc=1
    else
      job_log "analysis/${words[0]} not run; once the modules are installed:"
      echo "  ${line% }"
    fi
  done
  ((JOB_FAILED + JOB_TIMEOUT == 0 && analysis_rc == 0 && JOB_COMPLETED > 0))
  local rc=$?
  job_keep_log
  exit $rc
}

# Copies the job's own log into the sweep directory, last, so that the copy holds every line:
# Slurm's StdOut (and StdErr when apart), or outside Slurm this shell's stdout when it is a file.
job_keep_log() {
  local logs=(${JOB_SLURM_OUTPUTS[@]+"${JOB_SLURM_OUTPUTS[@]}"}) log kept=()
  if [[ ${#logs[@]} -eq 0 ]]; then
    log=$(readlink -f "/proc/$$/fd/1" 2>/dev/null) && logs=("$log")
  fi
  for log in ${logs[@]+"${logs[@]}"}; do
    [[ -f $log && -r $log && ! $log -ef $SWEEP_DIR/${log##*/} ]] && kept+=("$log")
  done
  [[ ${#kept[@]} -gt 0 ]] || return 0
  job_log "the job's log, copied: ${kept[*]/#*\//$SWEEP_DIR/}"
  for log in "${kept[@]}"; do cp "$log" "$SWEEP_DIR/" || true; done
}
