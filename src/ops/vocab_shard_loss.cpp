// Vocabulary-shard loss pieces, dispatch point: validates shapes / dtypes / devices, then picks
// the backend (ops/vocab_shard_loss.h).
#include "myriad/ops/vocab_shard_loss.h"

#include <cstdint>

#include "myriad/core/error.h"
#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// state (n) i32 contiguous; returns n.
std::int64_t check_state(const char* op, const Tensor& state) {
  ops::check_defined(op, "state", state);
  ops::check_dtype(op, "state", state, DType::i32);
  ops::check_rank(op, "state", state, 1);
  ops::check_contiguous(op, "state", state);
  return state.size(0);
}

}  // namespace

void vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out) {
  const char* op = "vocab_shard_tokens";
  ops::check_defined(op, "tokens", tokens);
  ops::check_defined(op, "out", out);
  ops::check_dtype(op, "tokens", tokens, DType::i32);
  ops::check_dtype(op, "out", out, DType::i32);
  ops::check_contiguous(op, "tokens", tokens);
  ops::check_contiguous(op, "out", out);
  MYRIAD_CHECK(out.shape() == tokens.shape(),
               op << ": out " << out.describe() << " must have the shape of tokens " << tokens.describe());
  MYRIAD_CHECK(map.vocab_start >= 0 && map.rows >= 0 && map.vocab_start + map.rows <= INT32_MAX,
               op << ": the shard [" << map.vocab_start << ", " << map.vocab_start + map.rows
                  << ") is not a range of i32 token ids");
  const Device device = ops::check_same_device(op, {{"tokens", &tokens}, {"out", &out}});
  if (device.is_cpu()) return cpu::vocab_shard_tokens(map, tokens, out);
  ops::backend_of(op, {{"out", &out}}).vocab_shard_tokens(map, tokens, out);
}

void vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss, const Tensor& maxima,
                          Tensor& packed) {
  const char* op = "vocab_shard_partials";
  const std::int64_t n = check_state(op, state);
  ops::check_f32_contiguous(op, "local_lse", local_lse, {n});
  ops::check_f32_contiguous(op, "local_loss", local_loss, {n});
  ops::check_f32_contiguous(op, "maxima", maxima, {n});
  ops::check_f32_contiguous(op, "packed", packed, {2 * n});
  const Device device = ops::check_same_device(op, {{"state", &state},
                                                    {"local_lse", &local_lse},
                                                    {"local_loss", &local_loss},
                                                    {"maxima", &maxima},
                                                    {"packed", &packed}});
  if (device.is_cpu()) return cpu::vocab_shard_partials(state, local_lse, local_loss, maxima, packed);
  ops::backend_of(op, {{"packed", &packed}}).vocab_shard_partials(state, local_lse, local_loss, maxima, packed);
}

void vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse, Tensor& losses) {
  const char* op = "vocab_shard_combine";
  const std::int64_t n = check_state(op, state);
  ops::check_f32_contiguous(op, "maxima", maxima, {n});
  ops::check_f32_contiguous(op, "packed", packed, {2 * n});
  ops::check_f32_contiguous(op, "lse", lse, {n});
  ops::check_f32_contiguous(op, "losses", losses, {n});
  const Device device = ops::check_same_device(
      op, {{"state", &state}, {"maxima", &maxima}, {"packed", &packed}, {"lse", &lse}, {"losses", &losses}});
  if (device.is_cpu()) return cpu::vocab_shard_combine(state, maxima, packed, lse, losses);
  ops::backend_of(op, {{"lse", &lse}}).vocab_shard_combine(state, maxima, packed, lse, losses);
}

}  // namespace myriad
