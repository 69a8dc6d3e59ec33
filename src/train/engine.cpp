// Engine: the composition root (layout, model, precision, the parts) and the calls forwarded to
// the parts (engine.h).
#include "myriad/train/engine.h"

#include <cmath>
#include <filesystem>

#include "myriad/core/logging.h"
#include "myriad/distributed/collective_watchdog.h"
#include "myriad/distributed/mpi_communicator.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/cpu_gemm.h"
#include "myriad/parallel/pipeline_schedule.h"
#include "myriad/train/checkpoint/checkpoint_tokenizer.h"
#include "myriad/train/checkpoint/checkpointer.h"
#include "myriad/train/data/step_data.h"
#include "myriad/train/inference_session.h"
#include "myriad/train/compose_rank.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/cpu_gemm_tuning.h"
#include "myriad/train/research_step.h"
#include "myriad/train/trainer.h"

namespace myriad::train {

namespace {

// Every rank's CPU GEMMs on one library (ops/cpu_gemm.h), so a run's ranks compute alike: oneDNN
// only where every rank runs it, else OpenBLAS everywhere (said why).
void agree_on_cpu_gemm(distributed::Communicator& world, spdlog::logger& log) {
  const bool mine = cpu::gemm_library() == cpu::GemmLibrary::onednn;
  const std::int64_t with_onednn = distributed::sum_over_ranks(world, std::int64_t{mine ? 1 : 0});
  if (with_onednn > 0 && with_onednn < world.size()) {
    cpu::set_gemm_library(cpu::GemmLibrary::openblas);
    log.warn("CPU GEMMs: OpenBLAS on every rank — oneDNN runs on {} of {} ranks only (MYRIAD_CPU_GEMM, libdnnl2)",
             with_onednn, world.size());
  }
}

}  // namespace

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
  distributed::Communicator& world = state_.groups->world();
  agree_on_cpu_gemm(world, *state_.log);
  // The keys first: a missing or wrong key stops the run before any data or training.
  distributed::run_on_every_rank(world, "security.key_file", [&] {
    state_.at_rest = data::AtRest::from_key_file(state_.config.security.key_file);
    MYRIAD_CHECK(!state_.config.security.encrypt_token_shards || state_.at_rest.encrypts(),
                 "security.encrypt_token_shards is true but no key is set: name a key file with security.key_file "
                 "or $"
                     << data::kKeyFileVariable << " (myriad keys new FILE makes one)");
    const std::string resume = resume_checkpoint_dir(state_.config);
    if (!resume.empty()) {
      try {
        state_.at_rest.check_key((std::filesystem::path(resume) / "manifest.json").string());
      } catch (const Error& e) {
        MYRIAD_THROW("checkpoint.resume: " << e.message());
      }
    }
  });
  if (state_.at_rest.encrypts()) state_.log->info("checkpoints at rest: {}", state_.at_rest.describe());
  data_ = std::make_unique<StepData>(state_.config, *state_.log, world, state_.groups->group(distributed::Axis::dp),
                                     state_.at_rest);
  if (state_.config.training.device == ComputeDevice::cuda) {
    // The one model, placed on the rank's GPU; its groups carry device tensors over NCCL.
    state_.device = make_device_runtime(
        *state_.groups,
        DeviceRuntimeOptions{.collective_timeout = state_.config.parallel.collective_timeout,
                             .hierarchical_data_parallel = state_.config.parallel.dp_reduce == DpReduce::hierarchical,
                             .exact_sums = state_.config.parallel.dp_reduce_exact});
    state_.log->info("device: {}", state_.device->describe());
    if (state_.config.training.precision == Precision::fp8) {
      const std::string why_not = state_.device->fp8_unavailable();
      MYRIAD_CHECK(why_not.empty(),
                   "training.precision fp8 with training.device cuda: " << why_not << " (use bf16 on this GPU)");
    }
  }
  if (!state_.device) state_.log->info("CPU GEMMs: {}", cpu::gemm_library_description(cpu::gemm_library()));
  compose_rank(state_, state_.device ? state_.device->placement() : ops::Placement{}, nullptr);
  if (state_.device && state_.compute_format != DType::f32) {
    state_.log->info("attention's 16-bit products (dense, no cp, head dim 64 / 128): {}",
                     state_.device->sixteen_bit_attention());
  }
  if (state_.config.training.precision == Precision::fp8) {
    state_.log->info(
        "precision fp8: the {} blocks' dense linear layers on FP8 GEMMs (inputs and weights E4M3, output gradients "
        "E5M2), per-tensor delayed scaling over training.fp8_amax_history {} steps with training.fp8_margin {}; the "
        "rest (attention, norms, head, MoE experts) in bf16",
        state_.config.model.n_layer, state_.config.training.fp8_amax_history, state_.config.training.fp8_margin);
  }
  cpu_gemm_ = std::make_unique<CpuGemmTuning>(state_);
  trainer_ = std::make_unique<Trainer>(state_, *data_, cpu_gemm_.get());
  research_ = std::make_unique<ResearchStep>(state_, *trainer_, *data_);
  // Collective: its snapshot and communicator. It saves the tokenizer into every checkpoint.
  checkpointer_ = std::make_unique<Checkpointer>(state_, data_->tokenizer(), cpu_gemm_.get());
  inference_ = std::make_unique<InferenceSession>(state_, data_->tokenizer(), data_->vocab_size());
  if (state_.model_parallel()) log_layout();
  // Armed only now: data preparation on rank 0 may legitimately keep the others waiting longer.
  if (auto* mpi_world = dynamic_cast<distributed::MpiCommunicator*>(&world);
      mpi_world != nullptr && state_.config.parallel.collective_timeout > 0) {
    watchdog_ =
        std::make_unique<distributed::CollectiveWatchdog>(*mpi_world, state_.config.parallel.collective_timeout);
    state_.groups->watch_with(*watchdog_);
  }
  log_model();
}

Engine::~Engine() = default;

std::int64_t Engine::tokens_per_step() const { return train::tokens_per_step(state_.config); }

void Engine::log_model() {
  MemoryReport mem = memory_report();
  state_.log->info(
      "model: {} parameters ({} layers, C={}, heads {}/{}, V={} padded to {}); {}; dp {} (reductions: {}) ZeRO {} ({} "
      "buckets); "
      "memory per rank: params {:.2f} MiB, grads {:.2f} MiB, optimizer {:.2f} MiB, activations {:.2f} MiB "
      "saved + {:.2f} MiB scratch ({})",
      state_.model->parameters().numel(), state_.config.model.n_layer, state_.config.model.n_embd,
      state_.config.model.n_head, state_.config.model.kv_heads(), state_.config.model.vocab_size,
      state_.config.model.padded_vocab_size(), state_.groups->grid().describe(state_.groups->rank()),
      state_.dp().size(), state_.groups->reduction(), state_.config.parallel.zero_stage,
      state_.data_parallel->layout().buckets().size(), mem.parameter_bytes / 1048576.0, mem.gradient_bytes / 1048576.0,
      mem.optimizer_bytes / 1048576.0, mem.activation_bytes / 1048576.0, mem.scratch_bytes / 1048576.0,
      std::string(choice_name(trainer_->recompute())));
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

// ---- Checkpoints (Checkpointer) and inference (InferenceSession).

std::string Engine::save(bool background) {
  inference_->refuse_training("Engine.save");
  return checkpointer_->save(background);
}

std::string Engine::wait_for_save() { return checkpointer_->wait_for_save(); }

void Engine::load(const std::string& checkpoint_dir) {
  inference_->refuse_training("Engine.load");
  checkpointer_->load(checkpoint_dir);
}

std::string Engine::generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature,
                             std::int64_t top_k, std::uint64_t seed) {
  cpu_gemm_->activate();
  return inference_->generate(prompt, max_new_tokens, temperature, top_k, seed);
}

nn::Generation Engine::generate_ids(const std::vector<std::int32_t>& prompt, const nn::GenerateArgs& args) {
  cpu_gemm_->activate();
  return inference_->generate_ids(prompt, args);
}

Tensor Engine::forward_logits(const Tensor& ids) {
  cpu_gemm_->activate();
  return inference_->forward_logits(ids);
}

void Engine::load_int8(const std::string& path) { inference_->load_int8(path); }

bool Engine::serves_int8() const { return inference_->serves_int8(); }

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
               std::to_string(check.peak_in_flight.at(state_.pp().rank())) + " chunk forwards in flight on this rank)";
  }
  state_.log->info("layout: tp {}{} x {}; this rank holds layers {}{}{}; {} of the model's {} parameter elements", p.tp,
                   p.sequence_parallel && p.tp > 1 ? " (sequence parallel)" : "", pipeline, layers,
                   state_.model->split().first_stage ? " + embeddings" : "",
                   state_.model->split().last_stage ? " + head" : "", state_.model->parameters().numel(),
                   state_.serial_layout->serial_numel());
}

MemoryReport Engine::memory_report() const {
  MemoryReport r = trainer_->memory_report();
  if (serves_int8()) {  // what load_int8 left: the int8 weights, the f32 rest; no gradients or moments
    r.parameter_bytes = state_.model->parameters().value_bytes();
    r.gradient_bytes = 0;
    r.optimizer_bytes = 0;
  }
  return r;
}

StepMetrics Engine::step() {
  inference_->refuse_training("Engine.step");
  checkpointer_->check_fresh_run_folder();
  research_->discard();  // a research-API batch or reduction in progress does not survive a whole step
  return trainer_->step();
}

double Engine::evaluate() {
  cpu_gemm_->activate();
  return trainer_->evaluate();
}

double Engine::forward(const Tensor& ids, const Tensor& targets) {
  checkpointer_->check_fresh_run_folder();
  cpu_gemm_->activate();  // not recorded: backward() runs the same GEMMs again and records them
  return research_->forward(ids, targets);
}

double Engine::evaluate_on(const Tensor& ids, const Tensor& targets) {
  cpu_gemm_->activate();
  return research_->evaluate_on(ids, targets);
}

void Engine::backward(double scale, bool sync) {
  inference_->refuse_training("Engine.backward");
  research_->backward(scale, sync);
}

void Engine::zero_grad() { research_->zero_grad(); }

StepMetrics Engine::optimizer_step(std::optional<double> lr) {
  inference_->refuse_training("Engine.optimizer_step");
  return research_->optimizer_step(lr);
}

std::pair<Tensor, Tensor> Engine::train_batch(std::int64_t step) { return research_->train_batch(step); }

std::vector<Engine::OwnedSlice> Engine::owned_slices() { return research_->owned_slices(); }

const optim::LrSchedule& Engine::schedule() const { return trainer_->schedule(); }

void Engine::set_schedule(const optim::LrSchedule& schedule) { trainer_->set_schedule(schedule); }

void Engine::set_before_update(std::function<void()> hook) { trainer_->set_before_update(std::move(hook)); }

const data::BpeTokenizer* Engine::tokenizer() const { return data_->tokenizer(); }

double Engine::flops_per_token() const { return trainer_->flops_per_token(); }

const PeakFlops& Engine::peak_flops() const { return trainer_->metrics().peak(); }

std::string Engine::metrics_path() const { return trainer_->metrics().metrics_path(); }

const MicroBatchGraph* Engine::micro_batch_graph() const { return trainer_->micro_batch_graph(); }

void Engine::set_compute_delay_for_testing(double seconds) { trainer_->set_compute_delay_for_testing(seconds); }

}  // namespace myriad::train
