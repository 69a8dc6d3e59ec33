// gemm / linear_gemm: cuBLASLt descriptors for row-major products, the algorithm cuBLASLt's
// heuristic picks first, and the per-context cache of both (GemmPlans).
//
// A plan is made once per distinct shape — sizes, transpositions, types, epilogue, TF32 and the
// alignment class (16..256 bytes) of A, B and C — and reused: a GPT-2 step runs ~150 GEMMs of
// a dozen shapes, so after the first step no descriptor is created and no heuristic is queried.
// The bias, aux and (FP8) operand scale pointers are the only per-call descriptor attributes. The heuristic is told
// each pointer's real alignment: cuBLASLt otherwise assumes 256 bytes and may choose a kernel that the offsets of a
// flat parameter buffer (64-byte steps) do not allow.
#include "myriad/cuda/gemm.h"

#include <cublasLt.h>

#include <map>
#include <memory>
#include <tuple>

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

namespace {

template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtHandle {
  T handle = nullptr;
  LtHandle() = default;
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  ~LtHandle() {
    if (handle != nullptr) (void)Destroy(handle);
  }
};

std::size_t element_bytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F:
      return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
    default:
      MYRIAD_THROW("gemm: element type " << static_cast<int>(type) << " is not f32, bf16, f16 or FP8");
  }
}

// The largest power of two (at most 256) dividing the address.
std::uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

bool is_fp8(cudaDataType_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }

bool uses_bias(GemmEpilogue e) {
  return e == GemmEpilogue::bias || e == GemmEpilogue::bias_gelu || e == GemmEpilogue::bias_gelu_aux ||
         e == GemmEpilogue::dgelu_bgrad;
}

bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::gelu_aux || e == GemmEpilogue::bias_gelu_aux || e == GemmEpilogue::dgelu ||
         e == GemmEpilogue::dgelu_bgrad;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::bias_gelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::bias_gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::dgelu_bgrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  }
  MYRIAD_THROW("gemm: invalid epilogue " << static_cast<int>(e));
}

// Everything a plan depends on (B's type folded in with A's: type * 64 + b_type).
using PlanKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, int, int, int, bool, std::uint32_t,
                           std::uint32_t, std::uint32_t>;

}  // namespace

struct GemmPlan {
  LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op;
  LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> first, second, out;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // cuBLASLt had an algorithm (else gemm() throws naming the shape)
};

class GemmPlans {
 public:
  std::map<PlanKey, std::unique_ptr<GemmPlan>> plans;
};

void DeviceContext::GemmPlansDeleter::operator()(GemmPlans* plans) const noexcept { delete plans; }

GemmPlans& DeviceContext::gemm_plans() const {
  if (!gemm_plans_) gemm_plans_.reset(new GemmPlans());
  return *gemm_plans_;
}

namespace {

// Descriptors for `s` and the heuristic's first algorithm under the given alignments.
std::unique_ptr<GemmPlan> make_plan(const DeviceContext& context, const Gemm& s, cudaDataType_t output_type,
                                    std::uint32_t align_a, std::uint32_t align_b, std::uint32_t align_c) {
  auto plan = std::make_unique<GemmPlan>();
  const cublasComputeType_t compute = s.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op.handle, compute, CUDA_R_32F));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T. A row-major (r, c) matrix is
  // a column-major (c, r) one, so cuBLAS's first operand is our B and its second our A, each
  // transposed exactly when ours is.
  const cublasOperation_t op_b = s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op.handle, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op.handle, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  if (s.epilogue != GemmEpilogue::none) {
    const cublasLtEpilogue_t epilogue = lt_epilogue(s.epilogue);
    MYRIAD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (uses_bias(s.epilogue)) {
      const cudaDataType_t bias_type = output_type;
      MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op.handle, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bias_type, sizeof bias_type));
    }
    if (uses_aux(s.epilogue)) {
      // The aux matrix is laid out like C^T (column-major N x M): leading dimension N.
      const std::int64_t aux_ld = s.n;
      MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                         sizeof aux_ld));
    }
  }
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  // cuBLAS A = our B: stored (N, K) row-major when transposed -> column-major (K, N), ld K;
  // else (K, N) row-major -> column-major (N, K), ld N. cuBLAS B = our A likewise; C^T (N, M), ld N.
  const cudaDataType_t b_type = s.b_type.value_or(s.type);
  if (s.transpose_b) {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->first.handle, b_type, u(s.k), u(s.n), s.k));
  } else {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->first.handle, b_type, u(s.n), u(s.k), s.n));
  }
  if (s.transpose_a) {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->second.handle, s.type, u(s.m), u(s.k), s.m));
  } else {
    MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->second.handle, s.type, u(s.k), u(s.m), s.k));
  }
  MYRIAD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->out.handle, output_type, u(s.n), u(s.m), s.n));

  LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference.handle));
  const std::size_t workspace = context.workspace_bytes();
  MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace, sizeof workspace));
  // cuBLAS's A is our B and its B our A; C and D are both our C.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
  for (const auto& [attribute, bytes] : alignments) {
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.handle, attribute, &bytes, sizeof bytes));
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  // cuBLASLt answers a shape it has no algorithm for with CUBLAS_STATUS_NOT_SUPPORTED (not with
  // zero results): both become the error that names the shape.
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(context.cublaslt(), plan->op.handle, plan->first.handle, plan->second.handle,
                                     plan->out.handle, plan->out.handle, preference.handle, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED)
    found = 0;
  else
    MYRIAD_CUBLAS_CHECK(status);
  plan->found = found > 0;
  plan->algo = heuristic.algo;
  return plan;
}

}  // namespace

namespace {

// Checks `s` and the pointers (null ones are skipped).
void check_gemm(const Gemm& s, const void* a, const void* b, const void* c) {
  MYRIAD_CHECK(s.m >= 0 && s.n >= 0 && s.k >= 0,
               "gemm: sizes must be >= 0, got M " << s.m << ", N " << s.n << ", K " << s.k);
  (void)element_bytes(s.type);  // validates the type
  const cudaDataType_t b_type = s.b_type.value_or(s.type);
  (void)element_bytes(b_type);
  const cudaDataType_t output_type = s.output_type.value_or(s.type);
  (void)element_bytes(output_type);
  MYRIAD_CHECK(output_type == s.type || output_type == CUDA_R_32F,
               "gemm: the output type must be the inputs' type or f32");
  MYRIAD_CHECK(!s.tf32 || s.type == CUDA_R_32F, "gemm: tf32 applies to f32 inputs only");
  if (is_fp8(s.type) || is_fp8(b_type)) {
    MYRIAD_CHECK(is_fp8(s.type) && is_fp8(b_type) && !(s.type == CUDA_R_8F_E5M2 && b_type == CUDA_R_8F_E5M2),
                 "gemm: FP8 takes two FP8 operands, not both E5M2");
    MYRIAD_CHECK(output_type == CUDA_R_32F && s.epilogue == GemmEpilogue::none,
                 "gemm: FP8 products are written as f32, without an epilogue");
    MYRIAD_CHECK(s.transpose_b && !s.transpose_a,
                 "gemm: FP8 operands must both be reduced along their rows (transpose_b, not transpose_a)");
  } else {
    MYRIAD_CHECK(b_type == s.type, "gemm: A and B differ in type (only FP8 operands may)");
    MYRIAD_CHECK(s.a_scale == nullptr && s.b_scale == nullptr, "gemm: operand scales apply to FP8 operands only");
  }
  MYRIAD_CHECK(!s.accumulate || s.epilogue == GemmEpilogue::none, "gemm: accumulate (beta = 1) takes no epilogue");
  // The aux matrix is of C's type (cuBLASLt's default outside FP8): f32, or a 16-bit C of the
  // operands' format for DGELU (a kept pre-activation and its gradient; the GELU_AUX forward would
  // take the GELU of the unrounded value, so it runs f32 only).
  const bool sixteen_bit_dgelu = s.epilogue == GemmEpilogue::dgelu && output_type == s.type &&
                                 (output_type == CUDA_R_16BF || output_type == CUDA_R_16F);
  MYRIAD_CHECK(!uses_aux(s.epilogue) || ((output_type == CUDA_R_32F || sixteen_bit_dgelu) && s.n % 8 == 0),
               "gemm: a GELU aux epilogue needs f32 C (or, for DGELU, 16-bit C of the operands' type) and N a "
               "multiple of 8, got N "
                   << s.n);
  // Operands need only their element's alignment: the plan tells cuBLASLt each pointer's real
  // alignment (make_plan), and its heuristic picks a kernel that allows it (views at odd offsets,
  // such as a KV cache row or a batched slice, take slower paths but are exact).
  const std::size_t input_bytes = element_bytes(s.type), output_bytes = element_bytes(output_type);
  for (auto [name, ptr, bytes] : {std::tuple<const char*, const void*, std::size_t>{"A", a, input_bytes},
                                  {"B", b, element_bytes(b_type)},
                                  {"C", c, output_bytes}}) {
    MYRIAD_CHECK(ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0,
                 "gemm: " << name << " = " << ptr << " is not " << bytes << "-byte aligned");
  }
}

// The plan of a checked, non-empty `s` at these pointers' alignments, made once per key.
GemmPlan& plan_of(const DeviceContext& context, const Gemm& s, const void* a, const void* b, const void* c) {
  const cudaDataType_t b_type = s.b_type.value_or(s.type);
  const cudaDataType_t output_type = s.output_type.value_or(s.type);
  DeviceGuard guard(context.device());
  const PlanKey key{s.m,
                    s.n,
                    s.k,
                    s.transpose_a,
                    s.transpose_b,
                    static_cast<int>(s.type) * 64 + static_cast<int>(b_type),
                    static_cast<int>(output_type),
                    static_cast<int>(s.epilogue),
                    s.tf32,
                    alignment_of(a),
                    alignment_of(b),
                    alignment_of(c)};
  std::unique_ptr<GemmPlan>& plan = context.gemm_plans().plans[key];
  if (!plan) plan = make_plan(context, s, output_type, std::get<9>(key), std::get<10>(key), std::get<11>(key));
  return *plan;
}

}  // namespace

bool gemm_available(const DeviceContext& context, const Gemm& s, const void* a, const void* b, const void* c) {
  check_gemm(s, a, b, c);
  if (s.m == 0 || s.n == 0) return true;
  return plan_of(context, s, a, b, c).found;
}

void gemm(const DeviceContext& context, const Gemm& s, const void* a, const void* b, const void* bias, void* c,
          void* aux) {
  check_gemm(s, a, b, c);
  if (s.m == 0 || s.n == 0) return;
  MYRIAD_CHECK(a != nullptr && b != nullptr && c != nullptr, "gemm: A, B and C must not be null");
  const bool wants_bias = uses_bias(s.epilogue);
  MYRIAD_CHECK(wants_bias == (bias != nullptr),
               "gemm: the " << (wants_bias ? "epilogue needs a bias vector" : "bias is given without a bias epilogue"));
  MYRIAD_CHECK(uses_aux(s.epilogue) == (aux != nullptr),
               "gemm: the " << (aux == nullptr ? "GELU aux epilogue needs an aux matrix"
                                               : "aux matrix is given without an aux epilogue"));
  // The bias vector of an epilogue keeps the 16 bytes it is tested at (tests/gpu/test_gemm.cpp);
  // the aux matrix likewise.
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"bias", bias}, {"aux", aux}}) {
    MYRIAD_CHECK(ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0,
                 "gemm: " << name << " = " << ptr << " is not 16-byte aligned");
  }
  GemmPlan& plan = plan_of(context, s, a, b, c);
  MYRIAD_CHECK(plan.found, "gemm: cuBLASLt has no algorithm for M " << s.m << ", N " << s.n << ", K " << s.k
                                                                    << " of this type, transposition and epilogue");
  DeviceGuard guard(context.device());
  if (wants_bias) {
    MYRIAD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op.handle, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  if (aux != nullptr) {
    MYRIAD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  }
  if (is_fp8(s.type)) {  // set on every call (null included): the plan is shared by every call of its shape
    // cuBLAS's A is our B and its B our A (make_plan).
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op.handle, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &s.b_scale,
                                                       sizeof s.b_scale));
    MYRIAD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op.handle, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &s.a_scale,
                                                       sizeof s.a_scale));
  }
  const float alpha = s.alpha, beta = s.accumulate ? 1.0f : 0.0f;
  MYRIAD_CUBLAS_CHECK(cublasLtMatmul(context.cublaslt(), plan.op.handle, &alpha, b, plan.first.handle, a,
                                     plan.second.handle, &beta, c, plan.out.handle, c, plan.out.handle, &plan.algo,
                                     context.workspace(), context.workspace_bytes(), context.stream()));
}

void linear_gemm(const DeviceContext& context, const LinearGemm& s, const void* x, const void* weight, const void* bias,
                 void* y) {
  try {
    gemm(context,
         Gemm{.m = s.m,
              .n = s.n,
              .k = s.k,
              .transpose_b = true,
              .type = s.type,
              .output_type = CUDA_R_32F,  // y is f32 whatever the operands
              .epilogue = s.epilogue,
              .accumulate = s.accumulate},
         x, weight, bias, y);
  } catch (const Error& e) {
    MYRIAD_THROW("linear_gemm: " << e.what());
  }
}

}  // namespace myriad::cuda
