// BucketSchedule: per-bucket counts of units not final yet, launches and deferrals (see
// bucket_schedule.h).
#include "myriad/parallel/bucket_schedule.h"

#include <algorithm>

namespace myriad::parallel {

BucketSchedule::BucketSchedule(const ZeroLayout& layout, bool pipelined, const std::vector<int>& deferred_units)
    : layout_(layout),
      pipelined_(pipelined),
      reduce_(!pipelined),
      units_left_(layout.buckets().size(), 0),
      launched_(layout.buckets().size(), 0),
      deferred_(layout.buckets().size(), 0) {
  for (int unit : deferred_units) deferred_[static_cast<std::size_t>(layout_.bucket_of_unit(unit))] = 1;
}

void BucketSchedule::reset_units_left() {
  for (std::size_t b = 0; b < units_left_.size(); ++b) {
    const ZeroBucket& bucket = layout_.buckets()[b];
    units_left_[b] = bucket.last_unit - bucket.first_unit + 1;
  }
}

void BucketSchedule::begin_step() {
  if (!pipelined_) return;  // the step's count of final gradients starts here, not per micro-batch
  reset_units_left();
  std::fill(launched_.begin(), launched_.end(), 0);
  overlapped_ = 0;
  reduce_ = false;
}

void BucketSchedule::begin_micro_batch(bool reduce) {
  if (pipelined_) return;  // per chunk: begin_pipelined_backward
  reduce_ = reduce;
  reset_units_left();
}

void BucketSchedule::begin_pipelined_backward(bool reduce) {
  if (pipelined_) reduce_ = reduce;
}

int BucketSchedule::unit_final(int unit) {
  if (!reduce_) return -1;  // not the step's last micro-batch (or chunk backward): keep accumulating locally
  const int bucket = layout_.bucket_of_unit(unit);
  const auto b = static_cast<std::size_t>(bucket);
  if (--units_left_[b] != 0 || (pipelined_ && deferred_[b])) return -1;
  if (pipelined_) ++overlapped_;
  return bucket;
}

std::vector<int> BucketSchedule::not_launched() const {
  std::vector<int> buckets;
  for (std::size_t b = 0; b < launched_.size(); ++b) {
    if (!launched_[b]) buckets.push_back(static_cast<int>(b));
  }
  return buckets;
}

}  // namespace myriad::parallel
