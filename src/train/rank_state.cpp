// RankState: the compute copy of the weights (train/rank_state.h).
#include "myriad/train/rank_state.h"

#include "myriad/ops/elementwise.h"

namespace myriad::train {

void RankState::refresh_compute_weights() {
  if (!compute_values.defined()) return;
  copy(model->parameters().flat_values(), compute_values);
  round_to_format(compute_values, compute_format);
  copy(compute_values, compute_operands);  // exact: the values are 16-bit numbers already
}

}  // namespace myriad::train
