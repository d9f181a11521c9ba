#!/usr/bin/env bash
# Threads per rank without OMP_NUM_THREADS: each rank takes its share of the node's CPUs (4 ranks
# on 2 CPUs: 1 thread each, not one per core), says so in the banner and timings.h5; with
# OMP_NUM_THREADS set, ranks obey it and warn when ranks x threads exceed the CPUs.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--config inputs/tiny.toml --set run.steps=4 --set run.eval_every=0
        --set run.checkpoint_every=-1)
# The CPUs this test may run on (nproc itself obeys OMP_NUM_THREADS, which the suite sets).
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
share() { local t=$(($1 / $2)); echo $((t < 1 ? 1 : t)); }

# run NAME RANKS [VAR=VALUE ...]: trains the tiny model on RANKS ranks (no mpirun for 0) with
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS unset unless given.
run() {
  local name=$1 ranks=$2
  shift 2
  local launch=()
  ((ranks > 0)) && launch=(mpirun -np "$ranks" --oversubscribe)
  local layout=()
  ((ranks == 4)) && layout=(--set parallel.tp=2 --set parallel.pp=2)
  ((ranks == 2)) && layout=(--set parallel.tp=2)
  env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS "$@" ${launch[@]+"${launch[@]}"} "$trident" \
    train "${common[@]}" ${layout[@]+"${layout[@]}"} --set run.out_dir="$work/$name" \
    >"$work/$name.log" 2>&1 || { tail -n 20 "$work/$name.log"; fail "$name did not run"; }
}
# attrs NAME THREADS CHOSEN_BY: timings.h5 records THREADS per rank, chosen by CHOSEN_BY.
attrs() {
  /usr/bin/python3 - "$work/$1/tiny/timings.h5" "$2" "$3" <<'PY' || fail "$1: timings.h5 attributes"
import sys, h5py
f = h5py.File(sys.argv[1])
got = (int(f.attrs["threads_per_rank"]), f.attrs["threads_chosen_by"])
assert got == (int(sys.argv[2]), sys.argv[3]), (got, sys.argv[2:])
PY
}

want=$(share "$cpus" 4)
run unset4 4
grep -q "threads per rank: $want (OMP_NUM_THREADS unset: $cpus CPUs\? / 4 ranks on this node)" \
  "$work/unset4.log" || { grep "threads per rank" "$work/unset4.log"; fail "4 ranks: banner"; }
grep -q "threads per rank: OpenMP $want (Kokkos), BLAS $want" "$work/unset4.log" ||
  { grep "threads per rank" "$work/unset4.log"; fail "4 ranks: Kokkos and BLAS threads"; }
attrs unset4 "$want" "share of node"
echo "4 ranks, OMP_NUM_THREADS unset, $cpus CPUs: $want thread(s) per rank"

run unset1 0
grep -q "threads per rank: $cpus (OMP_NUM_THREADS unset: $cpus CPUs\? / 1 rank on this node)" \
  "$work/unset1.log" || { grep "threads per rank" "$work/unset1.log"; fail "1 rank: banner"; }
attrs unset1 "$cpus" "share of node"
echo "1 rank without mpirun: $cpus threads"

run set2 2 OMP_NUM_THREADS=$cpus
grep -q "threads per rank: $cpus (OMP_NUM_THREADS)" "$work/set2.log" || fail "OMP_NUM_THREADS: banner"
grep -q "warning: 2 rank(s) x $cpus threads on this node exceed the $cpus CPUs" "$work/set2.log" ||
  { grep "threads" "$work/set2.log"; fail "2 ranks x $cpus threads: no oversubscription warning"; }
attrs set2 "$cpus" OMP_NUM_THREADS
run fits 2 OMP_NUM_THREADS=1
grep -q "exceed the" "$work/fits.log" && fail "2 ranks x 1 thread: warned although it fits"
echo "OMP_NUM_THREADS obeyed; 2 ranks x $cpus threads warned, 2 x 1 not"
echo "threads default: ok"
