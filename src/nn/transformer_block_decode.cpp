// TransformerBlock::decode — the forward of one new position against the KV cache (generation).
// Same math as forward() restricted to the last row: norms, projections and MLP reuse the ops
// on (1, 1, ·) tensors; attention of the single query over cached rows [0, position] is a
// direct loop (softmax in float64 for the few hundred scores involved).
#include <cmath>
#include <vector>

#include "myriad/nn/linear.h"
#include "myriad/nn/transformer_block.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/rope.h"

namespace myriad::nn {

void TransformerBlock::decode(const ParameterStore& store, const Tensor& x, std::int64_t position, KvCache& cache,
                              Tensor& y) const {
  const std::int64_t C = config_.n_embd, F = config_.ffn_hidden, Hq = config_.n_head, Hkv = config_.n_kv_head;
  const std::int64_t D = config_.head_dim(), group = Hq / Hkv;
  MYRIAD_CHECK(split_.tp_size() == 1, "decode: layer " << layer_ << " is split over tp " << split_.tp_size()
                                                        << "; generation runs on a serial copy of the model");
  MYRIAD_CHECK(position < cache.capacity(), "decode: position " << position << " beyond the KV cache capacity "
                                                                << cache.capacity() << " (context_length)");
  auto value = [&](std::size_t index) { return index == npos ? Tensor() : store[index].value; };
  Tensor mean = Tensor::empty({1}), rstd = Tensor::empty({1});
  Tensor h = Tensor::empty({1, 1, C}), qkv = Tensor::empty({1, 1, config_.qkv_width()});
  norm_forward(store, norm1_w_, norm1_b_, x, h, mean, rstd);
  linear_forward(h, store[qkv_w_].value, value(qkv_b_), qkv, operands_);
  Tensor q = qkv.slice(2, 0, Hq * D).contiguous().view({1, 1, Hq, D});
  Tensor k = qkv.slice(2, Hq * D, (Hq + Hkv) * D).contiguous().view({1, 1, Hkv, D});
  Tensor v = qkv.slice(2, (Hq + Hkv) * D, (Hq + 2 * Hkv) * D).contiguous().view({1, 1, Hkv, D});
  if (config_.positions == PositionKind::rope) {
    RopeArgs rope{.theta = config_.rope_theta, .position_offset = position};
    rope_forward(rope, q, q);
    rope_forward(rope, k, k);
  }
  Tensor& k_cache = cache.k[layer_];
  Tensor& v_cache = cache.v[layer_];
  for (std::int64_t g = 0; g < Hkv; ++g) {
    k_cache.select(0, g).select(0, position).copy_from(k.select(0, 0).select(0, 0).select(0, g));
    v_cache.select(0, g).select(0, position).copy_from(v.select(0, 0).select(0, 0).select(0, g));
  }
  Tensor att = Tensor::zeros({1, 1, C});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> scores(position + 1);
  for (std::int64_t h_index = 0; h_index < Hq; ++h_index) {
    const float* qh = q.data<float>() + h_index * D;
    const std::int64_t g = h_index / group;
    const float* kc = k_cache.data<float>() + g * k_cache.stride(0);
    const float* vc = v_cache.data<float>() + g * v_cache.stride(0);
    double max_score = -INFINITY, total = 0.0;
    for (std::int64_t j = 0; j <= position; ++j) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * kc[j * D + d];
      scores[j] = dot * scale;
      max_score = std::max(max_score, scores[j]);
    }
    for (std::int64_t j = 0; j <= position; ++j) total += (scores[j] = std::exp(scores[j] - max_score));
    float* out = att.data<float>() + h_index * D;
    for (std::int64_t d = 0; d < D; ++d) {
      double acc = 0.0;
      for (std::int64_t j = 0; j <= position; ++j) acc += scores[j] * vc[j * D + d];
      out[d] = static_cast<float>(acc / total);
    }
  }
  Tensor x_mid = Tensor::empty({1, 1, C});
  linear_forward(att, store[proj_w_].value, value(proj_b_), x_mid, operands_);
  add_into(x_mid, x);
  Tensor h2 = Tensor::empty({1, 1, C}), fc = Tensor::empty({1, 1, F}), act = Tensor::empty({1, 1, F});
  norm_forward(store, norm2_w_, norm2_b_, x_mid, h2, mean, rstd);
  linear_forward(h2, store[fc_w_].value, value(fc_b_), fc, operands_);
  if (config_.mlp == MlpKind::gelu) {
    gelu_forward(GeluArgs{}, fc, act);
  } else {
    Tensor up = Tensor::empty({1, 1, F});
    linear_forward(h2, store[up_w_].value, Tensor(), up, operands_);
    swiglu_forward(SwigluArgs{}, fc, up, act);
  }
  linear_forward(act, store[out_w_].value, value(out_b_), y, operands_);
  add_into(y, x_mid);
}

}  // namespace myriad::nn
