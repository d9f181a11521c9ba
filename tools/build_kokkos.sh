#!/usr/bin/env bash
# Builds Kokkos (Serial + OpenMP) from Debian's trilinos source package into a prefix, once.
# usage: tools/build_kokkos.sh PREFIX
#
# Debian's own Kokkos (libtrilinos-kokkos-dev, Kokkos 3.4.1 inside Trilinos 13.2) is built with
# the Serial backend only, so every kernel of a rank would run on one thread. Its source package
# holds the same Kokkos under packages/kokkos, which builds standalone in about 20 s on 2 cores.
# Steps, each skipped when its result is already there (idempotent; no network after the first
# time):
#   1. a deb-src entry derived from this machine's own apt sources, if apt has none;
#   2. `apt-get source --download-only trilinos` into the cache (TRIDENT_CACHE, default
#      ~/.cache/trident), 166 MB once;
#   3. packages/kokkos extracted from the orig tarball into the cache;
#   4. configured with Kokkos_ENABLE_SERIAL and Kokkos_ENABLE_OPENMP, built and installed into
#      PREFIX (a stamp file records the recipe, so a changed recipe rebuilds).
set -euo pipefail
prefix=${1:?usage: tools/build_kokkos.sh PREFIX}
cache=${TRIDENT_CACHE:-${HOME:-/root}/.cache/trident}
recipe="kokkos 3.4.1 from trilinos 13.2.0 source; Serial+OpenMP; Release; shared"
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

log "building Kokkos (Serial + OpenMP) into $prefix"
work=$prefix.build
rm -rf "$work"
mkdir -p "$(dirname "$prefix")"
cmake -S "$src" -B "$work" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=ON -DKokkos_ENABLE_SERIAL=ON \
  -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_TESTS=OFF >"$work.log" 2>&1 ||
  { cat "$work.log"; exit 1; }
cmake --build "$work" -j "$(nproc)" >>"$work.log" 2>&1 || { tail -n 40 "$work.log"; exit 1; }
cmake --install "$work" >>"$work.log" 2>&1 || { tail -n 20 "$work.log"; exit 1; }
rm -rf "$work"
echo "$recipe" >"$stamp"
log "installed Kokkos $(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$prefix/lib/cmake/Kokkos/KokkosConfigVersion.cmake") into $prefix"
