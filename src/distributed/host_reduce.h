// Element-wise reductions on host buffers for the ring collectives (internal header).
//
// reduce_into(dst, a, b, n): dst[i] = a[i] op b[i] for f32, i32 and i64, sum or max; dst may be
// the same buffer as a or b. Integer sums wrap around (two's complement) instead of overflowing
// into undefined behaviour. Other dtypes throw (the communicator checks them at issue time).
#pragma once

#include <cstdint>

#include "myriad/core/dtype.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

void reduce_into(void* dst, const void* a, const void* b, std::int64_t n, DType dtype, ReduceOp op);

}  // namespace myriad::distributed
