// make_gradient_exchange: the one place that turns DataParallelOptions::exchange into a
// GradientExchange, and refuses the combinations that do not exist (see gradient_exchange.h).
#include "myriad/parallel/compressed_gradients.h"
#include "myriad/parallel/exact_reduction.h"
#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/local_sgd_exchange.h"
#include "myriad/parallel/onebit_adam_exchange.h"

namespace myriad::parallel {

namespace {
// 1-bit Adam and local SGD work on the full, replicated momentum or parameter buffer of one dp
// group, wherever the parameters live (host, or a device through the ops); ZeRO >= 1 shards that
// state over the group (gradient compression has a sharded form: compressed_gradients.h). With ep > 1 the expert
// elements belong to another group, the expert-data group: every exchange handles that (replica_copies.h).
ParameterUnits& replicated(ParameterUnits& units, const char* exchange) {
  MYRIAD_CHECK(units.stage() == 0, "the " << exchange
                                          << " gradient exchange needs zero_stage 0 (it exchanges the whole, "
                                             "replicated buffer of one dp group: ZeRO shards that state); this run "
                                             "has zero_stage "
                                          << units.stage());
  return units;
}
}  // namespace

std::unique_ptr<GradientExchange> make_gradient_exchange(const GradientExchangeOptions& options,
                                                         ParameterUnits& units) {
  switch (options.kind) {
    case ExchangeKind::exact:
      return std::make_unique<ExactReduction>(units);
    case ExchangeKind::compressed:
      return std::make_unique<CompressedGradients>(units, options.compression);  // any ZeRO stage
    case ExchangeKind::onebit_adam:
      return std::make_unique<OneBitAdamExchange>(replicated(units, "onebit_adam"), options.freeze_step);
    case ExchangeKind::local:
      return std::make_unique<LocalSgdExchange>(replicated(units, "local SGD"), options.local);
  }
  MYRIAD_THROW("gradient exchange kind " << static_cast<int>(options.kind) << " is not known");
}

}  // namespace myriad::parallel
