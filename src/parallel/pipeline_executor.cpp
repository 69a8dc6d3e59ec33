// PipelineExecutor: walks the schedule's actions with slot bookkeeping and timed, stream-ordered
// receives.
#include "myriad/parallel/pipeline_executor.h"

#include <algorithm>
#include <chrono>

namespace myriad::parallel {

namespace {
constexpr int kActivationTag = 0;
constexpr int kGradientTag = 1;
}  // namespace

PipelineExecutor::PipelineExecutor(nn::PipelineStage& model, distributed::Communicator& pp, PipelineSchedule kind,
                                   int micro_batches, int virtual_stages)
    : model_(model), pp_(pp), micro_batches_(micro_batches), virtual_stages_(virtual_stages) {
  MYRIAD_CHECK(model.num_chunks() == virtual_stages,
               "pipeline: the model holds " << model.num_chunks() << " chunks on this rank, the schedule expects "
                                            << virtual_stages << " (parallel.virtual_stages)");
  actions_ = parallel::build_schedule(kind, pp.size(), micro_batches, virtual_stages).at(pp.rank());
  final_backward_.assign(actions_.size(), 0);
  std::vector<char> seen(static_cast<std::size_t>(virtual_stages), 0);
  for (std::size_t i = actions_.size(); i-- > 0;) {
    const parallel::PipelineAction& a = actions_[i];
    if (a.type != parallel::PipelineAction::backward || seen[static_cast<std::size_t>(a.chunk)]) continue;
    seen[static_cast<std::size_t>(a.chunk)] = 1;
    final_backward_[i] = 1;
  }
}

int PipelineExecutor::slots_in_flight() const {
  std::vector<char> touched(static_cast<std::size_t>(micro_batches_), 0);
  int in_use = 0, peak = 0;
  for (const parallel::PipelineAction& a : actions_) {
    char& seen = touched[static_cast<std::size_t>(a.micro_batch)];
    if (seen == 0) {
      seen = 1;
      peak = std::max(peak, ++in_use);
    }
    if (a.type == parallel::PipelineAction::backward && a.chunk == 0) --in_use;
  }
  return peak;
}

void PipelineExecutor::wait_sends_of(int slot) {
  for (distributed::WorkHandle& send : sends_[slot]) send->wait_on_stream();  // before the slot is reused
  sends_[slot].clear();
}

void PipelineExecutor::receive(const Tensor& buffer, int peer, int tag) {
  const auto start = std::chrono::steady_clock::now();
  distributed::WorkHandle work = pp_.recv_async(buffer, peer, tag);
  work->wait_on_stream();
  host_bubble_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  receives_.push_back(std::move(work));
}

double PipelineExecutor::bubble_seconds() const {
  double total = host_bubble_seconds_;
  for (const distributed::WorkHandle& work : receives_) total += work->stream_stall_seconds();
  return total;
}

int PipelineExecutor::take_slot(int micro_batch) {
  if (slot_of_[micro_batch] >= 0) return slot_of_[micro_batch];
  int slot = 0;
  while (slot < static_cast<int>(slot_busy_.size()) && slot_busy_[slot]) ++slot;
  if (slot == static_cast<int>(slot_busy_.size())) {
    slot_busy_.push_back(false);
    sends_.emplace_back();
  }
  wait_sends_of(slot);
  slot_busy_[slot] = true;
  slot_of_[micro_batch] = slot;
  return slot;
}

PipelineStepResult PipelineExecutor::run(const std::vector<Tensor>& ids, const std::vector<Tensor>& targets,
                                         float loss_scale, Recompute mode) {
  MYRIAD_CHECK(static_cast<int>(ids.size()) == micro_batches_ && static_cast<int>(targets.size()) == micro_batches_,
               "pipeline: " << ids.size() << " micro-batches given, the schedule has " << micro_batches_);
  PipelineStepResult result;
  model_.clear_losses();  // this step's losses only (a research backward leaves its own unread)
  host_bubble_seconds_ = 0.0;
  receives_.clear();
  slot_of_.assign(micro_batches_, -1);
  std::fill(slot_busy_.begin(), slot_busy_.end(), false);
  int in_use = 0;
  const bool single_stage = pp_.size() == 1 && virtual_stages_ == 1;
  int ran_whole = -1;  // the micro-batch whose backward the whole-micro-batch runner already ran
  for (std::size_t index = 0; index < actions_.size(); ++index) {
    const parallel::PipelineAction& a = actions_[index];
    const int mb = a.micro_batch;
    const bool first_touch = slot_of_[mb] < 0;
    const int slot = take_slot(mb);
    if (first_touch) {
      if (observer_) observer_(mb == micro_batches_ - 1);
      result.slots_in_use_peak = std::max(result.slots_in_use_peak, ++in_use);
      // Buffers for every slot taken so far (kept when B, T and mode are unchanged).
      model_.prepare(ids[mb].size(0), ids[mb].size(1), mode, static_cast<int>(slot_busy_.size()));
    }
    switch (a.type) {
      case parallel::PipelineAction::recv_activation:
      case parallel::PipelineAction::recv_gradient: {
        const bool activation = a.type == parallel::PipelineAction::recv_activation;
        receive(activation ? model_.chunk_input(a.chunk, slot) : model_.chunk_grad(a.chunk, slot), a.peer,
                activation ? kActivationTag : kGradientTag);
        break;
      }
      case parallel::PipelineAction::send_activation:
        sends_[slot].push_back(pp_.send_async(model_.chunk_output(a.chunk, slot), a.peer, kActivationTag));
        break;
      case parallel::PipelineAction::send_gradient:
        sends_[slot].push_back(pp_.send_async(model_.chunk_grad(a.chunk, slot), a.peer, kGradientTag));
        break;
      case parallel::PipelineAction::forward: {
        pp_.start_point_to_point();  // sends issued just before run beside this compute
        if (whole_micro_batch_ && single_stage) {
          MYRIAD_CHECK(
              index + 1 < actions_.size() && actions_[index + 1].type == parallel::PipelineAction::backward &&
                  actions_[index + 1].micro_batch == mb,
              "pipeline: a single stage's forward of micro-batch " << mb << " is not followed by its backward");
          if (backward_observer_) backward_observer_(final_backward_[index + 1] != 0);
          if (const std::optional<std::int64_t> valid = whole_micro_batch_(slot, ids[mb], targets[mb], loss_scale)) {
            result.loss_tokens += *valid;
            ran_whole = mb;
            break;
          }
        }
        result.loss_tokens += model_.forward_chunk(a.chunk, slot, ids[mb], targets[mb]);
        break;
      }
      case parallel::PipelineAction::backward:
        if (ran_whole == mb) {  // the runner ran it with the forward
          slot_busy_[slot] = false;
          --in_use;
          break;
        }
        pp_.start_point_to_point();
        if (backward_observer_) backward_observer_(final_backward_[index] != 0);
        model_.backward_chunk(a.chunk, slot, ids[mb], targets[mb], loss_scale);
        if (a.chunk == 0) {  // the micro-batch's last action here, but for its gradient send
          slot_busy_[slot] = false;
          --in_use;
        }
        break;
    }
  }
  for (std::size_t s = 0; s < sends_.size(); ++s) wait_sends_of(static_cast<int>(s));
  return result;
}

nn::LossSum PipelineExecutor::forward_only(const Tensor& ids, const Tensor& targets) {
  const int p = pp_.size(), rank = pp_.rank(), stages = p * virtual_stages_;
  model_.prepare(ids.size(0), ids.size(1), model_.buffer_mode(), 1);  // forward only: any mode serves
  nn::LossSum loss;
  model_.clear_losses();
  std::vector<distributed::WorkHandle> sends;
  for (int g = 0; g < stages; ++g) {
    if (g % p != rank) continue;
    const int chunk = g / p;
    if (g > 0) pp_.recv_async(model_.chunk_input(chunk, 0), (g - 1) % p, kActivationTag)->wait_on_stream();
    loss.tokens += model_.forward_chunk(chunk, 0, ids, targets);
    if (g + 1 < stages) {
      sends.push_back(pp_.send_async(model_.chunk_output(chunk, 0), (g + 1) % p, kActivationTag));
      pp_.start_point_to_point();
    }
  }
  for (distributed::WorkHandle& send : sends) send->wait_on_stream();
  loss.sum = model_.take_loss_sum();
  return loss;
}

}  // namespace myriad::parallel
