#!/usr/bin/env bash
# Packs the CUDA build into a relocatable folder for a GPU machine with a driver and PyTorch only,
# and the folder into OUT_DIR.tar.gz, what travels (at most BUNDLE_LIMIT_MIB, default 64: the
# device carry limit); unpack it there with `tar xzf` (or `python3 -m tarfile -e`).
# usage: tools/device_bundle.sh OUT_DIR [BUILD_CUDA]   (env BUNDLE_LIMIT_MIB, default 64)
#
# The target: x86-64, an NVIDIA driver, PyTorch with CUDA, a newer glibc than Debian 12's, and no
# MPI, HDF5 or Debian packages; nothing can be fetched there. The bundle carries:
#   bin/      trident, its unit tests and step benchmark (CUDA build), OpenMPI's mpirun and orted;
#   lib/      every shared library they need but glibc's, libstdc++/libgcc_s (the newer system's
#             serve), the driver's, cuBLAS, cuDNN and NCCL: those are far over the carry limit
#             (cuBLAS and NCCL alone 760 MB), so they come from PyTorch's own nvidia-* wheels at
#             run time (trident opens cuBLAS 13 or 12 and cuDNN 9 itself; NCCL's soname
#             libnccl.so.2 is the same in both);
#   lib/x86_64-linux-gnu/openmpi/lib/openmpi3/  OpenMPI's plugins for one node (shared memory,
#             TCP; no InfiniBand, UCX, OFI, PSM or OpenSHMEM), found through OPAL_PREFIX;
#   lib/pmix/ PMIx's plugins; share/openmpi, share/pmix: their help texts;
#   run.sh    sets the paths and runs a command: ./run.sh trident train ..., ./run.sh mpirun ...;
#   SOURCES   where each library came from (tests/cuda/bundle.sh hides those to prove relocation);
#   gpu_check.sh, bench/, inputs/, data/  the GPU check (bench/gpu_check.sh), its PyTorch peer, its
#             config and the KJV corpus (make data);
#   reference/gpu_check_cpu_losses.txt  the check's first losses from the host build
#             (BUNDLE_HOST_BUILD, default build), BUNDLE_REFERENCE_STEPS of them (default 2: about
#             4 minutes and 19 GiB on 2 cores; 0 leaves them out, and the check then fails on them).
set -euo pipefail
out=${1:?usage: tools/device_bundle.sh OUT_DIR [BUILD_CUDA]}
build=${2:-build-cuda}
limit_mib=${BUNDLE_LIMIT_MIB:-64}
reference_steps=${BUNDLE_REFERENCE_STEPS:-2}
host_build=${BUNDLE_HOST_BUILD:-build}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for f in data/kjv_train.bin data/kjv_val.bin; do
  [[ -f $root/$f ]] || { echo "device_bundle: $root/$f is missing: run make data first" >&2 && exit 1; }
done
if ((reference_steps > 0)) && [[ ! -x $host_build/src/trident ]]; then
  echo "device_bundle: $host_build/src/trident is missing: the CPU reference needs the host build" \
    "(make build), or BUNDLE_REFERENCE_STEPS=0" >&2
  exit 1
fi
triplet=$(gcc -print-multiarch)
ompi_plugins=/usr/lib/$triplet/openmpi/lib/openmpi3
pmix_plugins=/usr/lib/$triplet/pmix2/lib/pmix
programs=("$build/src/trident" "$build/tests/unit/trident_unit_tests" "$build/bench/trident_step_bench")
for p in "${programs[@]}"; do
  [[ -x $p ]] || { echo "device_bundle: $p is missing: run make build-cuda first" >&2 && exit 1; }
done
grep -q '^TRIDENT_CUDA:BOOL=ON\|KOKKOS_ENABLE_CUDA' "$build/CMakeCache.txt" "$build"/_kokkos/include/KokkosCore_config.h 2>/dev/null ||
  { echo "device_bundle: $build is not a CUDA build (make build-cuda)" >&2 && exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/lib/pmix" "$out/share" "$out/lib/$triplet/openmpi/lib"
# Not stripped: a crash on a machine met for the first time should say where (2.5 MB).
cp "${programs[@]}" "$out/bin/"
cp "$(readlink -f /usr/bin/orterun)" "$out/bin/orterun"
ln -s orterun "$out/bin/mpirun"
cp "$(readlink -f /usr/bin/orted)" "$out/bin/orted"

# OpenMPI's plugins for a single node: the network stacks need libraries (and hardware) the
# target does not have, and OpenSHMEM is not used.
mkdir -p "$out/lib/$triplet/openmpi/lib/openmpi3"
for plugin in "$ompi_plugins"/*.so; do
  case $(basename "$plugin") in
    *ucx* | *ofi* | *openib* | *psm* | *verbs* | mca_atomic_* | mca_memheap_* | mca_scoll_* | \
      mca_spml_* | mca_sshmem_*) continue ;;
  esac
  cp "$plugin" "$out/lib/$triplet/openmpi/lib/openmpi3/"
done
cp "$pmix_plugins"/*.so "$out/lib/pmix/"
cp -r /usr/share/openmpi "$out/share/openmpi"
[[ -d /usr/lib/$triplet/pmix2/share/pmix ]] && cp -r "/usr/lib/$triplet/pmix2/share/pmix" "$out/share/pmix"

# The libraries of every program and plugin, resolved here, but those the target has or gets
# from PyTorch.
skip='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|'
skip+='libstdc\+\+|libgcc_s|libcuda|libnvidia-|libnccl|libcublas|libcublasLt)\.'
mapfile -t objects < <(find "$out/bin" "$out/lib" -type f \( -perm -u+x -o -name '*.so' \))
declare -A copied=()
for object in "${objects[@]}"; do
  while read -r name path; do
    [[ $name =~ $skip || -n ${copied[$name]-} ]] && continue
    [[ $path == /* ]] || { echo "device_bundle: $object needs $name, not found here" >&2 && exit 1; }
    cp -L "$path" "$out/lib/$name"
    echo "lib/$name $(readlink -f "$path")" >>"$out/SOURCES"
    copied[$name]=1
  done < <(ldd "$object" | sed -n 's/^\s*\(\S*\) => \(\S*\).*/\1 \2/p')
done

# The GPU check and what it runs.
mkdir -p "$out/bench" "$out/inputs/models" "$out/data" "$out/reference"
cp "$root/bench/gpu_check.sh" "$out/gpu_check.sh"
cp "$root/bench/torch_step.py" "$root/bench/torch_gpu_step.py" "$root/bench/gpu_ceilings.py" \
  "$root/bench/roofline_vs_profile.py" \
  "$out/bench/"
cp "$root/inputs/gpu_check.toml" "$out/inputs/"
cp "$root/inputs/models/gpt2-124m.toml" "$out/inputs/models/"
cp "$root/data/kjv_train.bin" "$root/data/kjv_val.bin" "$out/data/"
if ((reference_steps > 0)); then
  echo "device_bundle: the CPU reference: $reference_steps steps of inputs/gpu_check.toml on" \
    "$host_build/src/trident (minutes)"
  scratch=$(mktemp -d)
  (cd "$root" && "$host_build/src/trident" train --config inputs/gpu_check.toml --overwrite \
    --set run.out_dir="$scratch" --set run.steps="$reference_steps") >"$scratch/train.log" 2>&1 ||
    { tail -n 20 "$scratch/train.log" >&2 && exit 1; }
  {
    echo "# The first losses of inputs/gpu_check.toml on the host build (trident $(cd "$root" &&
      git rev-parse --short HEAD 2>/dev/null || echo unknown)); $(grep -m 1 '^GEMM:' "$scratch/train.log")"
    sed -n 's/^step \+\([0-9]*\)\/[0-9]* | loss \([0-9.]*\) .*/step \1 loss \2/p' "$scratch/train.log"
  } >"$out/reference/gpu_check_cpu_losses.txt"
  cat "$out/reference/gpu_check_cpu_losses.txt"
  rm -rf "$scratch"
fi

cat >"$out/run.sh" <<'RUN'
#!/bin/sh
# Runs a command with the bundle's programs and libraries: ./run.sh trident ..., ./run.sh mpirun ...
# cuBLAS, cuDNN and NCCL come from PyTorch's nvidia-* wheels (or TRIDENT_CUDA_LIBS, a directory list),
# found by the Python in PYTHON (default python3): the one with PyTorch, which gpu_check.sh uses too.
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${TRIDENT_CUDA_LIBS:-}" ]; then
  TRIDENT_CUDA_LIBS=$("${PYTHON:-python3}" - <<'PY' 2>/dev/null
import glob, os
roots = []
try:
    import torch
    site = os.path.dirname(os.path.dirname(torch.__file__))
    roots = [os.path.join(site, "nvidia"), os.path.join(os.path.dirname(torch.__file__), "lib")]
except Exception:
    pass
dirs = []
for root in roots:
    for pattern in ("libcublas.so.1[23]", "libcudnn.so.9", "libnccl.so.2"):
        for f in glob.glob(os.path.join(root, "**", pattern), recursive=True):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
PY
)
fi
export LD_LIBRARY_PATH="$here/lib${TRIDENT_CUDA_LIBS:+:$TRIDENT_CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$here/bin:$PATH"
export OPAL_PREFIX="$here"
# PMIx looks for its plugins under its configured prefix too (Debian's
# /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix): a machine with another PMIx there (Ubuntu's) would
# have this one load that one's plugins, which crash it. PMIX_PREFIX moves the prefix here.
export PMIX_PREFIX="$here" PMIX_EXEC_PREFIX="$here" PMIX_LIBDIR="$here/lib"
export PMIX_PKGLIBDIR="$here/lib/pmix"
export PMIX_MCA_mca_base_component_path="$here/lib/pmix"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# One node and no remote shell (an image with PyTorch usually has no ssh): OpenMPI starts its local
# daemon and ranks itself (plm "isolated"; its default, rsh, aborts even one process without ssh).
# Shared memory copies through a buffer: single-copy (CMA) needs ptrace rights a container may
# not grant. A value already in the environment is kept.
export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
exec "$@"
RUN
chmod +x "$out/run.sh"

size_kib=$(du -sk "$out" | cut -f1)
echo "device_bundle: $out: $((size_kib / 1024)) MiB ($size_kib KiB), $(find "$out" -type f | wc -l) files"
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
archive_kib=$(($(stat -c %s "$out.tar.gz") / 1024))
echo "device_bundle: $out.tar.gz: $((archive_kib / 1024)) MiB ($archive_kib KiB), what travels"
if ((archive_kib > limit_mib * 1024)); then
  echo "device_bundle: $out.tar.gz is over the limit of $limit_mib MiB" >&2
  exit 1
fi
