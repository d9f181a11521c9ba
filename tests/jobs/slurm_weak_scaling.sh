#!/usr/bin/env bash
# On a real Slurm cluster on localhost: sbatch jobs/weak_scaling.sh on one node and on two, then check every run, the table and the plot.
# usage: slurm_weak_scaling.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
# Starts munged, slurmctld and two slurmd (nodes n1, n2; tools/local_slurm.sh, as root, no
# systemd) under WORK_DIR and submits the tiny model's weak-scaling study twice: inside one node
# at 1, 2 and 4 ranks (--nodes=1 --ntasks-per-node=4), and over 1 and 2 nodes of 2 ranks
# (--nodes=2 --ntasks-per-node=2). Waits through `scontrol show job` (there is no accounting, so
# no sacct), checks each layout's status and timings.h5 and the analysis outputs, and stops the
# daemons by pid whatever happens.
source "$(dirname "$0")/slurm_cluster.sh" "$1" "$2" "$3" 2
sinfo

fail() {
  echo "FAIL: $*" >&2
  [[ -n $job ]] && scontrol show job "$job" >&2 || true
  [[ -f $work/slurm.out ]] && tail -n 40 "$work/slurm.out" >&2
  exit 1
}

# submit NAME SBATCH_ARGS...: submits jobs/weak_scaling.sh from the repository root, as a user
# would, waits until it ends and requires COMPLETED with exit code 0:0; sets $job and $sweep.
steps=8
submit() {
  local name=$1 state=
  shift
  cd "$src"
  job=$(TRIDENT=$exe CONFIG=inputs/tiny.toml STEPS=$steps WARMUP=2 RUNS_DIR=$work/runs \
    sbatch --parsable --output="$work/$name.out" "$@" jobs/weak_scaling.sh)
  echo "submitted job $job ($name: $*)"
  for _ in $(seq 600); do
    state=$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case $state in
      PENDING | CONFIGURING | RUNNING | COMPLETING) sleep 0.5 ;;
      *) break ;;
    esac
  done
  echo "job $job: $state"
  cat "$work/$name.out"
  cp "$work/$name.out" "$work/slurm.out"
  [[ $state == COMPLETED ]] || fail "job $job ended $state, want COMPLETED"
  local exit_code
  exit_code=$(scontrol show job "$job" | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2)
  [[ $exit_code == 0:0 ]] || fail "job exit code $exit_code"
  sweep=$work/runs/weak_scaling/$job
  job=
}

# check SWEEP JOB "RANKS:NODES ...": every layout completed with the expected shape, timings.h5
# written by ranks srun started inside this job, and the efficiency table against the h5 files.
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
per_rank = {}
for ranks, nodes in shapes:
    run = sweep / f"n{nodes}_dp{ranks}_tp1_pp1"
    assert (run / "status").read_text().strip() == "completed", run
    meta = json.loads((run / "run.json").read_text())
    assert (meta["ranks"], meta["nodes"], meta["dp"], meta["exit_code"]) == (ranks, nodes, ranks, 0), meta
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
        t = np.median(f["step_seconds_max"][:][timed])
        per_rank[ranks] = tokens[0] / t / ranks

rows = list(csv.DictReader(open(sweep / "scaling.csv")))
assert len(rows) == len(shapes), rows
by_ranks = {int(r["ranks"]): r for r in rows}
n0 = min(per_rank)
for ranks, nodes in shapes:
    r = by_ranks[ranks]
    assert int(r["nodes"]) == nodes, r
    expected = per_rank[ranks] / per_rank[n0]
    eff = float(r["efficiency"])
    assert abs(eff - expected) < 1e-6 * max(1, expected), (ranks, eff, expected)
assert float(by_ranks[n0]["efficiency"]) == 1.0
md = (sweep / "scaling.md").read_text().strip().splitlines()
assert md[0].startswith("|") and len(md) == 2 + len(shapes), md
for name in ("scaling.png", "breakdown.png"):
    data = (sweep / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, (name, len(data))
print("weak scaling under Slurm:", {k: round(float(v["efficiency"]), 3) for k, v in by_ranks.items()})
PY
}

# Threads per rank: the test's OMP_NUM_THREADS on one node (srun reserves 1 CPU per task, as the
# job has), 3 from --cpus-per-task on two (srun is given it).
submit one_node --nodes=1 --ntasks-per-node=4
check "$sweep" "$(basename "$sweep")" "$steps" "1:1 2:1 4:1" "${OMP_NUM_THREADS:-1}" "" ||
  fail "one-node sweep"

# Both nodes share this host's name, and OpenMPI's shared-memory transport would take ranks of
# different nodes for neighbours (tools/local_slurm.sh): TCP between every pair instead.
OMPI_MCA_btl=self,tcp submit two_nodes --nodes=2 --ntasks-per-node=2 --cpus-per-task=3
check "$sweep" "$(basename "$sweep")" "$steps" "2:1 4:2" 3 cpus-per-task || fail "two-node sweep"
grep -q "job $(basename "$sweep") via srun, 2 node(s) x 2 rank(s)" "$work/two_nodes.out" ||
  fail "the two-node job did not see 2 nodes of 2 ranks"
echo PASS
