#!/usr/bin/env bash
# Kernels run concurrently on Kokkos' OpenMP backend with a fixed summation order: the same run at
# 1, 2 and 4 threads per rank gives the same losses and gradient norms bit for bit, on one rank
# and on 2 ranks (tp 2, every kernel's tensor-parallel shape), and the threads are what the
# banner and timings.h5 report. The GEMMs are the host BLAS's, which share the OpenMP threads:
# OpenBLAS's results depend on its thread count with some CPU kernels (Debian's 0.3.21 on an AMD
# EPYC, kernel Haswell: nearly every shape). PROBE (blas_threads_probe.cpp) checksums GEMMs at 1
# and 2 threads; where they differ the runs are compared to a relative 1e-5, as layouts are.
set -uo pipefail
trident=$1 src=$2 work=$3 probe=$4
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=12 --set run.eval_every=6
        --set run.checkpoint_every=-1)
fail() { echo "FAIL: $*"; exit 1; }
exact=(--exact)
same_bits=bit-identical
if [ "$(OMP_NUM_THREADS=1 "$probe")" != "$(OMP_NUM_THREADS=2 "$probe")" ]; then
  exact=(--rtol 1e-5)
  same_bits="equal to 1e-5"
  echo "the host BLAS's GEMMs give other bits at 2 threads than at 1 on this CPU" \
    "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)): comparing to 1e-5"
fi
for layout in serial tp2; do
  for threads in 1 2 4; do
    out=$work/$layout.t$threads
    if [ $layout = serial ]; then
      OMP_NUM_THREADS=$threads "$trident" train "${common[@]}" --set run.out_dir="$out" \
        > "$out.log" 2>&1 || fail "$layout at $threads threads"
    else
      OMP_NUM_THREADS=$threads mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$trident" train \
        "${common[@]}" --set parallel.tp=2 --set run.out_dir="$out" > "$out.log" 2>&1 ||
        fail "$layout at $threads threads"
    fi
    grep -q "threads per rank: OpenMP $threads (Kokkos)" "$out.log" ||
      { grep "threads per rank" "$out.log"; fail "$layout: not $threads OpenMP threads per rank" \
        "(a Kokkos without OpenMP? make builds one with tools/build_kokkos.sh)"; }
    /usr/bin/python3 - "$out/tiny/timings.h5" "$threads" <<'PY' || fail "$layout: timings.h5 threads"
import sys, h5py
f = h5py.File(sys.argv[1])
assert f.attrs["kokkos_backend"] == "OpenMP" and f.attrs["threads_per_rank"] == sys.argv[2], dict(f.attrs)
PY
    if [ "$threads" != 1 ]; then
      $check compare "$work/$layout.t1/tiny/timings.h5" "$out/tiny/timings.h5" --min-steps 12 --norms \
        "${exact[@]}" || fail "$layout: $threads threads differ from 1"
    fi
  done
  echo "$layout: 1, 2 and 4 threads $same_bits: $(grep -o 'final_loss=[0-9.]*' "$work/$layout.t4.log")"
done
echo "threads determinism: ok"
