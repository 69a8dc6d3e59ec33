// Transport-independent pieces of the Communicator interface: the chunk rule, op names and
// statistics arithmetic.
#include <gtest/gtest.h>

#include "myriad/core/error.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {
namespace {

TEST(Communicator, ChunkRangeCoversEveryElementOnceInOrder) {
  for (std::int64_t n : {0, 1, 2, 3, 7, 10, 1000003}) {
    for (int parts : {1, 2, 3, 4, 7, 16}) {
      std::int64_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const ChunkRange c = chunk_range(n, parts, i);
        EXPECT_EQ(c.begin, next) << n << " " << parts << " " << i;
        EXPECT_EQ(c.begin, n * i / parts);
        EXPECT_GE(c.size(), n / parts);
        EXPECT_LE(c.size(), (n + parts - 1) / parts);
        next = c.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  // Worked example: 10 over 4 = [0,2) [2,5) [5,7) [7,10).
  EXPECT_EQ(chunk_range(10, 4, 1).begin, 2);
  EXPECT_EQ(chunk_range(10, 4, 1).end, 5);
  EXPECT_EQ(chunk_range(10, 4, 3).size(), 3);
}

TEST(Communicator, ChunkRangeDoesNotOverflowForHugeCounts) {
  const std::int64_t n = std::int64_t{1} << 61;
  EXPECT_EQ(chunk_range(n, 8, 7).end, n);
  EXPECT_EQ(chunk_range(n + 5, 8, 4).begin, (n / 8) * 4 + 2);
}

TEST(Communicator, ChunkRangeRejectsBadArguments) {
  EXPECT_THROW(chunk_range(10, 0, 0), Error);
  EXPECT_THROW(chunk_range(10, 4, 4), Error);
  EXPECT_THROW(chunk_range(10, 4, -1), Error);
  EXPECT_THROW(chunk_range(-1, 4, 0), Error);
}

TEST(Communicator, OpNames) {
  EXPECT_STREQ(comm_op_name(CommOp::all_reduce), "all_reduce");
  EXPECT_STREQ(comm_op_name(CommOp::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(comm_op_name(CommOp::all_to_all), "all_to_all");
  EXPECT_STREQ(comm_op_name(CommOp::barrier), "barrier");
}

TEST(Communicator, StatsAddUp) {
  CommStats stats;
  stats[CommOp::all_reduce] = CommOpStats{2, 100, 90, 0.5, 0.25};
  stats[CommOp::send] = CommOpStats{1, 10, 0, 0.125, 0.0};
  const CommOpStats total = stats.total();
  EXPECT_EQ(total.calls, 3);
  EXPECT_EQ(total.bytes_sent, 110);
  EXPECT_EQ(total.bytes_received, 90);
  EXPECT_DOUBLE_EQ(total.seconds, 0.625);
  EXPECT_DOUBLE_EQ(total.wait_seconds, 0.25);
  CommOpStats sum = total;
  sum += total;
  EXPECT_EQ(sum.calls, 6);
}

}  // namespace
}  // namespace myriad::distributed
