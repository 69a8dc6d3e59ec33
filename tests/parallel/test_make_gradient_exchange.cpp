// make_gradient_exchange (no MPI, a group of one): each exchange kind gets its implementation,
// 1-bit Adam reduces exactly through freeze_step, 1-bit Adam and local SGD are refused off ZeRO 0
// (compression runs at every stage) or with freeze_step 0, naming what is missing.
#include <gtest/gtest.h>

#include <string>

#include "myriad/distributed/loopback_communicator.h"
#include "myriad/parallel/compressed_gradients.h"
#include "myriad/parallel/exact_reduction.h"
#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/local_sgd_exchange.h"
#include "myriad/parallel/onebit_adam_exchange.h"
#include "test_helpers.h"
#include "tiny_transformer.h"

namespace myriad::parallel {
namespace {

using test_models::tiny_gpt2;

GradientExchangeOptions of_kind(ExchangeKind kind) {
  GradientExchangeOptions options;
  options.kind = kind;
  options.compression.kind = distributed::Compression::int8;
  options.freeze_step = 3;
  return options;
}

TEST(MakeGradientExchange, EachKindGetsItsExchange) {
  distributed::LoopbackCommunicator dp("dp");
  nn::GptModel model(tiny_gpt2());
  std::unique_ptr<ParameterUnits> units = make_parameter_units(model, dp, {}, optim::AdamWConfig{});
  struct Case {
    ExchangeKind kind;
    std::string name;
    bool exact, local;
  };
  for (const Case& c :
       {Case{ExchangeKind::exact, "exact", true, false}, Case{ExchangeKind::compressed, "int8", false, false},
        Case{ExchangeKind::onebit_adam, "onebit_adam", true, false},  // before freeze_step
        Case{ExchangeKind::local, "local", false, true}}) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<GradientExchange> exchange = make_gradient_exchange(of_kind(c.kind), *units);
    EXPECT_EQ(exchange->name(), c.name);
    EXPECT_EQ(exchange->reduces_exactly(), c.exact);
    EXPECT_EQ(exchange->local_sgd() != nullptr, c.local);
  }
  GradientExchangeOptions topk = of_kind(ExchangeKind::compressed);
  topk.compression = {distributed::Compression::topk, 0.05};
  EXPECT_NE(dynamic_cast<CompressedGradients*>(make_gradient_exchange(topk, *units).get()), nullptr);
  EXPECT_EQ(std::string(make_gradient_exchange(topk, *units)->name()), "topk");
}

TEST(MakeGradientExchange, OneBitAdamReducesExactlyThroughFreezeStep) {
  distributed::LoopbackCommunicator dp("dp");
  nn::GptModel model(tiny_gpt2());
  std::unique_ptr<ParameterUnits> units = make_parameter_units(model, dp, {}, optim::AdamWConfig{});
  std::unique_ptr<GradientExchange> exchange = make_gradient_exchange(of_kind(ExchangeKind::onebit_adam), *units);
  units->optimizer().set_steps_taken(2);
  EXPECT_TRUE(exchange->reduces_exactly());
  units->optimizer().set_steps_taken(3);
  EXPECT_FALSE(exchange->reduces_exactly());
}

TEST(MakeGradientExchange, NonExactExchangesNeedZeroStageZeroAndAFreezeStep) {
  distributed::LoopbackCommunicator dp("dp");
  for (int stage : {1, 2, 3}) {
    nn::GptModel model(tiny_gpt2());
    DataParallelOptions options;
    options.zero_stage = stage;
    std::unique_ptr<ParameterUnits> units = make_parameter_units(model, dp, options, optim::AdamWConfig{});
    EXPECT_NE(dynamic_cast<ExactReduction*>(make_gradient_exchange(of_kind(ExchangeKind::exact), *units).get()),
              nullptr);
    EXPECT_NE(
        dynamic_cast<CompressedGradients*>(make_gradient_exchange(of_kind(ExchangeKind::compressed), *units).get()),
        nullptr);  // compressed reduce-scatters
    for (ExchangeKind kind : {ExchangeKind::onebit_adam, ExchangeKind::local}) {
      myriad::testing::expect_error_naming([&] { make_gradient_exchange(of_kind(kind), *units); },
                                           {"needs zero_stage 0", "this run has zero_stage " + std::to_string(stage)});
    }
  }
  nn::GptModel model(tiny_gpt2());
  std::unique_ptr<ParameterUnits> units = make_parameter_units(model, dp, {}, optim::AdamWConfig{});
  GradientExchangeOptions options = of_kind(ExchangeKind::onebit_adam);
  options.freeze_step = 0;
  myriad::testing::expect_error_naming([&] { make_gradient_exchange(options, *units); },
                                       {"freeze_step 0 must be >= 1"});
}

}  // namespace
}  // namespace myriad::parallel
