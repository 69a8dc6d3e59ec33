// Exact sums — f32 sums whose bits do not depend on the order of the additions
// (parallel.dp_reduce_exact), so that every reduction algorithm (ring, tree, hierarchical) and
// every grouping of the ranks into nodes gives the same result.
//
// Encoding: the elements are cut into blocks of kExactSumBlock; block b gets the exponent E_b,
// the largest frexp exponent (|x| < 2^E; -125 for a subnormal) of its elements over all the group's ranks (a max
// all-reduce of one int32 per block). Each rank writes each element as the int64
//   q = rint(x * 2^(62 - h - E_b)),   h = exact_sum_headroom(P) = ceil(log2 P),
// so |q| < 2^(62 - h) and a sum of P of them cannot overflow; integer sums are exact in any
// order. The result is f32(sum q) * 2^-(62 - h - E_b): the terms rounded to a grid of
// 2^(E_b + h - 62), summed exactly, then rounded once to f32 (round to nearest). Its error is at
// most half an f32 ulp of the result plus P * 2^(E_b + h - 63); an f32 summation in any order
// may be off by (P - 1) * 2^(E_b - 24).
// Special values: a block holding a NaN or an infinity on any rank reduces to NaN in all its
// elements on every rank (a non-finite gradient stays non-finite, and the step is skipped as it
// would be); an all-zero block gives +0.
// Here: the host encoding (the reference; ComposedCommunicator's exact sums over MPI). The CUDA
// kernels of kernels/comm/exact_sum.cu (cuda/kernels.h) give the same bits for the same inputs;
// NcclCommunicator runs them around its int64 sums (NcclOptions::exact_sums).
#pragma once

#include <cstdint>

namespace myriad {

inline constexpr std::int64_t kExactSumBlock = 256;
inline constexpr std::int32_t kExactSumZeroBlock = -1024;      // exponent of a block of zeros
inline constexpr std::int32_t kExactSumNonFiniteBlock = 4096;  // a NaN or an infinity: wins the max

std::int64_t exact_sum_blocks(std::int64_t elements);  // ceil(elements / kExactSumBlock)
int exact_sum_headroom(int members);                   // ceil(log2 members), 0 for one member

// This rank's exponent of each block of x[0, n) (the group's is their maximum).
void exact_sum_exponents(const float* x, std::int64_t n, std::int32_t* exponents);
// q[i] for x[i], element i of the buffer whose block exponents are `exponents` (the group's).
void to_exact_fixed(const float* x, std::int64_t n, const std::int32_t* exponents, int headroom, std::int64_t* q);
// out[i] for the summed q[i] of element first + i of the buffer.
void from_exact_fixed(const std::int64_t* q, std::int64_t first, std::int64_t n, const std::int32_t* exponents,
                      int headroom, float* out);

}  // namespace myriad
