// BatchPrefetch hands over exactly what a direct read gives, for consecutive steps and after a
// jump (a resume), and a failed background read fails the step that wanted it only; the engine
// trained on block-compressed shards (read in the background) follows the plain shards' loss
// curve bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "engine_fixtures.h"
#include "myriad/data/compressed_shard.h"
#include "myriad/data/token_shard.h"
#include "myriad/train/data/batch_prefetch.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

namespace fs = std::filesystem;

// ids[m][i] = step * 1000 + m * 100 + i; targets the same plus one; throws for step 13.
void fake_fill(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) {
  if (step == 13) throw std::runtime_error("step 13 is unreadable");
  for (std::size_t m = 0; m < ids.size(); ++m) {
    for (std::int64_t i = 0; i < ids[m].numel(); ++i) {
      ids[m].data<std::int32_t>()[i] = static_cast<std::int32_t>(step * 1000 + static_cast<std::int64_t>(m) * 100 + i);
      targets[m].data<std::int32_t>()[i] = ids[m].data<std::int32_t>()[i] + 1;
    }
  }
}

TEST(BatchPrefetch, HandsOverWhatADirectReadGivesAtEveryStep) {
  std::vector<Tensor> ids = {Tensor::empty({2, 3}, DType::i32), Tensor::empty({2, 3}, DType::i32)};
  std::vector<Tensor> targets = {ids[0].clone(), ids[1].clone()};
  std::vector<Tensor> want_ids = {ids[0].clone(), ids[1].clone()};
  std::vector<Tensor> want_targets = {ids[0].clone(), ids[1].clone()};
  BatchPrefetch prefetch(fake_fill, ids, targets);
  for (std::int64_t step : {0, 1, 2, 3, 7, 8, 2, 3}) {  // a jump forward and one back (a reload)
    prefetch.take(step, ids, targets);
    fake_fill(step, want_ids, want_targets);
    for (std::size_t m = 0; m < ids.size(); ++m) {
      for (std::int64_t i = 0; i < 6; ++i) {
        ASSERT_EQ(ids[m].data<std::int32_t>()[i], want_ids[m].data<std::int32_t>()[i]) << "step " << step;
        ASSERT_EQ(targets[m].data<std::int32_t>()[i], want_targets[m].data<std::int32_t>()[i]) << "step " << step;
      }
    }
  }
  EXPECT_EQ(prefetch.prefetch_hits(), 5);  // 1, 2, 3, 8 and the second 3 were read ahead
}

TEST(BatchPrefetch, AFailedReadFailsOnlyTheStepThatWantsIt) {
  std::vector<Tensor> ids = {Tensor::empty({4}, DType::i32)}, targets = {Tensor::empty({4}, DType::i32)};
  BatchPrefetch prefetch(fake_fill, ids, targets);
  prefetch.take(12, ids, targets);                                    // reads 13 in the background: fails
  EXPECT_THROW(prefetch.take(13, ids, targets), std::runtime_error);  // the step that wanted it
  prefetch.take(11, ids, targets);                                    // reads 12 ahead
  EXPECT_EQ(ids[0].data<std::int32_t>()[0], 11000);
  prefetch.take(12, ids, targets);  // 13 read ahead again and failing: dropped unless wanted
  prefetch.take(5, ids, targets);
  EXPECT_EQ(ids[0].data<std::int32_t>()[3], 5003);
}

TEST(BatchPrefetch, CompressedShardsTrainLikePlainOnesBitForBit) {
  const fs::path dir = fixtures::fresh_dir("prefetch_compressed");
  RunConfig plain_config = fixtures::tiny_config(dir / "plain", fixtures::write_corpus(dir));
  std::vector<double> plain_loss, packed_loss;
  double plain_val = 0.0, packed_val = 0.0;
  {
    Engine engine(plain_config, fixtures::quiet_logger());
    for (int s = 0; s < 12; ++s) plain_loss.push_back(engine.step().loss);
    plain_val = engine.evaluate();
  }
  // The same shards, block-compressed with small blocks (windows cross blocks and shards).
  const fs::path shards = dir / "packed_shards";
  fs::create_directories(shards);
  int compressed = 0;
  for (const auto& entry : fs::directory_iterator(dir / "plain" / "data")) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".bin")) continue;
    const data::TokenShard shard = data::TokenShard::open(entry.path().string());
    std::vector<std::int32_t> ids(static_cast<std::size_t>(shard.size()));
    shard.read(0, shard.size(), ids.data());
    data::write_compressed_token_shard((shards / name).string(), ids, shard.vocab_size(),
                                       {.block_tokens = 300, .level = 3});
    ++compressed;
  }
  ASSERT_GE(compressed, 2);
  RunConfig packed_config = fixtures::tiny_config(dir / "packed", shards.string());
  // Shards are used with their own split: the fixture's val_fraction (for its text) is refused there.
  packed_config.data.val_fraction = DataConfig{}.val_fraction;
  {
    Engine engine(packed_config, fixtures::quiet_logger());
    for (int s = 0; s < 12; ++s) packed_loss.push_back(engine.step().loss);
    packed_val = engine.evaluate();
  }
  EXPECT_EQ(packed_loss, plain_loss);
  EXPECT_EQ(packed_val, plain_val);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
