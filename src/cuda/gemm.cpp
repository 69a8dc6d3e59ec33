// linear_gemm: cuBLASLt descriptors for the row-major linear layer, heuristic, matmul.
#include "myriad/cuda/gemm.h"

#include <cublasLt.h>

#include <memory>

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

namespace {

template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtHandle {
  T handle = nullptr;
  ~LtHandle() {
    if (handle != nullptr) (void)Destroy(handle);
  }
};

std::size_t element_bytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: MYRIAD_THROW("gemm: element type " << static_cast<int>(type) << " is not f32, bf16 or f16");
  }
}

}  // namespace

void gemm(const DeviceContext& context, const Gemm& s, const void* a, const void* b, const void* bias, void* c) {
  MYRIAD_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0,
               "gemm: sizes must be >= 0, got M " << s.m << ", N " << s.n << ", K " << s.k);
  (void)element_bytes(s.type);  // validates the type
  const cudaDataType_t output_type = s.output_type.value_or(s.type);
  (void)element_bytes(output_type);
  MYRIAD_CHECK(output_type == s.type || output_type == CUDA_R_32F,
               "gemm: the output type must be the inputs' type or f32");
  MYRIAD_CHECK(!s.tf32 || s.type == CUDA_R_32F, "gemm: tf32 applies to f32 inputs only");
  if (s.m == 0 || s.n == 0) return;
  MYRIAD_CHECK(a != nullptr && b != nullptr && c != nullptr, "gemm: A, B and C must not be null");
  const bool wants_bias = s.epilogue != GemmEpilogue::none;
  MYRIAD_CHECK(wants_bias == (bias != nullptr),
               "gemm: the " << (wants_bias ? "bias epilogue needs a bias" : "bias is given without a bias epilogue"));
  MYRIAD_CHECK(!s.accumulate || !wants_bias, "gemm: accumulate (beta = 1) takes no epilogue");
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"A", a}, {"B", b}, {"C", c}, {"bias", bias}}) {
    MYRIAD_CHECK(ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0,
                 "gemm: " << name << " = " << ptr << " is not 16-byte aligned (cuBLASLt's fast paths need it)");
  }
  DeviceGuard guard(context.device());
  LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op;
  const cublasComputeType_t compute = s.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.handle, compute, CUDA_R_32F));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. A row-major (r, c) matrix is
  // a column-major (c, r) one, so cuBLAS's first operand is our B and its second our A, each
  // transposed exactly when ours is.
  const cublasOperation_t op_b = s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  if (wants_bias) {
    const cublasLtEpilogue_t epilogue =
        s.epilogue == GemmEpilogue::bias_gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const cudaDataType_t bias_type = output_type;
    MYRIAD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
  }
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  // cuBLAS A = our B: stored (N, K) row-major when transposed -> column-major (K, N), ld K;
  // else (K, N) row-major -> column-major (N, K), ld N. cuBLAS B = our A likewise; C^T (N, M), ld N.
  LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> first, second, out;
  if (s.transpose_b) {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&first.handle, s.type, u(s.k), u(s.n), s.k));
  } else {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&first.handle, s.type, u(s.n), u(s.k), s.n));
  }
  if (s.transpose_a) {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&second.handle, s.type, u(s.m), u(s.k), s.m));
  } else {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&second.handle, s.type, u(s.k), u(s.m), s.k));
  }
  MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.handle, output_type, u(s.n), u(s.m), s.n));
  LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference.handle));
  const std::size_t workspace = context.workspace_bytes();
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace, sizeof workspace));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(context.cublaslt(), op.handle, first.handle, second.handle,
                                                     out.handle, out.handle, preference.handle, 1, &heuristic, &found));
  MYRIAD_CHECK(found > 0, "gemm: cuBLASLt has no algorithm for M " << s.m << ", N " << s.n << ", K " << s.k
                                                                   << " of this type, transposition and epilogue");
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmul(context.cublaslt(), op.handle, &alpha, b, first.handle, a, second.handle, &beta, c,
                                     out.handle, c, out.handle, &heuristic.algo, context.workspace(), workspace,
                                     context.stream()));
}

void linear_gemm(const DeviceContext& context, const LinearGemm& s, const void* x, const void* weight,
                 const void* bias, void* y) {
  try {
    gemm(context,
         Gemm{.m = s.m, .n = s.n, .k = s.k, .transpose_b = true, .type = s.type, .epilogue = s.epilogue,
              .accumulate = s.accumulate},
         x, weight, bias, y);
  } catch (const Error& e) {
    MYRIAD_THROW("linear_gemm: " << e.what());
  }
}

}  // namespace myriad::cuda
