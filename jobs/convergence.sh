#!/usr/bin/env bash
# Convergence: the same model, data and ranks under several settings (dp sync modes, precisions, ...), then analysis/convergence.py.
#SBATCH --job-name=trident-convergence
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=02:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --output=slurm-%x-%j.out
USAGE="usage: sbatch [--nodes=N --ntasks-per-node=R] jobs/convergence.sh

Trains CONFIG for STEPS steps on RANKS ranks (dp = RANKS / (TP x PP), global batch GLOBAL_BATCH)
once per variant in VARIANTS, each a set of trident overrides, and ends with
analysis/convergence.py: training and validation loss curves side by side, labelled by what
differs, and the final losses. The default compares synchronous, asynchronous and local-SGD data
parallelism and bf16 against fp32.

experiment environment variables:
  VARIANTS=\"dp.sync=sync; dp.sync=async; dp.sync=local_sgd,dp.local_steps=4;
            precision.compute=bf16\"   variants separated by ';', overrides in one by ','
  RANKS                      ranks of every run (default: all of the allocation)
  GLOBAL_BATCH=16            sequences per step
  TP=1, PP=1, SCHEDULE=1f1b, ZERO_STAGE=0, MICRO_BATCH   the layout of every run
REPEATS is not taken: a variant's loss curve, not its step time, is the result, and the same
seed and data give the same curve again.
"
common=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/jobs/lib/common.sh
[[ -f $common ]] ||
  { echo "convergence: no $common; submit from a trident checkout" >&2 && exit 2; }
source "$common"
JOB_NO_REPEATS="convergence.sh runs each variant once (the same seed and data give the same loss \
curve again); unset REPEATS" job_init convergence "$USAGE
$JOB_COMMON_USAGE" "$@"
set -uo pipefail

VARIANTS=${VARIANTS:-"dp.sync=sync; dp.sync=async; dp.sync=local_sgd,dp.local_steps=4; precision.compute=bf16"}
RANKS=${RANKS:-$JOB_MAX_RANKS}
GLOBAL_BATCH=${GLOBAL_BATCH:-16}
job_require_count RANKS 1
job_require_count GLOBAL_BATCH 1
job_model_parallel_params
((RANKS % (TP * PP) == 0)) || job_die "RANKS=$RANKS is not a multiple of TP x PP = $((TP * PP))"
dp=$((RANKS / (TP * PP)))
job_write_sweep "kind=convergence" "variants=$VARIANTS" "ranks=$RANKS" "global_batch=$GLOBAL_BATCH"
IFS=';' read -r -a variants <<<"$VARIANTS"
for variant in "${variants[@]}"; do
  variant=$(echo $variant)  # trimmed
  [[ -n $variant ]] || continue
  IFS=',' read -r -a overrides <<<"$variant"
  sets=()
  for kv in "${overrides[@]}"; do sets+=(--set "$(echo $kv)"); done
  # The directory name says the variant: dp.sync=local_sgd,dp.local_steps=4 -> local_sgd_4.
  name=$(echo "$variant" | sed -E 's/[^,=]*=//g; s/[^A-Za-z0-9_.-]+/_/g')
  job_run "$name" "$RANKS" "$dp" "$TP" "$PP" "$ZERO_STAGE" "$GLOBAL_BATCH" \
    --set "parallel.schedule=$SCHEDULE" ${micro[@]+"${micro[@]}"} "${sets[@]}"
done
job_finish convergence.py
