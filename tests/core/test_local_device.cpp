// Local rank discovery and the one-rank-per-GPU device choice (core/local_device.h).
#include "myriad/core/local_device.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "test_helpers.h"

namespace myriad {
namespace {

EnvironmentLookup environment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

TEST(LocalDevice, ReadsTheFirstLauncherVariableInOrder) {
  EXPECT_FALSE(local_rank_from_environment(environment({})).has_value());
  auto slurm = local_rank_from_environment(environment({{"SLURM_LOCALID", "3"}, {"LOCAL_RANK", "5"}}));
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->value, 3);
  EXPECT_EQ(slurm->source, "SLURM_LOCALID");
  auto openmpi = local_rank_from_environment(
      environment({{"OMPI_COMM_WORLD_LOCAL_RANK", "7"}, {"SLURM_LOCALID", "3"}, {"MPI_LOCALRANKID", "1"}}));
  ASSERT_TRUE(openmpi.has_value());
  EXPECT_EQ(openmpi->value, 7);
  EXPECT_EQ(openmpi->source, "OMPI_COMM_WORLD_LOCAL_RANK");
  auto mpich = local_rank_from_environment(environment({{"MPI_LOCALRANKID", "12"}, {"LOCAL_RANK", "0"}}));
  ASSERT_TRUE(mpich.has_value());
  EXPECT_EQ(mpich->value, 12);
}

TEST(LocalDevice, RejectsAValueThatIsNotALocalRank) {
  for (const char* bad : {"", "-1", "two", "1.5", "99999999999"}) {
    testing::expect_error_naming(
        [&] {
          local_rank_from_environment(environment({{"LOCAL_RANK", bad}}));
        },
        {"LOCAL_RANK", "not a local rank"});
  }
}

TEST(LocalDevice, OneRankPerGpu) {
  EXPECT_EQ(select_local_device(std::nullopt, 1), 0);
  EXPECT_EQ(select_local_device(LocalRank{5, "SLURM_LOCALID"}, 8), 5);
  testing::expect_error_naming(
      [] {
        select_local_device(LocalRank{8, "OMPI_COMM_WORLD_LOCAL_RANK"}, 8);
      },
      {"local rank 8 (from OMPI_COMM_WORLD_LOCAL_RANK) has no GPU of its own: 8 visible", "at most 8 ranks per node"});
  testing::expect_error_naming([] { select_local_device(std::nullopt, 0); }, {"no CUDA device is visible"});
}

}  // namespace
}  // namespace myriad
