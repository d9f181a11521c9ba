#!/usr/bin/env bash
# Fixture for the analysis tests: small real sweeps in jobs/' directory format, made by trident.
#
# usage: make_sweeps.sh TRIDENT SRC_DIR OUT_DIR
# Writes OUT_DIR/runs/<experiment>/<jobid>/ with sweep.json and one run directory per layout
# (status, run.json, trident.log, timings.h5; checkpoints deleted), as the job scripts do:
#   weak_scaling/1001      dp 1, 2, 4 at 4 sequences per rank
#   strong_scaling/1002    dp 1, 2, 4 at a global batch of 8
#   layout_sweep/1003      dp 2, tp 2, and pp 2 with gpipe (m 2), 1f1b (m 2, 4), interleaved
#                          (v 2, m 2), zb_h1 (m 2) and dp 2 x pp 2 1f1b
#   zero_memory/1004       ZeRO 0-3 at dp 2 and dp 4
#   convergence/1005       dp 2: sync, async, local_sgd (2 local steps), bf16 sync; 24 steps
#   weak_scaling/1006      dp 2 with rank 1 killed at step 5 (status failed, 4 of 12 steps)
#   moe_balance/1007       the tiny MoE (inputs/moe-tiny.toml): dp 2 with ep 2, and dp 2 with
#                          capacity factor 1 (drops); 12 steps
#   stragglers/1008        dp 4 of a wider tiny model, unperturbed and with rank 2 slowed twice
#                          (--inject-fault slow:5:2:2); 20 steps
# Tiny model, 12 steps (checkpoints at 5, 10, 12). About 30 s on 2 cores.
set -euo pipefail
trident=$1 src=$2 out=$3
rm -rf "$out" && mkdir -p "$out/runs" && cd "$src"  # the config's data paths are relative
start=$SECONDS
sweep_dir= experiment= job= steps= config=inputs/tiny.toml

sweep() {  # experiment jobid steps
  experiment=$1 job=$2 steps=$3
  sweep_dir=$out/runs/$experiment/$job
  mkdir -p "$sweep_dir"
  printf '{"experiment": "%s", "job_id": "%s", "config": "%s", "steps": %d}\n' \
    "$experiment" "$job" "$config" "$steps" >"$sweep_dir/sweep.json"
}

# run NAME EXPECT RANKS DP TP PP ZERO BATCH [--set ...]: EXPECT is ok or fail (a fault injected).
run() {
  local name=$1 expect=$2 ranks=$3 dp=$4 tp=$5 pp=$6 zero=$7 batch=$8
  shift 8
  local dir=$sweep_dir/$name t0=$SECONDS rc=0 status
  mkdir -p "$dir"
  echo running >"$dir/status"
  mpirun -np "$ranks" --oversubscribe "$trident" train --config "$config" \
    --set run.out_dir="$sweep_dir" --set run.name="$name" --set run.steps="$steps" \
    --set parallel.dp="$dp" --set parallel.tp="$tp" --set parallel.pp="$pp" \
    --set zero.stage="$zero" --set train.batch_size="$batch" "$@" >"$dir/trident.log" 2>&1 || rc=$?
  if [[ $rc -eq 0 ]]; then status=completed; else status=failed; fi
  echo "$status" >"$dir/status"
  printf '{"experiment": "%s", "job_id": "%s", "layout": "%s", "nodes": 1, "ranks": %d, ' \
    "$experiment" "$job" "$name" "$ranks" >"$dir/run.json"
  printf '"dp": %d, "tp": %d, "pp": %d, "zero_stage": %d, "global_batch": %d, ' \
    "$dp" "$tp" "$pp" "$zero" "$batch" >>"$dir/run.json"
  printf '"exit_code": %d, "seconds": %d}\n' "$rc" "$((SECONDS - t0))" >>"$dir/run.json"
  rm -rf "$dir/checkpoints"
  if [[ ($expect == ok && $rc -ne 0) || ($expect == fail && $rc -eq 0) ]]; then
    echo "fixture: $experiment/$job/$name exited $rc, expected $expect; its log:" >&2
    tail -20 "$dir/trident.log" >&2
    exit 1
  fi
  echo "  $experiment/$job/$name: $status ($((SECONDS - t0)) s)"
}

sweep weak_scaling 1001 12
for n in 1 2 4; do
  run dp${n}_tp1_pp1 ok $n $n 1 1 0 $((4 * n))
done

sweep strong_scaling 1002 12
for n in 1 2 4; do
  run dp${n}_tp1_pp1 ok $n $n 1 1 0 8
done

sweep layout_sweep 1003 12
run dp2_tp1_pp1 ok 2 2 1 1 0 8
run dp1_tp2_pp1 ok 2 1 2 1 0 8
run dp1_tp1_pp2_gpipe_m2 ok 2 1 1 2 0 8 --set parallel.schedule=gpipe --set train.micro_batch_size=4
run dp1_tp1_pp2_1f1b_m2 ok 2 1 1 2 0 8 --set parallel.schedule=1f1b --set train.micro_batch_size=4
run dp1_tp1_pp2_1f1b_m4 ok 2 1 1 2 0 8 --set parallel.schedule=1f1b --set train.micro_batch_size=2
run dp1_tp1_pp2_interleaved_m2 ok 2 1 1 2 0 8 --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set train.micro_batch_size=4
run dp1_tp1_pp2_zb_h1_m2 ok 2 1 1 2 0 8 --set parallel.schedule=zb_h1 --set train.micro_batch_size=4
run dp2_tp1_pp2_1f1b_m2 ok 4 2 1 2 0 8 --set parallel.schedule=1f1b --set train.micro_batch_size=2

sweep zero_memory 1004 12
for dp in 2 4; do
  for zero in 0 1 2 3; do
    run dp${dp}_tp1_pp1_zero$zero ok $dp $dp 1 1 $zero 8
  done
done

sweep convergence 1005 24
conv=(--set run.eval_every=6 --set run.checkpoint_every=0)
run dp2_sync ok 2 2 1 1 0 8 "${conv[@]}"
run dp2_async ok 2 2 1 1 0 8 "${conv[@]}" --set dp.sync=async
run dp2_local_sgd ok 2 2 1 1 0 8 "${conv[@]}" --set dp.sync=local_sgd --set dp.local_steps=2
run dp2_sync_bf16 ok 2 2 1 1 0 8 "${conv[@]}" --set precision.compute=bf16

sweep weak_scaling 1006 12
run dp2_tp1_pp1 fail 2 2 1 1 0 8 --inject-fault kill:5:1

config=inputs/moe-tiny.toml
sweep moe_balance 1007 12
run dp2_ep2 ok 2 2 1 1 0 8 --set parallel.ep=2
run dp2_capacity1 ok 2 2 1 1 0 8 --set model.capacity_factor=1.0

# Straggler scores need 8 steps before they judge and some 30 ms of compute a step to rise above
# scheduling jitter: a wider model, 20 steps, one rank slowed twice from step 5.
sweep stragglers 1008 20
wide=(--set model.n_embd=128 --set train.seq_len=32 --set run.checkpoint_every=-1)
run dp4_steady ok 4 4 1 1 0 16 "${wide[@]}"
run dp4_rank2_slow ok 4 4 1 1 0 16 "${wide[@]}" --inject-fault slow:5:2:2

echo "fixture: $out/runs in $((SECONDS - start)) s"
