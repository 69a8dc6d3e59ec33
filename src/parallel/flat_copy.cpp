// Flat buffer copies for data parallelism's snapshots and loads (see flat_copy.h).
#include "flat_copy.h"

#include <algorithm>
#include <cstring>

#include "myriad/ops/elementwise.h"
#include "myriad/ops/placement.h"

namespace myriad::parallel {

namespace {
// memcpy of n floats split over the OpenMP threads.
void parallel_copy(float* destination, const float* source, std::int64_t n) {
  constexpr std::int64_t kChunk = 1 << 18;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    std::memcpy(destination + begin, source + begin, static_cast<std::size_t>(count) * sizeof(float));
  }
}
}  // namespace

Tensor flat_view(const Tensor& buffer, std::int64_t begin, std::int64_t end) {
  return Tensor::from_storage(buffer.storage(), {end - begin}, {1}, buffer.offset() + begin, DType::f32);
}

void copy_to_host(const Tensor& source, float* host) {
  if (source.device().is_cpu()) return parallel_copy(host, source.data<float>(), source.numel());
  const Tensor copy = ops::placement_of(source, "source").to_host(source);
  parallel_copy(host, copy.data<float>(), copy.numel());
}

void copy_from_host(const Tensor& host, Tensor& target) {
  if (target.device().is_cpu()) return parallel_copy(target.data<float>(), host.data<float>(), target.numel());
  copy(ops::placement_of(target, "target").from_host(host), target);
}

void copy_floats(const Tensor& src, Tensor& dst) {
  if (dst.device().is_cpu()) return parallel_copy(dst.data<float>(), src.data<float>(), dst.numel());
  copy(src, dst);
}

}  // namespace myriad::parallel
