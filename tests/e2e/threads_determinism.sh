#!/usr/bin/env bash
# Kernels run concurrently on Kokkos' OpenMP backend with a fixed summation order: the same run at
# 1, 2 and 4 threads per rank gives the same losses and gradient norms bit for bit, on one rank
# and on 2 ranks (tp 2, every kernel's tensor-parallel shape), and the threads are what the
# banner and timings.h5 report. The GEMMs are the host BLAS's, which share the OpenMP threads:
# OpenBLAS's results depend on its thread count with some CPU kernels (Debian's 0.3.21 on an AMD
# EPYC, kernel Haswell: nearly every shape). PROBE (blas_threads_probe.cpp) checksums GEMMs at 1
# and 2 threads; where they differ the runs are compared to a relative 1e-5, as layouts are. The
# same for compute = "bf16" on one rank, whose GEMMs are oneDNN's (PROBE bf16 checksums those;
# where they differ, the runs are compared to 5e-4, as bf16 layouts are).
set -uo pipefail
trident=$1 src=$2 work=$3 probe=$4
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=12 --set run.eval_every=6
        --set run.checkpoint_every=-1)
fail() { echo "FAIL: $*"; exit 1; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
# tolerance KIND RTOL: how runs whose GEMMs are KIND's ("" BLAS, bf16 oneDNN) compare across
# thread counts: bit for bit where the probe's GEMMs are, else to RTOL.
tolerance() {
  if [ "$(OMP_NUM_THREADS=1 "$probe" $1)" = "$(OMP_NUM_THREADS=2 "$probe" $1)" ]; then
    echo --exact
  else
    echo "--rtol $2"
  fi
}
declare -A compare=([serial]="$(tolerance "" 1e-5)" [tp2]="$(tolerance "" 1e-5)"
                    [serial_bf16]="$(tolerance bf16 5e-4)")
[ "${compare[serial]}" = --exact ] ||
  echo "the host BLAS's GEMMs give other bits at 2 threads than at 1 on this CPU ($cpu): 1e-5"
[ "${compare[serial_bf16]}" = --exact ] ||
  echo "oneDNN's bf16 GEMMs give other bits at 2 threads than at 1 on this CPU ($cpu): 5e-4"
for layout in serial tp2 serial_bf16; do
  for threads in 1 2 4; do
    out=$work/$layout.t$threads
    if [ $layout = serial ]; then
      OMP_NUM_THREADS=$threads "$trident" train "${common[@]}" --set run.out_dir="$out" \
        > "$out.log" 2>&1 || fail "$layout at $threads threads"
    elif [ $layout = serial_bf16 ]; then
      OMP_NUM_THREADS=$threads "$trident" train "${common[@]}" --set precision.compute=bf16 \
        --set run.out_dir="$out" > "$out.log" 2>&1 || fail "$layout at $threads threads"
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
assert f.attrs["kokkos_backend"] == "OpenMP" and f.attrs["threads_per_rank"] == int(sys.argv[2]), dict(f.attrs)
assert f.attrs["threads_chosen_by"] == "OMP_NUM_THREADS", dict(f.attrs)
PY
    if [ "$threads" != 1 ]; then
      $check compare "$work/$layout.t1/tiny/timings.h5" "$out/tiny/timings.h5" --min-steps 12 --norms \
        ${compare[$layout]} || fail "$layout: $threads threads differ from 1"
    fi
  done
  same=$([ "${compare[$layout]}" = --exact ] && echo bit-identical || echo "equal to ${compare[$layout]#--rtol }")
  echo "$layout: 1, 2 and 4 threads $same: $(grep -o 'final_loss=[0-9.]*' "$work/$layout.t4.log")"
done
echo "threads determinism: ok"
