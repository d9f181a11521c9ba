#!/usr/bin/env bash
# On a real Slurm cluster on localhost: sbatch jobs/weak_scaling.sh from a fresh copy of the repository, on one node with repeats and on two, then check every run, the table, the records and a recycled job id.
# usage: slurm_weak_scaling.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
# Starts munged, slurmctld and two slurmd (nodes n1, n2; tools/local_slurm.sh, as root, no
# systemd) under WORK_DIR and does what docs/slurm-and-analysis.md tells a user to do, in a copy
# of SOURCE_DIR (its tracked and untracked-not-ignored files, so uncommitted work is what runs):
#   make program && make data && sbatch jobs/weak_scaling.sh
# with two stand-ins, because `make program` would configure and build a second tree from
# scratch (minutes on the 2 cores tests get): the program goes where `make program` puts it,
# build/src/trident, as a link to TRIDENT_EXE (the binary under test), and the data comes from
# `make -o program data`, the Makefile's own data recipe with `program` taken as made. The
# parameters go through the submitting shell's environment (sbatch's default --export=ALL).
# Jobs: the tiny model inside one node at 1, 2 and 4 ranks, twice each (REPEATS=2), and over 1
# and 2 nodes of 2 ranks. Waits through `scontrol show job` (there is no accounting, so no
# sacct), checks each run's status, run.json and timings.h5, the aggregated table (one row per
# rank count, repeats, min <= median <= max), sweep.json's provenance, the job's log in the sweep
# directory (warnings once, the analysis command with its interpreter). Then restarts the
# cluster, whose job ids start again at 1, and checks that the new job 1 refuses the old job 1's
# sweep directory and leaves it as it was. Stops the daemons by pid whatever happens.
# A requeued job may start again only when its old credential has expired (120 s by default).
export SLURM_CRED_EXPIRE=10
source "$(dirname "$0")/slurm_cluster.sh" "$1" "$2" "$3" 2
sinfo

fail() {
  echo "FAIL: $*" >&2
  [[ -n $job ]] && scontrol show job "$job" >&2 || true
  [[ -f $work/slurm.out ]] && tail -n 40 "$work/slurm.out" >&2
  exit 1
}

# The fresh copy, with the program and the data as `make program && make data` leave them.
repo=$work/repo
mkdir -p "$repo/build/src"
git -C "$src" ls-files -co --exclude-standard -z |
  (cd "$src" && tar --null --ignore-failed-read -T - -cf -) | tar -C "$repo" -xf - ||
  fail "cannot copy $src (a git checkout) to $repo"
ln -s "$exe" "$repo/build/src/trident"
make -C "$repo" -o program data >"$work/make_data.out" 2>&1 ||
  { cat "$work/make_data.out"; fail "make -o program data"; }

# submit NAME STATE EXIT_CODE [ENV=VALUE ...] -- SBATCH_ARGS...: submits jobs/weak_scaling.sh from
# the copy's root with the parameters in the environment, as a user would, waits until it ends
# and requires STATE with EXIT_CODE; sets $job, $sweep (the copy's runs/weak_scaling/<job>) and
# $log (the job's .out, where the script's #SBATCH --output puts it).
steps=8
submit() {
  local name=$1 want_state=$2 want_exit=$3 state= settings=()
  shift 3
  while [[ $1 != -- ]]; do settings+=("$1") && shift; done
  shift
  cd "$repo"
  job=$(env ${settings[@]+"${settings[@]}"} CONFIG=inputs/tiny.toml STEPS=$steps WARMUP=2 \
    sbatch --parsable "$@" jobs/weak_scaling.sh)
  echo "submitted job $job ($name: ${settings[*]-} $*)"
  for _ in $(seq 900); do
    state=$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case $state in
      PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED) sleep 0.5 ;;
      *) break ;;
    esac
  done
  log=$repo/slurm-trident-weak-$job.out
  echo "job $job: $state"
  cat "$log"
  cp "$log" "$work/slurm.out"
  [[ $state == "$want_state" ]] || fail "job $job ended $state, want $want_state"
  local exit_code
  exit_code=$(scontrol show job "$job" | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2)
  [[ $exit_code == "$want_exit" ]] || fail "job exit code $exit_code, want $want_exit"
  sweep=$repo/runs/weak_scaling/$job
  job=
}

# check SWEEP JOB STEPS "RANKS:NODES ..." THREADS [cpus-per-task] REPEATS: every run completed
# with the expected shape, timings.h5 written by ranks srun started inside this job, the table
# against the h5 files (the median over repeats of each run's median, the min-max spread), and
# sweep.json's record.
check() {
  "$python" - "$@" <<'PY'
import csv, json, sys
from pathlib import Path
import h5py
import numpy as np

sweep, job, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
shapes = [tuple(map(int, s.split(":"))) for s in sys.argv[4].split()]
threads = int(sys.argv[5])  # each rank's OpenMP threads
srun_cpus = sys.argv[6] == "cpus-per-task"  # from sbatch --cpus-per-task, which srun must be given
repeats = int(sys.argv[7])
medians = {}
for ranks, nodes in shapes:
    layout = f"n{nodes}_dp{ranks}_tp1_pp1"
    for k in range(1, repeats + 1):
        run = sweep / (f"{layout}_rep{k}" if repeats > 1 else layout)
        assert (run / "status").read_text().strip() == "completed", run
        meta = json.loads((run / "run.json").read_text())
        assert (meta["ranks"], meta["nodes"], meta["dp"], meta["exit_code"]) == (ranks, nodes, ranks, 0), meta
        assert (meta["layout"], meta["repeat"], meta["repeats"]) == (layout, k, repeats), meta
        assert meta["global_batch"] == 8 * ranks, meta  # weak scaling: the batch grows with dp
        assert meta["threads_per_rank"] == threads, (meta, threads)
        assert (f"--cpus-per-task={threads} " in (run / "command").read_text()) == srun_cpus, run
        with h5py.File(run / "timings.h5", "r") as f:
            assert f.attrs["slurm_job_id"] == job, (f.attrs["slurm_job_id"], job)
            assert int(f.attrs["threads_per_rank"]) == threads, f.attrs["threads_per_rank"]
            assert len(f.attrs["hostnames"].split(",")) == ranks
            assert f["step"].shape == (steps,), f["step"].shape
            assert f["phase_seconds"].shape[1] == ranks
            assert np.all(np.isfinite(f["loss"][:]))
            tokens = f["tokens"][:]
            assert np.all(tokens == 8 * ranks * 16), tokens  # batch x seq_len
            # Timed steps: after the 2 warm-up steps (WARMUP=2), without a checkpoint write.
            io = f["phase_seconds"][:, :, f.attrs["phases"].split(",").index("io")].max(axis=1)
            timed = (np.arange(steps) >= 2) & (io == 0)
            medians.setdefault(ranks, []).append(np.median(f["step_seconds_max"][:][timed]))
per_rank = {ranks: 8 * ranks * 16 / np.median(m) / ranks for ranks, m in medians.items()}

rows = list(csv.DictReader(open(sweep / "scaling.csv")))
assert len(rows) == len(shapes), rows  # one row per rank count, whatever the repeats
by_ranks = {int(r["ranks"]): r for r in rows}
n0 = min(per_rank)
for ranks, nodes in shapes:
    r = by_ranks[ranks]
    assert int(r["nodes"]) == nodes, r
    expected = per_rank[ranks] / per_rank[n0]
    eff = float(r["efficiency"])
    assert abs(eff - expected) < 1e-6 * max(1, expected), (ranks, eff, expected)
    # The repeats' columns (analysis/scaling.py): how many, and the spread of the runs' medians.
    assert int(r["repeats"]) == repeats, r
    lo, mid, hi = float(r["step_s_min"]), float(r["median_step_s"]), float(r["step_s_max"])
    assert lo <= mid <= hi, r
    assert abs(lo - min(medians[ranks])) < 1e-9 and abs(hi - max(medians[ranks])) < 1e-9, (r, medians[ranks])
assert float(by_ranks[n0]["efficiency"]) == 1.0
md = [line for line in (sweep / "scaling.md").read_text().splitlines() if line.startswith("|")]
assert len(md) == 2 + len(shapes), md  # the header, its rule and one row per rank count
assert "repeats" in md[0] and "step_s_min" in md[0] and "step_s_max" in md[0], md[0]
for name in ("scaling.png", "breakdown.png"):
    data = (sweep / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, (name, len(data))

# sweep.json: the study and its provenance.
s = json.loads((sweep / "sweep.json").read_text())
assert (s["job_id"], s["repeats"], s["launcher"]) == (job, repeats, "srun"), s
assert s["slurm_cluster"] == "trident-local" and s["slurm_submit_time"], s
p = s["provenance"]
keys = {"git_revision", "git_dirty", "trident_revision", "cpu_model", "cores_per_node", "host_simd",
        "blas", "blas_kernel", "kokkos_backend", "threads_per_rank", "mpi", "launcher",
        "slurm_job_id", "slurm_nodelist", "env"}
assert keys <= set(p), f"provenance lacks {keys - set(p)}"
assert p["cpu_model"] and p["blas_kernel"] and p["trident_revision"] and p["mpi"], p
assert p["cores_per_node"] >= 1 and p["slurm_job_id"] == job and p["slurm_nodelist"], p
# A copy of the repository, not a git checkout: no revision, and nothing known of changes.
assert p["git_revision"] == "" and p["git_dirty"] is None, p
assert p["env"]["OMP_NUM_THREADS"] == str(threads), p["env"]
print("weak scaling under Slurm:", {k: round(float(v["efficiency"]), 3) for k, v in by_ranks.items()},
      "repeats", repeats)
PY
}

# check_log SWEEP LOG: the job's log is in the sweep directory, whole; it shows each run's two
# step times by name, each trident warning once, and each analysis command as run.
check_log() {
  local sweep=$1 log=$2 kept warning interpreter
  kept=$sweep/$(basename "$log")
  [[ -f $kept ]] || fail "no copy of the job's log $log in $sweep"
  grep -q "weak_scaling: [0-9]* completed, 0 failed, 0 timed out" "$kept" ||
    fail "the copy $kept lacks the job's summary"
  grep -q "the job's log, copied: $kept" "$kept" || fail "the copy $kept is not the whole log"
  grep -qE '  n1_dp1_tp1_pp1(_rep1)?: completed in [0-9.]+s mean_ms_after_step1=[0-9.]+ median_ms_after_warmup2=[0-9.]+$' \
    "$log" || fail "the per-run line does not name both step times"
  while IFS= read -r warning; do
    [[ $(grep -cF "(each warning once per sweep): ${warning#warning: }" "$log") == 1 ]] ||
      fail "warning not repeated once in the job log: $warning"
  done < <(cat "$sweep"/*/trident.log | grep '^warning: ' | sort -u)
  interpreter=$(sed -n 's/.*analysis interpreter: //p' "$log")
  [[ -n $interpreter ]] || fail "the job log names no analysis interpreter"
  grep -qxF "  $interpreter $repo/analysis/scaling.py --warmup 2 $sweep" "$log" ||
    fail "the job log does not show the scaling.py command as run"
}

# Threads per rank: the test's OMP_NUM_THREADS on one node (srun reserves 1 CPU per task, as the
# job has), 3 from --cpus-per-task on two (srun is given it).
submit one_node COMPLETED 0:0 REPEATS=2 -- --nodes=1 --ntasks-per-node=4
first_sweep=$sweep first_job=$(basename "$sweep")
check "$sweep" "$first_job" "$steps" "1:1 2:1 4:1" "${OMP_NUM_THREADS:-1}" "" 2 ||
  fail "one-node sweep"
check_log "$sweep" "$log"
grep -q "3 layout(s) x 2 repeats, round robin" "$log" || fail "no round robin of the repeats"

# Two nodes of this one host: the local profile sends OpenMPI over TCP (their ranks share a
# hostname, which its shared-memory transport mistakes for one node; tools/local_slurm.sh).
submit two_nodes COMPLETED 0:0 -u OMPI_MCA_btl -- --nodes=2 --ntasks-per-node=2 --cpus-per-task=3
check "$sweep" "$(basename "$sweep")" "$steps" "2:1 4:2" 3 cpus-per-task 1 || fail "two-node sweep"
grep -q "job $(basename "$sweep") via srun, 2 node(s) x 2 rank(s)" "$log" ||
  fail "the two-node job did not see 2 nodes of 2 ranks"
"$python" -c 'import json, sys; e = json.load(open(sys.argv[1]))["provenance"]["env"]
assert e.get("OMPI_MCA_btl") == "self,tcp", e' "$sweep/sweep.json" ||
  fail "the local profile did not set OMPI_MCA_btl=self,tcp for two nodes of one host"

# A sweep requeued while it runs (as a preemption or a node failure does): the second start
# continues the same sweep directory, keeps the run the first completed and measures the rest.
cd "$repo"
job=$(env CONFIG=inputs/tiny.toml STEPS=300 WARMUP=2 REPEATS=2 RANK_COUNTS="1 2" sbatch --parsable \
  --requeue --open-mode=append --nodes=1 --ntasks-per-node=2 jobs/weak_scaling.sh)
requeued=$repo/runs/weak_scaling/$job
for _ in $(seq 600); do
  [[ $(cat "$requeued/n1_dp1_tp1_pp1_rep1/status" 2>/dev/null) == completed ]] && break
  sleep 0.1
done
scontrol requeue "$job" || fail "scontrol requeue $job"
echo "requeued job $job after its first run"
submit_wait() {
  local state=
  for _ in $(seq 900); do
    state=$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT ]] && break
    sleep 0.5
  done
  echo "$state"
}
state=$(submit_wait)
log=$repo/slurm-trident-weak-$job.out
cat "$log"
cp "$log" "$work/slurm.out"
[[ $state == COMPLETED ]] || fail "the requeued job ended $state"
[[ $(scontrol show job "$job" | grep -o ' Restarts=[0-9]*' | cut -d= -f2) == 1 ]] || fail "not restarted once"
grep -q "requeued (start 2 of job $job): continuing its sweep" "$log" || fail "no continuation line"
grep -q "n1_dp1_tp1_pp1_rep1: completed in an earlier start of this job" "$log" ||
  fail "the second start did not keep the first start's run"
for run in n1_dp1_tp1_pp1_rep1 n1_dp2_tp1_pp1_rep1 n1_dp1_tp1_pp1_rep2 n1_dp2_tp1_pp1_rep2; do
  [[ $(cat "$requeued/$run/status") == completed ]] || fail "$run: $(cat "$requeued/$run/status")"
done
"$python" -c 'import json, sys; s = json.load(open(sys.argv[1]))
assert s["job_id"] == sys.argv[2] and s["slurm_restart_count"] == 1 and s["restarted"], s' \
  "$requeued/sweep.json" "$job" || fail "sweep.json of the requeued job"
[[ -f $requeued/scaling.csv ]] || fail "no analysis after the requeue"
job=

# A restarted cluster numbers its jobs from 1 again (tools/local_slurm.sh starts with empty
# state): the new job 1 must refuse the old job 1's sweep directory and leave it as it was.
[[ $first_job == 1 ]] || fail "the first job was $first_job, not 1"
before=$(cd "$first_sweep" && find . -type f -exec md5sum {} + | sort)
restart_cluster
submit recycled FAILED 2:0 REPEATS=2 -- --nodes=1 --ntasks-per-node=4
[[ $(basename "$sweep") == 1 ]] || fail "the restarted cluster's first job is $(basename "$sweep")"
grep -q "holds the sweep of another job: job 1 of cluster trident-local, started" "$log" ||
  fail "the recycled job id did not say why it refused"
grep -q "Move the old sweep away (mv $first_sweep $first_sweep.old) or submit with another RUNS_DIR" \
  "$log" || fail "the refusal does not say what to do"
[[ $(cd "$first_sweep" && find . -type f -exec md5sum {} + | sort) == "$before" ]] ||
  fail "the refused job changed $first_sweep"
echo PASS
