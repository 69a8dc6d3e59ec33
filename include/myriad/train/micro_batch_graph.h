// MicroBatchGraph — training.cuda_graphs: the forward and backward of one micro-batch recorded as a
// CUDA graph once and replayed for the micro-batches after, so the host issues one launch where it
// issued every kernel, GEMM and copy of the pass one by one.
//
// The sequence, for one set of the model's buffers (B, T, recompute mode): the first micro-batch
// runs as usual (lazy set-up — GEMM plans, cuDNN graphs, workspaces — happens outside any graph);
// the second runs in the graph's private memory pool (a warm-up that leaves the pool holding the
// blocks the recording asks for, so nothing is allocated while recording); the third is recorded
// and launched; every later one is launched. Around each of these staged micro-batches the host
// writes what changes between micro-batches into buffers the graph reads — the token ids and targets
// (checked against the vocabulary on the host, then copied into two fixed device tensors) and the
// loss gradient (the step's loss scale: GptModel::write_loss_scale) — and afterwards records the
// micro-batch's per-token losses into the model's ledger (GptModel::record_losses). Nothing in the
// recorded pass depends on a host value that changes between micro-batches (the loss scale it
// hands an MoE router's loss gradients is constant: fp16, whose scale changes, keeps MoE out). What
// the recorded forward's host code added to the model's telemetry (GptModel::HostCounts: a fixed
// block-sparse layout's blocks, an MoE layer's routed tokens — the same for every micro-batch of the
// shape) each later replay adds again; a fixed layout's device arrays are uploaded once per distinct
// layout (CudaBackend::device_block_layout), and capacity routing's experts run one GEMM per expert
// from pointers the shapes fix (nothing uploaded).
//
// Tensor parallelism's collectives (all-reduces, and under sequence parallelism the all-gathers,
// reduce-scatters and the overlapped rings' send / recv) are recorded with the pass: NCCL's stream
// joins the recording where it waits for the compute stream and is joined back where the compute
// stream waits for it (NcclCommunicator, stream-ordered works), so each replay issues them on every
// rank in the recorded order; their calls and bytes are counted once more per replay
// (Communicator::count_replayed), their exposed time is not measured inside a replay. A
// micro-batch whose backward starts data-parallel reductions over several ranks (the step's last
// under dp > 1) differs from one that does not: the graph records the kind it meets first — under
// training.gradient_accumulation 1 every micro-batch reduces, and its bucketed all-reduces or
// reduce-scatters (started by the backward's hooks) and their retirement are recorded with the
// pass, as are ZeRO 2's per-micro-batch reduce-scatters, ZeRO 3's parameter gathers, capacity
// routing's expert all-to-alls and context parallelism's ring — and runs the other kind as usual
// (with accumulation, the step's last). When the
// model's buffers are
// replaced (an evaluation at another batch size, a new recompute mode) the graph is dropped and the
// sequence starts again. A recording that fails (a call capture forbids, such as a host wait) turns
// graphs off for the run with a warning that names the call; that micro-batch then runs as usual.
// Layouts and settings that rule graphs out are named by unavailable_reason() (the Engine logs it at
// start-up and runs without).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "myriad/train/rank_state.h"

namespace myriad::train {

class MicroBatchGraph {
 public:
  // Why training.cuda_graphs cannot apply to this rank's layout and model ("" when it can).
  static std::string unavailable_reason(const RunConfig& config);

  explicit MicroBatchGraph(RankState& state);  // `state` outlives it; state.device set
  ~MicroBatchGraph();
  MicroBatchGraph(const MicroBatchGraph&) = delete;
  MicroBatchGraph& operator=(const MicroBatchGraph&) = delete;

  // Forward and backward of one micro-batch (host ids and targets, (B, T) i32) in `slot` of the
  // prepared buffers, warmed up, recorded or replayed: the valid targets it counted, or nullopt
  // when the caller is to run it as usual (see above).
  std::optional<std::int64_t> run(int slot, const Tensor& ids, const Tensor& targets, float loss_scale);

  std::int64_t replays() const { return replays_; }  // graph launches so far (the recording's included)
  std::size_t launches_recorded() const;             // kernels, copies and memsets in the graph (0: none yet)
  bool off() const { return phase_ == Phase::off; }

 private:
  enum class Phase { first, warm_up, record, replay, off };
  void stage(const Tensor& ids, const Tensor& targets, float loss_scale);
  void pass(int slot, float loss_scale);  // the model's forward + backward of the staged micro-batch
  void restart();                         // the buffers changed: drop the graph, start the sequence again
  std::vector<distributed::Communicator*> device_groups() const;  // each NCCL group of the rank once

  RankState& state_;
  Phase phase_ = Phase::first;
  std::uint64_t generation_ = 0;   // the model's buffers the sequence ran on
  bool recorded_reduces_ = false;  // the kind of micro-batch recorded: one whose backward reduces over dp
  std::unique_ptr<GraphRecorder> recorder_;
  Tensor ids_, targets_;  // the staged inputs on the device: fixed addresses the graph reads
  std::int64_t replays_ = 0;
  nn::GptModel::HostCounts recorded_counts_;  // what the recorded forward's host code counted
  // Per device group: the calls and bytes the recorded pass issued (Communicator::count_replayed).
  std::vector<std::pair<distributed::Communicator*, distributed::CommStats>> recorded_comms_;
};

}  // namespace myriad::train
