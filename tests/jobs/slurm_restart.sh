#!/usr/bin/env bash
# On a real Slurm cluster on localhost with two nodes (n1, n2: two slurmd of this host): sbatch
# jobs/train.sh on both nodes for a run of 2 ranks (one node's worth, so one is spare; srun spreads
# the first launch, rank 1 on n2), whose rank 1 hangs in a data-parallel operation of step 3 on
# its first launch. The watchdog ends it, trident doctor names rank 1's node (n2, the Slurm node
# name: SLURMD_NODENAME), and the relaunch leaves that node out (srun --exclude=n2 --nodes=1):
# the job ends COMPLETED, the second timings segment was written by ranks on n1 only, resumed from
# the step-2 checkpoint.
# usage: slurm_restart.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
source "$(dirname "$0")/slurm_cluster.sh" "$1" "$2" "$3" 2

run=$work/runs/train/excluded
# The first job step (srun launch) hangs rank 1; later ones run as they are.
cat > "$work/hangs_first_launch" <<SH
#!/usr/bin/env bash
[ "\$1" = train ] && [ "\${SLURM_STEP_ID:-}" = 0 ] && set -- "\$@" --inject-fault hang-comm:3:1:dp
exec "$exe" "\$@"
SH
chmod +x "$work/hangs_first_launch"
cd "$src"
job=$(TRIDENT=$work/hangs_first_launch CONFIG=inputs/tiny.toml STEPS=8 RUNS_DIR=$work/runs \
  RUN_NAME=excluded RANKS=2 \
  SETS="run.eval_every=0 run.checkpoint_every=2 run.watchdog_seconds=4" \
  sbatch --parsable --output="$work/train.out" --nodes=2 --ntasks-per-node=2 jobs/train.sh)
echo "submitted job $job"
job_completes 300
grep -q "train: trident doctor names host n2 (the rank the others wait for)" "$work/train.out" ||
  fail "the doctor did not name n2"
grep -q "train: leaving host n2 out of the relaunch" "$work/train.out" || fail "n2 not left out"
grep -q -- "--exclude=n2 --nodes=1" "$run/command" || fail "the relaunch command: $(cat "$run/command")"
grep -q "^resumed from $run/checkpoints/step_000002.h5 at step 2" "$run/trident.log" ||
  fail "the relaunch did not resume from step 2"
[[ $(cat "$run/status") == completed ]] || fail "status $(cat "$run/status")"
[[ -d $run/flight.start-1.1 ]] || fail "the first launch's flight records were not kept"
"$python" - "$run" <<'PY' || fail "the nodes of each launch"
import sys
import h5py

run = sys.argv[1]
for name, nodes, first in (("timings.h5", "n1,n2", 1), ("timings.2.h5", "n1,n1", 3)):
    with h5py.File(f"{run}/{name}") as f:
        hosts = f.attrs["hostnames"]
        hosts = hosts.decode() if isinstance(hosts, bytes) else str(hosts)
        assert hosts == nodes and int(f["step"][0]) == first, (name, hosts, f["step"][()])
print("launch 1 on n1 and n2 (rank 1 hung on n2), launch 2 on n1 from step 3")
PY
job=
echo PASS
