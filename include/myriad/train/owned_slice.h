// OwnedSlice — this rank's owned part of one parameter (its ZeRO shard; the whole parameter at
// ZeRO 0), as the research API hands it out: views of the values, the reduced gradients and the
// AdamW moments, flat, starting at element `start` of the parameter. Views: valid until the
// optimizer state is rebuilt (a load); writes go to the training state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad::train {

struct OwnedSlice {
  std::string name;
  std::vector<std::int64_t> shape;  // the whole parameter's
  std::int64_t start = 0;
  Tensor value, grad, m, v;
};

}  // namespace myriad::train
