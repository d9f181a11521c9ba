// Data-parallel strategies (plain DP, ZeRO-1, -2, -3) behind one interface: each owns one model
// chunk's gradient, optimizer and master-weight buffers, reduces the gradient over dp, adds its
// share to the global norm, steps the optimizer, gathers parameters and hands its part of a
// checkpoint. Offload (optimizer states or ZeRO-3 parameters in files) is a property of the
// strategy, not another one. The trainer calls the interface and never asks which buffers exist.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/comm.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "kernels/adamw.hpp"
#include "model/gpt.hpp"
#include "model/partition.hpp"
#include "optim/adamw.hpp"
#include "optim/master_weights.hpp"
#include "parallel/data/grad_buckets.hpp"
#include "parallel/data/options.hpp"
#include "parallel/zero/grad_shards.hpp"
#include "parallel/zero/param_shards.hpp"

namespace trident {

using ParamFilter = std::function<bool(const LocalParam&)>;

struct DataParallelSettings {
  ZeroStage zero = ZeroStage::kNone;
  Precision precision = Precision::kFp32;    // 16-bit parameters: master weights beside them
  Precision grad_reduce = Precision::kFp32;  // the format gradients are summed in over dp
  DpSync sync = DpSync::kSync;
  // Gradient elements per bucket: ZeRO 0/1's all-reduce, ZeRO-2/3's block of streamed rows.
  size_t bucket_elements = 1;
  AdamWSettings adamw;
  MomentStorage moments;    // resident, or streamed from files (optimizer offload)
  std::string params_file;  // ZeRO-3 parameter offload: the shard's file; empty: resident
  uint64_t seed = 0;        // counter-based initial values
};

// A chunk's parameters and AdamW moments in full-layout buffers (flat positions): what a
// checkpoint writes and what loading fills.
struct ChunkState {
  View1 params, m, v;
};

class DataParallelStrategy {
 public:
  // How a stage lays out its own buffers under `zero` over `dp` replicas (ZeRO pads every unit
  // to dp equal shards, and at stage 2 / 3 keeps no whole gradient / parameter buffer).
  // `expert_dp`: the experts' replicas where they are a group of their own (expert parallelism,
  // or MoE layers on tp ranks), 0 where the experts' replicas are the dp ranks.
  static StageBuffers stage_buffers(ZeroStage zero, int dp, int expert_dp = 0);
  // The strategy for `settings.zero`, over a stage built with stage_buffers(): this rank is
  // `dp.rank()` of `dp.size()` replicas. Initialises the parameters (and master weights) from
  // settings.seed.
  // Given `expert_dp` (expert parallelism, or MoE layers whose tensor-parallel ranks route their
  // own tokens), the experts' gradients are summed over it, the ranks that hold the same experts,
  // and under ZeRO their units are sharded over it.
  static std::unique_ptr<DataParallelStrategy> create(GptStage& stage, Communicator& dp,
                                                      const DataParallelSettings& settings,
                                                      MemoryLedger& ledger, PhaseTimer& timer,
                                                      Communicator* expert_dp = nullptr);
  virtual ~DataParallelStrategy() = default;

  // Zeroes the gradients before a step's first backward.
  virtual void zero_grads();
  // Before a backward pass: `reduce` when its gradients are final and are to be summed over dp
  // during it (the step's last micro-batch of a synchronous step).
  virtual void before_backward(bool reduce) { (void)reduce; }
  // After the step's last backward: the reduction over dp complete (when `reduce`).
  virtual void finish_reduction(bool reduce) { (void)reduce; }
  // Advances non-blocking reductions in flight (MPI moves them only inside MPI calls).
  virtual void progress() {}
  // The part of parameter p's unit gradient this rank holds after the reduction: all of p, or
  // this rank's shard of the unit. The tied embedding sums it between first and last stage.
  virtual Vec held_gradient(const LocalParam& p) const = 0;
  // The whole gradient this rank holds after the reduction (the overflow check reads it).
  virtual View1 held_gradients() const = 0;
  // Adds to `sum` the squares of the held gradient of every parameter `counted` accepts.
  void add_grad_squares(double& sum, const ParamFilter& counted) const;
  // total() = those squares (0 + each in the same order: the same bits), left on the device.
  void grad_squares_on_device(const ParamFilter& counted,
                              const Kokkos::View<double, MemSpace>& total) const;
  // AdamW reads the gradient's scale at `scale` (device memory; null: step()'s argument again).
  // False, and nothing changed, where it cannot (moments streamed through host memory).
  bool read_grad_scale_from(const float* scale);
  // True when dp ranks hold different parts of the gradient: the global norm's squares are then
  // summed over dp as well as over the model-parallel ranks.
  virtual bool gradient_sharded() const { return false; }
  // AdamW on this rank's part, the gradient multiplied by `grad_scale` (clipping, loss scale);
  // 16-bit parameters are rounded from the updated master weights.
  virtual void step(double lr, float grad_scale) = 0;
  // After the step: every replica holds the whole updated parameters again (ZeRO-1/2 gather
  // the updated shards; plain DP has nothing to do; ZeRO-3 gathers units only when needed).
  virtual void gather_params() {}
  // dp.sync = async: waits for the previous step's reduction and puts its result where step()
  // reads the gradient; starts reducing this step's. False when nothing was in flight.
  virtual bool exchange_async_gradients();
  // dp.sync = local_sgd: parameters and AdamW moments averaged over the dp replicas.
  virtual void average_replicas();
  // The gradient at its flat positions (valid where this rank holds it): --dump-grads.
  virtual View1 gradients_at_flat_positions() const = 0;
  // Parameters (fp32: the master weights under 16-bit storage) and moments in full-layout
  // buffers, valid at the elements this rank owns: what a checkpoint writes. Nothing gathered.
  ChunkState checkpoint_state() const;
  // Loads what checkpoint_state() produced (from a checkpoint of any layout) into the buffers;
  // AdamW continues from `adam_steps` (its bias correction).
  void restore(const ChunkState& state, int adam_steps);
  int steps_taken() const { return optimizer_->steps_taken(); }

 protected:
  DataParallelStrategy(GptStage& stage, Communicator& dp, const DataParallelSettings& settings,
                       PhaseTimer& timer, Communicator* expert_dp = nullptr);
  // Builds master weights (16-bit storage, around the `compute` copy of the parameters) and AdamW
  // over this rank's owned segments; called by the concrete strategies once the parameters are
  // initialised.
  void build_optimizer(MemoryLedger& ledger, FileStore* offloaded_params,
                       const RoundedCopy& compute);
  // The parameters a checkpoint stores (fp32 master weights under 16-bit storage) at flat
  // positions, valid where owned; and their loaded values back into every buffer that holds them.
  virtual View1 owned_params_at_flat_positions() const;
  virtual void restore_params(const View1& full);
  // ZeRO-1/2: every replica all-gathers the updated shards of every unit.
  void gather_updated_shards();
  // Queues in squares_ the held gradient (or this rank's part of it) of every parameter `counted`
  // accepts, in parameter order.
  virtual void queue_grad_squares(const ParamFilter& counted) const = 0;

  GptStage& stage_;
  Communicator& dp_;
  DataParallelSettings settings_;
  PhaseTimer& timer_;
  // ZeRO: every unit split into equal parts over its group (groups_.parts), this rank's the
  // index-th; the experts' replicas' communicator where experts have a group of their own.
  ShardGroups groups_;
  Communicator* expert_dp_ = nullptr;
  std::unique_ptr<MasterWeights> master_;  // 16-bit storage: the weights AdamW updates
  std::unique_ptr<AdamW> optimizer_;
  mutable kernels::SquareSums squares_;  // add_grad_squares: one slot per local parameter
};

// ZeRO-0: replicated everything; gradients all-reduced over dp in buckets during backward.
class PlainDataParallel : public DataParallelStrategy {
 public:
  PlainDataParallel(GptStage& stage, Communicator& dp, const DataParallelSettings& settings,
                    MemoryLedger& ledger, PhaseTimer& timer, Communicator* expert_dp = nullptr);
  void before_backward(bool reduce) override { buckets_->arm(reduce); }
  void finish_reduction(bool reduce) override;
  void progress() override {
    for (Request& r : async_pending_) r.test();
  }
  Vec held_gradient(const LocalParam& p) const override;
  View1 held_gradients() const override { return stage_.grads(); }
  void queue_grad_squares(const ParamFilter& counted) const override;
  void step(double lr, float grad_scale) override;
  bool exchange_async_gradients() override;
  void average_replicas() override;
  View1 gradients_at_flat_positions() const override { return stage_.grads(); }

 private:
  // f(group, begin, end) over [first, first + n) of the flat layout, cut where the experts'
  // ranges (summed over their replicas, expert_dp_) meet the dense ones (over dp).
  void by_group(int64_t first, int64_t n,
                const std::function<void(Communicator&, int64_t, int64_t)>& f) const;

  std::unique_ptr<GradBuckets> buckets_;
  std::vector<Segment> experts_;  // the expert tensors' ranges, ascending (expert_dp_ set)
  View1 async_grads_;             // dp.sync = async: the gradient whose reduction is in flight
  std::vector<Request> async_pending_;  // that reduction, per group range
  bool async_in_flight_ = false;
};

// ZeRO-1: as plain DP, but each replica keeps AdamW moments (and master weights) for its shard of
// every unit only, updates that shard and all-gathers the updated shards.
class Zero1 final : public PlainDataParallel {
 public:
  using PlainDataParallel::PlainDataParallel;
  void gather_params() override { gather_updated_shards(); }
};

// ZeRO-2: gradients too are sharded: each unit's gradient is reduce-scattered as soon as backward
// finishes it; only the shard and a few units' working buffers are resident.
class Zero2 : public DataParallelStrategy {
 public:
  Zero2(GptStage& stage, Communicator& dp, const DataParallelSettings& settings,
        MemoryLedger& ledger, PhaseTimer& timer, Communicator* expert_dp = nullptr);
  void zero_grads() override;
  Vec held_gradient(const LocalParam& p) const override;
  View1 held_gradients() const override { return grad_shards_->shard(); }
  void queue_grad_squares(const ParamFilter& counted) const override;
  bool gradient_sharded() const override { return true; }
  void step(double lr, float grad_scale) override;
  void gather_params() override { gather_updated_shards(); }
  View1 gradients_at_flat_positions() const override;

 protected:
  std::unique_ptr<ParamShards> param_shards_;  // ZeRO-3 only (settings.zero = kParameters)
  std::unique_ptr<GradShards> grad_shards_;
};

// ZeRO-3: parameters sharded as well, each unit all-gathered just before forward or backward
// reads it (the next one prefetched), optionally kept in a file (parameter offload).
class Zero3 final : public Zero2 {
 public:
  using Zero2::Zero2;  // settings.zero = kParameters: the parameters are sharded too
  void step(double lr, float grad_scale) override;
  void gather_params() override {}

 protected:
  View1 owned_params_at_flat_positions() const override;
  void restore_params(const View1& full) override;
};

}  // namespace trident
