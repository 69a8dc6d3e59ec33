// RunConfig: cross-section validation and resolution of derived values.
//
// validate() runs every section's own checks first, so the cross-section checks below may rely on
// positive degrees, heads and batch sizes.
#include "myriad/config/run_config.h"

#include <algorithm>
#include <filesystem>

#include "myriad/core/error.h"

namespace myriad {

namespace {

constexpr std::int64_t kGpt2VocabSize = 50257;

std::string under(const std::string& dir, const char* leaf) {
  return (std::filesystem::path(dir) / leaf).lexically_normal().string();
}

void validate_tensor_parallel(const ModelConfig& model, const ParallelConfig& parallel) {
  const int tp = parallel.tp;
  MYRIAD_CHECK(model.n_head % tp == 0,
               "model.n_head (" << model.n_head << ") must be divisible by parallel.tp (" << tp << ")");
  MYRIAD_CHECK(model.kv_heads() % tp == 0, "model.n_kv_head (" << model.kv_heads()
                                                               << " key/value heads) must be divisible by parallel.tp ("
                                                               << tp << ")");
  MYRIAD_CHECK(model.ffn_hidden_size() % tp == 0,
               "model.ffn_hidden (" << model.ffn_hidden_size() << ") must be divisible by parallel.tp (" << tp << ")");
  MYRIAD_CHECK(model.padded_vocab_size() % tp == 0, "the padded vocabulary (model.vocab_size "
                                                        << model.vocab_size << " -> " << model.padded_vocab_size()
                                                        << ") must be divisible by parallel.tp (" << tp << ")");
}

void validate_pipeline_and_experts(const ModelConfig& model, const ParallelConfig& parallel) {
  (void)parallel.stage_layers(model.n_layer);  // throws naming the numbers
  if (parallel.ep > 1) {
    MYRIAD_CHECK(model.num_experts > 0 && model.num_experts % parallel.ep == 0,
                 "parallel.ep (" << parallel.ep << ") needs model.num_experts (" << model.num_experts
                                 << ") > 0 and divisible by it");
  }
}

void validate_sequence(const RunConfig& c) {
  const int seq_len = c.training.seq_len == 0 ? c.model.context_length : c.training.seq_len;
  MYRIAD_CHECK(seq_len <= c.model.context_length, "training.seq_len (" << seq_len
                                                                       << ") must be <= model.context_length ("
                                                                       << c.model.context_length << ")");
  if (c.parallel.cp > 1) {
    MYRIAD_CHECK(seq_len % (2 * c.parallel.cp) == 0,
                 "training.seq_len (" << seq_len << ") must be divisible by 2 * parallel.cp (" << 2 * c.parallel.cp
                                      << ") for load-balanced context parallelism");
    const int chunk = seq_len / (2 * c.parallel.cp);
    MYRIAD_CHECK(c.model.attention_kind != AttentionLayout::block_sparse || chunk % c.model.attention_block_size == 0,
                 "parallel.cp " << c.parallel.cp << " cuts training.seq_len " << seq_len << " into chunks of " << chunk
                                << " positions, which must be a multiple of model.attention.block_size ("
                                << c.model.attention_block_size << ")");
  }
  if (c.parallel.sequence_parallel && c.parallel.tp > 1) {
    MYRIAD_CHECK(seq_len % c.parallel.tp == 0, "training.seq_len (" << seq_len << ") must be divisible by parallel.tp ("
                                                                    << c.parallel.tp << ") with sequence_parallel");
    // The rows sequence parallelism splits over tp: a rank's micro-batch of its cp chunks.
    const std::int64_t rows = static_cast<std::int64_t>(c.training.micro_batch) * seq_len / c.parallel.cp;
    MYRIAD_CHECK(rows % c.parallel.tp == 0, "sequence_parallel splits a rank's "
                                                << rows << " rows (training.micro_batch " << c.training.micro_batch
                                                << " x seq_len " << seq_len << " / parallel.cp " << c.parallel.cp
                                                << ") over parallel.tp " << c.parallel.tp
                                                << ", which must divide them");
  }
}

void validate_batch(const TrainingConfig& t, const ParallelConfig& p) {
  const std::int64_t per_step = static_cast<std::int64_t>(t.micro_batch) * p.dp;  // sequences per accumulation step
  if (t.global_batch_size > 0 && t.gradient_accumulation > 0) {
    MYRIAD_CHECK(t.global_batch_size == per_step * t.gradient_accumulation,
                 "training.global_batch_size (" << t.global_batch_size << ") must equal training.micro_batch ("
                                                << t.micro_batch << ") * training.gradient_accumulation ("
                                                << t.gradient_accumulation << ") * parallel.dp (" << p.dp
                                                << ") = " << per_step * t.gradient_accumulation);
  } else if (t.global_batch_size > 0) {
    MYRIAD_CHECK(t.global_batch_size % per_step == 0,
                 "training.global_batch_size (" << t.global_batch_size
                                                << ") must be a multiple of training.micro_batch (" << t.micro_batch
                                                << ") * parallel.dp (" << p.dp << ") = " << per_step
                                                << " (training.gradient_accumulation is 0, derived as the quotient)");
  }
  if (p.pp_schedule == PipelineSchedule::interleaved) {
    const std::int64_t accumulation = t.gradient_accumulation > 0
                                          ? t.gradient_accumulation
                                          : std::max<std::int64_t>(1, t.global_batch_size / per_step);
    MYRIAD_CHECK(accumulation % p.pp == 0, "the interleaved schedule needs the micro-batches per step ("
                                               << accumulation << ", training.gradient_accumulation) divisible by "
                                               << "parallel.pp (" << p.pp << ")");
  }
}

void validate_precision(const TrainingConfig& t) {
  MYRIAD_CHECK(t.initial_loss_scale >= t.min_loss_scale,
               "training.initial_loss_scale (" << t.initial_loss_scale << ") must be >= training.min_loss_scale ("
                                               << t.min_loss_scale << ")");
}

// training.device: cuda places the one model on the rank's GPU (every architecture).
void validate_device(const RunConfig& c) {
  if (c.training.device != ComputeDevice::cuda) return;
  const char* why = "training.device cuda";
  const ParallelConfig& p = c.parallel;
  MYRIAD_CHECK(p.dp_reduce != DpReduce::tree,
               why << " reduces gradients with NCCL, which picks ring or tree itself (node-aware; set NCCL_ALGO=Tree "
                      "to force its tree): parallel.dp_reduce tree applies to host (MPI) groups; use auto, ring or "
                      "hierarchical");
  const int head_dim = c.model.n_embd / c.model.n_head;
  MYRIAD_CHECK(head_dim == 64 || head_dim == 128,
               why << ": the CUDA attention kernels take head widths 64 and 128; model.n_embd / n_head = "
                   << c.model.n_embd << " / " << c.model.n_head << " = " << head_dim);
  MYRIAD_CHECK(c.model.attention_kind != AttentionLayout::block_sparse || c.model.attention_block_size % 32 == 0,
               why << ": the CUDA attention kernels read block-sparse layouts in query tiles of 32 (64 on tensor "
                      "cores); model.attention.block_size "
                   << c.model.attention_block_size << " is not a multiple of 32");
  // parallel.dp_reduce_exact runs on the device too: the block fixed-point encoding as kernels
  // around NCCL's int64 sums (NcclOptions::exact_sums), the host's bits at every ZeRO stage, flat
  // or hierarchical.
}

// training.optimizer onebit_adam / training.gradient_compression / training.sync local replace the
// exact gradient all-reduce (host or device alike); each refusal says why the mathematics does not
// carry over.
void validate_gradient_exchange(const RunConfig& c) {
  const TrainingConfig& t = c.training;
  if (t.optimizer == OptimizerKind::adamw && t.gradient_compression == GradientCompression::none &&
      t.sync == SyncMode::every_step) {
    return;
  }
  const std::string what = t.sync == SyncMode::local ? std::string("training.sync local")
                           : t.optimizer == OptimizerKind::onebit_adam
                               ? std::string("training.optimizer onebit_adam")
                               : "training.gradient_compression " + std::string(choice_name(t.gradient_compression));
  MYRIAD_CHECK(t.sync != SyncMode::local || c.parallel.cp == 1,
               what << " keeps each dp replica's gradients to itself, but context parallelism (parallel.cp "
                    << c.parallel.cp << ") splits one replica's sequences over ranks whose gradients must be summed");
  const bool onebit = t.optimizer == OptimizerKind::onebit_adam;
  const char* state = t.sync == SyncMode::local ? "parameters" : "momentum";
  const char* reason = t.sync == SyncMode::local
                           ? "each replica steps its own full parameters and AdamW moments between outer steps, "
                             "which sharding them over the replicas would make one model again"
                           : "forms each rank's local momentum beta1 m + (1 - beta1) P g_r over every element, so "
                             "every rank needs the whole averaged momentum, which a rank holding only its shard of m "
                             "does not have";
  // Gradient compression runs at every stage: at ZeRO 1-3 as compressed reduce-scatters with the
  // error kept on the sender (parallel/compressed_gradients.h).
  MYRIAD_CHECK(c.parallel.zero_stage == 0 || (!onebit && t.sync != SyncMode::local),
               what << " needs parallel.zero_stage 0, got " << c.parallel.zero_stage
                    << ": ZeRO-1+ gives each rank only its shard of the optimizer state (ZeRO-2/3 also of the "
                       "gradients) and updates that shard alone, but it exchanges every rank's whole "
                    << state << " buffer and " << reason);
  // Every exchange runs with ep > 1, each element over the group holding its copies: gradient
  // compression compresses the dense gradients over dp and sums the expert buckets exactly over the
  // expert-data group (parallel/compressed_gradients.h); 1-bit Adam sums the dense and the expert
  // momenta as two compressed sums over the two groups (parallel/onebit_adam_exchange.h); local SGD
  // averages the dense parameters over dp and the experts over the expert-data group
  // (parallel/local_sgd_exchange.h).
  MYRIAD_CHECK(t.precision != Precision::fp16 || t.sync != SyncMode::local,
               what << " with training.precision fp16: the loss scale's overflow check needs the gradients of "
                       "every step; use bf16 or fp32");
  MYRIAD_CHECK(t.precision != Precision::fp16,
               what << " with training.precision fp16: the dynamic loss scale skips a step whose gradients "
                       "overflowed, but an inf in a compressed block turns its scale (and with it every decoded "
                       "value and error-feedback entry of the block) into inf or NaN, and the error feedback carries "
                       "that into every later step, which skipping cannot undo; use bf16 or fp32");
}

void validate_tokenizer(const DataConfig& data, const ModelConfig& model) {
  if (data.tokenizer.empty()) return;
  TokenizerSpec spec = parse_tokenizer_spec(data.tokenizer);
  if (spec.kind == "train") {
    std::int64_t size = std::stoll(spec.argument);
    MYRIAD_CHECK(size <= model.vocab_size, "data.tokenizer (" << data.tokenizer << ") trains " << size
                                                              << " tokens, more than model.vocab_size ("
                                                              << model.vocab_size << ")");
  } else if (spec.kind == "gpt2") {
    MYRIAD_CHECK(model.vocab_size >= kGpt2VocabSize, "data.tokenizer gpt2 has "
                                                         << kGpt2VocabSize << " tokens, more than model.vocab_size ("
                                                         << model.vocab_size << ")");
  }
}

}  // namespace

RunConfig RunConfig::for_world(int world_size) const {
  RunConfig r = *this;
  r.parallel.dp = parallel.dp_for_world(world_size);
  return r;
}

void RunConfig::validate(int world_size) const {
  model.validate();
  parallel.validate(world_size);  // with dp auto: that the world gives a degree
  training.validate();
  validate_gradient_exchange(*this);
  data.validate();
  checkpoint.validate();
  logging.validate();
  sample.validate();
  security.validate();
  validate_tensor_parallel(model, parallel);
  validate_pipeline_and_experts(model, parallel);
  MYRIAD_CHECK(!model.is_moe() || training.micro_batch % parallel.tp == 0,
               "training.micro_batch (" << training.micro_batch << ") must be a multiple of parallel.tp ("
                                        << parallel.tp
                                        << ") for a mixture of experts: each tp rank routes its share of the "
                                           "micro-batch's sequences");
  validate_precision(training);
  validate_device(*this);
  validate_sequence(*this);
  validate_batch(training, for_world(world_size).parallel);  // the batch identity with the degree in use
  validate_tokenizer(data, model);
}

RunConfig RunConfig::resolved() const {
  RunConfig r = *this;
  r.model.n_kv_head = model.kv_heads();
  r.model.ffn_hidden = model.ffn_hidden_size();
  r.model.tie_embeddings = model.ties_embeddings();
  r.model.bias = model.uses_bias();

  TrainingConfig& t = r.training;
  if (t.seq_len == 0) t.seq_len = model.context_length;
  const std::int64_t per_step = static_cast<std::int64_t>(t.micro_batch) * std::max(parallel.dp, 1);
  if (t.global_batch_size == 0 && t.gradient_accumulation == 0) t.gradient_accumulation = 1;
  if (t.global_batch_size == 0) {
    t.global_batch_size = per_step * t.gradient_accumulation;
  } else if (t.gradient_accumulation == 0 && per_step > 0 && t.global_batch_size % per_step == 0) {
    t.gradient_accumulation = static_cast<int>(t.global_batch_size / per_step);
  }
  if (!t.min_lr) t.min_lr = 0.1 * t.lr;

  if (r.data.tokenizer.empty()) r.data.tokenizer = "train:" + std::to_string(model.vocab_size);
  if (r.data.cache_dir.empty()) r.data.cache_dir = under(logging.dir, "data");
  if (r.checkpoint.dir.empty()) r.checkpoint.dir = under(logging.dir, "checkpoints");
  return r;
}

std::string describe_sections() {
  std::string names;
  RunConfig defaults;
  for_each_section(defaults, [&](const auto& section) {
    if (!names.empty()) names += ", ";
    names += section.kSection;
  });
  return names;
}

}  // namespace myriad
