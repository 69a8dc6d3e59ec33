// Vocabulary-shard loss pieces, dispatch point: validates shapes / dtypes / devices, then picks
// the backend (ops/vocab_shard_loss.h).
#include "myriad/ops/vocab_shard_loss.h"

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
