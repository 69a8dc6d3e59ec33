// CPU elementwise plumbing: scaled sums (OpenMP over elements), copies through Tensor::copy_from
// (any strides, dtype conversion with round to nearest even), zeroing with memset (split over the
// OpenMP threads for large buffers: one thread's stores do not reach the memory bandwidth).
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "myriad/ops/elementwise.h"

namespace myriad::cpu {

void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
  const float* pa = a.data<float>();
  const float* pb = b.defined() ? b.data<float>() : nullptr;
  float* po = out.data<float>();
  const float alpha = args.alpha, beta = args.beta;
  const std::int64_t n = out.numel();
  if (pb == nullptr) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) po[i] = alpha * pa[i];
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) po[i] = alpha * pa[i] + beta * pb[i];
}

void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b) {
  const float* g = grad_out.data<float>();
  const std::int64_t n = grad_out.numel();
  // The gradient that is grad_out itself (in place) last, so that the other still reads grad_out.
  const bool b_in_place = grad_b.defined() && grad_b.raw_data() == grad_out.raw_data();
  const std::pair<Tensor*, float> a_part{&grad_a, args.alpha}, b_part{&grad_b, args.beta};
  for (auto [grad, factor] : b_in_place ? std::array{a_part, b_part} : std::array{b_part, a_part}) {
    if (!grad->defined()) continue;
    float* d = grad->data<float>();
    if (args.accumulate_grads) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
      for (std::int64_t i = 0; i < n; ++i) d[i] += factor * g[i];
    } else {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
      for (std::int64_t i = 0; i < n; ++i) d[i] = factor * g[i];
    }
  }
}

void copy(const Tensor& src, Tensor& dst) { dst.copy_from(src); }

void fill(Tensor& t, float value) { t.fill(value); }

void zero(Tensor& t) {
  const std::size_t bytes = t.nbytes();
  if (bytes == 0) return;
  auto* base = static_cast<unsigned char*>(t.raw_data());
  constexpr std::size_t kChunk = std::size_t{1} << 20;  // 1 MiB per task: below this one memset is cheaper
  const auto chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    std::memset(base + begin, 0, std::min(kChunk, bytes - begin));
  }
}

}  // namespace myriad::cpu
