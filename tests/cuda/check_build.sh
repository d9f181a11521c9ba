#!/usr/bin/env bash
# Checks the GPU build: NCCL and a CUDA Kokkos linked, sm_80 and sm_90 code in
# the executable and the unit tests, and a clear refusal (exit 2) where no GPU is usable.
# usage: tests/cuda/check_build.sh BUILD_CUDA
set -euo pipefail
build=${1:?usage: check_build.sh BUILD_CUDA}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

exe=$build/src/trident
unit=$build/tests/unit/trident_unit_tests
for f in "$exe" "$unit"; do
  [[ -x $f ]] || fail "$f is missing: run make build-cuda"
done
grep -q '^TRIDENT_CUDA:BOOL=ON\|^Kokkos_DIR' "$build/CMakeCache.txt" || fail "$build is not configured"
grep -q 'KOKKOS_ENABLE_CUDA$' "$(sed -n 's/^Kokkos_DIR:PATH=\(.*\)\/lib\/cmake\/Kokkos$/\1/p' \
  "$build/CMakeCache.txt")/include/KokkosCore_config.h" || fail "the Kokkos of $build has no CUDA"

# Linked libraries, resolved: NCCL and the CUDA Kokkos. cuBLAS is not linked but opened at run
# time (kernels/cublas.hpp), so that the build runs on another CUDA's cuBLAS.
libs=$(ldd "$exe")
for lib in libnccl.so libkokkoscore.so; do
  grep -q "$lib.* => /" <<<"$libs" || fail "$exe does not link $lib: $(grep "$lib" <<<"$libs")"
done
! readelf -d "$exe" | grep 'NEEDED.*libcublas' >/dev/null || fail "$exe links cuBLAS; it must dlopen it"
# ... and looks its functions up: a program that never calls dlsym calls null pointers at its first
# GEMM (an unqualified bind(...) once resolved to std::bind, and nothing was looked up).
for f in "$exe" "$unit"; do
  imports=$(nm -D --undefined-only "$f")  # not piped into grep -q: pipefail and SIGPIPE
  grep -qw dlsym <<<"$imports" || fail "$f never calls dlsym: cuBLAS cannot be bound"
done
echo "links: $(grep -o 'lib\(nccl\|kokkoscore\)\.so[.0-9]* => [^ ]*' <<<"$libs" | tr '\n' ' ')"

# Device code: a cubin per arch, and PTX of the newest for GPUs after it.
for f in "$exe" "$unit"; do
  code=$(/usr/bin/python3 "$here/fatbin_archs.py" "$f") || fail "$f: no device code"
  for want in "sm_80 cubin" "sm_90 cubin" "compute_90 ptx"; do
    grep -q "^$want " <<<"$code" || fail "$f has no $want: $code"
  done
  echo "$(basename "$f"): $(tr '\n' ',' <<<"$code" | sed 's/,$//; s/,/, /g') (kind, files)"
done

# Where no GPU is usable, the executable says so and exits 2 before Kokkos starts.
if ! ls /dev/nvidia0 >/dev/null 2>&1; then
  set +e
  out=$("$exe" plan --help 2>&1)
  rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "expected exit 2 without a GPU, got $rc: $out"
  grep -q "CUDA build and no GPU is usable here" <<<"$out" || fail "unexpected message: $out"
  echo "without a GPU: $out"
fi
echo "OK"
