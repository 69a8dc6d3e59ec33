// cuDNN's fused attention through the cuDNN frontend's graph API (cudnn_graphs.h): one SDPA
// graph per (shape, direction), built with the frontend's heuristics (mode A) on first use and
// kept with the handle. Compiled only when CMake found cuDNN and the frontend headers
// (MYRIAD_HAVE_CUDNN); cudnn_attention_absent.cpp stands in otherwise.
#include "cudnn_graphs.h"

#include <cudnn.h>

#include <cudnn_frontend.h>

#include <deque>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/cuda/check.h"

namespace myriad::cuda {

namespace fe = cudnn_frontend;

namespace {

// The graphs' tensor ids (the variant pack maps them to pointers).
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::string describe(const CudnnAttentionShape& s) {
  std::ostringstream text;
  text << "B " << s.batch << ", Hq " << s.q_heads << ", Hkv " << s.kv_heads << ", T " << s.seq << ", D " << s.head_dim
       << (s.causal ? ", causal" : "") << (s.f16 ? ", f16" : ", bf16");
  return text.str();
}

struct Built {
  CudnnAttentionShape shape;
  bool backward = false;
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN has no engine for it (why_not)
  std::int64_t workspace = 0;
  std::string why_not;
};

// (B, heads, T, D) contiguous.
fe::graph::Tensor_attributes heads_tensor(const char* name, std::int64_t uid, const CudnnAttentionShape& s,
                                          std::int64_t heads) {
  const std::int64_t T = s.seq, D = s.head_dim;
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({s.batch, heads, T, D})
      .set_stride({heads * T * D, T * D, D, 1});
}

fe::graph::Tensor_attributes stats_tensor(const CudnnAttentionShape& s) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({s.batch, s.q_heads, s.seq, 1})
      .set_stride({s.q_heads * s.seq, s.seq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const fe::graph::Tensor_attributes& like) {
  t->set_output(true).set_uid(like.get_uid()).set_dim(like.get_dim()).set_stride(like.get_stride());
}

// The graph of (shape, direction): tensors, the SDPA node and its outputs, not yet built.
std::shared_ptr<fe::graph::Graph> define(const CudnnAttentionShape& s, bool backward) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(s.f16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto q = graph->tensor(heads_tensor("q", kQ, s, s.q_heads));
  const auto k = graph->tensor(heads_tensor("k", kK, s, s.kv_heads));
  const auto v = graph->tensor(heads_tensor("v", kV, s, s.kv_heads));
  if (!backward) {
    auto options = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(s.scale);
    if (s.causal) options.set_causal_mask(true);
    auto [o, stats] = graph->sdpa(q, k, v, options);
    output(o, heads_tensor("o", kO, s, s.q_heads));
    output(stats, stats_tensor(s));
    stats->set_data_type(fe::DataType_t::FLOAT);
  } else {
    const auto o = graph->tensor(heads_tensor("o", kO, s, s.q_heads));
    const auto d_o = graph->tensor(heads_tensor("d_o", kDO, s, s.q_heads));
    const auto stats = graph->tensor(stats_tensor(s));
    auto options = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(s.scale);
    if (s.causal) options.set_causal_mask(true);
    auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
    output(dq, heads_tensor("dq", kDQ, s, s.q_heads));
    output(dk, heads_tensor("dk", kDK, s, s.kv_heads));
    output(dv, heads_tensor("dv", kDV, s, s.kv_heads));
  }
  return graph;
}

Built build(cudnnHandle_t handle, const CudnnAttentionShape& s, bool backward) {
  Built built;
  built.shape = s;
  built.backward = backward;
  auto graph = define(s, backward);
  auto status = graph->build(handle, {fe::HeurMode_t::A});
  if (status.is_good()) status = graph->get_workspace_size(built.workspace);
  if (!status.is_good()) {
    built.why_not = "cuDNN has no " + std::string(backward ? "backward" : "forward") + " attention engine for " +
                    describe(s) + ": " + status.get_message();
    return built;
  }
  built.graph = std::move(graph);
  return built;
}

}  // namespace

class CudnnAttention {
 public:
  explicit CudnnAttention(cudnnHandle_t handle) : handle_(handle) {}
  ~CudnnAttention() { cudnnDestroy(handle_); }
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // The built graph of (shape, direction), building it on first use.
  const Built& graph(const CudnnAttentionShape& shape, bool backward) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Built& b : built_) {
      if (b.shape == shape && b.backward == backward) return b;
    }
    built_.push_back(build(handle_, shape, backward));
    return built_.back();
  }

  void execute(const CudnnAttentionShape& shape, bool backward, std::unordered_map<std::int64_t, void*>& pointers,
               void* workspace) {
    const Built& b = graph(shape, backward);
    MYRIAD_CHECK(b.graph != nullptr, b.why_not);
    auto status = b.graph->execute(handle_, pointers, workspace);
    MYRIAD_CHECK(status.is_good(), "cuDNN " << (backward ? "backward" : "forward") << " attention (" << describe(shape)
                                            << ") failed: " << status.get_message());
  }

 private:
  cudnnHandle_t handle_;
  std::mutex mutex_;
  std::deque<Built> built_;  // references stay valid as it grows
};

std::shared_ptr<CudnnAttention> cudnn_graphs::make(cudaStream_t stream, std::string& why_not) {
  const std::size_t version = cudnnGetVersion();
  if (version < 90000) {
    why_not = "the cuDNN runtime is " + std::to_string(version) + ", older than 9.0";
    return nullptr;
  }
  int device = 0, major = 0;
  MYRIAD_CUDA_CHECK(cudaGetDevice(&device));
  MYRIAD_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) {
    why_not = "cuDNN's fused attention needs sm_80 or newer; device " + std::to_string(device) + " is sm_" +
              std::to_string(major) + "x";
    return nullptr;
  }
  cudnnHandle_t handle = nullptr;
  if (const cudnnStatus_t status = cudnnCreate(&handle); status != CUDNN_STATUS_SUCCESS) {
    why_not = std::string("cudnnCreate failed: ") + cudnnGetErrorString(status);
    return nullptr;
  }
  if (const cudnnStatus_t status = cudnnSetStream(handle, stream); status != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(handle);
    why_not = std::string("cudnnSetStream failed: ") + cudnnGetErrorString(status);
    return nullptr;
  }
  return std::make_shared<CudnnAttention>(handle);
}

bool cudnn_graphs::prepare(CudnnAttention& attention, const CudnnAttentionShape& shape, bool backward,
                           std::int64_t& workspace_bytes, std::string& why_not) {
  const Built& b = attention.graph(shape, backward);
  workspace_bytes = b.workspace;
  why_not = b.why_not;
  return b.graph != nullptr;
}

void cudnn_graphs::forward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k,
                           const void* v, void* out, float* lse, void* workspace) {
  std::unordered_map<std::int64_t, void*> pointers{
      {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, out}, {kStats, lse}};
  attention.execute(shape, false, pointers, workspace);
}

void cudnn_graphs::backward(CudnnAttention& attention, const CudnnAttentionShape& shape, const void* q, const void* k,
                            const void* v, const void* out, const float* lse, const void* grad_out, void* grad_q,
                            void* grad_k, void* grad_v, void* workspace) {
  std::unordered_map<std::int64_t, void*> pointers{{kQ, const_cast<void*>(q)},
                                                   {kK, const_cast<void*>(k)},
                                                   {kV, const_cast<void*>(v)},
                                                   {kO, const_cast<void*>(out)},
                                                   {kStats, const_cast<float*>(lse)},
                                                   {kDO, const_cast<void*>(grad_out)},
                                                   {kDQ, grad_q},
                                                   {kDK, grad_k},
                                                   {kDV, grad_v}};
  attention.execute(shape, true, pointers, workspace);
}

}  // namespace myriad::cuda
