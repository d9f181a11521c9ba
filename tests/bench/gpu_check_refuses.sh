#!/usr/bin/env bash
# bench/gpu_check.sh on a machine without a GPU: it refuses at once (exit 2, saying why) and writes
# nothing (no output directory). Where a GPU is, there is nothing to refuse: skipped (77).
# usage: tests/bench/gpu_check_refuses.sh REPO WORK_DIR
set -uo pipefail
repo=${1:?usage: gpu_check_refuses.sh REPO WORK_DIR}
work=${2:?}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIP: this machine has a GPU, so the check would run instead of refusing"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
bash "$repo/bench/gpu_check.sh" "$work/gpu_check_out" >"$work/out.txt" 2>&1
rc=$?
cat "$work/out.txt"
[[ $rc -eq 2 ]] || { echo "FAIL: exit $rc, not 2" && exit 1; }
grep -q "error: no NVIDIA GPU here" "$work/out.txt" || { echo "FAIL: no reason given" && exit 1; }
[[ ! -e $work/gpu_check_out ]] || { echo "FAIL: results written without a GPU" && exit 1; }
echo OK
