// MpiRuntime when MPI is already up (main() made the first one): a second runtime neither
// initialises nor finalises, reports the world, and hands out working world communicators.
#include <gtest/gtest.h>

#include "mpi_test_support.h"
#include "myriad/distributed/mpi_runtime.h"

namespace myriad::distributed {
namespace {

TEST(MpiRuntime, NestedRuntimeSharesTheWorldAndDoesNotFinalize) {
  {
    MpiRuntime runtime;
    EXPECT_FALSE(runtime.initialized_mpi());
    EXPECT_EQ(runtime.world_rank(), myriad::testing::world_rank());
    EXPECT_EQ(runtime.world_size(), myriad::testing::world_size());
    EXPECT_TRUE(MpiRuntime::launched_by_mpi());
    std::unique_ptr<Communicator> world = runtime.world();
    EXPECT_EQ(world->name(), "world");
    EXPECT_EQ(world->rank(), runtime.world_rank());
    EXPECT_EQ(world->size(), runtime.world_size());
    world->barrier();
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_FALSE(finalized);
}

}  // namespace
}  // namespace myriad::distributed
