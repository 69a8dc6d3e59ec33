// Host reduction loops (see host_reduce.h). Plain loops that the compiler vectorises.
#include "host_reduce.h"

#include <algorithm>
#include <type_traits>

#include "myriad/core/error.h"

namespace myriad::distributed {

namespace {

template <typename T>
void reduce_typed(T* dst, const T* a, const T* b, std::int64_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = std::max(a[i], b[i]);
    return;
  }
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<U>(a[i]) + static_cast<U>(b[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
  }
}

}  // namespace

void reduce_into(void* dst, const void* a, const void* b, std::int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n, op);
    case DType::i32:
      return reduce_typed(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(a),
                          static_cast<const std::int32_t*>(b), n, op);
    case DType::i64:
      return reduce_typed(static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(a),
                          static_cast<const std::int64_t*>(b), n, op);
    default:
      MYRIAD_THROW("reduce_into: cannot reduce dtype " << dtype_name(dtype) << "; allowed: f32, i32, i64");
  }
}

}  // namespace myriad::distributed
