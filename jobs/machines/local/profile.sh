# Site profile `local`: one node (a workstation, or the localhost cluster of tools/local_slurm.sh), CPU build.
# Sourced by jobs/lib/common.sh before any run; every setting says why it is here.

# Debian's OpenMPI starts under srun through PMIx; its PMI-2 path fails in MPI_Init.
SRUN_ARGS=${SRUN_ARGS:---mpi=pmix}
# The ranks of a sweep may outnumber the cores (tests oversubscribe on purpose); mpirun refuses
# that without --oversubscribe, which jobs/lib/common.sh passes, and this covers nested launches.
export OMPI_MCA_rmaps_base_oversubscribe=1
# srun starts the ranks directly, so OpenMPI cannot tell that they outnumber the cores and
# busy-polls in every wait; with 4 ranks on 2 cores a tiny-model step then took 4.7 s instead of
# 20 ms. Yielding while idle lets the rank with work run.
export OMPI_MCA_mpi_yield_when_idle=1
# Jobs run as root in containers and CI; OpenMPI refuses root without both of these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Threads per rank: THREADS_PER_RANK (jobs/lib/common.sh), 1 unless asked, since by default every
# core already runs a rank; left unbound (no BIND_THREADS), as ranks may outnumber the cores.
# Debian's python3 has h5py, numpy, pandas and matplotlib (python3-* packages); a pyenv or venv
# python earlier on PATH usually does not.
PYTHON=${PYTHON:-/usr/bin/python3}
