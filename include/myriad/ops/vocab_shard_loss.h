// The per-token pieces of the vocabulary-parallel cross-entropy (parallel/vocab_parallel.h), so
// that the shards' combination runs where the logits are (no copy to the host inside a step).
// Each rank holds some columns of the vocabulary and has computed, over them, a local
// log-sum-exp and (for targets in its columns) a local loss; with `maxima` the all-reduced max of
// the local log-sum-exps:
//
//   vocab_shard_partials:  packed[i]     = exp(local_lse[i] - maxima[i])        (0 for -inf)
//                          packed[n + i] = state[i] == 1 ? local_lse[i] - local_loss[i] : 0
//                                          (the target's logit, on the rank holding it)
//   (packed is then sum-all-reduced over the shards)
//   vocab_shard_combine:   lse[i]    = maxima[i] + log(packed[i])
//                          losses[i] = state[i] == -1 ? 0 : lse[i] - packed[n + i]
//
// state[i] (i32): 1 = the target lies in this rank's columns, 0 = in another rank's, -1 = the
// ignore index. Shapes: state, local_lse, local_loss, maxima, lse, losses (n); packed (2n); f32
// except state; contiguous, on one device. Pure forward pieces (the backward is the shard
// cross-entropy's, ops/cross_entropy.h), elementwise, so every backend gives the same bits.
//
// vocab_shard_tokens maps global token ids (or targets) to what the shard holding vocabulary rows
// [vocab_start, vocab_start + rows) does with them, where the tokens are (on the device inside a
// step, so a step recorded as a CUDA graph reads no token on the host):
//   VocabShardMap::Output::rows:   out[i] = t - vocab_start on this shard, `elsewhere` on another,
//                                  ignore_index kept as it is
//   VocabShardMap::Output::state:  out[i] = 1 on this shard, 0 on another, -1 for ignore_index
// tokens and out: i32, the same shape, contiguous, one device. The tokens are not range-checked
// here (their placer checks them against the vocabulary: nn/host_tokens.h).
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad {

struct VocabShardMap {
  enum class Output { rows, state };
  Output output = Output::rows;
  std::int64_t vocab_start = 0;
  std::int64_t rows = 0;        // this shard's real rows (or columns) from vocab_start
  std::int32_t elsewhere = -1;  // Output::rows: the value for another shard's token
  std::int32_t ignore_index = -100;
};

void vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out);

void vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss, const Tensor& maxima,
                          Tensor& packed);
void vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse, Tensor& losses);

namespace cpu {
void vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out);
void vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss, const Tensor& maxima,
                          Tensor& packed);
void vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse, Tensor& losses);
}  // namespace cpu

}  // namespace myriad
