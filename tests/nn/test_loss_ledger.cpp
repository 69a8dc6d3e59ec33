// nn::LossLedger: micro-batches of different lengths recorded back to back (the buffer grows past
// its first capacity), read once: the sum equals, bit for bit, adding each micro-batch's float64
// sum in record order (what the model's forward passes did when each read its own loss); sources
// may change after record(); take() and clear() empty it; a wrong tensor names itself.
#include <gtest/gtest.h>

#include <vector>

#include "myriad/core/error.h"
#include "myriad/nn/loss_ledger.h"
#include "reference.h"

namespace myriad::nn {
namespace {

TEST(LossLedger, SumsEachMicroBatchInFloat64InRecordOrder) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  LossLedger ledger{ops::Placement{}};
  EXPECT_TRUE(ledger.empty());
  EXPECT_EQ(ledger.take(), 0.0);
  double want = 0.0;
  Tensor reused = Tensor::empty({300});  // one buffer overwritten after each record, as the model's are
  for (const std::int64_t n : {7, 300, 1, 64, 129}) {
    Tensor losses = reused.slice(0, 0, n);
    const Tensor values = testing::random_tensor({n}, seed, static_cast<std::uint64_t>(n), 0.0f, 10.0f);
    losses.copy_from(values);
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += values.data<float>()[i];
    want += sum;
    ledger.record(losses);
    reused.fill(-1.0f);  // the record holds its own copy
  }
  EXPECT_FALSE(ledger.empty());
  EXPECT_EQ(ledger.take(), want);  // bit for bit
  EXPECT_TRUE(ledger.empty());
  EXPECT_EQ(ledger.take(), 0.0);
  ledger.record(Tensor::full({3}, 2.0f));
  ledger.clear();
  EXPECT_EQ(ledger.take(), 0.0);
}

TEST(LossLedger, ATensorThatIsNotOneDimensionalF32IsRefused) {
  LossLedger ledger{ops::Placement{}};
  EXPECT_THROW(ledger.record(Tensor::zeros({2, 3})), Error);
  EXPECT_THROW(ledger.record(Tensor::zeros({3}, DType::i32)), Error);
}

}  // namespace
}  // namespace myriad::nn
