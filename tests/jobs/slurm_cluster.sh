# Sourced by the tests/jobs/slurm_*.sh tests: arguments, a Slurm cluster on localhost for the
# test's lifetime, its cleanup and restart_cluster. Sets exe, src, work, python, cluster and
# SLURM_CONF; a test sets $job while a job runs, so that a failure cancels it before the daemons
# stop. Defines fail, job_field and job_completes for the tests of jobs/train.sh (a test may define
# its own fail).
# usage: source slurm_cluster.sh TRIDENT_EXE SOURCE_DIR WORK_DIR NODES
set -euo pipefail
exe=$(realpath "$1")
src=$(realpath "$2")
work=$3
python=${PYTHON:-/usr/bin/python3}
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: the Slurm daemons must run as root (this test is run as root in CI)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
work=$(realpath "$work")
cluster=$work/cluster
job=
# A job still running (a failure, or a wait running out) is cancelled first: with
# proctrack/linuxproc its steps would outlive the daemons.
cleanup() {
  if [[ -n $job ]] && scancel "$job" 2>/dev/null; then sleep 2; fi
  bash "$src/tools/local_slurm.sh" stop "$cluster"
}
trap cleanup EXIT
cluster_nodes=$4
eval "$(bash "$src/tools/local_slurm.sh" start "$cluster" 8 "$cluster_nodes")"
export SLURM_CONF
# Stops the cluster and starts it afresh: its job ids start again at 1 (tools/local_slurm.sh
# starts with empty state), as on a real cluster whose controller state was reset.
restart_cluster() {
  bash "$src/tools/local_slurm.sh" stop "$cluster"
  eval "$(bash "$src/tools/local_slurm.sh" start "$cluster" 8 "$cluster_nodes")"
}
# fail MESSAGE: the job's state and the ends of the job's output ($work/train.out) and of the
# run's log ($run/trident.log), where they exist; exit 1.
fail() {
  echo "FAIL: $*" >&2
  [[ -n $job ]] && scontrol show job "$job" >&2 || true
  tail -n 40 "$work/train.out" >&2 || true
  tail -n 30 "${run:-/nonexistent}/trident.log" >&2 || true
  exit 1
}
# job_field NAME: the job's NAME field (scontrol show job).
job_field() { scontrol show job "$job" | grep -o " $1=[^ ]*" | head -n 1 | cut -d= -f2; }
# job_completes SECONDS: waits for $job to end, prints its output ($work/train.out), and fails
# unless it ended COMPLETED within SECONDS.
job_completes() {
  local state=
  for _ in $(seq $(($1 * 5))); do
    state=$(job_field JobState)
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT ]] && break
    sleep 0.2
  done
  cat "$work/train.out"
  [[ $state == COMPLETED ]] || fail "job $job ended ${state:-unknown}, want COMPLETED"
}
