// Windows onto a stage's parameters (or their gradients) by layer: what the layer types bind.
#pragma once

#include <functional>
#include <vector>

#include "core/stored.hpp"
#include "core/types.hpp"
#include "model/layers.hpp"
#include "model/params.hpp"

namespace trident {

// One transformer block's local tensors.
struct BlockTensors {
  NormParams ln1;       // [C]
  LinearParams qkv;     // [3C_tp, C], [3C_tp]  column-parallel, q|k|v of this rank's heads
  LinearParams proj;    // [C, C_tp], [C]       row-parallel, bias replicated
  NormParams ln2;       // [C]
  LinearParams fc;      // [4C_tp, C], [4C_tp]  column-parallel
  LinearParams fcproj;  // [C, 4C_tp], [C]      row-parallel
};

struct StageTensors {
  StoredTensor wte;                  // [V_tp, C] vocabulary slice; also the tied output projection
  StoredTensor wpe;                  // [block_size, C]
  std::vector<BlockTensors> blocks;  // this stage's layers, in order
  NormParams lnf;                    // [C]
};

// The stage's tensors (its layers, embedding and head as the layout says), each parameter's
// numel elements at where(param), in any one format.
using TensorLocator = std::function<StoredTensor(const LocalParam&)>;
StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where);
// The same, every parameter at its offset in one flat tensor.
StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const StoredTensor& flat);

}  // namespace trident
