#!/usr/bin/env bash
# Installs the Debian packages trident needs, only those missing (idempotent, no-op when present).
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev
  libtrilinos-kokkos-dev libopenblas-dev libopenblas-openmp-dev
  libdnnl-dev ocl-icd-opencl-dev  # oneDNN's CMake config asks for OpenCL (its GPU runtime)
  libgtest-dev libbenchmark-dev libtomlplusplus-dev libcli11-dev libfmt-dev
  nlohmann-json3-dev  # JSON: trident env's provenance report
  libxxhash-dev  # the data files' identity in checkpoints
  python3-torch python3-h5py python3-numpy python3-pandas python3-matplotlib
  slurm-wlm munge
  bible-kjv
  procps  # pkill: the tests' signals to running ranks
)
# Node.js runs the tokenisers of tools/bpe (GPT-2 BPE, a Hugging Face model's tokenizer.json); keep
# a node that is already there.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install_deps: missing packages and not root; run as root or install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
