#!/usr/bin/env bash
# What the collective flight recorder costs: the tiny GPT-2 on tp 2 (2 ranks, one thread each; a
# step of a few milliseconds with a tensor-parallel all-reduce in every layer's forward and
# backward: the worst case for a per-operation cost), trained with run.flight_recorder = 2048
# (the default) and 0 (off), alternated ROUNDS times; prints each run's mean step time
# (PERFORMANCE ms_per_step over STEPS steps) and FLIGHT_RECORDER_OVERHEAD, the median of the "on"
# runs over the median of the "off" runs minus one (issue 52 asks for under 1 %). The runs differ
# by a few percent from one to the next on a shared VM, more than the recorder costs, so it also
# prints the cost bound: nanoseconds per recorded operation (trident_bench_kernels'
# BM_FlightRecorderOperation) times the operations of one step (counted in a record that a
# hang injected at step 3 makes the watchdog write) over the step time.
# usage: bench/flight_recorder.sh BUILD_DIR [STEPS] [ROUNDS]
set -euo pipefail
build=${1:?usage: bench/flight_recorder.sh BUILD_DIR [STEPS] [ROUNDS]}
steps=${2:-1000}
rounds=${3:-5}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
source bench/require_build.sh
require_build "$build" "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=$build/flight_recorder_bench
rm -rf "$out" && mkdir -p "$out"
run() {  # name capacity
  mpirun -np 2 --oversubscribe "$build/src/trident" train --config inputs/tiny.toml \
    --set parallel.tp=2 --set run.steps="$steps" --set run.log_every=1000000 \
    --set run.eval_every=0 --set run.checkpoint_every=-1 --set run.out_dir="$out/$1" \
    --set run.flight_recorder="$2" > "$out/$1.log" 2>&1
  grep -o 'ms_per_step=[0-9.]*' "$out/$1.log" | cut -d= -f2
}
on=() off=()
for r in $(seq 1 "$rounds"); do
  on+=("$(run "on$r" 2048)")
  off+=("$(run "off$r" 0)")
  echo "round $r: on ${on[-1]} ms/step, off ${off[-1]} ms/step"
done
ns_per_op=$(OMP_NUM_THREADS=1 "$build/bench/trident_bench_kernels" \
  --benchmark_filter=FlightRecorder --benchmark_format=csv 2>/dev/null |
  awk -F, '/FlightRecorder/ {print $3}')
mpirun -np 2 --oversubscribe "$build/src/trident" train --config inputs/tiny.toml \
  --set parallel.tp=2 --set run.steps=4 --set run.out_dir="$out/count" --set run.eval_every=0 \
  --set run.checkpoint_every=-1 --set run.watchdog_seconds=2 \
  --inject-fault hang-comm:3:0:world > "$out/count.log" 2>&1 || true
/usr/bin/python3 - "${on[*]}" "${off[*]}" "$steps" "$ns_per_op" "$out/count/tiny/flight" <<'PY'
import json, statistics, sys
on = [float(x) for x in sys.argv[1].split()]
off = [float(x) for x in sys.argv[2].split()]
m_on, m_off = statistics.median(on), statistics.median(off)
ns = float(sys.argv[4])
with open(f"{sys.argv[5]}/rank_00000.jsonl") as f:
    entries = [json.loads(line) for line in f][1:]
per_step = sum(1 for e in entries if e["step"] == 2)
print(f"median ms/step: on {m_on:.4f}, off {m_off:.4f} over {len(on)} runs each of {sys.argv[3]} steps")
print(f"FLIGHT_RECORDER_OVERHEAD {100 * (m_on / m_off - 1):+.2f} % (measured, runs alternated)")
print(f"FLIGHT_RECORDER_BOUND {100 * ns * per_step / (m_off * 1e6):.3f} % "
      f"({ns:.1f} ns per operation x {per_step} operations per step / {m_off:.2f} ms)")
PY
