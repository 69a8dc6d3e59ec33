// RunConfig errors: unknown sections and keys, wrong types, bad choices, out-of-range values,
// repeated keys and aliases, YAML syntax, overrides, and the cross-key checks of validate().
// Each error must name the source and line (when parsing), the full key path and what is allowed.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "myriad/config/run_config.h"
#include "myriad/core/error.h"

namespace myriad {
namespace {

// Runs `fn`; it must throw myriad::Error whose bare message contains every string of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no myriad::Error thrown; expected one naming '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const auto& part : parts) {
      EXPECT_NE(e.message().find(part), std::string::npos) << "message lacks '" << part << "':\n  " << e.message();
    }
  }
}

void expect_yaml_error(const std::string& yaml, const std::vector<std::string>& parts) {
  SCOPED_TRACE(yaml);
  expect_error([&] { RunConfig::from_yaml_string(yaml, "t.yaml"); }, parts);
}

void expect_invalid(const std::function<void(RunConfig&)>& edit, const std::vector<std::string>& parts,
                    int world_size = 1) {
  RunConfig c;
  edit(c);
  expect_error([&] { c.validate(world_size); }, parts);
}

TEST(ConfigErrors, UnknownSectionNamesFileLineAndTheSections) {
  expect_yaml_error("model:\n  n_layer: 2\ntrainig:\n  lr: 1e-3\n",
                    {"t.yaml:3", "unknown section 'trainig'", "did you mean 'training'",
                     "model, parallel, training, data, "
                     "checkpoint, logging, sample"});
  expect_yaml_error("optimizer:\n  lr: 1\n", {"t.yaml:1", "unknown section 'optimizer'"});
}

TEST(ConfigErrors, UnknownKeyInEverySectionListsThatSectionsKeys) {
  RunConfig defaults;
  for_each_section(defaults, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    std::vector<std::string> parts = {"t.yaml:3", "unknown key '" + std::string(S::kSection) + ".bogus_key'",
                                      "keys of section '" + std::string(S::kSection) + "'"};
    for (const auto& field : S::fields()) parts.push_back(field.name);
    expect_yaml_error(std::string(S::kSection) + ":\n\n  bogus_key: 1\n", parts);
  });
  expect_yaml_error("model:\n  n_layer: 2\n  mixer:\n    heads: 4\n", {"t.yaml:3", "unknown key 'model.mixer'"});
  expect_yaml_error("training:\n  n_layers: 2\n", {"unknown key 'training.n_layers'"});
  expect_yaml_error("model:\n  n_layers: 2\n", {"unknown key 'model.n_layers'", "did you mean 'n_layer'"});
  expect_yaml_error("training:\n  batchsize: 2\n",
                    {"did you mean 'batch_size'", "global_batch_size (alias batch_size)"});
}

TEST(ConfigErrors, WrongTypesNameKeyLineAndValue) {
  expect_yaml_error("training:\n  lr: fast\n", {"t.yaml:2", "training.lr: expected a number, got 'fast'"});
  expect_yaml_error("training:\n  micro_batch: 16.5\n", {"training.micro_batch: expected an integer, got '16.5'"});
  expect_yaml_error("training:\n  steps: 1e3\n", {"training.steps: expected an integer, got '1e3'"});
  expect_yaml_error("model:\n  n_layer: 99999999999999999999\n", {"model.n_layer: expected an integer"});
  expect_yaml_error("parallel:\n  sequence_parallel: 1\n",
                    {"parallel.sequence_parallel: expected a boolean (true or false), got '1'"});
  expect_yaml_error("model:\n  bias: maybe\n", {"model.bias: expected true, false or auto, got 'maybe'"});
  expect_yaml_error("training:\n  min_lr: low\n", {"training.min_lr: expected a number or auto, got 'low'"});
  expect_yaml_error("training:\n  lr: .inf\n", {"training.lr: expected a number"});
  expect_yaml_error("model:\n  n_layer: [2, 3]\n", {"model.n_layer: expected a value of type int, got a list"});
  expect_yaml_error("data:\n  path: {a: 1}\n", {"data.path: expected a value of type string, got a map"});
  expect_yaml_error("model:\n  n_layer:\n", {"model.n_layer: expected a value of type int, got an empty value"});
  expect_yaml_error("training:\n  no_decay: [[norm]]\n", {"training.no_decay: expected a list of strings"});
  expect_yaml_error("training:\n  no_decay: {norm: 1}\n", {"training.no_decay: expected a value of type list"});
  expect_yaml_error("model: 4\n", {"t.yaml:1", "model: expected a map of keys, got '4'"});
  expect_yaml_error("[model, training]\n", {"a config is a map of sections", "got a list"});
}

TEST(ConfigErrors, OutOfRangeValuesNameTheRange) {
  expect_yaml_error("model:\n  n_layer: 0\n", {"t.yaml:2", "model.n_layer: must be >= 1, got 0"});
  expect_yaml_error("model:\n  n_head: -4\n", {"model.n_head: must be >= 1, got -4"});
  expect_yaml_error("model:\n  n_layer: 3000000000\n", {"model.n_layer: must be between", "2147483647", "3000000000"});
  expect_yaml_error("model:\n  norm_eps: 0\n", {"model.norm_eps: must be > 0, got 0.0"});
  expect_yaml_error("data:\n  val_fraction: 0\n", {"data.val_fraction: must be in (0, 0.5], got 0"});
  expect_yaml_error("data:\n  val_fraction: 0.6\n", {"data.val_fraction: must be in (0, 0.5], got 0.6"});
  expect_yaml_error("training:\n  beta2: 1.0\n", {"training.beta2: must be in [0, 1), got 1.0"});
  expect_yaml_error("training:\n  seed: -1\n", {"training.seed: must be between 0 and"});
  expect_yaml_error("training:\n  min_lr: -1e-5\n", {"training.min_lr: must be >= 0"});
  expect_yaml_error("parallel:\n  zero_stage: 4\n", {"parallel.zero_stage: must be in [0, 3], got 4"});
  expect_yaml_error("parallel:\n  tp: 0\n", {"parallel.tp: must be >= 1, got 0"});
  expect_yaml_error("checkpoint:\n  keep: 0\n", {"checkpoint.keep: must be >= 1, got 0"});
  expect_yaml_error("logging:\n  every: 0\n", {"logging.every: must be >= 1"});
  expect_yaml_error("logging:\n  dir: \"\"\n", {"logging.dir: must be non-empty"});
  expect_yaml_error("sample:\n  temperature: 0\n", {"sample.temperature: must be > 0"});
  expect_yaml_error("sample:\n  top_k: -1\n", {"sample.top_k: must be >= 0, got -1"});
  expect_yaml_error("training:\n  no_decay: [norm, weights]\n",
                    {"training.no_decay: members must be among norm, bias, embedding, got 'weights'"});
  expect_yaml_error("training:\n  no_decay: [norm, norm]\n", {"training.no_decay: lists 'norm' twice"});
  for (const char* bad : {"sentencepiece:x.model", "gpt2", "gpt2:", "train:abc", "train:100", "train:-5"}) {
    expect_yaml_error(std::string("data:\n  tokenizer: \"") + bad + "\"\n",
                      {"t.yaml:2", "data.tokenizer: must be of the form gpt2:<dir", "bpe:<file>", "train:<vocab size"});
  }
}

TEST(ConfigErrors, EveryChoiceKeyListsItsAllowedValues) {
  RunConfig defaults;
  int choices = 0;
  for_each_section(defaults, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    for (const auto& field : S::fields()) {
      if (field.type != FieldType::choice) continue;
      ++choices;
      std::string allowed;
      for (const auto& value : field.allowed) allowed += (allowed.empty() ? "" : ", ") + value;
      const std::string path = std::string(S::kSection) + "." + field.name;
      expect_yaml_error(
          std::string(S::kSection) + ":\n  " + field.name + ": nonsense\n",
          {"t.yaml:2", std::string(path).append(": must be one of ").append(allowed).append(", got 'nonsense'")});
      expect_error([&] { RunConfig().apply_override(path + "=nonsense"); }, {path, "must be one of " + allowed});
    }
  });
  // architecture, moe_base, router_scores, attention.kind, pp_schedule, dp_reduce, schedule,
  // optimizer, gradient_compression, sync, device, cpu_gemm, precision, recompute, val_split, level
  EXPECT_EQ(choices, 16);
}

TEST(ConfigErrors, RepeatedKeysAndBothSpellingsOfAnAlias) {
  expect_yaml_error(
      "training:\n  batch_size: 16\n  global_batch_size: 16\n",
      {"t.yaml:3", "training.global_batch_size and training.batch_size (line 2) are the same key", "give only one"});
  expect_yaml_error("training:\n  warmup: 1\n  warmup_steps: 2\n", {"training.warmup_steps and training.warmup"});
  expect_yaml_error("model:\n  n_layer: 2\n  n_layer: 3\n",
                    {"t.yaml:3", "model.n_layer is given twice (also on line 2)"});
  expect_yaml_error("model:\n  n_layer: 2\nmodel:\n  n_head: 2\n", {"t.yaml:3", "section 'model' is given twice"});
}

TEST(ConfigErrors, SyntaxAndFileErrors) {
  expect_yaml_error("model:\n  n_layer: [2,\n  n_head: 3\n", {"t.yaml:", "invalid YAML"});
  expect_error([] { RunConfig::from_yaml_file("/nonexistent/run.yaml"); },
               {"config file '/nonexistent/run.yaml' does not exist"});
  const std::string path = ::testing::TempDir() + "myriad_bad_config.yaml";
  std::ofstream(path) << "# a comment\nmodel:\n  n_layer: 2\n\ntraining:\n  lr: fast\n";
  expect_error([&] { RunConfig::from_yaml_file(path); }, {path + ":6", "training.lr: expected a number, got 'fast'"});
  std::filesystem::remove(path);
}

// A device or FIFO would be read without bound (/dev/zero: gigabytes, then out of memory) or block;
// an oversized file is refused before it is read (issue 46, item 8).
TEST(ConfigErrors, DevicesFifosAndHugeFilesAreRefusedBeforeReading) {
  expect_error([] { RunConfig::from_yaml_file("/dev/zero"); }, {"/dev/zero", "is not a regular file", "YAML file"});
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "myriad_config_special";
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo.yaml").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { RunConfig::from_yaml_file(fifo); }, {fifo, "is not a regular file"});
  const std::string huge = (dir / "huge.yaml").string();
  {
    std::ofstream out(huge, std::ios::binary);
    out << "training: {steps: 5}\n#";
    out << std::string((16u << 20) + 1, 'x') << "\n";
  }
  expect_error([&] { RunConfig::from_yaml_file(huge); }, {huge, "bytes; a config is at most 16777216 bytes"});
  std::filesystem::remove_all(dir);
}

// A 2 MB value is quoted in part with its size, not echoed whole (issue 46, item 9).
TEST(ConfigErrors, AHugeValueIsQuotedInPart) {
  const std::string value(2u << 20, '7');
  try {
    RunConfig::from_yaml_string("training:\n  lr: x" + value + "\n", "huge.yaml");
    FAIL() << "a 2 MB non-number was accepted";
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_LT(message.size(), 1000u) << message.substr(0, 300);
    EXPECT_NE(message.find("training.lr"), std::string::npos) << message;
    EXPECT_NE(message.find("(2097153 bytes)"), std::string::npos) << message;
  }
}

// A ',' outside any flow collection made yaml-cpp's LoadAll return empty documents forever,
// allocating until killed (found by tests/fuzz/fuzz_run_config; the input is kept in
// tests/fuzz/regressions/run_config/): now an error naming the line.
TEST(ConfigErrors, AStrayCommaIsAnErrorNotAnEndlessParse) {
  expect_yaml_error(",", {"t.yaml:1", "invalid YAML", "stops making progress"});
  expect_yaml_error("training: {steps: 3}\n---\n,\n", {"t.yaml:", "invalid YAML"});
}

// 100,000 nested brackets (found by fuzzing: "invalid YAML: bad file") are refused before the YAML
// parser recurses, naming the line; brackets inside quotes and comments do not count.
TEST(ConfigErrors, ADeeplyNestedFileIsRefusedNamingTheLine) {
  const std::string deep = "training:\n  steps: 10\nmodel: " + std::string(100000, '[') + std::string(100000, ']');
  expect_yaml_error(deep, {"t.yaml:3", "nest more than 64 levels", "right file"});
  const std::string quoted =
      "logging:\n  dir: \"" + std::string(100, '[') + "\"  # " + std::string(100, '{') + "\ntraining: {steps: 3}\n";
  EXPECT_EQ(RunConfig::from_yaml_string(quoted, "t.yaml").training.steps, 3);
}

// The 1.6T MoE recipe's attention_config block points to model.attention (issue 46, item 13).
TEST(ConfigErrors, TheMoeRecipesAttentionConfigPointsToModelAttention) {
  expect_yaml_error("model:\n  attention_config: {sparse_ratio: 0.7, block_size: 64, threshold: 0.1}\n",
                    {"t.yaml:2", "model.attention_config", "attention: {kind: block_sparse, sparse_ratio: 0.7"});
}

// A wrong --config must never train the default 124M model: directories, empty files, comment-only
// files and several YAML documents are refused naming the file.
TEST(ConfigErrors, DirectoriesEmptyFilesAndSeveralDocumentsAreRefused) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "myriad_config_dir";
  std::filesystem::create_directories(dir);
  expect_error([&] { RunConfig::from_yaml_file(dir.string()); }, {dir.string(), "is a directory", "YAML file"});
  const std::string empty = (dir / "empty.yaml").string();
  std::ofstream(empty).close();
  expect_error([&] { RunConfig::from_yaml_file(empty); }, {empty, "the config is empty (no sections)"});
  std::ofstream(empty) << "# only a comment\n\n";
  expect_error([&] { RunConfig::from_yaml_file(empty); }, {empty, "the config is empty"});
  expect_yaml_error("training: {steps: 5}\n---\ntraining: {steps: 7}\n",
                    {"t.yaml:3", "holds 2 YAML documents", "a config is one document"});
  EXPECT_EQ(RunConfig::from_yaml_string("---\ntraining: {steps: 5}\n", "t.yaml").training.steps, 5);
  std::filesystem::remove_all(dir);
}

// Strings with NUL bytes are refused at the edge (to_yaml would otherwise cut them short).
TEST(ConfigErrors, NulBytesAreRefused) {
  RunConfig c;
  using namespace std::string_literals;  // "..."s keeps the embedded NUL
  expect_error([&] { c.apply_override("sample.prompt=ab\0cd"s); }, {"sample.prompt", "NUL byte"});
  expect_yaml_error("sample:\n  prompt: \"ab\\0cd\"\n", {"t.yaml:2", "sample.prompt", "NUL byte"});
}

// The 1.6T MoE recipe's sparse-attention block under model.attention: nested or dotted, read into
// the same keys; block-sparse keys on dense attention, and selection keys without sparse_ratio,
// are refused naming them.
TEST(ConfigErrors, AttentionMapReadsTheSeedKeysAndRefusesIdleOnes) {
  const char* seed =
      "model:\n  attention:\n    kind: block_sparse\n    sparse_ratio: 0.7\n    block_size: 64\n"
      "    threshold: 0.1\n";
  RunConfig c = RunConfig::from_yaml_string(seed, "t.yaml");
  EXPECT_EQ(c.model.attention_kind, AttentionLayout::block_sparse);
  EXPECT_EQ(c.model.sparse_ratio, 0.7);
  EXPECT_EQ(c.model.attention_block_size, 64);
  EXPECT_EQ(c.model.threshold, 0.1);
  c.validate();
  // Round trip through the written YAML, and the override spelling.
  EXPECT_EQ(RunConfig::from_yaml_string(c.to_yaml(), "written.yaml").model, c.model);
  c.apply_override("model.attention.max_blocks=4");
  EXPECT_EQ(c.model.max_blocks, 4);
  auto expect_invalid_yaml = [](const char* yaml, const std::vector<std::string>& parts) {
    expect_error([&] { RunConfig::from_yaml_string(yaml, "t.yaml").validate(); }, parts);
  };
  expect_invalid_yaml("model:\n  attention:\n    sparse_ratio: 0.7\n",
                      {"model.attention.sparse_ratio (0.7)", "acts only with model.attention.kind: block_sparse"});
  expect_invalid_yaml("model:\n  attention: {kind: block_sparse, threshold: 0.1}\n",
                      {"model.attention.threshold (0.1)", "sparse_ratio > 0"});
  expect_yaml_error("model:\n  attention: {kind: sparse}\n", {"t.yaml:2", "model.attention.kind", "block_sparse"});
  expect_yaml_error("model:\n  attention: {kind: block_sparse, ratio: 0.7}\n",
                    {"t.yaml:2", "unknown key 'model.attention.ratio'"});
  expect_yaml_error("model:\n  attention: {kind: block_sparse, sparse_ratio: 1.5}\n",
                    {"model.attention.sparse_ratio", "1.5"});
}

// Keys that would be accepted and do nothing are refused with the reason.
TEST(ConfigErrors, KeysThatWouldDoNothingAreRefusedWithTheReason) {
  expect_yaml_error("model:\n  block_size: 64\n",
                    {"t.yaml:2", "model.block_size", "block-sparse attention", "model.context_length"});
  expect_error([] { RunConfig().apply_override("model.block_size=64"); }, {"model.block_size", "model.context_length"});
  expect_yaml_error("model:\n  sparse_ratio: 0.7\n", {"model.sparse_ratio", "model.attention.sparse_ratio"});
  expect_yaml_error("model:\n  threshold: 0.1\n", {"model.threshold", "model.attention.threshold"});
  // The 1.6T MoE recipe's MoE block on a dense model: every key named, none silently ignored.
  const char* seed_moe = "model:\n  num_experts: 128\n  top_k: 4\n  expert_capacity: 256\n";
  RunConfig moe = RunConfig::from_yaml_string(seed_moe, "t.yaml");
  EXPECT_EQ(moe.model.expert_capacity, 256);  // tokens, as the 1.6T MoE recipe means it
  expect_error([&] { moe.validate(); }, {"model.num_experts (128) requires model.architecture: moe", "do nothing"});
  moe.model.num_experts = 0;
  expect_error([&] { moe.validate(); }, {"model.top_k (4) requires model.architecture: moe"});
  moe.model.top_k = 0;
  expect_error([&] { moe.validate(); }, {"model.expert_capacity (256) requires model.architecture: moe"});
  moe.model.expert_capacity = 0;
  expect_error(
      [&] {
        moe.apply_override("model.dropless=true");
        moe.validate();
      },
      {"model.dropless (true) requires model.architecture: moe"});
  // The 1.6T MoE recipe's block verbatim, with its spelling of the architecture, validates and acts.
  RunConfig seed = RunConfig::from_yaml_string(
      "model:\n  architecture: MoE\n  num_experts: 128\n  top_k: 4\n  expert_capacity: 256\n", "t.yaml");
  EXPECT_EQ(seed.model.architecture, Architecture::moe);
  EXPECT_NO_THROW(seed.validate());
  EXPECT_NE(seed.to_yaml().find("architecture: moe"), std::string::npos);
  seed.model.top_k = 9;
  expect_error([&] { seed.validate(); }, {"model.top_k (9) must lie in [1, min(8, model.num_experts 128)]"});
  seed.model.top_k = 4;
  seed.model.capacity_factor = 2.0;
  expect_error([&] { seed.validate(); }, {"model.expert_capacity (256) and model.capacity_factor (2) both size"});
  seed.model.expert_capacity = 0;
  seed.model.dropless = true;
  expect_error([&] { seed.validate(); }, {"model.dropless: true", "remove them or set dropless: false"});
  expect_error([] { RunConfig::from_yaml_string("model:\n  architecture: MoE\n", "t.yaml").validate(); },
               {"model.num_experts >= 1"});
  expect_yaml_error("model:\n  architecture: mixture\n", {"model.architecture", "must be one of gpt2, llama, moe"});
}

TEST(ConfigErrors, OverridesNameTheOverrideAndTheKeys) {
  RunConfig c;
  expect_error([&] { c.apply_override("training.lrate=1e-3"); },
               {"override 'training.lrate=1e-3'", "unknown key 'training.lrate'", "keys of section 'training'",
                "global_batch_size (alias batch_size)", "micro_batch", "eval_batches"});
  expect_error([&] { c.apply_override("optim.lr=1e-3"); }, {"unknown section 'optim'", "sections: model, parallel"});
  expect_error([&] { c.apply_override("modle.n_layer=2"); }, {"did you mean 'model'"});
  expect_error([&] { c.apply_override("training.lr"); }, {"expected section.key=value"});
  expect_error([&] { c.apply_override("lr=1e-3"); }, {"the key must be section.key", "got 'lr'"});
  expect_error([&] { c.apply_override("model.n_layer.x=2"); }, {"unknown key 'model.n_layer.x'"});
  expect_error([&] { c.apply_override("model.=2"); }, {"the key must be section.key"});
  expect_error([&] { c.apply_override("training.lr=fast"); }, {"training.lr: expected a number, got 'fast'"});
  expect_error([&] { c.apply_override("model.n_layer=0"); }, {"model.n_layer: must be >= 1, got 0"});
  expect_error([&] { c.apply_override("model.n_layer="); }, {"model.n_layer: expected an integer, got ''"});
  expect_error([&] { c.apply_override("parallel.sequence_parallel=yes please"); }, {"expected a boolean"});
  expect_error([&] { c.apply_override("training.no_decay=[norm,,bias]"); }, {"expected a list of strings"});
  expect_error([&] { c.apply_override("training.no_decay=norm,gain"); }, {"members must be among", "got 'gain'"});
  EXPECT_EQ(c, RunConfig{});  // failed overrides change nothing
}

TEST(ConfigValidate, BatchIdentityNamesAllFourNumbers) {
  expect_invalid(
      [](RunConfig& c) {
        c.training.global_batch_size = 20;
        c.training.micro_batch = 4;
        c.training.gradient_accumulation = 2;
        c.parallel.dp = 2;
      },
      {"training.global_batch_size (20) must equal training.micro_batch (4) * training.gradient_accumulation (2) * "
       "parallel.dp (2) = 16"},
      2);
  expect_invalid(
      [](RunConfig& c) {
        c.training.global_batch_size = 20;
        c.training.micro_batch = 8;
      },
      {"training.global_batch_size (20) must be a multiple of training.micro_batch (8) * parallel.dp (1) = 8"});
}

TEST(ConfigValidate, WorldSizeNamesEveryFactor) {
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.dp = 2;
        c.parallel.tp = 3;
      },
      {"dp * tp * pp * cp = 2 * 3 * 1 * 1 = 6", "the world size is 4"}, 4);
  RunConfig tiny = RunConfig::from_yaml_string("parallel:\n  dp: 2\n", "t.yaml");
  expect_error([&] { tiny.validate(); }, {"= 2, but the world size is 1"});
  EXPECT_NO_THROW(tiny.validate(2));
  expect_invalid([](RunConfig&) {}, {"world size must be >= 1"}, 0);
}

// parallel.dp defaults to auto: the world size over the model-parallel degrees, as the seed
// documents' launch line (mpirun -np N ... --config config.yaml) expects.
TEST(ConfigValidate, DataParallelDegreeDefaultsToTheWorldsShare) {
  RunConfig c;
  EXPECT_EQ(c.parallel.dp, 0);
  EXPECT_NO_THROW(c.validate(6));
  EXPECT_EQ(c.for_world(6).parallel.dp, 6);
  c.parallel.tp = 2;
  c.parallel.pp = 3;
  EXPECT_EQ(c.for_world(12).parallel.dp, 2);
  EXPECT_NO_THROW(c.validate(12));
  expect_error([&] { c.validate(8); },
               {"parallel.dp is auto", "world size 8 is not divisible by tp * pp * cp = 2 * 3 * 1 = 6"});
  expect_error([&] { (void)c.for_world(8); }, {"parallel.dp is auto"});
  c.parallel.dp = 1;  // an explicit degree is checked as given
  expect_error([&] { c.validate(12); }, {"= 6, but the world size is 12"});
  // The batch arithmetic uses the settled degree: 8 ranks x micro_batch 2 x accumulation 1 = 16.
  RunConfig batch = RunConfig::from_yaml_string("training: {micro_batch: 2, global_batch_size: 32}\n", "b.yaml");
  EXPECT_NO_THROW(batch.validate(8));
  EXPECT_EQ(batch.for_world(8).resolved().training.gradient_accumulation, 2);
  expect_error([&] { batch.validate(3); }, {"global_batch_size (32)"});
}

TEST(ConfigValidate, CrossKeyChecks) {
  auto on_cuda = [](RunConfig& c) { c.training.device = ComputeDevice::cuda; };
  RunConfig context_on_cuda;  // context parallelism runs on the device (ring attention over NCCL)
  on_cuda(context_on_cuda);
  context_on_cuda.parallel.cp = 2;
  EXPECT_NO_THROW(context_on_cuda.validate(2));
  RunConfig hierarchical_on_cuda;  // NCCL sub-communicators: intra-node, then inter-node
  on_cuda(hierarchical_on_cuda);
  hierarchical_on_cuda.parallel.dp_reduce = DpReduce::hierarchical;
  EXPECT_NO_THROW(hierarchical_on_cuda.validate(4));
  // Limits of the CUDA attention kernels, refused before a GPU is touched.
  expect_invalid(
      [&](RunConfig& c) {
        on_cuda(c);
        c.model.n_head = 24;  // 768 / 24 = 32
      },
      {"the CUDA attention kernels take head widths 64 and 128", "768 / 24 = 32"}, 1);
  expect_invalid(
      [&](RunConfig& c) {
        on_cuda(c);
        c.model.attention_kind = AttentionLayout::block_sparse;
        c.model.attention_block_size = 48;
      },
      {"block_size 48 is not a multiple of 32"}, 1);
  expect_invalid(
      [&](RunConfig& c) {
        on_cuda(c);
        c.parallel.dp_reduce = DpReduce::tree;
      },
      {"training.device cuda reduces gradients with NCCL", "parallel.dp_reduce tree", "NCCL_ALGO"});
  RunConfig exact_on_cuda;  // the block fixed-point encoding as device kernels around NCCL's int64 sums
  on_cuda(exact_on_cuda);
  exact_on_cuda.parallel.dp_reduce_exact = true;
  for (int stage : {0, 1, 2, 3}) {
    exact_on_cuda.parallel.zero_stage = stage;
    EXPECT_NO_THROW(exact_on_cuda.validate(2)) << "ZeRO " << stage;
  }
  exact_on_cuda.parallel.zero_stage = 0;
  exact_on_cuda.parallel.dp_reduce = DpReduce::hierarchical;
  EXPECT_NO_THROW(exact_on_cuda.validate(4));
  expect_invalid(  // the tree stays a host algorithm, exact sums or not
      [&](RunConfig& c) {
        on_cuda(c);
        c.parallel.dp_reduce_exact = true;
        c.parallel.dp_reduce = DpReduce::tree;
      },
      {"training.device cuda reduces gradients with NCCL", "parallel.dp_reduce tree"});
  expect_invalid([](RunConfig& c) { c.parallel.ranks_per_node = -1; }, {"parallel.ranks_per_node"});
  expect_invalid(
      [](RunConfig& c) {
        c.data.path = "/corpus";
        c.data.sources = {"/a@1", "/b@2"};
      },
      {"data.path ('/corpus') and data.sources are both set"});
  expect_invalid([](RunConfig& c) { c.data.sources = {"/a@0"}; }, {"data.sources", "'/a@0'", "number > 0"});
  expect_invalid([](RunConfig& c) { c.data.sources = {"/a@heavy"}; }, {"data.sources", "'/a@heavy'"});
  auto onebit = [](RunConfig& c) { c.training.optimizer = OptimizerKind::onebit_adam; };
  expect_invalid([](RunConfig& c) { c.training.freeze_step = 10; },
                 {"training.freeze_step is set but training.optimizer is adamw"});
  expect_invalid([](RunConfig& c) { c.training.fp8_margin = 2; },
                 {"training.fp8_amax_history and training.fp8_margin apply to training.precision fp8", "fp32"});
  expect_invalid([](RunConfig& c) { c.training.fp8_amax_history = 0; }, {"training.fp8_amax_history"});
  expect_invalid([](RunConfig& c) { c.training.local_steps = 8; },
                 {"training.local_steps, outer_lr, outer_momentum and outer_overlap apply to training.sync local"});
  expect_invalid(
      [&](RunConfig& c) {
        c.training.sync = SyncMode::local;
        onebit(c);
      },
      {"training.sync local exchanges parameters every local_steps steps"});
  expect_invalid(
      [&](RunConfig& c) {
        c.training.sync = SyncMode::local;
        c.parallel.cp = 2;
      },
      {"training.sync local keeps each dp replica's gradients to itself", "parallel.cp 2"}, 2);
  expect_invalid([](RunConfig& c) { c.training.topk_ratio = 0.1; },
                 {"training.topk_ratio is set but training.gradient_compression is none"});
  expect_invalid(
      [&](RunConfig& c) {
        onebit(c);
        c.training.gradient_compression = GradientCompression::int8;
      },
      {"training.optimizer onebit_adam already compresses its momentum"});
  expect_invalid(
      [&](RunConfig& c) {
        onebit(c);
        c.training.freeze_step = c.training.steps;
      },
      {"training.freeze_step (1000) must be below training.steps (1000)"});
  expect_invalid(
      [&](RunConfig& c) {
        onebit(c);
        c.parallel.zero_stage = 1;
      },
      {"training.optimizer onebit_adam needs parallel.zero_stage 0, got 1",
       "local momentum beta1 m + (1 - beta1) P g_r over every element", "ZeRO-1+ gives each rank only its shard",
       "needs the whole averaged momentum"});
  for (int stage : {1, 2, 3}) {  // compressed reduce-scatters, the error kept on the sender
    for (GradientCompression kind : {GradientCompression::int8, GradientCompression::topk}) {
      RunConfig sharded;
      sharded.training.gradient_compression = kind;
      sharded.parallel.zero_stage = stage;
      EXPECT_NO_THROW(sharded.validate(2)) << choice_name(kind) << " at ZeRO " << stage;
    }
  }
  expect_invalid(
      [](RunConfig& c) {
        c.training.sync = SyncMode::local;
        c.parallel.zero_stage = 1;
      },
      {"training.sync local needs parallel.zero_stage 0, got 1",
       "each replica steps its own full parameters and AdamW moments between outer steps"});
  auto experts = [](RunConfig& c) {
    c.model.architecture = Architecture::moe;
    c.model.num_experts = 4;
    c.parallel.ep = 2;
  };
  RunConfig onebit_experts;  // dense momenta compressed over dp, expert momenta over the expert-data group
  experts(onebit_experts);
  onebit(onebit_experts);
  EXPECT_NO_THROW(onebit_experts.validate(2));
  RunConfig local_experts;  // dense parameters averaged over dp, experts over the expert-data group
  experts(local_experts);
  local_experts.training.sync = SyncMode::local;
  EXPECT_NO_THROW(local_experts.validate(2));
  RunConfig compressed_experts;  // dense gradients compressed over dp, expert buckets exact
  experts(compressed_experts);
  compressed_experts.training.gradient_compression = GradientCompression::topk;
  EXPECT_NO_THROW(compressed_experts.validate(2));
  expect_invalid(
      [&](RunConfig& c) {
        c.training.gradient_compression = GradientCompression::topk;
        c.training.precision = Precision::fp16;
      },
      {"training.gradient_compression topk with training.precision fp16",
       "the error feedback carries that into every later step"});
  // Every exchange runs on cuda: the codes as device ops, the exchanges over NCCL.
  RunConfig local_on_cuda;  // local SGD's outer step runs as device ops over NCCL
  on_cuda(local_on_cuda);
  local_on_cuda.training.sync = SyncMode::local;
  EXPECT_NO_THROW(local_on_cuda.validate(2));
  RunConfig onebit_on_cuda;
  onebit(onebit_on_cuda);
  on_cuda(onebit_on_cuda);
  EXPECT_NO_THROW(onebit_on_cuda.validate(2));
  for (GradientCompression kind : {GradientCompression::int8, GradientCompression::topk}) {
    RunConfig compressed_on_cuda;
    on_cuda(compressed_on_cuda);
    compressed_on_cuda.training.gradient_compression = kind;
    EXPECT_NO_THROW(compressed_on_cuda.validate(2)) << choice_name(kind);
  }
  expect_invalid([](RunConfig& c) { c.model.n_head = 5; },
                 {"model.n_embd (768) must be divisible by model.n_head (5)"});
  expect_invalid([](RunConfig& c) { c.model.n_kv_head = 5; }, {"model.n_kv_head (5) must divide model.n_head (12)"});
  expect_invalid([](RunConfig& c) { c.model.n_kv_head = 24; }, {"model.n_kv_head (24) must divide"});
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.tp = 8;
        c.model.n_head = 16;
        c.model.n_embd = 1024;
        c.model.n_kv_head = 4;
      },
      {"model.n_kv_head (4 key/value heads) must be divisible by parallel.tp (8)"}, 8);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.tp = 5;
        c.model.n_head = 10;
        c.model.n_embd = 640;
      },
      {"the padded vocabulary (model.vocab_size 50257 -> 50304) must be divisible by parallel.tp (5)"}, 5);
  expect_invalid([](RunConfig& c) { c.parallel.tp = 8; }, {"model.n_head (12) must be divisible by parallel.tp (8)"},
                 8);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.tp = 3;
        c.model.ffn_hidden = 1000;
      },
      {"model.ffn_hidden (1000) must be divisible by parallel.tp (3)"}, 3);
  expect_invalid([](RunConfig& c) { c.parallel.pp = 5; },
                 {"model.n_layer (12) must be divisible by parallel.pp (5) * parallel.virtual_stages (1) = 5",
                  "parallel.pp_layers"},
                 5);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.pp = 2;
        c.parallel.pp_layers = {"5", "6"};
      },
      {"parallel.pp_layers sums to 11 layers but model.n_layer is 12", "neither drop nor duplicate"}, 2);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.pp = 2;
        c.parallel.pp_layers = {"12", "0"};
      },
      {"parallel.pp_layers[1] = 0: every stage needs at least one layer"}, 2);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.pp = 2;
        c.parallel.pp_layers = {"4", "4", "4"};
      },
      {"parallel.pp_layers has 3 entries; it needs one per pipeline stage: pp (2) * virtual_stages (1) = 2"}, 2);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.pp = 2;
        c.parallel.pp_layers = {"4", "x8"};
      },
      {"parallel.pp_layers[1] = 'x8' is not a whole number of layers"}, 2);
  {
    RunConfig uneven = RunConfig::from_yaml_string("parallel: {pp: 5, pp_layers: [2, 3, 3, 2, 2]}\n", "u.yaml");
    EXPECT_NO_THROW(uneven.validate(5));
    EXPECT_EQ(uneven.parallel.stage_layers(12), (std::vector<int>{2, 3, 3, 2, 2}));
  }
  expect_invalid(
      [](RunConfig& c) {
        c.training.precision = Precision::fp16;
        c.training.initial_loss_scale = 1;
        c.training.min_loss_scale = 4;
      },
      {"training.initial_loss_scale (1) must be >= training.min_loss_scale (4)"});
  // Keys that would not act are refused, naming what they apply to.
  expect_invalid(
      [](RunConfig& c) {
        c.training.device = ComputeDevice::cuda;
        c.training.cpu_gemm = CpuGemmChoice::measured;
      },
      {"training.cpu_gemm measured times the CPU's GEMMs", "training.device is cuda"});
  expect_invalid([](RunConfig& c) { c.training.loss_scale_window = 10; },
                 {"loss_scale_window and min_loss_scale apply to training.precision fp16", "precision is fp32"});
  expect_invalid(
      [](RunConfig& c) {
        c.training.schedule = LrScheduleKind::constant;
        c.training.min_lr = 1e-5;
      },
      {"training.min_lr is the floor", "training.schedule constant"});
  expect_invalid([](RunConfig& c) { c.model.rope_theta = 500000.0; },
                 {"model.rope_theta applies to RoPE", "gpt2 blocks have learned positions"});
  expect_invalid(
      [](RunConfig& c) {
        c.model.architecture = Architecture::moe;  // llama blocks by default
        c.model.num_experts = 4;
        c.model.n_embd = 96;
        c.model.n_head = 32;
      },
      {"llama blocks apply RoPE to pairs of channels", "= 3) must be even"});
  expect_invalid([](RunConfig& c) { c.parallel.virtual_stages = 2; },
                 {"parallel.virtual_stages (2) > 1 needs", "interleaved"});
  expect_invalid([](RunConfig& c) { c.parallel.pp_schedule = PipelineSchedule::interleaved; },
                 {"interleaved needs parallel.virtual_stages >= 2 and parallel.pp >= 2"});
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.pp = 2;
        c.parallel.virtual_stages = 2;
        c.parallel.pp_schedule = PipelineSchedule::interleaved;
        c.training.gradient_accumulation = 3;
      },
      {"micro-batches per step (3", "divisible by parallel.pp (2)"}, 2);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.pp = 2;
        c.parallel.zero_stage = 2;
      },
      {"parallel.zero_stage 2"}, 2);
  expect_invalid([](RunConfig& c) { c.parallel.ep = 2; }, {"parallel.ep (2) needs model.num_experts (0) > 0"}, 2);
  expect_invalid([](RunConfig& c) { c.model.top_k = 2; }, {"model.top_k (2) requires model.architecture: moe"});
  expect_invalid(
      [](RunConfig& c) {
        c.model.architecture = Architecture::llama;
        c.model.n_embd = 36;
        c.model.n_head = 12;
      },
      {"n_embd / n_head (36 / 12 = 3) must be even"});
  expect_invalid([](RunConfig& c) { c.training.seq_len = 2048; },
                 {"training.seq_len (2048) must be <= model.context_length (1024)"});
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.cp = 2;
        c.training.seq_len = 1022;
      },
      {"training.seq_len (1022) must be divisible by 2 * parallel.cp (4)"}, 2);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.cp = 2;
        c.training.seq_len = 1000;
        c.apply_override("model.attention.kind=block_sparse");
      },
      {"parallel.cp 2 cuts training.seq_len 1000 into chunks of 250", "model.attention.block_size (64)"}, 2);
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.tp = 4;
        c.parallel.sequence_parallel = true;
        c.training.seq_len = 1022;
      },
      {"training.seq_len (1022) must be divisible by parallel.tp (4) with sequence_parallel"}, 4);
  // With cp the rows split are a cp chunk's: 1 x 12 / 2 = 6 rows do not go over 4 tp ranks.
  expect_invalid(
      [](RunConfig& c) {
        c.parallel.tp = 4;
        c.parallel.cp = 2;
        c.parallel.sequence_parallel = true;
        c.model.n_head = 4;
        c.model.n_embd = 256;
        c.training.micro_batch = 1;
        c.training.seq_len = 12;
      },
      {"sequence_parallel splits a rank's 6 rows (training.micro_batch 1 x seq_len 12 / parallel.cp 2) over "
       "parallel.tp 4"},
      8);
  expect_invalid([](RunConfig& c) { c.training.min_lr = 1e-3; },
                 {"training.min_lr (0.001) must be <= training.lr (0.0006)"});
  expect_invalid([](RunConfig& c) { c.training.warmup_steps = 2000; },
                 {"training.warmup_steps (2000) must be <= training.steps (1000)"});
  expect_invalid([](RunConfig& c) { c.data.tokenizer = "train:60000"; },
                 {"data.tokenizer (train:60000) trains 60000 tokens, more than model.vocab_size (50257)"});
  expect_invalid(
      [](RunConfig& c) {
        c.data.tokenizer = "gpt2:/gpt2";
        c.model.vocab_size = 1000;
      },
      {"gpt2 has 50257 tokens, more than model.vocab_size (1000)"});
}

TEST(ConfigValidate, PerKeyChecksAlsoCatchValuesSetInCode) {
  expect_invalid([](RunConfig& c) { c.model.n_layer = 0; }, {"model.n_layer: must be >= 1, got 0"});
  expect_invalid([](RunConfig& c) { c.logging.level = "loud"; }, {"logging.level: must be one of trace, debug"});
  expect_invalid([](RunConfig& c) { c.training.no_decay = {"gain"}; }, {"training.no_decay: members must be among"});
  expect_invalid([](RunConfig& c) { c.data.tokenizer = "spm:x"; }, {"data.tokenizer: must be of the form"});
  expect_invalid([](RunConfig& c) { c.sample.temperature = -1; }, {"sample.temperature: must be > 0, got -1.0"});
}

TEST(ConfigValidate, TokenizerSpecParts) {
  TokenizerSpec gpt2 = parse_tokenizer_spec("gpt2:/data/gpt2");
  EXPECT_EQ(gpt2.kind, "gpt2");
  EXPECT_EQ(gpt2.argument, "/data/gpt2");
  TokenizerSpec trained = parse_tokenizer_spec("train:4096");
  EXPECT_EQ(trained.kind, "train");
  EXPECT_EQ(trained.argument, "4096");
  EXPECT_EQ(parse_tokenizer_spec("bpe:c:/x.json").argument, "c:/x.json");
  expect_error([] { parse_tokenizer_spec("wordpiece:x"); }, {"data.tokenizer", "not of the form"});
  expect_error([] { parse_tokenizer_spec(""); }, {"data.tokenizer", "resolve it first"});
}

}  // namespace
}  // namespace myriad
