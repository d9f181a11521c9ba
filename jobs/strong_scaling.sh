#!/usr/bin/env bash
# Strong scaling: one fixed global batch at growing rank counts (dp grows), then analysis/scaling.py.
#SBATCH --job-name=trident-strong
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --output=slurm-%x-%j.out
USAGE="usage: sbatch [--nodes=N --ntasks-per-node=R] jobs/strong_scaling.sh

Trains CONFIG for STEPS steps with the same global batch (GLOBAL_BATCH sequences) at every rank
count of the study, keeping TP and PP fixed: dp = ranks / (TP x PP), so each replica's share
shrinks as ranks grow. Rank counts as for weak_scaling.sh; a count whose dp does not divide
GLOBAL_BATCH is skipped with a message. Ends with analysis/scaling.py (strong-scaling efficiency
T_N0 N0 / (T_N N), N0 the smallest count) and analysis/breakdown.py.

experiment environment variables:
  GLOBAL_BATCH=32            sequences per step at every size
  TP=1, PP=1, SCHEDULE=1f1b, ZERO_STAGE=0, MICRO_BATCH, RANK_COUNTS   as for weak_scaling.sh
"
common=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/jobs/lib/common.sh
[[ -f $common ]] ||
  { echo "strong_scaling: no $common; submit from a trident checkout" >&2 && exit 2; }
source "$common"
job_init strong_scaling "$USAGE
$JOB_COMMON_USAGE" "$@"
set -uo pipefail

GLOBAL_BATCH=${GLOBAL_BATCH:-32}
job_require_count GLOBAL_BATCH 1
job_model_parallel_params
counts=$(job_rank_counts $((TP * PP))) || exit 2
job_write_sweep "kind=strong" "tp=$TP" "pp=$PP" "global_batch=$GLOBAL_BATCH" "rank_counts=$counts"
for ranks in $counts; do
  dp=$((ranks / (TP * PP)))
  if ((ranks % (TP * PP) != 0 || GLOBAL_BATCH % dp != 0)); then
    job_log "  skipping $ranks ranks: needs a multiple of TP x PP = $((TP * PP)) whose dp divides" \
      "GLOBAL_BATCH = $GLOBAL_BATCH"
    continue
  fi
  nodes=$(((ranks + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
  job_run "n${nodes}_dp${dp}_tp${TP}_pp${PP}" "$ranks" "$dp" "$TP" "$PP" "$ZERO_STAGE" \
    "$GLOBAL_BATCH" --set "parallel.schedule=$SCHEDULE" ${micro[@]+"${micro[@]}"}
done
job_finish "scaling.py --warmup $WARMUP" "breakdown.py --warmup $WARMUP"
