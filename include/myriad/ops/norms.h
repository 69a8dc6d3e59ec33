// Norms over the last dimension: LayerNorm and RMSNorm (one row = one token's C channels).
//
// x may be given as (N, C) or with several leading dims, e.g. (B, T, C); all leading dims are
// rows, N = numel / C. Every tensor must be contiguous f32 but x and out (below). mean and rstd are the
// per-row statistics saved by forward for backward; they have shape (N) or the leading dims of
// x, e.g. (B, T).
//
//   LayerNorm: mean = sum_c x / C, var = sum_c (x - mean)^2 / C, rstd = 1 / sqrt(var + eps),
//              out = (x - mean) * rstd * weight + bias          (bias optional)
//   RMSNorm:   rstd = 1 / sqrt(sum_c x^2 / C + eps),  out = x * rstd * weight
//
// Gradient contract: activation grads are written (`grad_x =`), parameter grads accumulate
// (`grad_weight +=`, `grad_bias +=`) so micro-batches can add into one buffer. Every gradient
// is optional: an undefined Tensor skips it. The parameter-gradient reduction over N uses a
// fixed chunking of the rows that depends only on N, so results are bit-identical whatever
// the number of threads. In forward, mean / rstd may be undefined when backward will not run, and
// `out` may be bf16 / f16 (a GEMM operand kept in mixed precision): the f32 result rounded once, to
// nearest even (math and statistics stay f32). x may be bf16 / f16 in forward and backward (mixed
// precision's residual stream): read widened, exactly, so every result equals the op's on the f32
// tensor of the same values; a 16-bit x and a 16-bit out share one format.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct LayernormArgs {
  float eps = 1e-5f;  // added to the variance before the square root
};

struct RmsnormArgs {
  float eps = 1e-5f;  // added to the mean square before the square root
};

void layernorm_forward(const LayernormArgs& args,
                       const Tensor& x,       // (N, C)
                       const Tensor& weight,  // (C)
                       const Tensor& bias,    // (C) or undefined
                       Tensor& out,           // (N, C), same shape as x
                       Tensor& mean,          // (N)
                       Tensor& rstd);         // (N)
void layernorm_backward(const LayernormArgs& args,
                        const Tensor& x,         // (N, C)
                        const Tensor& weight,    // (C)
                        const Tensor& mean,      // (N)
                        const Tensor& rstd,      // (N)
                        const Tensor& grad_out,  // (N, C)
                        Tensor& grad_x,          // (N, C)  =
                        Tensor& grad_weight,     // (C)     +=
                        Tensor& grad_bias);      // (C)     +=

void rmsnorm_forward(const RmsnormArgs& args,
                     const Tensor& x,       // (N, C)
                     const Tensor& weight,  // (C)
                     Tensor& out,           // (N, C)
                     Tensor& rstd);         // (N)
void rmsnorm_backward(const RmsnormArgs& args,
                      const Tensor& x,         // (N, C)
                      const Tensor& weight,    // (C)
                      const Tensor& rstd,      // (N)
                      const Tensor& grad_out,  // (N, C)
                      Tensor& grad_x,          // (N, C)  =
                      Tensor& grad_weight);    // (C)     +=

namespace cpu {
void layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                       Tensor& out, Tensor& mean, Tensor& rstd);
void layernorm_backward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight,
                        Tensor& grad_bias);
void rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out, Tensor& rstd);
void rmsnorm_backward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight);
}  // namespace cpu

}  // namespace myriad
