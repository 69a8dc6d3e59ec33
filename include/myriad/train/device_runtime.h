// DeviceRuntime — what training.device cuda gives a rank: its GPU (picked from the local rank),
// the ops backend on it (where the Engine places the one model, its gradients, ZeRO shards and
// AdamW state: ops::Placement) and the dp / tp / pp / ep (+ expert-data) groups over NCCL, built from the host groups
// of the same ranks (and the dp x cp group under context parallelism). A group of one is a LoopbackCommunicator, which
// takes device tensors too. Host tensors given to any of these groups travel over the host group (scalars, token
// counts).
//
// The Engine runs exactly the code it runs on the host; this object only decides where tensors
// live and which transport carries them. make_device_runtime throws myriad::Error naming
// training.device when the build has no CUDA backend, no GPU is visible, or a group of several
// ranks needs NCCL that the build lacks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "myriad/core/gpu_peak.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/ops/placement.h"

namespace myriad::train {

// A CUDA graph of work issued on the rank's compute stream, with a private memory pool of its own
// (CachingAllocator's private pools): what the recorded work allocates keeps its address for as
// long as the recorder lives, however often the graph is replayed. One recording per recorder.
class GraphRecorder {
 public:
  virtual ~GraphRecorder() = default;
  // Runs `work` now, its allocations served from the pool (a warm-up: the recording that follows
  // issues the same allocations and finds them cached, so nothing is allocated while recording).
  virtual void run_in_pool(const std::function<void()>& work) = 0;
  // Records the device work `work` issues (nothing runs); throws myriad::Error when recording
  // fails (a call capture forbids, such as a host wait), discarding it.
  virtual void record(const std::function<void()>& work) = 0;
  virtual void replay() = 0;                 // queues the recorded work on the compute stream
  virtual std::size_t launches() const = 0;  // kernels, copies and memsets recorded
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual ops::Placement placement() = 0;
  // The group of `axis` for device tensors (never the host group object itself).
  virtual distributed::Communicator& group(distributed::Axis axis) = 0;
  // The ranks holding the same MoE experts (distributed::ProcessGroups::expert_data) for device tensors.
  virtual distributed::Communicator& expert_data() = 0;
  // The dp x cp ranks (distributed::ProcessGroups::data_context) for device tensors: gradients,
  // ZeRO shards and the loss sum over it under context parallelism.
  virtual distributed::Communicator& data_context() = 0;
  virtual std::string describe() const = 0;  // "cuda:0 (NVIDIA H200)"
  // The GPU's name, compute capability and SM count (empty name when the runtime cannot say).
  virtual GpuIdentity identity() const = 0;
  // The GPU's PCI bus id ("0000:3B:00.0"; empty when the runtime cannot say): how NVML finds it.
  virtual std::string pci_bus_id() const = 0;
  // Which kernels run attention's 16-bit products (AttentionArgs::operands) on this device:
  // "cuDNN fused attention (cuDNN 9.19.0)" or the tensor-core kernels with the reason cuDNN is not
  // used — for the start-up log.
  virtual std::string sixteen_bit_attention() = 0;
  // Why training.precision fp8 cannot run here ("" when it can: compute capability 8.9+).
  virtual std::string fp8_unavailable() const = 0;
  // Device memory held besides the tensors the Engine accounts for (the cuBLASLt workspace).
  virtual std::int64_t workspace_bytes() const = 0;
  // A recorder of CUDA graphs on this rank's compute stream (training.cuda_graphs).
  virtual std::unique_ptr<GraphRecorder> graph_recorder() = 0;
  // Every group's stream-ordered operations (Communicator::complete_streamed), waited for on the
  // host: once per step, after the update has read its results.
  void complete_streamed() {
    for (const distributed::Axis axis : distributed::kAxes) group(axis).complete_streamed();
    expert_data().complete_streamed();
    data_context().complete_streamed();
  }
};

struct DeviceRuntimeOptions {
  double collective_timeout = 0.0;  // parallel.collective_timeout (seconds; 0 = wait forever) for NCCL waits
  // parallel.dp_reduce hierarchical: the dp (and expert-data) groups' all-reduces over NCCL as
  // intra-node, inter-node, intra-node collectives (NcclOptions::hierarchy), grouped as the host
  // groups are; else NCCL's own algorithm (node-aware by itself).
  bool hierarchical_data_parallel = false;
  // parallel.dp_reduce_exact: the f32 sums of the dp, expert-data and data-context groups in the
  // host's block fixed point (NcclOptions::exact_sums), the same bits as the host's exact sums.
  bool exact_sums = false;
};
std::unique_ptr<DeviceRuntime> make_device_runtime(distributed::ProcessGroups& groups,
                                                   const DeviceRuntimeOptions& options);

}  // namespace myriad::train
