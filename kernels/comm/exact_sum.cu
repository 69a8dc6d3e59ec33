// Exact sums on the device (ops/exact_sum.h, kernels.h): the block fixed-point encoding around an
// int64 sum, operation for operation the host's (src/ops/exact_sum.cpp), so every exponent,
// fixed-point term and decoded float is the host's bits.
//
// exponents: one thread block of kExactSumBlock threads per encoding block (grid-stride over the
//   blocks): the largest magnitude's bits (x & 0x7fffffff, an unsigned max — exact in any order)
//   by a shared-memory tree, then its biased exponent b -> max(b, 1) - 126, or the zero /
//   non-finite markers.
// encode: one thread per element: q = rint(double(x) * 2^(62 - h - E)) (the product is exact in
//   double; __double2ll_rn rounds half to even, as rint does), 0 in a zero or non-finite block.
// decode: one thread per element: int64 -> f32 rounded to nearest (__ll2float_rn), times 2^k
//   (k = E + h - 62) in f32 when 2^k is a normal float (exact, or inf on overflow: the host's
//   product); otherwise through double and one rounding to f32 (__double2float_rn), which is the
//   host's correctly rounded ldexp. NaN blocks get the host's quiet NaN bits (0x7fc00000), zero
//   blocks +0.
// No fused multiply-adds (there is one product per value) and no atomics: deterministic.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/exact_sum.h"

namespace myriad::cuda {
namespace {

constexpr int kBlock = static_cast<int>(kExactSumBlock);
constexpr std::int32_t kZeroBlock = kExactSumZeroBlock;
constexpr std::int32_t kNonFiniteBlock = kExactSumNonFiniteBlock;
constexpr int kElementThreads = 256;

__device__ bool ordinary_block(std::int32_t exponent) { return exponent != kZeroBlock && exponent != kNonFiniteBlock; }

// 2^k as a double, k within the normal range (-1022..1023).
__device__ double power_of_two(std::int32_t k) { return __longlong_as_double(static_cast<long long>(k + 1023) << 52); }

__global__ void exact_sum_exponents_kernel(const float* x, std::int64_t n, std::int32_t* exponents) {
  __shared__ unsigned largest[kBlock];
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  for (std::int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const std::int64_t i = block * kBlock + threadIdx.x;
    largest[threadIdx.x] = i < n ? (__float_as_uint(x[i]) & 0x7fffffffu) : 0u;
    __syncthreads();
    for (int half = kBlock / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) {
        largest[threadIdx.x] = max(largest[threadIdx.x], largest[threadIdx.x + half]);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const unsigned bits = largest[0];
      const auto biased = static_cast<std::int32_t>((bits >> 23) & 0xffu);  // 255: NaN or infinity
      exponents[block] = biased == 0xff ? kNonFiniteBlock : bits == 0 ? kZeroBlock : max(biased, 1) - 126;
    }
    __syncthreads();  // slot 0 is read before the next block overwrites it
  }
}

__global__ void to_exact_fixed_kernel(const float* x, std::int64_t n, const std::int32_t* exponents, int headroom,
                                      std::int64_t* q) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t exponent = exponents[i / kBlock];
    if (!ordinary_block(exponent)) {
      q[i] = 0;
      continue;
    }
    const double scaled = __dmul_rn(static_cast<double>(x[i]), power_of_two(62 - headroom - exponent));
    q[i] = __double2ll_rn(scaled);
  }
}

__global__ void from_exact_fixed_kernel(const std::int64_t* q, std::int64_t first, std::int64_t n,
                                        const std::int32_t* exponents, int headroom, float* out) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t exponent = exponents[(first + i) / kBlock];
    if (exponent == kNonFiniteBlock) {
      out[i] = __uint_as_float(0x7fc00000u);  // std::numeric_limits<float>::quiet_NaN()
      continue;
    }
    if (exponent == kZeroBlock) {
      out[i] = 0.0f;
      continue;
    }
    const std::int32_t k = exponent + headroom - 62;
    const float value = __ll2float_rn(static_cast<long long>(q[i]));
    if (k >= -126 && k <= 127) {
      out[i] = __fmul_rn(value, __uint_as_float(static_cast<unsigned>(k + 127) << 23));
    } else {
      out[i] = __double2float_rn(__dmul_rn(static_cast<double>(value), power_of_two(k)));
    }
  }
}

void check_exponents(const char* op, const std::int32_t* exponents) {
  detail::check_pointer(op, "exponents", exponents, alignof(std::int32_t));
}

void check_headroom(const char* op, int headroom) {
  MYRIAD_CHECK(headroom >= 0 && headroom <= 31, op << ": headroom " << headroom << " outside [0, 31]");
}

}  // namespace

void exact_sum_exponents_f32(const float* x, std::int64_t n, std::int32_t* exponents, cudaStream_t stream) {
  const char* op = "exact_sum_exponents_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  check_exponents(op, exponents);
  const std::int64_t blocks = exact_sum_blocks(n);
  detail::check_disjoint(op, "exponents", exponents, static_cast<std::size_t>(blocks) * sizeof(std::int32_t), "x", x,
                         static_cast<std::size_t>(n) * sizeof(float));
  exact_sum_exponents_kernel<<<detail::grid_stride_blocks(op, n, kBlock), kBlock, 0, stream>>>(x, n, exponents);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void to_exact_fixed_f32(const float* x, std::int64_t n, const std::int32_t* exponents, int headroom, std::int64_t* q,
                        cudaStream_t stream) {
  const char* op = "to_exact_fixed_f32";
  detail::check_count(op, "n", n);
  check_headroom(op, headroom);
  if (n == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  check_exponents(op, exponents);
  detail::check_pointer(op, "q", q, alignof(std::int64_t));
  detail::check_disjoint(op, "q", q, static_cast<std::size_t>(n) * sizeof(std::int64_t), "x", x,
                         static_cast<std::size_t>(n) * sizeof(float));
  to_exact_fixed_kernel<<<detail::grid_stride_blocks(op, n, kElementThreads), kElementThreads, 0, stream>>>(
      x, n, exponents, headroom, q);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void from_exact_fixed_f32(const std::int64_t* q, std::int64_t first, std::int64_t n, const std::int32_t* exponents,
                          int headroom, float* out, cudaStream_t stream) {
  const char* op = "from_exact_fixed_f32";
  detail::check_count(op, "n", n);
  detail::check_count(op, "first", first);
  check_headroom(op, headroom);
  if (n == 0) return;
  detail::check_pointer(op, "q", q, alignof(std::int64_t));
  check_exponents(op, exponents);
  detail::check_pointer(op, "out", out, alignof(float));
  detail::check_disjoint(op, "out", out, static_cast<std::size_t>(n) * sizeof(float), "q", q,
                         static_cast<std::size_t>(n) * sizeof(std::int64_t));
  from_exact_fixed_kernel<<<detail::grid_stride_blocks(op, n, kElementThreads), kElementThreads, 0, stream>>>(
      q, first, n, exponents, headroom, out);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
