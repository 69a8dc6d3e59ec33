// vocab_shard_partials / vocab_shard_combine (the vocabulary-parallel loss's per-token pieces)
// against a float64 cross-entropy over the whole vocabulary: random logits split by columns into
// shards (one shard without real columns), each shard's local cross-entropy from the CPU op, the
// pieces combined as the tensor-parallel group does (max, then sum over shards); ignored rows give
// loss 0. vocab_shard_tokens against the shard arithmetic written out per token (every shard of a
// random split, both outputs, ignore indices and a shard without rows). Then the errors for a wrong
// state dtype and mismatched shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/vocab_shard_loss.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

TEST(VocabShardLoss, ShardsCombineToTheWholeVocabularyCrossEntropy) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t n = 37, vocab = 50;
  const std::int32_t ignore = -100;
  const Tensor logits = testing::random_tensor({n, vocab}, seed, 0, -4.0f, 4.0f);
  Tensor targets = testing::random_ids({n}, static_cast<std::int32_t>(vocab), seed, 1);
  for (std::int64_t i = 0; i < n; i += 5) targets.data<std::int32_t>()[i] = ignore;
  // Column blocks of the shards; the last holds no real column (padding only).
  const std::vector<std::pair<std::int64_t, std::int64_t>> shards = {{0, 17}, {17, 34}, {34, 50}, {50, 50}};
  std::vector<Tensor> local_lse, local_loss, states;
  Tensor maxima = Tensor::full({n}, -std::numeric_limits<float>::infinity());
  for (const auto& [begin, end] : shards) {
    Tensor state = Tensor::empty({n}, DType::i32), local_targets = Tensor::empty({n}, DType::i32);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int32_t t = targets.data<std::int32_t>()[i];
      const bool here = t != ignore && t >= begin && t < end;
      state.data<std::int32_t>()[i] = t == ignore ? -1 : here ? 1 : 0;
      local_targets.data<std::int32_t>()[i] = here ? static_cast<std::int32_t>(t - begin) : ignore;
    }
    Tensor lse = Tensor::full({n}, -std::numeric_limits<float>::infinity()), loss = Tensor::zeros({n});
    if (end > begin) {
      const Tensor columns = logits.slice(1, begin, end).contiguous();
      cross_entropy_forward(CrossEntropyArgs{.ignore_index = ignore}, columns, local_targets, loss, lse);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      maxima.data<float>()[i] = std::max(maxima.data<float>()[i], lse.data<float>()[i]);
    }
    local_lse.push_back(lse);
    local_loss.push_back(loss);
    states.push_back(state);
  }
  Tensor summed = Tensor::zeros({2 * n});
  for (std::size_t r = 0; r < shards.size(); ++r) {
    Tensor packed = Tensor::empty({2 * n});
    vocab_shard_partials(states[r], local_lse[r], local_loss[r], maxima, packed);
    for (std::int64_t i = 0; i < 2 * n; ++i) summed.data<float>()[i] += packed.data<float>()[i];
  }
  // Float64 reference over the whole vocabulary.
  const std::vector<double> x = to_f64(logits);
  std::vector<double> want_lse(n), want_losses(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = x.data() + i * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0.0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    want_lse[i] = max + std::log(sum);
    const std::int32_t t = targets.data<std::int32_t>()[i];
    want_losses[i] = t == ignore ? 0.0 : want_lse[i] - row[t];
  }
  for (std::size_t r = 0; r < shards.size(); ++r) {  // every rank combines the same sums alike
    Tensor lse = Tensor::empty({n}), losses = Tensor::empty({n});
    vocab_shard_combine(states[r], maxima, summed, lse, losses);
    testing::expect_close(lse, want_lse, 1e-5, 1e-5, "lse");
    testing::expect_close(losses, want_losses, 1e-5, 1e-5, "losses");
    for (std::int64_t i = 0; i < n; i += 5) EXPECT_EQ(losses.data<float>()[i], 0.0f) << "ignored row " << i;
  }
}

TEST(VocabShardLoss, TokenMapGivesEachShardItsRowsAndStates) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t vocab = 97;
  const std::int32_t ignore = -100;
  Tensor tokens = testing::random_ids({3, 41}, static_cast<std::int32_t>(vocab), seed, 0);
  for (std::int64_t i = 0; i < tokens.numel(); i += 7) tokens.data<std::int32_t>()[i] = ignore;
  for (const auto& [start, rows] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 33}, {33, 33}, {66, 31}, {97, 0}}) {
    for (const bool state : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "shard [" << start << ", " << start + rows << ") state " << state);
      const VocabShardMap map{.output = state ? VocabShardMap::Output::state : VocabShardMap::Output::rows,
                              .vocab_start = start,
                              .rows = rows,
                              .elsewhere = -2,
                              .ignore_index = ignore};
      Tensor out = Tensor::full({3, 41}, 7.0, DType::i32);
      vocab_shard_tokens(map, tokens, out);
      for (std::int64_t i = 0; i < tokens.numel(); ++i) {
        const std::int64_t t = tokens.data<std::int32_t>()[i];
        const bool ignored = t == ignore, here = !ignored && t >= start && t < start + rows;
        const std::int64_t want = state ? (ignored ? -1 : here ? 1 : 0) : (ignored ? ignore : here ? t - start : -2);
        ASSERT_EQ(out.data<std::int32_t>()[i], want) << "token " << t << " at " << i;
      }
    }
  }
}

TEST(VocabShardLoss, ErrorsNameTheTensor) {
  const std::int64_t n = 4;
  Tensor state = Tensor::zeros({n}, DType::i32), f = Tensor::zeros({n}), packed = Tensor::zeros({2 * n});
  Tensor out = Tensor::zeros({n}), short_packed = Tensor::zeros({n});
  expect_error_naming([&] { vocab_shard_partials(f, f, f, f, packed); }, {"vocab_shard_partials", "state"});
  expect_error_naming([&] { vocab_shard_partials(state, f, f, f, short_packed); }, {"vocab_shard_partials", "packed"});
  expect_error_naming([&] { vocab_shard_combine(state, f, short_packed, out, out); },
                      {"vocab_shard_combine", "packed"});
  Tensor long_out = Tensor::zeros({n + 1});
  expect_error_naming([&] { vocab_shard_combine(state, f, packed, long_out, out); }, {"vocab_shard_combine", "lse"});
  Tensor ids = Tensor::zeros({n}, DType::i32), long_ids = Tensor::zeros({n + 1}, DType::i32);
  expect_error_naming([&] { vocab_shard_tokens(VocabShardMap{.rows = 3}, f, ids); }, {"vocab_shard_tokens", "tokens"});
  expect_error_naming([&] { vocab_shard_tokens(VocabShardMap{.rows = 3}, ids, long_ids); },
                      {"vocab_shard_tokens", "out"});
  expect_error_naming([&] { vocab_shard_tokens(VocabShardMap{.vocab_start = -1, .rows = 3}, ids, ids); },
                      {"vocab_shard_tokens", "shard"});
}

}  // namespace
}  // namespace myriad
