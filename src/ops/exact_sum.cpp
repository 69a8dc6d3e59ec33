// Exact sums: the block-exponent fixed-point encoding (see exact_sum.h), written so that the
// compiler vectorises it (it sits on the gradient reduction's path): no libm calls but rint, one
// scale per block.
//
// A float with biased exponent b (its bits 23..30) has the block exponent max(b, 1) - 126: the
// frexp exponent of a normal number (|x| < 2^(b - 126)), and -125 for every subnormal (an upper
// bound); and the bits of magnitudes order like the magnitudes, so a block's largest exponent is
// that of its largest magnitude's bits.
#include "myriad/ops/exact_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace myriad {

namespace {
std::int32_t biased_exponent(std::uint32_t bits) { return static_cast<std::int32_t>((bits >> 23) & 0xffu); }

bool ordinary_block(std::int32_t exponent) {
  return exponent != kExactSumZeroBlock && exponent != kExactSumNonFiniteBlock;
}

// 2^k as a double (k within the normal range, -1022..1023).
double power_of_two(std::int32_t k) { return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52); }

// 2^k as a float when it is a normal number, else 0 (the caller falls back to std::ldexp).
float normal_power_of_two(std::int32_t k) {
  if (k < -126 || k > 127) return 0.0f;
  return std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23);
}
}  // namespace

std::int64_t exact_sum_blocks(std::int64_t elements) { return (elements + kExactSumBlock - 1) / kExactSumBlock; }

int exact_sum_headroom(int members) {
  int bits = 0;
  while ((std::int64_t{1} << bits) < members) ++bits;
  return bits;
}

void exact_sum_exponents(const float* x, std::int64_t n, std::int32_t* exponents) {
  std::uint32_t bits[kExactSumBlock];
  for (std::int64_t begin = 0; begin < n; begin += kExactSumBlock) {
    const std::int64_t count = std::min(n - begin, kExactSumBlock);
    std::memcpy(bits, x + begin, static_cast<std::size_t>(count) * sizeof(float));
    std::uint32_t largest = 0;  // the bits of the largest magnitude (0: all zeros)
    for (std::int64_t j = 0; j < count; ++j) largest = std::max(largest, bits[j] & 0x7fffffffu);
    const std::int32_t biased = biased_exponent(largest);  // 255 = NaN or infinity
    exponents[begin / kExactSumBlock] = biased == 0xff ? kExactSumNonFiniteBlock
                                        : largest == 0 ? kExactSumZeroBlock
                                                       : std::max(biased, 1) - 126;
  }
}

void to_exact_fixed(const float* x, std::int64_t n, const std::int32_t* exponents, int headroom, std::int64_t* q) {
  for (std::int64_t begin = 0; begin < n; begin += kExactSumBlock) {  // one exponent per inner loop
    const std::int64_t end = std::min(n, begin + kExactSumBlock);
    const std::int32_t exponent = exponents[begin / kExactSumBlock];
    if (!ordinary_block(exponent)) {
      std::fill(q + begin, q + end, std::int64_t{0});
      continue;
    }
    // 2^(62 - h - E), E in [-125, 128]: a normal double, and x * scale is exact in double
    // (24 significant bits, |x * scale| < 2^(62 - h)); rint rounds it half to even.
    const double scale = power_of_two(62 - headroom - exponent);
    for (std::int64_t i = begin; i < end; ++i) q[i] = static_cast<std::int64_t>(std::rint(x[i] * scale));
  }
}

void from_exact_fixed(const std::int64_t* q, std::int64_t first, std::int64_t n, const std::int32_t* exponents,
                      int headroom, float* out) {
  for (std::int64_t i = 0; i < n;) {  // one block (or the part of it in range) per inner loop
    const std::int64_t block = (first + i) / kExactSumBlock;
    const std::int64_t end = std::min(n, (block + 1) * kExactSumBlock - first);
    const std::int32_t exponent = exponents[block];
    // One rounding to f32 (int64 -> float rounds to nearest), then a power-of-two scale: exact,
    // or one more correctly rounded step when the result is subnormal or overflows.
    const std::int32_t k = exponent + headroom - 62;
    const float scale = normal_power_of_two(k);
    if (exponent == kExactSumNonFiniteBlock) {
      std::fill(out + i, out + end, std::numeric_limits<float>::quiet_NaN());
    } else if (exponent == kExactSumZeroBlock) {
      std::fill(out + i, out + end, 0.0f);
    } else if (scale != 0.0f) {
      for (std::int64_t j = i; j < end; ++j) out[j] = static_cast<float>(q[j]) * scale;
    } else {
      for (std::int64_t j = i; j < end; ++j) out[j] = std::ldexp(static_cast<float>(q[j]), k);
    }
    i = end;
  }
}

}  // namespace myriad
