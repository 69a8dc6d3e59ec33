// What users do between runs, end to end on the engine: a second fresh run into a folder of
// checkpoints, resuming after the newest checkpoint was deleted, runs whose loss turns non-finite,
// a corpus edited between runs, corpora too small to hold out validation, and a measured CPU GEMM
// plan across a resume.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine_fixtures.h"
#include "myriad/core/error.h"
#include "myriad/ops/cpu_gemm.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace fixtures;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(EngineUserPaths, ASecondFreshRunIntoTheSameFolderIsRefusedAndResumeFindsAnOlderCheckpoint) {
  const fs::path dir = fresh_dir("second_run");
  const RunConfig config = tiny_config(dir, write_corpus(dir));
  {
    Engine first(config, quiet_logger());
    first.step();
    first.save();
    first.step();
    first.save();
  }
  const fs::path checkpoints = config.checkpoint.dir;
  ASSERT_TRUE(fs::exists(checkpoints / "step_00000002"));
  // A second run from scratch into the same folder: refused before its first step, naming the
  // folder and the ways out; nothing of the first run is touched.
  Engine second(config, quiet_logger());
  const std::string why = error_of([&] { second.step(); });
  EXPECT_NE(why.find(checkpoints.string()), std::string::npos) << why;
  EXPECT_NE(why.find("--resume auto"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(checkpoints / "step_00000001"));
  EXPECT_TRUE(fs::exists(checkpoints / "step_00000002"));
  // The newest checkpoint deleted by hand: resume auto continues from the older one, not from scratch.
  fs::remove_all(checkpoints / "step_00000002");
  Engine third(config, quiet_logger());
  third.load("auto");
  EXPECT_EQ(third.step_count(), 1);
  EXPECT_EQ(third.step().step, 2);
  fs::remove_all(dir);
}

// training.cpu_gemm measured: no plan before the first step, one after it; the checkpoint keeps it;
// a resume installs that plan before its first step (it does not measure again) and continues the
// curve bit for bit; a run on the fixed rule afterwards runs with no plan, and a measured run
// resuming that run's checkpoint measures after its first step.
TEST(EngineUserPaths, AMeasuredCpuGemmPlanIsKeptAcrossAResume) {
  const fs::path dir = fresh_dir("cpu_gemm_measured");
  ::setenv("MYRIAD_CPU_GEMM_CACHE", "off", 1);  // every plan here is measured, none from the machine's cache
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.apply_override("training.cpu_gemm=measured");
  std::vector<double> straight;
  std::string measured;
  {
    Engine first(config, quiet_logger());
    EXPECT_EQ(cpu::gemm_plan(), nullptr);
    first.step();
    ASSERT_NE(cpu::gemm_plan(), nullptr);
    measured = cpu::gemm_plan()->to_text();
    EXPECT_FALSE(measured.empty());
    first.step();
    first.save();
    for (int i = 0; i < 3; ++i) straight.push_back(first.step().loss);
    EXPECT_EQ(cpu::gemm_plan()->to_text(), measured) << "the plan changed after it was measured";
  }
  EXPECT_EQ(cpu::gemm_plan(), nullptr) << "the engine left its plan installed";
  const std::string manifest = read_all(fs::path(config.checkpoint.dir) / "step_00000002" / "manifest.json");
  EXPECT_NE(manifest.find("\"cpu_gemm_plan\""), std::string::npos);
  {
    Engine resumed(config, quiet_logger());
    resumed.load("auto");
    ASSERT_NE(cpu::gemm_plan(), nullptr) << "the resume did not install the checkpoint's plan";
    EXPECT_EQ(cpu::gemm_plan()->to_text(), measured);
    std::vector<double> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(resumed.step().loss);
    EXPECT_EQ(losses, straight);
    EXPECT_EQ(cpu::gemm_plan()->to_text(), measured) << "the same layout's first resumed step added shapes";
  }
  RunConfig fixed = config;
  fixed.apply_override("training.cpu_gemm=fixed");
  fixed.logging.dir = (dir / "fixed").string();
  fixed.checkpoint.dir = (dir / "fixed" / "checkpoints").string();
  {
    Engine other(fixed, quiet_logger());
    other.step();
    EXPECT_EQ(cpu::gemm_plan(), nullptr);
    other.save();
  }
  // A measured run resuming a fixed run's checkpoint (no plan in it) measures after its first step.
  RunConfig switched = fixed;
  switched.apply_override("training.cpu_gemm=measured");
  Engine resumed_fixed(switched, quiet_logger());
  resumed_fixed.load("auto");
  EXPECT_EQ(cpu::gemm_plan(), nullptr);
  resumed_fixed.step();
  EXPECT_NE(cpu::gemm_plan(), nullptr);
  fs::remove_all(dir);
}

// A checkpoint whose manifest holds a damaged plan is refused on load, naming the manifest's key,
// before anything of the run changes.
TEST(EngineUserPaths, ADamagedCpuGemmPlanInAManifestIsRefusedBeforeAnythingLoads) {
  const fs::path dir = fresh_dir("cpu_gemm_damaged");
  ::setenv("MYRIAD_CPU_GEMM_CACHE", "off", 1);
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.apply_override("training.cpu_gemm=measured");
  const fs::path checkpoint = fs::path(config.checkpoint.dir) / "step_00000001";
  {
    Engine first(config, quiet_logger());
    first.step();
    first.save();
  }
  const fs::path manifest = checkpoint / "manifest.json";
  std::string text = read_all(manifest);
  const std::string key = "\"cpu_gemm_plan\": \"";
  const std::size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
  text.insert(at + key.size(), "X ");
  std::ofstream(manifest, std::ios::trunc) << text;
  RunConfig resumed_config = config;
  resumed_config.logging.dir = (dir / "resumed").string();
  Engine resumed(resumed_config, quiet_logger());
  const std::string why = error_of([&] { resumed.load(checkpoint.string()); });
  EXPECT_NE(why.find("manifest.json's cpu_gemm_plan"), std::string::npos) << why;
  EXPECT_NE(why.find("line 1"), std::string::npos) << why;
  EXPECT_EQ(resumed.step_count(), 0);
  EXPECT_EQ(cpu::gemm_plan(), nullptr);
  fs::remove_all(dir);
}

TEST(EngineUserPaths, NonFiniteStepsStopTheRunAfterTheConfiguredNumber) {
  const fs::path dir = fresh_dir("nonfinite");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.weight_decay = 1e30;  // the first update blows the weights up
  config.training.max_nonfinite_steps = 3;
  Engine engine(config, quiet_logger());
  int finite = 0;
  const std::string why = error_of([&] {
    for (int i = 0; i < 20; ++i) {
      if (std::isfinite(engine.step().loss)) ++finite;
    }
  });
  EXPECT_NE(why.find("3 steps in a row had a non-finite loss or gradient norm"), std::string::npos) << why;
  EXPECT_NE(why.find("training.max_nonfinite_steps"), std::string::npos) << why;
  EXPECT_EQ(engine.step_count(), finite + 3);
  // 0 = never stop.
  config.training.max_nonfinite_steps = 0;
  config.logging.dir = (dir / "never").string();
  config.checkpoint.dir = (dir / "never" / "checkpoints").string();
  Engine patient(config, quiet_logger());
  for (int i = 0; i < 6; ++i) patient.step();
  EXPECT_FALSE(std::isfinite(patient.step().loss));
  fs::remove_all(dir);
}

TEST(EngineUserPaths, Fp16OverflowsWhileTheScaleComesDownDoNotCount) {
  const fs::path dir = fresh_dir("nonfinite_fp16");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::fp16;
  config.training.initial_loss_scale = std::ldexp(1.0, 40);
  config.training.max_nonfinite_steps = 2;
  Engine engine(config, quiet_logger());
  int skipped = 0;
  for (int i = 0; i < 20; ++i) skipped += engine.step().skipped ? 1 : 0;
  EXPECT_GT(skipped, 2) << "the test needs more skipped steps than the limit";
  fs::remove_all(dir);
}

TEST(EngineUserPaths, TheTokenCacheIsRebuiltWhenTheCorpusChanges) {
  const fs::path dir = fresh_dir("stale_cache");
  const std::string corpus = write_corpus(dir);
  const RunConfig config = tiny_config(dir, corpus);
  const fs::path cache = dir / "data";
  { Engine first(config, quiet_logger()); }
  const std::string shard_before = read_all(cache / "train_000000.bin");
  const std::string key_before = read_all(cache / "source.txt");
  ASSERT_FALSE(shard_before.empty());
  // Same length, same modification time, other text: the content hash notices.
  std::string text = read_all(corpus);
  for (char& c : text) c = (c == 'e') ? 'a' : c;
  const auto time = fs::last_write_time(corpus);
  std::ofstream(corpus, std::ios::binary | std::ios::trunc) << text;
  fs::last_write_time(corpus, time);
  { Engine second(config, quiet_logger()); }
  EXPECT_NE(read_all(cache / "source.txt"), key_before);
  EXPECT_NE(read_all(cache / "train_000000.bin"), shard_before) << "the old tokens were reused";
  // An interrupted build (shards without the key file) is rebuilt, not trusted.
  const std::string key_now = read_all(cache / "source.txt");
  fs::remove(cache / "source.txt");
  std::ofstream(cache / "train_000000.bin", std::ios::binary | std::ios::trunc) << "garbage";
  { Engine third(config, quiet_logger()); }
  EXPECT_EQ(read_all(cache / "source.txt"), key_now);
  fs::remove_all(dir);
}

TEST(EngineUserPaths, CorporaTooSmallForTrainingOrValidationSayWhatHappened) {
  const fs::path dir = fresh_dir("small_corpus");
  RunConfig config = tiny_config(dir, (dir / "empty.txt").string());
  std::ofstream(dir / "empty.txt").close();
  std::string why = error_of([&] { Engine engine(config, quiet_logger()); });
  EXPECT_NE(why.find("empty.txt"), std::string::npos) << why;
  EXPECT_NE(why.find("holds no text"), std::string::npos) << why;
  // Five files of one document each, val_fraction 0.1: every 10th document would go to validation.
  const fs::path folder = dir / "five";
  fs::create_directories(folder);
  const std::string corpus = write_corpus(dir);
  for (int i = 0; i < 5; ++i) fs::copy_file(corpus, folder / ("part" + std::to_string(i) + ".txt"));
  config.data.path = folder.string();
  why = error_of([&] { Engine engine(config, quiet_logger()); });
  EXPECT_NE(why.find("no document went to validation"), std::string::npos) << why;
  EXPECT_NE(why.find("5 documents"), std::string::npos) << why;
  EXPECT_NE(why.find("data.val_split: tail"), std::string::npos) << why;
  // The way out the message names works.
  config.data.val_split = "tail";
  Engine engine(config, quiet_logger());
  EXPECT_TRUE(std::isfinite(engine.evaluate()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
