// The calls a stage's passes make between its layers: ZeRO's unit gathers and gradient hooks.
#pragma once

#include <functional>
#include <string>

#include "model/params.hpp"
#include "model/stage_storage.hpp"

namespace trident {

class UnitHooks {
 public:
  UnitHooks(const StageShape& shape, const LocalParamTable& local) : shape_(shape), local_(local) {}

  // Set by the stage's owner (see GptStage's setters).
  std::function<void(int64_t)> on_grads_ready;
  std::function<void(int)> on_unit_done;
  std::function<void(int, int)> on_unit_needed;

  // The parameters of `name`'s unit are about to be read, and `next`'s after them ("": none).
  void need(const std::string& name, const std::string& next);
  // The unit starting at `first_param` has its whole gradient from this backward.
  void unit_done(const std::string& first_param) const;
  // Every gradient from `param`'s offset up has its contribution ("": from the start).
  void grads_ready_from(const std::string& param) const;

  int unit_index(const std::string& name) const { return local_.unit_of(local_.at(name)); }
  // First parameter of unit `part` of local block i ("" if there is no block i).
  std::string unit_param(int i, int part) const;
  // The first unit backward needs of local block i: recomputation starts with the first, the
  // backward itself with the last.
  std::string first_backward_unit(int i) const;

 private:
  const StageShape& shape_;
  const LocalParamTable& local_;
};

}  // namespace trident
