// Vocabulary-parallel embedding and cross-entropy: local work plus all-reduces over tp.
#include "myriad/dist/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "myriad/core/error.h"

namespace myriad::dist {

namespace {

void check_rows(const char* op, const Tensor& t, std::int64_t rows, std::int64_t cols, DType dtype) {
  MYRIAD_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols && t.dtype() == dtype && t.is_contiguous() &&
                   t.device().is_cpu(),
               op << ": expected a contiguous CPU (" << rows << ", " << cols << ") " << dtype_name(dtype)
                  << " tensor, got " << t.describe());
}

void check_vector(const char* op, const char* what, const Tensor& t, std::int64_t n, DType dtype) {
  MYRIAD_CHECK(t.dim() == 1 && t.size(0) == n && t.dtype() == dtype && t.is_contiguous(),
               op << ": " << what << " must be a contiguous (" << n << ") " << dtype_name(dtype) << " tensor, got "
                  << t.describe());
}

// Columns [0, valid) of this shard belong to the real vocabulary.
std::int64_t valid_columns(const VocabShard& shard, std::int64_t local) {
  return std::clamp<std::int64_t>(shard.vocab_size - shard.vocab_start, 0, local);
}

}  // namespace

void vocab_parallel_embedding_forward(Communicator& tp, const VocabShard& shard, const Tensor& ids,
                                      const Tensor& table, Tensor& out) {
  vocab_parallel_embedding_lookup(shard, ids, table, out);
  tp.all_reduce(out);
}

void vocab_parallel_embedding_lookup(const VocabShard& shard, const Tensor& ids, const Tensor& table, Tensor& out) {
  const std::int64_t n = ids.numel(), local = table.size(0), c = table.size(1);
  check_vector("vocab_parallel_embedding_forward", "ids", ids, n, DType::i32);
  check_rows("vocab_parallel_embedding_forward", table, local, c, DType::f32);
  check_rows("vocab_parallel_embedding_forward", out, n, c, DType::f32);
  const std::int32_t* id = ids.data<std::int32_t>();
  const float* rows = table.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = id[i] - shard.vocab_start;
    if (row >= 0 && row < local) {
      std::memcpy(o + i * c, rows + row * c, static_cast<std::size_t>(c) * sizeof(float));
    } else {
      std::memset(o + i * c, 0, static_cast<std::size_t>(c) * sizeof(float));
    }
  }
}

void vocab_parallel_embedding_backward(const VocabShard& shard, const Tensor& ids, const Tensor& grad_out,
                                       Tensor& grad_table) {
  const std::int64_t n = ids.numel(), local = grad_table.size(0), c = grad_table.size(1);
  check_vector("vocab_parallel_embedding_backward", "ids", ids, n, DType::i32);
  check_rows("vocab_parallel_embedding_backward", grad_out, n, c, DType::f32);
  check_rows("vocab_parallel_embedding_backward", grad_table, local, c, DType::f32);
  const std::int32_t* id = ids.data<std::int32_t>();
  const float* g = grad_out.data<float>();
  float* gt = grad_table.data<float>();
  // Row-major order over ids for every table row: deterministic whatever the thread count
  // (threads split the table's columns, never the ids).
#pragma omp parallel for schedule(static)
  for (std::int64_t col = 0; col < c; ++col) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t row = id[i] - shard.vocab_start;
      if (row >= 0 && row < local) gt[row * c + col] += g[i * c + col];
    }
  }
}

void vocab_parallel_cross_entropy_forward(Communicator& tp, const VocabShard& shard, const Tensor& logits,
                                          const Tensor& targets, std::int32_t ignore_index, Tensor& losses,
                                          Tensor& lse) {
  const std::int64_t n = logits.size(0), local = logits.size(1);
  check_rows("vocab_parallel_cross_entropy_forward", logits, n, local, DType::f32);
  check_vector("vocab_parallel_cross_entropy_forward", "targets", targets, n, DType::i32);
  check_vector("vocab_parallel_cross_entropy_forward", "losses", losses, n, DType::f32);
  check_vector("vocab_parallel_cross_entropy_forward", "lse", lse, n, DType::f32);
  const std::int32_t* target = targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    MYRIAD_CHECK(target[i] == ignore_index || (target[i] >= 0 && target[i] < shard.vocab_size),
                 "vocab_parallel_cross_entropy_forward: target " << target[i] << " of row " << i
                                                                 << " is outside the vocabulary [0, "
                                                                 << shard.vocab_size << ")");
  }
  const std::int64_t valid = valid_columns(shard, local);
  const float* x = logits.data<float>();
  Tensor maxima = Tensor::empty({n});
  float* m = maxima.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    float best = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < valid; ++j) best = std::max(best, x[i * local + j]);
    m[i] = best;
  }
  tp.all_reduce(maxima, ReduceOp::max);
  Tensor packed = Tensor::empty({2 * n});  // [sum of exp | target logit]
  float* sums = packed.data<float>();
  float* picked = sums + n;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (std::int64_t j = 0; j < valid; ++j) s += std::exp(static_cast<double>(x[i * local + j] - m[i]));
    sums[i] = static_cast<float>(s);
    const std::int64_t col = static_cast<std::int64_t>(target[i]) - shard.vocab_start;
    picked[i] = (target[i] != ignore_index && col >= 0 && col < valid) ? x[i * local + col] : 0.0f;
  }
  tp.all_reduce(packed);
  float* l = losses.data<float>();
  float* out_lse = lse.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    out_lse[i] = m[i] + std::log(sums[i]);
    l[i] = target[i] == ignore_index ? 0.0f : out_lse[i] - picked[i];
  }
}

void vocab_parallel_cross_entropy_backward(const VocabShard& shard, const Tensor& logits, const Tensor& targets,
                                           std::int32_t ignore_index, const Tensor& lse, const Tensor& grad_losses,
                                           Tensor& grad_logits) {
  const std::int64_t n = logits.size(0), local = logits.size(1);
  check_rows("vocab_parallel_cross_entropy_backward", logits, n, local, DType::f32);
  check_rows("vocab_parallel_cross_entropy_backward", grad_logits, n, local, DType::f32);
  check_vector("vocab_parallel_cross_entropy_backward", "targets", targets, n, DType::i32);
  check_vector("vocab_parallel_cross_entropy_backward", "lse", lse, n, DType::f32);
  check_vector("vocab_parallel_cross_entropy_backward", "grad_losses", grad_losses, n, DType::f32);
  const std::int64_t valid = valid_columns(shard, local);
  const float* x = logits.data<float>();
  const std::int32_t* target = targets.data<std::int32_t>();
  const float* s = lse.data<float>();
  const float* g = grad_losses.data<float>();
  float* out = grad_logits.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const bool ignored = target[i] == ignore_index;
    const std::int64_t col = static_cast<std::int64_t>(target[i]) - shard.vocab_start;
    for (std::int64_t j = 0; j < local; ++j) {
      float value = 0.0f;
      if (!ignored && j < valid) value = (std::exp(x[i * local + j] - s[i]) - (j == col ? 1.0f : 0.0f)) * g[i];
      out[i * local + j] = value;  // read x[i, j] before writing: grad_logits may alias logits
    }
  }
}

}  // namespace myriad::dist
