// INT8 embedding lookup on the GPU: out (n, c) [i, :] = q[ids[i], :] * the row's group scales, f32.
// One thread per output element in a grid-stride loop (consecutive threads read consecutive
// bytes of a row); the ids were checked on the host before they were placed, as for the f32
// embedding. Dequantisation is exact (q * scale), so the result equals the CPU op's bit for bit.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;

__global__ void int8_embedding_rows_kernel(const std::int32_t* __restrict__ ids, const std::int8_t* __restrict__ q,
                                           const float* __restrict__ scales, float* __restrict__ out, std::int64_t n,
                                           std::int64_t c, std::int64_t group_size, std::int64_t groups) {
  const std::int64_t total = n * c;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = e / c, col = e % c;
    const std::int64_t row = ids[i];
    out[e] = static_cast<float>(q[row * c + col]) * scales[row * groups + (group_size == 0 ? 0 : col / group_size)];
  }
}

}  // namespace

void int8_embedding_forward_f32(const std::int32_t* ids, const std::int8_t* q, const float* scales, float* out,
                                std::int64_t n, std::int64_t c, std::int64_t group_size, cudaStream_t stream) {
  const char* op = "int8_embedding_forward_f32";
  detail::check_count(op, "n", n);
  detail::check_count(op, "c", c);
  detail::check_count(op, "group_size", group_size);
  if (n == 0 || c == 0) return;
  detail::check_pointer(op, "ids", ids, alignof(std::int32_t));
  detail::check_pointer(op, "q", q, 1);
  detail::check_pointer(op, "scales", scales, alignof(float));
  detail::check_pointer(op, "out", out, alignof(float));
  const std::int64_t groups = group_size == 0 ? 1 : detail::ceil_div(c, group_size);
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(detail::ceil_div(n * c, kThreads), kMaxBlocks));
  int8_embedding_rows_kernel<<<blocks, kThreads, 0, stream>>>(ids, q, scales, out, n, c, group_size, groups);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
