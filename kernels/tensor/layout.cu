// Elementwise sums and head layouts for the device model (kernels.h, "Tensor plumbing"), f32:
//   add_f32                      out = a + b
//   fill_f32                     out = value
//   axpby_f32                    out = alpha a + beta b (b may be null: out = alpha a), or out += that;
//                                b or out may be bf16 / f16 (widened / rounded once)
//   add_broadcast_rows_f32       x[r, j] += row[j] for every row r of x (r < rows, j < width)
//   column_sums_accumulate_f32   out[c] += sum_r x[r, c], rows summed in a fixed order (x f32 or 16-bit)
//   split_heads_f32              (B, T, H, D) rows with a row stride -> (B, H, T, D) contiguous
//   merge_heads_f32              (B, H, T, D) contiguous -> (B, T, H, D) rows with a row stride
//   split_heads_16, merge_heads_16  the same for 16-bit values (bf16 / f16 bits)
//   convert_f32_to_{bf16,f16}    out = x rounded to nearest even; convert_{bf16,f16}_to_f32 widen (exact)
// Grid-stride loops, one thread per output element; no atomics (deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/launch_checks.h"
#include "common/packet.cuh"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(const char* op, std::int64_t n) { return detail::grid_stride_blocks(op, n, kThreads); }

__global__ void add_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a[i] + b[i];
  }
}

// B, Out: float, or bf16 / f16 (b widened; out rounded once at the store; `accumulate`: f32 out).
template <typename B, typename Out>
__global__ void axpby_kernel(float alpha, const float* a, float beta, const B* b, Out* out, std::int64_t n,
                             bool accumulate) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float value = b == nullptr ? alpha * a[i] : alpha * a[i] + beta * detail::to_f32(b[i]);
    out[i] = detail::from_f32<Out>(accumulate ? detail::to_f32(out[i]) + value : value);
  }
}

__global__ void fill_kernel(float* out, float value, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = value;
  }
}

__device__ __forceinline__ void round_into(__nv_bfloat16* out, float x) { *out = __float2bfloat16_rn(x); }
__device__ __forceinline__ void round_into(__half* out, float x) { *out = __float2half_rn(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }

template <typename H>
__global__ void convert_to_half_kernel(const float* x, H* out, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    round_into(out + i, x[i]);
  }
}

template <typename H>
__global__ void convert_from_half_kernel(const H* x, float* out, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = widen(x[i]);
  }
}

__global__ void add_broadcast_rows_kernel(float* x, const float* row, std::int64_t rows, std::int64_t width) {
  const std::int64_t n = rows * width, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] += row[i % width];
  }
}

// Block: 32 columns x 8 row lanes. Lane l sums rows l, l + 8, ... in order; lanes are then added
// in lane order, so the result depends on the sizes only.
constexpr int kColumnsPerBlock = 32, kRowLanes = 8;

// Element: float, or __nv_bfloat16 / __half (a 16-bit gradient widened exactly, summed in f32).
template <typename Element>
__global__ void column_sums_kernel(const Element* x, float* out, std::int64_t rows, std::int64_t cols) {
  __shared__ float partial[kRowLanes][kColumnsPerBlock];
  const int column_in_block = static_cast<int>(threadIdx.x) % kColumnsPerBlock;
  const int lane = static_cast<int>(threadIdx.x) / kColumnsPerBlock;
  const std::int64_t column = static_cast<std::int64_t>(blockIdx.x) * kColumnsPerBlock + column_in_block;
  float sum = 0.0f;
  if (column < cols) {
    for (std::int64_t r = lane; r < rows; r += kRowLanes) sum += detail::to_f32(x[r * cols + column]);
  }
  partial[lane][column_in_block] = sum;
  __syncthreads();
  if (lane == 0 && column < cols) {
    float total = 0.0f;
    for (int l = 0; l < kRowLanes; ++l) total += partial[l][column_in_block];
    out[column] += total;
  }
}

// Element: float, or std::uint16_t for 16-bit values (bf16 / f16 bits: a layout copy moves them).
template <typename Element>
__global__ void split_heads_kernel(const Element* src, std::int64_t src_row_stride, Element* dst, std::int64_t B,
                                   std::int64_t T, std::int64_t H, std::int64_t D) {
  const std::int64_t n = B * H * T * D, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t d = i % D, t = (i / D) % T, h = (i / (D * T)) % H, b = i / (D * T * H);
    dst[i] = src[(b * T + t) * src_row_stride + h * D + d];
  }
}

template <typename Element>
__global__ void merge_heads_kernel(const Element* src, Element* dst, std::int64_t dst_row_stride, std::int64_t B,
                                   std::int64_t T, std::int64_t H, std::int64_t D) {
  const std::int64_t n = B * T * H * D, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t d = i % D, h = (i / D) % H, t = (i / (D * H)) % T, b = i / (D * H * T);
    dst[(b * T + t) * dst_row_stride + h * D + d] = src[((b * H + h) * T + t) * D + d];
  }
}

void check_heads(const char* op, std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D,
                 std::int64_t row_stride) {
  for (auto [name, value] :
       {std::pair<const char*, std::int64_t>{"batch", B}, {"seq", T}, {"heads", H}, {"head_dim", D}}) {
    detail::check_count(op, name, value);
  }
  MYRIAD_CHECK(row_stride >= H * D,
               op << ": row stride " << row_stride << " is shorter than heads x head_dim = " << H * D);
}

}  // namespace

void add_f32(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream) {
  const char* op = "add_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_elementwise<float>(op, {{"a", a}, {"b", b}}, "out", out, n);
  add_kernel<<<blocks_for(op, n), kThreads, 0, stream>>>(a, b, out, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void fill_f32(float* out, float value, std::int64_t n, cudaStream_t stream) {
  const char* op = "fill_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "out", out, alignof(float));
  fill_kernel<<<blocks_for(op, n), kThreads, 0, stream>>>(out, value, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void axpby_f32(float alpha, const float* a, float beta, const float* b, float* out, std::int64_t n, bool accumulate,
               cudaStream_t stream) {
  const char* op = "axpby_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  if (b != nullptr) {
    detail::check_elementwise<float>(op, {{"a", a}, {"b", b}}, "out", out, n);
  } else {
    detail::check_elementwise<float>(op, {{"a", a}}, "out", out, n);
  }
  axpby_kernel<<<blocks_for(op, n), kThreads, 0, stream>>>(alpha, a, beta, b, out, n, accumulate);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

namespace {

// axpby with one 16-bit side: b (out f32, a or b itself, or disjoint) or out (disjoint from both;
// no accumulate).
template <typename B, typename Out>
void launch_mixed_axpby(const char* op, float alpha, const float* a, float beta, const B* b, Out* out, std::int64_t n,
                        bool accumulate, cudaStream_t stream) {
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "a", a, alignof(float));
  detail::check_optional_pointer(op, "b", b, alignof(B));
  detail::check_pointer(op, "out", out, alignof(Out));
  const auto bytes = [n](std::size_t size) { return static_cast<std::size_t>(n) * size; };
  if constexpr (std::is_same_v<Out, float>) {
    detail::check_same_or_disjoint(op, "out", out, "a", a, bytes(sizeof(float)));
    detail::check_disjoint(op, "out", out, bytes(sizeof(float)), "b", b, bytes(sizeof(B)));
  } else {
    MYRIAD_CHECK(!accumulate, op << ": a 16-bit out is written, not accumulated");
    detail::check_disjoint(op, "out", out, bytes(sizeof(Out)), "a", a, bytes(sizeof(float)));
    detail::check_disjoint(op, "out", out, bytes(sizeof(Out)), "b", b, bytes(sizeof(B)));
  }
  axpby_kernel<<<blocks_for(op, n), kThreads, 0, stream>>>(alpha, a, beta, b, out, n, accumulate);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void axpby_f32(float alpha, const float* a, float beta, const __nv_bfloat16* b, float* out, std::int64_t n,
               bool accumulate, cudaStream_t stream) {
  launch_mixed_axpby("axpby_f32 (bf16 b)", alpha, a, beta, b, out, n, accumulate, stream);
}

void axpby_f32(float alpha, const float* a, float beta, const __half* b, float* out, std::int64_t n, bool accumulate,
               cudaStream_t stream) {
  launch_mixed_axpby("axpby_f32 (f16 b)", alpha, a, beta, b, out, n, accumulate, stream);
}

void axpby_f32(float alpha, const float* a, float beta, const float* b, __nv_bfloat16* out, std::int64_t n,
               bool accumulate, cudaStream_t stream) {
  launch_mixed_axpby("axpby_f32 (bf16 out)", alpha, a, beta, b, out, n, accumulate, stream);
}

void axpby_f32(float alpha, const float* a, float beta, const float* b, __half* out, std::int64_t n, bool accumulate,
               cudaStream_t stream) {
  launch_mixed_axpby("axpby_f32 (f16 out)", alpha, a, beta, b, out, n, accumulate, stream);
}

void add_broadcast_rows_f32(float* x, const float* row, std::int64_t rows, std::int64_t width, cudaStream_t stream) {
  const char* op = "add_broadcast_rows_f32";
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "width", width);
  if (rows == 0 || width == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "row", row, alignof(float));
  detail::check_disjoint(op, "x", x, static_cast<std::size_t>(rows * width) * sizeof(float), "row", row,
                         static_cast<std::size_t>(width) * sizeof(float));
  add_broadcast_rows_kernel<<<blocks_for(op, rows * width), kThreads, 0, stream>>>(x, row, rows, width);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

namespace {

template <typename Element>
void launch_column_sums(const char* op, const Element* x, float* out, std::int64_t rows, std::int64_t cols,
                        cudaStream_t stream) {
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "cols", cols);
  if (rows == 0 || cols == 0) return;
  detail::check_pointer(op, "x", x, alignof(Element));
  detail::check_pointer(op, "out", out, alignof(float));
  detail::check_disjoint(op, "out", out, static_cast<std::size_t>(cols) * sizeof(float), "x", x,
                         static_cast<std::size_t>(rows * cols) * sizeof(Element));
  const unsigned blocks = detail::grid_blocks(op, cols, kColumnsPerBlock);
  column_sums_kernel<Element><<<blocks, kColumnsPerBlock * kRowLanes, 0, stream>>>(x, out, rows, cols);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void column_sums_accumulate_f32(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  launch_column_sums("column_sums_accumulate_f32", x, out, rows, cols, stream);
}

void column_sums_accumulate_f32(const __nv_bfloat16* x, float* out, std::int64_t rows, std::int64_t cols,
                                cudaStream_t stream) {
  launch_column_sums("column_sums_accumulate_f32 (bf16 rows)", x, out, rows, cols, stream);
}

void column_sums_accumulate_f32(const __half* x, float* out, std::int64_t rows, std::int64_t cols,
                                cudaStream_t stream) {
  launch_column_sums("column_sums_accumulate_f32 (f16 rows)", x, out, rows, cols, stream);
}

namespace {

// The shared launcher of split_heads_f32 (merge = false) and merge_heads_f32 (merge = true): the
// strided side is src for a split and dst for a merge.
template <typename Element>
void launch_heads(const char* op, const Element* src, Element* dst, std::int64_t row_stride, std::int64_t batch,
                  std::int64_t seq, std::int64_t heads, std::int64_t head_dim, bool merge, cudaStream_t stream) {
  check_heads(op, batch, seq, heads, head_dim, row_stride);
  const std::int64_t n = batch * seq * heads * head_dim;
  if (n == 0) return;
  detail::check_pointer(op, "src", src, alignof(Element));
  detail::check_pointer(op, "dst", dst, alignof(Element));
  // The strided side spans from its first row's start to its last row's end: the rows of a fused
  // (B, T, 3C) buffer leave gaps, so a head slice at offset part * C ends before the buffer does.
  const auto strided = static_cast<std::size_t>((batch * seq - 1) * row_stride + heads * head_dim) * sizeof(Element);
  const auto packed = static_cast<std::size_t>(n) * sizeof(Element);
  detail::check_disjoint(op, "dst", dst, merge ? strided : packed, "src", src, merge ? packed : strided);
  if (merge) {
    merge_heads_kernel<Element>
        <<<blocks_for(op, n), kThreads, 0, stream>>>(src, dst, row_stride, batch, seq, heads, head_dim);
  } else {
    split_heads_kernel<Element>
        <<<blocks_for(op, n), kThreads, 0, stream>>>(src, row_stride, dst, batch, seq, heads, head_dim);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void split_heads_f32(const float* src, std::int64_t src_row_stride, float* dst, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, cudaStream_t stream) {
  launch_heads("split_heads_f32", src, dst, src_row_stride, batch, seq, heads, head_dim, false, stream);
}

void merge_heads_f32(const float* src, float* dst, std::int64_t dst_row_stride, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, cudaStream_t stream) {
  launch_heads("merge_heads_f32", src, dst, dst_row_stride, batch, seq, heads, head_dim, true, stream);
}

void split_heads_16(const std::uint16_t* src, std::int64_t src_row_stride, std::uint16_t* dst, std::int64_t batch,
                    std::int64_t seq, std::int64_t heads, std::int64_t head_dim, cudaStream_t stream) {
  launch_heads("split_heads_16", src, dst, src_row_stride, batch, seq, heads, head_dim, false, stream);
}

void merge_heads_16(const std::uint16_t* src, std::uint16_t* dst, std::int64_t dst_row_stride, std::int64_t batch,
                    std::int64_t seq, std::int64_t heads, std::int64_t head_dim, cudaStream_t stream) {
  launch_heads("merge_heads_16", src, dst, dst_row_stride, batch, seq, heads, head_dim, true, stream);
}

namespace {

// f32 -> 16-bit H (`to_half`) or back, with the launcher checks; `op` names the public function.
template <typename H>
void launch_conversion(const char* op, const void* x, void* out, std::int64_t n, bool to_half, cudaStream_t stream) {
  detail::check_count(op, "n", n);
  if (n == 0) return;
  const std::size_t in_size = to_half ? sizeof(float) : sizeof(H), out_size = to_half ? sizeof(H) : sizeof(float);
  detail::check_pointer(op, "x", x, in_size);
  detail::check_pointer(op, "out", out, out_size);
  detail::check_disjoint(op, "out", out, static_cast<std::size_t>(n) * out_size, "x", x,
                         static_cast<std::size_t>(n) * in_size);
  if (to_half) {
    convert_to_half_kernel<H>
        <<<blocks_for(op, n), kThreads, 0, stream>>>(static_cast<const float*>(x), static_cast<H*>(out), n);
  } else {
    convert_from_half_kernel<H>
        <<<blocks_for(op, n), kThreads, 0, stream>>>(static_cast<const H*>(x), static_cast<float*>(out), n);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void convert_f32_to_bf16(const float* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream) {
  launch_conversion<__nv_bfloat16>("convert_f32_to_bf16", x, out, n, true, stream);
}

void convert_bf16_to_f32(const __nv_bfloat16* x, float* out, std::int64_t n, cudaStream_t stream) {
  launch_conversion<__nv_bfloat16>("convert_bf16_to_f32", x, out, n, false, stream);
}

void convert_f32_to_f16(const float* x, __half* out, std::int64_t n, cudaStream_t stream) {
  launch_conversion<__half>("convert_f32_to_f16", x, out, n, true, stream);
}

void convert_f16_to_f32(const __half* x, float* out, std::int64_t n, cudaStream_t stream) {
  launch_conversion<__half>("convert_f16_to_f32", x, out, n, false, stream);
}

}  // namespace myriad::cuda
