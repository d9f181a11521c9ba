#!/usr/bin/env bash
# Data-parallel and micro-batch layouts reproduce the serial run's losses (summation order aside).
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
run() {  # name ranks extra-args...
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/tiny.toml \
    --set run.steps=8 --set run.out_dir="$work/$name" "$@" > "$work/$name.log"
  $check schema "$work/$name/tiny/timings.h5" --steps 8 --ranks "$ranks"
}
run serial 1
run micro2 1 --set train.micro_batch_size=2
run dp2 2
run dp4 4
run dp2_micro1 2 --set train.micro_batch_size=1
for layout in micro2 dp2 dp4 dp2_micro1; do
  echo -n "$layout vs serial: "
  $check compare "$work/serial/tiny/timings.h5" "$work/$layout/tiny/timings.h5" --min-steps 8 --rtol 1e-5
done
grep -q "layout dp=4 tp=1 pp=1" "$work/dp4.log"
echo "layouts: ok"
