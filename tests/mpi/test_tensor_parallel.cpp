// Tensor parallelism against its serial twin on 2 and 4 ranks: from the same seed and batch,
// the tp-sliced model gives the serial loss, its vocabulary slice of the serial logits, and
// every gradient shard equal to the serial gradient at the shard's global positions.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>

#include "comm/comm.hpp"
#include "core/hash.hpp"
#include "model/gpt.hpp"

using namespace trident;

namespace {

ModelConfig model() {
  // L, C, NH, V, block; V is not a multiple of tp: padding must stay out of loss and gradients.
  return ModelConfig::gpt2(2, 16, 4, 23, 8);
}

void check_against_serial(int tp) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm tp_comm;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank / tp, world_rank, &tp_comm);
  MpiCommunicator comm(tp_comm);
  const ModelConfig m = model();
  const int B = 2, T = 8, N = B * T;
  std::vector<int32_t> in(N), tg(N);
  for (int i = 0; i < N; ++i) {
    in[i] = static_cast<int32_t>(mix64(i) % m.vocab_size);
    tg[i] = static_cast<int32_t>(mix64(i + 99) % m.vocab_size);
  }
  MemoryLedger l1, l2;
  GptStage serial(m, whole_model(m), nullptr, l1, B, T, 1);
  StageLayout layout = whole_model(m);
  layout.tp_rank = comm.rank();
  layout.tp_size = tp;
  GptStage sliced(m, layout, &comm, l2, B, T, 1);
  serial.init_params(11);
  sliced.init_params(11);
  serial.zero_grads();
  sliced.zero_grads();
  const double loss_serial = serial.forward(0, in.data(), tg.data(), B, T);
  const double loss_sliced = sliced.forward(0, in.data(), tg.data(), B, T);
  EXPECT_NEAR(loss_sliced, loss_serial, 1e-5 * std::abs(loss_serial));
  // This rank's logits are columns [rank * V_tp, ...) of the serial ones.
  const int v_tp = static_cast<int>(sliced.logits(0).size() / N);
  const int v_all = static_cast<int>(serial.logits(0).size() / N);
  const std::vector<float> ls = host_values(serial.logits(0), 0, static_cast<size_t>(N) * v_all);
  const std::vector<float> lp = host_values(sliced.logits(0), 0, static_cast<size_t>(N) * v_tp);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < v_tp; ++v) {
      const int global = comm.rank() * v_tp + v;
      if (global < m.vocab_size) {
        EXPECT_NEAR(lp[n * v_tp + v], ls[n * v_all + global], 1e-5);
      }
    }
  serial.backward(0, 1.0f / N, {});
  sliced.backward(0, 1.0f / N, {});
  auto gs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), serial.grads());
  auto gp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sliced.grads());
  for (const LocalParam& p : sliced.local().params()) {
    const LocalParam& whole = serial.local().at(p.spec->name);
    double max_ref = 1e-12, max_err = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t g = sliced.local().global_index(p, i);
      const double mine = gp(p.offset + i);
      if (g < 0) {
        EXPECT_EQ(mine, 0.0) << "padding row of " << p.spec->name << " has a gradient";
        continue;
      }
      const double ref = gs(whole.offset + g);
      max_ref = std::max(max_ref, std::abs(ref));
      max_err = std::max(max_err, std::abs(mine - ref));
    }
    EXPECT_LE(max_err, 1e-5 * max_ref) << p.spec->name << " tp=" << tp << " rank " << comm.rank();
  }
  MPI_Comm_free(&tp_comm);
}

}  // namespace

TEST(TensorParallel, TwoRanksMatchSerial) {
  check_against_serial(2);
}

TEST(TensorParallel, FourRanksMatchSerial) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size % 4, 0) << "run with a multiple of 4 ranks";
  check_against_serial(4);
}
