#!/usr/bin/env bash
# Layout sweep: every valid dp x tp x pp (and pipeline schedule) on a fixed number of ranks, then analysis/breakdown.py and bubble.py.
#SBATCH --job-name=trident-layouts
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --output=slurm-%x-%j.out
USAGE="usage: sbatch [--nodes=N --ntasks-per-node=R] jobs/layout_sweep.sh

Trains CONFIG for STEPS steps with one global batch (GLOBAL_BATCH sequences) on RANKS ranks in
every layout dp x tp x pp = RANKS that trident accepts for the model (tp divides the heads and
stays inside a node: tp <= RANKS_PER_NODE; pp divides the layers; dp divides the batch), once per
schedule in SCHEDULES when pp > 1. Layouts trident refuses are listed with its reason and
skipped. Ends with analysis/breakdown.py (phase times per layout) and analysis/bubble.py
(measured vs theoretical pipeline bubble).

experiment environment variables:
  RANKS                      ranks of every layout (default: all of the allocation)
  LAYOUTS=\"4x1x1 2x2x1\"      dp x tp x pp layouts to run instead of all of them
  GLOBAL_BATCH=16            sequences per step
  SCHEDULES=\"1f1b\"           pipeline schedules for pp > 1 (gpipe 1f1b interleaved)
  VIRTUAL_STAGES=2           model chunks per rank for the interleaved schedule
  ZERO_STAGE=0               ZeRO stage of every layout
"
common=${TRIDENT_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/jobs/lib/common.sh
[[ -f $common ]] ||
  { echo "layout_sweep: no $common; submit from a trident checkout" >&2 && exit 2; }
source "$common"
job_init layout_sweep "$USAGE
$JOB_COMMON_USAGE" "$@"
set -uo pipefail

RANKS=${RANKS:-$((JOB_NODES * RANKS_PER_NODE))}
GLOBAL_BATCH=${GLOBAL_BATCH:-16}
SCHEDULES=${SCHEDULES:-1f1b}
VIRTUAL_STAGES=${VIRTUAL_STAGES:-2}
ZERO_STAGE=${ZERO_STAGE:-0}
job_require_count RANKS 1
job_require_count GLOBAL_BATCH 1
job_require_count VIRTUAL_STAGES 1
job_require_count ZERO_STAGE 0 3
layouts=()
if [[ -n ${LAYOUTS-} ]]; then
  read -r -a layouts <<<"$LAYOUTS"
else
  for ((tp = 1; tp <= RANKS && tp <= RANKS_PER_NODE; tp++)); do
    ((RANKS % tp == 0)) || continue
    for ((pp = 1; pp <= RANKS / tp; pp++)); do
      ((RANKS % (tp * pp) == 0)) && layouts+=("$((RANKS / (tp * pp)))x${tp}x${pp}")
    done
  done
fi
job_write_sweep "kind=layouts" "ranks=$RANKS" "global_batch=$GLOBAL_BATCH" \
  "schedules=$SCHEDULES" "layouts=${layouts[*]}"
for layout in "${layouts[@]}"; do
  IFS=x read -r dp tp pp <<<"$layout"
  if [[ -z $pp || $((dp * tp * pp)) -ne $RANKS ]]; then
    job_log "  skipping '$layout': want DPxTPxPP with dp x tp x pp = RANKS = $RANKS"
    continue
  fi
  schedules=1f1b
  ((pp > 1)) && schedules=$SCHEDULES
  for schedule in $schedules; do
    virtual=1
    [[ $schedule == interleaved ]] && virtual=$VIRTUAL_STAGES
    sets=(--set "parallel.dp=$dp" --set "parallel.tp=$tp" --set "parallel.pp=$pp"
      --set "parallel.schedule=$schedule" --set "parallel.virtual_stages=$virtual"
      --set "train.batch_size=$GLOBAL_BATCH" --set "zero.stage=$ZERO_STAGE")
    name=dp${dp}_tp${tp}_pp${pp}
    ((pp > 1)) && name+=_$schedule
    # trident itself decides what is valid for this model and batch, and says why not.
    if ! why=$(job_resolve "${sets[@]}" --ranks "$RANKS" 2>&1 >/dev/null); then
      job_log "  skipping $name: ${why#trident: error: }"
      continue
    fi
    job_run "$name" "$RANKS" "$dp" "$tp" "$pp" "$ZERO_STAGE" "$GLOBAL_BATCH" \
      --set "parallel.schedule=$schedule" --set "parallel.virtual_stages=$virtual"
  done
done
job_finish "breakdown.py --warmup $WARMUP" "bubble.py --warmup $WARMUP"
