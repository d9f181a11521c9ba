#!/usr/bin/env bash
# Prints the OpenBLAS kernel (an OPENBLAS_CORETYPE value) that fits this CPU's vector unit:
# SkylakeX with AVX-512 (F, BW, DQ and VL, which its kernels use), Haswell with AVX2 and FMA,
# nothing otherwise (or off x86-64, where /proc/cpuinfo has no "flags" line).
#
# Why: Debian's OpenBLAS 0.3.21 picks by CPU model, not by what the CPU can do: on CPUs newer than
# it knows it falls back to its generic Prescott kernel (4-5x slower GEMMs). `make run` (when
# OPENBLAS_CORETYPE is unset) and bench/step_vs_pytorch.sh launch with this kernel; tests never do.
#
# usage: tools/blas_kernel.sh [CPUINFO]   (default /proc/cpuinfo)
set -euo pipefail

flags=" $({ grep -m 1 '^flags' "${1:-/proc/cpuinfo}" 2>/dev/null || true; } | cut -d: -f2) "
has() { [[ $flags == *" $1 "* ]]; }
if has avx512f && has avx512bw && has avx512dq && has avx512vl; then
  echo SkylakeX
elif has avx2 && has fma; then
  echo Haswell
fi
