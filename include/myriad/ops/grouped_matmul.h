// Grouped matmul: one linear layer per group of consecutive rows (the experts of an MoE layer run
// as one op, not a loop of small GEMMs issued by the model).
//
//   rows [offsets[g], offsets[g + 1]) of out = the same rows of x @ W[g]^T + bias[g]
//
// Shapes: x (R, K); weight (G, M, K) — one (out, in) matrix per group, as a linear layer stores
// it; bias (G, M) or undefined; out (R, M); offsets: G + 1 non-decreasing host integers from 0 to
// R (a group may be empty); bad offsets throw naming the op, 'offsets' and the entry. x and weight
// are f32, or both bf16 / f16 (exact products, f32 sums: the CPU reference and the CUDA backend
// both widen them to f32 first — cuBLAS's grouped GEMM has no 16-bit-input, f32-output form);
// bias, out, grad_out and every gradient f32; all contiguous.
//
// The GEMMs: a CPU sgemm per non-empty group; on CUDA one cuBLAS grouped GEMM per product (out,
// grad_x, grad_weight) covering every non-empty group, or — groups of one size (capacity routing) —
// one cuBLASLt GEMM per group, with nothing uploaded. Per-group bias and its gradient (column
// sums of grad_out over the group's rows, in row order) are exact-order, deterministic sums.
//
// Gradient contract: grad_x is written (`=`) unless args.accumulate_grad_x; grad_weight and
// grad_bias (parameters) accumulate (`+=`). Any gradient may be undefined to skip it. An empty
// group leaves its grad_weight / grad_bias unchanged.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad {

struct GroupedMatmulArgs {
  bool accumulate_grad_x = false;
};

void grouped_matmul_forward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const std::vector<std::int64_t>& offsets, Tensor& out);
void grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                             const std::vector<std::int64_t>& offsets, const Tensor& grad_out, Tensor& grad_x,
                             Tensor& grad_weight, Tensor& grad_bias);

namespace cpu {
void grouped_matmul_forward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const std::vector<std::int64_t>& offsets, Tensor& out);
void grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                             const std::vector<std::int64_t>& offsets, const Tensor& grad_out, Tensor& grad_x,
                             Tensor& grad_weight, Tensor& grad_bias);
}  // namespace cpu

}  // namespace myriad
