// make_parameter_units: the one place that turns parallel.zero_stage into a strategy (see
// parameter_units.h).
#include "myriad/parallel/parameter_units.h"
#include "myriad/parallel/replicated_parameters.h"
#include "myriad/parallel/sharded_gradients.h"
#include "myriad/parallel/sharded_optimizer_state.h"
#include "myriad/parallel/sharded_parameters.h"

namespace myriad::parallel {

std::unique_ptr<ParameterUnits> make_parameter_units(nn::GptModel& model, distributed::Communicator& dp,
                                                     const DataParallelOptions& options,
                                                     const optim::AdamWConfig& adam) {
  switch (options.zero_stage) {
    case 0:
      return std::make_unique<ReplicatedParameters>(model, dp, options, adam);
    case 1:
      return std::make_unique<ShardedOptimizerState>(model, dp, options, adam);
    case 2:
      return std::make_unique<ShardedGradients>(model, dp, options, adam);
    case 3:
      return std::make_unique<ShardedParameters>(model, dp, options, adam);
  }
  MYRIAD_THROW("parallel.zero_stage " << options.zero_stage << " is not one of 0, 1, 2, 3");
}

}  // namespace myriad::parallel
