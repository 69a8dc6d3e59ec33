// CudaBackend: the mixture-of-experts ops — token routing over the kernels of kernels/moe/ and
// the grouped matmul over cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, CUDA >= 12.5).
//
// Grouped matmul: each product (out; grad_x; grad_weight) is ONE cuBLAS call that covers every
// non-empty group, each group a problem of its own size (group_count = non-empty groups, one
// matrix each). Row-major matrices are column-major transposes, so with x_g (n, K), W_g (M, K),
// dy_g (n, M) the three products are, in cuBLAS's column-major terms:
//   out_g^T (M, n)  = W_g^T x_g^T      transa T, transb N, m M, n n, k K, lda K, ldb K, ldc M
//   dx_g^T  (K, n)  = W_g   dy_g^T     transa N, transb N, m K, n n, k M, lda K, ldb M, ldc K
//   dW_g^T  (K, M) += x_g^T dy_g       transa N, transb T, m K, n M, k n, lda K, ldb M, ldc K
// cuBLAS reads the A / B / C pointer arrays from device memory: they travel, with the offsets
// the bias kernels read, in one upload per op (copy_from_host, which waits for the stream). Groups
// of one size (capacity routing) instead run one cuBLASLt GEMM per group and the per-group bias
// kernels, with nothing uploaded (a CUDA graph records them). All
// GEMMs are f32 in, f32 out, CUBLAS_COMPUTE_32F (no TF32): cuBLAS's grouped GEMM has no
// 16-bit-input / f32-output form, so bf16 / f16 operands are first widened to f32 on the device
// (exact), which keeps the op's contract (exact products, f32 sums) at the f32 GEMM rate.
//
// Token routing: the kernels flag indices outside their range on the device; each op then reads
// the flag (a wait for the stream, as embedding does) and reports the index and its position as
// the CPU op does. Duplicate rows in slot are not checked here (ops/token_routing.h).
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "myriad/cuda/check.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"
#include "kernel_pointers.h"

namespace myriad::cuda {

namespace {

// The value of element `flat` of a contiguous i32 device tensor (waits for the stream).
std::int32_t index_at(CudaBackend& backend, const Tensor& indices, long long flat) {
  const Tensor one = indices.view({indices.numel()}).slice(0, flat, flat + 1);
  return backend.copy_to_host(one).data<std::int32_t>()[0];
}

// Host words bound for the device in one copy: offsets and cuBLAS pointer arrays.
class DeviceWords {
 public:
  std::size_t append(const std::vector<std::int64_t>& values) {
    const std::size_t at = words_.size();
    words_.insert(words_.end(), values.begin(), values.end());
    return at;
  }
  std::size_t append(const std::vector<const float*>& pointers) {
    const std::size_t at = words_.size();
    for (const float* p : pointers) words_.push_back(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p)));
    return at;
  }
  void upload(CudaBackend& backend) {
    if (words_.empty()) return;
    Tensor host = Tensor::empty({static_cast<std::int64_t>(words_.size())}, DType::i64);
    std::copy(words_.begin(), words_.end(), host.data<std::int64_t>());
    device_ = backend.copy_from_host(host);
  }
  std::int64_t* at(std::size_t index) const { return device_.data<std::int64_t>() + index; }

 private:
  std::vector<std::int64_t> words_;
  Tensor device_;
};

// One grouped GEMM: per problem i, C_i = op(A_i) op(B_i) (+ C_i when accumulate), column-major.
struct GroupedGemm {
  GroupedGemm(cublasOperation_t a_op, cublasOperation_t b_op, bool add_into_c)
      : trans_a(a_op), trans_b(b_op), accumulate(add_into_c) {}

  cublasOperation_t trans_a, trans_b;
  bool accumulate;
  std::vector<int> m, n, k, lda, ldb, ldc;
  std::vector<const float*> a, b, c;
  std::size_t a_at = 0, b_at = 0, c_at = 0;  // where the pointer arrays are in the DeviceWords

  void add(const char* op, std::int64_t rows, std::int64_t cols, std::int64_t inner, std::int64_t ld_a,
           std::int64_t ld_b, std::int64_t ld_c, const float* pa, const float* pb, float* pc) {
    for (std::int64_t v : {rows, cols, inner, ld_a, ld_b, ld_c}) {
      MYRIAD_CHECK(v <= INT_MAX,
                   op << ": a group's GEMM dimension " << v << " exceeds what cublasGemmGroupedBatchedEx takes (int)");
    }
    m.push_back(static_cast<int>(rows));
    n.push_back(static_cast<int>(cols));
    k.push_back(static_cast<int>(inner));
    lda.push_back(static_cast<int>(ld_a));
    ldb.push_back(static_cast<int>(ld_b));
    ldc.push_back(static_cast<int>(ld_c));
    a.push_back(pa);
    b.push_back(pb);
    c.push_back(pc);
  }
  bool empty() const { return m.empty(); }
  void stage(DeviceWords& words) {
    a_at = words.append(a);
    b_at = words.append(b);
    c_at = words.append(c);
  }
  void run(const DeviceContext& context, const DeviceWords& words) const {
    if (empty()) return;
    const int count = static_cast<int>(m.size());
    const std::vector<cublasOperation_t> ta(count, trans_a), tb(count, trans_b);
    const std::vector<float> alpha(count, 1.0f), beta(count, accumulate ? 1.0f : 0.0f);
    const std::vector<int> one_each(count, 1);
    MYRIAD_CUBLAS_CHECK(
        cublasGemmGroupedBatchedEx(context.cublas(), ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                                   reinterpret_cast<const void* const*>(words.at(a_at)), CUDA_R_32F, lda.data(),
                                   reinterpret_cast<const void* const*>(words.at(b_at)), CUDA_R_32F, ldb.data(),
                                   beta.data(), reinterpret_cast<void* const*>(words.at(c_at)), CUDA_R_32F, ldc.data(),
                                   count, one_each.data(), CUBLAS_COMPUTE_32F));
  }
};

}  // namespace

// ---- token routing ------------------------------------------------------------------------------

void CudaBackend::gather_rows(const Tensor& x, const Tensor& source, Tensor& out, const RowIndexArgs& args) {
  Tensor flag = args.indices_checked ? Tensor() : bad_index_flag();
  DeviceGuard guard(context_.device());
  long long* bad_index = args.indices_checked ? unread_index_flag() : static_cast<long long*>(flag.raw_data());
  gather_rows_f32(floats(x), source.data<std::int32_t>(), floats(out), bad_index, out.size(0), x.size(0), x.size(1),
                  context_.stream());
  if (args.indices_checked) return;
  const long long bad = read_bad_index(flag);
  MYRIAD_CHECK(bad == LLONG_MAX, "gather_rows: source index " << index_at(*this, source, bad) << " at position " << bad
                                                              << " is outside [-1, N) with N = " << x.size(0));
}

void CudaBackend::combine_rows_forward(const Tensor& rows, const Tensor& slot, const Tensor& weight, Tensor& out,
                                       const RowIndexArgs& args) {
  Tensor flag = args.indices_checked ? Tensor() : bad_index_flag();
  const std::int64_t k = slot.size(1);
  DeviceGuard guard(context_.device());
  long long* bad_index = args.indices_checked ? unread_index_flag() : static_cast<long long*>(flag.raw_data());
  combine_rows_forward_f32(floats(rows), slot.data<std::int32_t>(), floats(weight), floats(out), bad_index,
                           slot.size(0), k, rows.size(0), rows.size(1), context_.stream());
  if (args.indices_checked) return;
  const long long bad = read_bad_index(flag);
  MYRIAD_CHECK(bad == LLONG_MAX, "combine_rows_forward: row index "
                                     << index_at(*this, slot, bad) << " at slot position [" << bad / k << ", "
                                     << bad % k << "] is outside [-1, R) with R = " << rows.size(0));
}

void CudaBackend::combine_rows_backward(const Tensor& rows, const Tensor& slot, const Tensor& weight,
                                        const Tensor& grad_out, Tensor& grad_rows, Tensor& grad_weight,
                                        const RowIndexArgs& args) {
  Tensor flag = args.indices_checked ? Tensor() : bad_index_flag();
  const std::int64_t k = slot.size(1);
  DeviceGuard guard(context_.device());
  long long* bad_index = args.indices_checked ? unread_index_flag() : static_cast<long long*>(flag.raw_data());
  combine_rows_backward_f32(floats(rows), slot.data<std::int32_t>(), floats(weight), floats(grad_out),
                            floats(grad_rows), floats(grad_weight), bad_index, slot.size(0), k, grad_rows.size(0),
                            grad_rows.size(1), context_.stream());
  if (args.indices_checked) return;
  const long long bad = read_bad_index(flag);
  MYRIAD_CHECK(bad == LLONG_MAX, "combine_rows_backward: row index "
                                     << index_at(*this, slot, bad) << " at slot position [" << bad / k << ", "
                                     << bad % k << "] is outside [-1, R) with R = " << grad_rows.size(0));
}

// ---- routing decisions --------------------------------------------------------------------------

namespace {

RouteShape route_shape(const RouteArgs& args, const Tensor& logits) {
  const std::int64_t N = logits.size(0);
  return RouteShape{.tokens = N,
                    .experts = logits.size(1),
                    .top_k = args.top_k,
                    .seq_len = args.seq_len,
                    .capacity = args.capacity,
                    .padded = args.padded,
                    .expert_block = args.padded ? expert_block_rows(args, N) : 0,
                    .sigmoid = args.sigmoid,
                    .normalize_top_k = args.normalize_top_k,
                    .context_ranks = args.context_ranks,
                    .context_rank = args.context_rank};
}

const std::int64_t* context_counts(const Tensor& context) {
  return context.defined() ? context.data<std::int64_t>() : nullptr;
}

}  // namespace

void CudaBackend::route_tokens(const RouteArgs& args, const Tensor& logits, RoutedTokens& out, const Tensor& context) {
  const RouteShape shape = route_shape(args, logits);
  const std::int64_t scratch_bytes = route_tokens_scratch_bytes(shape);
  Tensor scratch = empty({scratch_bytes}, DType::i8);  // stream-ordered: reused in order after return
  DeviceGuard guard(context_.device());
  route_tokens_f32(shape, floats(logits), context_counts(context), out.expert.data<std::int32_t>(), floats(out.weight),
                   out.slot.data<std::int32_t>(), out.source.data<std::int32_t>(), out.source.numel(),
                   out.counts.data<std::int64_t>(), out.totals.defined() ? out.totals.data<double>() : nullptr,
                   scratch.raw_data(), scratch_bytes, context_.stream());
}

void CudaBackend::route_tokens_backward(const RouteArgs& args, const Tensor& logits, const Tensor& expert,
                                        const Tensor& grad_weight, double aux_scale, double z_scale,
                                        Tensor& grad_logits, const Tensor& context, const Tensor& scale) {
  const RouteShape shape = route_shape(args, logits);
  const std::int64_t scratch_bytes = route_tokens_scratch_bytes(shape);
  Tensor scratch = empty({scratch_bytes}, DType::i8);
  DeviceGuard guard(context_.device());
  route_tokens_backward_f32(shape, floats(logits), context_counts(context), expert.data<std::int32_t>(),
                            floats(grad_weight), aux_scale, z_scale, scale.defined() ? floats(scale) : nullptr,
                            floats(grad_logits), scratch.raw_data(), scratch_bytes, context_.stream());
}

void CudaBackend::count_route_choices(const RouteArgs& args, const Tensor& logits, Tensor& counts) {
  const RouteShape shape = route_shape(args, logits);
  const std::int64_t scratch_bytes = count_route_choices_scratch_bytes(shape);
  Tensor scratch = empty({scratch_bytes}, DType::i8);
  DeviceGuard guard(context_.device());
  count_route_choices_f32(shape, floats(logits), counts.data<std::int64_t>(), scratch.raw_data(), scratch_bytes,
                          context_.stream());
}

// ---- grouped matmul -----------------------------------------------------------------------------

namespace {

// A 16-bit operand's exact f32 values on the device (the tensor itself when f32).
Tensor widened(CudaBackend& backend, const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor wide = backend.empty(t.shape());
  backend.copy(t, wide);
  return wide;
}

// Groups of one size (capacity routing: offsets g * n): the products are the batched matmul's over
// (G, n, ·) views (one f32 cuBLASLt GEMM per group, pointers from the shapes) and the bias and its
// gradient run per group — nothing is uploaded, and a CUDA graph can record them. Groups of different sizes (dropless
// routing) take cuBLAS's grouped GEMM, whose pointer arrays are uploaded per call.
bool groups_of_one_size(const std::vector<std::int64_t>& offsets) {
  if (offsets.size() < 2) return false;
  const std::int64_t n = offsets[1] - offsets[0];
  for (std::size_t g = 1; g + 1 < offsets.size(); ++g) {
    if (offsets[g + 1] - offsets[g] != n) return false;
  }
  return n > 0;
}

}  // namespace

void CudaBackend::grouped_matmul_forward(const GroupedMatmulArgs&, const Tensor& x_in, const Tensor& weight_in,
                                         const Tensor& bias, const std::vector<std::int64_t>& offsets, Tensor& out) {
  const char* op = "grouped_matmul_forward";
  const std::int64_t groups = weight_in.size(0), M = weight_in.size(1), K = weight_in.size(2), R = x_in.size(0);
  if (R == 0 || M == 0) return;
  const Tensor x = widened(*this, x_in), weight = widened(*this, weight_in);
  if (groups_of_one_size(offsets)) {
    const std::int64_t n = offsets[1];
    if (K == 0) {
      zero(out);  // empty inner products
    } else {
      Tensor rows = out.view({groups, n, M});
      matmul_forward(MatmulArgs{.transpose_b = true}, x.view({groups, n, K}), weight, rows);
    }
    if (!bias.defined()) return;
    DeviceGuard guard(context_.device());
    for (std::int64_t g = 0; g < groups; ++g) {
      add_broadcast_rows_f32(floats(out) + g * n * M, floats(bias) + g * M, n, M, context_.stream());
    }
    return;
  }
  GroupedGemm product(CUBLAS_OP_T, CUBLAS_OP_N, false);
  if (K == 0) {
    zero(out);  // empty inner products
  } else {
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
      if (n == 0) continue;
      product.add(op, M, n, K, K, K, M, floats(weight) + g * M * K, floats(x) + r0 * K, floats(out) + r0 * M);
    }
  }
  DeviceWords words;
  const std::size_t offsets_at = bias.defined() ? words.append(offsets) : 0;
  product.stage(words);
  words.upload(*this);
  DeviceGuard guard(context_.device());
  product.run(context_, words);
  if (bias.defined()) {
    add_group_bias_f32(floats(out), floats(bias), words.at(offsets_at), groups, R, M, context_.stream());
  }
}

void CudaBackend::grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x_in, const Tensor& weight_in,
                                          const std::vector<std::int64_t>& offsets, const Tensor& grad_out,
                                          Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  const char* op = "grouped_matmul_backward";
  const std::int64_t groups = weight_in.size(0), M = weight_in.size(1), K = weight_in.size(2), R = x_in.size(0);
  if (R == 0) return;  // no rows: nothing to write, every group empty
  if (grad_x.defined() && M == 0 && !args.accumulate_grad_x) zero(grad_x);  // empty inner products
  if (groups_of_one_size(offsets)) {
    const std::int64_t n = offsets[1];
    if (M > 0 && K > 0 && (grad_x.defined() || grad_weight.defined())) {
      Tensor rows_grad_x = grad_x.defined() ? grad_x.view({groups, n, K}) : Tensor();
      matmul_backward(
          MatmulArgs{.transpose_b = true, .accumulate_grad_a = args.accumulate_grad_x, .accumulate_grad_b = true},
          widened(*this, x_in).view({groups, n, K}), widened(*this, weight_in), grad_out.view({groups, n, M}),
          rows_grad_x, grad_weight);
    }
    if (!grad_bias.defined()) return;
    DeviceGuard guard(context_.device());
    for (std::int64_t g = 0; g < groups; ++g) {
      column_sums_accumulate_f32(floats(grad_out) + g * n * M, floats(grad_bias) + g * M, n, M, context_.stream());
    }
    return;
  }
  const Tensor x = grad_weight.defined() ? widened(*this, x_in) : Tensor();
  const Tensor weight = grad_x.defined() ? widened(*this, weight_in) : Tensor();
  GroupedGemm dx(CUBLAS_OP_N, CUBLAS_OP_N, args.accumulate_grad_x);
  GroupedGemm dw(CUBLAS_OP_N, CUBLAS_OP_T, true);
  const bool gemms = M > 0 && K > 0;
  for (std::int64_t g = 0; g < groups && gemms; ++g) {
    const std::int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n == 0) continue;  // an empty group's grad_weight stays as it was
    const float* dy = floats(grad_out) + r0 * M;
    if (grad_x.defined()) dx.add(op, K, n, M, K, M, K, floats(weight) + g * M * K, dy, floats(grad_x) + r0 * K);
    if (grad_weight.defined()) dw.add(op, K, M, n, K, M, K, floats(x) + r0 * K, dy, floats(grad_weight) + g * M * K);
  }
  DeviceWords words;
  const std::size_t offsets_at = grad_bias.defined() ? words.append(offsets) : 0;
  dx.stage(words);
  dw.stage(words);
  words.upload(*this);
  DeviceGuard guard(context_.device());
  dx.run(context_, words);
  dw.run(context_, words);
  if (grad_bias.defined()) {
    group_column_sums_accumulate_f32(floats(grad_out), floats(grad_bias), words.at(offsets_at), groups, R, M,
                                     context_.stream());
  }
}

}  // namespace myriad::cuda
