// CPU elementwise plumbing: scaled sums (OpenMP over elements), copies through Tensor::copy_from
// (any strides, dtype conversion with round to nearest even), zeroing (split over the OpenMP
// threads for large buffers: one thread's stores do not reach the memory bandwidth; a buffer
// larger than half the last-level cache is written with non-temporal stores).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu_clones.h"
#include "myriad/ops/elementwise.h"

namespace myriad::cpu {

MYRIAD_CPU_CLONES void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
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

MYRIAD_CPU_CLONES void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b) {
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

namespace {

// Bytes past which zero() writes around the caches: half the last-level cache's size (sysconf),
// or 16 MiB where the C library does not know it. A buffer that fills half the cache would evict
// most of the working set that the next op reads, and is itself evicted before it is read again
// when the next op streams as much data (GPT-2 124M's 475 MiB of gradients against a 480 MiB L3:
// the forward reads the 475 MiB of weights before the backward touches a gradient).
std::size_t streaming_zero_threshold() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return (llc > 0 ? static_cast<std::size_t>(llc) : std::size_t{32} << 20) / 2;
}

// Zeroes [begin, begin + bytes). Where `streaming`, the 16-byte-aligned middle goes through
// non-temporal stores: a buffer that large cannot stay cached until it is read, and
// ordinary stores first read every line they write (GPT-2 124M's 475 MiB of gradients: 28 ms by
// memset, 12 ms streamed, two threads of the 2-vCPU Intel Xeon VM).
void zero_range(unsigned char* begin, std::size_t bytes, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    auto* aligned =
        reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(begin) + 15) & ~std::uintptr_t{15});
    const std::size_t head = std::min<std::size_t>(static_cast<std::size_t>(aligned - begin), bytes);
    std::memset(begin, 0, head);
    const std::size_t vectors = (bytes - head) / 16;
    const __m128i zeros = _mm_setzero_si128();
    for (std::size_t i = 0; i < vectors; ++i) _mm_stream_si128(reinterpret_cast<__m128i*>(aligned) + i, zeros);
    _mm_sfence();  // the streamed stores are visible before anything after this call
    std::memset(aligned + vectors * 16, 0, bytes - head - vectors * 16);
    return;
  }
#endif
  (void)streaming;
  std::memset(begin, 0, bytes);
}

}  // namespace

void zero(Tensor& t) {
  const std::size_t bytes = t.nbytes();
  if (bytes == 0) return;
  auto* base = static_cast<unsigned char*>(t.raw_data());
  constexpr std::size_t kChunk = std::size_t{1} << 20;  // 1 MiB per task: below this one memset is cheaper
  const auto chunks = static_cast<std::int64_t>((bytes + kChunk - 1) / kChunk);
  const bool streaming = chunks > 8 && bytes >= streaming_zero_threshold();
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c) * kChunk;
    zero_range(base + begin, std::min(kChunk, bytes - begin), streaming);
  }
}

}  // namespace myriad::cpu
