// Engine: construction from the config (the composition root: layout, precision), the step loop,
// metrics, evaluation, and the calls forwarded to the Checkpointer and the InferenceSession.
#include "myriad/train/engine.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "myriad/core/logging.h"
#include "myriad/core/precision.h"
#include "myriad/core/process_memory.h"
#include "myriad/train/model_parallelism.h"
#include "myriad/distributed/mpi_communicator.h"
#include "myriad/train/metrics/attention_metrics.h"
#include "myriad/train/metrics/moe_metrics.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpointer.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/inference_session.h"

namespace myriad::train {

Engine::Engine(const RunConfig& config, std::shared_ptr<spdlog::logger> log, distributed::ProcessGroups* groups) {
  state_.log = std::move(log);
  if (groups == nullptr) {
    owned_groups_ = std::make_unique<distributed::ProcessGroups>(distributed::ProcessGroups::single());
    groups = owned_groups_.get();
  }
  state_.groups = groups;
  state_.config = config.for_world(state_.groups->grid().world_size()).resolved();
  state_.config.validate(state_.groups->grid().world_size());
  file_only_logger(*state_.log)->info("resolved config:\n{}", state_.config.to_yaml());
  // Rank 0 tokenizes (or validates the cache); the others then find the cache complete.
  distributed::Communicator& world = state_.groups->world();
  distributed::run_on_rank0(world, "data preparation", [&] { data_ = prepare_data(state_.config, *state_.log); });
  if (world.rank() != 0) data_ = prepare_data(state_.config, *state_.log, CacheUse::prepared_by_rank0);
  MYRIAD_CHECK(state_.config.model.vocab_size >= data_.vocab_size,
               "model.vocab_size " << state_.config.model.vocab_size << " is smaller than the vocabulary of the data ("
                                   << data_.vocab_size << " in " << data_.shard_dir << ")");
  const std::int64_t T = state_.config.training.seq_len;
  if (data_.sources.empty()) {
    train_shards_ = std::make_unique<data::ShardSet>(data::ShardSet::open_split(data_.shard_dir, "train"));
    val_shards_ = std::make_unique<data::ShardSet>(data::ShardSet::open_split(data_.shard_dir, "val"));
    train_sampler_ = std::make_unique<data::TrainSampler>(*train_shards_, T, state_.config.training.seed);
  } else {
    // data.sources: one stream per source, mixed per sample; validation reads every source's val split.
    std::vector<const data::ShardSet*> streams;
    std::vector<double> weights;
    std::vector<std::string> val_paths;
    for (const PreparedSource& source : data_.sources) {
      source_shards_.push_back(std::make_unique<data::ShardSet>(data::ShardSet::open_split(source.shard_dir, "train")));
      streams.push_back(source_shards_.back().get());
      weights.push_back(source.weight);
      for (const std::string& path : data::ShardSet::split_paths(source.shard_dir, "val")) val_paths.push_back(path);
    }
    val_shards_ = std::make_unique<data::ShardSet>(val_paths);
    mixture_sampler_ = std::make_unique<data::MixtureSampler>(streams, weights, T, state_.config.training.seed);
  }
  eval_sampler_ = std::make_unique<data::EvalSampler>(*val_shards_, T);
  if (state_.config.training.device == ComputeDevice::cuda) {
    // The one model, placed on the rank's GPU; its groups carry device tensors over NCCL.
    state_.device = make_device_runtime(*state_.groups, state_.config.parallel.collective_timeout);
    state_.log->info("device: {}", state_.device->describe());
  }
  build_rank_model(state_.device ? state_.device->placement() : ops::Placement{}, nullptr);
  schedule_ = lr_schedule(state_.config.training);
  recompute_ = state_.config.training.recompute;
  // Fixed for the run (model, B, T, recompute): computed once, read by every step's metrics.
  flops_per_token_ = state_.model->flops_per_token(state_.config.training.seq_len);
  const std::int64_t local_T = T / state_.config.parallel.cp;  // context parallelism: this rank's two chunks
  activations_ = state_.model->activation_memory(state_.config.training.micro_batch, local_T, recompute_);
  for (int i = 0; i < state_.config.training.gradient_accumulation; ++i) {
    micro_ids_.push_back(Tensor::empty({state_.config.training.micro_batch, local_T}, DType::i32));
    micro_targets_.push_back(Tensor::empty({state_.config.training.micro_batch, local_T}, DType::i32));
    if (state_.config.parallel.cp > 1) {
      batch_ids_.push_back(Tensor::empty({state_.config.training.micro_batch, T}, DType::i32));
      batch_targets_.push_back(Tensor::empty({state_.config.training.micro_batch, T}, DType::i32));
    }
  }
  auto fill = [this](std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) {
    fill_micro_batches(step, ids, targets);
  };
  prefetch_ = state_.config.parallel.cp > 1 ? std::make_unique<BatchPrefetch>(fill, batch_ids_, batch_targets_)
                                            : std::make_unique<BatchPrefetch>(fill, micro_ids_, micro_targets_);
  const PeakFlops peak = find_peak_flops(state_.config.logging.measure_peak, state_.config.logging.peak_tflops);
  state_.log->info("peak per rank: measured {:.1f} GFLOP/s (1024^3 GEMM), datasheet {:.1f} GFLOP/s ({})",
                   peak.measured / 1e9, peak.datasheet / 1e9, peak.datasheet_source);
  checkpointer_ = std::make_unique<Checkpointer>(state_);  // collective: its snapshot and communicator
  inference_ = std::make_unique<InferenceSession>(state_, data_.tokenizer.get(), data_.vocab_size);
  metrics_ = std::make_unique<StepMetricsCollector>(state_.config, *state_.groups, state_.device.get(), peak,
                                                    flops_per_token_, state_.log);
  if (model_parallel()) log_layout();
  // Armed only now: data preparation on rank 0 may legitimately keep the others waiting longer.
  if (auto* mpi_world = dynamic_cast<distributed::MpiCommunicator*>(&world);
      mpi_world != nullptr && state_.config.parallel.collective_timeout > 0) {
    watchdog_ =
        std::make_unique<distributed::CollectiveWatchdog>(*mpi_world, state_.config.parallel.collective_timeout);
    state_.groups->watch_with(*watchdog_);
  }
  MemoryReport mem = memory_report();
  state_.log->info(
      "model: {} parameters ({} layers, C={}, heads {}/{}, V={} padded to {}); {}; dp {} (reductions: {}) ZeRO {} ({} "
      "buckets); "
      "memory per rank: params {:.2f} MiB, grads {:.2f} MiB, optimizer {:.2f} MiB, activations {:.2f} MiB "
      "saved + {:.2f} MiB scratch ({})",
      state_.model->parameters().numel(), state_.config.model.n_layer, state_.config.model.n_embd,
      state_.config.model.n_head, state_.config.model.kv_heads(), state_.config.model.vocab_size,
      state_.config.model.padded_vocab_size(), state_.groups->grid().describe(world.rank()), dp().size(),
      state_.groups->reduction(), state_.config.parallel.zero_stage, state_.data_parallel->layout().buckets().size(),
      mem.parameter_bytes / 1048576.0, mem.gradient_bytes / 1048576.0, mem.optimizer_bytes / 1048576.0,
      mem.activation_bytes / 1048576.0, mem.scratch_bytes / 1048576.0, std::string(choice_name(recompute_)));
  if (const nn::MoeSpec& moe = state_.model->config().moe; moe.enabled()) {
    const std::int64_t capacity = moe.capacity(state_.config.training.seq_len);
    state_.log->info(
        "MoE: {} experts, top {} ({} scores{}), in every {} block(s), {} shared; capacity {} per expert per "
        "sequence; ep {}; {} parameters active per token",
        moe.num_experts, moe.top_k, moe.score == nn::RouterScore::softmax ? "softmax" : "sigmoid",
        moe.normalize_top_k ? ", renormalised" : "", moe.every, moe.shared_experts,
        capacity < 0 ? std::string("unlimited (dropless)") : std::to_string(capacity) + " tokens",
        state_.model->split().ep_size(), state_.model->active_parameters());
  }
  if (const nn::AttentionSpec& att = state_.model->config().attention; att.block_sparse()) {
    state_.log->info(
        "attention: block-sparse, blocks of {}; fixed: window {} + {} global + stride {}; {}; ~{:.0f} keys per "
        "query at T={} (dense causal: {:.0f})",
        att.block_size, att.fixed.local_blocks, att.fixed.global_blocks, att.fixed.stride_blocks,
        att.selects() ? fmt::format("per-head selection to {:g} of the estimated mass (threshold {:g}, at most "
                                    "{} blocks)",
                                    att.sparse_ratio, att.threshold, att.max_blocks)
                      : std::string("no selection"),
        att.mean_keys_per_query(state_.config.training.seq_len), state_.config.training.seq_len,
        static_cast<double>(state_.config.training.seq_len) / 2.0);
  }
}

Engine::~Engine() = default;

// ---- Checkpoints (Checkpointer) and inference (InferenceSession).

std::string Engine::save(bool background) { return checkpointer_->save(background); }

std::string Engine::wait_for_save() { return checkpointer_->wait_for_save(); }

void Engine::load(const std::string& checkpoint_dir) { checkpointer_->load(checkpoint_dir); }

std::string Engine::generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature,
                             std::int64_t top_k, std::uint64_t seed) {
  return inference_->generate(prompt, max_new_tokens, temperature, top_k, seed);
}

nn::Generation Engine::generate_ids(const std::vector<std::int32_t>& prompt, const nn::GenerateArgs& args) {
  return inference_->generate_ids(prompt, args);
}

Tensor Engine::forward_logits(const Tensor& ids) { return inference_->forward_logits(ids); }

void Engine::load_int8(const std::string& path) { inference_->load_int8(path); }

bool Engine::serves_int8() const { return inference_->serves_int8(); }

void Engine::build_rank_model(ops::Placement placement, ops::MetaBackend* meta) {
  auto label = [meta](const char* phase) {
    if (meta != nullptr) meta->set_label(phase);
  };
  const nn::TransformerConfig model_config = transformer_config(state_.config.model, state_.config.model.vocab_size);
  label("model");
  ModelParallelism parallelism = make_model_parallelism(state_.config, model_config, tp(), group(distributed::Axis::ep),
                                                        group(distributed::Axis::cp), pp().rank());
  state_.tensor_parallel = std::move(parallelism.tensor);
  state_.expert_parallel = std::move(parallelism.expert);
  state_.context_parallel = std::move(parallelism.context);
  state_.model = std::make_unique<nn::GptModel>(model_config, parallelism.split, true, placement);
  if (meta == nullptr) state_.model->initialize(state_.config.training.seed);  // meta tensors hold no values
  if (model_parallel()) state_.serial_layout = std::make_unique<SerialLayout>(*state_.model);
  parallel::DataParallelOptions dp_options = data_parallel_options(state_.config);
  dp_options.model_parallel = {&tp(), &pp()};
  dp_options.tensor_parallel = &tp();
  if (state_.config.model.ties_embeddings() && state_.config.parallel.pp > 1 &&
      (state_.model->split().first_stage || state_.model->split().last_stage)) {
    // The end stages' halves of the tied embedding are summed after the schedule: its unit's
    // bucket reduces only then (sync_tied_embedding, before finish_step).
    const std::int64_t wte = state_.model->parameters().find("wte").offset;
    const std::vector<nn::ParamUnit>& units = state_.model->units();
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (units[u].begin <= wte && wte < units[u].end) dp_options.deferred_units.push_back(static_cast<int>(u));
    }
  }
  if (state_.config.parallel.ep > 1) {
    dp_options.expert_data_parallel = state_.device ? &state_.device->expert_data() : &state_.groups->expert_data();
    dp_options.expert_parallel = &group(distributed::Axis::ep);
  }
  label("data_parallel");
  state_.data_parallel = std::make_unique<parallel::DataParallel>(*state_.model, data_group(), dp_options,
                                                                  adamw_config(state_.config.training));
  label("precision");
  setup_precision();
  if (state_.config.training.precision == Precision::fp16) setup_loss_scaler();
  // The one step loop: the rank's schedule (a single stage's without pipeline parallelism, where
  // parallel.pp_schedule has no say: forward then backward of each micro-batch).
  pipeline_ = make_executor(state_.config.training.gradient_accumulation);
  label("other");
}

std::unique_ptr<parallel::PipelineExecutor> Engine::make_executor(int micro_batches) {
  // Without pipeline parallelism parallel.pp_schedule has no say: forward then backward of each
  // micro-batch. The observers start each micro-batch's and chunk's data-parallel reduction
  // (held back while a research backward(sync=false) runs).
  const PipelineSchedule kind =
      state_.config.parallel.pp > 1 ? state_.config.parallel.pp_schedule : PipelineSchedule::one_f_one_b;
  auto executor = std::make_unique<parallel::PipelineExecutor>(*state_.model, pp(), kind, micro_batches,
                                                               state_.config.parallel.virtual_stages);
  executor->set_micro_batch_observer(
      [this](bool last) { state_.data_parallel->begin_micro_batch(last && sync_backward_); });
  executor->set_backward_observer(
      [this](bool final) { state_.data_parallel->begin_pipelined_backward(final && sync_backward_); });
  return executor;
}

void Engine::fill_micro_batches(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) {
  // This rank's rows of every micro-batch of the global batch: micro-batch m of dp rank r holds
  // global samples [(m * dp + r) * B, (m * dp + r + 1) * B).
  const std::int64_t B = state_.config.training.micro_batch;
  const int ranks = dp().size(), rank = dp().rank();
  for (std::size_t m = 0; m < ids.size(); ++m) {
    const std::int64_t first = (static_cast<std::int64_t>(m) * ranks + rank) * B;
    if (mixture_sampler_) {
      mixture_sampler_->fill_batch(step, first, B, ids[m], targets[m]);
    } else {
      train_sampler_->fill_batch(step, first, B, ids[m], targets[m]);
    }
  }
}

void Engine::log_layout() {
  const ParallelConfig& p = state_.config.parallel;
  std::string layers;
  for (const std::vector<int>& chunk : state_.model->split().chunks) {
    if (!layers.empty()) layers += ", ";
    layers += chunk.empty() ? std::string("none") : std::to_string(chunk.front()) + "-" + std::to_string(chunk.back());
  }
  std::string pipeline = "pp 1";
  if (p.pp > 1) {
    const PipelineSchedule kind = p.pp_schedule;
    const int m = state_.config.training.gradient_accumulation;
    parallel::ScheduleCheck check = parallel::simulate_schedule(
        parallel::build_schedule(kind, p.pp, m, p.virtual_stages), p.pp, m, p.virtual_stages);
    pipeline = "pp " + std::to_string(p.pp) + " (" + std::string(choice_name(kind)) + ", " + std::to_string(m) +
               " micro-batches, " + std::to_string(p.virtual_stages) + " chunk(s) per rank; modelled bubble " +
               std::to_string(std::lround(100 * check.idle_fraction)) + "%, up to " +
               std::to_string(check.peak_in_flight.at(pp().rank())) + " chunk forwards in flight on this rank)";
  }
  state_.log->info("layout: tp {}{} x {}; this rank holds layers {}{}{}; {} of the model's {} parameter elements", p.tp,
                   p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "", pipeline, layers,
                   state_.model->split().first_stage ? " + embeddings" : "",
                   state_.model->split().last_stage ? " + head" : "", state_.model->parameters().numel(),
                   state_.serial_layout->serial_numel());
}

void Engine::setup_precision() {
  state_.compute_format = compute_format(state_.config.training.precision);
  if (state_.compute_format == DType::f32) return;
  state_.model->set_activation_precision(state_.compute_format);
  // ZeRO-3: DataParallel rounds each unit it gathers (DataParallelOptions::compute_format).
  if (state_.config.parallel.zero_stage == 3) return;
  // The store's flat values stay the fp32 master weights (optimizer, ZeRO, checkpoints); the
  // parameters the model reads point at a copy rounded to the compute format after every update.
  nn::ParameterStore& store = state_.model->parameters();
  state_.compute_values = store.placement().zeros({store.numel()});
  store.rebind(0, store.numel(), state_.compute_values, Tensor());
  state_.refresh_compute_weights();
}

void Engine::setup_loss_scaler() {
  LossScalerConfig scaler;
  scaler.initial = state_.config.training.initial_loss_scale;
  scaler.window = state_.config.training.loss_scale_window;
  scaler.min_scale = state_.config.training.min_loss_scale;
  state_.loss_scaler = std::make_unique<DynamicLossScaler>(scaler);
}

// local (B, T / cp) <- this rank's two chunks of every sequence of `whole` (B, T): chunks r and
// 2 cp - 1 - r of c = T / (2 cp) positions (nn/context_parallel.h).
void Engine::context_rows(const Tensor& whole, Tensor& local) const {
  const nn::ContextParallel& cp = *state_.context_parallel;
  const std::int64_t c = whole.size(1) / (2 * cp.size());
  for (int half = 0; half < 2; ++half) {
    const std::int64_t from = cp.chunk_index(half) * c;
    local.slice(1, half * c, (half + 1) * c).copy_from(whole.slice(1, from, from + c));
  }
}

nn::LossSum Engine::forward_loss(const Tensor& ids, const Tensor& targets) {
  return pipeline_->forward_only(ids, targets);
}

void Engine::sync_tied_embedding() {
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
  distributed::WorkHandle send = pp().send_async(grad, peer, 2);
  pp().recv(peer_embedding_grad_, peer, 2);
  send->wait();
  nn::add_into(grad, peer_embedding_grad_);
}

std::int64_t Engine::tokens_per_step() const { return train::tokens_per_step(state_.config); }

MemoryReport Engine::memory_report() const {
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

void Engine::finish_backward_pass(bool sync) {
  if (sync) {
    sync_tied_embedding();  // pp: the end stages' halves of the tied embedding
    state_.data_parallel->finish_step();
  } else {
    state_.data_parallel->finish_backward();  // ZeRO 2/3 reductions in flight; the reduction waits for a synced pass
  }
}

optim::OptimizerStepStats Engine::apply_update(float lr, double loss_scale) {
  if (before_update_) before_update_();
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
  if (!stats.skipped) state_.refresh_compute_weights();
  ++state_.step;
  return stats;
}

void Engine::check_finite_progress(const StepMetrics& metrics, double loss_scale) {
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

StepMetrics Engine::step() {
  inference_->refuse_training("Engine.step");
  checkpointer_->check_fresh_run_folder();
  research_ids_.clear();  // a research-API batch or reduction in progress does not survive a whole step
  research_reduced_ = false;
  const auto start = std::chrono::steady_clock::now();
  metrics_->begin();
  const int micro_batches = state_.config.training.gradient_accumulation;
  // Load every micro-batch first (read in the background during the previous step): the loss is
  // normalised by the valid tokens of the global batch.
  const bool split_sequence = state_.config.parallel.cp > 1;
  const double data_wait = split_sequence ? prefetch_->take(state_.step, batch_ids_, batch_targets_)
                                          : prefetch_->take(state_.step, micro_ids_, micro_targets_);
  std::int64_t valid = 0;
  for (int m = 0; m < micro_batches; ++m) {
    if (split_sequence) {
      context_rows(batch_ids_[m], micro_ids_[m]);
      context_rows(batch_targets_[m], micro_targets_[m]);
    }
    valid += count_valid_targets(micro_targets_[m], nn::GptModel::kIgnoreIndex);
  }
  const std::int64_t local_valid = valid;
  valid = distributed::sum_over_ranks(data_group(), valid);
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
  const parallel::PipelineStepResult run = pipeline_->run(micro_ids_, micro_targets_, loss_scale, recompute_);
  bubble_seconds_ = run.bubble_seconds;
  if (compute_delay_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(compute_delay_));
  finish_backward_pass(true);
  const double loss_sum =
      distributed::sum_over_ranks(data_group(), distributed::sum_over_ranks(pp(), run.loss_sum));  // last stage's
  StepMetrics metrics;
  metrics.lr = schedule_.lr_at(state_.step);
  const optim::OptimizerStepStats stats = apply_update(metrics.lr, scale);
  metrics.step = state_.step;
  metrics.loss = loss_sum / static_cast<double>(valid);
  metrics.grad_norm = stats.grad_norm;
  metrics.skipped = stats.skipped;
  metrics.loss_scale = scale;
  if (mixture_sampler_) {  // data.sources: every rank knows every sample's source (no communication)
    metrics.tokens_by_source.assign(mixture_sampler_->source_count(), 0);
    const std::int64_t samples =
        static_cast<std::int64_t>(micro_batches) * dp().size() * state_.config.training.micro_batch;
    for (std::int64_t j = 0; j < samples; ++j) {
      metrics.tokens_by_source[mixture_sampler_->source_of(state_.step - 1, j)] += state_.config.training.seq_len;
    }
  }
  metrics.moe = collect_moe_metrics(*state_.model, dp(), tp(), pp());
  metrics.attention = collect_attention_metrics(*state_.model, data_group(), tp(), pp());
  metrics.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_->finish(metrics, data_wait, bubble_seconds_, memory_report());
  check_finite_progress(metrics, scale);
  return metrics;
}

double Engine::evaluate() {
  // Batches are dealt round-robin over dp ranks; every rank runs the same number of forward
  // passes (a rank without a batch left repeats batch 0 and discards it), which ZeRO-3's
  // collective gathers require.
  const std::int64_t B = state_.config.training.micro_batch;
  const std::int64_t windows = eval_sampler_->num_windows();
  MYRIAD_CHECK(windows > 0, "evaluate: the validation split is shorter than one sequence of "
                                << state_.config.training.seq_len + 1 << " tokens");
  const std::int64_t batches = std::min<std::int64_t>(state_.config.training.eval_batches, (windows + B - 1) / B);
  const int ranks = dp().size(), rank = dp().rank();
  Tensor ids = Tensor::empty({B, state_.config.training.seq_len}, DType::i32);
  Tensor targets = Tensor::empty({B, state_.config.training.seq_len}, DType::i32);
  double sum = 0.0;
  std::int64_t tokens = 0;
  for (std::int64_t round = 0; round * ranks < batches; ++round) {
    const std::int64_t batch = round * ranks + rank;
    const bool counted = batch < batches;
    const std::int64_t first = counted ? batch * B : 0;
    const std::int64_t count = std::min<std::int64_t>(B, windows - first);
    Tensor batch_ids = ids.slice(0, 0, count), batch_targets = targets.slice(0, 0, count);
    eval_sampler_->fill_batch(first, count, batch_ids, batch_targets);
    if (state_.config.parallel.cp > 1) {  // this rank's two chunks of each sequence
      const std::int64_t local_T = state_.config.training.seq_len / state_.config.parallel.cp;
      Tensor local_ids = Tensor::empty({count, local_T}, DType::i32),
             local_targets = Tensor::empty({count, local_T}, DType::i32);
      context_rows(batch_ids, local_ids);
      context_rows(batch_targets, local_targets);
      batch_ids = local_ids;
      batch_targets = local_targets;
    }
    nn::LossSum loss = forward_loss(batch_ids, batch_targets);
    if (!counted) continue;
    sum += loss.sum;
    tokens += loss.tokens;
  }
  state_.data_parallel->finish_backward();       // drops any prefetched ZeRO-3 unit
  sum = distributed::sum_over_ranks(pp(), sum);  // the loss is computed on the last stage
  tokens = distributed::sum_over_ranks(pp(), tokens);
  sum = distributed::sum_over_ranks(data_group(), sum);
  tokens = distributed::sum_over_ranks(data_group(), tokens);
  const double val_loss = sum / static_cast<double>(std::max<std::int64_t>(tokens, 1));
  metrics_->write_eval(state_.step, val_loss);
  return val_loss;
}

}  // namespace myriad::train
