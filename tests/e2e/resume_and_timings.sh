#!/usr/bin/env bash
# Resume bit-identity and the timings schema: train 10 steps, resume from step 5, compare.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=10 --set run.checkpoint_every=5)
"$trident" train "${common[@]}" --set run.out_dir="$work/a" > "$work/a.log"
$check schema "$work/a/tiny/timings.h5" --steps 10
"$trident" train "${common[@]}" --set run.out_dir="$work/b" \
  --resume "$work/a/tiny/checkpoints/step_000005.h5" > "$work/b.log"
grep -q "resumed from .*step_000005.h5 at step 5" "$work/b.log"
$check compare "$work/a/tiny/timings.h5" "$work/b/tiny/timings.h5" --from-step 6 --min-steps 5 --exact
$check params-equal "$work/a/tiny/checkpoints/step_000010.h5" "$work/b/tiny/checkpoints/step_000010.h5"
grep -q "^PERFORMANCE steps=10 ranks=1 " "$work/a.log"
echo "resume and timings: ok"
