#!/usr/bin/env bash
# Compares one gpt2-124m training step (B=4, T=64, fp32), trident vs PyTorch, at 1 and 2 threads.
#
# usage: bench/step_vs_pytorch.sh BUILD_DIR
#   env: THREADS="1 2"  STEPS=5  WARMUP=2  PYTHON=/usr/bin/python3  OMP_WAIT_POLICY=PASSIVE
# Prints a table (threads, trident s/step, torch s/step, trident/torch, trident step/GEMM-only)
# and keeps every raw output in BUILD_DIR/step_vs_pytorch.log.
set -euo pipefail

build=${1:?usage: bench/step_vs_pytorch.sh BUILD_DIR}
threads_list=${THREADS:-"1 2"}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
python=${PYTHON:-/usr/bin/python3}  # Debian's, which has python3-torch
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
step_bench=$build/bench/trident_step_bench
if [[ ! -x $step_bench ]]; then
  echo "error: $step_bench is missing; configure with -DTRIDENT_BUILD_BENCH=ON and build the" \
    "trident_step_bench target" >&2
  exit 2
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "error: $python cannot import torch (install python3-torch)" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Older OpenBLAS builds needed OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE set by hand to pick their
# kernels, but on current builds they force slower ones. Both are unset for EVERY side of the
# comparison alike (trident and PyTorch link the same OpenBLAS), so neither side is favoured.
clean_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
# PyTorch runs its own ops on an OpenMP pool and its GEMMs on OpenBLAS's pthread pool; with the
# default (spinning) OpenMP wait policy the idle OpenMP workers steal the cores OpenBLAS needs,
# which roughly doubled torch's 2-thread step here. PASSIVE is set for every side alike (trident
# has no OpenMP pool); export OMP_WAIT_POLICY=ACTIVE to measure the spinning default instead.
wait_policy=${OMP_WAIT_POLICY:-PASSIVE}
log=$build/step_vs_pytorch.log
: >"$log"

echo "gpt2-124m training step, B=4 T=64 fp32, median of $steps steps after $warmup warm-up"
echo "note: every side runs under 'env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE' (older OpenBLAS"
echo "      builds need them, current kernels are slower with them); was:" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-<unset>}"
echo "note: OMP_WAIT_POLICY=$wait_policy on every side (PyTorch's OpenMP pool vs OpenBLAS threads)"
echo "note: one step = zero grads, forward + loss, backward, global-norm clip (1.0) + AdamW"
echo "raw output: $log"

value() {  # value KEY FILE: the number after KEY= on its line
  sed -n "s/^$1=\([0-9.eE+-]*\).*/\1/p" "$2" | tail -n 1
}

declare -a rows
for n in $threads_list; do
  out_trident=$(mktemp) out_torch=$(mktemp)
  # One BLAS thread pool per side, n threads each; Kokkos here is Serial, so BLAS is the only
  # source of threads in trident, while PyTorch also runs its own ops on n OpenMP threads.
  echo "== trident, $n thread(s)" >>"$log"
  "${clean_env[@]}" OPENBLAS_NUM_THREADS="$n" OMP_NUM_THREADS="$n" OMP_WAIT_POLICY="$wait_policy" \
    "$step_bench" --steps "$steps" --warmup "$warmup" | tee -a "$log" >"$out_trident"
  echo "== torch, $n thread(s)" >>"$log"
  "${clean_env[@]}" OPENBLAS_NUM_THREADS="$n" OMP_NUM_THREADS="$n" OMP_WAIT_POLICY="$wait_policy" \
    "$python" "$here/torch_step.py" --threads "$n" --steps "$steps" --warmup "$warmup" |
    tee -a "$log" >"$out_torch"
  tr_step=$(value trident_step_seconds "$out_trident")
  tr_gemm=$(value trident_gemm_seconds "$out_trident")
  to_step=$(value torch_step_seconds "$out_torch")
  rows+=("$n $tr_step $to_step $tr_gemm")
  for phase in forward backward optimizer; do
    printf '   %-9s trident %7.3f s   torch %7.3f s   (%s threads)\n' "$phase" \
      "$(value trident_${phase}_seconds "$out_trident")" \
      "$(value torch_${phase}_seconds "$out_torch")" "$n"
  done
  rm -f "$out_trident" "$out_torch"
done

echo
printf '%-8s %-16s %-16s %-15s %-16s %-18s\n' threads "trident s/step" "torch s/step" \
  "trident/torch" "GEMM-only s" "trident step/GEMM"
for row in "${rows[@]}"; do
  read -r n tr to gemm <<<"$row"
  awk -v n="$n" -v tr="$tr" -v to="$to" -v g="$gemm" 'BEGIN {
    printf "%-8s %-16.3f %-16.3f %-15.2f %-16.3f %-18.2f\n", n, tr, to, tr / to, g, tr / g }'
done
