// TransformerBlock forward / recompute / backward over the reference ops.
#include "myriad/nn/transformer_block.h"

#include <cmath>

#include "myriad/nn/linear.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/rope.h"

namespace myriad::nn {

namespace {

// (B, T, heads, D) strided view of the column block [first_col, first_col + heads*D) of a
// (B, T, W) tensor.
Tensor head_view(const Tensor& packed, std::int64_t first_col, std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t B = packed.size(0), T = packed.size(1), W = packed.size(2);
  return Tensor::from_storage(packed.storage(), {B, T, heads, head_dim}, {T * W, W, head_dim, 1},
                              packed.offset() + first_col, DType::f32);
}

Tensor bhtd(const Tensor& bthd) { return bthd.permute({0, 2, 1, 3}); }

Tensor optional(const ParameterStore& store, std::size_t index, bool grad) {
  if (index == static_cast<std::size_t>(-1)) return Tensor();
  return grad ? store[index].grad : store[index].value;
}

}  // namespace

std::vector<ActivationSlot> block_activation_slots(const TransformerConfig& c, std::int64_t B, std::int64_t T) {
  const std::int64_t C = c.n_embd, F = c.ffn_hidden, D = c.head_dim();
  std::vector<ActivationSlot> slots = {
      {&BlockActivations::ln1_mean, {B, T}, true}, {&BlockActivations::ln1_rstd, {B, T}, true},
      {&BlockActivations::h1, {B, T, C}, false},   {&BlockActivations::qkv, {B, T, c.qkv_width()}, true},
      {&BlockActivations::att, {B, T, C}, true},   {&BlockActivations::lse, {B, c.n_head, T}, true},
      {&BlockActivations::x_mid, {B, T, C}, true}, {&BlockActivations::ln2_mean, {B, T}, true},
      {&BlockActivations::ln2_rstd, {B, T}, true}, {&BlockActivations::h2, {B, T, C}, false},
      {&BlockActivations::fc, {B, T, F}, true},    {&BlockActivations::act, {B, T, F}, false},
  };
  if (c.positions == PositionKind::rope) {
    slots.push_back({&BlockActivations::q_rot, {B, T, c.n_head, D}, true});
    slots.push_back({&BlockActivations::k_rot, {B, T, c.n_kv_head, D}, true});
  }
  if (c.mlp == MlpKind::swiglu) slots.push_back({&BlockActivations::up, {B, T, F}, true});
  return slots;
}

BlockScratch make_block_scratch(const TransformerConfig& c, std::int64_t B, std::int64_t T) {
  const std::int64_t C = c.n_embd, F = c.ffn_hidden;
  BlockScratch s;
  s.d_h = Tensor::empty({B, T, C});
  s.d_tmp = Tensor::empty({B, T, C});
  s.d_att = Tensor::empty({B, T, C});
  s.y_discard = Tensor::empty({B, T, C});
  s.d_qkv = Tensor::empty({B, T, c.qkv_width()});
  s.d_fc = Tensor::empty({B, T, F});
  s.d_act = Tensor::empty({B, T, F});
  if (c.mlp == MlpKind::swiglu) s.d_up = Tensor::empty({B, T, F});
  return s;
}

TransformerBlock::TransformerBlock(const TransformerConfig& config, int layer, ParameterStore& store)
    : config_(config), layer_(layer) {
  const std::int64_t C = config.n_embd, F = config.ffn_hidden;
  const std::string prefix = "blocks." + std::to_string(layer) + ".";
  const float std = config.init_std;
  // GPT-2 scales the init of projections that write into the residual stream by 1/sqrt(2L).
  const float residual_std = std / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  const bool layernorm = config.norm == NormKind::layernorm;
  norm1_w_ = store.add(prefix + "norm1.weight", {C}, ParamKind::norm, ParamInit::ones);
  if (layernorm) norm1_b_ = store.add(prefix + "norm1.bias", {C}, ParamKind::bias, ParamInit::zeros);
  qkv_w_ = store.add(prefix + "attn.qkv.weight", {config.qkv_width(), C}, ParamKind::weight, ParamInit::normal, std);
  if (config.bias) qkv_b_ = store.add(prefix + "attn.qkv.bias", {config.qkv_width()}, ParamKind::bias, ParamInit::zeros);
  proj_w_ = store.add(prefix + "attn.proj.weight", {C, C}, ParamKind::weight, ParamInit::normal, residual_std);
  if (config.bias) proj_b_ = store.add(prefix + "attn.proj.bias", {C}, ParamKind::bias, ParamInit::zeros);
  norm2_w_ = store.add(prefix + "norm2.weight", {C}, ParamKind::norm, ParamInit::ones);
  if (layernorm) norm2_b_ = store.add(prefix + "norm2.bias", {C}, ParamKind::bias, ParamInit::zeros);
  if (config.mlp == MlpKind::gelu) {
    fc_w_ = store.add(prefix + "mlp.fc.weight", {F, C}, ParamKind::weight, ParamInit::normal, std);
    if (config.bias) fc_b_ = store.add(prefix + "mlp.fc.bias", {F}, ParamKind::bias, ParamInit::zeros);
    out_w_ = store.add(prefix + "mlp.proj.weight", {C, F}, ParamKind::weight, ParamInit::normal, residual_std);
  } else {
    fc_w_ = store.add(prefix + "mlp.gate.weight", {F, C}, ParamKind::weight, ParamInit::normal, std);
    if (config.bias) fc_b_ = store.add(prefix + "mlp.gate.bias", {F}, ParamKind::bias, ParamInit::zeros);
    up_w_ = store.add(prefix + "mlp.up.weight", {F, C}, ParamKind::weight, ParamInit::normal, std);
    out_w_ = store.add(prefix + "mlp.down.weight", {C, F}, ParamKind::weight, ParamInit::normal, residual_std);
  }
  if (config.bias) out_b_ = store.add(prefix + "mlp.proj.bias", {C}, ParamKind::bias, ParamInit::zeros);
}

void TransformerBlock::norm_forward(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x,
                                    Tensor& out, Tensor& mean, Tensor& rstd) const {
  if (config_.norm == NormKind::layernorm) {
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, x, store[w].value, optional(store, b, false), out,
                      mean, rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, x, store[w].value, out, rstd);
  }
}

void TransformerBlock::norm_backward(ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& grad_out,
                                     Tensor& grad_x) const {
  if (config_.norm == NormKind::layernorm) {
    Tensor grad_b = optional(store, b, true);
    layernorm_backward(LayernormArgs{.eps = config_.norm_eps}, x, store[w].value, mean, rstd, grad_out, grad_x,
                       store[w].grad, grad_b);
  } else {
    rmsnorm_backward(RmsnormArgs{.eps = config_.norm_eps}, x, store[w].value, rstd, grad_out, grad_x, store[w].grad);
  }
}

void TransformerBlock::mlp_activation(const BlockActivations& acts, Tensor& act) const {
  if (config_.mlp == MlpKind::gelu) {
    gelu_forward(GeluArgs{}, acts.fc, act);
  } else {
    swiglu_forward(SwigluArgs{}, acts.fc, acts.up, act);
  }
}

void TransformerBlock::forward(const ParameterStore& store, const Tensor& x, Tensor& y, BlockActivations& a) const {
  const std::int64_t Hq = config_.n_head, Hkv = config_.n_kv_head, D = config_.head_dim();
  norm_forward(store, norm1_w_, norm1_b_, x, a.h1, a.ln1_mean, a.ln1_rstd);
  linear_forward(a.h1, store[qkv_w_].value, optional(store, qkv_b_, false), a.qkv);
  Tensor q = head_view(a.qkv, 0, Hq, D), k = head_view(a.qkv, Hq * D, Hkv, D);
  Tensor v = head_view(a.qkv, (Hq + Hkv) * D, Hkv, D);
  if (config_.positions == PositionKind::rope) {
    RopeArgs rope{.theta = config_.rope_theta};
    rope_forward(rope, q, a.q_rot);
    rope_forward(rope, k, a.k_rot);
    q = a.q_rot;
    k = a.k_rot;
  }
  Tensor att_heads = bhtd(a.att.view({x.size(0), x.size(1), Hq, D}));
  attention_forward(AttentionArgs{}, bhtd(q), bhtd(k), bhtd(v), att_heads, a.lse);
  linear_forward(a.att, store[proj_w_].value, optional(store, proj_b_, false), a.x_mid);
  add_into(a.x_mid, x);
  norm_forward(store, norm2_w_, norm2_b_, a.x_mid, a.h2, a.ln2_mean, a.ln2_rstd);
  linear_forward(a.h2, store[fc_w_].value, optional(store, fc_b_, false), a.fc);
  if (config_.mlp == MlpKind::swiglu) linear_forward(a.h2, store[up_w_].value, Tensor(), a.up);
  mlp_activation(a, a.act);
  linear_forward(a.act, store[out_w_].value, optional(store, out_b_, false), y);
  add_into(y, a.x_mid);
}

void TransformerBlock::recompute(const ParameterStore& store, const Tensor& x, BlockActivations& a,
                                 BlockScratch& scratch, Recompute mode) const {
  if (mode == Recompute::none) return;
  if (mode == Recompute::full) {
    forward(store, x, scratch.y_discard, a);
    return;
  }
  norm_forward(store, norm1_w_, norm1_b_, x, a.h1, a.ln1_mean, a.ln1_rstd);
  norm_forward(store, norm2_w_, norm2_b_, a.x_mid, a.h2, a.ln2_mean, a.ln2_rstd);
  mlp_activation(a, a.act);
}

void TransformerBlock::backward(ParameterStore& store, const Tensor& x, const BlockActivations& a,
                                BlockScratch& s, Tensor& grad) const {
  const std::int64_t B = x.size(0), T = x.size(1);
  const std::int64_t Hq = config_.n_head, Hkv = config_.n_kv_head, D = config_.head_dim();
  // MLP.
  Tensor out_b = optional(store, out_b_, true), fc_b = optional(store, fc_b_, true), none;
  linear_backward(a.act, store[out_w_].value, grad, s.d_act, false, store[out_w_].grad, out_b);
  if (config_.mlp == MlpKind::gelu) {
    gelu_backward(GeluArgs{}, a.fc, s.d_act, s.d_fc);
    linear_backward(a.h2, store[fc_w_].value, s.d_fc, s.d_h, false, store[fc_w_].grad, fc_b);
  } else {
    swiglu_backward(SwigluArgs{}, a.fc, a.up, s.d_act, s.d_fc, s.d_up);
    linear_backward(a.h2, store[fc_w_].value, s.d_fc, s.d_h, false, store[fc_w_].grad, fc_b);
    linear_backward(a.h2, store[up_w_].value, s.d_up, s.d_h, true, store[up_w_].grad, none);
  }
  norm_backward(store, norm2_w_, norm2_b_, a.x_mid, a.ln2_mean, a.ln2_rstd, s.d_h, s.d_tmp);
  add_into(grad, s.d_tmp);  // grad = dL/dx_mid
  // Attention.
  Tensor proj_b = optional(store, proj_b_, true);
  linear_backward(a.att, store[proj_w_].value, grad, s.d_att, false, store[proj_w_].grad, proj_b);
  Tensor q = head_view(a.qkv, 0, Hq, D), k = head_view(a.qkv, Hq * D, Hkv, D);
  Tensor v = head_view(a.qkv, (Hq + Hkv) * D, Hkv, D);
  if (config_.positions == PositionKind::rope) {
    q = a.q_rot;
    k = a.k_rot;
  }
  Tensor dq = head_view(s.d_qkv, 0, Hq, D), dk = head_view(s.d_qkv, Hq * D, Hkv, D);
  Tensor dv = head_view(s.d_qkv, (Hq + Hkv) * D, Hkv, D);
  Tensor att_heads = bhtd(a.att.view({B, T, Hq, D})), d_att_heads = bhtd(s.d_att.view({B, T, Hq, D}));
  Tensor dq_h = bhtd(dq), dk_h = bhtd(dk), dv_h = bhtd(dv);
  attention_backward(AttentionArgs{}, bhtd(q), bhtd(k), bhtd(v), att_heads, a.lse, d_att_heads, dq_h, dk_h, dv_h);
  if (config_.positions == PositionKind::rope) {
    RopeArgs rope{.theta = config_.rope_theta};
    rope_backward(rope, dq, dq);
    rope_backward(rope, dk, dk);
  }
  Tensor qkv_b = optional(store, qkv_b_, true);
  linear_backward(a.h1, store[qkv_w_].value, s.d_qkv, s.d_h, false, store[qkv_w_].grad, qkv_b);
  norm_backward(store, norm1_w_, norm1_b_, x, a.ln1_mean, a.ln1_rstd, s.d_h, s.d_tmp);
  add_into(grad, s.d_tmp);  // grad = dL/dx
}

}  // namespace myriad::nn
