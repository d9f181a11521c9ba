#!/usr/bin/env bash
# Measures the pipeline bubble of gpipe, 1f1b, interleaved and zb_h1 vs theory and the schedule model.
#
# usage: bench/pipeline_bubble.sh BUILD_DIR
#   env: PP_LIST="2 4"  SCHEDULES="gpipe 1f1b interleaved zb_h1"  STEPS=5  LAYERS_PER_STAGE=2
#        VIRTUAL=2  MICRO=1  PYTHON=/usr/bin/python3
# Trains the gpt2-124m layer shape (C=768, NH=12, T=64; bench/pipeline_bubble.toml) with
# L = LAYERS_PER_STAGE x pp layers and a 256-token (byte) vocabulary, under
# `mpirun -np pp --oversubscribe` with dp = tp = 1, for m = pp, 2 pp, 4 pp micro-batches of MICRO
# sequences (batch_size = m x MICRO), then prints analysis/bubble.py's table (timed steps: all
# after the first, the final checkpoint step left out) and writes its bubble.csv, bubble.md and
# bubble.png to BUILD_DIR/pipeline_bubble/. Every run's output goes to
# BUILD_DIR/pipeline_bubble.log; timings stay in BUILD_DIR/pipeline_bubble/<run>/ (checkpoints
# are deleted after each run: the final one is ~0.35 GB per run at pp=4).
set -euo pipefail

build=${1:?usage: bench/pipeline_bubble.sh BUILD_DIR}
build=$(cd "$build" && pwd)
pp_list=${PP_LIST:-"2 4"}
schedules=${SCHEDULES:-"gpipe 1f1b interleaved zb_h1"}
steps=${STEPS:-5}
layers_per_stage=${LAYERS_PER_STAGE:-2}
virtual=${VIRTUAL:-2}
micro=${MICRO:-1}
python=${PYTHON:-/usr/bin/python3}  # Debian's, which has python3-h5py
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
# shellcheck source=bench/require_build.sh
source "$here/require_build.sh"
require_build "$build" "$root"
if ! "$python" -c 'import h5py, numpy, pandas, matplotlib, tomllib' 2>/dev/null; then
  echo "error: $python cannot import h5py, numpy, pandas, matplotlib and tomllib" \
    "(python3-h5py, python3-pandas, python3-matplotlib, Python >= 3.11)" >&2
  exit 2
fi
if ((layers_per_stage % virtual != 0)); then
  echo "error: LAYERS_PER_STAGE=$layers_per_stage must be a multiple of VIRTUAL=$virtual" \
    "(interleaved splits each stage into VIRTUAL chunks)" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One thread per rank, BLAS's included (Debian's OpenBLAS is the OpenMP build, which follows
# OMP_NUM_THREADS): the ranks already take the cores.
cores=$(nproc)  # before OMP_NUM_THREADS=1, which nproc would report instead
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=$build/pipeline_bubble
log=$build/pipeline_bubble.log
rm -rf "$out"
mkdir -p "$out"
: >"$log"

echo "pipeline bubble: gpt2-124m layer shape (C=768 NH=12 T=64), V=256, $layers_per_stage layers" \
  "per stage, micro-batch $micro, $steps steps per run, $cores core(s)"
echo "raw output: $log"
cd "$root"  # the config's data paths are relative to the repository root
timings=()
start=$SECONDS
for pp in $pp_list; do
  for schedule in $schedules; do
    v=1
    [[ $schedule == interleaved ]] && v=$virtual
    for m in $pp $((2 * pp)) $((4 * pp)); do
      name=pp${pp}_${schedule}_m${m}
      printf '  %-24s' "$name"
      t0=$SECONDS
      echo "== $name" >>"$log"
      if ! mpirun -np "$pp" --oversubscribe "$trident" train --config bench/pipeline_bubble.toml \
        --set run.name="$name" --set run.out_dir="$out" --set run.steps="$steps" \
        --set model.n_layer=$((layers_per_stage * pp)) --set model.vocab_size=256 \
        --set parallel.pp="$pp" --set parallel.dp=1 --set parallel.tp=1 \
        --set parallel.schedule="$schedule" --set parallel.virtual_stages="$v" \
        --set train.batch_size=$((m * micro)) --set train.micro_batch_size="$micro" \
        >>"$log" 2>&1; then
        echo "failed; see $log" >&2
        exit 1
      fi
      rm -rf "${out:?}/$name/checkpoints"
      timings+=("$out/$name/timings.h5")
      echo "$((SECONDS - t0)) s  (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    done
  done
done
echo "total $((SECONDS - start)) s; load average counts every runnable process on the machine," \
  "these ranks included"
echo
"$python" "$root/analysis/bubble.py" --cores "$cores" --warmup 1 --out "$out" "${timings[@]}"
