// ZeRO's hooks between a stage's layers.
#include "model/unit_hooks.hpp"

namespace trident {

void UnitHooks::need(const std::string& name, const std::string& next) {
  if (on_unit_needed) on_unit_needed(unit_index(name), next.empty() ? -1 : unit_index(next));
}

// No fences before a hook: communicators order themselves against the kernels launched before
// them, and kernels after them run on the same stream.
void UnitHooks::unit_done(const std::string& first_param) const {
  if (on_unit_done) on_unit_done(unit_index(first_param));
}

void UnitHooks::grads_ready_from(const std::string& param) const {
  if (on_grads_ready) on_grads_ready(param.empty() ? 0 : local_.at(param).offset);
}

std::string UnitHooks::unit_param(int i, int part) const {
  if (i < 0 || i >= shape_.blocks()) return "";
  return block_unit_first_param(shape_.model, shape_.layout.first_layer + i, part);
}

std::string UnitHooks::first_backward_unit(int i) const {
  return unit_param(i, shape_.buffers.recompute.full_block(i) ? 0 : kUnitsPerBlock - 1);
}

}  // namespace trident
