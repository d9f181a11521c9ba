// Windows onto a stage's parameters by layer, from the parameter table.
#include "model/stage_tensors.hpp"

#include <stdexcept>
#include <string>

namespace trident {

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const StoredTensor& flat) {
  return stage_tensors(local, layout,
                       [&](const LocalParam& p) { return flat.window(p.offset, p.numel); });
}

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where) {
  // A name the table does not have (Llama's biases, GPT-2's lm_head) binds an empty tensor.
  const auto tensor = [&](const std::string& name) {
    return local.holds(name) ? where(local.at(name)) : StoredTensor{};
  };
  const auto norm = [&](const std::string& name) {
    return NormParams{tensor(name + ".weight"), tensor(name + ".bias")};
  };
  StageTensors t;
  if (local.holds("wte")) t.wte = tensor("wte");
  t.wpe = tensor("wpe");
  for (int l = layout.first_layer; l < layout.last_layer; ++l) {
    const auto weight = [&](BlockPart part) { return tensor(block_param(l, part)); };
    const auto bias = [&](BlockPart part) { return tensor(block_param(l, part, "bias")); };
    const auto linear = [&](BlockPart part) { return LinearParams{weight(part), bias(part)}; };
    const auto block_norm = [&](BlockPart part) {
      return NormParams{weight(part), tensor(block_param(l, part, "bias"))};
    };
    // Llama's q and kv, adjacent wherever the locator puts their unit, as one [qkv_tp, C] matrix.
    const auto qkv = [&] {
      if (local.holds(block_param(l, BlockPart::kQkv))) return linear(BlockPart::kQkv);
      const StoredTensor q = weight(BlockPart::kQ), kv = weight(BlockPart::kKv);
      const StoredTensor joined = q.window(0, q.size() + kv.size());
      if (joined.window(q.size(), kv.size()).f32.data() != kv.f32.data() ||
          joined.window(q.size(), kv.size()).f16.data() != kv.f16.data())
        throw std::logic_error(block_param(l, BlockPart::kQ) + " and " +
                               block_param(l, BlockPart::kKv) + " are not adjacent");
      return LinearParams{joined, {}};
    };
    t.blocks.push_back({block_norm(BlockPart::kLn1),
                        qkv(),
                        linear(BlockPart::kAttnProj),
                        block_norm(BlockPart::kLn2),
                        linear(BlockPart::kFc),
                        linear(BlockPart::kProj),
                        {weight(BlockPart::kRouter), weight(BlockPart::kExpertsFc),
                         weight(BlockPart::kExpertsProj), weight(BlockPart::kSharedFc),
                         weight(BlockPart::kSharedProj), bias(BlockPart::kExpertsFc),
                         bias(BlockPart::kExpertsProj), bias(BlockPart::kSharedFc),
                         bias(BlockPart::kSharedProj)}});
  }
  if (layout.has_head) {
    t.lnf = norm("ln_f");
    t.head = local.holds("lm_head") ? tensor("lm_head") : t.wte;
  }
  return t;
}

}  // namespace trident
