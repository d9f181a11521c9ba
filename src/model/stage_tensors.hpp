// Windows onto a stage's parameters (or their gradients) by layer: what the layer types bind.
#pragma once

#include <functional>
#include <vector>

#include "core/stored.hpp"
#include "core/types.hpp"
#include "model/layers.hpp"
#include "model/moe_layer.hpp"
#include "model/params.hpp"

namespace trident {

// One transformer block's local tensors (Llama: no biases; its q and kv tensors read as one). Its
// MLP is a dense one (fc, fcproj) or an MoE layer (moe); the other's tensors are empty.
struct BlockTensors {
  NormParams ln1;       // [C]
  LinearParams qkv;     // [qkv_tp, C], [qkv_tp]  column-parallel, q|k|v of this rank's heads
  LinearParams proj;    // [C, C_tp], [C]         row-parallel, bias replicated
  NormParams ln2;       // [C]
  LinearParams fc;      // [fc_tp, C], [fc_tp]    column-parallel (Llama: gate | up)
  LinearParams fcproj;  // [C, F_tp], [C]         row-parallel
  MoeParams moe;        // [E, C], [E, 2 Fe, C], [E, C, Fe]
};

struct StageTensors {
  StoredTensor wte;                  // [V_tp, C] vocabulary slice
  StoredTensor wpe;                  // [block_size, C] (GPT-2)
  std::vector<BlockTensors> blocks;  // this stage's layers, in order
  NormParams lnf;                    // [C]
  StoredTensor head;                 // [V_tp, C] the output projection: wte when tied, or lm_head
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
