// BucketSchedule on a worked layout (no MPI): launches once a bucket's last unit is final in a
// backward that reduces, nothing in one that does not, and under pipelining deferred buckets wait
// for the end of the schedule, which lists what was not launched.
#include <gtest/gtest.h>

#include "myriad/parallel/bucket_schedule.h"
#include "example_units.h"

namespace myriad::parallel {
namespace {

// Units of 100, 40, 40, 40, 30 elements; buckets of >= 70 in backward order: {3, 4}, {1, 2}, {0}.
ZeroLayout example_layout() { return ZeroLayout(test_models::example_units(), 70, 1, 0); }

// The buckets launched by one backward pass (units final from the last to the first).
std::vector<int> backward(BucketSchedule& schedule) {
  std::vector<int> launched;
  for (int unit = 4; unit >= 0; --unit) {
    const int bucket = schedule.unit_final(unit);
    if (bucket >= 0) {
      schedule.launched(bucket);
      launched.push_back(bucket);
    }
  }
  return launched;
}

TEST(BucketSchedule, LaunchesEachBucketWhenItsLastUnitIsFinalInABackwardThatReduces) {
  const ZeroLayout layout = example_layout();
  ASSERT_EQ(layout.buckets().size(), 3u);
  BucketSchedule schedule(layout, false, {});
  schedule.begin_step();
  schedule.begin_micro_batch(false);  // not the step's last micro-batch: accumulate locally
  EXPECT_TRUE(backward(schedule).empty());
  schedule.begin_micro_batch(true);
  EXPECT_EQ(backward(schedule), (std::vector<int>{0, 1, 2}));
  schedule.begin_micro_batch(true);  // the counts start again with every micro-batch
  EXPECT_EQ(backward(schedule), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(schedule.overlapped(), 0);
}

TEST(BucketSchedule, PipelinedHoldsDeferredBucketsForTheEndOfTheSchedule) {
  const ZeroLayout layout = example_layout();
  BucketSchedule schedule(layout, true, {1});  // unit 1 (in bucket 1) is summed after the schedule
  schedule.begin_step();
  schedule.begin_micro_batch(true);  // per chunk only: no effect when pipelined
  EXPECT_TRUE(backward(schedule).empty()) << "reductions start only with the chunk's last backward";
  schedule.begin_step();
  schedule.begin_pipelined_backward(true);
  EXPECT_EQ(backward(schedule), (std::vector<int>{0, 2}));
  EXPECT_EQ(schedule.overlapped(), 2);
  EXPECT_EQ(schedule.not_launched(), (std::vector<int>{1}));
  schedule.begin_step();
  EXPECT_EQ(schedule.not_launched(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(schedule.overlapped(), 0);
}

}  // namespace
}  // namespace myriad::parallel
