# Site profile template for a GPU cluster (4-8 GPUs per node, InfiniBand): copy to jobs/machines/<site>/ and adapt.
# Sourced by jobs/lib/common.sh before any run; every setting says why it is here. Use it with
# `SITE=gpu-cluster GPUS_PER_NODE=4 sbatch --nodes=8 --ntasks-per-node=4 --gpus-per-node=4 ...`.

# The toolchain trident was built with: the same compiler, MPI, CUDA and HDF5 at run time, or
# ranks load mismatched libraries. Names differ per site (`module avail`).
if command -v module >/dev/null 2>&1; then
  module load gcc cuda openmpi hdf5/parallel python
fi
# The CUDA build (make build-cuda), unless TRIDENT names another program: a GPU site runs the GPU
# build; each rank's banner line names the GPU it got (its PCI address), and the job log shows
# trident's warning when ranks of one node share a GPU.
TRIDENT=${TRIDENT:-$TRIDENT_ROOT/build-cuda/src/trident}
# Scaling studies split each step into phases (compute against communication): on a GPU that
# needs a device fence at every phase change (run.phase_fences, docs/gpus.md), unless SETS says
# otherwise.
[[ " ${SETS-} " == *" run.phase_fences="* ]] || SETS="${SETS:+$SETS }run.phase_fences=every_step"
# One rank per GPU, each bound to the cores nearest its GPU: srun's --gpus-per-task gives every
# rank its own device (Kokkos then uses device 0 of what it sees), and closest binding keeps host
# buffers on the GPU's NUMA node.
SRUN_ARGS=${SRUN_ARGS:---mpi=pmix --gpus-per-task=1 --gpu-bind=closest --cpu-bind=cores}
# NCCL carries tp (and dp inside a node) collectives. These say which network to use, since a
# wrong guess (e.g. the management Ethernet) is slow without failing:
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-ib0}  # bootstrap over the InfiniBand interface
export NCCL_IB_HCA=${NCCL_IB_HCA:-mlx5}               # RDMA through the Mellanox HCAs
# Lets NCCL read from and write to GPU memory directly over the HCA when both hang off the same
# CPU host bridge (PHB), not only the same PCIe switch.
export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-PHB}
# NCCL's warnings in every run's trident.log; NCCL_DEBUG=INFO also prints its choice of rings,
# transports and interfaces, the first thing to read when a scaling curve bends.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# Host threads per rank: THREADS_PER_RANK, from sbatch --cpus-per-task (jobs/lib/common.sh);
# --cpu-bind=cores above gives each rank its own cores, so its OpenMP threads are pinned to them.
BIND_THREADS=${BIND_THREADS:-1}
# The analysis interpreter: jobs/lib/common.sh takes python3 on PATH (after `module load python`)
# or /usr/bin/python3, whichever has h5py, numpy, pandas and matplotlib; set PYTHON here to pin one.
