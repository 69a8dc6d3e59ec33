// Config keys by path (config_keys.h) and the derived-value table (derived_values.h): every key
// reads and writes through its path, writes take the per-key checks of a --set override, unknown
// paths name the closest key; the shared step-mode enums keep their YAML spellings.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "myriad/config/config_keys.h"
#include "myriad/config/derived_values.h"
#include "myriad/core/error.h"
#include "test_helpers.h"

namespace myriad {
namespace {

TEST(ConfigKeys, EveryKeyReadsAndWritesThroughItsPath) {
  const std::vector<std::string> keys = config_keys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  EXPECT_EQ(keys.front(), "model.architecture");
  RunConfig config;
  config.training.micro_batch = 3;
  config.model.attention_kind = AttentionLayout::block_sparse;
  for (const std::string& key : keys) {
    EXPECT_EQ(config_key_problem(key), "") << key;
    const FieldValue value = config_value(config, key);
    RunConfig copy = config;
    set_config_value(copy, key, value);  // writing the value read back changes nothing
    EXPECT_EQ(copy, config) << key;
  }
  EXPECT_EQ(std::get<std::int64_t>(config_value(config, "training.micro_batch")), 3);
  EXPECT_EQ(std::get<std::string>(config_value(config, "model.attention.kind")), "block_sparse");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(config_value(config, "model.bias")));  // auto
  EXPECT_EQ(config_value(config, "training.batch_size"), config_value(config, "training.global_batch_size"));
}

TEST(ConfigKeys, WritesTakeTheChecksOfAnOverride) {
  RunConfig config;
  set_config_value(config, "training.lr", FieldValue(std::int64_t{1}));  // an integer for a number key
  EXPECT_EQ(config.training.lr, 1.0);
  set_config_value(config, "model.architecture", FieldValue(std::string("LLaMA")));
  EXPECT_EQ(config.model.architecture, Architecture::llama);
  set_config_value(config, "parallel.pp_schedule", FieldValue(std::string("gpipe")));
  EXPECT_EQ(config.parallel.pp_schedule, PipelineSchedule::gpipe);
  set_config_value(config, "model.bias", FieldValue(true));
  set_config_value(config, "model.bias", FieldValue(std::monostate{}));
  EXPECT_FALSE(config.model.bias.has_value());
  const RunConfig before = config;
  testing::expect_error_naming([&] { set_config_value(config, "training.micro_batch", FieldValue(std::int64_t{0})); },
                               {"training.micro_batch: must be >= 1, got 0"});
  testing::expect_error_naming([&] { set_config_value(config, "training.steps", FieldValue(std::string("7"))); },
                               {"training.steps: expected int, got a string ('7')"});
  testing::expect_error_naming([&] { set_config_value(config, "training.schedule", FieldValue(std::string("step"))); },
                               {"must be one of cosine, linear, constant, got 'step'"});
  testing::expect_error_naming([&] { set_config_value(config, "training.seed", FieldValue(std::monostate{})); },
                               {"expected int, got auto"});
  EXPECT_EQ(config, before);  // failed writes change nothing
}

TEST(ConfigKeys, UnknownPathsNameTheClosestKey) {
  EXPECT_NE(config_key_problem("training.stepz").find("unknown key 'training.stepz' (did you mean 'steps'?)"),
            std::string::npos);
  EXPECT_NE(config_key_problem("trainin.lr").find("unknown section 'trainin' (did you mean 'training'?)"),
            std::string::npos);
  EXPECT_NE(config_key_problem("steps").find("the key must be section.key"), std::string::npos);
  testing::expect_error_naming([] { (void)config_value(RunConfig{}, "model.n_layr"); }, {"did you mean 'n_layer'"});
  EXPECT_EQ(config_key_info("training.batch_size").name, "global_batch_size");
}

TEST(ConfigKeys, OverridesKeepTheirMessages) {
  RunConfig config;
  testing::expect_error_naming([&] { config.apply_override("training.lrr=3e-4"); },
                               {"override 'training.lrr=3e-4': unknown key 'training.lrr' (did you mean 'lr'?)"});
  testing::expect_error_naming([&] { config.apply_override("training.lr=fast"); },
                               {"override 'training.lr=fast': training.lr: expected a number, got 'fast'"});
  config.apply_override(" training.recompute = FULL ");
  EXPECT_EQ(config.training.recompute, Recompute::full);
}

TEST(DerivedValues, AreTheModelHelpersValues) {
  RunConfig config;  // gpt2 small: vocab 50257, n_embd 768, n_head 12
  std::map<std::string, FieldValue> values;
  for (const DerivedValue& d : derived_values()) values[d.path] = d.get(config);
  EXPECT_EQ(std::get<std::int64_t>(values.at("model.padded_vocab_size")), 50304);
  EXPECT_EQ(std::get<std::int64_t>(values.at("model.head_dim")), 64);
  EXPECT_EQ(std::get<std::string>(values.at("model.family")), "gpt2");
  EXPECT_EQ(std::get<std::int64_t>(values.at("model.moe_top_k")), 0);
  EXPECT_EQ(std::get<double>(values.at("model.moe_capacity_factor")), 1.25);
  for (const DerivedValue& d : derived_values()) EXPECT_EQ(config_key_problem(d.path).find("unknown key"), 0u);
}

TEST(StepModes, KeepTheirYamlSpellings) {
  EXPECT_EQ(choice_name(Recompute::selective), "selective");
  EXPECT_EQ(choice_name(PipelineSchedule::one_f_one_b), "1f1b");
  EXPECT_EQ(choice_name(LrScheduleKind::constant), "constant");
  EXPECT_EQ(require_choice<PipelineSchedule>("Interleaved", "schedule"), PipelineSchedule::interleaved);
  testing::expect_error_naming([] { (void)require_choice<Recompute>("some", "training.recompute"); },
                               {"training.recompute 'some' unknown; allowed: none, selective, full"});
}

}  // namespace
}  // namespace myriad
