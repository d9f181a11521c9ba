// A model chunk's pipeline transfer buffers: what the pipeline runner sends and receives between
// stages, described once for the runner (which allocates) and the memory model (which sums).
#pragma once

#include <cstddef>
#include <vector>

#include "comm/comm.hpp"
#include "core/buffer_list.hpp"
#include "core/stored.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident::pipeline {

// Sends go out from kSendBuffers buffers per direction in turn, not one per activation slot. Each
// buffer is [N,C] (N/tp rows under sequence parallelism) in the storage format: fp32, or
// 16 bits under bf16 / fp16, whose stages make activations and their gradients in 16 bits. Only
// those the chunk's place in the pipeline uses are made.
struct Transfers {
  std::vector<StoredTensor> outputs;  // not last: the stage's outputs, used in turn
  int next_output = 0;
  StoredTensor grad_recv;  // not last: the output gradient received from the next stage
  std::vector<StoredTensor> grad_send;  // not first: input gradients, used in turn
  int next_grad_send = 0;
  // Per send buffer (outputs, grad_send): its last send, waited before reuse.
  std::vector<Request> forward_sends, backward_sends;
};

// The transfers of a chunk that holds the embedding (`first`) and / or the head (`last`), for
// activations of `elements` values.
Transfers lay_out_transfers(bool first, bool last, size_t elements, Precision storage,
                            BufferList& list);

}  // namespace trident::pipeline
