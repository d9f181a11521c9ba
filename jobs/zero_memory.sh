#!/usr/bin/env bash
# ZeRO memory: stages 0-3 at growing dp, measured per-rank memory against the memory model, then analysis/memory.py.
#SBATCH --job-name=trident-zero
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --output=slurm-%x-%j.out
USAGE="usage: sbatch [--nodes=N --ntasks-per-node=R] jobs/zero_memory.sh

Trains CONFIG for STEPS steps at ZeRO stages ZERO_STAGES for every dp of the rank ladder (as for
weak_scaling.sh, with TP x PP = 1), BATCH_PER_REPLICA sequences per replica so activations stay
the same and the model states show what each stage shards. dp = 1 runs stage 0 only (there is
nothing to shard). Ends with analysis/memory.py: measured peak memory per category next to
trident's memory model, and the model-state reduction per stage.

experiment environment variables:
  ZERO_STAGES=\"0 1 2 3\"      stages to run at every dp
  BATCH_PER_REPLICA=4        sequences per replica per step
  RANK_COUNTS=\"1 2 4\"        dp values to run instead of the default ladder
"
common=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/jobs/lib/common.sh
[[ -f $common ]] ||
  { echo "zero_memory: no $common; submit from a trident checkout" >&2 && exit 2; }
source "$common"
job_init zero_memory "$USAGE
$JOB_COMMON_USAGE" "$@"
set -uo pipefail

ZERO_STAGES=${ZERO_STAGES:-0 1 2 3}
BATCH_PER_REPLICA=${BATCH_PER_REPLICA:-4}
job_require_counts ZERO_STAGES 0 3
job_require_count BATCH_PER_REPLICA 1
counts=$(job_rank_counts 1) || exit 2
job_write_sweep "kind=zero" "zero_stages=$ZERO_STAGES" "batch_per_replica=$BATCH_PER_REPLICA" \
  "rank_counts=$counts"
for dp in $counts; do
  nodes=$(((dp + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
  for stage in $ZERO_STAGES; do
    ((dp == 1 && stage > 0)) && continue
    job_run "n${nodes}_dp${dp}_zero${stage}" "$dp" "$dp" 1 1 "$stage" $((BATCH_PER_REPLICA * dp))
  done
done
job_finish memory.py
