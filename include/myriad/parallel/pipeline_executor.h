// PipelineExecutor — runs one rank's pipeline schedule (parallel/pipeline_schedule.h) on its
// model chunks: forward and backward of micro-batches with activations and gradients exchanged with
// the neighbouring stages over the pp communicator. It is the Engine's one step loop: without
// pipeline parallelism the schedule is that of a single stage (forward then backward of each
// micro-batch in turn, no exchanges), so every layout runs the same loop.
//
// Sends are asynchronous (the buffer stays untouched until the send completes: a micro-batch's
// buffers are reused only after its sends have finished); what reads a received tensor waits for
// the receive (CommWork::wait_on_stream: the host blocks on a host communicator; on a device one
// the compute stream waits and the host runs on), and that wait is the rank's pipeline bubble
// (waiting for a neighbour, transfer included): bubble_seconds(). Activations go
// with tag 0, gradients with tag 1; each (peer, tag) channel is FIFO and the schedule checker
// proves that every rank receives in the order its peer sends. Each micro-batch in flight on this
// rank holds one set of model buffers (a slot): slots are taken at a micro-batch's first action
// here and given back after its last backward, so their number is the peak of micro-batches in
// flight (GPipe: m; 1F1B: about p - rank). No collective runs on the pp communicator during a
// schedule (it would queue behind the sends). Sends and receives issued back to back form one
// group (a neighbour exchange cannot deadlock); the sends still pending when compute comes next
// are started before it (Communicator::start_point_to_point) — a device communicator would
// otherwise hold them until the rank's next receive, starving the next stage meanwhile (stage 0's
// warm-up forwards, the last backwards of the cool-down).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/parallel/pipeline_schedule.h"
#include "myriad/nn/pipeline_stage.h"

namespace myriad::parallel {

struct PipelineStepResult {
  // The micro-batches' losses stay with the model until the caller reads them
  // (nn::PipelineStage::take_loss_sum: once per step, after the backward pass).
  std::int64_t loss_tokens = 0;  // valid targets of the micro-batches whose loss this rank computed
  int slots_in_use_peak = 0;     // micro-batches in flight at once on this rank
};

class PipelineExecutor {
 public:
  // `model`: this rank's stage (nn::GptModel on the host, placed on the CUDA backend on a GPU);
  // `pp` exchanges its tensors (a host or device communicator to match). Neither is owned.
  PipelineExecutor(nn::PipelineStage& model, distributed::Communicator& pp, PipelineSchedule kind, int micro_batches,
                   int virtual_stages);

  // One step: micro-batch i is (ids[i], targets[i]), each (B, T); gradients accumulate in the model.
  PipelineStepResult run(const std::vector<Tensor>& ids, const std::vector<Tensor>& targets, float loss_scale,
                         Recompute mode);
  // Forward only (evaluation): the micro-batch passes every global stage in turn; the loss is
  // returned on the rank of the last stage (zero elsewhere).
  nn::LossSum forward_only(const Tensor& ids, const Tensor& targets);
  // The last run()'s bubble: the host's time blocked in its receives plus, on a device, the
  // compute stream's stalls on them — final once the stream has passed the step's receives (the
  // step's later reads guarantee it).
  double bubble_seconds() const;

  const std::vector<parallel::PipelineAction>& actions() const { return actions_; }
  // Micro-batches this rank's schedule keeps in flight at once: the activation slots run()
  // prepares (a micro-batch holds its slot from its first action to the backward of its chunk 0).
  int slots_in_flight() const;
  // Called at each micro-batch's first action on this rank, with whether it is the step's last
  // micro-batch (data parallelism reduces during the last backward).
  void set_micro_batch_observer(std::function<void(bool last)> observer) { observer_ = std::move(observer); }
  // Called before each backward action with whether it is its chunk's last backward of the step
  // (after it, that chunk's gradients are final: data parallelism reduces them in the cool-down).
  void set_backward_observer(std::function<void(bool final_for_chunk)> observer) {
    backward_observer_ = std::move(observer);
  }
  // A single stage's schedule (pp 1, one chunk) runs each micro-batch's forward and backward back to
  // back; `runner` may run both at once (training.cuda_graphs: train::MicroBatchGraph), returning
  // the valid targets it counted, or nullopt for the executor to run them as usual. The backward
  // observer is called before the runner (nothing between the two passes could read its answer).
  using WholeMicroBatch =
      std::function<std::optional<std::int64_t>(int slot, const Tensor& ids, const Tensor& targets, float loss_scale)>;
  void set_whole_micro_batch_runner(WholeMicroBatch runner) { whole_micro_batch_ = std::move(runner); }

 private:
  int take_slot(int micro_batch);
  void wait_sends_of(int slot);
  // Receives into `buffer`; what runs next reads it after the receive (the bubble is timed here).
  void receive(const Tensor& buffer, int peer, int tag);

  WholeMicroBatch whole_micro_batch_;
  nn::PipelineStage& model_;
  distributed::Communicator& pp_;
  int micro_batches_;
  int virtual_stages_;
  std::vector<parallel::PipelineAction> actions_;
  std::vector<int> slot_of_;  // per micro-batch: its slot, or -1
  std::vector<bool> slot_busy_;
  std::vector<std::vector<distributed::WorkHandle>> sends_;  // per slot: sends still reading its buffers
  std::function<void(bool)> observer_;
  std::function<void(bool)> backward_observer_;
  std::vector<char> final_backward_;               // per action: its chunk's last backward of the step
  double host_bubble_seconds_ = 0.0;               // the last run's host time blocked in receives
  std::vector<distributed::WorkHandle> receives_;  // the last run's (their stream stalls)
};

}  // namespace myriad::parallel
