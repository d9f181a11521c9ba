#!/usr/bin/env bash
# trident's GEMM engines on this CPU at gpt2-124m's shapes (B=4, T=64: 256 token rows), forward
# (y = x W^T), input gradient (dx = dy W) and weight gradient (dW += dy^T x), in one run of
# trident_bench_kernels: fp32 on OpenBLAS (kernels::gemm, what fp32 runs use), fp32 on oneDNN
# (the candidate), bf16 on oneDNN (kernels::gemm16).
#
# usage: bench/gemm16_vs_fp32.sh BUILD_DIR
#   env: THREADS=2  MIN_TIME=0.5 (seconds per benchmark)  BENCH_CORETYPE (see below)
# Prints one row per shape (GFLOP/s of each engine and their ratios to OpenBLAS fp32) and the
# geometric means, with the CPU's ISA flags and the OpenBLAS kernel (oneDNN names its ISA).
set -euo pipefail
build=${1:?usage: bench/gemm16_vs_fp32.sh BUILD_DIR}
threads=${THREADS:-2}
min_time=${MIN_TIME:-0.5}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench=$build/bench/trident_bench_kernels
[[ -x $bench ]] || { echo "error: $bench is missing; build the trident_bench_kernels target" >&2 && exit 2; }
# The OpenBLAS kernel that fits this CPU's vector unit, set for the fp32 side (Debian's 0.3.21
# falls back to Prescott on CPUs it does not know); BENCH_CORETYPE=auto leaves OpenBLAS to choose.
coretype=${BENCH_CORETYPE:-$(bash "$here/../tools/blas_kernel.sh")}
coretype=${coretype:-auto}
run=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" OMP_PROC_BIND=false
  OMP_WAIT_POLICY=PASSIVE ONEDNN_VERBOSE=0)
[[ $coretype != auto ]] && run+=(OPENBLAS_CORETYPE="$coretype")
json=$(mktemp)
trap 'rm -f "$json"' EXIT
"${run[@]}" "$bench" --benchmark_filter='^BM_Gemm(Engine)?/' --benchmark_min_time="$min_time" \
  --benchmark_format=json >"$json" 2>/dev/null
echo "oneDNN: $("${run[@]}" ONEDNN_VERBOSE=1 "$bench" --benchmark_filter='^BM_GemmEngine/op:0/OC:768/IC:768/engine:1' \
  --benchmark_min_time=0.01 2>/dev/null | grep -m1 'onednn_verbose,exec' | cut -d, -f5)"
isa=$(grep -o -w 'avx512f\|avx512_bf16\|amx_bf16\|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: ${isa:-no AVX-512}"
echo "threads: $threads; OpenBLAS kernel: $coretype (OPENBLAS_CORETYPE for the fp32 side)"
python3 - "$json" <<'PY'
import json, math, sys
data = json.load(open(sys.argv[1]))
ops = {"0": "forward  y = x W^T", "1": "input    dx = dy W", "2": "weight   dW += dy^T x"}
engines = {None: "OpenBLAS fp32", "2": "oneDNN fp32", "1": "oneDNN bf16"}
rates = {}
for b in data["benchmarks"]:
    name = b["name"].split("/")
    args = dict(a.split(":") for a in name[1:] if ":" in a)
    rates[(args["op"], int(args["OC"]), int(args["IC"]), args.get("engine"))] = b["FLOP/s"] / 1e9
print("%-22s %6s %6s %14s %12s %12s %8s %8s" % ("GEMM (M = 256)", "OC", "IC", "OpenBLAS fp32",
      "oneDNN fp32", "oneDNN bf16", "fp32 x", "bf16 x"))
ratios = {"2": [], "1": []}
for (op, oc, ic, engine) in sorted(rates, key=lambda k: (k[0], k[1], k[2], str(k[3]))):
    if engine is not None:
        continue
    base = rates[(op, oc, ic, None)]
    row = [rates.get((op, oc, ic, e)) for e in ("2", "1")]
    for e, r in zip(("2", "1"), row):
        if r:
            ratios[e].append(r / base)
    cells = ["%12.1f" % r if r else "%12s" % "-" for r in row]
    x = ["%8.2f" % (r / base) if r else "%8s" % "-" for r in row]
    print("%-22s %6d %6d %14.1f %s %s %s %s" % (ops[op], oc, ic, base, cells[0], cells[1], x[0], x[1]))
for e in ("2", "1"):
    if ratios[e]:
        mean = math.exp(sum(map(math.log, ratios[e])) / len(ratios[e]))
        print("geometric mean %s / OpenBLAS fp32: %.2f over %d shapes" % (engines[e], mean, len(ratios[e])))
PY
