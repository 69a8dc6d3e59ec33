// make_parameter_units (no MPI, a group of one): each ZeRO stage gets its strategy, with what it
// holds in full (the store's flat buffers) and as a shard; other stages and ZeRO 2/3 under
// pipeline parallelism are refused with the reason.
#include <gtest/gtest.h>

#include "myriad/distributed/loopback_communicator.h"
#include "myriad/parallel/parameter_units.h"
#include "myriad/parallel/replicated_parameters.h"
#include "myriad/parallel/sharded_gradients.h"
#include "myriad/parallel/sharded_optimizer_state.h"
#include "myriad/parallel/sharded_parameters.h"
#include "test_helpers.h"
#include "tiny_transformer.h"

namespace myriad::parallel {
namespace {

using test_models::tiny_gpt2;

DataParallelOptions at_stage(int stage) {
  DataParallelOptions options;
  options.zero_stage = stage;
  return options;
}

TEST(MakeParameterUnits, EachStageGetsItsStrategy) {
  distributed::LoopbackCommunicator dp("dp");
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(stage);
    nn::GptModel model(tiny_gpt2());
    std::unique_ptr<ParameterUnits> units = make_parameter_units(model, dp, at_stage(stage), optim::AdamWConfig{});
    EXPECT_EQ(units->stage(), stage);
    EXPECT_EQ(units->reduces_every_micro_batch(), stage >= 2);
    EXPECT_EQ(dynamic_cast<ReplicatedParameters*>(units.get()) != nullptr, stage == 0);
    EXPECT_EQ(dynamic_cast<ShardedOptimizerState*>(units.get()) != nullptr, stage == 1);
    EXPECT_EQ(dynamic_cast<ShardedGradients*>(units.get()) != nullptr, stage >= 2);  // 3 extends 2
    EXPECT_EQ(dynamic_cast<ShardedParameters*>(units.get()) != nullptr, stage == 3);
    // Full buffers exist only where the stage keeps them; the optimizer covers every element.
    EXPECT_EQ(model.parameters().flat_values().defined(), stage <= 2);
    EXPECT_EQ(model.parameters().flat_grads().defined(), stage <= 1);
    std::int64_t parameter_elements = 0;  // a group of one owns every element (padding excluded)
    for (const nn::Parameter& p : model.parameters().all()) parameter_elements += shape_numel(p.shape);
    EXPECT_EQ(units->optimizer().state_elements(), parameter_elements);
    const ShardedMemory formula =
        zero_memory_formula(model.parameters().numel(), units->layout().shard_elements(), stage);
    EXPECT_EQ(units->memory().parameter_bytes, formula.parameter_bytes);
    EXPECT_EQ(units->memory().gradient_bytes, formula.gradient_bytes);
  }
}

TEST(MakeParameterUnits, RefusesOtherStagesAndShardedGradientsUnderPipelining) {
  distributed::LoopbackCommunicator dp("dp");
  nn::GptModel model(tiny_gpt2());
  myriad::testing::expect_error_naming([&] { make_parameter_units(model, dp, at_stage(4), optim::AdamWConfig{}); },
                                       {"parallel.zero_stage 4", "not one of 0, 1, 2, 3"});
  for (int stage : {2, 3}) {
    DataParallelOptions options = at_stage(stage);
    options.pipelined = true;
    myriad::testing::expect_error_naming([&] { make_parameter_units(model, dp, options, optim::AdamWConfig{}); },
                                         {"zero_stage " + std::to_string(stage), "pipeline parallelism"});
  }
  EXPECT_EQ(model.parameters().flat_grads().defined(), true) << "a refused stage leaves the store as it was";
}

}  // namespace
}  // namespace myriad::parallel
