#!/usr/bin/env bash
# Builds Kokkos from Debian's trilinos source package into a prefix, once: Serial + OpenMP for the
# host build, or CUDA + OpenMP + Serial for the GPU build.
# usage: tools/build_kokkos.sh PREFIX [host|cuda]
#   cuda: env CUDA_ROOT (default /usr/local/cuda), TRIDENT_CUDA_ARCHS (default "80 90": A100 and
#         H100/H200 code in one binary)
#
# Debian's own Kokkos (libtrilinos-kokkos-dev, Kokkos 3.4.1 inside Trilinos 13.2) is built with
# the Serial backend only, so every kernel of a rank would run on one thread. Its source package
# holds the same Kokkos under packages/kokkos, which builds standalone in about 20 s on 2 cores
# (about a minute with CUDA).
# Steps, each skipped when its result is already there (idempotent; no network after the first
# time):
#   1. a deb-src entry derived from this machine's own apt sources, if apt has none;
#   2. `apt-get source --download-only trilinos` into the cache (TRIDENT_CACHE, default
#      ~/.cache/trident), 166 MB once;
#   3. packages/kokkos extracted from the orig tarball into the cache; for CUDA, a copy with
#      tools/patches/kokkos-3.4.1-cuda13.patch applied (CUDA 13 API changes, several GPU archs);
#   4. configured, built and installed into PREFIX (a stamp file records the recipe, so a changed
#      recipe rebuilds). For CUDA, PREFIX/bin/trident-nvcc is the C++ compiler of Kokkos and of
#      trident: Kokkos' nvcc_wrapper with the archs baked in.
set -euo pipefail
prefix=${1:?usage: tools/build_kokkos.sh PREFIX [host|cuda]}
variant=${2:-host}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TRIDENT_CACHE:-${HOME:-/root}/.cache/trident}
patch_file=$here/patches/kokkos-3.4.1-cuda13.patch
case $variant in
  host) recipe="kokkos 3.4.1 from trilinos 13.2.0 source; Serial+OpenMP; Release; shared" ;;
  cuda)
    cuda_root=${CUDA_ROOT:-/usr/local/cuda}
    archs=${TRIDENT_CUDA_ARCHS:-80 90}
    if [[ ! -x $cuda_root/bin/nvcc ]]; then
      echo "build_kokkos: no nvcc in $cuda_root/bin: install the CUDA toolkit or set CUDA_ROOT" >&2
      exit 1
    fi
    # One -gencode per arch, and PTX of the newest for GPUs after it.
    arch_flags="" newest=""
    for a in $archs; do
      arch_flags+="-gencode=arch=compute_$a,code=sm_$a "
      newest=$a
    done
    arch_flags+="-gencode=arch=compute_$newest,code=compute_$newest"
    recipe="kokkos 3.4.1 from trilinos 13.2.0 source + $(sha256sum "$patch_file" | cut -c1-12);"
    recipe+=" CUDA+OpenMP+Serial, lambda, C++17; archs $archs; $($cuda_root/bin/nvcc --version |
      tail -n 1); Release; shared"
    ;;
  *) echo "usage: tools/build_kokkos.sh PREFIX [host|cuda]" >&2 && exit 2 ;;
esac
stamp=$prefix/.trident-kokkos
if [[ -f $stamp && $(cat "$stamp") == "$recipe" && -f $prefix/lib/cmake/Kokkos/KokkosConfig.cmake ]]; then
  exit 0
fi
log() { echo "build_kokkos: $*"; }

orig=$(ls "$cache"/src/trilinos_*.orig.tar.gz 2>/dev/null | head -n 1 || true)
if [[ -z $orig ]]; then
  if ! apt-cache showsrc trilinos >/dev/null 2>&1 || [[ -z $(apt-cache showsrc trilinos 2>/dev/null) ]]; then
    [[ $(id -u) -eq 0 ]] || {
      echo "build_kokkos: apt has no source entries; as root this script adds them (or run:" \
        "apt-get source --download-only trilinos in $cache/src)" >&2
      exit 1
    }
    # The machine's own binary sources, as source sources: deb822 files and one-line lists.
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f $f && $f != */trident-deb-src.sources ]] || continue
      grep -q '^Types:.*\bdeb\b' "$f" || continue
      sed 's/^Types:.*/Types: deb-src/' "$f"
      echo
    done >/etc/apt/sources.list.d/trident-deb-src.sources
    if [[ -f /etc/apt/sources.list ]]; then
      sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list >/etc/apt/sources.list.d/trident-deb-src.list
    fi
    log "added deb-src entries derived from this machine's apt sources; apt-get update"
    apt-get update -qq
  fi
  mkdir -p "$cache/src"
  log "downloading Debian's trilinos source package into $cache/src (once)"
  (cd "$cache/src" && apt-get source --download-only -qq -o APT::Sandbox::User=root trilinos)
  orig=$(ls "$cache"/src/trilinos_*.orig.tar.gz | head -n 1)
fi

src=$cache/kokkos-src
if [[ ! -f $src/CMakeLists.txt ]]; then
  log "extracting packages/kokkos from $(basename "$orig")"
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  tar -xzf "$orig" -C "$src.tmp" --wildcards '*/packages/kokkos/*'
  rm -rf "$src" && mv "$src.tmp"/*/packages/kokkos "$src" && rm -rf "$src.tmp"
fi

work=$prefix.build
rm -rf "$work"
mkdir -p "$(dirname "$prefix")"
options=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
  -DBUILD_SHARED_LIBS=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON
  -DKokkos_ENABLE_TESTS=OFF)
if [[ $variant == cuda ]]; then
  patched=$cache/kokkos-src-cuda13
  if [[ ! -f $patched/.trident-patched || $(cat "$patched/.trident-patched") != "$recipe" ]]; then
    log "patching a copy of the Kokkos source for CUDA 13 ($(basename "$patch_file"))"
    rm -rf "$patched" && cp -r "$src" "$patched"
    patch -s -p1 -d "$patched" <"$patch_file"
    echo "$recipe" >"$patched/.trident-patched"
  fi
  src=$patched
  # The compiler wrapper: Kokkos' nvcc_wrapper (installed into PREFIX/bin) with this build's
  # archs and toolkit, so that a later `cmake --build` needs no environment.
  mkdir -p "$prefix/bin"
  cp "$src/bin/nvcc_wrapper" "$prefix/bin/nvcc_wrapper"
  cat >"$prefix/bin/trident-nvcc" <<WRAPPER
#!/bin/sh
# C++ compiler of trident's CUDA build (written by tools/build_kokkos.sh): Kokkos' nvcc_wrapper
# for archs $archs with the toolkit in $cuda_root.
export NVCC_WRAPPER_ARCH_FLAGS="$arch_flags"
export CUDA_ROOT="$cuda_root"
exec "\$(dirname "\$0")/nvcc_wrapper" "\$@"
WRAPPER
  chmod +x "$prefix/bin/trident-nvcc"
  options+=(-DCMAKE_CXX_COMPILER="$prefix/bin/trident-nvcc" -DCMAKE_CXX_STANDARD=17
    -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ARCH_AMPERE80=ON
    -DCUDAToolkit_ROOT="$cuda_root")
  log "building Kokkos (CUDA for sm ${archs// /, sm }, OpenMP, Serial) into $prefix"
else
  log "building Kokkos (Serial + OpenMP) into $prefix"
fi
cmake -S "$src" -B "$work" "${options[@]}" >"$work.log" 2>&1 || { cat "$work.log"; exit 1; }
cmake --build "$work" -j "$(nproc)" >>"$work.log" 2>&1 || { tail -n 40 "$work.log"; exit 1; }
cmake --install "$work" >>"$work.log" 2>&1 || { tail -n 20 "$work.log"; exit 1; }
rm -rf "$work"
echo "$recipe" >"$stamp"
log "installed Kokkos $(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$prefix/lib/cmake/Kokkos/KokkosConfigVersion.cmake") into $prefix"
