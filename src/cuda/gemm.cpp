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
    default: MYRIAD_THROW("linear_gemm: element type " << static_cast<int>(type) << " is not f32, bf16 or f16");
  }
}

}  // namespace

void linear_gemm(const DeviceContext& context, const LinearGemm& s, const void* x, const void* weight,
                 const void* bias, void* y) {
  MYRIAD_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0,
               "linear_gemm: sizes must be >= 0, got M " << s.m << ", N " << s.n << ", K " << s.k);
  (void)element_bytes(s.type);  // validates the type
  if (s.m == 0 || s.n == 0) return;
  MYRIAD_CHECK(x != nullptr && weight != nullptr && y != nullptr, "linear_gemm: x, weight and y must not be null");
  const bool wants_bias = s.epilogue != GemmEpilogue::none;
  MYRIAD_CHECK(wants_bias == (bias != nullptr),
               "linear_gemm: the " << (wants_bias ? "bias epilogue needs a bias" : "bias is given without a bias epilogue"));
  MYRIAD_CHECK(!s.accumulate || !wants_bias, "linear_gemm: accumulate (beta = 1) takes no epilogue");
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"x", x}, {"weight", weight}, {"y", y}, {"bias", bias}}) {
    MYRIAD_CHECK(ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0,
                 "linear_gemm: " << name << " = " << ptr << " is not 16-byte aligned (cuBLASLt's fast paths need it)");
  }
  DeviceGuard guard(context.device());
  LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose));
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep));
  if (wants_bias) {
    const cublasLtEpilogue_t epilogue =
        s.epilogue == GemmEpilogue::bias_gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const cudaDataType_t bias_type = s.type;
    MYRIAD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.handle, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
  }
  // Column-major views: W^T as A (K x N stored, transposed), x^T as B (K x M), y^T as C/D (N x M).
  LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> a, b, c;
  MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a.handle, s.type, static_cast<std::uint64_t>(s.k),
                                                 static_cast<std::uint64_t>(s.n), s.k));
  MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b.handle, s.type, static_cast<std::uint64_t>(s.k),
                                                 static_cast<std::uint64_t>(s.m), s.k));
  MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.handle, s.type, static_cast<std::uint64_t>(s.n),
                                                 static_cast<std::uint64_t>(s.m), s.n));
  LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference.handle));
  const std::size_t workspace = context.workspace_bytes();
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace, sizeof workspace));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(context.cublaslt(), op.handle, a.handle, b.handle, c.handle,
                                                     c.handle, preference.handle, 1, &heuristic, &found));
  MYRIAD_CHECK(found > 0, "linear_gemm: cuBLASLt has no algorithm for M " << s.m << ", N " << s.n << ", K " << s.k
                                                                          << " of this type and epilogue");
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmul(context.cublaslt(), op.handle, &alpha, weight, a.handle, x, b.handle, &beta, y,
                                     c.handle, y, c.handle, &heuristic.algo, context.workspace(), workspace,
                                     context.stream()));
}

}  // namespace myriad::cuda
