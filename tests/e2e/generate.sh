#!/usr/bin/env bash
# `trident generate` continues a prompt from a checkpoint, deterministically for a seed; the
# --help text and `trident plan` are checked here too.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
"$trident" train --config inputs/tiny.toml --set run.steps=3 --set run.out_dir="$work" > /dev/null
ckpt="$work/tiny/checkpoints/step_000003.h5"
a=$("$trident" generate --ckpt "$ckpt" --prompt "In the beginning" --tokens 40 --seed 7)
b=$("$trident" generate --ckpt "$ckpt" --prompt "In the beginning" --tokens 40 --seed 7)
[ "$a" = "$b" ] || { echo "FAIL: same seed gave different text"; exit 1; }
case "$a" in "In the beginning"*) ;; *) echo "FAIL: output does not start with the prompt"; exit 1;; esac
n=$(printf '%s' "$a" | wc -c)
[ "$n" -ge 40 ] || { echo "FAIL: only $n bytes"; exit 1; }

"$trident" --help | grep "generate" >/dev/null || { echo "FAIL: --help does not list the subcommands"; exit 1; }
# trident's options first, Kokkos' behind --kokkos-help (Kokkos read --help as its own).
"$trident" --help | head -n 1 | grep -q "^trident: " || { echo "FAIL: --help starts with Kokkos' options"; exit 1; }
! "$trident" --help | grep -q "Kokkos command line arguments" || { echo "FAIL: --help prints Kokkos' options"; exit 1; }
"$trident" --kokkos-help 2>&1 | grep -q "Kokkos command line arguments" || { echo "FAIL: no --kokkos-help"; exit 1; }
"$trident" train --help | grep -- "--resume" >/dev/null || { echo "FAIL: train --help lacks --resume"; exit 1; }
echo "generate and --help: ok ($n bytes)"
# `trident plan` reproduces the ZeRO paper's Figure 1 (Psi = 7.5B, Nd = 64, K = 12).
"$trident" plan --params 7.5e9 --layers 32 --hidden 4096 --heads 32 --gpus 64 > "$work/plan.txt"
grep -q "baseline 120.0 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB" "$work/plan.txt" ||
  { echo "FAIL: plan's ZeRO table"; cat "$work/plan.txt"; exit 1; }
grep -q "^RECOMMEND dp=" "$work/plan.txt" || { echo "FAIL: no recommendation"; exit 1; }
echo "plan: ok"

# Edges fail early and clean. generate streams its text (a huge --tokens shows the prompt and the
# first bytes at once, in bounded memory); plan and config range-check their numbers as train
# checks a config; prepare bounds its input.
fail() { echo "FAIL: $*"; exit 1; }
rc=0
(ulimit -v 4000000 && timeout 6 "$trident" generate --ckpt "$ckpt" --prompt "In the beginning" \
  --tokens 2000000000 > "$work/stream.txt" 2> "$work/stream.err") || rc=$?
[ $rc -eq 124 ] || { cat "$work/stream.err"; fail "generate --tokens 2e9: exit status $rc, expected the timeout's 124"; }
n=$(wc -c < "$work/stream.txt")
[ "$n" -ge 200 ] || fail "generate --tokens 2e9 printed $n bytes in 6 s: not streamed"
expect_2() {  # pattern command...: exits 2 with the pattern on stderr, no crash
  local pattern=$1 rc=0
  shift
  "$@" > "$work/edge.out" 2> "$work/edge.err" || rc=$?
  [ $rc -eq 2 ] || { cat "$work/edge.err"; fail "$*: exit status $rc, expected 2"; }
  grep -q -- "$pattern" "$work/edge.err" || { cat "$work/edge.err"; fail "$*: no '$pattern'"; }
}
model=(--layers 4 --hidden 1024 --heads 16)
expect_2 "plan: --layers = 2e+09 must be between 1 and 100000" "$trident" plan --layers 2000000000 --hidden 1024 --heads 16
expect_2 "plan: --heads = 16 must divide --hidden = 1000" "$trident" plan --layers 4 --hidden 1000 --heads 16
expect_2 "plan: --mfu = 0 must be between" "$trident" plan "${model[@]}" --mfu 0
expect_2 "plan: --gpus = -3 must be between" "$trident" plan "${model[@]}" --gpus -3
expect_2 "plan: --seq = 0 must be between" "$trident" plan "${model[@]}" --seq 0
expect_2 "plan: --batch-tokens = 1e+300 must be between" "$trident" plan "${model[@]}" --batch-tokens 1e300
expect_2 "--top: Value -1 not in range" "$trident" plan "${model[@]}" --top -1
expect_2 "--ranks: Value -1 not in range" "$trident" config --config inputs/tiny.toml --ranks -1
expect_2 "must equal the number of MPI ranks 3" "$trident" config --config inputs/tiny.toml --set parallel.dp=2 --ranks 3
expect_2 "--text '/dev/zero' holds more than --max-bytes = 5000000 bytes" \
  "$trident" prepare --text /dev/zero --out-dir "$work/prep" --max-bytes 5000000
expect_2 "--max-bytes 3000000000 must be between 1024 and 2147483647" \
  "$trident" prepare --text /dev/zero --out-dir "$work/prep" --max-bytes 3000000000
(ulimit -v 6000000 && expect_2 "--text '/dev/zero' holds more than --max-bytes = 1073741824 bytes" \
  timeout 120 "$trident" prepare --text /dev/zero --out-dir "$work/prep")
[ ! -e "$work/prep/corpus_train.bin" ] || fail "prepare wrote a token file from a refused input"
# The config's memory line and the planner's reasoning state one usable figure (they said 70.0
# and 72.0 GB for the same 80 GB GPU).
"$trident" plan --config inputs/paper/megatron2019/gpt-1.2b.toml > "$work/plan_config.txt"
usable=$(grep -o 'usable_gb=[0-9.]*' "$work/plan_config.txt" | cut -d= -f2)
grep -q "^CONFIG_MEMORY .* runtime_gb=2.0 usable_gb=72.0 fits=yes" "$work/plan_config.txt" ||
  fail "CONFIG_MEMORY: $(grep CONFIG_MEMORY "$work/plan_config.txt")"
grep -q "memory: [0-9.]* of $usable GB usable per GPU" "$work/plan_config.txt" ||
  fail "the planner's usable memory differs from CONFIG_MEMORY's $usable GB"
echo "edges: ok"
