// The machine's route cache (train/cpu_gemm_cache.h): where $MYRIAD_CPU_GEMM_CACHE puts it ("off":
// nowhere), adding merges into the file's routes and keeps the others, a file of another key or
// that does not parse is reported and replaced; end to end, a second fresh measured run takes its
// routes from the cache the first one wrote (a cache rewritten to OpenBLAS everywhere gives a plan
// of OpenBLAS everywhere, which timing would not), and a damaged cache is measured over and mended.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine_fixtures.h"
#include "myriad/ops/cpu_gemm.h"
#include "myriad/train/cpu_gemm_cache.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace fixtures;

// Points $MYRIAD_CPU_GEMM_CACHE at `value` for the test's lifetime.
class CacheVariable {
 public:
  explicit CacheVariable(const std::string& value) {
    if (const char* old = std::getenv("MYRIAD_CPU_GEMM_CACHE")) saved_ = old;
    ::setenv("MYRIAD_CPU_GEMM_CACHE", value.c_str(), 1);
  }
  ~CacheVariable() {
    if (saved_.empty()) {
      ::unsetenv("MYRIAD_CPU_GEMM_CACHE");
    } else {
      ::setenv("MYRIAD_CPU_GEMM_CACHE", saved_.c_str(), 1);
    }
  }
  CacheVariable(const CacheVariable&) = delete;
  CacheVariable& operator=(const CacheVariable&) = delete;

 private:
  std::string saved_;
};

TEST(CpuGemmCache, AddMergesAndAnotherKeyOrDamageIsReported) {
  const fs::path dir = fresh_dir("gemm_cache_file");
  const CacheVariable variable(dir.string());
  const CpuGemmCache cache = CpuGemmCache::from_environment();
  ASSERT_TRUE(cache.enabled());
  EXPECT_EQ(fs::path(cache.path()).parent_path(), dir / "cpu_gemm");
  std::string problem = "unset";
  EXPECT_TRUE(cache.read(&problem).empty());  // no file yet
  EXPECT_EQ(problem, "");
  cpu::GemmPlan first, second;
  first.set({false, true, 8, 16, 32}, cpu::GemmRoute::openblas);
  second.set({true, false, 4, 4, 4}, cpu::GemmRoute::openblas);
  EXPECT_EQ(cache.add(first), "");
  EXPECT_EQ(cache.add(second), "");
  const cpu::GemmPlan both = cache.read(&problem);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(both.routes().size(), 2u);
  // The same file read under another key: refused, naming the file.
  const CpuGemmCache other(cache.path(), "another machine");
  EXPECT_TRUE(other.read(&problem).empty());
  EXPECT_NE(problem.find("another machine or set-up"), std::string::npos) << problem;
  // A damaged line: reported, and the next add replaces the file.
  {
    std::ofstream out(cache.path(), std::ios::app);
    out << "N N 1 2 fast\n";
  }
  EXPECT_TRUE(cache.read(&problem).empty());
  EXPECT_NE(problem.find(cache.path()), std::string::npos) << problem;
  EXPECT_EQ(cache.add(first), "");
  EXPECT_EQ(cache.read(&problem).routes(), first.routes());
  EXPECT_EQ(problem, "");
  {
    const CacheVariable off("off");
    EXPECT_FALSE(CpuGemmCache::from_environment().enabled());
  }
  fs::remove_all(dir);
}

TEST(CpuGemmCache, ASecondFreshRunTakesItsRoutesFromTheCache) {
  if (cpu::available_gemm_routes().size() < 2) GTEST_SKIP() << "one route only: the cache cannot be told from timing";
  const fs::path dir = fresh_dir("gemm_cache_runs");
  const CacheVariable variable((dir / "cache").string());
  auto measured_config = [&](const std::string& run) {
    fs::create_directories(dir / run);
    RunConfig config = tiny_config(dir / run, write_corpus(dir / run));
    config.apply_override("training.cpu_gemm=measured");
    return config;
  };
  std::string first_plan;
  {
    Engine first(measured_config("first"), quiet_logger());
    first.step();
    ASSERT_NE(cpu::gemm_plan(), nullptr);
    first_plan = cpu::gemm_plan()->to_text();
  }
  const CpuGemmCache cache = CpuGemmCache::from_environment();
  std::string problem;
  cpu::GemmPlan written = cache.read(&problem);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(written.to_text(), first_plan);
  // Every cached route rewritten to OpenBLAS: the next fresh run's plan must be exactly that.
  cpu::GemmPlan all_openblas;
  for (const auto& [shape, route] : written.routes()) all_openblas.set(shape, cpu::GemmRoute::openblas);
  fs::remove(cache.path());
  ASSERT_EQ(cache.add(all_openblas), "");
  {
    Engine second(measured_config("second"), quiet_logger());
    second.step();
    ASSERT_NE(cpu::gemm_plan(), nullptr);
    EXPECT_EQ(cpu::gemm_plan()->to_text(), all_openblas.to_text());
  }
  // A damaged cache: the run measures and the cache is mended.
  { std::ofstream(cache.path(), std::ios::trunc) << "garbage\n"; }
  {
    Engine third(measured_config("third"), quiet_logger());
    third.step();
    ASSERT_NE(cpu::gemm_plan(), nullptr);
    EXPECT_EQ(cpu::gemm_plan()->routes().size(), written.routes().size());
  }
  EXPECT_EQ(cache.read(&problem).routes().size(), written.routes().size());
  EXPECT_EQ(problem, "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
