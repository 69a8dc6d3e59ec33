// MicroBatchGraph: eligibility, the first / warm-up / record / replay sequence and the staging of a
// micro-batch's changing inputs (micro_batch_graph.h).
#include "myriad/train/micro_batch_graph.h"

#include <algorithm>
#include <sstream>

#include "myriad/nn/host_tokens.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/elementwise.h"

namespace myriad::train {

namespace {

// What the host counted between two snapshots (the recorded forward's part).
nn::GptModel::HostCounts counts_between(const nn::GptModel::HostCounts& before, const nn::GptModel::HostCounts& after) {
  const nn::BlockSelectionStats& a = after.attention;
  const nn::BlockSelectionStats& b = before.attention;
  nn::GptModel::HostCounts d{.attention = {.query_blocks = a.query_blocks - b.query_blocks,
                                           .kept_blocks = a.kept_blocks - b.kept_blocks,
                                           .causal_blocks = a.causal_blocks - b.causal_blocks,
                                           .selecting_rows = a.selecting_rows - b.selecting_rows,
                                           .estimated_mass = a.estimated_mass - b.estimated_mass},
                             .moe = after.moe};
  for (std::size_t i = 0; i < d.moe.size() && i < before.moe.size(); ++i) {
    for (std::size_t f = 0; f < d.moe[i].size(); ++f) d.moe[i][f] -= before.moe[i][f];
  }
  return d;
}

// The calls and bytes counted between two snapshots of a communicator's statistics.
distributed::CommStats issued_between(const distributed::CommStats& before, const distributed::CommStats& after) {
  distributed::CommStats d;
  for (std::size_t op = 0; op < d.ops.size(); ++op) {
    d.ops[op].calls = after.ops[op].calls - before.ops[op].calls;
    d.ops[op].bytes_sent = after.ops[op].bytes_sent - before.ops[op].bytes_sent;
    d.ops[op].bytes_received = after.ops[op].bytes_received - before.ops[op].bytes_received;
  }
  return d;
}

}  // namespace

std::vector<distributed::Communicator*> MicroBatchGraph::device_groups() const {
  std::vector<distributed::Communicator*> all;
  auto add = [&](distributed::Communicator& c) {
    if (std::find(all.begin(), all.end(), &c) == all.end()) all.push_back(&c);
  };
  for (const distributed::Axis axis : distributed::kAxes) add(state_.device->group(axis));
  add(state_.device->expert_data());
  add(state_.device->data_context());
  return all;
}

std::string MicroBatchGraph::unavailable_reason(const RunConfig& config) {
  const ParallelConfig& p = config.parallel;
  std::ostringstream why;
  if (config.training.device != ComputeDevice::cuda) {
    why << "training.device is " << choice_name(config.training.device);
  } else if (p.pp > 1) {
    why << "pipeline parallelism (parallel.pp " << p.pp << ") exchanges activations inside the step";
  } else if (config.model.is_moe() && config.model.dropless) {
    why << "dropless routing (model.dropless) sizes the experts' rows from counts read on the host per micro-batch";
  }
  return why.str();
}

MicroBatchGraph::MicroBatchGraph(RankState& state) : state_(state) {
  MYRIAD_CHECK(state_.device, "MicroBatchGraph: training.device cuda has no device runtime");
}

MicroBatchGraph::~MicroBatchGraph() = default;

std::size_t MicroBatchGraph::launches_recorded() const { return recorder_ ? recorder_->launches() : 0; }

void MicroBatchGraph::restart() {
  recorder_.reset();
  ids_ = Tensor();
  targets_ = Tensor();
  phase_ = Phase::first;
  recorded_counts_ = nn::GptModel::HostCounts{};
  recorded_comms_.clear();
}

void MicroBatchGraph::stage(const Tensor& ids, const Tensor& targets, float loss_scale) {
  const std::int64_t vocab = state_.model->config().vocab_size;
  const ops::Placement placement = state_.device->placement();
  if (!ids_.defined() || ids_.shape() != ids.shape()) {
    ids_ = placement.empty(ids.shape(), DType::i32);
    targets_ = placement.empty(targets.shape(), DType::i32);
  }
  copy(placement.from_host(nn::checked_host_tokens("model", "token id", ids, vocab)), ids_);
  copy(placement.from_host(nn::checked_host_tokens("model", "target", targets, vocab, nn::GptModel::kIgnoreIndex)),
       targets_);
  state_.model->write_loss_scale(loss_scale);
}

void MicroBatchGraph::pass(int slot, float loss_scale) {
  nn::GptModel& model = *state_.model;
  model.set_inputs_staged(true);
  try {
    model.forward_chunk(0, slot, ids_, targets_);
    // The LM loss's gradient seed is staged (write_loss_scale); an MoE router's loss gradients read
    // it from there too (nn::AuxLossScale), so replays follow fp16's changing scale.
    model.backward_chunk(0, slot, ids_, targets_, loss_scale);
    // The bucketed reductions the backward started end inside the pass (their NCCL calls and the
    // shard additions are then part of a recording); DataParallel::finish_step finds none left.
    if (recorded_reduces_) state_.data_parallel->finish_backward();
  } catch (...) {
    model.set_inputs_staged(false);
    throw;
  }
  model.set_inputs_staged(false);
}

std::optional<std::int64_t> MicroBatchGraph::run(int slot, const Tensor& ids, const Tensor& targets, float loss_scale) {
  if (phase_ == Phase::off || slot != 0) return std::nullopt;
  // A micro-batch whose backward reduces the gradients over the data group (the step's last) differs
  // from one that does not: the graph records the kind it meets first (the reducing one when every
  // micro-batch is a step's last, training.gradient_accumulation 1), and the other kind runs as
  // usual. Over a data group of one the reduction is the loopback's (nothing, or ZeRO 1's copy into
  // the shard, ordered on the stream): recorded with the rest.
  const bool reduces = state_.data_parallel->reduces_in_backward() && state_.data_group().size() > 1;
  if (phase_ != Phase::first && generation_ != state_.model->buffers_generation()) {
    state_.log->info(
        "training.cuda_graphs: the model's buffers changed (batch shape or recompute mode): recording "
        "again");
    restart();
  }
  if (phase_ == Phase::first) {  // as usual: lazy set-up happens outside the graph and its pool
    generation_ = state_.model->buffers_generation();
    recorded_reduces_ = reduces;
    phase_ = Phase::warm_up;
    return std::nullopt;
  }
  if (reduces != recorded_reduces_) return std::nullopt;
  const std::int64_t valid = count_valid_targets(targets, nn::GptModel::kIgnoreIndex);
  stage(ids, targets, loss_scale);
  switch (phase_) {
    case Phase::warm_up:
      if (!recorder_) recorder_ = state_.device->graph_recorder();
      recorder_->run_in_pool([&] { pass(slot, loss_scale); });
      phase_ = Phase::record;
      break;
    case Phase::record: {
      const nn::GptModel::HostCounts before = state_.model->host_counts();
      const std::vector<distributed::Communicator*> groups = device_groups();
      std::vector<distributed::CommStats> issued;
      for (distributed::Communicator* g : groups) issued.push_back(g->stats());
      try {
        recorder_->record([&] { pass(slot, loss_scale); });
      } catch (const Error& e) {
        state_.log->warn("training.cuda_graphs: recording the micro-batch failed, running without graphs from here: {}",
                         e.what());
        recorder_.reset();
        phase_ = Phase::off;
        return std::nullopt;  // nothing of the pass ran: the caller runs it as usual
      }
      recorded_counts_ = counts_between(before, state_.model->host_counts());
      recorded_comms_.clear();
      for (std::size_t i = 0; i < groups.size(); ++i) {
        recorded_comms_.emplace_back(groups[i], issued_between(issued[i], groups[i]->stats()));
      }
      state_.log->info(
          "training.cuda_graphs: recorded the forward and backward of a micro-batch ({} launches); "
          "replaying it from here",
          recorder_->launches());
      phase_ = Phase::replay;
      recorder_->replay();  // the recording's host code counted this micro-batch already
      ++replays_;
      break;
    }
    case Phase::replay:
      recorder_->replay();
      ++replays_;
      state_.model->add_host_counts(recorded_counts_);
      for (auto& [group, recorded] : recorded_comms_) group->count_replayed(recorded);
      break;
    case Phase::first:
    case Phase::off:
      break;
  }
  state_.model->record_losses(slot);
  return valid;
}

}  // namespace myriad::train
