// cuBLASLt GEMMs, row-major like the CPU ops.
//
// gemm: C (M, N) = op(A) op(B) (+ C when `accumulate`) (+ bias, then GELU, by epilogue), where
// op(A) is A (M, K), or A stored (K, M) and transposed when transpose_a; op(B) is B (K, N), or B
// stored (N, K) and transposed when transpose_b. A linear layer's three products are
//   forward  y  = x W^T      gemm{M=rows, N=out, K=in, transpose_b}
//   backward dx = dy W       gemm{M=rows, N=in,  K=out}
//            dW += dy^T x    gemm{M=out,  N=in,  K=rows, transpose_a, accumulate}
// `tf32` lets f32 inputs use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissa
// products, f32 sums); off, f32 GEMMs are exact f32 FMA math.
//
// linear_gemm: y = x @ W^T (+ bias) (then GELU), the forward above:
//
//   x (M, K), W (N, K) [out features, in features], bias (N) or null, y (M, N); all row-major
//   contiguous device memory of the context's device. Inputs in f32, bf16 or f16 (x, W and y of
//   one type; bias of y's type); accumulation always in f32 (CUBLAS_COMPUTE_32F: no TF32 for f32
//   inputs, so f32 results match a CPU f32 GEMM up to summation order). Epilogues fuse the bias
//   add and the tanh-GELU of GPT-2 into the GEMM. `accumulate` adds into y (beta = 1) instead of
//   overwriting it (no epilogue allowed then).
// Row-major y = x W^T is computed as the column-major y^T = W x^T: A = W (transposed), B = x.
// The algorithm is cuBLASLt's first heuristic choice for the shape, the context's workspace and
// the actual alignment of A, B and C (16 bytes required, up to 256 used); descriptors and
// algorithm are made once per such shape and kept in the context (DeviceContext::gemm_plans).
// FP8 (sm_89+): A and B of CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 (b_type may differ from type; not both
// E5M2), C f32, transpose_b set and transpose_a not (cuBLASLt's FP8 kernels take only the "TN"
// layout: both operands reduced along their rows), `a_scale` / `b_scale` (device pointers, read
// at run time, so a recorded CUDA graph sees each step's values) and `alpha` undoing the
// operands' scales.
// Shape and type errors throw myriad::Error naming the argument before any GPU work.
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstdint>
#include <optional>

#include "myriad/cuda/device_context.h"

namespace myriad::cuda {

// Epilogues (the bias vector's length is N, C's columns; `aux` is an (M, N) row-major f32 matrix
// beside C, passed to gemm()):
//   bias, bias_gelu     C = AB + bias, or gelu(AB + bias)
//   gelu_aux(_bias)     C = gelu(AB (+ bias)) and aux = AB (+ bias), the GELU's input (written)
//   dgelu(_bgrad)       C = AB * gelu'(aux) (aux read), and with _bgrad the bias vector is
//                       *written* with C's column sums (a GELU MLP's input-side bias gradient)
// GELU is GPT-2's tanh approximation. The aux epilogues need f32 C and N a multiple of 8.
enum class GemmEpilogue { none, bias, bias_gelu, gelu_aux, bias_gelu_aux, dgelu, dgelu_bgrad };

// y (m, n) f32 = x (m, k) W^T (W (n, k)), the operands of `type`, with the epilogue's f32 bias.
struct LinearGemm {
  std::int64_t m = 0, n = 0, k = 0;
  cudaDataType_t type = CUDA_R_32F;  // of x and W: CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F; y is f32
  GemmEpilogue epilogue = GemmEpilogue::none;
  bool accumulate = false;
};

void linear_gemm(const DeviceContext& context, const LinearGemm& shape, const void* x, const void* weight,
                 const void* bias, void* y);

struct Gemm {
  std::int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  cudaDataType_t type = CUDA_R_32F;        // A and B type (A's when b_type is set)
  std::optional<cudaDataType_t> b_type{};  // B's type when it differs (FP8: E4M3 x E5M2); unset: `type`
  // FP8 only: one f32 on the device each (or null: 1), read when the GEMM runs — the factors
  // that turn A's and B's codes back into values: C = alpha (a_scale A) (b_scale B).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  float alpha = 1.0f;  // C = alpha op(A) op(B) (+ C)
  // C (and bias) type; CUDA_R_32F with 16-bit A/B keeps f32 outputs and f32 gradient sums.
  // Unset: `type`.
  std::optional<cudaDataType_t> output_type{};
  GemmEpilogue epilogue = GemmEpilogue::none;
  bool accumulate = false;  // C += (no epilogue then)
  bool tf32 = false;        // f32 only: TF32 tensor-core products
};

void gemm(const DeviceContext& context, const Gemm& shape, const void* a, const void* b, const void* bias, void* c,
          void* aux = nullptr);
// Whether cuBLASLt has an algorithm for `shape` at these pointers' alignments (the plan is made and
// kept either way): a caller with an unfused fallback asks before choosing an epilogue.
bool gemm_available(const DeviceContext& context, const Gemm& shape, const void* a, const void* b, const void* c);

}  // namespace myriad::cuda
