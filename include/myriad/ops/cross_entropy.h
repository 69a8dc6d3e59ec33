// Cross-entropy: softmax over the vocabulary fused with the negative log-likelihood of a target.
//
//   lse[n]    = log sum_v exp(logits[n, v])                  (computed with max subtraction)
//   losses[n] = lse[n] - logits[n, targets[n]]               0 when targets[n] == ignore_index
//   grad_logits[n, v] = (exp(logits[n, v] - lse[n]) - [v == targets[n]]) * grad_losses[n]
//                                                            0 for rows with ignore_index
// Shapes (N rows = B * T tokens, V vocab; with args.classes the sums run over the first classes):
//   logits      (N, V)  f32, V >= 1
//   targets     (N)     i32, each in [0, V) or equal to ignore_index (else myriad::Error naming
//                       the row and the value, thrown before anything is written)
//   losses      (N)     f32, contiguous, per-row loss (not reduced)
//   lse         (N)     f32, contiguous, per-row log-sum-exp saved for backward (written for
//                       every row, ignored ones included)
//   grad_losses (N)     f32, dL/dlosses
//   grad_logits (N, V)  f32, contiguous
// No probability matrix is materialised: backward writes softmax - onehot straight into
// grad_logits from logits and the saved lse. lse is f32, so with logits of magnitude ~1e3 the
// recomputed probabilities carry a relative error up to ~ulp(|lse|) (6e-5 at 1e3).
//
// Normalisation is the caller's: losses are per row and backward scales row n by
// grad_losses[n]. For a mean over the valid tokens pass grad_losses[n] = 1 / num_valid where
// num_valid = count_valid_targets(targets, ignore_index) summed over the micro-batches / ranks
// that share the mean (ignored rows get 0 gradient whatever grad_losses holds there).
//
// Padded rows (args.classes > 0): only the first `classes` columns of each row are classes; the
// rest pad the row to an aligned width (the model's padded vocabulary, so that the logits GEMMs
// see an aligned leading dimension). Padding columns take no part in lse or the loss, and their
// grad_logits are written 0; targets must lie in [0, classes). classes = 0: every column.
//
// Vocabulary shard (args.vocab_shard, read by the backward; tensor parallelism): logits hold one
// rank's columns, lse is the whole vocabulary's (combined over the shards), and a target outside
// [0, V) that is not ignore_index lies in another rank's shard: its row gets the softmax part
// only, exp(x - lse) * grad_losses, with no one-hot term and no error. The forward takes such
// targets as ignore_index (the caller maps them) and is unchanged.
//
// Targets checked by the caller (args.targets_checked): every target was checked on the host, so a
// device backend neither uploads nor reads back its bad-target flag (no wait inside a step); the
// CPU op checks regardless.
//
// Gradient contract: logits are an activation, so grad_logits is written (`=`). targets get
// no gradient; lse is a saved intermediate, not differentiated.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad {

struct CrossEntropyArgs {
  std::int32_t ignore_index = -100;  // rows with this target contribute no loss and no gradient
  bool vocab_shard = false;          // backward: targets outside [0, V) are other shards' (see above)
  std::int64_t classes = 0;          // > 0: the first `classes` columns are classes, the rest padding
  bool targets_checked = false;      // the caller checked every target on the host (see above)
};

void cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets, Tensor& losses,
                           Tensor& lse);
void cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits);
// Number of targets (any shape, i32) not equal to ignore_index: the denominator of a mean loss.
std::int64_t count_valid_targets(const Tensor& targets, std::int32_t ignore_index);

namespace cpu {
void cross_entropy_forward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets, Tensor& losses,
                           Tensor& lse);
void cross_entropy_backward(const CrossEntropyArgs& args, const Tensor& logits, const Tensor& targets,
                            const Tensor& lse, const Tensor& grad_losses, Tensor& grad_logits);
std::int64_t count_valid_targets(const Tensor& targets, std::int32_t ignore_index);
}  // namespace cpu

}  // namespace myriad
