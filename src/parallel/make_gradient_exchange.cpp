// make_gradient_exchange: the one place that turns DataParallelOptions::exchange into a
// GradientExchange, and refuses the combinations that do not exist (see gradient_exchange.h).
#include "myriad/parallel/compressed_gradients.h"
#include "myriad/parallel/exact_reduction.h"
#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/local_sgd_exchange.h"
#include "myriad/parallel/onebit_adam_exchange.h"

namespace myriad::parallel {

namespace {
// The non-exact exchanges work on the full, replicated gradient (or momentum, or parameter) buffer
// of one dp group, wherever the parameters live (host, or a device through the ops). ZeRO >= 1
// shards that state over the group. With ep > 1 the expert gradients belong to another group:
// compression handles that (dense over dp, experts exactly over the expert-data group), 1-bit Adam
// and local SGD do not.
ParameterUnits& replicated(ParameterUnits& units, const char* exchange, bool experts_too) {
  const distributed::Communicator* ep = units.options().expert_parallel;
  const int ep_size = ep == nullptr ? 1 : ep->size();
  MYRIAD_CHECK(units.stage() == 0 && (experts_too || ep_size == 1),
               "the " << exchange << " gradient exchange needs zero_stage 0" << (experts_too ? "" : " and ep 1")
                      << " (it exchanges the whole, replicated buffer of one dp group: ZeRO shards that state"
                      << (experts_too ? "" : ", and expert gradients sum over another group")
                      << "); this run has zero_stage " << units.stage() << ", ep " << ep_size);
  return units;
}
}  // namespace

std::unique_ptr<GradientExchange> make_gradient_exchange(const GradientExchangeOptions& options,
                                                         ParameterUnits& units) {
  switch (options.kind) {
    case ExchangeKind::exact:
      return std::make_unique<ExactReduction>(units);
    case ExchangeKind::compressed:
      return std::make_unique<CompressedGradients>(
          replicated(units, distributed::compression_name(options.compression.kind), true), options.compression);
    case ExchangeKind::onebit_adam:
      return std::make_unique<OneBitAdamExchange>(replicated(units, "onebit_adam", false), options.freeze_step);
    case ExchangeKind::local:
      return std::make_unique<LocalSgdExchange>(replicated(units, "local SGD", false), options.local);
  }
  MYRIAD_THROW("gradient exchange kind " << static_cast<int>(options.kind) << " is not known");
}

}  // namespace myriad::parallel
