#!/usr/bin/env bash
# Invalid layouts are refused before any work: exit status 2, one message (from rank 0), no
# hang, nothing written.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
failures=0 cases=0
expect_bad() {  # description, ranks, expected message fragment, --set overrides...
  local what=$1 ranks=$2 needle=$3; shift 3
  cases=$((cases + 1))
  rm -rf "$work/out"
  local args=()
  for kv in "$@"; do args+=(--set "$kv"); done
  timeout 60 mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/tiny.toml \
    --set run.out_dir="$work/out" "${args[@]}" > "$work/stdout" 2> "$work/stderr"
  local rc=$?
  local count
  count=$(grep -c "trident: error" "$work/stderr")
  if [ $rc -ne 2 ]; then
    echo "FAIL [$what]: exit status $rc, expected 2 (124 = hung)"; cat "$work/stderr"
    failures=$((failures + 1))
  elif ! grep -qF -- "$needle" "$work/stderr"; then
    echo "FAIL [$what]: stderr lacks '$needle':"; cat "$work/stderr"; failures=$((failures + 1))
  elif [ "$count" -ne 1 ]; then
    echo "FAIL [$what]: $count error messages, expected one (rank 0's)"; failures=$((failures + 1))
  elif [ -e "$work/out" ]; then
    echo "FAIL [$what]: wrote $work/out"; failures=$((failures + 1))
  else
    echo "ok   [$what]: $(grep "trident: error" "$work/stderr")"
  fi
}
expect_bad "tp does not divide heads" 3 "parallel.tp = 3 must divide model.n_head = 4" parallel.tp=3
expect_bad "tp*pp above the world" 2 "must divide the number of MPI ranks 2" parallel.tp=2 parallel.pp=2
expect_bad "layers not divisible by pp" 3 "model.n_layer = 4 must be divisible by parallel.pp * virtual_stages = 3" parallel.pp=3
expect_bad "layers not divisible by pp*v" 2 "must be divisible by parallel.pp * virtual_stages = 6" parallel.pp=2 parallel.schedule=interleaved parallel.virtual_stages=3
expect_bad "world size mismatch" 4 "must equal the number of MPI ranks 4" parallel.dp=1 parallel.tp=2 parallel.pp=1
expect_bad "tp*pp does not divide world" 3 "must divide the number of MPI ranks 3" parallel.tp=2
expect_bad "interleaved micro-batches" 2 "parallel.schedule = 'interleaved'" parallel.pp=2 parallel.schedule=interleaved parallel.virtual_stages=2 train.micro_batch_size=8
expect_bad "interleaved needs v > 1" 2 "parallel.schedule = 'interleaved'" parallel.pp=2 parallel.schedule=interleaved
expect_bad "v > 1 without interleaving" 2 "virtual_stages = 2" parallel.pp=2 parallel.virtual_stages=2
expect_bad "seq_len not cut into 2 cp chunks" 3 "train.seq_len = 16 must be divisible by 6" parallel.cp=3
expect_bad "cp with local SGD" 2 "parallel.cp = 2 needs dp.sync = 'sync'" parallel.cp=2 dp.sync=local_sgd
expect_bad "cp does not divide the world" 3 "parallel.cp*tp*pp = 2 must divide the number of MPI ranks 3" parallel.cp=2
expect_bad "sequence not divisible by tp" 2 "train.seq_len = 15 must be divisible by it" parallel.tp=2 parallel.sequence_parallel=true train.seq_len=15
expect_bad "sequence_parallel not a boolean" 2 "parallel.sequence_parallel' must be true or false" parallel.sequence_parallel=1
expect_bad "unknown schedule" 2 "must be one of gpipe, 1f1b, interleaved" parallel.pp=2 parallel.schedule=zb
expect_bad "nccl pipeline transfers" 2 "parallel.backend_pp = 'nccl' is not supported yet" parallel.pp=2 parallel.backend_pp=nccl
expect_bad "batch not divisible by dp" 4 "train.batch_size = 6 must be divisible by parallel.dp = 4" train.batch_size=6
echo "$((cases - failures)) passed, $failures failed"
[ $failures -eq 0 ]
