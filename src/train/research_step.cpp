// ResearchStep: the research API's step in parts over the caller's batches (research_step.h).
#include "myriad/train/research_step.h"

#include <algorithm>
#include <cmath>

#include "myriad/core/error.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/train/metrics/attention_metrics.h"
#include "myriad/train/metrics/moe_metrics.h"

namespace myriad::train {

namespace {

// FNV-1a over the bytes of a host tensor, folded to 32 bits (exact as a double).
std::uint32_t content_hash(const Tensor& t, std::uint64_t h = 1469598103934665603ULL) {
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

}  // namespace

void ResearchStep::check_caller_rows(const char* what, const Tensor& host_ids, const Tensor& host_targets) {
  const int V = static_cast<int>(state_.config.model.vocab_size);
  const std::int32_t* id = host_ids.data<std::int32_t>();
  const std::int32_t* target = host_targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < host_ids.numel(); ++i) {
    MYRIAD_CHECK(id[i] >= 0 && id[i] < V, what << ": token " << id[i] << " at flat position " << i
                                               << " is outside the vocabulary [0, " << V << ")");
    MYRIAD_CHECK(target[i] == nn::GptModel::kIgnoreIndex || (target[i] >= 0 && target[i] < V),
                 what << ": target " << target[i] << " at flat position " << i << " is outside [0, " << V
                      << ") and not the ignore index " << nn::GptModel::kIgnoreIndex);
  }
  // The ranks of one replica (tp, pp, cp) compute on the same rows: a different batch on one of
  // them would silently mix two batches.
  const double mine = content_hash(host_targets, content_hash(host_ids));
  for (distributed::Axis axis : {distributed::Axis::tp, distributed::Axis::pp, distributed::Axis::cp}) {
    distributed::Communicator& group = state_.groups->group(axis);
    if (group.size() == 1) continue;
    std::vector<double> hashes(static_cast<std::size_t>(group.size()), 0.0);
    hashes[static_cast<std::size_t>(group.rank())] = mine;
    hashes = distributed::sum_over_ranks(group, hashes);
    for (std::size_t r = 0; r < hashes.size(); ++r) {
      MYRIAD_CHECK(hashes[r] == hashes[0],
                   what << ": the " << distributed::axis_name(axis) << " ranks of one data-parallel "
                        << "replica must pass the same rows, but " << distributed::axis_name(axis) << " rank " << r
                        << " passed other rows than " << distributed::axis_name(axis) << " rank 0");
    }
  }
}

const nn::ContextParallel& ResearchStep::context() const {
  return state_.context_parallel ? *state_.context_parallel : nn::serial_context_parallel();
}

void ResearchStep::split_caller_batch(const Tensor& ids, const Tensor& targets) {
  std::vector<Tensor>& micro_ids = ids_;
  std::vector<Tensor>& micro_targets = targets_;
  const std::int64_t B = state_.config.training.micro_batch, T = state_.config.training.seq_len;
  for (const auto& [what, t] : {std::pair{"tokens", &ids}, std::pair{"targets", &targets}}) {
    MYRIAD_CHECK(t->dim() == 2 && t->dtype() == DType::i32 && t->size(1) == T && t->size(0) >= B && t->size(0) % B == 0,
                 "Engine.forward: " << what << " must be (rows, training.seq_len " << T
                                    << ") int32 with rows a positive multiple of training.micro_batch " << B << ", got "
                                    << shape_string(t->shape()) << " " << dtype_name(t->dtype()));
  }
  MYRIAD_CHECK(ids.size(0) == targets.size(0), "Engine.forward: tokens " << shape_string(ids.shape()) << " and targets "
                                                                         << shape_string(targets.shape())
                                                                         << " have different rows");
  const Tensor host_ids = ids.contiguous(), host_targets = targets.contiguous();
  check_caller_rows("Engine.forward", host_ids, host_targets);
  const std::int64_t count = ids.size(0) / B, local_T = T / state_.config.parallel.cp;
  micro_ids.resize(static_cast<std::size_t>(count));
  micro_targets.resize(static_cast<std::size_t>(count));
  for (std::int64_t m = 0; m < count; ++m) {
    const auto i = static_cast<std::size_t>(m);
    micro_ids[i] = Tensor::empty({B, local_T}, DType::i32);
    micro_targets[i] = Tensor::empty({B, local_T}, DType::i32);
    const Tensor rows_ids = host_ids.slice(0, m * B, (m + 1) * B),
                 rows_targets = host_targets.slice(0, m * B, (m + 1) * B);
    if (state_.config.parallel.cp > 1) {
      context().take_chunks(rows_ids, micro_ids[i]);
      context().take_chunks(rows_targets, micro_targets[i]);
    } else {
      micro_ids[i].copy_from(rows_ids);
      micro_targets[i].copy_from(rows_targets);
    }
  }
}

double ResearchStep::forward(const Tensor& ids, const Tensor& targets) {
  split_caller_batch(ids, targets);
  std::int64_t valid = 0;
  for (const Tensor& t : targets_) valid += count_valid_targets(t, nn::GptModel::kIgnoreIndex);
  valid = distributed::sum_over_ranks(state_.data_group(), valid);
  MYRIAD_CHECK(valid > 0, "Engine.forward: the global batch has no valid target tokens");
  double sum = 0.0;
  // backward() runs this batch again: the MoE and attention telemetry count it there, once.
  state_.model->set_recording_stats(false);
  try {
    for (std::size_t m = 0; m < ids_.size(); ++m) sum += trainer_.forward_loss(ids_[m], targets_[m]).sum;
  } catch (...) {
    state_.model->set_recording_stats(true);
    throw;
  }
  state_.model->set_recording_stats(true);
  state_.data_parallel->finish_backward();                // ZeRO-3: drops a prefetched unit
  if (state_.device) state_.device->complete_streamed();  // the passes' stream-ordered collectives
  sum =
      distributed::sum_over_ranks(state_.data_group(), distributed::sum_over_ranks(state_.pp(), sum));  // last stage's
  valid_ = valid;
  loss_sum_ += sum;
  loss_tokens_ += valid;
  return sum / static_cast<double>(valid);
}

double ResearchStep::evaluate_on(const Tensor& ids, const Tensor& targets) {
  const char* what = "Engine.evaluate";
  const std::int64_t cp = state_.config.parallel.cp;
  for (const auto& [name, t] : {std::pair{"tokens", &ids}, std::pair{"targets", &targets}}) {
    MYRIAD_CHECK(t->dim() == 2 && t->dtype() == DType::i32 && t->size(0) >= 1 && t->size(1) >= 1 &&
                     t->size(1) <= state_.config.model.context_length && (cp == 1 || t->size(1) % (2 * cp) == 0),
                 what << ": " << name << " must be (rows, T) int32 with rows >= 1 and 1 <= T <= model.context_length "
                      << state_.config.model.context_length << (cp > 1 ? " and T a multiple of 2 * parallel.cp" : "")
                      << ", got " << shape_string(t->shape()) << " " << dtype_name(t->dtype()));
  }
  MYRIAD_CHECK(ids.shape() == targets.shape(), what << ": tokens " << shape_string(ids.shape()) << " and targets "
                                                    << shape_string(targets.shape()) << " differ in shape");
  const Tensor host_ids = ids.contiguous(), host_targets = targets.contiguous();
  check_caller_rows(what, host_ids, host_targets);
  // Chunks of at most training.micro_batch rows; every rank of the data group runs as many
  // forward passes as the rank with the most (ZeRO-3 gathers are collective): the extra ones
  // repeat chunk 0 and are not counted.
  const std::int64_t B = state_.config.training.micro_batch, rows = ids.size(0), T = ids.size(1);
  const std::int64_t chunks = (rows + B - 1) / B;
  distributed::Communicator& data = state_.data_group();
  std::vector<double> counts(static_cast<std::size_t>(data.size()), 0.0);
  counts[static_cast<std::size_t>(data.rank())] = static_cast<double>(chunks);
  counts = distributed::sum_over_ranks(data, counts);
  const auto rounds = static_cast<std::int64_t>(*std::max_element(counts.begin(), counts.end()));
  double sum = 0.0;
  std::int64_t tokens = 0;
  for (std::int64_t round = 0; round < rounds; ++round) {
    const bool counted = round < chunks;
    const std::int64_t first = counted ? round * B : 0, count = std::min(B, rows - first);
    Tensor chunk_ids = host_ids.slice(0, first, first + count),
           chunk_targets = host_targets.slice(0, first, first + count);
    if (cp > 1) {  // this rank's two chunks of each sequence
      Tensor local_ids = Tensor::empty({count, T / cp}, DType::i32),
             local_targets = Tensor::empty({count, T / cp}, DType::i32);
      context().take_chunks(chunk_ids, local_ids);
      context().take_chunks(chunk_targets, local_targets);
      chunk_ids = local_ids;
      chunk_targets = local_targets;
    } else {
      chunk_ids = chunk_ids.contiguous();
      chunk_targets = chunk_targets.contiguous();
    }
    const nn::LossSum loss = trainer_.forward_loss(chunk_ids, chunk_targets);
    if (!counted) continue;
    sum += loss.sum;
    tokens += loss.tokens;
  }
  state_.data_parallel->finish_backward();                // ZeRO-3: drops a prefetched unit
  if (state_.device) state_.device->complete_streamed();  // the passes' stream-ordered collectives
  sum = distributed::sum_over_ranks(data, distributed::sum_over_ranks(state_.pp(), sum));
  tokens = distributed::sum_over_ranks(data, distributed::sum_over_ranks(state_.pp(), tokens));
  MYRIAD_CHECK(tokens > 0, what << ": no valid target in the batch (every target is the ignore index "
                                << nn::GptModel::kIgnoreIndex << ")");
  return sum / static_cast<double>(tokens);
}

void ResearchStep::backward(double scale, bool sync) {
  MYRIAD_CHECK(!ids_.empty(), "Engine.backward: no batch; call forward(tokens, targets) first");
  MYRIAD_CHECK(!reduced_,
               "Engine.backward: the gradients were already reduced over data parallelism by a "
               "backward with sync=True; call zero_grad() or optimizer_step() first, or pass "
               "sync=False to every backward but the last of an accumulation");
  MYRIAD_CHECK(std::isfinite(scale), "Engine.backward: scale " << scale << " must be finite");
  MYRIAD_CHECK(!state_.data_parallel->local_sgd() && state_.data_parallel->exchanges_exactly(),
               "Engine.backward: parallel.sync local and compressed gradient exchanges are not supported by the "
               "research API (their state follows step()); use Engine.step()");
  const double loss_scale = state_.loss_scaler ? state_.loss_scaler->scale() : 1.0;
  const auto seed = static_cast<float>(loss_scale * scale / static_cast<double>(valid_));
  trainer_.hold_back_reduction(!sync);
  CpuGemmTuning* cpu_gemm = trainer_.cpu_gemm();  // training.cpu_gemm: recorded as step() records
  if (cpu_gemm != nullptr) cpu_gemm->begin_step();
  const AbandonGemmRecordingOnThrow abandon{cpu_gemm};
  try {
    trainer_.executor_for(static_cast<int>(ids_.size())).run(ids_, targets_, seed, trainer_.recompute());
    trainer_.finish_backward_pass(sync);
  } catch (...) {
    trainer_.hold_back_reduction(false);
    throw;
  }
  trainer_.hold_back_reduction(false);
  reduced_ = sync;
  ids_.clear();
  targets_.clear();
}

void ResearchStep::zero_grad() {
  state_.data_parallel->zero_grads();
  state_.model->reset_moe_stats();
  state_.model->reset_attention_stats();
  reduced_ = false;
}

void ResearchStep::discard() {
  ids_.clear();
  targets_.clear();
  reduced_ = false;
}

StepMetrics ResearchStep::optimizer_step(std::optional<double> lr) {
  MYRIAD_CHECK(reduced_,
               "Engine.optimizer_step: no reduced gradients; call backward() (with sync=True, "
               "the default) after forward() first");
  MYRIAD_CHECK(!lr || (std::isfinite(*lr) && *lr >= 0.0),
               "Engine.optimizer_step: lr " << *lr << " must be finite and >= 0");
  const double scale = state_.loss_scaler ? state_.loss_scaler->scale() : 1.0;
  const AbandonGemmRecordingOnThrow abandon{trainer_.cpu_gemm()};
  StepMetrics metrics;
  metrics.lr = lr ? static_cast<float>(*lr) : trainer_.schedule().lr_at(state_.step);
  const optim::OptimizerStepStats stats = trainer_.apply_update(metrics.lr, scale);
  metrics.step = state_.step;
  metrics.loss = loss_tokens_ > 0 ? loss_sum_ / static_cast<double>(loss_tokens_) : 0.0;
  metrics.grad_norm = stats.grad_norm;
  metrics.fp8_saturated = trainer_.fp8_saturated();
  metrics.skipped = stats.skipped;
  metrics.loss_scale = scale;
  metrics.moe = collect_moe_metrics(*state_.model, state_.data_group(), state_.tp(), state_.pp());
  metrics.attention = collect_attention_metrics(*state_.model, state_.data_group(), state_.tp(), state_.pp());
  reduced_ = false;
  loss_sum_ = 0.0;
  loss_tokens_ = 0;
  trainer_.check_finite_progress(metrics, scale);
  if (CpuGemmTuning* cpu_gemm = trainer_.cpu_gemm()) cpu_gemm->end_step();  // after a recorded step: the plan
  return metrics;
}

std::pair<Tensor, Tensor> ResearchStep::train_batch(std::int64_t step) const {
  MYRIAD_CHECK(step >= 0, "Engine.train_batch: step " << step << " must be >= 0");
  const int micro_batches = state_.config.training.gradient_accumulation;
  const std::int64_t B = state_.config.training.micro_batch, T = state_.config.training.seq_len;
  std::vector<Tensor> ids, targets;
  for (int m = 0; m < micro_batches; ++m) {
    ids.push_back(Tensor::empty({B, T}, DType::i32));
    targets.push_back(Tensor::empty({B, T}, DType::i32));
  }
  data_.fill(step, ids, targets);
  Tensor all_ids = Tensor::empty({micro_batches * B, T}, DType::i32);
  Tensor all_targets = Tensor::empty({micro_batches * B, T}, DType::i32);
  for (int m = 0; m < micro_batches; ++m) {
    all_ids.slice(0, m * B, (m + 1) * B).copy_from(ids[static_cast<std::size_t>(m)]);
    all_targets.slice(0, m * B, (m + 1) * B).copy_from(targets[static_cast<std::size_t>(m)]);
  }
  return {all_ids, all_targets};
}

std::vector<OwnedSlice> ResearchStep::owned_slices() {
  const std::vector<optim::OptimizerSegment>& segments = state_.data_parallel->optimizer().segments();
  const std::vector<parallel::ZeroSegment>& zero = state_.data_parallel->segments();
  MYRIAD_CHECK(segments.size() == zero.size(), "Engine: optimizer and ZeRO segments disagree");
  std::vector<OwnedSlice> out;
  out.reserve(segments.size());
  const nn::ParameterStore& store = state_.model->parameters();
  optim::AdamWOptimizer& adam = state_.data_parallel->optimizer();
  std::int64_t packed = 0;  // m and v hold the segments back to back
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::int64_t n = segments[i].value.numel();
    const nn::Parameter& p = store[zero[i].param];
    OwnedSlice slice;
    slice.name = p.name;
    slice.shape = p.shape;
    slice.start = zero[i].begin - p.offset;
    slice.value = segments[i].value;
    slice.grad = segments[i].grad;
    slice.m = adam.m().slice(0, packed, packed + n);
    slice.v = adam.v().slice(0, packed, packed + n);
    packed += n;
    out.push_back(std::move(slice));
  }
  return out;
}

}  // namespace myriad::train
