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
  const auto linear = [&](const std::string& name) {
    return LinearParams{tensor(name + ".weight"), tensor(name + ".bias")};
  };
  // Llama's q and kv, adjacent wherever the locator puts their unit, as one [qkv_tp, C] matrix.
  const auto qkv = [&](const std::string& h) {
    if (local.holds(h + "attn.qkv.weight")) return linear(h + "attn.qkv");
    const StoredTensor q = tensor(h + "attn.q.weight"), kv = tensor(h + "attn.kv.weight");
    const StoredTensor joined = q.window(0, q.size() + kv.size());
    if (joined.window(q.size(), kv.size()).f32.data() != kv.f32.data() ||
        joined.window(q.size(), kv.size()).f16.data() != kv.f16.data())
      throw std::logic_error(h + "attn.q.weight and attn.kv.weight are not adjacent");
    return LinearParams{joined, {}};
  };
  StageTensors t;
  if (local.holds("wte")) t.wte = tensor("wte");
  t.wpe = tensor("wpe");
  for (int l = layout.first_layer; l < layout.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.blocks.push_back({norm(h + "ln_1"),
                        qkv(h),
                        linear(h + "attn.proj"),
                        norm(h + "ln_2"),
                        linear(h + "mlp.fc"),
                        linear(h + "mlp.proj"),
                        {tensor(h + "moe.router.weight"), tensor(h + "moe.experts.fc.weight"),
                         tensor(h + "moe.experts.proj.weight"), tensor(h + "moe.shared.fc.weight"),
                         tensor(h + "moe.shared.proj.weight")}});
  }
  if (layout.has_head) {
    t.lnf = norm("ln_f");
    t.head = local.holds("lm_head") ? tensor("lm_head") : t.wte;
  }
  return t;
}

}  // namespace trident
