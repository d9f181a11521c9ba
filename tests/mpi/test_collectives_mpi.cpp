// The collectives on 4 ranks through CommBuffer: fp32 and 16-bit take one path, gathers work in
// place, only Views in the execution space's memory are buffers, each both with MPI reading the
// buffers and staged through host memory (a GPU build's MPI that is not CUDA-aware); and the
// host-value collectives the driver uses.
#include <gtest/gtest.h>
#include <mpi.h>

#include <type_traits>
#include <vector>

#include "comm/comm.hpp"
#include "comm/host_comm.hpp"
#include "core/half.hpp"

using namespace trident;

namespace {

View1 filled(size_t n, float (*value)(int rank, size_t i), int rank) {
  View1 v("filled", n);
  auto h = Kokkos::create_mirror_view(v);
  for (size_t i = 0; i < n; ++i) h(i) = value(rank, i);
  Kokkos::deep_copy(v, h);
  return v;
}

}  // namespace

TEST(Collectives, OnlyViewsInTheExecutionSpaceMemoryAreBuffers) {
  using HostFloats = Kokkos::View<float*, Kokkos::HostSpace>;
  EXPECT_TRUE((std::is_constructible_v<CommBuffer, View1>));
  EXPECT_TRUE((std::is_constructible_v<CommBuffer, Vec>));
  EXPECT_TRUE((std::is_constructible_v<CommBuffer, HalfView1, Precision>));
  // A host View is a buffer only where host memory is the execution space's (a host build).
  EXPECT_EQ((std::is_constructible_v<CommBuffer, HostFloats>),
            (std::is_same_v<MemSpace, Kokkos::HostSpace>));
  EXPECT_FALSE((std::is_constructible_v<CommBuffer, float*>));  // no raw pointers
  EXPECT_FALSE((std::is_constructible_v<CommBuffer, Kokkos::View<double*, MemSpace>>));
  EXPECT_FALSE((std::is_constructible_v<CommBuffer, HalfView1>));  // 16-bit needs its format
  EXPECT_THROW(CommBuffer(HalfView1("h", 4), Precision::kFp32), std::logic_error);
}

// Every test of the MPI backend runs with both buffer accesses.
class MpiCollectives : public ::testing::TestWithParam<MpiBufferAccess> {};
INSTANTIATE_TEST_SUITE_P(Access, MpiCollectives,
                         ::testing::Values(MpiBufferAccess::kDirect, MpiBufferAccess::kStaged),
                         [](const auto& info) {
                           return info.param == MpiBufferAccess::kDirect ? "Direct" : "Staged";
                         });

TEST_P(MpiCollectives, Fp32And16BitSumsTakeOnePath) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  EXPECT_STREQ(comm.backend(),
               GetParam() == MpiBufferAccess::kDirect ? "mpi" : "mpi (host-staged)");
  const int n = comm.size(), rank = comm.rank();
  View1 x = filled(
      8, [](int r, size_t i) { return static_cast<float>(r + 1) * (i + 1); }, rank);
  comm.allreduce_sum(x);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(hx(i), n * (n + 1) / 2.0f * (i + 1));
  // bf16 / fp16 bit patterns summed as numbers of their format (small integers: exact in both),
  // not as 16-bit integers.
  for (const Precision p : {Precision::kBf16, Precision::kFp16}) {
    HalfView1 h("h", 3);
    auto hh = Kokkos::create_mirror_view(h);
    for (int i = 0; i < 3; ++i) hh(i) = to_half(static_cast<float>(rank + i), p);
    Kokkos::deep_copy(h, hh);
    comm.iallreduce_sum(CommBuffer(h, p)).wait();
    Kokkos::deep_copy(hh, h);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(from_half(hh(i), p), n * (n - 1) / 2.0f + n * i) << name_of(p) << " " << i;
  }
}

TEST_P(MpiCollectives, GathersAndReduceScatterSizeTheirBuffersByRanks) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int n = comm.size(), rank = comm.rank();
  // In place: this rank's part already sits in its slot of the whole.
  View1 whole = filled(
      2 * n,
      [](int r, size_t i) { return i / 2 == static_cast<size_t>(r) ? 10.0f * r + i % 2 : -1.0f; },
      rank);
  comm.allgather(window(whole, 2 * rank, 2), whole);
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), whole);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(hw(2 * r), 10.0f * r);
    EXPECT_EQ(hw(2 * r + 1), 10.0f * r + 1);
  }
  // 16-bit bits travel unchanged.
  HalfView1 mine("mine", 1), all("all", n);
  Kokkos::deep_copy(mine, static_cast<uint16_t>(0x3f80 + rank));
  comm.iallgather(CommBuffer(mine, Precision::kBf16), CommBuffer(all, Precision::kBf16)).wait();
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), all);
  for (int r = 0; r < n; ++r) EXPECT_EQ(ha(r), 0x3f80 + r);
  // Reduce-scatter: rank r gets the sum of everyone's part r.
  View1 send = filled(
      static_cast<size_t>(n), [](int, size_t i) { return static_cast<float>(i); }, rank);
  View1 part("part", 1);
  comm.reduce_scatter_sum(send, part);
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), part);
  EXPECT_EQ(hp(0), static_cast<float>(n * rank));
  // Uneven parts, some empty: rank r gets r + 1 elements, but the last rank none.
  std::vector<size_t> counts(n);
  size_t total = 0, first = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = r + 1 < n || n == 1 ? r + 1 : 0;
    if (r < rank) first += counts[r];
    total += counts[r];
  }
  View1 uneven = filled(
      total, [](int r, size_t i) { return static_cast<float>(i) + 0.5f * r; }, rank);
  View1 mine_sum("mine_sum", counts[rank]);
  comm.reduce_scatter_sum(uneven, mine_sum, counts);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mine_sum);
  for (size_t i = 0; i < counts[rank]; ++i)
    EXPECT_EQ(hs(i), static_cast<float>(n * (first + i)) + 0.25f * n * (n - 1));
  // The same in bf16: small integers and halves are exact.
  HalfView1 uneven16("uneven16", total), mine16("mine16", counts[rank]);
  auto h16 = Kokkos::create_mirror_view(uneven16);
  for (size_t i = 0; i < total; ++i) h16(i) = to_bf16(static_cast<float>(i % 8) + 0.5f * rank);
  Kokkos::deep_copy(uneven16, h16);
  comm.reduce_scatter_sum(CommBuffer(uneven16, Precision::kBf16),
                          CommBuffer(mine16, Precision::kBf16), counts);
  auto hm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mine16);
  for (size_t i = 0; i < counts[rank]; ++i)
    EXPECT_EQ(from_bf16(hm(i)), static_cast<float>(n * ((first + i) % 8)) + 0.25f * n * (n - 1));
}

TEST_P(MpiCollectives, PointToPointAndBroadcastMoveEveryElement) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int n = comm.size(), rank = comm.rank();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  // A ring, blocking and not, several times over: staged copies are reused, never mixed up.
  for (int round = 0; round < 3; ++round) {
    View1 out = filled(
        5, [](int r, size_t i) { return 100.0f * r + i; }, rank);
    View1 in("in", 5), in_async("in_async", 5);
    if (rank % 2 == 0) {
      comm.send(out, next, 1);
      comm.recv(in, prev, 1);
    } else {
      comm.recv(in, prev, 1);
      comm.send(out, next, 1);
    }
    Request r_recv = comm.irecv(in_async, prev, 2);
    Request r_send = comm.isend(out, next, 2);
    while (!r_recv.test()) {
    }
    r_send.wait();
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in);
    auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in_async);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(h(i), 100.0f * prev + i) << "round " << round;
      EXPECT_EQ(ha(i), 100.0f * prev + i) << "round " << round;
    }
  }
  View1 b = filled(
      3, [](int r, size_t i) { return r == 2 ? 7.0f + i : -1.0f; }, rank);
  comm.broadcast(b, 2 % n);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(hb(i), n > 2 ? 7.0f + i : -1.0f);
}

TEST_P(MpiCollectives, AllToAllVMovesUnevenPartsIncludingEmptyOnes) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int n = comm.size(), rank = comm.rank();
  // Rank s sends (s + d) % 3 elements to rank d (some parts empty), valued 100 s + 10 d + i.
  auto part = [](int s, int d) { return static_cast<size_t>((s + d) % 3); };
  std::vector<size_t> sends(n), recvs(n);
  size_t sent = 0, received = 0;
  for (int q = 0; q < n; ++q) {
    sends[q] = part(rank, q), recvs[q] = part(q, rank);
    sent += sends[q], received += recvs[q];
  }
  View1 out("out", sent + 1), in("in", received + 2);  // room to spare: counts say what moves
  auto ho = Kokkos::create_mirror_view(out);
  for (int q = 0, at = 0; q < n; ++q)
    for (size_t i = 0; i < sends[q]; ++i) ho(at++) = 100.0f * rank + 10.0f * q + i;
  Kokkos::deep_copy(out, ho);
  Kokkos::deep_copy(in, -1.0f);
  comm.alltoallv(out, sends, in, recvs);
  auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in);
  size_t at = 0;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < recvs[q]; ++i, ++at) EXPECT_EQ(hi(at), 100.0f * q + 10.0f * rank + i);
  EXPECT_EQ(hi(received), -1.0f) << "nothing past the received parts";
  // 16-bit rows travel as their bits.
  HalfView1 out16("out16", sent), in16("in16", received);
  Kokkos::deep_copy(out16, uint16_t{0x3f80});
  comm.alltoallv(CommBuffer(out16, Precision::kBf16), sends, CommBuffer(in16, Precision::kBf16),
                 recvs);
  auto h16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in16);
  for (size_t i = 0; i < received; ++i) EXPECT_EQ(h16(i), 0x3f80);
  // Host counts for the exchange: part r of every rank's vector goes to rank r.
  const HostCollectives host(MPI_COMM_WORLD);
  std::vector<int> counts(2 * static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) counts[2 * q] = rank, counts[2 * q + 1] = q;
  const std::vector<int> got = host.alltoall(counts);
  for (int q = 0; q < n; ++q) {
    EXPECT_EQ(got[2 * q], q);
    EXPECT_EQ(got[2 * q + 1], rank);
  }
}

TEST(Collectives, MpiReadsHostMemoryDirectlyAndDeviceMemoryAsTheMpiAllows) {
#if defined(KOKKOS_ENABLE_CUDA)
  setenv("TRIDENT_MPI_CUDA_AWARE", "0", 1);
  EXPECT_EQ(mpi_buffer_access(), MpiBufferAccess::kStaged);
  setenv("TRIDENT_MPI_CUDA_AWARE", "1", 1);
  EXPECT_EQ(mpi_buffer_access(), MpiBufferAccess::kDirect);
#else
  setenv("TRIDENT_MPI_CUDA_AWARE", "0", 1);  // says nothing about host memory
  EXPECT_EQ(mpi_buffer_access(), MpiBufferAccess::kDirect);
#endif
  unsetenv("TRIDENT_MPI_CUDA_AWARE");
}

TEST(HostCollectives, ReduceGatherAndBroadcastHostValues) {
  const HostCollectives world(MPI_COMM_WORLD);
  const int n = world.size(), rank = world.rank();
  EXPECT_EQ(world.sum(rank + 1.0), n * (n + 1) / 2.0);
  EXPECT_EQ(world.max(rank), n - 1.0);
  EXPECT_EQ(world.min(rank), 0.0);
  const std::vector<double> gathered = world.gather({1.0 * rank, 2.0 * rank});
  if (rank == 0) {
    ASSERT_EQ(gathered.size(), 2u * n);
    for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[2 * r + 1], 2.0 * r);
  } else {
    EXPECT_TRUE(gathered.empty());
  }
  EXPECT_EQ(world.broadcast(rank == 0 ? "runs/x/step_000010.h5" : "ignored"),
            "runs/x/step_000010.h5");
  EXPECT_EQ(world.broadcast(rank == 0 ? "" : "ignored"), "");
  EXPECT_GE(world.ranks_on_node(), 1);
  EXPECT_LE(world.ranks_on_node(), n);
}
