// data.sources: a mixture of two corpora trains, the step metrics count each source's target
// tokens (they add up to the batch, in about the weights' proportion), validation reads both val
// splits, every source gets its own token cache, and myriad-data mix's plan counts the same
// draws; a trained (per-corpus) tokenizer is refused for text sources with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine_fixtures.h"
#include "myriad/core/error.h"
#include "myriad/data/mixture_plan.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

namespace fs = std::filesystem;

std::string write_numbers_corpus(const fs::path& dir) {
  std::ofstream out(dir / "numbers.txt");
  for (int i = 0; i < 3000; ++i) out << "number " << i << " is " << (i % 2 ? "odd" : "even") << ".\n";
  return (dir / "numbers.txt").string();
}

TEST(DataSources, AMixtureTrainsAndCountsTokensPerSource) {
  const fs::path dir = fixtures::fresh_dir("data_sources");
  const std::string words = fixtures::write_corpus(dir), numbers = write_numbers_corpus(dir);
  {  // a tokenizer trained once, on the first corpus, shared by both sources
    RunConfig first = fixtures::tiny_config(dir / "first", words);
    Engine engine(first, fixtures::quiet_logger());
  }
  const std::string tokenizer = "bpe:" + (dir / "first" / "data" / "tokenizer.bpe").string();
  ASSERT_TRUE(fs::exists(dir / "first" / "data" / "tokenizer.bpe"));

  RunConfig config = fixtures::tiny_config(dir / "mixed", "");
  config.data.path.clear();
  config.data.sources = {words + "@3", numbers + "@1"};
  config.data.tokenizer = tokenizer;
  Engine engine(config, fixtures::quiet_logger());
  std::int64_t first_total = 0, all_total = 0;
  for (int s = 0; s < 12; ++s) {
    const StepMetrics m = engine.step();
    ASSERT_EQ(m.tokens_by_source.size(), 2u);
    EXPECT_EQ(m.tokens_by_source[0] + m.tokens_by_source[1], 4 * 2 * 32);  // micro 4 x accumulation 2 x T 32
    first_total += m.tokens_by_source[0];
    all_total += m.tokens_by_source[0] + m.tokens_by_source[1];
    EXPECT_TRUE(std::isfinite(m.loss));
  }
  const double share = static_cast<double>(first_total) / static_cast<double>(all_total);
  EXPECT_NEAR(share, 0.75, 0.15);  // 96 samples: sigma 0.044
  EXPECT_TRUE(std::isfinite(engine.evaluate()));
  EXPECT_TRUE(fs::exists(dir / "mixed" / "data" / "source_0"));
  EXPECT_TRUE(fs::exists(dir / "mixed" / "data" / "source_1"));
  // myriad-data mix's plan of the same run draws exactly what training drew.
  const data::MixturePlan plan = data::plan_mixture(
      {(dir / "mixed" / "data" / "source_0").string(), (dir / "mixed" / "data" / "source_1").string()}, {3.0, 1.0}, 12,
      4 * 2, 32, config.training.seed);
  EXPECT_TRUE(plan.exact);
  EXPECT_EQ(plan.sources[0].drawn_tokens, first_total);
  EXPECT_EQ(plan.sources[1].drawn_tokens, all_total - first_total);
  EXPECT_NE(plan.yaml.find("weight: 3"), std::string::npos) << plan.yaml;

  RunConfig trained = config;
  trained.logging.dir = (dir / "trained").string();
  trained.checkpoint.dir = (dir / "trained" / "checkpoints").string();
  trained.data.tokenizer = "train:320";
  try {
    Engine refused(trained, fixtures::quiet_logger());
    ADD_FAILURE() << "text sources with a trained tokenizer were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("would train a separate vocabulary for each source"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
