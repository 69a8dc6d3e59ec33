// Drawing the next token from logits: greedy, temperature, top-k and top-p (nucleus), reproducible
// from a seed; and log-probabilities. Shared by nn::generate and the serving engine, so that a
// request draws the same tokens whichever path runs it and whatever else is in the batch.
//
// sample_token: temperature 0 is greedy (argmax; the lowest id among equal maxima). Otherwise the
// candidates are the top_k largest logits (0 = all ids below vocab_limit), sorted descending (ties
// by id); weights exp((l - l_max) / temperature); with top_p < 1 only the shortest prefix of the
// candidates whose weights reach top_p of their total stays. When every id is a candidate (top_k 0
// or >= the vocabulary, top_p 1) they stay in id order: the same distribution without a sort of
// the vocabulary (the sort was most of a serving step's sampling time). The draw is the candidate where
// u * total falls in the cumulative weights, u = Philox(seed, stream 0, index draw_index): the
// caller passes the position the token will occupy, so the same seed gives the same text.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace myriad::nn {

struct GenerateArgs;

std::int32_t sample_token(const float* logits, std::int64_t vocab, const GenerateArgs& args, std::uint64_t draw_index);

// log softmax(logits)[token], computed in float64 over all `vocab` logits (before temperature).
float log_probability(const float* logits, std::int64_t vocab, std::int32_t token);

// The `count` most likely ids (descending; ties by id) with their log-probabilities.
std::vector<std::pair<std::int32_t, float>> top_log_probabilities(const float* logits, std::int64_t vocab,
                                                                  std::int64_t count);

}  // namespace myriad::nn
