// BucketSchedule — when each gradient bucket's reduction starts. Pure bookkeeping over a
// ZeroLayout's buckets; no communication (ParameterUnits launches what it says).
//
// A bucket is launched the moment the last of its units reports final gradients in a backward
// that reduces. Not pipelined: the caller says before each micro-batch whether its backward
// reduces (begin_micro_batch), and every bucket's count of units starts again there. Pipelined:
// a unit's gradients are final only in its chunk's last backward of the step, which the caller
// announces (begin_pipelined_backward); the counts start at begin_step, buckets holding a
// deferred unit (the tied embedding, summed across the end stages after the schedule) are never
// launched from a unit, and not_launched() lists what remains for after the schedule.
// Invariant: a bucket is launched at most once per step when pipelined (launched() marks it).
#pragma once

#include <vector>

#include "myriad/parallel/zero_layout.h"

namespace myriad::parallel {

class BucketSchedule {
 public:
  BucketSchedule(const ZeroLayout& layout, bool pipelined, const std::vector<int>& deferred_units);

  bool pipelined() const { return pipelined_; }
  // Pipelined: the step starts (counts reset, nothing launched, reductions held back until the
  // first begin_pipelined_backward(true)). Not pipelined: nothing.
  void begin_step();
  // Not pipelined: before a micro-batch's backward; `reduce` = whether it reduces its buckets.
  void begin_micro_batch(bool reduce);
  // Pipelined: before a chunk's backward; `reduce` = whether it is the chunk's last and reduces.
  void begin_pipelined_backward(bool reduce);
  // Whether the backward now announced reduces buckets (what unit_final reports on).
  bool reducing() const { return reduce_; }
  // A unit's gradients are final: the bucket whose reduction starts now, or -1 for none.
  int unit_final(int unit);
  void launched(int bucket) { launched_[static_cast<std::size_t>(bucket)] = 1; }
  // Pipelined, after the schedule: the buckets not launched yet this step, in bucket order.
  std::vector<int> not_launched() const;
  // Pipelined: buckets launched from a unit during this step's schedule (the overlap).
  int overlapped() const { return overlapped_; }

 private:
  void reset_units_left();  // every bucket waits for all its units again

  const ZeroLayout& layout_;
  bool pipelined_;
  bool reduce_;
  std::vector<int> units_left_;  // per bucket, units whose gradients are not final yet
  std::vector<char> launched_;   // per bucket, reduction started this step
  std::vector<char> deferred_;   // pipelined: per bucket, holds a deferred unit
  int overlapped_ = 0;
};

}  // namespace myriad::parallel
