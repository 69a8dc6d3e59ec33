// The element count below which the CPU ops run an elementwise or row loop on one thread: below
// it, starting OpenMP threads costs more than they save. Internal to src/ops/cpu; one value for
// every op that moves about one float per element (cross_entropy, which does more per logit, has
// its own, lower threshold).
#pragma once

#include <cstdint>

namespace myriad::cpu {

inline constexpr std::int64_t kParallelMinElements = 1 << 15;

}  // namespace myriad::cpu
