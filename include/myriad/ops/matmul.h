// Matmul: out = alpha * op(a) @ op(b) (+ out when accumulating), batched and strided.
//
// Shapes (op(x) = x or x^T on the last two dims):
//   a   (batch..., M, K)   or (batch..., K, M) when transpose_a
//   b   (batch..., K, N)   or (batch..., N, K) when transpose_b; a 2-D b is shared by every batch
//   out (batch..., M, N)   last dim must have stride 1
// Inputs may be any strided views whose last two dims have a unit stride in one of them (e.g.
// a permuted (B, T, H, D) tensor); other layouts are copied first. With a 2-D b and
// row-contiguous a, the batch is folded into M: one GEMM.
//
// Types: a and b both f32, or both bf16, or both f16 (16-bit operands: exact products summed in
// f32, as tensor cores do; the CPU reference widens them and runs OpenBLAS sgemm); out and the
// gradients are f32; matmul_backward's grad_out has the operands' type (every product of one
// type; a caller with an f32 gradient rounds it first). With 16-bit operands the forward's out and
// the backward's grad_a may instead be of their format when written, not accumulated (mixed
// precision's gradients that only GEMMs read): the f32 sums rounded once, to nearest even — the
// f32 output's values rounded, as a GEMM's 16-bit output type gives them.
//
// Gradient contract: matmul_backward writes grad_a and grad_b (`=`) unless the matching
// accumulate flag is set, in which case it adds (`+=`); layers set the flag for parameters
// (parameter grads accumulate across micro-batches, activation grads are written).
// Either gradient may be an undefined Tensor to skip it.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct MatmulArgs {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  bool accumulate = false;         // forward: out += alpha * op(a) @ op(b)
  bool accumulate_grad_a = false;  // backward: grad_a += ... instead of =
  bool accumulate_grad_b = false;  // backward: grad_b += ... instead of =
};

void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out);
void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out, Tensor& grad_a,
                     Tensor& grad_b);

namespace cpu {
void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out);
void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out, Tensor& grad_a,
                     Tensor& grad_b);
}  // namespace cpu

}  // namespace myriad
