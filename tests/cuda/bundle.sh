#!/usr/bin/env bash
# The GPU bundle (tools/device_bundle.sh) travels as an archive of at most 64 MiB and, unpacked
# elsewhere, runs with none of this machine's MPI, HDF5, Kokkos, CUDA toolkit, ssh or rsh: they
# are hidden in a private mount namespace (root only), OpenMPI's and PMIx's plugin trees hold
# decoys that end whoever loads them (another MPI's plugins there crash the bundle), NCCL is
# offered where PyTorch's wheel would put it, and mpirun starts two ranks of the bundle's unit
# tests, which reach MPI_Init and refuse for want of a GPU; trident itself refuses with exit 2,
# and so does the bundle's GPU check, before it runs anything.
# (The check's CPU reference losses are left out here: BUNDLE_REFERENCE_STEPS=0.)
# usage: tests/cuda/bundle.sh REPO BUILD_CUDA WORK_DIR
set -euo pipefail
repo=${1:?usage: bundle.sh REPO BUILD_CUDA WORK_DIR}
build=${2:?}
work=${3:?}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [[ $(id -u) -ne 0 ]] || ! unshare -m --propagation private true 2>/dev/null; then
  echo "SKIP: hiding the system's libraries needs root and a private mount namespace (unshare -m)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
BUNDLE_REFERENCE_STEPS=0 bash "$repo/tools/device_bundle.sh" "$work/built" "$build" |
  tee "$work/bundle.log"
size_kib=$(($(stat -c %s "$work/built.tar.gz") / 1024))
((size_kib <= 64 * 1024)) || fail "the bundle's archive is $size_kib KiB, over 64 MiB"
# Relocated: unpacked from the archive alone, elsewhere; nothing may point at where it was made.
rm -rf "$work/built" && mkdir "$work/unpacked"
tar -C "$work/unpacked" -xzf "$work/built.tar.gz" && mv "$work/unpacked/built" "$work/moved"

# Another OpenMPI and PMIx where Debian's install theirs (a GPU image with Ubuntu's, say): their
# plugin trees hold decoys, which end any process that loads one. The bundle must load its own.
triplet=$(gcc -print-multiarch)
printf '%s\n' '#include <stdio.h>' '#include <unistd.h>' \
  '__attribute__((constructor)) static void loaded(void) {' \
  '  fputs("DECOY PLUGIN LOADED from the system plugin tree\n", stderr);' '  _exit(99);' '}' \
  >"$work/decoy.c"
gcc -shared -fPIC -o "$work/decoy.so" "$work/decoy.c"
mkdir -p "$work/decoy/openmpi/lib/openmpi3" "$work/decoy/pmix2/lib/pmix"
for name in mca_btl_decoy mca_pml_decoy mca_ess_decoy; do
  cp "$work/decoy.so" "$work/decoy/openmpi/lib/openmpi3/$name.so"
done
for name in pmix_mca_pcompress_decoy pmix_mca_psec_decoy pmix_mca_gds_decoy; do
  cp "$work/decoy.so" "$work/decoy/pmix2/lib/pmix/$name.so"
done

# PyTorch's wheels, as the target has them: nvidia/nccl/lib/libnccl.so.2 under site-packages.
nccl=$(ldd "$build/src/trident" | sed -n 's/.*libnccl.so.2 => \(\S*\).*/\1/p')
[[ -n $nccl ]] || fail "the CUDA build does not resolve libnccl.so.2 here"
mkdir -p "$work/site/nvidia/nccl/lib" "$work/empty"
: >"$work/hidden"
cat >"$work/inside.sh" <<INSIDE
set -euo pipefail
mount --bind "$(dirname "$(readlink -f "$nccl")")" "$work/site/nvidia/nccl/lib"
# Every library the bundle carries, at the place it came from; the plugin and toolkit trees.
while read -r _ source; do
  mount --bind /dev/null "\$source" && echo "\$source" >>"$work/hidden"
done <"$work/moved/SOURCES"
# No remote shell, as in a container with PyTorch: OpenMPI must start its ranks without one.
for shell in ssh rsh; do
  path=\$(command -v \$shell || true)
  if [[ -n \$path ]]; then mount --bind /dev/null "\$path" && echo "\$path" >>"$work/hidden"; fi
done
for tree in openmpi pmix2; do
  mount --bind "$work/decoy/\$tree" "/usr/lib/$triplet/\$tree" &&
    echo "/usr/lib/$triplet/\$tree" >>"$work/hidden"
done
for dir in /usr/share/openmpi /usr/local/cuda "$(readlink -f /usr/local/cuda)" "$build"; do
  [[ -d \$dir ]] && mount --bind "$work/empty" "\$dir" && echo "\$dir" >>"$work/hidden"
done
cd "$work"
set +e
env -u LD_LIBRARY_PATH TRIDENT_CUDA_LIBS="$work/site/nvidia/nccl/lib" \\
  "$work/moved/run.sh" mpirun -np 2 --tag-output trident_unit_tests >"$work/mpirun.out" 2>&1
echo \$? >"$work/mpirun.rc"
env -u LD_LIBRARY_PATH TRIDENT_CUDA_LIBS="$work/site/nvidia/nccl/lib" \\
  "$work/moved/run.sh" trident plan --help >"$work/single.out" 2>&1
echo \$? >"$work/single.rc"
"$work/moved/gpu_check.sh" "$work/gpu_check_out" >"$work/gpu_check.out" 2>&1
echo \$? >"$work/gpu_check.rc"
INSIDE
unshare -m --propagation private bash "$work/inside.sh" || fail "mount namespace setup failed"
echo "hidden: $(wc -l <"$work/hidden") libraries and trees"
grep -q "libmpi.so" "$work/hidden" || fail "libmpi was not hidden: $(cat "$work/hidden")"
if command -v ssh >/dev/null; then
  grep -q "/ssh$" "$work/hidden" || fail "ssh was not hidden: $(cat "$work/hidden")"
fi
for out in mpirun single gpu_check; do
  ! grep -q "DECOY PLUGIN LOADED" "$work/$out.out" ||
    fail "the bundle loaded this machine's OpenMPI or PMIx plugin ($out): $(cat "$work/$out.out")"
done
refusal="CUDA build and no GPU is usable here"
# The test programs report on every rank, after MPI_Init and before MPI_Finalize, so both ranks
# print before either exits.
for rank in 0 1; do
  grep -q "^\[1,$rank\]<stderr>:.*$refusal" "$work/mpirun.out" ||
    fail "mpirun -np 2 from the bundle: rank $rank did not report: $(cat "$work/mpirun.out")"
done
[[ $(cat "$work/mpirun.rc") -ne 0 ]] || fail "mpirun exited 0 although the ranks refused"
grep -q "$refusal" "$work/single.out" && [[ $(cat "$work/single.rc") -eq 2 ]] ||
  fail "trident from the bundle (rc $(cat "$work/single.rc")): $(cat "$work/single.out")"
grep -q "no NVIDIA GPU here" "$work/gpu_check.out" && [[ $(cat "$work/gpu_check.rc") -eq 2 ]] ||
  fail "gpu_check.sh from the bundle (rc $(cat "$work/gpu_check.rc")): $(cat "$work/gpu_check.out")"
[[ ! -e $work/gpu_check_out ]] || fail "gpu_check.sh wrote results without a GPU"
echo "mpirun -np 2 from the relocated bundle: both ranks through MPI_Init, refusing (no GPU):"
grep "$refusal" "$work/mpirun.out"
echo "trident alone (exit 2): $(cat "$work/single.out")"
echo "the GPU check (exit 2): $(cat "$work/gpu_check.out")"
echo "OK"
