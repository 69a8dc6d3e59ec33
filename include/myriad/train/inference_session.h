// InferenceSession — one rank's inference over the training state: logits, generation (text and
// token ids with log-probabilities) and serving a weight-only INT8 export.
//
// Every call is collective over the job and returns the same result on every rank. It computes
// from the serial model's values: the rank's model itself where it is whole (ZeRO-3 gathers every
// parameter for the call), else a host copy assembled from every rank's part (tp / pp / ep) or
// the rank's own whole parameters without the ring (cp), in the run's compute format. After
// load_int8 the session serves the INT8 export and training must be refused (serves_int8()).
// It reads the shared RankState and writes only parameter values (load_int8, which also frees
// what only training reads: inference_session_int8.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "myriad/data/bpe_tokenizer.h"
#include "myriad/nn/generate.h"
#include "myriad/train/rank_state.h"

namespace myriad::train {

class InferenceSession {
 public:
  // `tokenizer` may be null (data given as shards only: generate() is refused); `vocab_limit`:
  // ids at or above it (model.vocab_size above the data's vocabulary) are never drawn.
  InferenceSession(RankState& state, const data::BpeTokenizer* tokenizer, std::int64_t vocab_limit);

  // Logits (rows, T, model.vocab_size) of ids (rows, T <= model.context_length).
  Tensor forward_logits(const Tensor& ids);
  std::string generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature, std::int64_t top_k,
                       std::uint64_t seed);
  nn::Generation generate_ids(const std::vector<std::int32_t>& prompt, const nn::GenerateArgs& args);

  // Serves a weight-only INT8 export (inference_session_int8.cpp; Engine::load_int8 tells the contract).
  void load_int8(const std::string& path);
  bool serves_int8() const { return serves_int8_; }
  // Throws naming `call` when this session serves an INT8 export (training needs the f32 weights).
  void refuse_training(const char* call) const;

 private:
  // fn(serial model) on this rank's model where it is whole, else on a host copy assembled from
  // every rank's part. Collective.
  void with_serial_model(const std::function<void(nn::GptModel&)>& fn);
  // The parameter values in the serial layout, complete on every rank. Collective.
  void snapshot_serial(parallel::FullState& out);

  RankState& state_;
  const data::BpeTokenizer* tokenizer_;
  std::int64_t vocab_limit_;
  bool serves_int8_ = false;
};

}  // namespace myriad::train
