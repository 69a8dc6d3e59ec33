// Trainer: the step loop, evaluation, the update and the non-finite guard (trainer.h).
#include "myriad/train/trainer.h"

#include <chrono>
#include <cmath>
#include <thread>

#include "myriad/distributed/scalar_reduce.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/metrics/attention_metrics.h"
#include "myriad/train/metrics/moe_metrics.h"
#include "myriad/train/metrics/peak_flops.h"

namespace myriad::train {

std::unique_ptr<parallel::PipelineExecutor> make_step_executor(RankState& state, int micro_batches,
                                                               const bool* held_back) {
  // Without pipeline parallelism parallel.pp_schedule has no say: forward then backward of each
  // micro-batch. The observers start each micro-batch's and chunk's data-parallel reduction.
  const PipelineSchedule kind =
      state.config.parallel.pp > 1 ? state.config.parallel.pp_schedule : PipelineSchedule::one_f_one_b;
  auto executor = std::make_unique<parallel::PipelineExecutor>(*state.model, state.pp(), kind, micro_batches,
                                                               state.config.parallel.virtual_stages);
  parallel::DataParallel* dp = state.data_parallel.get();
  executor->set_micro_batch_observer(
      [dp, held_back](bool last) { dp->begin_micro_batch(last && !(held_back && *held_back)); });
  executor->set_backward_observer(
      [dp, held_back](bool final) { dp->begin_pipelined_backward(final && !(held_back && *held_back)); });
  return executor;
}

Trainer::Trainer(RankState& state, StepData& data, CpuGemmTuning* cpu_gemm)
    : state_(state),
      data_(data),
      cpu_gemm_(cpu_gemm),
      schedule_(lr_schedule(state.config.training)),
      recompute_(state.config.training.recompute) {
  const TrainingConfig& t = state_.config.training;
  flops_per_token_ = state_.model->flops_per_token(t.seq_len);
  const std::int64_t local_T = t.seq_len / state_.config.parallel.cp;  // context parallelism: two chunks
  activations_ = state_.model->activation_memory(t.micro_batch, local_T, recompute_);
  pipeline_ = make_step_executor(state_, t.gradient_accumulation, &held_back_);
  if (t.cuda_graphs) {
    const std::string why_not = MicroBatchGraph::unavailable_reason(state_.config);
    if (why_not.empty()) {
      graph_ = std::make_unique<MicroBatchGraph>(state_);
      pipeline_->set_whole_micro_batch_runner(
          [graph = graph_.get()](int slot, const Tensor& ids, const Tensor& targets, float loss_scale) {
            return graph->run(slot, ids, targets, loss_scale);
          });
      state_.log->info(
          "training.cuda_graphs: on: each micro-batch's forward and backward is recorded once and "
          "replayed{}",
          state_.config.parallel.tp > 1 ? " with the tp group's NCCL calls; the metrics count their bytes at each "
                                          "replay but cannot time how much of them is exposed there"
                                        : "");
    } else {
      state_.log->warn("training.cuda_graphs: off: {}", why_not);
    }
  }
  const LoggingConfig& logging = state_.config.logging;
  const PeakFlops peak = state_.device
                             ? gpu_peak_flops(state_.device->identity(), state_.compute_format, logging.peak_tflops)
                             : find_peak_flops(logging.measure_peak, logging.peak_tflops);
  if (peak.mfu_peak > 0) {
    state_.log->info("MFU peak per rank: {:.1f} GFLOP/s ({}); measured host GEMM {:.1f} GFLOP/s", peak.mfu_peak / 1e9,
                     peak.mfu_source, peak.measured / 1e9);
  } else {
    state_.log->warn("MFU: no peak for this device ({}); MFU reads 0", peak.mfu_source);
  }
  std::unique_ptr<GpuSampler> gpu_sampler;
  if (state_.device) {  // the monitoring line's GPU Util, Memory BW, Pcie BW
    std::string why_not = "the runtime reports no PCI bus id";
    const std::string bus = state_.device->pci_bus_id();
    if (!bus.empty()) gpu_sampler = open_nvml_sampler(bus, &why_not);
    if (gpu_sampler) {
      state_.log->info("GPU metrics: {}", gpu_sampler->describe());
    } else {
      state_.log->warn("GPU metrics off: {}", why_not);
    }
  }
  metrics_ = std::make_unique<StepMetricsCollector>(state_.config, *state_.groups, state_.device.get(), peak,
                                                    flops_per_token_, state_.log, std::move(gpu_sampler));
}

parallel::PipelineExecutor& Trainer::executor_for(int micro_batches) {
  if (micro_batches == state_.config.training.gradient_accumulation) return *pipeline_;
  std::unique_ptr<parallel::PipelineExecutor>& executor = other_executors_[micro_batches];
  if (!executor) executor = make_step_executor(state_, micro_batches, &held_back_);
  return *executor;
}

void Trainer::set_schedule(const optim::LrSchedule& schedule) {
  MYRIAD_CHECK(std::isfinite(schedule.lr) && schedule.lr > 0,
               "Engine.set_schedule: lr " << schedule.lr << " must be > 0");
  MYRIAD_CHECK(std::isfinite(schedule.min_lr) && schedule.min_lr >= 0 && schedule.min_lr <= schedule.lr,
               "Engine.set_schedule: min_lr " << schedule.min_lr << " must be in [0, lr " << schedule.lr << "]");
  MYRIAD_CHECK(schedule.warmup_steps >= 0 && schedule.total_steps >= 1 && schedule.warmup_steps <= schedule.total_steps,
               "Engine.set_schedule: warmup_steps " << schedule.warmup_steps << " and total_steps "
                                                    << schedule.total_steps
                                                    << " need 0 <= warmup_steps <= total_steps, total_steps >= 1");
  schedule_ = schedule;
}

void Trainer::sync_tied_embedding() {
  // The first and last pipeline stages each hold the tied embedding; each adds the other's
  // gradient (a + b == b + a exactly), so both apply the same update and stay identical.
  if (!state_.config.model.ties_embeddings() || state_.config.parallel.pp == 1) return;
  const nn::ModelSplit& split = state_.model->split();
  if (!split.first_stage && !split.last_stage) return;
  Tensor grad = state_.model->parameters().find("wte").grad;
  if (!peer_embedding_grad_.defined()) {  // once, reused
    peer_embedding_grad_ = state_.model->parameters().placement().empty(grad.shape());
  }
  const int peer = split.first_stage ? state_.config.parallel.pp - 1 : 0;
  distributed::WorkHandle send = state_.pp().send_async(grad, peer, 2);
  distributed::WorkHandle recv = state_.pp().recv_async(peer_embedding_grad_, peer, 2);
  recv->wait_on_stream();  // both before the sum overwrites what the send reads (a GPU's host runs on)
  send->wait_on_stream();
  nn::add_into(grad, peer_embedding_grad_);
}

MemoryReport Trainer::memory_report() const {
  MemoryReport r;
  parallel::ShardedMemory sharded = state_.data_parallel->memory();
  r.parameter_bytes = sharded.parameter_bytes;
  r.gradient_bytes = sharded.gradient_bytes;
  r.optimizer_bytes = sharded.optimizer_bytes;
  r.comm_buffer_bytes = sharded.buffer_peak_bytes;
  r.activation_bytes = activations_.saved_bytes;
  r.scratch_bytes = activations_.scratch_bytes + (state_.device ? state_.device->workspace_bytes() : 0);
  return r;
}

void Trainer::finish_backward_pass(bool sync) {
  if (sync) {
    sync_tied_embedding();  // pp: the end stages' halves of the tied embedding
    state_.data_parallel->finish_step();
  } else {
    state_.data_parallel->finish_backward();  // ZeRO 2/3 reductions in flight; the reduction waits for a synced pass
  }
}

optim::OptimizerStepStats Trainer::apply_update(float lr, double loss_scale) {
  if (before_update_) before_update_();
  // The step's stream-ordered collectives (and the previous update's gathers), checked on the host
  // where the update's gradient-norm read waits for the device anyway.
  if (state_.device) state_.device->complete_streamed();
  const auto unscale = static_cast<float>(1.0 / loss_scale);
  optim::OptimizerStepStats stats = state_.data_parallel->optimizer_step(lr, unscale);
  if (state_.loss_scaler) {
    state_.loss_scaler->update(!stats.skipped);
    if (stats.skipped) {
      state_.log->warn("step {}: gradient overflow at loss scale {:g}: update skipped, scale now {:g}", state_.step + 1,
                       loss_scale, state_.loss_scaler->scale());
    }
  } else if (stats.skipped) {
    state_.log->warn("step {}: non-finite gradient norm, update skipped", state_.step + 1);
  }
  if (!stats.skipped && !stats.compute_copies_written) state_.refresh_compute_weights();
  if (nn::Fp8Scaling* fp8 = state_.model->fp8_scaling()) end_fp8_step(*fp8);
  ++state_.step;
  return stats;
}

// The step's amaxes, max-reduced over every rank (each holds zeros for the layers it lacks), then
// the delayed scales advance; tensors whose values were clipped this step are counted for the
// metrics and the worst is named in the log.
void Trainer::end_fp8_step(nn::Fp8Scaling& fp8) {
  const std::vector<nn::Fp8Saturation> saturated = fp8.end_step(
      [this](Tensor& amax) { state_.groups->world().all_reduce_async(amax, distributed::ReduceOp::max)->wait(); });
  fp8_saturated_ = static_cast<int>(saturated.size());
  if (saturated.empty()) return;
  const nn::Fp8Saturation& worst = saturated.front();
  state_.log->warn(
      "step {}: fp8: {} tensor(s) exceeded their delayed scale's range and were clipped; worst: {} (amax {:g} > "
      "range {:g}); the scales follow within training.fp8_amax_history steps; if this recurs, raise "
      "training.fp8_margin",
      state_.step + 1, saturated.size(), nn::fp8_tensor_name(state_.model->config(), worst.linear, worst.role),
      worst.amax, worst.range);
}

void Trainer::check_finite_progress(const StepMetrics& metrics, double loss_scale) {
  // An fp16 overflow while the scaler can still lower the scale is the scaler's normal search.
  const bool scaler_backing_off =
      state_.loss_scaler && metrics.skipped && loss_scale > state_.config.training.min_loss_scale;
  const bool nonfinite = !std::isfinite(metrics.loss) || (metrics.skipped && !scaler_backing_off);
  nonfinite_steps_in_a_row_ = nonfinite ? nonfinite_steps_in_a_row_ + 1 : 0;
  const int limit = state_.config.training.max_nonfinite_steps;
  MYRIAD_CHECK(limit == 0 || nonfinite_steps_in_a_row_ < limit,
               "training stopped at step " << state_.step << ": " << nonfinite_steps_in_a_row_
                                           << " steps in a row had a non-finite loss or gradient norm (last: loss "
                                           << metrics.loss << ", grad norm " << metrics.grad_norm << ", loss scale "
                                           << loss_scale << "; training.max_nonfinite_steps is " << limit
                                           << "): lower training.lr, check training.weight_decay, "
                                              "training.initial_loss_scale and the data, or raise "
                                              "training.max_nonfinite_steps (0 = never stop)");
}

StepMetrics Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  metrics_->begin();
  const TrainingConfig& t = state_.config.training;
  // Every micro-batch first (read in the background during the previous step): the loss is
  // normalised by the valid tokens of the global batch.
  const nn::ContextParallel& cp = state_.context_parallel ? *state_.context_parallel : nn::serial_context_parallel();
  const StepData::Batches batch = data_.take(state_.step, cp);
  std::int64_t valid = 0;
  for (const Tensor& targets : batch.targets) valid += count_valid_targets(targets, nn::GptModel::kIgnoreIndex);
  const std::int64_t local_valid = valid;
  valid = distributed::sum_over_ranks(state_.data_group(), valid);
  MYRIAD_CHECK(valid > 0, "step " << state_.step << ": the global batch has no valid target tokens");
  const double scale = state_.loss_scaler ? state_.loss_scaler->scale() : 1.0;  // fp16: the dynamic loss scale
  // Gradients are means over the tokens they are reduced over: the global batch, or under local
  // SGD (training.sync local) the replica's own micro-batches.
  const std::int64_t gradient_tokens =
      state_.data_parallel->local_sgd() ? std::max<std::int64_t>(local_valid, 1) : valid;
  const auto loss_scale = static_cast<float>(scale / static_cast<double>(gradient_tokens));
  state_.data_parallel->zero_grads();
  state_.model->reset_moe_stats();
  state_.model->reset_attention_stats();
  if (cpu_gemm_ != nullptr) cpu_gemm_->begin_step();
  const AbandonGemmRecordingOnThrow abandon{cpu_gemm_};
  (void)pipeline_->run(batch.ids, batch.targets, loss_scale, recompute_);
  if (compute_delay_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(compute_delay_));
  finish_backward_pass(true);
  StepMetrics metrics;
  metrics.lr = schedule_.lr_at(state_.step);
  const optim::OptimizerStepStats stats = apply_update(metrics.lr, scale);
  // The loss is read after the update (one transfer of the recorded per-token losses): nothing in
  // forward or backward waited for a device to learn it.
  const double loss_sum = distributed::sum_over_ranks(
      state_.data_group(), distributed::sum_over_ranks(state_.pp(), state_.model->take_loss_sum()));
  metrics.step = state_.step;
  metrics.loss = loss_sum / static_cast<double>(valid);
  metrics.grad_norm = stats.grad_norm;
  metrics.skipped = stats.skipped;
  metrics.fp8_saturated = fp8_saturated_;
  metrics.loss_scale = scale;
  metrics.tokens_by_source = data_.tokens_by_source(
      state_.step - 1, static_cast<std::int64_t>(t.gradient_accumulation) * state_.dp().size() * t.micro_batch);
  metrics.moe = collect_moe_metrics(*state_.model, state_.data_group(), state_.tp(), state_.pp());
  metrics.attention = collect_attention_metrics(*state_.model, state_.data_group(), state_.tp(), state_.pp());
  metrics.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_->finish(metrics, batch.wait_seconds, pipeline_->bubble_seconds(), memory_report());
  check_finite_progress(metrics, scale);
  if (cpu_gemm_ != nullptr) cpu_gemm_->end_step();  // after a recorded step: the plan, outside its time
  return metrics;
}

double Trainer::evaluate() {
  // Batches are dealt round-robin over dp ranks; every rank runs the same number of forward
  // passes (a rank without a batch left repeats batch 0 and discards it), which ZeRO-3's
  // collective gathers require.
  const TrainingConfig& t = state_.config.training;
  const std::int64_t B = t.micro_batch;
  data::EvalSampler& sampler = data_.eval_sampler();
  const std::int64_t windows = sampler.num_windows();
  MYRIAD_CHECK(windows > 0,
               "evaluate: the validation split is shorter than one sequence of " << t.seq_len + 1 << " tokens");
  const std::int64_t batches = std::min<std::int64_t>(t.eval_batches, (windows + B - 1) / B);
  const int ranks = state_.dp().size(), rank = state_.dp().rank();
  Tensor ids = Tensor::empty({B, t.seq_len}, DType::i32);
  Tensor targets = Tensor::empty({B, t.seq_len}, DType::i32);
  double sum = 0.0;
  std::int64_t tokens = 0;
  for (std::int64_t round = 0; round * ranks < batches; ++round) {
    const std::int64_t batch = round * ranks + rank;
    const bool counted = batch < batches;
    const std::int64_t first = counted ? batch * B : 0;
    const std::int64_t count = std::min<std::int64_t>(B, windows - first);
    Tensor batch_ids = ids.slice(0, 0, count), batch_targets = targets.slice(0, 0, count);
    sampler.fill_batch(first, count, batch_ids, batch_targets);
    if (state_.context_parallel) {  // this rank's two chunks of each sequence
      const std::int64_t local_T = t.seq_len / state_.config.parallel.cp;
      Tensor local_ids = Tensor::empty({count, local_T}, DType::i32),
             local_targets = Tensor::empty({count, local_T}, DType::i32);
      state_.context_parallel->take_chunks(batch_ids, local_ids);
      state_.context_parallel->take_chunks(batch_targets, local_targets);
      batch_ids = local_ids;
      batch_targets = local_targets;
    }
    nn::LossSum loss = forward_loss(batch_ids, batch_targets);
    if (!counted) continue;
    sum += loss.sum;
    tokens += loss.tokens;
  }
  state_.data_parallel->finish_backward();                // drops any prefetched ZeRO-3 unit
  if (state_.device) state_.device->complete_streamed();  // the passes' stream-ordered collectives
  sum = distributed::sum_over_ranks(state_.pp(), sum);    // the loss is computed on the last stage
  tokens = distributed::sum_over_ranks(state_.pp(), tokens);
  sum = distributed::sum_over_ranks(state_.data_group(), sum);
  tokens = distributed::sum_over_ranks(state_.data_group(), tokens);
  const double val_loss = sum / static_cast<double>(std::max<std::int64_t>(tokens, 1));
  metrics_->write_eval(state_.step, val_loss);
  return val_loss;
}

}  // namespace myriad::train
