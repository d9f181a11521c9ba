// cuDNN's fused flash attention (GPU builds only): the backend API opened at run time, trident's
// attention graphs turned into descriptors, plans kept per shape.
#include "kernels/cudnn_attention.hpp"

#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/launch_profiler.hpp"
#include "kernels/cublas.hpp"

namespace trident::kernels {

namespace {

// The cuDNN functions trident calls: the backend (graph) API, stable across cuDNN 9.
struct CudnnApi {
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
  std::string library;  // the file opened
  std::string failure;  // why none was, or why it cannot serve
  size_t version = 0;
};

template <class Function>
void load(void* library, const char* symbol, Function& out, const std::string& path) {
  out = reinterpret_cast<Function>(runtime_symbol(library, symbol, path));
}

CudnnApi open_cudnn() {
  CudnnApi api;
  std::string path;
  void* library =
      open_runtime_library("cuDNN", "TRIDENT_CUDNN", {"libcudnn.so.9"}, path, &api.failure);
  if (!library) return api;
  load(library, "cudnnCreate", api.create, path);
  load(library, "cudnnDestroy", api.destroy, path);
  load(library, "cudnnSetStream", api.set_stream, path);
  load(library, "cudnnGetVersion", api.get_version, path);
  load(library, "cudnnGetErrorString", api.error_string, path);
  load(library, "cudnnGetLastErrorString", api.last_error, path);
  load(library, "cudnnBackendCreateDescriptor", api.create_descriptor, path);
  load(library, "cudnnBackendDestroyDescriptor", api.destroy_descriptor, path);
  load(library, "cudnnBackendSetAttribute", api.set_attribute, path);
  load(library, "cudnnBackendGetAttribute", api.get_attribute, path);
  load(library, "cudnnBackendFinalize", api.finalize, path);
  load(library, "cudnnBackendExecute", api.execute, path);
  api.library = path;
  api.version = api.get_version();
  if (api.version < 90000)
    api.failure = "cuDNN " + std::to_string(api.version) + " at " + path + " is older than 9";
  return api;
}

const CudnnApi& cudnn_api() {
  static const CudnnApi api = open_cudnn();
  return api;
}

// A cuDNN call that failed while a graph was built: what was asked, and cuDNN's words.
struct CudnnRefusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string cudnn_message(cudnnStatus_t status) {
  const CudnnApi& api = cudnn_api();
  char detail[1024] = {};
  api.last_error(detail, sizeof(detail));
  return std::string(api.error_string(status)) + (detail[0] ? std::string(": ") + detail : "");
}

void check(cudnnStatus_t status, const std::string& what) {
  if (status != CUDNN_STATUS_SUCCESS) throw CudnnRefusal(what + ": " + cudnn_message(status));
}

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, std::string name) : name_(std::move(name)) {
    check(cudnn_api().create_descriptor(type, &d_), "creating " + name_);
  }
  ~Descriptor() {
    if (d_) cudnn_api().destroy_descriptor(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  template <class T>
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n,
                  const T* values) {
    check(cudnn_api().set_attribute(d_, name, type, n, values),
          "setting attribute " + std::to_string(name) + " of " + name_);
    return *this;
  }
  template <class T>
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T value) {
    return set(name, type, 1, &value);
  }
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& other) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, other.d_);
  }
  Descriptor& finalize() {
    check(cudnn_api().finalize(d_), "finalizing " + name_);
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string name_;
};
using Owned = std::unique_ptr<Descriptor>;

cudnnDataType_t data_type(GraphType type, Precision format) {
  switch (type) {
    case GraphType::kStored:
      return format == Precision::kBf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    case GraphType::kFloat:
      return CUDNN_DATA_FLOAT;
    case GraphType::kInt32:
      return CUDNN_DATA_INT32;
    case GraphType::kBool:
      return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

Owned tensor_descriptor(const GraphTensor& t, Precision format) {
  auto d = std::make_unique<Descriptor>(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor " + t.name);
  const cudnnDataType_t type = data_type(t.type, format);
  const int64_t alignment = 16;  // cudnn_attention_refusal checks the addresses
  const bool is_virtual = t.is_virtual, by_value = t.by_value;
  d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, t.uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual);
  if (by_value) d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, by_value);
  d->finalize();
  return d;
}

cudnnPointwiseMode_t pointwise_mode(GraphOpKind kind) {
  switch (kind) {
    case GraphOpKind::kMul:
      return CUDNN_POINTWISE_MUL;
    case GraphOpKind::kAdd:
      return CUDNN_POINTWISE_ADD;
    case GraphOpKind::kSub:
      return CUDNN_POINTWISE_SUB;
    case GraphOpKind::kDiv:
      return CUDNN_POINTWISE_DIV;
    case GraphOpKind::kExp:
      return CUDNN_POINTWISE_EXP;
    case GraphOpKind::kLog:
      return CUDNN_POINTWISE_LOG;
    case GraphOpKind::kCmpGe:
      return CUDNN_POINTWISE_CMP_GE;
    case GraphOpKind::kGenIndex:
      return CUDNN_POINTWISE_GEN_INDEX;
    case GraphOpKind::kSelect:
      return CUDNN_POINTWISE_BINARY_SELECT;
    case GraphOpKind::kIdentity:
      return CUDNN_POINTWISE_IDENTITY;
    default:
      throw std::logic_error("not a pointwise operation");
  }
}

// One graph operation as its descriptors (the operation and the matmul, pointwise or reduction
// descriptor it holds), appended to `owned`; returns the operation.
const Descriptor& operation(const GraphOp& op, const std::vector<Owned>& tensors,
                            std::vector<Owned>& owned) {
  auto add = [&](cudnnBackendDescriptorType_t type, const char* name) -> Descriptor& {
    owned.push_back(std::make_unique<Descriptor>(type, name));
    return *owned.back();
  };
  const Descriptor& y = *tensors[op.y];
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  switch (op.kind) {
    case GraphOpKind::kMatmul: {
      Descriptor& desc = add(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
      desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, fp32).finalize();
      return add(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation")
          .set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, *tensors[op.x])
          .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, *tensors[op.b])
          .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, y)
          .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc)
          .finalize();
    }
    case GraphOpKind::kReshape:
      return add(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "transpose")
          .set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, *tensors[op.x])
          .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
          .finalize();
    case GraphOpKind::kReduceAdd:
    case GraphOpKind::kReduceMax: {
      const cudnnReduceTensorOp_t reduce =
          op.kind == GraphOpKind::kReduceAdd ? CUDNN_REDUCE_TENSOR_ADD : CUDNN_REDUCE_TENSOR_MAX;
      Descriptor& desc = add(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
      desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, reduce)
          .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, fp32)
          .finalize();
      return add(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation")
          .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, *tensors[op.x])
          .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
          .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc)
          .finalize();
    }
    default: {
      Descriptor& desc = add(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
      // The mask's indices and comparison compute in their own types, as cuDNN's frontend emits.
      const cudnnDataType_t math = op.kind == GraphOpKind::kGenIndex ? CUDNN_DATA_INT32
                                   : op.kind == GraphOpKind::kCmpGe  ? CUDNN_DATA_BOOLEAN
                                                                     : fp32;
      desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, pointwise_mode(op.kind))
          .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, math);
      if (op.kind == GraphOpKind::kGenIndex)
        desc.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, static_cast<int64_t>(op.axis));
      desc.finalize();
      Descriptor& o = add(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
      o.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc)
          .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, *tensors[op.x]);
      if (op.b >= 0) o.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *tensors[op.b]);
      if (op.t >= 0) o.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *tensors[op.t]);
      return o.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize();
    }
  }
}

// A graph's execution plan: the first engine configuration, in cuDNN's heuristic order, that
// finalizes; its workspace; the by-value scalars it is executed with.
struct Plan {
  Owned plan;
  int64_t workspace = 0;
  std::vector<std::pair<int64_t, float>> scalars;  // uid, value
};

Plan make_plan(cudnnHandle_t handle, const AttentionGraph& graph, Precision format) {
  std::vector<Owned> tensors, owned;
  for (const GraphTensor& t : graph.tensors) tensors.push_back(tensor_descriptor(t, format));
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const GraphOp& op : graph.ops) ops.push_back(operation(op, tensors, owned).get());
  Descriptor op_graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           static_cast<int64_t>(ops.size()), ops.data())
      .finalize();
  std::string tried;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const std::string heuristic = mode == CUDNN_HEUR_MODE_A ? "heuristics A" : "fallback";
    constexpr int kMaxConfigs = 16;
    std::vector<Owned> configs;
    std::vector<cudnnBackendDescriptor_t> handles;
    int64_t found = 0;
    Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    try {  // a mode that fails is reported beside the other's, not instead of it
      heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph)
          .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode)
          .finalize();
      for (int i = 0; i < kMaxConfigs; ++i) {
        configs.push_back(
            std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "config"));
        handles.push_back(configs.back()->get());
      }
      check(cudnn_api().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxConfigs, &found,
                                      handles.data()),
            "reading the engine heuristics' results");
    } catch (const CudnnRefusal& refusal) {
      tried += "\n  " + heuristic + ": " + refusal.what();
      continue;
    }
    for (int64_t i = 0; i < found; ++i) {
      auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[i]);
      const cudnnStatus_t status = cudnn_api().finalize(plan->get());
      if (status != CUDNN_STATUS_SUCCESS) {
        tried += "\n  " + heuristic + ", engine configuration " + std::to_string(i) + ": " +
                 cudnn_message(status);
        continue;
      }
      Plan out;
      int64_t count = 0;
      check(cudnn_api().get_attribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                      CUDNN_TYPE_INT64, 1, &count, &out.workspace),
            "reading the plan's workspace size");
      out.plan = std::move(plan);
      for (const GraphTensor& t : graph.tensors)
        if (t.by_value) out.scalars.emplace_back(t.uid, t.value);
      return out;
    }
  }
  throw CudnnRefusal("no engine of cuDNN runs this graph" +
                     (tried.empty() ? std::string(" (the heuristics offered none)") : tried));
}

struct ShapeKey {
  int B, T, NH, KVH, HS;
  int64_t ld_qkv, ld_out, ld_dout, ld_dqkv;
  Precision format;
  auto tie() const { return std::tie(B, T, NH, KVH, HS, ld_qkv, ld_out, ld_dout, ld_dqkv, format); }
  bool operator<(const ShapeKey& o) const { return tie() < o.tie(); }
};
ShapeKey key_of(const AttentionGraphShape& s, Precision format) {
  return {s.B, s.T, s.NH, s.KVH, s.HS, s.ld_qkv, s.ld_out, s.ld_dout, s.ld_dqkv, format};
}

struct ShapePlans {
  std::string refusal;  // "" when both plans were built
  Plan forward, backward;
};

// The process's handle, plans and device buffers; attention is called from the main thread.
struct CudnnState {
  cudnnHandle_t handle = nullptr;
  std::map<ShapeKey, ShapePlans> shapes;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* row_dots = nullptr;  // backward's dout . out per query row, fp32
  size_t row_dot_bytes = 0;
  void* dq_sums = nullptr;  // backward's fp32 sums of dq, zeroed before each call
  size_t dq_sum_bytes = 0;
};
CudnnState* state = nullptr;
bool used = false;

CudnnState& cudnn_state() {
  if (state) return *state;
  state = new CudnnState;
  const cudnnStatus_t status = cudnn_api().create(&state->handle);
  if (status != CUDNN_STATUS_SUCCESS)
    fatal("cudnnCreate", __FILE__, __LINE__, cudnn_message(status));
  Kokkos::push_finalize_hook([] {  // while the device is still there
    cudaDeviceSynchronize();       // no attention still reads the buffers
    state->shapes.clear();
    cudaFree(state->workspace);
    cudaFree(state->row_dots);
    cudaFree(state->dq_sums);
    cudnn_api().destroy(state->handle);
    delete state;
    state = nullptr;
  });
  return *state;
}

// A device buffer of at least `bytes`, grown (and its contents dropped) as needed.
void* grown(void*& buffer, size_t& have, size_t bytes, const char* what) {
  if (bytes <= have) return buffer;
  cudaFree(buffer);  // waits for the device: nothing still reads the old buffer
  buffer = nullptr;
  const cudaError_t rc = cudaMalloc(&buffer, bytes);
  if (rc != cudaSuccess)
    fatal("cudaMalloc", __FILE__, __LINE__,
          std::string("cuDNN attention's ") + what + ": " + cudaGetErrorString(rc));
  have = bytes;
  return buffer;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

ShapePlans& plans_for(const AttentionGraphShape& s, Precision format) {
  CudnnState& st = cudnn_state();
  auto at = st.shapes.find(key_of(s, format));
  if (at != st.shapes.end()) return at->second;
  ShapePlans plans;
  try {
    plans.forward = make_plan(st.handle, attention_forward_graph(s), format);
    plans.backward = make_plan(st.handle, attention_backward_graph(s), format);
  } catch (const CudnnRefusal& refusal) {
    plans.refusal = std::string("cuDNN refused the attention graph: ") + refusal.what();
  }
  return st.shapes.emplace(key_of(s, format), std::move(plans)).first->second;
}

void execute(const Kokkos::Cuda& exec, Plan& plan, std::vector<std::pair<int64_t, void*>> bound,
             const char* label, double flops) {
  CudnnState& st = cudnn_state();
  const CudnnApi& api = cudnn_api();
  std::vector<float> values;
  values.reserve(plan.scalars.size());  // stable addresses for the by-value scalars
  for (const auto& [uid, value] : plan.scalars) {
    values.push_back(value);
    bound.emplace_back(uid, &values.back());
  }
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, pointer] : bound) {
    uids.push_back(uid);
    pointers.push_back(pointer);
  }
  void* workspace =
      grown(st.workspace, st.workspace_bytes, static_cast<size_t>(plan.workspace), "workspace");
  try {
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
             static_cast<int64_t>(uids.size()), uids.data())
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
             static_cast<int64_t>(pointers.size()), pointers.data())
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace)
        .finalize();
    check(api.set_stream(st.handle, exec.cuda_stream()), "cudnnSetStream");
    ProfiledCall call;
    if (LaunchProfiler::listening()) call.open(label, flops);
    check(api.execute(st.handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
  } catch (const CudnnRefusal& refusal) {
    fatal(label, __FILE__, __LINE__, refusal.what(),
          "set attention.kernel = \"tiled\" to run without cuDNN");
  }
}

// The causal products' FLOPs: q k^T and p v over the unmasked half, 2 B NH T^2 HS.
double causal_flops(const AttentionGraphShape& s) {
  return 2.0 * s.B * s.NH * static_cast<double>(s.T) * s.T * s.HS;
}

}  // namespace

std::string cudnn_attention_refusal(const Kokkos::Cuda& exec, const AttentionGraphShape& s,
                                    Precision format, const void* qkv, const void* out) {
  (void)exec;
  const CudnnApi& api = cudnn_api();
  if (!api.failure.empty()) return api.failure;
  if (format == Precision::kFp32) return "cuDNN's fused attention takes 16-bit tensors, not fp32";
  if (s.HS % 8 != 0 || s.HS > 128)
    return "cuDNN's fused attention takes head sizes that are multiples of 8 up to 128, not " +
           std::to_string(s.HS);
  const size_t bytes = 2;
  if (!aligned16(qkv) || !aligned16(out) || (s.ld_qkv * bytes) % 16 || (s.ld_out * bytes) % 16 ||
      (s.ld_dout * bytes) % 16 || (s.ld_dqkv * bytes) % 16 || (s.NH * s.HS * bytes) % 16)
    return "cuDNN's fused attention takes 16-byte aligned tensors and rows";
  return plans_for(s, format).refusal;
}

void cudnn_attention_forward(const Kokkos::Cuda& exec, const AttentionGraphShape& s,
                             Precision format, void* out, float* lse, const void* qkv) {
  ShapePlans& plans = plans_for(s, format);
  if (!plans.refusal.empty()) fatal("cudnn_attention_forward", __FILE__, __LINE__, plans.refusal);
  used = true;
  char* q = const_cast<char*>(static_cast<const char*>(qkv));
  const size_t bytes = 2, head = static_cast<size_t>(s.HS) * bytes;
  execute(exec, plans.forward,
          {{kUidQ, q},
           {kUidK, q + s.NH * head},
           {kUidV, q + (s.NH + s.KVH) * head},
           {kUidOut, out},
           {kUidStats, lse}},
          "attention_cudnn_forward", causal_flops(s));
}

void cudnn_attention_backward(const Kokkos::Cuda& exec, const AttentionGraphShape& s,
                              Precision format, void* dqkv, const void* dout, const void* qkv,
                              const void* out, const float* lse) {
  ShapePlans& plans = plans_for(s, format);
  if (!plans.refusal.empty()) fatal("cudnn_attention_backward", __FILE__, __LINE__, plans.refusal);
  CudnnState& st = cudnn_state();
  const size_t rows = static_cast<size_t>(s.B) * s.NH * s.T;
  void* row_dots = grown(st.row_dots, st.row_dot_bytes, rows * sizeof(float), "row dots");
  const size_t dq_bytes = rows * s.HS * sizeof(float);
  void* dq_sums = grown(st.dq_sums, st.dq_sum_bytes, dq_bytes, "dq sums");
  // cuDNN before 9.6 adds into the sums; later ones overwrite them. Zeroed either way.
  const cudaError_t zeroed = cudaMemsetAsync(dq_sums, 0, dq_bytes, exec.cuda_stream());
  if (zeroed != cudaSuccess)
    fatal("cudaMemsetAsync", __FILE__, __LINE__, cudaGetErrorString(zeroed));
  char* q = const_cast<char*>(static_cast<const char*>(qkv));
  char* d = static_cast<char*>(dqkv);
  const size_t bytes = 2, head = static_cast<size_t>(s.HS) * bytes;
  execute(exec, plans.backward,
          {{kUidQ, q},
           {kUidK, q + s.NH * head},
           {kUidV, q + (s.NH + s.KVH) * head},
           {kUidOut, const_cast<void*>(out)},
           {kUidStats, const_cast<float*>(lse)},
           {kUidDout, const_cast<void*>(dout)},
           {kUidRowDot, row_dots},
           {kUidDqSums, dq_sums},
           {kUidDq, d},
           {kUidDk, d + s.NH * head},
           {kUidDv, d + (s.NH + s.KVH) * head}},
          "attention_cudnn_backward", 2.5 * causal_flops(s));
}

bool cudnn_attention_used() {
  return used;
}

std::string cudnn_summary() {
  const CudnnApi& api = cudnn_api();
  if (!api.failure.empty()) return "cuDNN: none (" + api.failure + ")";
  return "cuDNN " + std::to_string(api.version) + " (" + api.library + ")";
}

}  // namespace trident::kernels
