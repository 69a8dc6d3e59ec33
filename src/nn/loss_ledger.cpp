// LossLedger: one growing buffer where the model computes (loss_ledger.h).
#include "myriad/nn/loss_ledger.h"

#include <algorithm>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"

namespace myriad::nn {

void LossLedger::record(const Tensor& losses) {
  MYRIAD_CHECK(losses.dim() == 1 && losses.dtype() == DType::f32,
               "LossLedger: the losses must be 1-D f32, got " << losses.describe());
  const std::int64_t n = losses.numel();
  const std::int64_t capacity = buffer_.defined() ? buffer_.numel() : 0;
  if (used_ + n > capacity) {  // grows (a device copy of what is there; nothing waits)
    Tensor grown = placement_.empty({std::max<std::int64_t>(2 * capacity, used_ + n)});
    if (used_ > 0) {
      Tensor kept = grown.slice(0, 0, used_);
      copy(buffer_.slice(0, 0, used_), kept);
    }
    buffer_ = grown;
  }
  Tensor slot = buffer_.slice(0, used_, used_ + n);
  copy(losses, slot);
  used_ += n;
  lengths_.push_back(n);
}

double LossLedger::take() {
  double total = 0.0;
  if (used_ > 0) {
    const Tensor host = placement_.to_host(buffer_.slice(0, 0, used_));
    const float* values = host.data<float>();
    for (const std::int64_t n : lengths_) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < n; ++i) sum += values[i];
      total += sum;
      values += n;
    }
  }
  clear();
  return total;
}

void LossLedger::clear() {
  used_ = 0;
  lengths_.clear();
}

}  // namespace myriad::nn
