// Config wiring: RunConfig -> the options of the model, optimizer, schedule and DataParallel.
#include "myriad/train/config_wiring.h"

namespace myriad::train {

namespace {

nn::ParamKind parse_param_kind(const std::string& name) {
  if (name == "norm") return nn::ParamKind::norm;
  if (name == "bias") return nn::ParamKind::bias;
  if (name == "embedding") return nn::ParamKind::embedding;
  if (name == "weight") return nn::ParamKind::weight;
  MYRIAD_THROW("training.no_decay: unknown parameter kind '" << name << "'; allowed: norm, bias, embedding, weight");
}

}  // namespace

std::string model_section_yaml(const RunConfig& config) {
  // The model section of the resolved YAML (from "model:" to the next top-level key).
  const std::string yaml = config.to_yaml();
  std::size_t begin = yaml.find("model:");
  std::size_t end = yaml.find("\nparallel:", begin);
  return yaml.substr(begin, end == std::string::npos ? std::string::npos : end - begin + 1);
}

nn::TransformerConfig transformer_config(const ModelConfig& m, std::int64_t vocab_size) {
  nn::TransformerConfig c;
  c.vocab_size = vocab_size;
  c.n_layer = m.n_layer;
  c.n_head = m.n_head;
  c.n_kv_head = m.kv_heads();
  c.n_embd = m.n_embd;
  c.context_length = m.context_length;
  c.ffn_hidden = m.ffn_hidden_size();
  const bool llama = m.family() == Architecture::llama;
  c.norm = llama ? nn::NormKind::rmsnorm : nn::NormKind::layernorm;
  c.mlp = llama ? nn::MlpKind::swiglu : nn::MlpKind::gelu;
  c.positions = llama ? nn::PositionKind::rope : nn::PositionKind::learned;
  c.tie_embeddings = m.ties_embeddings();
  c.bias = m.uses_bias();
  c.norm_eps = static_cast<float>(m.norm_eps);
  c.rope_theta = m.rope_theta;
  c.init_std = static_cast<float>(m.init_std);
  if (m.is_moe()) {
    c.moe.num_experts = m.num_experts;
    c.moe.top_k = m.moe_top_k();
    c.moe.every = m.moe_every;
    c.moe.shared_experts = m.shared_experts;
    c.moe.expert_ffn = m.expert_ffn();
    c.moe.score = m.router_scores == RouterScoring::softmax ? nn::RouterScore::softmax : nn::RouterScore::sigmoid;
    c.moe.normalize_top_k = m.normalize_top_k;
    c.moe.aux_loss_coef = static_cast<float>(m.aux_loss_coef);
    c.moe.z_loss_coef = static_cast<float>(m.z_loss_coef);
    if (!m.dropless) {
      c.moe.expert_capacity = m.expert_capacity;
      c.moe.capacity_factor = m.expert_capacity > 0 ? 0.0 : m.moe_capacity_factor();
    }
  }
  if (m.attention_kind == AttentionLayout::block_sparse) {
    c.attention.kind = nn::AttentionKind::block_sparse;
    c.attention.block_size = m.attention_block_size;
    c.attention.fixed = {
        .local_blocks = m.local_blocks, .global_blocks = m.global_blocks, .stride_blocks = m.stride_blocks};
    c.attention.sparse_ratio = m.sparse_ratio;
    c.attention.threshold = m.threshold;
    c.attention.max_blocks = m.max_blocks;
  }
  return c;
}

optim::AdamWConfig adamw_config(const TrainingConfig& t) {
  optim::AdamWConfig adam;
  adam.beta1 = static_cast<float>(t.beta1);
  adam.beta2 = static_cast<float>(t.beta2);
  adam.eps = static_cast<float>(t.adam_eps);
  adam.weight_decay = static_cast<float>(t.weight_decay);
  adam.grad_clip = static_cast<float>(t.grad_clip);
  adam.no_decay.clear();
  for (const std::string& kind : t.no_decay) adam.no_decay.push_back(parse_param_kind(kind));
  return adam;
}

optim::LrSchedule lr_schedule(const TrainingConfig& t) {
  optim::LrSchedule schedule;
  schedule.lr = static_cast<float>(t.lr);
  schedule.min_lr = static_cast<float>(t.min_lr.value_or(0.1 * t.lr));
  schedule.warmup_steps = t.warmup_steps;
  schedule.total_steps = t.steps;
  schedule.kind = t.schedule;
  return schedule;
}

std::int64_t tokens_per_step(const RunConfig& c) {
  return static_cast<std::int64_t>(c.training.micro_batch) * c.training.gradient_accumulation * c.parallel.dp *
         c.training.seq_len;
}

distributed::GridShape grid_shape(const ParallelConfig& parallel, int world_size) {
  return distributed::GridShape{.tp = parallel.tp,
                                .cp = parallel.cp,
                                .ep = parallel.ep,
                                .dp = parallel.dp_for_world(world_size),
                                .pp = parallel.pp};
}

distributed::ReductionOptions reduction_options(const ParallelConfig& parallel) {
  distributed::ReductionOptions options;
  options.ranks_per_node = parallel.ranks_per_node;
  options.exact = parallel.dp_reduce_exact;
  switch (parallel.dp_reduce) {
    case DpReduce::automatic:
      options.dp_reduce = distributed::ReductionAlgorithm::automatic;
      break;
    case DpReduce::ring:
      options.dp_reduce = distributed::ReductionAlgorithm::ring;
      break;
    case DpReduce::tree:
      options.dp_reduce = distributed::ReductionAlgorithm::tree;
      break;
    case DpReduce::hierarchical:
      options.dp_reduce = distributed::ReductionAlgorithm::hierarchical;
      break;
  }
  return options;
}

parallel::DataParallelOptions data_parallel_options(const RunConfig& c) {
  parallel::DataParallelOptions options;
  options.zero_stage = c.parallel.zero_stage;
  options.bucket_elements = static_cast<std::int64_t>(c.parallel.bucket_mb * 1048576.0 / 4.0);
  options.pipelined = c.parallel.pp > 1;  // buckets reduce per chunk in the cool-down
  if (c.parallel.zero_stage == 3) options.compute_format = compute_format(c.training.precision);
  const TrainingConfig& t = c.training;
  if (t.sync == SyncMode::local) {
    options.exchange.kind = parallel::ExchangeKind::local;
    options.exchange.local =
        parallel::LocalSgdOptions{t.settled_local_steps(), static_cast<float>(t.outer_lr.value_or(0.7)),
                                  static_cast<float>(t.outer_momentum.value_or(0.9)), t.outer_overlap};
  } else if (t.optimizer == OptimizerKind::onebit_adam) {
    options.exchange.kind = parallel::ExchangeKind::onebit_adam;
    options.exchange.freeze_step = t.settled_freeze_step();
  } else if (t.gradient_compression != GradientCompression::none) {
    options.exchange.kind = parallel::ExchangeKind::compressed;
    options.exchange.compression.kind = t.gradient_compression == GradientCompression::int8
                                            ? distributed::Compression::int8
                                            : distributed::Compression::topk;
    options.exchange.compression.topk_ratio = t.topk_ratio.value_or(0.01);
  }
  return options;
}

DType compute_format(Precision precision) {
  switch (precision) {
    case Precision::bf16:
    case Precision::fp8:  // everything but the blocks' FP8 linear layers
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    case Precision::fp32:
      break;
  }
  return DType::f32;
}

}  // namespace myriad::train
