// The expert-parallel sizes of a layout, with the memory model's busiest rank and the all-to-all
// volume of each.
#include "plan/expert_plan.hpp"

#include "model/params.hpp"

namespace trident {

std::vector<ExpertOption> expert_options(const MemoryQuery& q) {
  std::vector<ExpertOption> out;
  const ModelConfig& m = q.model;
  if (!m.moe.enabled()) return out;
  const int ranks = q.dp * q.tp;
  const double N = static_cast<double>(q.micro_batch) * q.seq_len;
  const double element = q.precision == Precision::kFp32 ? 4.0 : 2.0;
  for (int ep = 1; ep <= ranks; ++ep) {
    if (ranks % ep != 0 || m.moe.n_experts % ep != 0) continue;
    MemoryQuery with = q;
    with.ep = ep;
    ExpertOption o;
    o.ep = ep;
    o.busiest = predict_busiest_rank(with);
    // The most MoE layers a pipeline rank holds, each exchanged per micro-batch.
    double passes = 0;
    for (int pp_rank = 0; pp_rank < q.pp; ++pp_rank) {
      double rank_passes = 0;
      for (int chunk = 0; chunk < q.virtual_stages; ++chunk) {
        const StageLayout layout = stage_layout(m, q.pp, q.virtual_stages, pp_rank, chunk, q.tp, 0);
        for (int l = layout.first_layer; l < layout.last_layer; ++l)
          if (m.moe_layer(l)) rank_passes += q.recompute.full_block(l - layout.first_layer) ? 6 : 4;
      }
      passes = std::max(passes, rank_passes);
    }
    o.exchanged_bytes =
        passes * q.micro_batches * N * m.moe.top_k * (ep - 1.0) / ep * m.n_embd * element;
    out.push_back(o);
  }
  return out;
}

}  // namespace trident
