// Philox-4x32-10: ten rounds of multiply-xorshift on a 128-bit counter with a 64-bit key.
// Constants are those of the Random123 paper (multipliers 0xD2511F53 / 0xCD9E8D57, Weyl
// increments 0x9E3779B9 / 0xBB67AE85).
#include "myriad/core/philox.h"

#include <cmath>

#include "myriad/core/tensor.h"

namespace myriad {

std::array<std::uint32_t, 4> philox4x32(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint32_t c0 = static_cast<std::uint32_t>(index), c1 = static_cast<std::uint32_t>(index >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(stream), c3 = static_cast<std::uint32_t>(stream >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    std::uint32_t n1 = static_cast<std::uint32_t>(p1);
    std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    std::uint32_t n3 = static_cast<std::uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

float philox_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return static_cast<float>(philox4x32(seed, stream, index)[0] >> 8) * (1.0f / 16777216.0f);
}

float philox_normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  auto words = philox4x32(seed, stream, index);
  // u1 in (0, 1] so that log(u1) is finite.
  double u1 = (static_cast<double>(words[0]) + 1.0) / 4294967296.0;
  double u2 = static_cast<double>(words[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

template <typename Generate>
static void fill_with(Tensor& tensor, Generate generate, const char* what) {
  MYRIAD_CHECK(tensor.device().is_cpu() && is_floating(tensor.dtype()),
               what << " needs a floating CPU tensor, got " << tensor.describe());
  Tensor dense = Tensor::empty(tensor.shape(), DType::f32);
  float* out = dense.data<float>();
  std::int64_t n = dense.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (std::int64_t i = 0; i < n; ++i) out[i] = generate(static_cast<std::uint64_t>(i));
  tensor.copy_from(dense);
}

void fill_uniform(Tensor& tensor, float low, float high, std::uint64_t seed, std::uint64_t stream,
                  std::uint64_t first_index) {
  fill_with(
      tensor, [&](std::uint64_t i) { return low + (high - low) * philox_uniform(seed, stream, first_index + i); },
      "fill_uniform");
}

void fill_normal(Tensor& tensor, float mean, float std, std::uint64_t seed, std::uint64_t stream,
                 std::uint64_t first_index) {
  fill_with(
      tensor, [&](std::uint64_t i) { return mean + std * philox_normal(seed, stream, first_index + i); },
      "fill_normal");
}

}  // namespace myriad
