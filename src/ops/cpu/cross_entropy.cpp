// CPU cross-entropy, parallel over rows (each row is independent, so results do not depend on
// the thread count). Targets are validated in one serial pass before anything is written.
// Forward per row: max (vectorised, read as four streams: streamed_row_max in row_max.h), then
// sum of exp(x - max) with the vectorised fast_exp (~2e-7 relative), accumulated in float64 over
// 16 fixed lanes (element v goes to lane v % 16, lanes summed in order: deterministic and
// vectorisable), lse = max + log(sum) and loss = (max - x[target]) + log(sum) (kept apart so a
// large max does not round the loss away).
// Backward writes fast_exp(x - lse) * g, then subtracts g at the target. With args.classes the
// sums run over a row's first `classes` columns and the backward writes 0 to the rest.
#include <algorithm>
#include <cmath>

#include "cpu_clones.h"
#include "fast_exp.h"
#include "row_max.h"
#include "myriad/ops/cross_entropy.h"

namespace myriad::cpu {

namespace {

constexpr std::int64_t kParallelMinLogits = 1 << 14;  // logits per call before threads pay off
// Float64 lanes of the forward's sum of exponentials. 16 rather than 8: the exp pass over 2048 rows of
// GPT-2's logits took ~35 ms with 8 lanes and ~25 ms with 16 (2-vCPU Xeon VM, 2026-12-07).
constexpr int kSumLanes = 16;

// Throws on the first row whose target is neither in [0, vocab) nor the ignore index.
void check_targets(const char* op, const std::int32_t* target, std::int64_t rows, std::int64_t vocab,
                   std::int32_t ignore_index) {
  for (std::int64_t n = 0; n < rows; ++n) {
    const std::int32_t t = target[n];
    MYRIAD_CHECK(t == ignore_index || (t >= 0 && t < vocab), op << ": target " << t << " in row " << n << " of " << rows
                                                                << " is outside [0, V) with V = " << vocab
                                                                << " and is not the ignore index " << ignore_index);
  }
}

}  // namespace

MYRIAD_CPU_CLONES void cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits_in,
                                             const Tensor& targets_in, Tensor& losses, Tensor& lse) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  const std::int64_t vocab = args.classes > 0 ? args.classes : width;
  const std::int32_t* target = targets.data<std::int32_t>();
  check_targets("cross_entropy_forward", target, rows, vocab, args.ignore_index);
  const float* x_all = logits.data<float>();
  float* loss_out = losses.data<float>();
  float* lse_out = lse.data<float>();
#pragma omp parallel for schedule(static) if (rows * vocab >= kParallelMinLogits)
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* x = x_all + n * width;
    const float max = streamed_row_max(x, vocab);
    double lanes[kSumLanes] = {};
    std::int64_t v = 0;
    for (; v + kSumLanes <= vocab; v += kSumLanes) {
      for (int j = 0; j < kSumLanes; ++j) lanes[j] += static_cast<double>(fast_exp(x[v + j] - max));
    }
    for (int j = 0; v < vocab; ++v, ++j) lanes[j] += static_cast<double>(fast_exp(x[v] - max));
    double sum = 0.0;
    for (double lane : lanes) sum += lane;
    const double log_sum = std::log(sum);  // sum >= 1: the max term is exp(0)
    lse_out[n] = static_cast<float>(static_cast<double>(max) + log_sum);
    const bool ignored = target[n] == args.ignore_index;
    loss_out[n] = ignored ? 0.0f : static_cast<float>(static_cast<double>(max - x[target[n]]) + log_sum);
  }
}

MYRIAD_CPU_CLONES void cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits_in,
                                              const Tensor& targets_in, const Tensor& lse_in,
                                              const Tensor& grad_losses_in, Tensor& grad_logits) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor lse = lse_in.contiguous(), grad_losses = grad_losses_in.contiguous();
  const std::int64_t rows = logits.size(0), width = logits.size(1);
  const std::int64_t vocab = args.classes > 0 ? args.classes : width;
  const std::int32_t* target = targets.data<std::int32_t>();
  if (!args.vocab_shard) check_targets("cross_entropy_backward", target, rows, vocab, args.ignore_index);
  const float* x_all = logits.data<float>();
  const float* lse_row = lse.data<float>();
  const float* g_row = grad_losses.data<float>();
  float* dx_all = grad_logits.data<float>();
#pragma omp parallel for schedule(static) if (rows * width >= kParallelMinLogits)
  for (std::int64_t n = 0; n < rows; ++n) {
    float* dx = dx_all + n * width;
    std::fill(dx + vocab, dx + width, 0.0f);  // padding columns
    if (target[n] == args.ignore_index) {
      std::fill(dx, dx + vocab, 0.0f);
      continue;
    }
    const float* x = x_all + n * width;
    const float l = lse_row[n], g = g_row[n];
    for (std::int64_t v = 0; v < vocab; ++v) dx[v] = fast_exp(x[v] - l) * g;
    if (target[n] >= 0 && target[n] < vocab) dx[target[n]] -= g;  // else: another shard's target
  }
}

std::int64_t count_valid_targets(const Tensor& targets_in, std::int32_t ignore_index) {
  const Tensor targets = targets_in.contiguous();
  const std::int32_t* target = targets.data<std::int32_t>();
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < targets.numel(); ++i) count += target[i] != ignore_index;
  return count;
}

}  // namespace myriad::cpu
