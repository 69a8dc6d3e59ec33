// CudaBackend::matmul_forward / matmul_backward over cuBLASLt (gemm.h), the contract of
// ops/matmul.h. Every operand's last two dims are a contiguous row-major matrix; its batch dims
// may have any strides (each batch's matrix is found from them). A 2-D b shared by a batch whose
// a is contiguous folds the batch into M (one GEMM, as the CPU op does); otherwise one GEMM per
// batch element. The backward's products per operand layout (A' = op(a), B' = op(b), G = grad_out):
//   grad_a = G B'^T  (a stored (M, K))    grad_a = B' G^T  (a stored (K, M), transpose_a)
//   grad_b = A'^T G  (b stored (K, N))    grad_b = G^T A'  (b stored (N, K), transpose_b)
// and a shared 2-D b sums its gradient over the batch (the first product overwrites unless the
// op accumulates, the rest add).
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/gemm.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/bias_add.h"

#include <algorithm>

namespace myriad::cuda {

namespace {

// A tensor's batch of row-major matrices: the matrix shape and where each batch element starts.
struct Matrices {
  const Tensor* tensor = nullptr;
  std::int64_t rows = 0, cols = 0, count = 1;
  bool shared = false;  // a 2-D operand used by every batch element

  void* at(std::int64_t batch) const {
    char* base = static_cast<char*>(tensor->raw_data());
    if (shared) return base;
    std::int64_t offset = 0, rest = batch;
    for (int d = tensor->dim() - 3; d >= 0; --d) {
      offset += (rest % tensor->size(d)) * tensor->stride(d);
      rest /= tensor->size(d);
    }
    return base + offset * static_cast<std::int64_t>(dtype_size(tensor->dtype()));
  }
};

Matrices matrices_of(const char* op, const char* name, const Tensor& t, std::int64_t batch) {
  MYRIAD_CHECK(t.stride(-1) == 1 && (t.size(-2) <= 1 || t.stride(-2) == t.size(-1)),
               op << " on " << t.device().str() << ": '" << name << "' " << t.describe()
                  << " must hold row-major matrices in its last two dims (strides [" << t.size(-1) << ", 1]), has "
                  << shape_string(t.strides()));
  return Matrices{&t, t.size(-2), t.size(-1), batch, t.dim() == 2 && batch > 1};
}

bool folds(const Tensor& t) { return t.is_contiguous(); }

// The cuBLASLt type of the operands (f32, bf16 or f16), and of an output: f32, or the 16-bit
// operands' type for an output the model keeps in it (ops/matmul.h; written, never accumulated).
cudaDataType_t operand_type(const Tensor& t) {
  return t.dtype() == DType::bf16 ? CUDA_R_16BF : t.dtype() == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

// One GEMM per batch element: c[i] (+)= op(a[i]) op(b[i]); `accumulate_after_first` makes every
// product after the first add into c (a shared c summing over the batch).
void gemm_per_batch(const DeviceContext& context, Gemm shape, const Matrices& a, const Matrices& b, const Matrices& c,
                    bool accumulate_after_first) {
  const std::int64_t count = std::max({a.count, b.count, c.count});
  for (std::int64_t i = 0; i < count; ++i) {
    Gemm step = shape;
    step.accumulate = shape.accumulate || (accumulate_after_first && i > 0);
    gemm(context, step, a.at(i), b.at(i), nullptr, c.at(i));
  }
}

}  // namespace

void CudaBackend::matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "matmul_forward";
  MYRIAD_CHECK(args.alpha == 1.0f, op << " on " << device().str() << ": alpha " << args.alpha
                                      << " is not supported (the cuBLASLt plans carry no scale); scale an operand");
  const std::int64_t batch = a.numel() / std::max<std::int64_t>(1, a.size(-2) * a.size(-1));
  const Matrices ma = matrices_of(op, "a", a, batch), mb = matrices_of(op, "b", b, batch);
  const Matrices mo = matrices_of(op, "out", out, batch);
  const std::int64_t m = args.transpose_a ? a.size(-1) : a.size(-2), k = args.transpose_a ? a.size(-2) : a.size(-1);
  const std::int64_t n = out.size(-1);
  Gemm shape{.m = m,
             .n = n,
             .k = k,
             .transpose_a = args.transpose_a,
             .transpose_b = args.transpose_b,
             .type = operand_type(a),
             .output_type = operand_type(out),
             .accumulate = args.accumulate};
  if (batch > 1 && b.dim() == 2 && !args.transpose_a && folds(a) && folds(out)) {
    shape.m = batch * m;  // (batch * M, K) @ op(b): one GEMM
    gemm(context_, shape, a.raw_data(), b.raw_data(), nullptr, out.raw_data());
    return;
  }
  gemm_per_batch(context_, shape, ma, mb, mo, false);
}

void CudaBackend::matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out,
                                  Tensor& grad_a, Tensor& grad_b) {
  const char* op = "matmul_backward";
  MYRIAD_CHECK(args.alpha == 1.0f, op << " on " << device().str() << ": alpha " << args.alpha
                                      << " is not supported (the cuBLASLt plans carry no scale); scale an operand");
  const bool ta = args.transpose_a, tb = args.transpose_b;
  const cudaDataType_t type = operand_type(a);
  const std::int64_t batch = a.numel() / std::max<std::int64_t>(1, a.size(-2) * a.size(-1));
  const std::int64_t m = ta ? a.size(-1) : a.size(-2), k = ta ? a.size(-2) : a.size(-1), n = grad_out.size(-1);
  const Matrices ma = matrices_of(op, "a", a, batch), mb = matrices_of(op, "b", b, batch);
  const Matrices mg = matrices_of(op, "grad_out", grad_out, batch);
  if (grad_a.defined()) {
    const Matrices mga = matrices_of(op, "grad_a", grad_a, batch);
    if (!ta) {  // grad_a (M, K) = G (M, N) @ B'^T
      gemm_per_batch(context_,
                     Gemm{.m = m,
                          .n = k,
                          .k = n,
                          .transpose_b = !tb,
                          .type = type,
                          .output_type = operand_type(grad_a),
                          .accumulate = args.accumulate_grad_a},
                     mg, mb, mga, false);
    } else {  // grad_a (K, M) = B' (K, N) @ G^T
      gemm_per_batch(context_,
                     Gemm{.m = k,
                          .n = m,
                          .k = n,
                          .transpose_a = tb,
                          .transpose_b = true,
                          .type = type,
                          .output_type = operand_type(grad_a),
                          .accumulate = args.accumulate_grad_a},
                     mb, mg, mga, false);
    }
  }
  if (!grad_b.defined()) return;
  const Matrices mgb = matrices_of(op, "grad_b", grad_b, batch);
  const bool shared = b.dim() == 2 && batch > 1;
  if (shared && !ta && folds(a) && folds(grad_out)) {  // the batch folded into the sum over rows
    const std::int64_t rows = batch * m;
    if (!tb) {  // grad_b (K, N) = a^T (K, rows) @ G (rows, N)
      gemm(context_,
           Gemm{.m = k,
                .n = n,
                .k = rows,
                .transpose_a = true,
                .type = type,
                .output_type = CUDA_R_32F,
                .accumulate = args.accumulate_grad_b},
           a.raw_data(), grad_out.raw_data(), nullptr, grad_b.raw_data());
    } else {  // grad_b (N, K) = G^T (N, rows) @ a (rows, K)
      gemm(context_,
           Gemm{.m = n,
                .n = k,
                .k = rows,
                .transpose_a = true,
                .type = type,
                .output_type = CUDA_R_32F,
                .accumulate = args.accumulate_grad_b},
           grad_out.raw_data(), a.raw_data(), nullptr, grad_b.raw_data());
    }
    return;
  }
  if (!tb) {  // grad_b (K, N) = A'^T (K, M) @ G (M, N)
    gemm_per_batch(context_,
                   Gemm{.m = k,
                        .n = n,
                        .k = m,
                        .transpose_a = !ta,
                        .type = type,
                        .output_type = CUDA_R_32F,
                        .accumulate = args.accumulate_grad_b},
                   ma, mg, mgb, shared);
  } else {  // grad_b (N, K) = G^T (N, M) @ A' (M, K)
    gemm_per_batch(context_,
                   Gemm{.m = n,
                        .n = k,
                        .k = m,
                        .transpose_a = true,
                        .transpose_b = ta,
                        .type = type,
                        .output_type = CUDA_R_32F,
                        .accumulate = args.accumulate_grad_b},
                   mg, ma, mgb, shared);
  }
}

// One GEMM with the bias (and GELU) fused as cuBLASLt epilogues (f32 or 16-bit x and weight, f32
// y and bias); GELU without a bias (no such epilogue) runs the activation kernel after the GEMM. A
// 16-bit y of the operands' format without bias or GELU: matmul_forward's GEMM writing it (one
// rounding); else that into f32 scratch, then one conversion (the epilogues' bias type is D's; the
// bias stays f32, so the sum is rounded once).
void CudaBackend::linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 Tensor& y) {
  if (y.dtype() != DType::f32 && y.dtype() == x.dtype() && !bias.defined() && !args.gelu) {
    const std::int64_t k = weight.size(1), m = x.numel() / std::max<std::int64_t>(k, 1);
    Tensor rows = y.view({m, weight.size(0)});
    matmul_forward(MatmulArgs{.transpose_b = true}, x.view({m, k}), weight, rows);
    return;
  }
  if (y.dtype() != DType::f32) {
    Tensor wide = empty(y.shape());  // stream-ordered scratch
    linear_forward(args, x, weight, bias, wide);
    copy(wide, y);
    return;
  }
  const std::int64_t n = weight.size(0), k = weight.size(1), m = x.numel() / std::max<std::int64_t>(k, 1);
  const GemmEpilogue epilogue = !bias.defined() ? GemmEpilogue::none
                                : args.gelu     ? GemmEpilogue::bias_gelu
                                                : GemmEpilogue::bias;
  linear_gemm(context_, LinearGemm{.m = m, .n = n, .k = k, .type = operand_type(x), .epilogue = epilogue}, x.raw_data(),
              weight.raw_data(), bias.defined() ? bias.raw_data() : nullptr, y.raw_data());
  if (args.gelu && !bias.defined()) gelu_forward(GeluArgs{}, y, y);
}

// y = gelu(x W^T + b) with the GELU's input kept: one GEMM with cuBLASLt's GELU_AUX(_BIAS)
// epilogue (y its output, pre_activation its aux), or — where cuBLASLt has no such algorithm (N not
// a multiple of 8, a type it lacks), and for a 16-bit y (kept as the next GEMM's operand) — the GEMM
// with the bias epilogue and the GELU kernel (which writes y's format).
void CudaBackend::linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation,
                                      Tensor& y) {
  DeviceGuard guard(context_.device());
  const std::int64_t n = weight.size(0), k = weight.size(1), m = x.numel() / std::max<std::int64_t>(k, 1);
  const Gemm shape{.m = m,
                   .n = n,
                   .k = k,
                   .transpose_b = true,
                   .type = operand_type(x),
                   .output_type = CUDA_R_32F,
                   .epilogue = bias.defined() ? GemmEpilogue::bias_gelu_aux : GemmEpilogue::gelu_aux};
  const bool y_is_f32 = y.dtype() == DType::f32;  // a 16-bit y: the GEMM with the bias epilogue, then the GELU
  if (y_is_f32 && k > 0 && n % 8 == 0 &&
      gemm_available(context_, shape, x.raw_data(), weight.raw_data(), y.raw_data())) {
    gemm(context_, shape, x.raw_data(), weight.raw_data(), bias.defined() ? bias.raw_data() : nullptr, y.raw_data(),
         pre_activation.raw_data());
    return;
  }
  if (pre_activation.dtype() != DType::f32) {  // kept in y's format: rounded once, the GELU of the rounded value
    Tensor wide = empty(pre_activation.shape());
    linear_forward(LinearArgs{}, x, weight, bias, wide);
    copy(wide, pre_activation);
    gelu_forward(GeluArgs{}, pre_activation, y);
    return;
  }
  linear_forward(LinearArgs{}, x, weight, bias, pre_activation);
  gelu_forward(GeluArgs{}, pre_activation, y);
}

// grad_pre = (grad_y W) * gelu'(pre_activation): one GEMM with cuBLASLt's DGELU(_BGRAD) epilogue
// (the bias gradient written into a scratch vector, then added: the op accumulates it), or the
// GEMM, the GELU backward kernel and the column sums where cuBLASLt has no such algorithm. A
// pre-activation kept in 16 bits is DGELU's aux with grad_pre as the GEMM's 16-bit output (the
// bias gradient then from the column sums), or the GEMM into f32 scratch and the kernel reading
// the kept pre-activation and writing grad_pre in its format.
void CudaBackend::linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation,
                                        Tensor& grad_pre, Tensor& grad_bias) {
  DeviceGuard guard(context_.device());
  const std::int64_t n = weight.size(0), f = weight.size(1), m = grad_y.numel() / std::max<std::int64_t>(n, 1);
  const Gemm shape{.m = m,
                   .n = f,
                   .k = n,
                   .type = operand_type(grad_y),
                   .output_type = CUDA_R_32F,
                   .epilogue = grad_bias.defined() ? GemmEpilogue::dgelu_bgrad : GemmEpilogue::dgelu};
  const bool kept_in_format = pre_activation.dtype() != DType::f32;
  if (kept_in_format && grad_y.dtype() == pre_activation.dtype() && n > 0 && f % 8 == 0) {
    // DGELU with the kept pre-activation as a 16-bit aux and grad_pre as the 16-bit output (no
    // BGRAD: its bias gradient would be rounded to the output type); the bias gradient from the
    // column sums of the rounded values, as the CPU's.
    const Gemm narrow{.m = m,
                      .n = f,
                      .k = n,
                      .type = operand_type(grad_y),
                      .output_type = operand_type(grad_y),
                      .epilogue = GemmEpilogue::dgelu};
    if (gemm_available(context_, narrow, grad_y.raw_data(), weight.raw_data(), grad_pre.raw_data())) {
      gemm(context_, narrow, grad_y.raw_data(), weight.raw_data(), nullptr, grad_pre.raw_data(),
           const_cast<void*>(pre_activation.raw_data()));
      if (grad_bias.defined()) {
        Tensor no_grad_x;
        bias_add_backward(BiasAddArgs{}, grad_pre, no_grad_x, grad_bias);
      }
      return;
    }
  }
  if (!kept_in_format && n > 0 && f % 8 == 0 &&
      gemm_available(context_, shape, grad_y.raw_data(), weight.raw_data(), grad_pre.raw_data())) {
    Tensor bias_grad = grad_bias.defined() ? empty({f}) : Tensor();  // stream-ordered scratch
    gemm(context_, shape, grad_y.raw_data(), weight.raw_data(), bias_grad.defined() ? bias_grad.raw_data() : nullptr,
         grad_pre.raw_data(), const_cast<void*>(pre_activation.raw_data()));
    if (bias_grad.defined()) add_forward(AddArgs{}, grad_bias, bias_grad, grad_bias);
    return;
  }
  const Tensor w2 = weight.view({n, f});
  Tensor product = kept_in_format ? empty({m, f}) : grad_pre.view({m, f});
  matmul_forward(MatmulArgs{}, grad_y.view({m, n}), w2, product);
  gelu_backward(GeluArgs{}, pre_activation, product.view(grad_pre.shape()), grad_pre);
  if (grad_bias.defined()) {
    Tensor no_grad_x;
    bias_add_backward(BiasAddArgs{}, grad_pre, no_grad_x, grad_bias);
  }
}

// Weight-only INT8: the tiled kernel reads int8 weights and dequantises them in shared memory.
void CudaBackend::int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                                      const Tensor& bias, Tensor& y) {
  DeviceGuard guard(context_.device());
  const std::int64_t n = q.size(0), k = q.size(1), rows = k == 0 ? x.numel() : x.numel() / k;
  if (k == 0) {  // an empty sum: y = bias (or 0)
    fill(y, 0.0f);
    if (bias.defined()) bias_add_forward(BiasAddArgs{}, y, bias, y);
    return;
  }
  int8_linear_forward_f32(x.data<float>(), q.data<std::int8_t>(), scales.data<float>(),
                          bias.defined() ? bias.data<float>() : nullptr, y.data<float>(), rows, n, k, args.group_size,
                          context_.stream());
}

const std::string& CudaBackend::fp8_unavailable() const {
  if (fp8_why_not_) return *fp8_why_not_;
  int major = 0, minor = 0;
  MYRIAD_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, context_.device()));
  MYRIAD_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, context_.device()));
  fp8_why_not_ = major * 10 + minor >= 89
                     ? std::string()
                     : "cuda:" + std::to_string(context_.device()) + " is compute capability " + std::to_string(major) +
                           "." + std::to_string(minor) + "; FP8 tensor cores need 8.9 (Ada) or 9.0 (Hopper) and newer";
  return *fp8_why_not_;
}

void CudaBackend::fp8_quantize(const Tensor& x, const Tensor& scale, Tensor& out, Tensor& out_t, Tensor& amax) {
  DeviceGuard guard(context_.device());
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  fp8_quantize_f32(x.data<float>(), static_cast<std::uint8_t*>(out.raw_data()),
                   out_t.defined() ? static_cast<std::uint8_t*>(out_t.raw_data()) : nullptr,
                   amax.defined() ? amax.data<float>() : nullptr, rows, cols, scale.data<float>(),
                   out.dtype() == DType::f8e5m2, context_.stream());
}

// out (M, N) = (a_dequant a) (M, K) (b_dequant b) (N, K)^T: cuBLASLt's FP8 GEMM in its "TN"
// layout, the dequantisation factors read from the device when it runs (gemm.h).
void CudaBackend::fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
                           const Tensor& b_dequant, Tensor& out) {
  MYRIAD_CHECK(fp8_unavailable().empty(), "fp8_gemm: " << fp8_unavailable());
  const std::int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  if (k == 0) {
    if (!args.accumulate) fill(out, 0.0f);
    return;
  }
  auto fp8_type = [](const Tensor& t) { return t.dtype() == DType::f8e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
  gemm(context_,
       Gemm{.m = m,
            .n = n,
            .k = k,
            .transpose_b = true,
            .type = fp8_type(a),
            .b_type = fp8_type(b),
            .a_scale = a_dequant.data<float>(),
            .b_scale = b_dequant.data<float>(),
            .output_type = CUDA_R_32F,
            .accumulate = args.accumulate},
       a.raw_data(), b.raw_data(), nullptr, out.raw_data());
}

// The INT8 token embedding: only the looked-up rows are dequantised.
void CudaBackend::int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                                         Tensor& out) {
  DeviceGuard guard(context_.device());
  int8_embedding_forward_f32(ids.data<std::int32_t>(), q.data<std::int8_t>(), scales.data<float>(), out.data<float>(),
                             ids.numel(), q.size(1), args.group_size, context_.stream());
}

}  // namespace myriad::cuda
