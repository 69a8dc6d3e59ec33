// Rotary position embedding, "rotate half" (the op of ops/rope.h), on (B, T, H, D) rows of heads:
// element i < D/2 of each head vector pairs with i + D/2 and the pair turns
// by angle(t, i) = (position_offset + t) * theta^(-2i / D) (backward: by -angle). The cos / sin
// table (T, D/2) is computed on the host in float64 and rounded to float, as the CPU op does, and
// passed in device memory (rope_table_f32 fills it), so large positions keep their accuracy and
// the GPU matches the CPU bit for bit up to the rotation's two products. out may be x (in place).
// One kernel: rope_rows takes rows of heads at any row and batch stride (the heads views of the
// model's packed q / k rows), reading f32 or bf16 / f16 and writing f32 or a 16-bit format (f32
// math, the output rounded once); rope_f32 is its contiguous f32 case.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/launch_checks.h"
#include "common/packet.cuh"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (b, t, h, i < D/2) pair of rows of heads at the given strides (elements).
template <typename In, typename Out>
__global__ void rope_rows_kernel(const In* x, Out* out, const float* cos_table, const float* sin_table, RopeRows shape,
                                 float sign) {
  const std::int64_t half = shape.head_dim / 2, pairs = shape.batch * shape.seq * shape.heads * half;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const std::int64_t i = p % half, h = (p / half) % shape.heads, t = (p / (half * shape.heads)) % shape.seq;
    const std::int64_t b = p / (half * shape.heads * shape.seq);
    const float c = cos_table[t * half + i], s = sign * sin_table[t * half + i];
    const In* xv = x + b * shape.x_batch_stride + t * shape.x_row_stride + h * shape.head_dim;
    Out* ov = out + b * shape.out_batch_stride + t * shape.out_row_stride + h * shape.head_dim;
    const float a = detail::to_f32(xv[i]), e = detail::to_f32(xv[i + half]);
    ov[i] = detail::from_f32<Out>(a * c - e * s);
    ov[i + half] = detail::from_f32<Out>(e * c + a * s);
  }
}

// The last element of a view plus one, in elements from its start.
std::int64_t rows_extent(const RopeRows& r, std::int64_t batch_stride, std::int64_t row_stride) {
  return (r.batch - 1) * batch_stride + (r.seq - 1) * row_stride + r.heads * r.head_dim;
}

template <typename In, typename Out>
void launch_rope_rows(const char* op, const In* x, Out* out, const float* cos_table, const float* sin_table,
                      const RopeRows& r, cudaStream_t stream) {
  for (auto [name, value] :
       {std::pair<const char*, std::int64_t>{"batch", r.batch}, {"seq", r.seq}, {"heads", r.heads}}) {
    detail::check_count(op, name, value);
  }
  MYRIAD_CHECK(r.head_dim > 0 && r.head_dim % 2 == 0, op << ": head_dim must be even and > 0, got " << r.head_dim);
  const std::int64_t pairs = r.batch * r.seq * r.heads * (r.head_dim / 2);
  if (pairs == 0) return;
  const std::int64_t row = r.heads * r.head_dim;
  MYRIAD_CHECK(r.x_row_stride >= row && r.out_row_stride >= row &&
                   (r.batch == 1 ||
                    (r.x_batch_stride >= r.seq * r.x_row_stride && r.out_batch_stride >= r.seq * r.out_row_stride)),
               op << ": rows of " << row << " values need row strides >= " << row
                  << " and batch strides >= seq * row stride, got x (" << r.x_batch_stride << ", " << r.x_row_stride
                  << "), out (" << r.out_batch_stride << ", " << r.out_row_stride << ")");
  detail::check_pointer(op, "x", x, alignof(In));
  detail::check_pointer(op, "out", out, alignof(Out));
  detail::check_pointer(op, "cos_table", cos_table, alignof(float));
  detail::check_pointer(op, "sin_table", sin_table, alignof(float));
  const bool same_view = static_cast<const void*>(x) == static_cast<const void*>(out) && std::is_same_v<In, Out> &&
                         r.x_batch_stride == r.out_batch_stride && r.x_row_stride == r.out_row_stride;
  if (!same_view) {  // in place on the same view, or no overlap at all
    detail::check_disjoint(
        op, "out", out, static_cast<std::size_t>(rows_extent(r, r.out_batch_stride, r.out_row_stride)) * sizeof(Out),
        "x", x, static_cast<std::size_t>(rows_extent(r, r.x_batch_stride, r.x_row_stride)) * sizeof(In));
  }
  const auto blocks = detail::grid_stride_blocks(op, pairs, kThreads);
  rope_rows_kernel<In, Out>
      <<<blocks, kThreads, 0, stream>>>(x, out, cos_table, sin_table, r, r.backward ? -1.0f : 1.0f);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope_rows(const float* x, float* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream) {
  launch_rope_rows("rope_rows (f32)", x, out, cos_table, sin_table, rows, stream);
}
void rope_rows(const float* x, __nv_bfloat16* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream) {
  launch_rope_rows("rope_rows (f32 in, bf16 out)", x, out, cos_table, sin_table, rows, stream);
}
void rope_rows(const float* x, __half* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream) {
  launch_rope_rows("rope_rows (f32 in, f16 out)", x, out, cos_table, sin_table, rows, stream);
}
void rope_rows(const __nv_bfloat16* x, __nv_bfloat16* out, const float* cos_table, const float* sin_table,
               const RopeRows& rows, cudaStream_t stream) {
  launch_rope_rows("rope_rows (bf16)", x, out, cos_table, sin_table, rows, stream);
}
void rope_rows(const __half* x, __half* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream) {
  launch_rope_rows("rope_rows (f16)", x, out, cos_table, sin_table, rows, stream);
}
void rope_rows(const __nv_bfloat16* x, float* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream) {
  launch_rope_rows("rope_rows (bf16 in, f32 out)", x, out, cos_table, sin_table, rows, stream);
}
void rope_rows(const __half* x, float* out, const float* cos_table, const float* sin_table, const RopeRows& rows,
               cudaStream_t stream) {
  launch_rope_rows("rope_rows (f16 in, f32 out)", x, out, cos_table, sin_table, rows, stream);
}

void rope_table_f32(float* cos_table, float* sin_table, std::int64_t seq, std::int64_t head_dim, double theta,
                    std::int64_t position_offset, cudaStream_t stream) {
  const char* op = "rope_table_f32";
  detail::check_count(op, "seq", seq);
  MYRIAD_CHECK(head_dim > 0 && head_dim % 2 == 0, op << ": head_dim must be even and > 0, got " << head_dim);
  MYRIAD_CHECK(theta > 0 && position_offset >= 0,
               op << ": need theta > 0 and position_offset >= 0, got " << theta << " and " << position_offset);
  if (seq == 0) return;
  detail::check_pointer(op, "cos_table", cos_table, alignof(float));
  detail::check_pointer(op, "sin_table", sin_table, alignof(float));
  const std::int64_t half = head_dim / 2;
  std::vector<float> cos_host(static_cast<std::size_t>(seq * half)), sin_host(cos_host.size());
  for (std::int64_t t = 0; t < seq; ++t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(position_offset + t) *
                           std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
      cos_host[static_cast<std::size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
      sin_host[static_cast<std::size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  const std::size_t bytes = cos_host.size() * sizeof(float);
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(cos_table, cos_host.data(), bytes, cudaMemcpyHostToDevice, stream));
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(sin_table, sin_host.data(), bytes, cudaMemcpyHostToDevice, stream));
  MYRIAD_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors go out of scope
}

void rope_f32(const float* x, float* out, const float* cos_table, const float* sin_table, std::int64_t batch,
              std::int64_t seq, std::int64_t heads, std::int64_t head_dim, bool backward, cudaStream_t stream) {
  const std::int64_t row = heads * head_dim;  // contiguous rows of heads
  launch_rope_rows(backward ? "rope_backward_f32" : "rope_forward_f32", x, out, cos_table, sin_table,
                   RopeRows{.batch = batch,
                            .seq = seq,
                            .heads = heads,
                            .head_dim = head_dim,
                            .x_batch_stride = seq * row,
                            .x_row_stride = row,
                            .out_batch_stride = seq * row,
                            .out_row_stride = row,
                            .backward = backward},
                   stream);
}

}  // namespace myriad::cuda
