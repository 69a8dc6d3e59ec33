// LayerNorm and RMSNorm over the last dim of a row-major (N, C) matrix, forward and backward: x
// f32, or bf16 / f16 (mixed precision's residual stream, widened exactly where it is read); the
// forward's output f32, or bf16 / f16 rounded once from the f32 value; math and statistics f32.
// RMSNorm is the uncentred case of the same kernels (template flag kCentered = false): mean = 0,
// no bias, and the mean_c(g) term of grad_x drops out:
//   rms forward:  rstd = 1 / sqrt(sum_c x^2 / C + eps);  out = x * rstd * weight
//   rms backward: xhat = x * rstd, g = grad_out * weight, grad_x = rstd * (g - xhat * mean_c(g * xhat)),
//                 grad_weight += sum_n grad_out * xhat
//
//   forward:  mean = sum_c x / C;  var = sum_c (x - mean)^2 / C (second pass, biased);
//             rstd = 1 / sqrt(var + eps);  out = (x - mean) * rstd * weight + bias
//   backward: xhat = (x - mean) * rstd,  g = grad_out * weight
//             grad_x = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))        written (`=`)
//             grad_weight += sum_n grad_out * xhat;  grad_bias += sum_n grad_out  accumulated (`+=`)
//
// Row kernels use one warp per row: lane l handles columns l, l + 32, ... (coalesced), row sums
// come from a butterfly warp_sum, so a row never needs shared memory or __syncthreads and every
// lane holds the same mean/rstd. 1 / sqrtf (IEEE) is used rather than rsqrtf (approximate).
// The parameter gradients are column reductions over rows. Without atomics, and in an order
// fixed by (N, C) only: rows are cut into groups of >= 256; a (32 columns x 8 row-lanes) block
// reduces one column tile of one group, then, when there is more than one group, a second
// kernel adds the per-group partials (from `scratch`) in group order. Bit-identical run to run.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "common/launch_checks.h"
#include "common/packet.cuh"
#include "common/warp_reduce.cuh"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

using detail::kWarpSize;
using detail::warp_sum;

constexpr int kRowThreads = 256;  // 8 warps = 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
constexpr int kTileColumns = 32;  // parameter-gradient tile: 32 columns x 8 row lanes
constexpr int kTileRowLanes = 8;
constexpr std::int64_t kMinRowsPerGroup = 256;
constexpr std::int64_t kMaxRowGroups = 128;
constexpr int kSumThreads = 256;

__device__ __forceinline__ std::int64_t warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpSize;
}

// In, Out: float, or __nv_bfloat16 / __half (In widened at each read; Out the f32 value rounded
// once at the store).
template <bool kCentered, typename In, typename Out>
__global__ void norm_forward_warp_per_row(const In* x, const float* weight, const float* bias, Out* out,
                                          float* mean_out, float* rstd_out, std::int64_t rows, int channels,
                                          float eps) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;  // warp-uniform: the whole warp leaves together
  const int lane = threadIdx.x % kWarpSize;
  const In* xr = x + row * channels;
  float mean = 0.0f;
  if constexpr (kCentered) {
    float sum = 0.0f;
    for (int c = lane; c < channels; c += kWarpSize) sum += detail::to_f32(xr[c]);
    mean = warp_sum(sum) / static_cast<float>(channels);
  }
  float squares = 0.0f;
  for (int c = lane; c < channels; c += kWarpSize) {
    const float d = detail::to_f32(xr[c]) - mean;
    squares += d * d;
  }
  const float rstd = 1.0f / sqrtf(warp_sum(squares) / static_cast<float>(channels) + eps);
  Out* outr = out + row * channels;
  for (int c = lane; c < channels; c += kWarpSize) {
    const float normed = (detail::to_f32(xr[c]) - mean) * rstd;
    outr[c] = detail::from_f32<Out>(normed * weight[c] + (bias != nullptr ? bias[c] : 0.0f));
  }
  if (lane == 0) {
    if (mean_out != nullptr) mean_out[row] = mean;
    if (rstd_out != nullptr) rstd_out[row] = rstd;
  }
}

template <bool kCentered, typename In>
__global__ void norm_backward_input_warp_per_row(const float* grad_out, const In* x, const float* weight,
                                                 const float* mean, const float* rstd, float* grad_x, std::int64_t rows,
                                                 int channels) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* gor = grad_out + row * channels;
  const In* xr = x + row * channels;
  const float m = kCentered ? mean[row] : 0.0f, s = rstd[row];
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int c = lane; c < channels; c += kWarpSize) {
    const float g = gor[c] * weight[c];
    sum_g += g;
    sum_g_xhat += g * ((detail::to_f32(xr[c]) - m) * s);
  }
  const float mean_g = kCentered ? warp_sum(sum_g) / static_cast<float>(channels) : 0.0f;
  const float mean_g_xhat = warp_sum(sum_g_xhat) / static_cast<float>(channels);
  float* gxr = grad_x + row * channels;
  for (int c = lane; c < channels; c += kWarpSize) {
    const float g = gor[c] * weight[c];
    const float xhat = (detail::to_f32(xr[c]) - m) * s;
    gxr[c] = s * (g - mean_g - xhat * mean_g_xhat);
  }
}

// Block (kTileColumns, kTileRowLanes) reduces columns [blockIdx.x * 32, +32) over the rows of
// group blockIdx.y (mean null: RMSNorm). With one group it adds straight into the gradients, otherwise it writes
// partials: partial[g * C + c] (weight) and partial[(groups + g) * C + c] (bias).
template <typename In>
__global__ void layernorm_backward_params_column_tiles(const float* grad_out, const In* x, const float* mean,
                                                       const float* rstd, float* grad_weight, float* grad_bias,
                                                       float* partial, std::int64_t rows, int channels,
                                                       std::int64_t rows_per_group, int groups) {
  __shared__ float weight_lanes[kTileRowLanes][kTileColumns];
  __shared__ float bias_lanes[kTileRowLanes][kTileColumns];
  const int c = blockIdx.x * kTileColumns + threadIdx.x;
  const int group = blockIdx.y;
  const std::int64_t row_begin = group * rows_per_group;
  const std::int64_t row_end = row_begin + rows_per_group < rows ? row_begin + rows_per_group : rows;
  float dw = 0.0f, db = 0.0f;
  if (c < channels) {
    for (std::int64_t r = row_begin + threadIdx.y; r < row_end; r += kTileRowLanes) {
      const float go = grad_out[r * channels + c];
      dw += go * ((detail::to_f32(x[r * channels + c]) - (mean != nullptr ? mean[r] : 0.0f)) * rstd[r]);
      db += go;
    }
  }
  weight_lanes[threadIdx.y][threadIdx.x] = dw;
  bias_lanes[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  float w = 0.0f, b = 0.0f;
#pragma unroll
  for (int lane = 0; lane < kTileRowLanes; ++lane) {
    w += weight_lanes[lane][threadIdx.x];
    b += bias_lanes[lane][threadIdx.x];
  }
  if (groups == 1) {
    if (grad_weight != nullptr) grad_weight[c] += w;
    if (grad_bias != nullptr) grad_bias[c] += b;
  } else {
    partial[static_cast<std::int64_t>(group) * channels + c] = w;
    partial[static_cast<std::int64_t>(groups + group) * channels + c] = b;
  }
}

__global__ void layernorm_backward_params_sum_groups(const float* partial, float* grad_weight, float* grad_bias,
                                                     int channels, int groups) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float w = 0.0f, b = 0.0f;
  for (int g = 0; g < groups; ++g) {
    w += partial[static_cast<std::int64_t>(g) * channels + c];
    b += partial[static_cast<std::int64_t>(groups + g) * channels + c];
  }
  if (grad_weight != nullptr) grad_weight[c] += w;
  if (grad_bias != nullptr) grad_bias[c] += b;
}

// Validates (rows, channels) and returns rows * channels.
std::int64_t checked_elements(const char* op, std::int64_t rows, std::int64_t channels) {
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "channels", channels);
  MYRIAD_CHECK(rows == 0 || channels > 0, op << ": channels must be > 0 when rows = " << rows << " > 0");
  MYRIAD_CHECK(channels <= std::numeric_limits<int>::max(),
               op << ": channels = " << channels << " exceeds " << std::numeric_limits<int>::max());
  MYRIAD_CHECK(channels == 0 || rows <= std::numeric_limits<std::int64_t>::max() / 4 / channels,
               op << ": rows * channels = " << rows << " * " << channels << " overflows");
  return rows * channels;
}

std::int64_t rows_per_group(std::int64_t rows) {
  const std::int64_t spread = detail::ceil_div(rows, kMaxRowGroups);
  return spread > kMinRowsPerGroup ? spread : kMinRowsPerGroup;
}

}  // namespace

namespace {

template <bool kCentered, typename In, typename Out>
void launch_norm_forward(const char* op, const In* x, const float* weight, const float* bias, Out* out, float* mean,
                         float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream) {
  const std::int64_t elements = checked_elements(op, rows, channels);
  MYRIAD_CHECK(eps >= 0.0f, op << ": eps must be >= 0, got " << eps);
  if (rows == 0) return;
  detail::check_pointer(op, "x", x, alignof(In));
  detail::check_pointer(op, "weight", weight, alignof(float));
  detail::check_optional_pointer(op, "bias", bias, alignof(float));
  detail::check_pointer(op, "out", out, alignof(Out));
  detail::check_optional_pointer(op, "mean", mean, alignof(float));
  detail::check_optional_pointer(op, "rstd", rstd, alignof(float));
  const std::size_t matrix_bytes = static_cast<std::size_t>(elements) * sizeof(In);
  const std::size_t out_bytes = static_cast<std::size_t>(elements) * sizeof(Out);
  const std::size_t vector_bytes = static_cast<std::size_t>(channels) * sizeof(float);
  detail::check_disjoint(op, "out", out, out_bytes, "x", x, matrix_bytes);
  detail::check_disjoint(op, "out", out, out_bytes, "weight", weight, vector_bytes);
  detail::check_disjoint(op, "out", out, out_bytes, "bias", bias, vector_bytes);
  const unsigned blocks = detail::grid_blocks(op, rows, kRowsPerBlock);
  norm_forward_warp_per_row<kCentered, In, Out>
      <<<blocks, kRowThreads, 0, stream>>>(x, weight, bias, out, mean, rstd, rows, static_cast<int>(channels), eps);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void layernorm_forward_f32(const float* x, const float* weight, const float* bias, float* out, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream) {
  launch_norm_forward<true>("layernorm_forward_f32", x, weight, bias, out, mean, rstd, rows, channels, eps, stream);
}

void rmsnorm_forward_f32(const float* x, const float* weight, float* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream) {
  launch_norm_forward<false>("rmsnorm_forward_f32", x, weight, nullptr, out, nullptr, rstd, rows, channels, eps,
                             stream);
}

void layernorm_forward_f32(const float* x, const float* weight, const float* bias, __nv_bfloat16* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream) {
  launch_norm_forward<true>("layernorm_forward_f32 (bf16 out)", x, weight, bias, out, mean, rstd, rows, channels, eps,
                            stream);
}

void layernorm_forward_f32(const float* x, const float* weight, const float* bias, __half* out, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream) {
  launch_norm_forward<true>("layernorm_forward_f32 (f16 out)", x, weight, bias, out, mean, rstd, rows, channels, eps,
                            stream);
}

void rmsnorm_forward_f32(const float* x, const float* weight, __nv_bfloat16* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream) {
  launch_norm_forward<false>("rmsnorm_forward_f32 (bf16 out)", x, weight, nullptr, out, nullptr, rstd, rows, channels,
                             eps, stream);
}

void rmsnorm_forward_f32(const float* x, const float* weight, __half* out, float* rstd, std::int64_t rows,
                         std::int64_t channels, float eps, cudaStream_t stream) {
  launch_norm_forward<false>("rmsnorm_forward_f32 (f16 out)", x, weight, nullptr, out, nullptr, rstd, rows, channels,
                             eps, stream);
}

std::int64_t layernorm_backward_scratch_floats(std::int64_t rows, std::int64_t channels) {
  checked_elements("layernorm_backward_scratch_floats", rows, channels);
  const std::int64_t groups = detail::ceil_div(rows, rows_per_group(rows));
  return groups > 1 ? 2 * groups * channels : 0;
}

namespace {

template <bool kCentered, typename In>
void launch_norm_backward(const char* op, const float* grad_out, const In* x, const float* weight, const float* mean,
                          const float* rstd, float* grad_x, float* grad_weight, float* grad_bias, float* scratch,
                          std::int64_t scratch_floats, std::int64_t rows, std::int64_t channels, cudaStream_t stream) {
  const std::int64_t elements = checked_elements(op, rows, channels);
  const bool params = grad_weight != nullptr || grad_bias != nullptr;
  if (rows == 0 || (grad_x == nullptr && !params)) return;
  detail::check_pointer(op, "grad_out", grad_out, alignof(float));
  detail::check_pointer(op, "x", x, alignof(In));
  if (kCentered) detail::check_pointer(op, "mean", mean, alignof(float));
  detail::check_pointer(op, "rstd", rstd, alignof(float));
  detail::check_optional_pointer(op, "grad_x", grad_x, alignof(float));
  detail::check_optional_pointer(op, "grad_weight", grad_weight, alignof(float));
  detail::check_optional_pointer(op, "grad_bias", grad_bias, alignof(float));
  const std::size_t matrix_bytes = static_cast<std::size_t>(elements) * sizeof(float);
  const unsigned row_blocks = detail::grid_blocks(op, rows, kRowsPerBlock);
  if (grad_x != nullptr) {
    detail::check_pointer(op, "weight", weight, alignof(float));
    detail::check_disjoint(op, "grad_x", grad_x, matrix_bytes, "grad_out", grad_out, matrix_bytes);
    detail::check_disjoint(op, "grad_x", grad_x, matrix_bytes, "x", x, static_cast<std::size_t>(elements) * sizeof(In));
    detail::check_disjoint(op, "grad_x", grad_x, matrix_bytes, "weight", weight,
                           static_cast<std::size_t>(channels) * sizeof(float));
  }
  const std::int64_t group_rows = rows_per_group(rows);
  const int groups = static_cast<int>(detail::ceil_div(rows, group_rows));
  const std::int64_t needed = groups > 1 ? 2 * static_cast<std::int64_t>(groups) * channels : 0;
  if (params && needed > 0) {
    detail::check_pointer(op, "scratch", scratch, alignof(float));
    MYRIAD_CHECK(scratch_floats >= needed, op << ": scratch holds " << scratch_floats << " floats, (N, C) = (" << rows
                                              << ", " << channels << ") needs " << needed << " ("
                                              << (kCentered ? "layernorm" : "rmsnorm") << "_backward_scratch_floats)");
  }

  if (grad_x != nullptr) {
    norm_backward_input_warp_per_row<kCentered, In><<<row_blocks, kRowThreads, 0, stream>>>(
        grad_out, x, weight, mean, rstd, grad_x, rows, static_cast<int>(channels));
    MYRIAD_CUDA_CHECK(cudaGetLastError());
  }
  if (params) {
    const dim3 tiles(detail::grid_blocks(op, channels, kTileColumns), static_cast<unsigned>(groups));
    const dim3 tile_threads(kTileColumns, kTileRowLanes);
    layernorm_backward_params_column_tiles<In><<<tiles, tile_threads, 0, stream>>>(
        grad_out, x, mean, rstd, grad_weight, grad_bias, scratch, rows, static_cast<int>(channels), group_rows, groups);
    MYRIAD_CUDA_CHECK(cudaGetLastError());
    if (groups > 1) {
      layernorm_backward_params_sum_groups<<<detail::grid_blocks(op, channels, kSumThreads), kSumThreads, 0, stream>>>(
          scratch, grad_weight, grad_bias, static_cast<int>(channels), groups);
      MYRIAD_CUDA_CHECK(cudaGetLastError());
    }
  }
}

}  // namespace

void layernorm_backward_f32(const float* grad_out, const float* x, const float* weight, const float* mean,
                            const float* rstd, float* grad_x, float* grad_weight, float* grad_bias, float* scratch,
                            std::int64_t scratch_floats, std::int64_t rows, std::int64_t channels,
                            cudaStream_t stream) {
  launch_norm_backward<true>("layernorm_backward_f32", grad_out, x, weight, mean, rstd, grad_x, grad_weight, grad_bias,
                             scratch, scratch_floats, rows, channels, stream);
}

void rmsnorm_backward_f32(const float* grad_out, const float* x, const float* weight, const float* rstd, float* grad_x,
                          float* grad_weight, float* scratch, std::int64_t scratch_floats, std::int64_t rows,
                          std::int64_t channels, cudaStream_t stream) {
  launch_norm_backward<false>("rmsnorm_backward_f32", grad_out, x, weight, nullptr, rstd, grad_x, grad_weight, nullptr,
                              scratch, scratch_floats, rows, channels, stream);
}

// x in a 16-bit format (mixed precision's residual stream): out f32 or of x's format; backward
// with f32 gradients.
#define MYRIAD_NORMS_FROM_16BIT(X, NAME)                                                                               \
  void layernorm_forward_f32(const X* x, const float* weight, const float* bias, X* out, float* mean, float* rstd,     \
                             std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream) {               \
    launch_norm_forward<true>("layernorm_forward_f32 (" NAME " in and out)", x, weight, bias, out, mean, rstd, rows,   \
                              channels, eps, stream);                                                                  \
  }                                                                                                                    \
  void layernorm_forward_f32(const X* x, const float* weight, const float* bias, float* out, float* mean, float* rstd, \
                             std::int64_t rows, std::int64_t channels, float eps, cudaStream_t stream) {               \
    launch_norm_forward<true>("layernorm_forward_f32 (" NAME " in)", x, weight, bias, out, mean, rstd, rows, channels, \
                              eps, stream);                                                                            \
  }                                                                                                                    \
  void rmsnorm_forward_f32(const X* x, const float* weight, X* out, float* rstd, std::int64_t rows,                    \
                           std::int64_t channels, float eps, cudaStream_t stream) {                                    \
    launch_norm_forward<false>("rmsnorm_forward_f32 (" NAME " in and out)", x, weight, nullptr, out, nullptr, rstd,    \
                               rows, channels, eps, stream);                                                           \
  }                                                                                                                    \
  void rmsnorm_forward_f32(const X* x, const float* weight, float* out, float* rstd, std::int64_t rows,                \
                           std::int64_t channels, float eps, cudaStream_t stream) {                                    \
    launch_norm_forward<false>("rmsnorm_forward_f32 (" NAME " in)", x, weight, nullptr, out, nullptr, rstd, rows,      \
                               channels, eps, stream);                                                                 \
  }                                                                                                                    \
  void layernorm_backward_f32(const float* grad_out, const X* x, const float* weight, const float* mean,               \
                              const float* rstd, float* grad_x, float* grad_weight, float* grad_bias, float* scratch,  \
                              std::int64_t scratch_floats, std::int64_t rows, std::int64_t channels,                   \
                              cudaStream_t stream) {                                                                   \
    launch_norm_backward<true>("layernorm_backward_f32 (" NAME " x)", grad_out, x, weight, mean, rstd, grad_x,         \
                               grad_weight, grad_bias, scratch, scratch_floats, rows, channels, stream);               \
  }                                                                                                                    \
  void rmsnorm_backward_f32(const float* grad_out, const X* x, const float* weight, const float* rstd, float* grad_x,  \
                            float* grad_weight, float* scratch, std::int64_t scratch_floats, std::int64_t rows,        \
                            std::int64_t channels, cudaStream_t stream) {                                              \
    launch_norm_backward<false>("rmsnorm_backward_f32 (" NAME " x)", grad_out, x, weight, nullptr, rstd, grad_x,       \
                                grad_weight, nullptr, scratch, scratch_floats, rows, channels, stream);                \
  }

MYRIAD_NORMS_FROM_16BIT(__nv_bfloat16, "bf16")
MYRIAD_NORMS_FROM_16BIT(__half, "f16")
#undef MYRIAD_NORMS_FROM_16BIT

}  // namespace myriad::cuda
