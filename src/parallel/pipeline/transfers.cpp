// The one description of a chunk's pipeline transfer buffers.
#include "parallel/pipeline/transfers.hpp"

namespace trident::pipeline {

Transfers lay_out_transfers(bool first, bool last, size_t elements, Precision storage,
                            BufferList& list) {
  constexpr MemCategory comm = MemCategory::kCommBuffers;
  Transfers t;
  if (!last) {
    for (int k = 0; k < kSendBuffers; ++k)
      t.outputs.push_back(list.stored("output", comm, elements, storage));
    t.forward_sends.resize(kSendBuffers);
    t.grad_recv = list.stored("grad_recv", comm, elements, storage);
  }
  if (!first) {
    for (int k = 0; k < kSendBuffers; ++k)
      t.grad_send.push_back(list.stored("grad_send", comm, elements, storage));
    t.backward_sends.resize(kSendBuffers);
  }
  return t;
}

}  // namespace trident::pipeline
