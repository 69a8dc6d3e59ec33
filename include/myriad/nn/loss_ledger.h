// LossLedger — the per-token losses of the micro-batches a rank ran, kept where the model computes
// until the step reads their sum once, after the backward pass: on a GPU, learning the loss never
// makes the forward pass wait for the device.
//
// record() copies one micro-batch's per-token losses (ignored rows hold 0) behind the ones before
// it in one growing buffer; take() moves the recorded values to the host in one transfer and
// returns the sum over micro-batches, in record order, of each micro-batch's sum in float64 over
// its elements in order — the arithmetic of summing each micro-batch on the host at once, so a
// loss is bit for bit what it was when each forward pass read its own. take() and clear() empty
// the ledger. Copies are stream-ordered: the source may be overwritten after record() returns.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

class LossLedger {
 public:
  explicit LossLedger(ops::Placement placement) : placement_(placement) {}

  // Appends `losses` (one micro-batch's, 1-D f32, where the placement keeps its tensors).
  void record(const Tensor& losses);
  // The sum of everything recorded (see above); 0 when nothing was. Empties the ledger.
  double take();
  void clear();
  bool empty() const { return lengths_.empty(); }

 private:
  ops::Placement placement_;
  Tensor buffer_;                      // recorded values, back to back (capacity: its numel)
  std::int64_t used_ = 0;              // elements of buffer_ holding values
  std::vector<std::int64_t> lengths_;  // per record, in order
};

}  // namespace myriad::nn
