// MoE routing on the device (kernels.h, ops/moe_routing.h), float64 math, no atomics:
//   1. choose_kernel      one thread per token: log-sum-exp, scores, top-k by repeated scans
//                         (ties to the lower expert, non-finite scores lowest), combine weights
//   2. sequence_kernel    one block per sequence, a thread per expert: each assignment's place
//                         among its sequence's kept assignments to the same expert (-1 when
//                         its capacity order, counted from the choices of the sequence's
//                         earlier chunks under context parallelism, is over capacity), the
//                         local choices and kept assignments per (sequence, expert), the whole
//                         sequence's choices (from the context under cp), the load-balance P
//   3. offsets_kernel     one block: per expert the kept rows of the sequences before (its
//                         rows' base), counts, each expert's first row; the totals (fixed-order
//                         block reduction of the z-loss over tokens)
//   4. slots_kernel       one thread per assignment: its row, or -1 when dropped; source of
//                         each row (rows no assignment takes stay -1 from a memset)
// Backward: sequence_kernel for the whole sequences' choices per expert, then one thread per
// token for the gradient of the logits. count_route_choices: choose_kernel into scratch, then
// one block per (sequence, chunk) counting. Work per token is O(E k); per sequence O(T k E /
// threads + cp E).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

// Scratch, each part 256-byte aligned.
struct RouteScratch {
  double* lse = nullptr;            // (N)
  double* score_sum = nullptr;      // (N)
  std::int32_t* place = nullptr;    // (N k) row within the sequence's kept rows, -1 dropped
  std::int32_t* routed = nullptr;   // (B, E) local choices
  std::int32_t* kept = nullptr;     // (B, E) local kept assignments
  std::int64_t* choices = nullptr;  // (B, E) the whole sequence's choices
  std::int64_t* base = nullptr;     // (B, E)
  double* balance = nullptr;        // (B, E) P (this rank's tokens, over the whole sequence)
  std::int64_t* start = nullptr;    // (E)
  std::int32_t* chosen = nullptr;   // (N k) count_route_choices only
  float* chosen_weight = nullptr;   // (N k) count_route_choices only
};

std::int64_t aligned(std::int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Lays the parts out from `at` (null: only sizes them); returns the bytes used. `counting`: the
// parts count_route_choices needs (its own expert and weight outputs) instead.
std::int64_t layout(const RouteShape& s, char* at, RouteScratch* out, bool counting = false) {
  const std::int64_t N = s.tokens, E = s.experts, B = s.seq_len > 0 ? N / s.seq_len : 0;
  std::int64_t used = 0;
  auto take = [&](auto*& pointer, std::int64_t count) {
    using T = std::remove_reference_t<decltype(*pointer)>;
    if (at != nullptr) pointer = reinterpret_cast<T*>(at + used);
    used += aligned(count * static_cast<std::int64_t>(sizeof(T)));
  };
  RouteScratch scratch;
  take(scratch.lse, N);
  take(scratch.score_sum, N);
  if (counting) {
    take(scratch.chosen, N * s.top_k);
    take(scratch.chosen_weight, N * s.top_k);
  } else {
    take(scratch.place, N * s.top_k);
    take(scratch.routed, B * E);
    take(scratch.kept, B * E);
    take(scratch.choices, B * E);
    take(scratch.base, B * E);
    take(scratch.balance, B * E);
    take(scratch.start, E);
  }
  if (out != nullptr) *out = scratch;
  return used;
}

__host__ __device__ std::int64_t chunks_of(const RouteShape& s) { return s.context_ranks > 1 ? 2 : 1; }
__host__ __device__ std::int64_t whole_length(const RouteShape& s) { return s.seq_len * s.context_ranks; }

// Under context parallelism: the choices of expert e in sequence b's chunks before this rank's
// local chunk `half` (any rank's), from the all-gathered (cp, B, 2, E) counts.
__device__ std::int64_t choices_before(const RouteShape& s, const std::int64_t* context, std::int64_t b,
                                       std::int64_t half, std::int64_t e) {
  if (context == nullptr) return 0;
  const std::int64_t cp = s.context_ranks, B = s.tokens / s.seq_len, E = s.experts;
  auto global_chunk = [cp](std::int64_t rank, std::int64_t h) { return h == 0 ? rank : 2 * cp - 1 - rank; };
  std::int64_t n = 0;
  for (std::int64_t r = 0; r < cp; ++r) {
    for (std::int64_t h = 0; h < 2; ++h) {
      if (global_chunk(r, h) < global_chunk(s.context_rank, half)) n += context[((r * B + b) * 2 + h) * E + e];
    }
  }
  return n;
}

__device__ std::int64_t sequence_choices(const RouteShape& s, const std::int64_t* context, std::int64_t b,
                                         std::int64_t e) {
  const std::int64_t cp = s.context_ranks, B = s.tokens / s.seq_len, E = s.experts;
  std::int64_t n = 0;
  for (std::int64_t r = 0; r < cp; ++r)
    n += context[((r * B + b) * 2) * E + e] + context[((r * B + b) * 2 + 1) * E + e];
  return n;
}

__device__ double score_of(float logit, double lse, bool sigmoid) {
  const double l = logit;
  return sigmoid ? 1.0 / (1.0 + exp(-l)) : exp(l - lse);
}

__device__ double choice_key(double s) { return isnan(s) ? -INFINITY : s; }

__device__ double token_lse(const float* l, std::int64_t E) {
  double max = -INFINITY;
  for (std::int64_t e = 0; e < E; ++e) max = fmax(max, static_cast<double>(l[e]));
  double sum = 0.0;
  for (std::int64_t e = 0; e < E; ++e) sum += exp(static_cast<double>(l[e]) - max);
  return max + log(sum);
}

__global__ void choose_kernel(RouteShape s, const float* logits, std::int32_t* expert, float* weight,
                              RouteScratch scratch) {
  const std::int64_t N = s.tokens, E = s.experts, k = s.top_k;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < N; t += stride) {
    const float* l = logits + t * E;
    const double lse = token_lse(l, E);
    double score_sum = 0.0;
    for (std::int64_t e = 0; e < E; ++e) score_sum += score_of(l[e], lse, s.sigmoid);
    scratch.lse[t] = lse;
    scratch.score_sum[t] = score_sum;
    std::int32_t chosen[kMaxRouteTopK];
    double chosen_score[kMaxRouteTopK];
    double chosen_sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) {
      std::int32_t best = -1;
      double best_key = -INFINITY, best_score = 0.0;
      for (std::int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (std::int64_t i = 0; i < j; ++i) taken = taken || chosen[i] == e;
        if (taken) continue;
        const double score = score_of(l[e], lse, s.sigmoid), key = choice_key(score);
        if (best < 0 || key > best_key) {
          best = static_cast<std::int32_t>(e);
          best_key = key;
          best_score = score;
        }
      }
      chosen[j] = best;
      chosen_score[j] = best_score;
      chosen_sum += best_score;
    }
    for (std::int64_t j = 0; j < k; ++j) {
      expert[t * k + j] = chosen[j];
      weight[t * k + j] = static_cast<float>(s.normalize_top_k ? chosen_score[j] / chosen_sum : chosen_score[j]);
    }
  }
}

// Block b = sequence b. The backward (with_places_and_balance false) needs only `choices`.
__global__ void sequence_kernel(RouteShape s, const float* logits, const std::int64_t* context,
                                const std::int32_t* expert, RouteScratch scratch, bool with_places_and_balance) {
  const std::int64_t E = s.experts, k = s.top_k, T = s.seq_len, b = blockIdx.x, H = chunks_of(s), chunk_len = T / H;
  const double Tg = static_cast<double>(whole_length(s));
  for (std::int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    std::int32_t routed = 0, kept = 0;
    for (std::int64_t h = 0; h < H; ++h) {
      std::int64_t order = choices_before(s, context, b, h, e);  // the capacity order
      const std::int64_t first = (b * T + h * chunk_len) * k, last = first + chunk_len * k;
      for (std::int64_t a = first; a < last; ++a) {
        if (expert[a] != e) continue;
        const bool keep = s.capacity < 0 || order < s.capacity;
        if (with_places_and_balance) scratch.place[a] = keep ? kept : -1;
        kept += keep ? 1 : 0;
        ++order;
        ++routed;
      }
    }
    scratch.choices[b * E + e] = context != nullptr ? sequence_choices(s, context, b, e) : routed;
    if (!with_places_and_balance) continue;
    scratch.routed[b * E + e] = routed;
    scratch.kept[b * E + e] = kept;
    double P = 0.0;
    for (std::int64_t t = b * T; t < (b + 1) * T; ++t) {
      const double score = score_of(logits[t * E + e], scratch.lse[t], s.sigmoid);
      P += (s.sigmoid ? score / scratch.score_sum[t] : score) / Tg;
    }
    scratch.balance[b * E + e] = P;
  }
}

// Block (b, h): one local chunk of a sequence; a thread per expert counts its choices.
__global__ void count_kernel(RouteShape s, const std::int32_t* expert, std::int64_t* counts) {
  const std::int64_t E = s.experts, k = s.top_k, chunk_len = s.seq_len / chunks_of(s), chunk = blockIdx.x;
  for (std::int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    std::int64_t n = 0;
    for (std::int64_t a = chunk * chunk_len * k; a < (chunk + 1) * chunk_len * k; ++a) n += expert[a] == e ? 1 : 0;
    counts[chunk * E + e] = n;
  }
}

__global__ void offsets_kernel(RouteShape s, std::int64_t* counts, double* totals, RouteScratch scratch) {
  const std::int64_t E = s.experts, B = s.tokens / s.seq_len, k = s.top_k;
  const double Tg = static_cast<double>(whole_length(s));
  __shared__ double partial[kThreads];
  for (std::int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    std::int64_t kept = 0, routed = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      scratch.base[b * E + e] = kept;
      routed += scratch.routed[b * E + e];
      kept += scratch.kept[b * E + e];
    }
    counts[e] = kept;
    if (totals != nullptr) totals[e] += static_cast<double>(routed);
  }
  // The z-loss over tokens: strided partial sums, then a fixed tree.
  double z = 0.0;
  for (std::int64_t t = threadIdx.x; t < s.tokens; t += blockDim.x) z += scratch.lse[t] * scratch.lse[t];
  partial[threadIdx.x] = z;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  std::int64_t dropped = 0, start = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    scratch.start[e] = s.padded ? e * s.expert_block : start;
    start += counts[e];
  }
  if (totals == nullptr) return;
  double aux_sum = 0.0;
  for (std::int64_t b = 0; b < B; ++b) {
    double aux = 0.0;
    for (std::int64_t e = 0; e < E; ++e) {
      dropped += scratch.routed[b * E + e] - scratch.kept[b * E + e];
      aux +=
          static_cast<double>(scratch.choices[b * E + e]) / (Tg * static_cast<double>(k)) * scratch.balance[b * E + e];
    }
    aux_sum += static_cast<double>(E) * aux;
  }
  totals[E] += static_cast<double>(dropped);
  totals[E + 1] += aux_sum;
  totals[E + 2] += partial[0];
}

__global__ void slots_kernel(RouteShape s, const std::int32_t* expert, std::int32_t* slot, std::int32_t* source,
                             RouteScratch scratch) {
  const std::int64_t n = s.tokens * s.top_k, E = s.experts;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t a = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < n; a += stride) {
    const std::int64_t e = expert[a], b = a / s.top_k / s.seq_len, place = scratch.place[a];
    if (place < 0) {
      slot[a] = -1;
      continue;
    }
    const std::int64_t row = scratch.start[e] + scratch.base[b * E + e] + place;
    slot[a] = static_cast<std::int32_t>(row);
    source[row] = static_cast<std::int32_t>(a / s.top_k);
  }
}

__global__ void backward_kernel(RouteShape s, const float* logits, const std::int32_t* expert, const float* grad_weight,
                                double aux_scale, double z_scale, const float* scale, float* grad_logits,
                                RouteScratch scratch) {
  const std::int64_t N = s.tokens, E = s.experts, k = s.top_k, T = s.seq_len;
  if (scale != nullptr) {  // the step's loss scale, read when the kernel runs (a graph's replays follow it)
    aux_scale *= static_cast<double>(*scale);
    z_scale *= static_cast<double>(*scale);
  }
  const double Tg = static_cast<double>(whole_length(s));
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < N; t += stride) {
    const float* l = logits + t * E;
    const std::int32_t* chosen = expert + t * k;
    const float* g = grad_weight + t * k;
    const std::int64_t* routed = scratch.choices + t / T * E;
    const double lse = token_lse(l, E);
    double Z = 0.0, score_sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) Z += score_of(l[chosen[j]], lse, s.sigmoid);
    for (std::int64_t e = 0; e < E; ++e) score_sum += score_of(l[e], lse, s.sigmoid);
    const double per_assignment = aux_scale * static_cast<double>(E) / (Tg * static_cast<double>(k)) / Tg;
    // ds_e = the load-balance part (through p's normalisation for sigmoid) + the chosen part.
    double dp_dot_p = 0.0;
    for (std::int64_t e = 0; e < E; ++e) {
      const double score = score_of(l[e], lse, s.sigmoid);
      dp_dot_p += per_assignment * static_cast<double>(routed[e]) * (s.sigmoid ? score / score_sum : score);
    }
    double gw = 0.0;
    for (std::int64_t j = 0; j < k; ++j) gw += static_cast<double>(g[j]) * (score_of(l[chosen[j]], lse, s.sigmoid) / Z);
    auto ds_of = [&](std::int64_t e) {
      double ds = per_assignment * static_cast<double>(routed[e]);
      if (s.sigmoid) ds = (ds - dp_dot_p) / score_sum;
      for (std::int64_t j = 0; j < k; ++j) {
        if (chosen[j] == e) ds += s.normalize_top_k ? (static_cast<double>(g[j]) - gw) / Z : static_cast<double>(g[j]);
      }
      return ds;
    };
    double dot = 0.0;
    if (!s.sigmoid) {
      for (std::int64_t e = 0; e < E; ++e) dot += ds_of(e) * score_of(l[e], lse, false);
    }
    for (std::int64_t e = 0; e < E; ++e) {
      const double score = score_of(l[e], lse, s.sigmoid), ds = ds_of(e);
      double d = s.sigmoid ? ds * score * (1.0 - score) : score * (ds - dot);
      if (z_scale != 0.0) d += z_scale * 2.0 * lse * exp(static_cast<double>(l[e]) - lse);
      grad_logits[t * E + e] = static_cast<float>(d);
    }
  }
}

void check_shape(const char* op, const RouteShape& s) {
  detail::check_count(op, "tokens", s.tokens);
  MYRIAD_CHECK(
      s.experts >= 1 && s.top_k >= 1 && s.top_k <= s.experts && s.top_k <= kMaxRouteTopK,
      op << ": top_k " << s.top_k << " must lie in [1, min(experts " << s.experts << ", " << kMaxRouteTopK << ")]");
  MYRIAD_CHECK(s.seq_len > 0 && s.tokens % s.seq_len == 0,
               op << ": " << s.tokens << " tokens are not whole sequences of " << s.seq_len);
  MYRIAD_CHECK(
      s.capacity >= -1 && (!s.padded || (s.capacity >= 0 && s.expert_block >= 0)),
      op << ": capacity " << s.capacity << (s.padded ? " padded" : " compact") << ", expert_block " << s.expert_block);
  MYRIAD_CHECK(
      s.context_ranks >= 1 && s.context_rank >= 0 && s.context_rank < s.context_ranks &&
          (s.context_ranks == 1 || s.seq_len % 2 == 0),
      op << ": context rank " << s.context_rank << " of " << s.context_ranks << " with sequences of " << s.seq_len);
  MYRIAD_CHECK(s.tokens * s.top_k <= INT32_MAX && s.experts * std::max<std::int64_t>(s.expert_block, 1) <= INT32_MAX,
               op << ": rows do not fit the i32 indices");
}

RouteScratch checked_scratch(const char* op, const RouteShape& s, void* scratch, std::int64_t scratch_bytes,
                             bool counting = false) {
  const std::int64_t need = layout(s, nullptr, nullptr, counting);
  MYRIAD_CHECK(scratch_bytes >= need, op << ": scratch of " << scratch_bytes << " bytes, needs " << need);
  detail::check_pointer(op, "scratch", scratch, alignof(double));
  RouteScratch parts;
  layout(s, static_cast<char*>(scratch), &parts, counting);
  return parts;
}

void check_context(const char* op, const RouteShape& s, const std::int64_t* context) {
  MYRIAD_CHECK((context != nullptr) == (s.context_ranks > 1), op << ": the context counts are "
                                                                 << (context != nullptr ? "given" : "missing")
                                                                 << " with " << s.context_ranks << " context rank(s)");
  if (context != nullptr) detail::check_pointer(op, "context", context, alignof(std::int64_t));
}

}  // namespace

std::int64_t route_tokens_scratch_bytes(const RouteShape& shape) { return layout(shape, nullptr, nullptr); }

void route_tokens_f32(const RouteShape& shape, const float* logits, const std::int64_t* context, std::int32_t* expert,
                      float* weight, std::int32_t* slot, std::int32_t* source, std::int64_t source_rows,
                      std::int64_t* counts, double* totals, void* scratch, std::int64_t scratch_bytes,
                      cudaStream_t stream) {
  const char* op = "route_tokens_f32";
  check_shape(op, shape);
  check_context(op, shape, context);
  const std::int64_t N = shape.tokens, E = shape.experts, k = shape.top_k;
  const std::int64_t want_rows = shape.padded ? E * shape.expert_block : N * k;
  MYRIAD_CHECK(source_rows == want_rows, op << ": source has " << source_rows << " rows, the layout " << want_rows);
  detail::check_pointer(op, "counts", counts, alignof(std::int64_t));
  detail::check_optional_pointer(op, "totals", totals, alignof(double));
  if (N == 0) {
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<std::size_t>(E) * sizeof(std::int64_t), stream));
    return;
  }
  detail::check_pointer(op, "logits", logits, alignof(float));
  detail::check_pointer(op, "expert", expert, alignof(std::int32_t));
  detail::check_pointer(op, "weight", weight, alignof(float));
  detail::check_pointer(op, "slot", slot, alignof(std::int32_t));
  detail::check_pointer(op, "source", source, alignof(std::int32_t));
  const RouteScratch parts = checked_scratch(op, shape, scratch, scratch_bytes);
  const auto B = static_cast<unsigned>(N / shape.seq_len);
  MYRIAD_CUDA_CHECK(
      cudaMemsetAsync(source, 0xFF, static_cast<std::size_t>(source_rows) * sizeof(std::int32_t), stream));
  choose_kernel<<<detail::grid_stride_blocks(op, N, kThreads), kThreads, 0, stream>>>(shape, logits, expert, weight,
                                                                                      parts);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  sequence_kernel<<<B, kThreads, 0, stream>>>(shape, logits, context, expert, parts, true);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  offsets_kernel<<<1, kThreads, 0, stream>>>(shape, counts, totals, parts);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  slots_kernel<<<detail::grid_stride_blocks(op, N * k, kThreads), kThreads, 0, stream>>>(shape, expert, slot, source,
                                                                                         parts);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void route_tokens_backward_f32(const RouteShape& shape, const float* logits, const std::int64_t* context,
                               const std::int32_t* expert, const float* grad_weight, double aux_scale, double z_scale,
                               const float* scale, float* grad_logits, void* scratch, std::int64_t scratch_bytes,
                               cudaStream_t stream) {
  const char* op = "route_tokens_backward_f32";
  check_shape(op, shape);
  check_context(op, shape, context);
  const std::int64_t N = shape.tokens;
  if (N == 0) return;
  detail::check_pointer(op, "logits", logits, alignof(float));
  detail::check_pointer(op, "expert", expert, alignof(std::int32_t));
  detail::check_pointer(op, "grad_weight", grad_weight, alignof(float));
  detail::check_pointer(op, "grad_logits", grad_logits, alignof(float));
  if (scale != nullptr) detail::check_pointer(op, "scale", scale, alignof(float));
  detail::check_disjoint(op, "grad_logits", grad_logits, static_cast<std::size_t>(N * shape.experts) * sizeof(float),
                         "logits", logits, static_cast<std::size_t>(N * shape.experts) * sizeof(float));
  const RouteScratch parts = checked_scratch(op, shape, scratch, scratch_bytes);
  const auto B = static_cast<unsigned>(N / shape.seq_len);
  sequence_kernel<<<B, kThreads, 0, stream>>>(shape, logits, context, expert, parts, false);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  backward_kernel<<<detail::grid_stride_blocks(op, N, kThreads), kThreads, 0, stream>>>(
      shape, logits, expert, grad_weight, aux_scale, z_scale, scale, grad_logits, parts);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

std::int64_t count_route_choices_scratch_bytes(const RouteShape& shape) {
  return layout(shape, nullptr, nullptr, true);
}

void count_route_choices_f32(const RouteShape& shape, const float* logits, std::int64_t* counts, void* scratch,
                             std::int64_t scratch_bytes, cudaStream_t stream) {
  const char* op = "count_route_choices_f32";
  check_shape(op, shape);
  const std::int64_t N = shape.tokens;
  if (N == 0) return;
  detail::check_pointer(op, "logits", logits, alignof(float));
  detail::check_pointer(op, "counts", counts, alignof(std::int64_t));
  const RouteScratch parts = checked_scratch(op, shape, scratch, scratch_bytes, true);
  choose_kernel<<<detail::grid_stride_blocks(op, N, kThreads), kThreads, 0, stream>>>(shape, logits, parts.chosen,
                                                                                      parts.chosen_weight, parts);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  const auto chunks = static_cast<unsigned>(N / shape.seq_len * chunks_of(shape));
  count_kernel<<<chunks, kThreads, 0, stream>>>(shape, parts.chosen, counts);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
