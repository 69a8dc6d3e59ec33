// RunConfig: defaults, a full YAML, aliases, derived values, overrides of every value type, the
// to_yaml round trip, the shipped configs and the generated reference in docs/config.md.
// Error paths are in test_config_errors.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "myriad/config/run_config.h"
#include "myriad/core/error.h"

namespace myriad {
namespace {

std::filesystem::path repository_root() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every key differs from its default; consistent for a world of 2*2*2*2 = 16 ranks (ep inside dp) (but for the
// mixture-of-experts keys, which act only for architecture moe).
// The world a config's degrees describe (parallel.dp auto counts as 1).
int world_of(const ParallelConfig& p) { return std::max({p.dp, p.ep, 1}) * p.tp * p.pp * p.cp; }

constexpr const char* kFullYaml = R"(
model:
  architecture: llama
  vocab_size: 32000
  n_layer: 8
  n_head: 16
  n_kv_head: 4
  n_embd: 1024
  context_length: 2048
  ffn_hidden: 2816
  norm_eps: 1.0e-6
  rope_theta: 500000
  tie_embeddings: true
  bias: true
  init_std: 0.01
  moe_base: gpt2
  num_experts: 8
  top_k: 2
  expert_capacity: 256
  capacity_factor: 1.5
  dropless: true
  router_scores: sigmoid
  normalize_top_k: false
  aux_loss_coef: 0.02
  z_loss_coef: 0.002
  shared_experts: 1
  moe_every: 2
  expert_ffn_hidden: 512
  attention:
    kind: block_sparse
    block_size: 128
    local_blocks: 2
    global_blocks: 0
    stride_blocks: 4
    sparse_ratio: 0.7
    threshold: 0.1
    max_blocks: 16
parallel:
  dp: 2
  tp: 2
  pp: 2
  cp: 2
  ep: 2
  zero_stage: 1
  sequence_parallel: true
  virtual_stages: 2
  pp_schedule: interleaved
  pp_layers: [1, 3, 2, 2]
  bucket_mb: 2.5
  dp_reduce: tree
  ranks_per_node: 4
  dp_reduce_exact: true
  collective_timeout: 120
training:
  global_batch_size: 64
  micro_batch: 4
  gradient_accumulation: 8
  seq_len: 1024
  steps: 5000
  lr: 3e-4
  min_lr: 3.0e-5
  warmup_steps: 200
  schedule: linear
  weight_decay: 0.05
  no_decay: [norm, bias, embedding]
  beta1: 0.85
  beta2: 0.99
  adam_eps: 1e-6
  grad_clip: 0.5
  optimizer: onebit_adam
  freeze_step: 50
  gradient_compression: topk
  topk_ratio: 0.05
  sync: local
  local_steps: 32
  outer_lr: 0.5
  outer_momentum: 0.8
  outer_overlap: true
  device: cuda
  cuda_graphs: true
  cpu_gemm: measured
  precision: fp8
  initial_loss_scale: 1024
  loss_scale_window: 50
  min_loss_scale: 2
  fp8_amax_history: 32
  fp8_margin: 1
  recompute: selective
  seed: 42
  eval_every: 250
  eval_batches: 16
  max_nonfinite_steps: 3
data:
  path: /data/corpus.txt
  tokenizer: "train:8000"
  val_fraction: 0.1
  val_split: tail
  cache_dir: /tmp/cache
  sources:
    - {path: /data/web, weight: 0.7}
    - {path: /data/code, weight: 0.3}
    - /data/books@2
checkpoint:
  dir: /ckpt
  every: 500
  keep: 5
  resume: auto
  async: false
logging:
  dir: runs/llama
  every: 20
  level: debug
  jsonl: false
  tensorboard: false
  measure_peak: false
  peak_tflops: 1.5
  straggler_every: 5
  straggler_margin: 0.75
sample:
  tokens: 64
  temperature: 1.2
  top_k: 0
  prompt: "Once upon a time: #1"
security:
  key_file: /etc/myriad/keys
  umask: "027"
  encrypt_token_shards: true
)";

TEST(ConfigDefaults, MatchTheDocumentedValues) {
  RunConfig c;
  EXPECT_EQ(c.model.architecture, Architecture::gpt2);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.n_head, 12);
  EXPECT_EQ(c.model.n_kv_head, 0);
  EXPECT_EQ(c.model.n_embd, 768);
  EXPECT_EQ(c.model.context_length, 1024);
  EXPECT_EQ(c.model.ffn_hidden, 0);
  EXPECT_EQ(c.model.norm_eps, 1e-5);
  EXPECT_EQ(c.model.rope_theta, 10000.0);
  EXPECT_FALSE(c.model.tie_embeddings.has_value());
  EXPECT_FALSE(c.model.bias.has_value());
  EXPECT_EQ(c.model.init_std, 0.02);
  EXPECT_EQ(c.model.num_experts, 0);
  EXPECT_EQ(c.model.top_k, 0);
  EXPECT_EQ(c.model.expert_capacity, 0);
  EXPECT_EQ(c.parallel.dp, 0);  // auto: the world size / (tp * pp * cp)
  for (int degree : {c.parallel.tp, c.parallel.pp, c.parallel.cp, c.parallel.ep}) EXPECT_EQ(degree, 1);
  EXPECT_EQ(c.parallel.zero_stage, 0);
  EXPECT_FALSE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.parallel.virtual_stages, 1);
  EXPECT_EQ(c.parallel.pp_schedule, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(c.training.global_batch_size, 0);
  EXPECT_EQ(c.training.micro_batch, 8);
  EXPECT_EQ(c.training.gradient_accumulation, 0);
  EXPECT_EQ(c.training.seq_len, 0);
  EXPECT_EQ(c.training.steps, 1000);
  EXPECT_EQ(c.training.lr, 6e-4);
  EXPECT_FALSE(c.training.min_lr.has_value());
  EXPECT_EQ(c.training.warmup_steps, 0);
  EXPECT_EQ(c.training.schedule, LrScheduleKind::cosine);
  EXPECT_EQ(c.training.weight_decay, 0.1);
  EXPECT_EQ(c.training.no_decay, (std::vector<std::string>{"norm", "bias"}));
  EXPECT_EQ(c.training.beta1, 0.9);
  EXPECT_EQ(c.training.beta2, 0.95);
  EXPECT_EQ(c.training.adam_eps, 1e-8);
  EXPECT_EQ(c.training.grad_clip, 1.0);
  EXPECT_EQ(c.training.precision, Precision::fp32);
  EXPECT_EQ(c.training.recompute, Recompute::none);
  EXPECT_EQ(c.training.seed, 1337u);
  EXPECT_EQ(c.training.eval_every, 100);
  EXPECT_EQ(c.training.eval_batches, 8);
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.data.tokenizer, "");
  EXPECT_EQ(c.data.val_fraction, 0.05);
  EXPECT_EQ(c.data.cache_dir, "");
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_EQ(c.checkpoint.every, 0);
  EXPECT_EQ(c.checkpoint.keep, 3);
  EXPECT_EQ(c.checkpoint.resume, "");
  EXPECT_EQ(c.logging.dir, "runs/default");
  EXPECT_EQ(c.logging.every, 10);
  EXPECT_EQ(c.logging.level, "info");
  EXPECT_EQ(c.sample.tokens, 200);
  EXPECT_EQ(c.sample.temperature, 0.8);
  EXPECT_EQ(c.sample.top_k, 40);
  EXPECT_EQ(c.sample.prompt, "");
  EXPECT_NO_THROW(c.validate(1));
}

TEST(ConfigDefaults, EmptySectionsAreTheDefaults) {
  EXPECT_EQ(RunConfig::from_yaml_string("model:\nsample:\n", "s.yaml"), RunConfig{});
  EXPECT_EQ(RunConfig::from_yaml_string("# a comment\ntraining:\n", "c.yaml"), RunConfig{});
}

TEST(ConfigYaml, FullFileSetsEveryKey) {
  RunConfig c = RunConfig::from_yaml_string(kFullYaml, "full.yaml");
  EXPECT_EQ(c.model.architecture, Architecture::llama);
  EXPECT_EQ(c.model.vocab_size, 32000);
  EXPECT_EQ(c.model.n_layer, 8);
  EXPECT_EQ(c.model.n_head, 16);
  EXPECT_EQ(c.model.n_kv_head, 4);
  EXPECT_EQ(c.model.n_embd, 1024);
  EXPECT_EQ(c.model.context_length, 2048);
  EXPECT_EQ(c.model.ffn_hidden, 2816);
  EXPECT_EQ(c.model.norm_eps, 1e-6);
  EXPECT_EQ(c.model.rope_theta, 500000.0);
  EXPECT_EQ(c.model.tie_embeddings, std::optional<bool>(true));
  EXPECT_EQ(c.model.bias, std::optional<bool>(true));
  EXPECT_EQ(c.model.init_std, 0.01);
  EXPECT_EQ(c.model.num_experts, 8);
  EXPECT_EQ(c.model.top_k, 2);
  EXPECT_EQ(c.model.expert_capacity, 256);
  EXPECT_EQ(c.model.moe_base, BlockFamily::gpt2);
  EXPECT_EQ(c.model.capacity_factor, std::optional<double>(1.5));
  EXPECT_TRUE(c.model.dropless);
  EXPECT_EQ(c.model.router_scores, RouterScoring::sigmoid);
  EXPECT_FALSE(c.model.normalize_top_k);
  EXPECT_EQ(c.model.aux_loss_coef, 0.02);
  EXPECT_EQ(c.model.z_loss_coef, 0.002);
  EXPECT_EQ(c.model.shared_experts, 1);
  EXPECT_EQ(c.model.moe_every, 2);
  EXPECT_EQ(c.model.expert_ffn_hidden, 512);
  EXPECT_EQ(c.model.attention_kind, AttentionLayout::block_sparse);
  EXPECT_EQ(c.model.attention_block_size, 128);
  EXPECT_EQ(c.model.local_blocks, 2);
  EXPECT_EQ(c.model.global_blocks, 0);
  EXPECT_EQ(c.model.stride_blocks, 4);
  EXPECT_EQ(c.model.sparse_ratio, 0.7);
  EXPECT_EQ(c.model.threshold, 0.1);
  EXPECT_EQ(c.model.max_blocks, 16);
  EXPECT_EQ(c.parallel.degree_product(), 16);
  EXPECT_EQ(c.parallel.zero_stage, 1);
  EXPECT_TRUE(c.parallel.sequence_parallel);
  EXPECT_EQ(c.parallel.virtual_stages, 2);
  EXPECT_EQ(c.parallel.stage_layers(8), (std::vector<int>{1, 3, 2, 2}));
  EXPECT_EQ(c.parallel.collective_timeout, 120.0);
  EXPECT_EQ(c.parallel.pp_schedule, PipelineSchedule::interleaved);
  EXPECT_EQ(c.training.global_batch_size, 64);
  EXPECT_EQ(c.training.micro_batch, 4);
  EXPECT_EQ(c.training.gradient_accumulation, 8);
  EXPECT_EQ(c.training.seq_len, 1024);
  EXPECT_EQ(c.training.steps, 5000);
  EXPECT_EQ(c.training.lr, 3e-4);
  EXPECT_EQ(c.training.min_lr, std::optional<double>(3e-5));
  EXPECT_EQ(c.training.warmup_steps, 200);
  EXPECT_EQ(c.training.schedule, LrScheduleKind::linear);
  EXPECT_EQ(c.training.weight_decay, 0.05);
  EXPECT_EQ(c.training.no_decay, (std::vector<std::string>{"norm", "bias", "embedding"}));
  EXPECT_EQ(c.training.beta1, 0.85);
  EXPECT_EQ(c.training.beta2, 0.99);
  EXPECT_EQ(c.training.adam_eps, 1e-6);
  EXPECT_EQ(c.training.grad_clip, 0.5);
  EXPECT_EQ(c.training.precision, Precision::fp8);
  EXPECT_EQ(c.training.initial_loss_scale, 1024.0);
  EXPECT_EQ(c.training.loss_scale_window, 50);
  EXPECT_EQ(c.training.min_loss_scale, 2.0);
  EXPECT_EQ(c.training.fp8_amax_history, 32);
  EXPECT_EQ(c.training.fp8_margin, 1);
  EXPECT_EQ(c.training.recompute, Recompute::selective);
  EXPECT_EQ(c.training.cpu_gemm, CpuGemmChoice::measured);
  EXPECT_EQ(c.training.seed, 42u);
  EXPECT_EQ(c.training.eval_every, 250);
  EXPECT_EQ(c.training.eval_batches, 16);
  EXPECT_EQ(c.training.max_nonfinite_steps, 3);
  EXPECT_EQ(c.data.path, "/data/corpus.txt");
  EXPECT_EQ(c.data.tokenizer, "train:8000");
  EXPECT_EQ(c.data.val_fraction, 0.1);
  EXPECT_EQ(c.data.val_split, "tail");
  EXPECT_EQ(c.data.cache_dir, "/tmp/cache");
  EXPECT_EQ(c.data.sources, (std::vector<std::string>{"/data/web@0.7", "/data/code@0.3", "/data/books@2"}));
  const std::vector<DataConfig::Source> sources = c.data.source_list();
  ASSERT_EQ(sources.size(), 3u);
  EXPECT_EQ(sources[1].path, "/data/code");
  EXPECT_DOUBLE_EQ(sources[2].weight, 2.0);
  EXPECT_EQ(c.checkpoint.dir, "/ckpt");
  EXPECT_EQ(c.checkpoint.every, 500);
  EXPECT_EQ(c.checkpoint.keep, 5);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.logging.dir, "runs/llama");
  EXPECT_EQ(c.logging.every, 20);
  EXPECT_EQ(c.logging.level, "debug");
  EXPECT_EQ(c.sample.tokens, 64);
  EXPECT_EQ(c.sample.temperature, 1.2);
  EXPECT_EQ(c.sample.top_k, 0);
  EXPECT_EQ(c.sample.prompt, "Once upon a time: #1");
  EXPECT_EQ(c.security.key_file, "/etc/myriad/keys");
  EXPECT_EQ(c.security.umask, "027");
  EXPECT_TRUE(c.security.encrypt_token_shards);
  EXPECT_EQ(c.security.umask_bits(), 027u);
  EXPECT_EQ(c.training.device, ComputeDevice::cuda);
  EXPECT_TRUE(c.training.cuda_graphs);
  EXPECT_EQ(c.parallel.dp_reduce, DpReduce::tree);
  EXPECT_EQ(c.parallel.ranks_per_node, 4);
  EXPECT_TRUE(c.parallel.dp_reduce_exact);
  EXPECT_EQ(c.training.optimizer, OptimizerKind::onebit_adam);
  EXPECT_EQ(c.training.freeze_step, 50);
  EXPECT_EQ(c.training.gradient_compression, GradientCompression::topk);
  EXPECT_EQ(c.training.topk_ratio, std::optional<double>(0.05));
  EXPECT_EQ(c.training.sync, SyncMode::local);
  EXPECT_EQ(c.training.local_steps, 32);
  EXPECT_EQ(c.training.outer_lr, std::optional<double>(0.5));
  EXPECT_EQ(c.training.outer_momentum, std::optional<double>(0.8));
  EXPECT_TRUE(c.training.outer_overlap);
  // training.device cuda is single-rank: the layout above validates on the CPU.
  // The file sizes the capacity three ways (expert_capacity, capacity_factor, dropless), which
  // validate() refuses; with one of them the 16-rank layout validates.
  RunConfig on_cpu = c;
  on_cpu.training.device = ComputeDevice::cpu;
  on_cpu.training.cuda_graphs = false;            // records GPU work: refused on the CPU
  on_cpu.model.architecture = Architecture::moe;  // the MoE keys act only there
  on_cpu.model.moe_base = BlockFamily::llama;     // rope_theta acts only on llama blocks
  on_cpu.model.capacity_factor.reset();
  on_cpu.model.dropless = false;
  // MoE is refused under cp (its capacity and aux loss are per whole sequence): the layout
  // validates at cp 1, on 8 ranks.
  on_cpu.parallel.cp = 1;
  // The exchange keys conflict among themselves (and with zero_stage 1): the file sets each of
  // them; the layout validates with plain AdamW.
  on_cpu.training.optimizer = OptimizerKind::adamw;
  on_cpu.training.freeze_step = 0;
  on_cpu.training.gradient_compression = GradientCompression::none;
  on_cpu.training.topk_ratio.reset();
  on_cpu.training.sync = SyncMode::every_step;
  on_cpu.training.local_steps = 0;
  on_cpu.training.outer_lr.reset();
  on_cpu.training.outer_momentum.reset();
  on_cpu.training.outer_overlap = false;
  on_cpu.data.path.clear();  // data.path and data.sources exclude each other: the file sets both
  // The fp16 loss-scale keys apply to fp16 only; the file's precision is fp8.
  on_cpu.training.initial_loss_scale = TrainingConfig{}.initial_loss_scale;
  on_cpu.training.loss_scale_window = TrainingConfig{}.loss_scale_window;
  on_cpu.training.min_loss_scale = TrainingConfig{}.min_loss_scale;
  EXPECT_NO_THROW(on_cpu.validate(8));

  // The file above really covers the registry: every key differs from its default.
  const RunConfig defaults;
  for_each_section(c, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    for (const auto& field : S::fields()) {
      EXPECT_NE(field.get(section), field.get(section_of<S>(defaults))) << S::kSection << "." << field.name;
    }
  });
}

TEST(ConfigYaml, EveryAliasSetsItsKey) {
  const RunConfig full = RunConfig::from_yaml_string(kFullYaml, "full.yaml");
  int aliases_seen = 0;
  for_each_section(full, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    for (const auto& field : S::fields()) {
      const std::string value = format_field_value(field.get(section));
      for (const auto& alias : field.aliases) {
        ++aliases_seen;
        const std::string yaml =
            std::string(S::kSection).append(":\n  ").append(alias).append(": ").append(value).append("\n");
        RunConfig parsed = RunConfig::from_yaml_string(yaml, "alias.yaml");
        EXPECT_EQ(field.get(section_of<S>(parsed)), field.get(section)) << yaml;
        RunConfig overridden;
        overridden.apply_override(std::string(S::kSection).append(".").append(alias).append("=").append(value));
        EXPECT_EQ(field.get(section_of<S>(overridden)), field.get(section)) << alias;
      }
    }
  });
  EXPECT_EQ(aliases_seen, 2);  // training.batch_size, training.warmup
  RunConfig c = RunConfig::from_yaml_string("training:\n  batch_size: 48\n  warmup: 7\n", "a.yaml");
  EXPECT_EQ(c.training.global_batch_size, 48);
  EXPECT_EQ(c.training.warmup_steps, 7);
}

TEST(ConfigYaml, ShippedConfigsParseAndValidate) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(repository_root() / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    SCOPED_TRACE(entry.path().string());
    RunConfig c = RunConfig::from_yaml_file(entry.path().string());
    EXPECT_NO_THROW(c.validate(world_of(c.parallel)));
    EXPECT_EQ(RunConfig::from_yaml_string(c.to_yaml(), "round trip"), c);
  }
  EXPECT_GE(count, 1);
}

// A fixed two-rank config (independent of the shipped configs, which users edit).
RunConfig two_rank_tiny() {
  return RunConfig::from_yaml_string(R"(
model: {architecture: gpt2, n_layer: 4, n_head: 4, n_embd: 128, context_length: 128}
parallel: {dp: 2}
training: {batch_size: 16, micro_batch: 8, lr: 6.0e-4, warmup: 50, steps: 300}
)",
                                     "two_rank_tiny");
}

TEST(ConfigDerived, ModelSizesPerArchitecture) {
  ModelConfig gpt2;
  EXPECT_EQ(gpt2.ffn_hidden_size(), 4 * 768);
  EXPECT_EQ(gpt2.padded_vocab_size(), 50304);
  EXPECT_EQ(gpt2.head_dim(), 64);
  EXPECT_EQ(gpt2.kv_heads(), 12);
  EXPECT_TRUE(gpt2.ties_embeddings());
  EXPECT_TRUE(gpt2.uses_bias());

  ModelConfig llama;
  llama.architecture = Architecture::llama;
  llama.n_embd = 4096;
  llama.n_head = 32;
  llama.n_kv_head = 8;
  EXPECT_EQ(llama.ffn_hidden_size(), 10944);  // round_up(8*4096/3 = 10922, 64); LLaMA-7B rounds to 256: 11008
  llama.n_embd = 768;
  EXPECT_EQ(llama.ffn_hidden_size(), 2048);  // 8*768/3 = 2048 is already a multiple of 64
  llama.n_embd = 100;
  EXPECT_EQ(llama.ffn_hidden_size(), 320);  // 8*100/3 = 266 -> 320
  EXPECT_EQ(llama.kv_heads(), 8);
  EXPECT_FALSE(llama.ties_embeddings());
  EXPECT_FALSE(llama.uses_bias());

  llama.ffn_hidden = 1000;  // an explicit value wins in both families
  EXPECT_EQ(llama.ffn_hidden_size(), 1000);
  llama.tie_embeddings = true;
  llama.bias = true;
  EXPECT_TRUE(llama.ties_embeddings());
  EXPECT_TRUE(llama.uses_bias());
  gpt2.tie_embeddings = false;
  gpt2.bias = false;
  EXPECT_FALSE(gpt2.ties_embeddings());
  EXPECT_FALSE(gpt2.uses_bias());

  for (auto [vocab, padded] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 64}, {64, 64}, {65, 128}, {32000, 32000}}) {
    ModelConfig m;
    m.vocab_size = vocab;
    EXPECT_EQ(m.padded_vocab_size(), padded) << vocab;
  }
}

TEST(ConfigDerived, ResolvedFillsEveryDerivedValue) {
  RunConfig c = two_rank_tiny();
  EXPECT_EQ(c.training.warmup_steps, 50);
  RunConfig r = c.resolved();
  EXPECT_EQ(r.model.n_kv_head, 4);
  EXPECT_EQ(r.model.ffn_hidden, 512);
  EXPECT_EQ(r.model.tie_embeddings, std::optional<bool>(true));
  EXPECT_EQ(r.model.bias, std::optional<bool>(true));
  EXPECT_EQ(r.training.seq_len, 128);
  EXPECT_EQ(r.training.global_batch_size, 16);
  EXPECT_EQ(r.training.gradient_accumulation, 1);  // 16 / (micro_batch 8 * dp 2)
  ASSERT_TRUE(r.training.min_lr.has_value());
  EXPECT_DOUBLE_EQ(*r.training.min_lr, 6e-5);  // 0.1 * lr
  EXPECT_EQ(r.data.tokenizer, "train:50257");
  EXPECT_EQ(r.data.cache_dir, "runs/default/data");
  EXPECT_EQ(r.checkpoint.dir, "runs/default/checkpoints");
  EXPECT_EQ(r.resolved(), r);  // idempotent
  EXPECT_NO_THROW(r.validate(2));

  RunConfig nothing_given;  // neither batch nor accumulation: one micro-batch per rank per step
  nothing_given.parallel.dp = 3;
  EXPECT_EQ(nothing_given.resolved().training.gradient_accumulation, 1);
  EXPECT_EQ(nothing_given.resolved().training.global_batch_size, 24);
  RunConfig accumulation_given;
  accumulation_given.training.gradient_accumulation = 5;
  EXPECT_EQ(accumulation_given.resolved().training.global_batch_size, 40);

  RunConfig llama;
  llama.model.architecture = Architecture::llama;
  llama.logging.dir = "runs/x/";
  RunConfig rl = llama.resolved();
  EXPECT_EQ(rl.model.tie_embeddings, std::optional<bool>(false));
  EXPECT_EQ(rl.model.bias, std::optional<bool>(false));
  EXPECT_EQ(rl.model.ffn_hidden, 2048);
  EXPECT_EQ(rl.checkpoint.dir, "runs/x/checkpoints");
}

TEST(ConfigOverride, EachValueType) {
  RunConfig c;
  c.apply_override("model.n_layer=2");
  EXPECT_EQ(c.model.n_layer, 2);
  c.apply_override("model.vocab_size=+1000");
  EXPECT_EQ(c.model.vocab_size, 1000);
  c.apply_override("training.lr=3e-4");
  EXPECT_EQ(c.training.lr, 3e-4);
  c.apply_override(" training.grad_clip = 2 ");  // an integer is a valid float; whitespace ignored
  EXPECT_EQ(c.training.grad_clip, 2.0);
  c.apply_override("parallel.sequence_parallel=true");
  EXPECT_TRUE(c.parallel.sequence_parallel);
  c.apply_override("parallel.sequence_parallel=False");
  EXPECT_FALSE(c.parallel.sequence_parallel);
  c.apply_override("model.architecture=llama");
  EXPECT_EQ(c.model.architecture, Architecture::llama);
  c.apply_override("parallel.pp_schedule=gpipe");
  EXPECT_EQ(c.parallel.pp_schedule, PipelineSchedule::gpipe);
  c.apply_override("logging.level=warn");
  EXPECT_EQ(c.logging.level, "warn");
  c.apply_override("data.path=/corpora/tiny shakespeare.txt");
  EXPECT_EQ(c.data.path, "/corpora/tiny shakespeare.txt");
  c.apply_override("sample.prompt=a: b #not a comment=1");  // text is taken verbatim
  EXPECT_EQ(c.sample.prompt, "a: b #not a comment=1");
  c.apply_override("data.tokenizer=");
  EXPECT_EQ(c.data.tokenizer, "");
  c.apply_override("training.no_decay=[norm]");
  EXPECT_EQ(c.training.no_decay, (std::vector<std::string>{"norm"}));
  c.apply_override("training.no_decay=bias, embedding");
  EXPECT_EQ(c.training.no_decay, (std::vector<std::string>{"bias", "embedding"}));
  c.apply_override("training.no_decay=[]");
  EXPECT_TRUE(c.training.no_decay.empty());
  c.apply_override("training.no_decay=['norm', \"bias\"]");
  EXPECT_EQ(c.training.no_decay, (std::vector<std::string>{"norm", "bias"}));
  c.apply_override("model.bias=false");
  EXPECT_EQ(c.model.bias, std::optional<bool>(false));
  c.apply_override("model.bias=auto");
  EXPECT_FALSE(c.model.bias.has_value());
  c.apply_override("training.min_lr=1e-5");
  EXPECT_EQ(c.training.min_lr, std::optional<double>(1e-5));
  c.apply_override("training.min_lr=auto");
  EXPECT_FALSE(c.training.min_lr.has_value());
  c.apply_override("training.seed=18446744073");
  EXPECT_EQ(c.training.seed, 18446744073u);
}

TEST(ConfigToYaml, RoundTripsToAnEqualConfig) {
  RunConfig tricky;
  tricky.sample.prompt = "  She said: \"hi\" # not a comment\n\tnext line — ünïcödé  ";
  tricky.data.path = "true";      // text that looks like a bool
  tricky.data.cache_dir = "123";  // ... like a number
  tricky.checkpoint.resume = "auto";
  tricky.training.no_decay = {};
  tricky.training.lr = 1.0 / 3.0;  // needs all 17 digits
  tricky.training.min_lr = 0.0;
  tricky.model.bias = false;
  tricky.training.seed = 9223372036854775807ull;
  tricky.model.init_std = 1e-300;
  for (const RunConfig& c : {RunConfig{}, RunConfig::from_yaml_string(kFullYaml, "full.yaml"),
                             RunConfig::from_yaml_string(kFullYaml, "full.yaml").resolved(), tricky}) {
    std::string yaml = c.to_yaml();
    EXPECT_EQ(RunConfig::from_yaml_string(yaml, "to_yaml"), c) << yaml;
  }
}

TEST(ConfigToYaml, WritesEveryKeyAndResolvedComments) {
  RunConfig c;
  std::string yaml = c.to_yaml();
  for_each_section(c, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    EXPECT_NE(yaml.find("\n" + std::string(S::kSection) + ":\n"), std::string::npos) << S::kSection;
    for (const auto& field : S::fields())
      EXPECT_NE(yaml.find("  " + field.name + ": "), std::string::npos) << field.name;
  });
  EXPECT_NE(yaml.find("ffn_hidden: 0  # resolved: 3072"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("tie_embeddings: auto  # resolved: true"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("lr: 6.0e-04\n"), std::string::npos) << yaml;          // shortest text, PyYAML-readable float
  EXPECT_EQ(c.resolved().to_yaml().find("# resolved:"), std::string::npos);  // nothing left to resolve
}

TEST(ConfigRegistry, KeysAreUniqueDocumentedAndDefaultsPassTheirChecks) {
  RunConfig defaults;
  for_each_section(defaults, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    std::set<std::string> spellings;
    for (const auto& field : S::fields()) {
      EXPECT_FALSE(field.meaning.empty()) << field.name;
      EXPECT_TRUE(spellings.insert(field.name).second) << S::kSection << "." << field.name << " twice";
      for (const auto& alias : field.aliases) EXPECT_TRUE(spellings.insert(alias).second) << alias << " twice";
      EXPECT_EQ(field_value_problem(field, field.get(section)), "") << field.name;
    }
  });
}

TEST(ConfigSecurity, AnUmaskMustBeOctalAndNamesTheKey) {
  RunConfig config;
  for (const char* bad : {"", "8", "abc", "0x77", "7777", "-22"}) {
    config.security.umask = bad;
    try {
      config.security.validate();
      ADD_FAILURE() << "accepted umask '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("security.umask"), std::string::npos) << e.message();
    }
  }
  config.security.umask = "0022";
  EXPECT_NO_THROW(config.security.validate());
  EXPECT_EQ(config.security.umask_bits(), 022u);
}

TEST(ConfigDocs, ReferenceInDocsMatchesTheRegistries) {
  const std::string begin = "<!-- BEGIN GENERATED: config_reference_markdown() -->\n";
  const std::string end = "<!-- END GENERATED -->";
  const std::string doc = read_text(repository_root() / "docs" / "config.md");
  const std::size_t from = doc.find(begin);
  const std::size_t to = doc.find(end);
  ASSERT_NE(from, std::string::npos) << "docs/config.md lacks the marker " << begin;
  ASSERT_NE(to, std::string::npos) << "docs/config.md lacks the marker " << end;
  const std::string in_doc = doc.substr(from + begin.size(), to - from - begin.size());
  const std::string expected = "\n" + config_reference_markdown();
  if (in_doc != expected) {
    const std::string path = ::testing::TempDir() + "config_reference.md";
    std::ofstream(path) << expected;
    ADD_FAILURE() << "docs/config.md is out of date with the field registries; the generated text is in " << path;
  }
}

TEST(ConfigDocs, ExampleInDocsParses) {
  const std::string doc = read_text(repository_root() / "docs" / "config.md");
  const std::string fence = "```yaml\n";
  const std::size_t from = doc.find(fence);
  ASSERT_NE(from, std::string::npos);
  const std::size_t to = doc.find("```", from + fence.size());
  RunConfig c = RunConfig::from_yaml_string(doc.substr(from + fence.size(), to - from - fence.size()), "docs example");
  EXPECT_NO_THROW(c.validate(world_of(c.parallel)));
}

}  // namespace
}  // namespace myriad
