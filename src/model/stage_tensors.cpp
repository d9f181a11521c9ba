// Windows onto a stage's parameters by layer, from the parameter table.
#include "model/stage_tensors.hpp"

#include <string>

namespace trident {

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const StoredTensor& flat) {
  return stage_tensors(local, layout,
                       [&](const LocalParam& p) { return flat.window(p.offset, p.numel); });
}

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where) {
  const auto tensor = [&](const std::string& name) { return where(local.at(name)); };
  const auto norm = [&](const std::string& name) {
    return NormParams{tensor(name + ".weight"), tensor(name + ".bias")};
  };
  const auto linear = [&](const std::string& name) {
    return LinearParams{tensor(name + ".weight"), tensor(name + ".bias")};
  };
  StageTensors t;
  if (local.holds("wte")) t.wte = tensor("wte");
  if (layout.has_embedding) t.wpe = tensor("wpe");
  for (int l = layout.first_layer; l < layout.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.blocks.push_back({norm(h + "ln_1"), linear(h + "attn.qkv"), linear(h + "attn.proj"),
                        norm(h + "ln_2"), linear(h + "mlp.fc"), linear(h + "mlp.proj")});
  }
  if (layout.has_head) t.lnf = norm("ln_f");
  return t;
}

}  // namespace trident
