// OneBitAdamExchange: exact steps through freeze_step, then the compressed-momentum step (see
// onebit_adam_exchange.h).
#include "myriad/parallel/onebit_adam_exchange.h"

#include "myriad/distributed/scalar_reduce.h"
#include "myriad/optim/onebit_adam.h"

namespace myriad::parallel {

namespace {
std::int64_t checked_freeze_step(std::int64_t freeze_step) {
  MYRIAD_CHECK(freeze_step >= 1, "1-bit Adam: freeze_step " << freeze_step << " must be >= 1");
  return freeze_step;
}
}  // namespace

OneBitAdamExchange::OneBitAdamExchange(ParameterUnits& units, std::int64_t freeze_step)
    : units_(units),
      freeze_step_(checked_freeze_step(freeze_step)),
      momentum_sum_(units.dp(), units.optimizer().m().numel(),
                    distributed::CompressionSpec{distributed::Compression::sign}, units.placement()) {}

optim::OptimizerStepStats OneBitAdamExchange::optimizer_step(float lr, float unscale) {
  if (reduces_exactly()) return units_.exact_step(lr, unscale);
  // Local gradients: P g_r estimates the global gradient; its squared norm averaged over ranks.
  optim::AdamWOptimizer& adam = units_.optimizer();
  const int replicas = units_.dp().size();
  const double sum_squares =
      units_.sum_over_model_parallel(distributed::sum_over_ranks(units_.dp(), adam.grad_sum_squares()) * replicas);
  const optim::OneBitAdamArgs args{lr, sum_squares, unscale, replicas, freeze_step_};
  return optim::onebit_adam_step(adam, args, [this](Tensor& momentum) { momentum_sum_.sum(momentum); });
}

}  // namespace myriad::parallel
