#!/usr/bin/env bash
# `trident train --profile-step K` times every kernel launch, GEMM and copy of step K by label:
# - profiling changes no result: the profiled run's losses are the unprofiled run's, bit for bit;
# - the table (<run dir>/profile_step_K.tsv) holds every GEMM of the step: 3 (forward, input and
#   weight gradient) x (4 L + 1) per micro-batch for the tiny GPT-2 (4 linear layers a block and
#   the tied head), and their FLOPs sum to 6 x tokens x (12 L C^2 + V C), the matrices' share of
#   trident's 6N (attention's products run inside its kernel on CPUs), in fp32 and bf16;
# - two steps launch the same labels the same number of times, and at dp 2 rank 0's table holds
#   half the tokens' FLOPs and its dp collectives ("mpi iallreduce_sum dp") with their bytes;
# - the launch roofline predicts every label's calls of a one-rank step (plan/roofline.hpp): the
#   table's predicted_calls equal the calls row by row for GPT-2 and Llama, fp32, bf16 and fp16,
#   with and without recomputation; a layout it does not predict (dp 2) says so in the table;
# - a step past run.steps is refused before any work (exit 2).
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=6 --set run.eval_every=0
        --set run.checkpoint_every=0 --set train.micro_batch_size=4)
run() {  # run NAME RANKS [args ...]
  local name=$1 ranks=$2
  shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { echo "FAIL $name: trident exited non-zero"; tail -n 20 "$work/$name.log"; exit 1; }
}
predicted() {  # predicted TABLE: every launched label's calls are the predicted ones
  /usr/bin/python3 - "$1" <<'EOF'
import csv, sys
path = sys.argv[1]
with open(path) as f:
    lines = f.readlines()
if not any(line.startswith("# predicted: the launch roofline") for line in lines):
    sys.exit(f"FAIL {path}: no prediction: {[l for l in lines if l.startswith('#')]}")
rows = list(csv.DictReader((l for l in lines if not l.startswith("#")), delimiter="\t"))
bad = [(r["label"], r["calls"], r["predicted_calls"]) for r in rows
       if r["kind"] != "copy" and r["calls"] != r["predicted_calls"]]
if bad:
    sys.exit(f"FAIL {path}: calls other than predicted (label, calls, predicted): {bad}")
launches = sum(int(r["calls"]) for r in rows if r["kind"] != "copy")
print(f"ok   {path.split('/')[-3]}: {launches} launches of {len(rows)} labels, each as predicted")
EOF
}
table() {  # table NAME STEP RANKS PRECISION: checks the table of one run
  /usr/bin/python3 - "$work/$1/tiny/profile_step_$2.tsv" "$3" "$4" <<'EOF'
import csv, sys
path, ranks, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3]
L, C, V, T, B, micro = 4, 32, 256, 16, 8, 4  # inputs/tiny.toml, micro_batch_size 4
with open(path) as f:
    rows = list(csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t"))
gemms = [r for r in rows if r["kind"] == "library" and r["label"].startswith("gemm")]
want_prefix = "gemm16" if precision == "bf16" else "gemm "
bad = [r["label"] for r in gemms if not r["label"].startswith(want_prefix)]
if bad:
    sys.exit(f"FAIL {path}: {precision} GEMMs labelled {bad[:3]}")
micro_batches = B // ranks // micro
calls = sum(int(r["calls"]) for r in gemms)
want_calls = 3 * (4 * L + 1) * micro_batches
if calls != want_calls:
    sys.exit(f"FAIL {path}: {calls} GEMM calls, expected {want_calls}")
gflop = sum(float(r["gflop"]) for r in gemms)
want = 6 * (B // ranks) * T * (12 * L * C * C + V * C) / 1e9
if abs(gflop - want) > 1e-6 * want:
    sys.exit(f"FAIL {path}: GEMM GFLOP {gflop:.6f}, expected {want:.6f}")
kernels = {r["label"]: int(r["calls"]) for r in rows if r["kind"] == "kernel"}
for name in ["attention_forward", "attention_backward", "layernorm_forward", "adamw_update"]:
    if not any(label.startswith(name) for label in kernels):  # adamw_update_split under bf16
        sys.exit(f"FAIL {path}: no {name} kernel in {sorted(kernels)}")
if any(float(r["total_ms"]) < 0 for r in rows):
    sys.exit(f"FAIL {path}: a negative time")
# Collectives: "<backend> <operation> <axis>" with the bytes they move; dp = 2 reduces gradients.
collectives = [r for r in rows if r["kind"] == "library" and not r["label"].startswith("gemm")]
if ranks > 1 and not any(r["label"].startswith("mpi ") and r["label"].endswith(" dp")
                         and r["gbs"] for r in collectives):
    sys.exit(f"FAIL {path}: no dp collective with its bytes in {[r['label'] for r in collectives]}")
print(f"ok   {path.split('/')[-3]}: {calls} GEMM calls, {gflop:.6f} GFLOP, {len(kernels)} kernel "
      f"labels, collectives {sorted(r['label'] for r in collectives)}")
EOF
}
run plain 1
run profiled 1 --profile-step 3
$check compare "$work/plain/tiny/timings.h5" "$work/profiled/tiny/timings.h5" --min-steps 6 --exact
grep -E '^PROFILE step=3 launches=([0-9]+) labels=[0-9]+ launch_ms=[0-9.]+ gemm_gflop=[0-9.]+ step_ms=[0-9.]+ profiled_step_ms=[0-9.]+ busy_percent=[0-9.]+ predicted_launches=\1 mismatched_labels=0$' \
  "$work/profiled.log" || { echo "FAIL: no PROFILE line as predicted"; tail -n 30 "$work/profiled.log"; exit 1; }
table profiled 3 1 fp32
predicted "$work/profiled/tiny/profile_step_3.tsv"
run profiled_5 1 --profile-step 5
diff <(grep -v '^#' "$work/profiled/tiny/profile_step_3.tsv" | cut -f1-3 | sort) \
  <(grep -v '^#' "$work/profiled_5/tiny/profile_step_5.tsv" | cut -f1-3 | sort) ||
  { echo "FAIL: steps 3 and 5 launch different kernels"; exit 1; }
echo "ok   steps 3 and 5 launch the same labels the same number of times"
run bf16 1 --profile-step 2 --set precision.compute=bf16
table bf16 2 1 bf16
predicted "$work/bf16/tiny/profile_step_2.tsv"
run fp16 1 --profile-step 2 --set precision.compute=fp16 --set recompute.policy=full
predicted "$work/fp16/tiny/profile_step_2.tsv"
mpirun -np 1 "$trident" train --config inputs/llama-tiny.toml "${common[@]:2}" \
  --set run.out_dir="$work/llama" --profile-step 2 --set precision.compute=bf16 \
  --set recompute.policy=full --set recompute.layers=2 --set train.micro_batch_size=2 \
  > "$work/llama.log" 2>&1 || { echo "FAIL llama: trident exited non-zero"; tail -n 20 "$work/llama.log"; exit 1; }
predicted "$work/llama/llama-tiny/profile_step_2.tsv"
run dp2 2 --profile-step 2 --set parallel.dp=2
table dp2 2 2 fp32
grep -q '^# no prediction: the launch roofline predicts one rank' "$work/dp2/tiny/profile_step_2.tsv" ||
  { echo "FAIL: the dp 2 table does not say why it has no prediction"; exit 1; }
echo "ok   dp2: the table says the roofline predicts one rank's step"
set +e
"$trident" train "${common[@]}" --set run.out_dir="$work/refused" --profile-step 7 \
  > "$work/refused.log" 2>&1
status=$?
set -e
[[ $status == 2 ]] && grep -q "profile-step 7 is past" "$work/refused.log" && [[ ! -e $work/refused ]] ||
  { echo "FAIL: --profile-step 7 of 6 steps gave exit $status:"; cat "$work/refused.log"; exit 1; }
echo "ok   --profile-step past run.steps refused (exit 2), nothing written"
