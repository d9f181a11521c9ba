#!/usr/bin/env bash
# Compares one gpt2-124m training step (B=4, T=64), trident vs PyTorch, in fp32 and bf16.
#
# usage: bench/step_vs_pytorch.sh BUILD_DIR
#   env: THREADS="1 2"  PRECISIONS="fp32 bf16"  STEPS=5  WARMUP=2  REPEATS=2
#        PYTHON=/usr/bin/python3  WAIT_POLICIES="passive default"
#        TORCH_ARGS="--foreach" (more bench/torch_step.py options for the PyTorch side)
# PRECISIONS: fp32 runs both sides in fp32; bf16 runs trident_step_bench --precision bf16 (compute =
# "bf16": 16-bit storage and GEMMs, fp32 master weights) against bench/torch_step.py --autocast bf16
# (forward + loss under torch.autocast("cpu", dtype=torch.bfloat16), fp32 parameters and AdamW).
# Prints a table, one row per precision and thread count (precision, threads, trident s/step, torch
# s/step, torch/trident: the speed-up, GEMM-only s: trident's GEMMs alone, trident step/GEMM-only,
# and the speed-up between the two sides' fastest steps), then, at each thread count where both
# precisions ran, trident fp32 step / trident bf16 step (and torch's), and keeps every raw output
# in BUILD_DIR/step_vs_pytorch.log.
set -euo pipefail

build=${1:?usage: bench/step_vs_pytorch.sh BUILD_DIR}
threads_list=${THREADS:-"1 2"}
precisions=${PRECISIONS:-"fp32 bf16"}
steps=${STEPS:-5}
repeats=${REPEATS:-2}
warmup=${WARMUP:-2}
python=${PYTHON:-/usr/bin/python3}  # Debian's, which has python3-torch
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
step_bench=$build/bench/trident_step_bench
if [[ ! -x $step_bench ]]; then
  echo "error: $step_bench is missing; configure with -DTRIDENT_BUILD_BENCH=ON and build the" \
    "trident_step_bench target" >&2
  exit 2
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "error: $python cannot import torch (install python3-torch)" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The same OpenBLAS kernel on both sides (they link the same libopenblas): the one that fits this
# CPU's vector unit (tools/blas_kernel.sh), set explicitly because Debian's OpenBLAS 0.3.21 picks
# by CPU model (its generic Prescott kernel on CPUs it does not know: 4-5x slower GEMMs) and an
# OPENBLAS_CORETYPE in the environment may name a narrower one. BENCH_CORETYPE overrides; "auto"
# leaves OpenBLAS to choose. OPENBLAS_L2_SIZE is unset on both sides.
coretype=${BENCH_CORETYPE:-$(bash "$here/../tools/blas_kernel.sh")}
coretype=${coretype:-auto}
clean_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OMP_WAIT_POLICY)
[[ $coretype != auto ]] && clean_env+=(OPENBLAS_CORETYPE="$coretype")
# PyTorch tuned as its experts run it: glibc's allocator kept from returning memory to the system
# after every step (no mmap'd blocks, whose every free is a munmap, and no trimming of the heap:
# glibc caps mmap_threshold at 32 MiB, below GPT-2's largest tensors, so mmap_max=0 is the way),
# zero_grad(set_to_none=True), one interop thread. How idle OpenMP workers wait is each side's
# own choice, measured: PASSIVE (they sleep at once; the spinning default roughly doubled torch's
# 2-thread step with OpenBLAS's pthreads pool beside its OpenMP one) and libgomp's default
# (OMP_WAIT_POLICY unset: they spin a while, then sleep), each side keeping its faster. With one
# thread there are no workers, so the policy is not varied. Every other setting applies to both
# sides alike.
malloc_tunables="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184"
clean_env+=(GLIBC_TUNABLES="$malloc_tunables")
wait_policies=${WAIT_POLICIES:-"passive default"}
for policy in $wait_policies; do
  [[ $policy == passive || $policy == default ]] ||
    { echo "error: WAIT_POLICIES may hold passive and default, not '$policy'" >&2 && exit 2; }
done
# fp16 has no PyTorch peer here: 1.13's CPU autocast takes bf16 only.
for precision in $precisions; do
  [[ $precision == fp32 || $precision == bf16 ]] ||
    { echo "error: PRECISIONS may hold fp32 and bf16, not '$precision'" >&2 && exit 2; }
done
cpu_flag() {  # cpu_flag FLAG: yes when /proc/cpuinfo lists FLAG, no otherwise
  if grep -qw "$1" /proc/cpuinfo 2>/dev/null; then echo yes; else echo no; fi
}
log=$build/step_vs_pytorch.log
: >"$log"

echo "gpt2-124m training step, B=4 T=64, precisions: $precisions; median of $steps steps after"
echo "$warmup warm-up; each side runs $repeats times (trident, torch, torch, trident, ...) and its"
echo "fastest median counts"
echo "note: OpenBLAS kernel on every side: ${coretype} (OPENBLAS_CORETYPE$([[ $coretype == auto ]] &&
  echo " unset" || echo "=$coretype")); the 'GEMM:' line below is what OpenBLAS reports using"
echo "      (fp32 GEMMs; trident's bf16 GEMMs are oneDNN's, kernels::gemm16)"
echo "note: GLIBC_TUNABLES=$malloc_tunables on every side; OpenMP wait policies tried per side at"
echo "      2+ threads: $wait_policies (default: OMP_WAIT_POLICY unset), the faster kept"
echo "note: one step = zero grads, forward + loss, backward, global-norm clip (1.0) + AdamW;"
echo "      torch: zero_grad(set_to_none=True), set_num_interop_threads(1), the faster of Debian's"
echo "      pthreads and OpenMP OpenBLAS flavours (per thread count)"
if [[ " $precisions " == *" bf16 "* ]]; then
  echo "note: bf16: trident --precision bf16 (compute = \"bf16\": 16-bit parameters and"
  echo "      activations, GEMMs on 16-bit operands with fp32 sums, fp32 master weights and AdamW;"
  echo "      its GEMM-only time is that of the 16-bit GEMMs); torch --autocast bf16 (forward +"
  echo "      loss under torch.autocast(\"cpu\", dtype=torch.bfloat16), fp32 parameters and AdamW,"
  echo "      no GradScaler)"
  # Without AVX512-BF16 or AMX, oneDNN emulates bf16 and a bf16 step is slower than fp32: say
  # which this CPU has, so a bf16 row is read for what it measures.
  echo "note: this CPU's bf16 instructions: avx512_bf16 $(cpu_flag avx512_bf16)," \
    "amx_bf16 $(cpu_flag amx_bf16) (neither: bf16 matmuls are emulated)"
fi
echo "raw output: $log"

value() {  # value KEY FILE: the number after KEY= on its line
  sed -n "s/^$1=\([0-9.eE+-]*\).*/\1/p" "$2" | tail -n 1
}
fastest() {  # fastest PREFIX FILE: the shortest of the timed steps' `PREFIX_step index=...` lines
  sed -n "s/^$1_step index=[0-9]* seconds=\([0-9.eE+-]*\).*/\1/p" "$2" | sort -g | head -n 1
}

# keep_faster CANDIDATE BEST KEY: moves CANDIDATE over BEST when its KEY median is lower (or BEST
# is empty); removes CANDIDATE otherwise.
keep_faster() {
  local new old
  new=$(value "$3" "$1") old=$(value "$3" "$2")
  if [[ -z $old ]] || awk -v a="$new" -v b="$old" 'BEGIN { exit !(a < b) }'; then
    mv "$1" "$2"
  else
    rm -f "$1"
  fi
}

# policies THREADS: the wait policies to try at THREADS threads per side
policies() {
  if (($1 > 1)); then echo "$wait_policies"; else echo "${wait_policies%% *}"; fi
}
# policy_env POLICY: the environment word that selects POLICY (none for libgomp's default, as
# clean_env unsets OMP_WAIT_POLICY)
policy_env() {
  if [[ $1 == passive ]]; then echo OMP_WAIT_POLICY=PASSIVE; fi
}

# torch_autocast PRECISION: bench/torch_step.py's --autocast value, PyTorch's peer of PRECISION
torch_autocast() {
  if [[ $1 == bf16 ]]; then echo bf16; else echo none; fi
}

# run_trident PRECISION THREADS: trident under each wait policy, the fastest medians kept
run_trident() {
  local policy out
  for policy in $(policies "$2"); do
    out=$(mktemp)
    echo "== trident, $1, $2 thread(s), wait policy $policy" >>"$log"
    "${clean_env[@]}" $(policy_env "$policy") OPENBLAS_NUM_THREADS="$2" OMP_NUM_THREADS="$2" \
      "$step_bench" --steps "$steps" --warmup "$warmup" --precision "$1" | tee -a "$log" >"$out"
    echo "trident_wait_policy=$policy" >>"$out"
    [[ -n ${reported-} ]] || { reported=1 && echo "GEMM: $(sed -n 's/.*blas="\([^"]*\)".*/\1/p' "$out")"; }
    echo "   trident $1, wait policy $policy:" \
      "$(value trident_step_seconds "$out") s/step ($2 threads)"
    keep_faster "$out" "$out_trident" trident_step_seconds
  done
}

# run_torch PRECISION THREADS: PyTorch with each of Debian's threaded OpenBLAS flavours
run_torch() {
  local flavour flavour_dir out policy
  for flavour in pthread openmp; do
    flavour_dir=/usr/lib/$(gcc -print-multiarch)/openblas-$flavour
    [[ -e $flavour_dir/libblas.so.3 ]] || continue
    for policy in $(policies "$2"); do
      out=$(mktemp)
      echo "== torch, $1, $2 thread(s), OpenBLAS $flavour flavour, wait policy $policy" >>"$log"
      "${clean_env[@]}" $(policy_env "$policy") LD_LIBRARY_PATH="$flavour_dir" \
        OPENBLAS_NUM_THREADS="$2" OMP_NUM_THREADS="$2" "$python" "$here/torch_step.py" \
        --threads "$2" --steps "$steps" --warmup "$warmup" --autocast "$(torch_autocast "$1")" \
        ${TORCH_ARGS-} | tee -a "$log" >"$out"
      echo "torch_setup=$flavour/$policy" >>"$out"
      echo "   torch $1, OpenBLAS's $flavour flavour, wait policy $policy:" \
        "$(value torch_step_seconds "$out") s/step ($2 threads)"
      keep_faster "$out" "$out_torch" torch_step_seconds
    done
  done
}

declare -a rows
declare -A trident_s torch_s # PRECISION/THREADS: each side's kept median s/step
# The precisions of one thread count run back to back, so that trident's fp32/bf16 ratio compares
# measurements close in time.
for n in $threads_list; do
  for precision in $precisions; do
    out_trident=$(mktemp) out_torch=$(mktemp)
    # n threads per side: trident's Kokkos kernels and its GEMMs share one OpenMP pool (it links
    # Debian's OpenMP OpenBLAS); PyTorch runs its own ops on n OpenMP threads and its GEMMs on
    # the system's libblas.so.3, measured with both of Debian's threaded OpenBLAS flavours
    # (pthreads, the default alternative, and OpenMP, its pool shared as trident's is). Each
    # side runs REPEATS times, in the order trident, torch, torch, trident, ... so that a slow
    # spell of the machine does not fall on one side only, and each side's fastest median counts.
    for ((round = 1; round <= repeats; round++)); do
      if ((round % 2)); then
        run_trident "$precision" "$n" && run_torch "$precision" "$n"
      else
        run_torch "$precision" "$n" && run_trident "$precision" "$n"
      fi
    done
    tr_step=$(value trident_step_seconds "$out_trident")
    tr_gemm=$(value trident_gemm_seconds "$out_trident")
    tr_over_gemm=$(value trident_step_over_gemm "$out_trident")
    echo "   kept ($precision): trident with wait policy" \
      "$(sed -n 's/^trident_wait_policy=//p' "$out_trident"), torch with" \
      "$(sed -n 's/^torch_setup=//p' "$out_torch") (OpenBLAS flavour/wait policy)"
    to_step=$(value torch_step_seconds "$out_torch")
    trident_s[$precision/$n]=$tr_step torch_s[$precision/$n]=$to_step
    fastest_pair="$(fastest trident "$out_trident") $(fastest torch "$out_torch")"
    rows+=("$precision $n $tr_step $to_step $tr_gemm $tr_over_gemm $fastest_pair")
    for phase in forward backward optimizer; do
      printf '   %-9s trident %7.3f s   torch %7.3f s   (%s, %s threads)\n' "$phase" \
        "$(value trident_${phase}_seconds "$out_trident")" \
        "$(value torch_${phase}_seconds "$out_torch")" "$precision" "$n"
    done
    rm -f "$out_trident" "$out_torch"
  done
done

echo
# Medians, and the fastest step of each side: on a machine whose neighbours slow it down now and
# then, the fastest step is the least disturbed measurement of what each side can do. A bf16 row
# sets trident bf16 against PyTorch under bf16 autocast, and its GEMM-only time is trident's
# 16-bit GEMMs alone.
printf '%-9s %-8s %-16s %-16s %-15s %-16s %-18s %-22s\n' precision threads "trident s/step" \
  "torch s/step" "torch/trident" "GEMM-only s" "trident step/GEMM" "torch/trident fastest"
for row in "${rows[@]}"; do
  read -r precision n tr to gemm over tr_min to_min <<<"$row"
  awk -v p="$precision" -v n="$n" -v tr="$tr" -v to="$to" -v g="$gemm" -v r="$over" \
    -v a="$tr_min" -v b="$to_min" 'BEGIN {
    printf "%-9s %-8s %-16.3f %-16.3f %-15.2f %-16.3f %-18.2f %.3f / %.3f = %.2f\n", p, n, tr, to,
      to / tr, g, r, b, a, b / a }'
done
# What bf16 buys each side over its own fp32 step, where both precisions ran.
for n in $threads_list; do
  [[ -n ${trident_s[fp32/$n]-} && -n ${trident_s[bf16/$n]-} ]] || continue
  awk -v n="$n" -v f="${trident_s[fp32/$n]}" -v b="${trident_s[bf16/$n]}" \
    -v tf="${torch_s[fp32/$n]}" -v tb="${torch_s[bf16/$n]}" 'BEGIN {
    printf "trident fp32/bf16 step, %s threads: %.3f / %.3f = %.2f   (torch: %.3f / %.3f = %.2f)\n",
      n, f, b, f / b, tf, tb, tf / tb }'
done
