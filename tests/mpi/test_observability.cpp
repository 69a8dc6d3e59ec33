// Observability under mpiexec: exposed communication is > 0 on the dp axis of a dp = N run and
// 0 on the other axes; a rank made slow on purpose is reported as a straggler with its grid
// coordinates and host by every rank, and no other rank is; rank 0 writes metrics.jsonl.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "engine_test_support.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace testing;

TEST(Observability, SlowRankIsReportedAsAStragglerWithItsCoordinates) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  const int slow = n - 1;
  fs::path dir = shared_dir(comm, "straggler");
  RunConfig config = config_for(comm.rank(), dir, "gpt2", n, 0, 1);
  config.logging.straggler_every = 3;
  config.logging.straggler_margin = 4.0;  // 5x the median: far above the noise of oversubscribed ranks
  config.logging.dir = dir.string();      // shared: rank 0 writes the metrics
  prepare_shared_data(comm, config);
  distributed::ProcessGroups groups(distributed::GridShape{.dp = n}, world.runtime.world());
  Engine engine(config, make_rank_logger(comm.rank(), "error"), &groups);
  if (comm.rank() == slow) engine.set_compute_delay_for_testing(0.5);  // >> a loaded host's descheduling
  std::vector<StepMetrics> steps;
  steps.reserve(6);
  for (int s = 0; s < 6; ++s) steps.push_back(engine.step());

  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  for (const StepMetrics& m : steps) {
    EXPECT_GT(m.comm_axis_seconds[3], 0.0) << "dp axis, step " << m.step;  // kCommAxes: tp cp ep dp pp
    for (int a : {0, 1, 2, 4}) EXPECT_EQ(m.comm_axis_seconds[static_cast<std::size_t>(a)], 0.0);
    if (m.step % 3 != 0) {
      EXPECT_TRUE(m.stragglers.empty());
      EXPECT_TRUE(m.rank_compute_seconds.empty());
      continue;
    }
    ASSERT_EQ(m.rank_compute_seconds.size(), static_cast<std::size_t>(n));
    ASSERT_EQ(m.stragglers.size(), 1u) << "step " << m.step << " on rank " << comm.rank();
    EXPECT_EQ(m.stragglers[0].rank, slow);
    EXPECT_EQ(m.stragglers[0].coords, "tp 0, cp 0, ep 0, dp " + std::to_string(slow) + ", pp 0");
    EXPECT_EQ(m.stragglers[0].host, std::string(host));
    EXPECT_GT(m.stragglers[0].compute_seconds, m.stragglers[0].median_seconds * 1.5);
  }
  comm.barrier();
  if (comm.rank() == 0) {
    std::ifstream in(dir / "metrics.jsonl");
    int lines = 0, with_stragglers = 0;
    for (std::string line; std::getline(in, line); ++lines) {
      if (line.find("\"stragglers\":[{") != std::string::npos) ++with_stragglers;
    }
    EXPECT_EQ(lines, 6);
    EXPECT_EQ(with_stragglers, 2);
  }
}

}  // namespace
}  // namespace myriad::train
