// InferenceSession: logits and generation from the serial model's values (train/inference_session.h).
// INT8 serving: inference_session_int8.cpp.
#include "myriad/train/inference_session.h"

#include <cstring>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"

namespace myriad::train {

InferenceSession::InferenceSession(RankState& state, const data::BpeTokenizer* tokenizer, std::int64_t vocab_limit)
    : state_(state), tokenizer_(tokenizer), vocab_limit_(vocab_limit) {}

void InferenceSession::refuse_training(const char* call) const {
  MYRIAD_CHECK(!serves_int8_, call << ": this engine serves an INT8 export (load_int8): training needs the f32 "
                                   << "weights; load a checkpoint in a new engine to train");
}

void InferenceSession::snapshot_serial(parallel::FullState& out) {
  parallel::FullState local;
  state_.data_parallel->snapshot_full(local);  // every rank: the tp/pp sums below need all
  const std::int64_t n = state_.serial_layout->serial_numel();
  if (!out.values.defined() || out.values.numel() != n) out.values = Tensor::zeros({n});
  std::memset(out.values.raw_data(), 0, out.values.nbytes());
  distributed::Communicator& ep = state_.group(distributed::Axis::ep);
  state_.serial_layout->to_serial(local.values, out.values, /*experts_only=*/ep.rank() != 0);
  if (state_.tp().size() > 1) state_.tp().all_reduce(out.values);
  if (state_.pp().size() > 1) state_.pp().all_reduce(out.values);
  if (ep.size() > 1) ep.all_reduce(out.values);
}

void InferenceSession::with_serial_model(const std::function<void(nn::GptModel&)>& fn) {
  // A host copy of the serial model (tp / pp / ep: assembled from every rank's part; cp: the
  // rank's own parameters, which are whole, without the ring its model attends through), or the
  // model itself where it is whole (host or GPU; ZeRO-3 gathers every parameter for the call).
  nn::GptModel& model = *state_.model;
  parallel::DataParallel& data_parallel = *state_.data_parallel;
  const DType compute_format = state_.compute_format;
  auto on_copy = [&](const Tensor& serial_values) {
    nn::GptModel copy(model.config());
    copy.parameters().flat_values().copy_from(serial_values);
    if (compute_format != DType::f32) {  // the weights the trained model reads
      round_to_format(copy.parameters().flat_values(), compute_format);
      copy.set_activation_precision(compute_format);
    }
    fn(copy);
  };
  if (state_.model_parallel()) {
    parallel::FullState serial;
    snapshot_serial(serial);
    on_copy(serial.values);
  } else if (state_.config.parallel.cp > 1) {
    data_parallel.gather_all();
    const Tensor values = model.parameters().flat_values().clone();
    data_parallel.release_all();
    on_copy(values);
  } else {
    data_parallel.gather_all();
    try {
      fn(model);
    } catch (...) {
      data_parallel.release_all();
      throw;
    }
    data_parallel.release_all();
  }
}

nn::Generation InferenceSession::generate_ids(const std::vector<std::int32_t>& prompt, const nn::GenerateArgs& given) {
  nn::check_generate_args(given);  // before the collective snapshot: every rank refuses alike
  nn::GenerateArgs args = given;
  // Ids the data never holds (model.vocab_size above the tokenizer's) are never drawn.
  if (args.vocab_limit == 0) args.vocab_limit = vocab_limit_;
  nn::Generation out;
  with_serial_model([&](nn::GptModel& model) { out = nn::generate_with_logprobs(model, prompt, args); });
  return out;
}

Tensor InferenceSession::forward_logits(const Tensor& ids) {
  const std::int64_t context_length = state_.config.model.context_length;
  MYRIAD_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32,
               "Engine.forward: tokens must be a (rows, T) int32 array, got " << shape_string(ids.shape()) << " "
                                                                              << dtype_name(ids.dtype()));
  MYRIAD_CHECK(ids.size(0) >= 1 && ids.size(1) >= 1 && ids.size(1) <= context_length,
               "Engine.forward: tokens " << shape_string(ids.shape()) << " need at least one row and 1 <= T <= "
                                         << "model.context_length " << context_length);
  Tensor logits;
  with_serial_model([&](nn::GptModel& model) { logits = model.forward_logits(ids); });
  return logits;
}

std::string InferenceSession::generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature,
                                       std::int64_t top_k, std::uint64_t seed) {
  MYRIAD_CHECK(tokenizer_ != nullptr,
               "generate: this run has no tokenizer (data given as shards only); "
               "set data.tokenizer to gpt2:<dir> or bpe:<file>");
  const data::BpeTokenizer& tok = *tokenizer_;
  std::vector<std::int32_t> ids = tok.encode(prompt);
  ids.insert(ids.begin(), tok.eot_id());
  nn::GenerateArgs args;
  args.max_new_tokens = max_new_tokens;
  args.temperature = temperature;
  args.top_k = top_k;
  args.seed = seed;
  const std::vector<std::int32_t> out = generate_ids(ids, args).ids;
  // Document boundaries (end-of-text tokens) are shown as a separator line.
  std::string text = prompt;
  std::vector<std::int32_t> piece;
  for (std::int32_t id : out) {
    if (id == tok.eot_id()) {
      text += tok.decode(piece) + "\n---\n";
      piece.clear();
    } else {
      piece.push_back(id);
    }
  }
  return text + tok.decode(piece);
}

}  // namespace myriad::train
