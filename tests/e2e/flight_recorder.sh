#!/usr/bin/env bash
# The collective flight recorder and `trident doctor`: a rank made to hang before one operation
# (--inject-fault hang-comm) in a tensor-parallel all-reduce, a pipeline send and a data-parallel
# bucket on dp 2 x tp 2 x pp 2 (8 ranks), an expert all-to-all (dp 2 x ep 2) and a context-parallel
# ring step (cp 2): every rank's watchdog writes its record, and the doctor names the injected
# rank, the axis and the operation. A healthy run writes no record, and one asked for a record on
# SIGUSR2 mid-run names nobody.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--set run.watchdog_seconds=4 --set run.checkpoint_every=-1 --set run.steps=4
        --set run.eval_every=0)

# hang NAME RANKS CONFIG FAULT WANT_RANK WANT_AXIS WANT_OP [--set ...]
hang() {
  local name=$1 ranks=$2 config=$3 fault=$4 rank=$5 axis=$6 op=$7
  shift 7
  timeout 120 mpirun -np "$ranks" --oversubscribe "$trident" train --config "$config" \
    "${common[@]}" --set run.out_dir="$work/$name" --set run.name=run "$@" \
    --inject-fault "$fault" > "$work/$name.log" 2>&1
  local status=$?
  [ $status != 0 ] || fail "$name: the hung run exited 0"
  grep -q "flight record written" "$work/$name.log" || { tail "$work/$name.log"; fail "$name: no record written"; }
  local records
  records=$(ls "$work/$name/run/flight"/rank_*.jsonl 2>/dev/null | wc -l)
  "$trident" doctor "$work/$name/run" > "$work/$name.doctor" 2>&1 ||
    { cat "$work/$name.doctor"; fail "$name: doctor failed"; }
  local named
  named=$(grep "^the rank that hangs" "$work/$name.doctor")
  [ "$(echo "$named" | wc -l)" = 1 ] && [ -n "$named" ] ||
    { cat "$work/$name.doctor"; fail "$name: not one rank named"; }
  echo "$named" | grep -q "^the rank that hangs: rank $rank " &&
    echo "$named" | grep -q "(axis $axis, operation [a-z_]*$op" ||
    { cat "$work/$name.doctor"; fail "$name: wanted rank $rank, axis $axis, operation *$op*"; }
  echo "$name ($records records): $(echo "$named" | sed 's/ (host [^)]*)//')"
}

dp2tp2pp2=(--set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2)
hang tp_allreduce 8 inputs/tiny.toml hang-comm:2:3:tp:allreduce 3 tp allreduce "${dp2tp2pp2[@]}"
hang pp_send 8 inputs/tiny.toml hang-comm:2:1:pp:send 1 pp send "${dp2tp2pp2[@]}"
hang dp_bucket 8 inputs/tiny.toml hang-comm:2:6:dp 6 dp allreduce "${dp2tp2pp2[@]}"
hang ep_alltoall 4 inputs/moe-tiny.toml hang-comm:2:2:ep:alltoallv 2 ep alltoallv \
  --set parallel.dp=4 --set parallel.ep=2
hang cp_ring 2 inputs/llama-tiny.toml hang-comm:2:1:cp:isend 1 cp send --set parallel.cp=2

# Healthy: no record; a record on request (SIGUSR2) mid-run names nobody.
mpirun -np 8 --oversubscribe "$trident" train --config inputs/tiny.toml "${dp2tp2pp2[@]}" \
  --set run.out_dir="$work/healthy" --set run.name=run --set run.steps=6 \
  --set run.checkpoint_every=-1 > "$work/healthy.log" 2>&1 || fail "healthy run"
[ ! -e "$work/healthy/run/flight" ] || fail "a healthy run wrote flight records"
"$trident" doctor "$work/healthy/run" | grep -q "nobody is named" || fail "doctor named someone"
mpirun -np 4 --oversubscribe "$trident" train --config inputs/tiny.toml --set parallel.dp=2 \
  --set parallel.tp=2 --set run.out_dir="$work/asked" --set run.name=run --set run.steps=400 \
  --set run.log_every=1 --set run.checkpoint_every=-1 > "$work/asked.log" 2>&1 &
launcher=$!
for _ in $(seq 1 100); do grep -q "^step " "$work/asked.log" 2>/dev/null && break; sleep 0.2; done
pkill -USR2 -f "trident train .*$work/asked" || fail "no training process to signal"
wait $launcher || { tail "$work/asked.log"; fail "the run asked for a record did not finish"; }
[ "$(grep -c "wrote its flight record (SIGUSR2)" "$work/asked.log")" = 4 ] ||
  { tail "$work/asked.log"; fail "not every rank wrote its record on SIGUSR2"; }
"$trident" doctor "$work/asked/run" > "$work/asked.doctor" || fail "doctor on the asked run"
grep -q "nobody is named" "$work/asked.doctor" || { cat "$work/asked.doctor"; fail "a healthy run named someone"; }
echo "healthy: no record; 4 records on SIGUSR2 mid-run, nobody named"
echo "flight recorder: ok"
