// Host-value collectives over MPI, every call checked.
#include "comm/host_comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "core/flight_recorder.hpp"

namespace trident {

std::vector<int> world_ranks(MPI_Comm comm) {
  MPI_Group group, world;
  TRIDENT_MPI(MPI_Comm_group(comm, &group));
  TRIDENT_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int size = 0;
  TRIDENT_MPI(MPI_Group_size(group, &size));
  std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) local[static_cast<size_t>(r)] = r;
  TRIDENT_MPI(MPI_Group_translate_ranks(group, size, local.data(), world, global.data()));
  TRIDENT_MPI(MPI_Group_free(&group));
  TRIDENT_MPI(MPI_Group_free(&world));
  return global;
}

HostCollectives::HostCollectives(MPI_Comm comm, const std::string& axis)
    : comm_(comm), recorded_(FlightRecorder::instance().add_communicator(axis, world_ranks(comm))) {
  TRIDENT_MPI(MPI_Comm_size(comm_, &size_));
  TRIDENT_MPI(MPI_Comm_rank(comm_, &rank_));
}

double HostCollectives::reduce_all(double value, MPI_Op op, const char* operation) const {
  const RecordedCall done(FlightRecorder::instance().issue(recorded_, operation, sizeof value));
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, op, comm_));
  return value;
}

double HostCollectives::sum(double value) const {
  return reduce_all(value, MPI_SUM, "host_sum");
}

std::vector<double> HostCollectives::sum(const std::vector<double>& values) const {
  const RecordedCall done(
      FlightRecorder::instance().issue(recorded_, "host_sum", values.size() * sizeof(double)));
  std::vector<double> out(values.size());
  TRIDENT_MPI(MPI_Allreduce(values.data(), out.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                            MPI_SUM, comm_));
  return out;
}

double HostCollectives::max(double value) const {
  return reduce_all(value, MPI_MAX, "host_max");
}

double HostCollectives::min(double value) const {
  return reduce_all(value, MPI_MIN, "host_min");
}

std::vector<double> HostCollectives::gather(const std::vector<double>& values, int root) const {
  const RecordedCall done(
      FlightRecorder::instance().issue(recorded_, "host_gather", values.size() * sizeof(double)));
  std::vector<double> all(rank_ == root ? values.size() * static_cast<size_t>(size_) : 0);
  const int count = static_cast<int>(values.size());
  TRIDENT_MPI(
      MPI_Gather(values.data(), count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE, root, comm_));
  return all;
}

std::vector<int> HostCollectives::alltoall(const std::vector<int>& values) const {
  if (values.size() % static_cast<size_t>(size_) != 0)
    throw std::logic_error("HostCollectives::alltoall: values are not one equal part per rank");
  const RecordedCall done(
      FlightRecorder::instance().issue(recorded_, "host_alltoall", values.size() * sizeof(int)));
  std::vector<int> out(values.size());
  const int part = static_cast<int>(values.size() / size_);
  TRIDENT_MPI(MPI_Alltoall(values.data(), part, MPI_INT, out.data(), part, MPI_INT, comm_));
  return out;
}

std::string HostCollectives::broadcast(const std::string& value, int root) const {
  const RecordedCall done(
      FlightRecorder::instance().issue(recorded_, "host_broadcast", value.size()));
  std::string out = value;
  int length = static_cast<int>(out.size());
  TRIDENT_MPI(MPI_Bcast(&length, 1, MPI_INT, root, comm_));
  out.resize(static_cast<size_t>(length));
  TRIDENT_MPI(MPI_Bcast(out.data(), length, MPI_CHAR, root, comm_));
  return out;
}

std::string node_name() {
  const char* slurm = std::getenv("SLURMD_NODENAME");
  if (slurm && *slurm) return slurm;
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

std::string HostCollectives::node_names() const {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  const std::string mine = node_name();
  std::memcpy(name, mine.data(), std::min(mine.size(), sizeof name - 1));
  std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
  TRIDENT_MPI(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                            MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_));
  std::string out;
  for (int r = 0; r < size_; ++r)
    out +=
        (r ? "," : "") + std::string(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return out;
}

int HostCollectives::ranks_on_node() const {
  MPI_Comm node = MPI_COMM_NULL;
  TRIDENT_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  int ranks = 1;
  TRIDENT_MPI(MPI_Comm_size(node, &ranks));
  TRIDENT_MPI(MPI_Comm_free(&node));
  return ranks;
}

void HostCollectives::barrier() const {
  const RecordedCall done(FlightRecorder::instance().issue(recorded_, "host_barrier", 0));
  TRIDENT_MPI(MPI_Barrier(comm_));
}

void HostCollectives::agree(const std::function<void()>& work) const {
  std::string failure;
  bool failed = false;
  try {
    work();
  } catch (const std::exception& e) {
    failure = e.what();
    failed = true;
  }
  const int first = static_cast<int>(min(failed ? rank_ : size_));
  if (first == size_) return;
  throw InputError(broadcast(failure, first));
}

}  // namespace trident
