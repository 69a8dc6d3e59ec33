// attention_merge_f32 (kernels.h): out, lse <- the attention over the union of two disjoint key
// sets, from out, lse (one set) and part_out, part_lse (the other) — ring attention's combine step,
// the contract of ops/attention.h's attention_merge. One warp per row: lane 0's two lse values
// give the weights (float64, as the CPU reference computes them), every lane rescales a strided
// slice of the row, and lane 0 writes the new lse after the warp has read the old one (the
// branches are uniform per warp: they depend only on the row). A row whose
// part_lse is not finite keeps its values; one whose lse is not finite takes the part's.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    attention_merge_rows(float* out, float* lse, const float* part_out, const float* part_lse, std::int64_t rows,
                         int head_dim) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= rows) return;  // the whole warp leaves together
  const float a = lse[row], c = part_lse[row];
  if (!isfinite(c)) return;  // the part saw no key for this row
  float* o = out + row * head_dim;
  const float* po = part_out + row * head_dim;
  if (!isfinite(a)) {  // only the part saw keys
    for (int d = lane; d < head_dim; d += 32) o[d] = po[d];
    __syncwarp();  // every lane has read lse[row]
    if (lane == 0) lse[row] = c;
    return;
  }
  const double m = fmax(static_cast<double>(a), static_cast<double>(c));
  const double wa = exp(a - m), wc = exp(c - m), sum = wa + wc;
  const float fa = static_cast<float>(wa / sum), fc = static_cast<float>(wc / sum);
  for (int d = lane; d < head_dim; d += 32) o[d] = fa * o[d] + fc * po[d];
  __syncwarp();  // every lane has read lse[row]
  if (lane == 0) lse[row] = static_cast<float>(m + log(sum));
}

}  // namespace

void attention_merge_f32(float* out, float* lse, const float* part_out, const float* part_lse, std::int64_t rows,
                         std::int64_t head_dim, cudaStream_t stream) {
  const char* op = "attention_merge_f32";
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "head_dim", head_dim);
  if (rows == 0) return;
  for (auto [name, ptr] : {std::pair<const char*, const float*>{"out", out},
                           {"lse", lse},
                           {"part_out", part_out},
                           {"part_lse", part_lse}}) {
    detail::check_pointer(op, name, ptr, alignof(float));
  }
  MYRIAD_CHECK(head_dim <= 0x7fffffff, op << ": head_dim " << head_dim << " exceeds int");
  const std::size_t out_bytes = static_cast<std::size_t>(rows * head_dim) * 4;
  const std::size_t lse_bytes = static_cast<std::size_t>(rows) * 4;
  detail::check_disjoint(op, "out", out, out_bytes, "part_out", part_out, out_bytes);
  detail::check_disjoint(op, "out", out, out_bytes, "part_lse", part_lse, lse_bytes);
  detail::check_disjoint(op, "lse", lse, lse_bytes, "part_out", part_out, out_bytes);
  detail::check_disjoint(op, "lse", lse, lse_bytes, "part_lse", part_lse, lse_bytes);
  detail::check_disjoint(op, "out", out, out_bytes, "lse", lse, lse_bytes);
  const std::int64_t blocks = detail::ceil_div(rows, kWarpsPerBlock);
  MYRIAD_CHECK(blocks <= 0x7fffffff, op << ": " << rows << " rows exceed the grid");
  attention_merge_rows<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(
      out, lse, part_out, part_lse, rows, static_cast<int>(head_dim));
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
