// cuDNN's fused flash attention on Kokkos' CUDA stream (GPU builds): opened at run time, the
// graphs of kernels/attention_graph.hpp turned into execution plans once per shape.
#pragma once

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <string>

#include "core/precision.hpp"
#include "kernels/attention_graph.hpp"

namespace trident::kernels {

// cuDNN is not linked: it is opened with dlopen, TRIDENT_CUDNN (a path) first, else
// libcudnn.so.9 (PyTorch's nvidia-cudnn wheel carries it), as cuBLAS is (kernels/cublas.hpp).
// A shape's forward and backward plans are built on its first call and kept; cuDNN's workspace
// and the backward's row dots [B, NH, T] fp32 are device buffers grown on demand and kept.

// Why cuDNN's fused attention cannot run `s` in `format` with tensors at these addresses ("" when
// it can): no cuDNN library, a version before 9, fp32 tensors, a head size over 128 or not a
// multiple of 8, addresses or rows not 16-byte aligned, or a graph that cuDNN refused (its own
// message). Builds both plans the first time a shape is asked for; the answer is kept.
std::string cudnn_attention_refusal(const Kokkos::Cuda& exec, const AttentionGraphShape& s,
                                    Precision format, const void* qkv, const void* out);

// out and lse (each query row's log-sum-exp, [B, NH, T]) from qkv, as attention_forward; the
// shape must be one cudnn_attention_refusal accepted.
void cudnn_attention_forward(const Kokkos::Cuda& exec, const AttentionGraphShape& s,
                             Precision format, void* out, float* lse, const void* qkv);

// dqkv (overwritten) from dout, qkv, out and lse, as attention_backward.
void cudnn_attention_backward(const Kokkos::Cuda& exec, const AttentionGraphShape& s,
                              Precision format, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse);

// Whether any attention of this process has run on cuDNN (the profiled step's prediction
// names the calls that ran).
bool cudnn_attention_used();

// "cuDNN 91900 (/path/libcudnn.so.9)", or why none was opened: for the start-up banner.
std::string cudnn_summary();

}  // namespace trident::kernels
#endif
