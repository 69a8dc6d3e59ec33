// make_device_runtime with the CUDA backend: a DeviceContext on the local rank's GPU, a
// cuda::CudaBackend over it, and an NcclCommunicator per group of several ranks (a
// LoopbackCommunicator for a group of one). See train/device_runtime.h.
#include <cuda_runtime_api.h>

#include <array>

#include "myriad/core/local_device.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/stream_graph.h"
#include "myriad/distributed/hierarchical_communicator.h"
#include "myriad/distributed/loopback_communicator.h"
#include "myriad/train/device_runtime.h"
#if MYRIAD_HAVE_NCCL
#include "myriad/distributed/nccl_communicator.h"
#endif

namespace myriad::train {

namespace {

// The pipeline executor's activations and gradients use tags 0 and 1, the tied embedding's
// gradient exchange tag 2.
constexpr int kPipelineTags = 3;

// `hierarchical`: the host group's node grouping, when it has one, shapes the NCCL all-reduce.
// `exact`: a gradient group under parallel.dp_reduce_exact: its f32 sums exact (NcclOptions::exact_sums).
std::unique_ptr<distributed::Communicator> device_group(distributed::Communicator& host, cuda::DeviceContext& context,
                                                        double timeout, bool hierarchical = false, bool exact = false) {
  if (host.size() == 1) return std::make_unique<distributed::LoopbackCommunicator>(host.name());
#if MYRIAD_HAVE_NCCL
  distributed::NcclOptions options{.p2p_tags = kPipelineTags, .timeout_seconds = timeout, .exact_sums = exact};
  if (const auto* nodes = dynamic_cast<const distributed::HierarchicalCommunicator*>(&host); nodes && hierarchical) {
    options.hierarchy = nodes->grouping();
  }
  return std::make_unique<distributed::NcclCommunicator>(host, context, options);
#else
  (void)context;
  (void)timeout;
  (void)hierarchical;
  (void)exact;
  MYRIAD_THROW("training.device cuda with a " << host.name() << " group of " << host.size()
                                              << " ranks: this build has no NCCL");
#endif
}

// train::GraphRecorder over cuda::PooledStreamGraph on the rank's context.
class CudaGraphRecorder final : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(cuda::DeviceContext& context) : graph_(context) {}
  void run_in_pool(const std::function<void()>& work) override { graph_.run_in_pool(work); }
  void record(const std::function<void()>& work) override { graph_.record(work); }
  void replay() override { graph_.replay(); }
  std::size_t launches() const override { return graph_.launches(); }

 private:
  cuda::PooledStreamGraph graph_;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  CudaRuntime(int device, distributed::ProcessGroups& groups, const DeviceRuntimeOptions& options)
      : context_(device), backend_(context_) {
    const double timeout = options.collective_timeout;
    // The gradient groups (dp, expert-data, data-context) sum exactly under exact_sums, as the
    // host's ProcessGroups wraps the same three.
    const bool exact = options.exact_sums;
    for (std::size_t a = 0; a < distributed::kAxes.size(); ++a) {
      const bool dp = distributed::kAxes[a] == distributed::Axis::dp;
      groups_[a] = device_group(groups.group(distributed::kAxes[a]), context_, timeout,
                                dp && options.hierarchical_data_parallel, dp && exact);
    }
    if (groups.grid().size(distributed::Axis::ep) > 1)
      expert_data_ = device_group(groups.expert_data(), context_, timeout, options.hierarchical_data_parallel, exact);
    if (groups.grid().size(distributed::Axis::cp) > 1)
      data_context_ = device_group(groups.data_context(), context_, timeout, false, exact);
  }

  ops::Placement placement() override { return ops::Placement{&backend_}; }
  std::unique_ptr<GraphRecorder> graph_recorder() override { return std::make_unique<CudaGraphRecorder>(context_); }
  distributed::Communicator& group(distributed::Axis axis) override { return *groups_[static_cast<std::size_t>(axis)]; }
  distributed::Communicator& expert_data() override {
    return expert_data_ ? *expert_data_ : group(distributed::Axis::dp);
  }
  distributed::Communicator& data_context() override {
    return data_context_ ? *data_context_ : group(distributed::Axis::dp);
  }
  std::string describe() const override {
    cudaDeviceProp prop{};
    const bool named = cudaGetDeviceProperties(&prop, context_.device()) == cudaSuccess;
    return "cuda:" + std::to_string(context_.device()) + " (" + (named ? prop.name : "unknown GPU") + ")";
  }
  GpuIdentity identity() const override {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, context_.device()) != cudaSuccess) return {};
    return {prop.name, prop.major, prop.minor, prop.multiProcessorCount};
  }
  std::string pci_bus_id() const override {
    std::array<char, 32> id{};
    if (cudaDeviceGetPCIBusId(id.data(), static_cast<int>(id.size()), context_.device()) != cudaSuccess) return {};
    return id.data();
  }
  std::int64_t workspace_bytes() const override { return static_cast<std::int64_t>(context_.workspace_bytes()); }
  std::string fp8_unavailable() const override { return backend_.fp8_unavailable(); }
  std::string sixteen_bit_attention() override {
    if (backend_.cudnn_attention() != nullptr) return "cuDNN fused attention";
    return "the tensor-core (WMMA) kernels; no cuDNN attention: " + backend_.cudnn_attention_unavailable();
  }

 private:
  cuda::DeviceContext context_;
  cuda::CudaBackend backend_;  // after the context: destroyed first
  std::array<std::unique_ptr<distributed::Communicator>, distributed::kAxes.size()> groups_;  // destroyed before both
  std::unique_ptr<distributed::Communicator> expert_data_;                                    // ep > 1 only
  std::unique_ptr<distributed::Communicator> data_context_;                                   // cp > 1 only
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_device_runtime(distributed::ProcessGroups& groups,
                                                   const DeviceRuntimeOptions& options) {
  int device = 0;
  try {
    device = select_local_device(local_rank_from_environment(), cuda::cuda_device_count_or_zero());
  } catch (const Error& e) {
    MYRIAD_THROW("training.device cuda: " << e.what());
  }
  // The process's GPU from now on: every launch and context lands there (not on device 0), guarded
  // or not (the emulated layer checks each launch against the current device).
  cuda::select_device(device);
  return std::make_unique<CudaRuntime>(device, groups, options);
}

}  // namespace myriad::train
