// The parameter units the parallel layer's layout tests share: five units of 100, 40, 40, 40 and
// 30 elements, back to back at [0, 100), [100, 140), ..., [220, 250), named u0..u4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/nn/unit_hooks.h"

namespace myriad::parallel::test_models {

inline std::vector<nn::ParamUnit> example_units() {
  std::vector<nn::ParamUnit> units;
  std::int64_t at = 0;
  int i = 0;
  for (std::int64_t size : {100, 40, 40, 40, 30}) {
    units.push_back({"u" + std::to_string(i++), at, at + size});
    at += size;
  }
  return units;
}

}  // namespace myriad::parallel::test_models
