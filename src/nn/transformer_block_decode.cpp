// TransformerBlock::decode — the forward of one new position against the KV cache (generation),
// over the ops on the model's placement (host or a backend). Same math as forward() restricted to
// the last row: norms, projections and MLP on (1, 1, ·) tensors; attention of the single query
// over cached rows [0, position] as two batched GEMMs per kv-head group around a row softmax.
#include <cmath>

#include "myriad/nn/linear.h"
#include "myriad/nn/transformer_block.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/placement.h"
#include "myriad/ops/rope.h"
#include "myriad/ops/softmax.h"

namespace myriad::nn {

void TransformerBlock::decode(const ParameterStore& store, const Tensor& x, std::int64_t position, KvCache& cache,
                              Tensor& y) const {
  const std::int64_t C = config_.n_embd, F = config_.ffn_hidden, Hq = config_.n_head, Hkv = config_.n_kv_head;
  const std::int64_t D = config_.head_dim(), group = Hq / Hkv, W = config_.qkv_width(), L = position + 1;
  MYRIAD_CHECK(split_.tp_size() == 1, "decode: layer " << layer_ << " is split over tp " << split_.tp_size()
                                                       << "; generation runs on a serial copy of the model");
  MYRIAD_CHECK(position < cache.capacity(), "decode: position " << position << " beyond the KV cache capacity "
                                                                << cache.capacity() << " (context_length)");
  const ops::Placement p = ops::placement_of(x, "x");
  auto value = [&](std::size_t index) { return index == npos ? Tensor() : store[index].value; };
  Tensor mean = p.empty({1}), rstd = p.empty({1});
  Tensor h = p.empty({1, 1, C}), qkv = p.empty({1, 1, W});
  norm_forward(store, norm1_w_, norm1_b_, x, h, mean, rstd);
  linear_forward(h, store[qkv_w_], value(qkv_b_), qkv, operands_);
  // q, k, v: the heads of the qkv row (strides [W, W, D, 1]), gathered contiguous.
  auto heads = [&](std::int64_t first, std::int64_t count) {
    const Tensor view =
        Tensor::from_storage(qkv.storage(), {1, 1, count, D}, {W, W, D, 1}, qkv.offset() + first * D, DType::f32);
    Tensor out = p.empty({1, 1, count, D});
    copy(view, out);
    return out;
  };
  Tensor q = heads(0, Hq), k = heads(Hq, Hkv), v = heads(Hq + Hkv, Hkv);
  if (config_.positions == PositionKind::rope) {
    RopeArgs rope{.theta = config_.rope_theta, .position_offset = position};
    rope_forward(rope, q, q);
    rope_forward(rope, k, k);
  }
  Tensor k_row = cache.k[layer_].slice(0, position, position + 1);
  Tensor v_row = cache.v[layer_].slice(0, position, position + 1);
  copy(k.view({1, Hkv, D}), k_row);
  copy(v.view({1, Hkv, D}), v_row);
  // Per kv head g: scores (group, L) = (q_g / sqrt(D)) K_g^T, softmax, out_g = P V_g, where K_g,
  // V_g are the cached rows [0, L) of head g, gathered (Hkv, L, D) from the (capacity, Hkv, D)
  // cache (its heads-of-rows view, strides [L Hkv D, D, Hkv D, 1]).
  auto gathered = [&](const Tensor& rows) {
    const Tensor view =
        Tensor::from_storage(rows.storage(), {1, Hkv, L, D}, {L * Hkv * D, D, Hkv * D, 1}, rows.offset(), DType::f32);
    Tensor out = p.empty({1, Hkv, L, D});
    copy(view, out);
    return out.view({Hkv, L, D});
  };
  Tensor scaled = p.empty({Hkv, group, D});
  add_forward(AddArgs{.alpha = 1.0f / std::sqrt(static_cast<float>(D))}, q.view({Hkv, group, D}), Tensor(), scaled);
  const Tensor keys = gathered(cache.k[layer_]), values = gathered(cache.v[layer_]);
  Tensor scores = p.empty({Hkv, group, L});
  matmul_forward(MatmulArgs{.transpose_b = true}, scaled, keys, scores);
  softmax_forward(SoftmaxArgs{}, scores, scores);
  Tensor att = p.empty({1, 1, C});
  Tensor att_heads = att.view({Hkv, group, D});
  matmul_forward(MatmulArgs{}, scores, values, att_heads);
  Tensor x_mid = p.empty({1, 1, C});
  linear_forward(att, store[proj_w_], value(proj_b_), x_mid, operands_);
  add_into(x_mid, x);
  Tensor h2 = p.empty({1, 1, C});
  norm_forward(store, norm2_w_, norm2_b_, x_mid, h2, mean, rstd);
  if (moe_) {  // the token routed alone (a sequence of one: capacity never binds)
    MoeActivations scratch;
    moe_->forward(store, h2, y, scratch);
    add_into(y, x_mid);
    return;
  }
  Tensor fc = p.empty({1, 1, F}), act = p.empty({1, 1, F});
  linear_forward(h2, store[fc_w_], value(fc_b_), fc, operands_);
  if (config_.mlp == MlpKind::gelu) {
    gelu_forward(GeluArgs{}, fc, act);
  } else {
    Tensor up = p.empty({1, 1, F});
    linear_forward(h2, store[up_w_], Tensor(), up, operands_);
    swiglu_forward(SwigluArgs{}, fc, up, act);
  }
  linear_forward(act, store[out_w_], value(out_b_), y, operands_);
  add_into(y, x_mid);
}

}  // namespace myriad::nn
