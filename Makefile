# Thin entry points over CMake: `make run` trains the default model, `make test` runs every test.
BUILD ?= build
NP ?= 2
JOBS ?= 2
CONFIG ?= inputs/small.toml
TRIDENT := $(BUILD)/src/trident

# Kokkos with OpenMP, built from Debian's trilinos source (tools/build_kokkos.sh) into the build
# directory; KOKKOS_ROOT=/path/to/kokkos uses a site Kokkos instead (3.4 or 4.x).
KOKKOS_ROOT ?= $(abspath $(BUILD))/_kokkos

# OpenMPI refuses to run as root without both of these. R ranks x T threads: NP=R
# THREADS_PER_RANK=T, one OpenMP pool of T threads per rank that runs the Kokkos kernels and the
# GEMMs alike (OpenBLAS's OpenMP flavour).
THREADS_PER_RANK ?= 1
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1
export OPENBLAS_NUM_THREADS ?= $(THREADS_PER_RANK)
export OMP_NUM_THREADS ?= $(THREADS_PER_RANK)
export OMP_PROC_BIND ?= false
# OpenMPI binds each rank to one core when the ranks fit the cores: with T threads per rank they
# would all share it (1 rank x 2 threads ran at one core's speed). Give each rank T cores, or
# leave the ranks unbound when R x T oversubscribes. Idle OpenMP threads wait as libgomp does by
# default (spin a while, then sleep) on cores of their own: sleeping at once (PASSIVE) made the
# gpt2-124m step 10-20% slower at 1 x 2, from waking the threads for each of its ~700 kernels and
# GEMMs. When R x T oversubscribes, they sleep at once, leaving the core to another rank.
ifeq ($(THREADS_PER_RANK),1)
  MPIRUN_BIND ?=
# (nproc obeys OMP_NUM_THREADS, which make 4.4 passes to $(shell): count without it.)
else ifeq ($(shell [ $$(( $(NP) * $(THREADS_PER_RANK) )) -le $$(env -u OMP_NUM_THREADS nproc) ] && echo fits),fits)
  MPIRUN_BIND ?= --map-by slot:PE=$(THREADS_PER_RANK) --bind-to core
else
  MPIRUN_BIND ?= --bind-to none
  export OMP_WAIT_POLICY ?= PASSIVE
endif

# The OpenBLAS kernel `make run` launches its ranks with when OPENBLAS_CORETYPE is not set: the one
# that fits this CPU's vector unit (tools/blas_kernel.sh: SkylakeX with AVX-512, Haswell with
# AVX2). Debian's OpenBLAS 0.3.21 picks by CPU model, and on CPUs newer than it falls back to its
# generic Prescott kernel (GEMMs 4-5x slower). An OPENBLAS_CORETYPE already set is kept;
# BLAS_KERNEL=auto leaves the choice to OpenBLAS. `make test` never sets it.
BLAS_KERNEL ?= $(if $(OPENBLAS_CORETYPE),,$(shell bash tools/blas_kernel.sh))
RUN_BLAS_ENV := $(if $(filter-out auto,$(BLAS_KERNEL)),-x OPENBLAS_CORETYPE=$(BLAS_KERNEL))

# The GPU build (CUDA Kokkos, cuBLAS, NCCL) in BUILD_CUDA, for sm_80 and sm_90: it compiles and
# links with a CUDA toolkit and no GPU. Host code for x86-64-v3 (AVX2), not this machine's CPU: the
# binaries go to GPU nodes (tools/device_bundle.sh). Its sources are compiled eight to a unit
# (CMake's unity build): every nvcc unit spends ~11 s on Kokkos' headers alone, and batching
# halved the tree's build time here (13.5 to 7 min on 2 cores).
BUILD_CUDA ?= build-cuda
# What a GPU node runs (the bundle's programs); `cmake --build build-cuda` builds the rest too.
CUDA_PROGRAMS ?= trident trident_unit_tests trident_step_bench
CUDA_ROOT ?= /usr/local/cuda
KOKKOS_CUDA_ROOT ?= $(abspath $(BUILD_CUDA))/_kokkos
CUDA_HOST_ARCH ?= x86-64-v3
HAVE_CUDA := $(shell [ -x $(CUDA_ROOT)/bin/nvcc ] && \
  { [ -e $(CUDA_ROOT)/include/nccl.h ] || [ -e /usr/include/nccl.h ]; } && echo yes)

# A new build tree is generated for Ninja, which compiles the objects of every target at once (Make
# waits for a library before compiling its dependents' objects); a tree already configured keeps
# its generator.
generator = $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja)

.PHONY: all deps kokkos configure program build build-cuda build-sanitize data data-bpe tokenizers \
  run test bench clean

all: build

deps:
	@bash tools/install_deps.sh

kokkos: deps
	@if [ "$(KOKKOS_ROOT)" = "$(abspath $(BUILD))/_kokkos" ]; then \
	  bash tools/build_kokkos.sh $(KOKKOS_ROOT); fi

configure: deps kokkos
	@cmake -S . -B $(BUILD) $(call generator,$(BUILD)) -DCMAKE_BUILD_TYPE=Release \
	  -DKokkos_ROOT=$(KOKKOS_ROOT) > $(BUILD).configure.log 2>&1 || \
	  { cat $(BUILD).configure.log; exit 1; }

# The `trident` program alone, without the tests and benchmarks `build` adds: what `make data`,
# `make run` and the jobs/ studies need.
program: configure
	@cmake --build $(BUILD) -j $(JOBS) --target trident

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

build-cuda: deps
	@CUDA_ROOT=$(CUDA_ROOT) bash tools/build_kokkos.sh $(KOKKOS_CUDA_ROOT) cuda
	@cmake -S . -B $(BUILD_CUDA) $(call generator,$(BUILD_CUDA)) -DCMAKE_BUILD_TYPE=Release \
	  -DKokkos_ROOT=$(KOKKOS_CUDA_ROOT) -DCMAKE_CXX_COMPILER=$(KOKKOS_CUDA_ROOT)/bin/trident-nvcc \
	  -DCUDAToolkit_ROOT=$(CUDA_ROOT) -DTRIDENT_HOST_ARCH=$(CUDA_HOST_ARCH) \
	  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 > $(BUILD_CUDA).configure.log 2>&1 || \
	  { cat $(BUILD_CUDA).configure.log; exit 1; }
	@cmake --build $(BUILD_CUDA) -j $(JOBS) --target $(CUDA_PROGRAMS)

# trident's own code under AddressSanitizer and UndefinedBehaviorSanitizer, in BUILD_SANITIZE,
# on the same Kokkos: the sanitize.* tests run the crafted-checkpoint corpus through it.
BUILD_SANITIZE ?= build-sanitize
build-sanitize: kokkos
	@cmake -S . -B $(BUILD_SANITIZE) $(call generator,$(BUILD_SANITIZE)) \
	  -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT=$(KOKKOS_ROOT) \
	  -DTRIDENT_SANITIZE=address,undefined -DTRIDENT_BUILD_TESTS=OFF -DTRIDENT_BUILD_BENCH=OFF \
	  > $(BUILD_SANITIZE).configure.log 2>&1 || { cat $(BUILD_SANITIZE).configure.log; exit 1; }
	@cmake --build $(BUILD_SANITIZE) -j $(JOBS) --target trident

data: program
	@bash tools/prepare_kjv.sh $(TRIDENT) data

# Optional: the same corpus in GPT-2 BPE tokens (V = 50257) through the npm gpt-tokenizer.
data-bpe: program
	@bash tools/prepare_kjv.sh $(TRIDENT) data gpt2

# The npm packages of tools/bpe: gpt-tokenizer (data-bpe) and Hugging Face's tokenizers, which
# `trident prepare --tokenizer` and `generate` run a model's own tokenizer with.
tokenizers:
	@[ -d tools/bpe/node_modules/tokenizers ] && [ -d tools/bpe/node_modules/gpt-tokenizer ] || \
	  npm install --prefix tools/bpe --no-audit --no-fund --loglevel=error

run: data
	mpirun -np $(NP) --oversubscribe $(MPIRUN_BIND) $(RUN_BLAS_ENV) $(TRIDENT) train \
	  --config $(CONFIG) --overwrite
	@echo "--- sample from the newest checkpoint:"
	@$(if $(RUN_BLAS_ENV),OPENBLAS_CORETYPE=$(BLAS_KERNEL)) $(TRIDENT) generate \
	  --ckpt "$$(ls -1 runs/small/checkpoints/step_*.h5 | tail -n 1)" \
	  --prompt "And God said" --tokens 300

# With a CUDA toolkit here, the GPU build is compiled too, and the cuda.* tests check it.
test: build data tokenizers build-sanitize $(if $(HAVE_CUDA),build-cuda)
	cd $(BUILD) && ctest --output-on-failure --timeout 900 -j $(JOBS)

bench: build data
	bash bench/step_vs_pytorch.sh $(BUILD)

# Every row of the papers' tables (docs/paper-reproduction.md) through `trident plan`, against the
# published numbers and each paper's tolerance: `make paper PAPER=NAME` (jobs/reproduce.sh --help).
PAPER ?= all
.PHONY: paper
paper: program
	@TRIDENT=$(TRIDENT) bash jobs/reproduce.sh $(PAPER)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(BUILD_CUDA) $(BUILD_CUDA).configure.log \
	  $(BUILD_SANITIZE) $(BUILD_SANITIZE).configure.log
