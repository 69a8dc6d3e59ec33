// CPU matmul on the CPU GEMM (ops/cpu_gemm.h: OpenBLAS or oneDNN).
//
// Every operand is described to the row-major sgemm as pointer + leading dimension + transpose
// flag, read directly from the tensor's strides when one of its last two dims has unit stride;
// otherwise it is copied to a contiguous buffer first. Batches whose rows collapse into one
// strided run (a (B, T, C) activation against a 2-D weight) are folded into a single GEMM;
// other batches loop, in parallel over batch entries when there are enough of them (OpenBLAS's
// OpenMP build runs single-threaded inside a parallel region, so threads are not nested).
#include <omp.h>

#include <optional>

#include "myriad/ops/cpu_gemm.h"
#include "myriad/ops/matmul.h"

namespace myriad::cpu {

namespace {

struct BlasOperand {
  const float* ptr;
  bool trans;
  std::int64_t ld;
};

// The 2-D matrix (rows, cols) at ptr with strides (row_stride, col_stride), used transposed or
// not, as a cblas row-major operand; nullopt when neither stride is unit.
std::optional<BlasOperand> blas_operand(const float* ptr, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                                        std::int64_t col_stride, bool transposed) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    std::int64_t ld = rows == 1 ? std::max<std::int64_t>(cols, 1) : row_stride;
    return BlasOperand{ptr, transposed, ld};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    std::int64_t ld = cols == 1 ? std::max<std::int64_t>(rows, 1) : col_stride;
    return BlasOperand{ptr, !transposed, ld};
  }
  return std::nullopt;
}

// Leading ("batch") dims of t (all but the last two) and the element offset of each batch entry.
std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(shape_numel(batch)), 0);
  if (t.dim() == 2) return offsets;
  std::vector<std::int64_t> index(batch.size(), 0);
  for (std::int64_t& offset : offsets) {
    offset = 0;
    for (std::size_t d = 0; d < batch.size(); ++d) offset += index[d] * t.stride(static_cast<int>(d));
    for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
      if (++index[d] < batch[d]) break;
      index[d] = 0;
    }
  }
  return offsets;
}

// If all dims but the last collapse into one strided run of rows and the last has unit
// stride, returns the row stride (t can be seen as a (numel / cols, cols) matrix).
std::optional<std::int64_t> folded_row_stride(const Tensor& t) {
  if (t.size(-1) != 1 && t.stride(-1) != 1) return std::nullopt;
  std::int64_t row_stride = t.stride(-2);
  for (int d = t.dim() - 2; d >= 1; --d) {
    if (t.size(d - 1) == 1) continue;
    if (t.stride(d - 1) != t.stride(d) * t.size(d)) return std::nullopt;
  }
  return row_stride;
}

Tensor unit_strided(const Tensor& t) {
  bool ok = t.dim() >= 2 && (t.stride(-1) == 1 || t.stride(-2) == 1 || t.size(-1) == 1 || t.size(-2) == 1);
  return ok ? t : t.contiguous();
}

void gemm(const BlasOperand& x, const BlasOperand& y, float* z, std::int64_t ldz, std::int64_t m, std::int64_t n,
          std::int64_t k, float alpha, float beta) {
  sgemm(x.trans, y.trans, m, n, k, alpha, x.ptr, x.ld, y.ptr, y.ld, beta, z, ldz);
}

std::int64_t op_rows(const Tensor& t, bool trans) { return trans ? t.size(-1) : t.size(-2); }
std::int64_t op_cols(const Tensor& t, bool trans) { return trans ? t.size(-2) : t.size(-1); }

BlasOperand operand_at(const Tensor& t, std::int64_t offset, bool trans) {
  return *blas_operand(t.data<float>() + offset, t.size(-2), t.size(-1), t.stride(-2), t.stride(-1), trans);
}

// z = alpha * op(x) @ op(y) + beta * z, where each of x, y, z is batched (same batch dims) or
// 2-D. A 2-D z with batched inputs sums over the batch (the weight-gradient case).
void gemm_general(const Tensor& x_in, bool tx, const Tensor& y_in, bool ty, Tensor& z, float alpha, float beta) {
  MYRIAD_CHECK(z.size(-1) == 1 || z.stride(-1) == 1,
               "matmul: output " << z.describe() << " needs unit stride in its last dim, has strides "
                                 << shape_string(z.strides()));
  Tensor x = unit_strided(x_in), y = unit_strided(y_in);
  const std::int64_t m = op_rows(x, tx), k = op_cols(x, tx), n = op_cols(y, ty);
  const std::int64_t ldz = z.size(-2) == 1 ? std::max<std::int64_t>(n, 1) : z.stride(-2);
  float* z_ptr = z.data<float>();

  // Fold case 1: batched x (not transposed) against a 2-D y into a batched z -> one GEMM.
  if (x.dim() > 2 && y.dim() == 2 && z.dim() > 2 && !tx) {
    auto xs = folded_row_stride(x), zs = folded_row_stride(z);
    if (xs && zs) {
      std::int64_t rows = x.numel() / std::max<std::int64_t>(k, 1);
      auto xo = blas_operand(x.data<float>(), rows, k, *xs, 1, false);
      auto yo = operand_at(y, 0, ty);
      if (xo) return gemm(*xo, yo, z_ptr, rows == 1 ? n : *zs, rows, n, k, alpha, beta);
    }
  }
  // Fold case 2: 2-D z = sum over batch of op(x_b) @ op(y_b) with x transposed and y not, both
  // row-foldable: z = X^T @ Y where X, Y are the batches stacked along rows.
  if (z.dim() == 2 && x.dim() > 2 && y.dim() > 2 && tx && !ty) {
    auto xs = folded_row_stride(x), ys = folded_row_stride(y);
    if (xs && ys) {
      std::int64_t rows = x.numel() / std::max<std::int64_t>(m, 1);
      auto xo = blas_operand(x.data<float>(), rows, m, *xs, 1, true);
      auto yo = blas_operand(y.data<float>(), rows, n, *ys, 1, false);
      if (xo && yo) return gemm(*xo, *yo, z_ptr, ldz, m, n, rows, alpha, beta);
    }
  }
  // Everything else loops over the batch.
  Shape batch = x.dim() > 2 ? Shape(x.shape().begin(), x.shape().end() - 2)
                            : (y.dim() > 2 ? Shape(y.shape().begin(), y.shape().end() - 2) : Shape{});
  std::vector<std::int64_t> xo = batch_offsets(x, batch), yo = batch_offsets(y, batch), zo = batch_offsets(z, batch);
  const std::int64_t count = static_cast<std::int64_t>(xo.size());
  if (z.dim() == 2) {
    for (std::int64_t i = 0; i < count; ++i) {
      gemm(operand_at(x, xo[i], tx), operand_at(y, yo[i], ty), z_ptr, ldz, m, n, k, alpha, i == 0 ? beta : 1.0f);
    }
    return;
  }
  const bool parallel_batches = count >= 2 * omp_get_max_threads() || (count >= 2 && m * n * k < (1 << 21));
#pragma omp parallel for schedule(static) if (parallel_batches)
  for (std::int64_t i = 0; i < count; ++i) {
    gemm(operand_at(x, xo[i], tx), operand_at(y, yo[i], ty), z_ptr + zo[i], ldz, m, n, k, alpha, beta);
  }
}

}  // namespace

void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
  gemm_general(a, args.transpose_a, b, args.transpose_b, out, args.alpha, args.accumulate ? 1.0f : 0.0f);
}

void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out, Tensor& grad_a,
                     Tensor& grad_b) {
  const bool ta = args.transpose_a, tb = args.transpose_b;
  if (grad_a.defined()) {
    float beta = args.accumulate_grad_a ? 1.0f : 0.0f;
    if (!ta) {
      gemm_general(grad_out, false, b, !tb, grad_a, args.alpha, beta);  // (M,N) @ op(b)^T
    } else {
      gemm_general(b, tb, grad_out, true, grad_a, args.alpha, beta);  // op(b) @ dC^T -> (K,M)
    }
  }
  if (grad_b.defined()) {
    float beta = args.accumulate_grad_b ? 1.0f : 0.0f;
    if (!tb) {
      gemm_general(a, !ta, grad_out, false, grad_b, args.alpha, beta);  // op(a)^T @ dC -> (K,N)
    } else {
      gemm_general(grad_out, true, a, ta, grad_b, args.alpha, beta);  // dC^T @ op(a) -> (N,K)
    }
  }
}

}  // namespace myriad::cpu
