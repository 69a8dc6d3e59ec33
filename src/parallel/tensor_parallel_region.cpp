// gather_last_dim / slice_last_dim: the two data movements behind the tp region ops.
#include "myriad/parallel/tensor_parallel_region.h"

#include <cstring>

#include "myriad/core/error.h"

namespace myriad::parallel {

namespace {
void check_pair(const char* op, const Tensor& local, const Tensor& full, int parts) {
  MYRIAD_CHECK(local.dim() == 2 && full.dim() == 2 && local.dtype() == DType::f32 && full.dtype() == DType::f32 &&
                   local.is_contiguous() && full.is_contiguous() && local.size(0) == full.size(0) &&
                   local.size(1) * parts == full.size(1),
               op << ": expected contiguous f32 local (N, F) and full (N, F * " << parts << "), got local "
                  << local.describe() << " and full " << full.describe());
}
}  // namespace

void gather_last_dim(distributed::Communicator& tp, const Tensor& local, Tensor& full) {
  const int parts = tp.size();
  check_pair("gather_last_dim", local, full, parts);
  const std::int64_t n = local.size(0), f = local.size(1);
  Tensor stacked = Tensor::empty({parts * n * f});  // (tp, N, F): what all_gather produces
  tp.all_gather(local.view({n * f}), stacked);
  const float* in = stacked.data<float>();
  float* out = full.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < parts; ++r) {
      std::memcpy(out + i * f * parts + r * f, in + (r * n + i) * f, static_cast<std::size_t>(f) * sizeof(float));
    }
  }
}

void slice_last_dim(const Tensor& full, int rank, Tensor& local) {
  MYRIAD_CHECK(local.size(1) > 0 && full.size(1) % local.size(1) == 0,
               "slice_last_dim: full " << full.describe() << " is not a whole number of local " << local.describe());
  const int parts = static_cast<int>(full.size(1) / local.size(1));
  check_pair("slice_last_dim", local, full, parts);
  MYRIAD_CHECK(rank >= 0 && rank < parts, "slice_last_dim: rank " << rank << " outside [0, " << parts << ")");
  const std::int64_t n = local.size(0), f = local.size(1);
  const float* in = full.data<float>();
  float* out = local.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * f, in + i * f * parts + rank * f, static_cast<std::size_t>(f) * sizeof(float));
  }
}

}  // namespace myriad::parallel
