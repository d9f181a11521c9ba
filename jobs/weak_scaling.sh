#!/usr/bin/env bash
# Weak scaling: the same work per rank at 1, 2, 4, ... nodes (global batch grows with dp), then analysis/scaling.py.
#SBATCH --job-name=trident-weak
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --output=slurm-%x-%j.out
USAGE="usage: sbatch [--nodes=N --ntasks-per-node=R] jobs/weak_scaling.sh

Trains CONFIG for STEPS steps at every rank count of the study, keeping tensor (TP) and pipeline
(PP) parallelism fixed and growing data parallelism: dp = ranks / (TP x PP) and the global batch is
BATCH_PER_REPLICA x dp sequences, so each model replica does the same work at every size. Rank
counts: 1, 2, 4, ... nodes and all of them (x RANKS_PER_NODE ranks); inside one node, TP x PP,
2 TP x PP, ... up to RANKS_PER_NODE. Ends with analysis/scaling.py (weak-scaling efficiency:
throughput per rank at N over that at the smallest count) and analysis/breakdown.py.

experiment environment variables:
  TP=1, PP=1                 model-parallel degrees, the same at every size
  BATCH_PER_REPLICA=8        sequences per model replica per step
  MICRO_BATCH                sequences per micro-batch (default: trident's, batch / dp / pp)
  SCHEDULE=1f1b              pipeline schedule when PP > 1
  ZERO_STAGE=0               ZeRO stage at every size
  RANK_COUNTS=\"1 2 4\"        the rank counts to run instead of the default ladder
  CONFIGS=\"a.toml b.toml\"    Megatron-LM style instead: one run per config, the model growing
                             with its own [parallel] tp and pp, DP replicas of each (DP=1), batch
                             BATCH_PER_REPLICA x DP; efficiency is model FLOP/s per rank
                             (inputs/paper/megatron2019/scaled/)
"
common=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/jobs/lib/common.sh
[[ -f $common ]] ||
  { echo "weak_scaling: no $common; submit from a trident checkout" >&2 && exit 2; }
source "$common"
job_init weak_scaling "$USAGE
$JOB_COMMON_USAGE" "$@"
set -uo pipefail

BATCH_PER_REPLICA=${BATCH_PER_REPLICA:-8}
job_require_count BATCH_PER_REPLICA 1
job_model_parallel_params
if [[ -n ${CONFIGS-} ]]; then
  DP=${DP:-1}
  job_require_count DP 1
  job_write_sweep "kind=weak" "configs=$CONFIGS" "dp=$DP" "batch_per_replica=$BATCH_PER_REPLICA"
  for CONFIG in $CONFIGS; do
    [[ -f $CONFIG ]] || job_die "CONFIGS: $CONFIG does not exist"
    batch=$((BATCH_PER_REPLICA * DP))
    if ! resolved=$(job_resolve --set "parallel.dp=$DP" --set "train.batch_size=$batch" 2>&1); then
      job_log "  skipping $CONFIG: ${resolved#trident: error: }"
      continue
    fi
    tp=$(toml_value parallel tp <<<"$resolved")
    pp=$(toml_value parallel pp <<<"$resolved")
    ranks=$((DP * tp * pp))
    nodes=$(((ranks + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
    job_run "n${nodes}_dp${DP}_tp${tp}_pp${pp}_$(basename "$CONFIG" .toml)" "$ranks" "$DP" "$tp" \
      "$pp" "$ZERO_STAGE" "$batch" ${micro[@]+"${micro[@]}"}
  done
else
  counts=$(job_rank_counts $((TP * PP))) || exit 2
  job_write_sweep "kind=weak" "tp=$TP" "pp=$PP" "batch_per_replica=$BATCH_PER_REPLICA" \
    "rank_counts=$counts"
  for ranks in $counts; do
    if ((ranks % (TP * PP) != 0)); then
      job_log "  skipping $ranks ranks: not a multiple of TP x PP = $((TP * PP))"
      continue
    fi
    dp=$((ranks / (TP * PP)))
    nodes=$(((ranks + RANKS_PER_NODE - 1) / RANKS_PER_NODE))
    job_run "n${nodes}_dp${dp}_tp${TP}_pp${PP}" "$ranks" "$dp" "$TP" "$PP" "$ZERO_STAGE" \
      $((BATCH_PER_REPLICA * dp)) --set "parallel.schedule=$SCHEDULE" ${micro[@]+"${micro[@]}"}
  done
fi
job_finish "scaling.py --warmup $WARMUP" "breakdown.py --warmup $WARMUP"
