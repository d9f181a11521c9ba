#!/usr/bin/env bash
# Per-rank memory by category at dp = 1, 2, 4, 8 and each ZeRO stage, measured against the memory model, with the model-state reduction next to its ideals.
# usage: bench/zero_memory.sh BUILD_DIR [PRECISION] [LAYERS] [CONFIG]
# Runs jobs/zero_memory.sh on this machine (LAUNCHER=mpirun, one step per run: every buffer is
# allocated before the first step ends) with PRECISION compute (default bf16) and LAYERS layers
# (default 16) of CONFIG (default inputs/small.toml), then analysis/memory.py prints, per run, each
# category measured (trident's allocation ledger) and predicted, and the model states' reduction
# against ZeRO-0 at the same dp next to the ideal for trident's bytes per parameter and for the
# ZeRO paper's. Outputs stay in BUILD_DIR/zero_memory/zero_memory/<job id>/.
set -euo pipefail
build=${1:?usage: bench/zero_memory.sh BUILD_DIR [PRECISION] [LAYERS] [CONFIG]}
precision=${2:-bf16} layers=${3:-16} config=${4:-inputs/small.toml}
build=$(cd "$build" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf "$build/zero_memory"
LAUNCHER=mpirun TRIDENT="$build/src/trident" CONFIG="$config" STEPS=1 RANK_COUNTS="1 2 4 8" \
  RANKS_PER_NODE=8 BATCH_PER_REPLICA=1 RUNS_DIR="$build/zero_memory" \
  SETS="precision.compute=$precision model.n_layer=$layers run.eval_batches=1" \
  bash jobs/zero_memory.sh
