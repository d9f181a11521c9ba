// Where ZeRO-2/3 sends the gradients of the large matrices as their GEMMs make them, a block of
// rows at a time, so that no rank holds a whole matrix's gradient (DeepSpeed's reduce buckets).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/types.hpp"

namespace trident {

// Rows of a matrix `cols` wide that fill a bucket of `bucket_elements` (at least one row): the
// runtime's blocks and the memory model's buffer.
inline int64_t grad_rows_per_block(int64_t bucket_elements, int64_t cols) {
  return std::max<int64_t>(1, bucket_elements / std::max<int64_t>(1, cols));
}

class GradSink {
 public:
  virtual ~GradSink() = default;
  // Where a block of rows is written, fp32: room for rows_per_block(cols) rows of `cols` of any
  // matrix the sink takes.
  virtual const View1& rows_buffer() const = 0;
  virtual int64_t bucket_elements() const = 0;
  int64_t rows_per_block(int64_t cols) const {
    return grad_rows_per_block(bucket_elements(), cols);
  }
  // Rows [first_row, first_row + rows) of this micro-batch's gradient of the matrix whose first
  // element is at `param_offset` in the stage's flat parameters, `cols` wide, lie in
  // rows_buffer(): the sink adds them where they belong before the buffer is written again.
  virtual void take_rows(int64_t param_offset, int64_t first_row, int64_t rows, int64_t cols) = 0;
};

// A layer's weight gradient sent to a sink instead of written to a tensor: the flat offset of the
// weight's first element names it there.
struct GradStream {
  GradSink* sink = nullptr;
  int64_t param_offset = 0;
  explicit operator bool() const { return sink != nullptr; }
};

}  // namespace trident
