// DataParallel's one rule (no MPI, a group of one, counting the collectives it issues): a backward
// reduces its buckets when the stage reduces every micro-batch or it is the step's last, and only
// while the gradient exchange sums exactly. The distributed behaviour (parallel equals serial at
// every stage) is tests/mpi/test_data_parallel.cpp's.
#include <gtest/gtest.h>

#include "myriad/distributed/loopback_communicator.h"
#include "myriad/parallel/data_parallel.h"
#include "reference.h"
#include "tiny_transformer.h"

namespace myriad::parallel {
namespace {

using test_models::tiny_gpt2;

// Reductions (all-reduces and reduce-scatters) issued by one micro-batch's forward and backward.
std::int64_t reductions_of_micro_batch(DataParallel& dp, nn::GptModel& model, distributed::Communicator& comm,
                                       bool last_of_step) {
  const Tensor ids = myriad::testing::random_ids({2, 5}, 13, 7, 1),
               targets = myriad::testing::random_ids({2, 5}, 13, 7, 2);
  comm.reset_stats();
  dp.begin_micro_batch(last_of_step);
  model.forward_backward(ids, targets, 0.1f, Recompute::none);
  dp.finish_backward();
  const distributed::CommStats stats = comm.stats();
  return stats[distributed::CommOp::all_reduce].calls + stats[distributed::CommOp::reduce_scatter].calls;
}

TEST(DataParallelRule, StagesZeroAndOneReduceInTheLastMicroBatchTwoAndThreeInEvery) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    distributed::LoopbackCommunicator comm("dp");
    nn::GptModel model(tiny_gpt2());
    model.initialize(5);
    DataParallelOptions options;
    options.zero_stage = stage;
    DataParallel dp(model, comm, options, optim::AdamWConfig{});
    dp.zero_grads();
    const auto buckets = static_cast<std::int64_t>(dp.layout().buckets().size());
    EXPECT_EQ(reductions_of_micro_batch(dp, model, comm, false), stage >= 2 ? buckets : 0);
    EXPECT_EQ(reductions_of_micro_batch(dp, model, comm, true), buckets);
  }
}

TEST(DataParallelRule, NoBucketReducesWhileTheExchangeIsNotExact) {
  distributed::LoopbackCommunicator comm("dp");
  nn::GptModel model(tiny_gpt2());
  model.initialize(5);
  DataParallelOptions options;
  options.exchange.kind = ExchangeKind::onebit_adam;
  options.exchange.freeze_step = 1;
  DataParallel dp(model, comm, options, optim::AdamWConfig{});
  dp.zero_grads();
  EXPECT_EQ(reductions_of_micro_batch(dp, model, comm, true), 1) << "exact through freeze_step";
  dp.optimizer().set_steps_taken(1);
  EXPECT_FALSE(dp.exchanges_exactly());
  EXPECT_EQ(reductions_of_micro_batch(dp, model, comm, true), 0);
}

}  // namespace
}  // namespace myriad::parallel
