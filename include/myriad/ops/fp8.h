// FP8 GEMM building blocks (training.precision fp8): quantisation with a per-tensor scale and the
// GEMM of two quantised operands.
//
// fp8_quantize: out = fp8(x * scale), rounded to nearest even and saturated to the format's
// largest finite value (core/fp8.h; NaN stays NaN), x contiguous f32 viewed as rows of its last
// dim (N, C); out an f8e4m3 or f8e5m2 tensor of x's shape. Optional (undefined to skip):
// out_t, the same values transposed, (C, N) — the operand layout the GEMMs of a linear layer's
// backward read — and amax, one f32 element that becomes max(amax, max |x|) (the statistic the
// delayed scaling recipe keeps; NaN in x propagates). `scale` is one f32 element on x's device,
// read when the op runs, not when it is issued: the delayed recipe (nn/fp8_scaling.h) keeps its
// scales there, so a recorded CUDA graph replays with each step's scales. It must hold a
// positive finite value (the CPU op checks; a device cannot without waiting).
//
// fp8_gemm: out (M, N) = (a_dequant a) (M, K) @ (b_dequant b) (N, K)^T (+ out when accumulate):
// a and b contiguous FP8 (any of E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3 — not two E5M2, which
// Hopper's tensor cores do not take), both reduced along their last dim (the "TN" layout
// cuBLASLt's FP8 GEMMs require); products exact and summed in f32; out contiguous f32.
// a_dequant and b_dequant are one f32 element each on the operands' device, read when the GEMM
// runs: the reciprocals of the scales the operands were quantised with (cuBLASLt's A / B scale
// pointers). The CPU reference widens both to f32 (exact), runs sgemm with alpha = a_dequant x
// b_dequant; the cuda backend runs cuBLASLt's FP8 GEMM (sm_89+).
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct Fp8GemmArgs {
  bool accumulate = false;
};

void fp8_quantize(const Tensor& x, const Tensor& scale, Tensor& out, Tensor& out_t, Tensor& amax);
void fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
              const Tensor& b_dequant, Tensor& out);

namespace cpu {
void fp8_quantize(const Tensor& x, const Tensor& scale, Tensor& out, Tensor& out_t, Tensor& amax);
void fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
              const Tensor& b_dequant, Tensor& out);
}  // namespace cpu

}  // namespace myriad
