// ZeRO's and 16-bit storage's hooks between a stage's layers.
#include "model/unit_hooks.hpp"

#include <algorithm>

#include "kernels/cast.hpp"

namespace trident {

UnitHooks::UnitHooks(const StageShape& shape, const LocalParamTable& local,
                     const StageStorage& storage, Exec exec)
    : shape_(shape), local_(local), storage_(storage), exec_(std::move(exec)) {
  if (storage_.expanded) expanded_unit_.assign(storage_.expanded->all().size(), -1);
}

void UnitHooks::need(const std::string& name, const std::string& next) {
  if (storage_.expanded) {
    const int u = unit_index(name);
    const int buffer = storage_.expanded->index_of_unit(u);
    if (expanded_unit_[buffer] != u) {
      const ParamUnit& unit = local_.units()[u];
      kernels::load_half(exec_, window(storage_.expanded->of_unit(u), 0, unit.padded),
                         storage_.params16, unit.offset, unit.padded, shape_.buffers.precision);
      expanded_unit_[buffer] = u;
    }
  }
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

void UnitHooks::invalidate_expanded() {
  std::fill(expanded_unit_.begin(), expanded_unit_.end(), -1);
}

std::string UnitHooks::unit_param(int i, int part) const {
  if (i < 0 || i >= shape_.blocks()) return "";
  return block_unit_first_param(shape_.layout.first_layer + i, part);
}

std::string UnitHooks::first_backward_unit(int i) const {
  return unit_param(i, shape_.buffers.recompute.full_block(i) ? 0 : kUnitsPerBlock - 1);
}

}  // namespace trident
