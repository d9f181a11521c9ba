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
# The analysis interpreter is left to jobs/lib/common.sh: python3 on PATH when it has h5py, numpy,
# pandas and matplotlib, else Debian's /usr/bin/python3 (python3-* packages); a pyenv or venv
# python earlier on PATH usually lacks them.
# True when every node of the job is this host (all of a local_slurm.sh cluster's slurmds are).
local_nodes_share_this_host() {
  local node host
  host=$(hostname -s)
  for node in $(scontrol show hostnames "${SLURM_JOB_NODELIST-}" 2>/dev/null); do
    [[ $(scontrol show node "$node" 2>/dev/null | grep -o 'NodeHostName=[^ ]*' | cut -d= -f2) == "$host" ]] ||
      return 1
  done
}
# A multi-node job on tools/local_slurm.sh's cluster: its nodes are slurmds on this one host, so
# their ranks share a hostname, and OpenMPI's shared-memory transport takes ranks of different
# nodes for neighbours (it crashed in MPI_Cart_create). TCP between every pair then, unless the
# job's environment says otherwise (a comma in a value cannot pass through sbatch --export=NAME=..,
# so the profile sets it rather than the command line), over the loopback interface, since every
# peer is on this host (a connect to this VM's own eth0 address once failed and crashed a rank).
if ((${SLURM_JOB_NUM_NODES:-1} > 1)) && [[ -z ${OMPI_MCA_btl-} ]] &&
  local_nodes_share_this_host; then
  export OMPI_MCA_btl=self,tcp
  [[ -z ${OMPI_MCA_btl_tcp_if_exclude-} ]] &&
    export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-lo}
fi
