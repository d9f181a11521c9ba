// Windows onto a stage's parameters by layer, from the parameter table.
#include "model/stage_tensors.hpp"

#include <string>

namespace trident {

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const View1& flat) {
  return stage_tensors(local, layout, [&](const LocalParam& p) { return flat.data() + p.offset; });
}

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where) {
  const auto vec = [&](const std::string& name) {
    const LocalParam& p = local.at(name);
    return Vec(where(p), p.numel);
  };
  const auto mat = [&](const std::string& name) {
    const LocalParam& p = local.at(name);
    return Mat(where(p), p.shape[0], p.shape[1]);
  };
  const auto norm = [&](const std::string& name) {
    return NormParams{vec(name + ".weight"), vec(name + ".bias")};
  };
  const auto linear = [&](const std::string& name) {
    return LinearParams{mat(name + ".weight"), vec(name + ".bias")};
  };
  StageTensors t;
  if (local.holds("wte")) t.wte = mat("wte");
  if (layout.has_embedding) t.wpe = mat("wpe");
  for (int l = layout.first_layer; l < layout.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.blocks.push_back({norm(h + "ln_1"), linear(h + "attn.qkv"), linear(h + "attn.proj"),
                        norm(h + "ln_2"), linear(h + "mlp.fc"), linear(h + "mlp.proj")});
  }
  if (layout.has_head) t.lnf = norm("ln_f");
  return t;
}

}  // namespace trident
