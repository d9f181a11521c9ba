#!/usr/bin/env bash
# On a real one-node Slurm cluster on localhost: sbatch jobs/weak_scaling.sh, then check every run, the table and the plot.
# usage: slurm_weak_scaling.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
# Starts munged, slurmctld and slurmd under WORK_DIR (tools/local_slurm.sh, as root, no systemd),
# submits the tiny model's weak-scaling study at 1, 2 and 4 ranks, waits for the job through
# `scontrol show job` (there is no accounting, so no sacct), checks each layout's status and
# timings.h5 and the analysis outputs, and stops the daemons by pid whatever happens.
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
# A job still running (a failure, or the wait below running out) is cancelled first: with
# proctrack/linuxproc its steps would outlive the daemons.
cleanup() {
  if [[ -n $job ]] && scancel "$job" 2>/dev/null; then sleep 2; fi
  bash "$src/tools/local_slurm.sh" stop "$cluster"
}
trap cleanup EXIT
eval "$(bash "$src/tools/local_slurm.sh" start "$cluster" 8)"
export SLURM_CONF
sinfo

fail() {
  echo "FAIL: $*" >&2
  [[ -n ${job-} ]] && scontrol show job "$job" >&2 || true
  [[ -f $work/slurm.out ]] && tail -n 40 "$work/slurm.out" >&2
  exit 1
}

steps=8
cd "$src"  # sbatch from the repository root, as a user would
job=$(TRIDENT=$exe CONFIG=inputs/tiny.toml STEPS=$steps WARMUP=2 RUNS_DIR=$work/runs \
  sbatch --parsable --ntasks-per-node=4 --output="$work/slurm.out" jobs/weak_scaling.sh)
echo "submitted job $job"
state=
for _ in $(seq 600); do
  state=$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  case $state in
    PENDING | CONFIGURING | RUNNING | COMPLETING) sleep 0.5 ;;
    *) break ;;
  esac
done
echo "job $job: $state"
cat "$work/slurm.out"
[[ $state == COMPLETED ]] || fail "job $job ended $state, want COMPLETED"
exit_code=$(scontrol show job "$job" | grep -o ' ExitCode=[0-9:]*' | cut -d= -f2)
[[ $exit_code == 0:0 ]] || fail "job exit code $exit_code"

sweep=$work/runs/weak_scaling/$job
for layout in n1_dp1_tp1_pp1 n1_dp2_tp1_pp1 n1_dp4_tp1_pp1; do
  [[ -f $sweep/$layout/status ]] || fail "$sweep/$layout/status is missing"
  [[ $(cat "$sweep/$layout/status") == completed ]] || fail "$layout: $(cat "$sweep/$layout/status")"
done
"$python" - "$sweep" "$job" "$steps" <<'PY'
import csv, json, sys
from pathlib import Path
import h5py
import numpy as np

sweep, job, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
per_rank = {}
for ranks in (1, 2, 4):
    run = sweep / f"n1_dp{ranks}_tp1_pp1"
    meta = json.loads((run / "run.json").read_text())
    assert meta["ranks"] == ranks and meta["dp"] == ranks and meta["exit_code"] == 0, meta
    assert meta["global_batch"] == 8 * ranks, meta  # weak scaling: the batch grows with dp
    with h5py.File(run / "timings.h5", "r") as f:
        # srun started these ranks inside this job: trident saw the job id and `ranks` hosts.
        assert f.attrs["slurm_job_id"] == job, (f.attrs["slurm_job_id"], job)
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
assert len(rows) == 3, rows
by_ranks = {int(r["ranks"]): r for r in rows}
for ranks, r in by_ranks.items():
    expected = per_rank[ranks] / per_rank[1]
    eff = float(r["efficiency"])
    assert abs(eff - expected) < 1e-6 * max(1, expected), (ranks, eff, expected)
assert float(by_ranks[1]["efficiency"]) == 1.0
md = (sweep / "scaling.md").read_text().strip().splitlines()
assert md[0].startswith("|") and len(md) == 2 + 3, md
for name in ("scaling.png", "breakdown.png"):
    data = (sweep / name).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, (name, len(data))
print("weak scaling under Slurm:", {k: round(float(v["efficiency"]), 3) for k, v in by_ranks.items()})
PY
echo PASS
