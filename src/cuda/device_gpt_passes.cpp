// DeviceGpt forward and backward passes: the computation of nn::GptModel (serial GPT-2) as a
// sequence of kernel launches and cuBLASLt GEMMs on the context's stream. Per block:
//   ln1 = LN(x); qkv = ln1 Wqkv^T + b; q,k,v = heads(qkv); att = flash(q, k, v); m = merge(att)
//   r = x + (m Wo^T + bo); ln2 = LN(r); f = ln2 Wfc^T + bfc; g = gelu(f); x' = r + (g Wp^T + bp)
// then lnf = LN(x_L), logits = lnf wte[:V]^T, losses = cross-entropy. The backward walks the
// same list in reverse; weight gradients accumulate through GEMMs with beta = 1, bias gradients
// through column sums, norm and embedding gradients through their kernels' `+=` outputs. In bf16
// mode each GEMM reads bf16 copies of its operands (linear_forward / linear_backward make them)
// and writes f32.
#include <limits>

#include "device_gpt_state.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/gemm.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {

namespace {

// A GEMM input: the f32 activation, and in bf16 mode the buffer that holds (or receives) its
// bf16 copy.
struct Operand {
  const float* f32 = nullptr;
  __nv_bfloat16* half = nullptr;
};

// The GEMM shape for the model's precision: f32 (optionally TF32) or bf16 inputs with f32 outputs.
Gemm product(const DeviceGpt::State& s, Gemm g) {
  if (s.options.bf16) {
    g.type = CUDA_R_16BF;
    g.output_type = CUDA_R_32F;
  } else {
    g.tf32 = s.options.tf32;
  }
  return g;
}

// Row-major linear forward: y (rows, out) = x (rows, in) W^T + bias. In bf16 mode x is rounded
// into x.half first (kept: the weight gradient reads it in backward).
void linear_forward(const DeviceGpt::State& s, Operand x, const std::string& weight, const float* bias, float* y,
                    std::int64_t rows, std::int64_t in, std::int64_t out) {
  const Gemm g = product(s, Gemm{.m = rows, .n = out, .k = in, .transpose_b = true,
                                 .epilogue = bias != nullptr ? GemmEpilogue::bias : GemmEpilogue::none});
  if (s.options.bf16) {
    convert_f32_to_bf16(x.f32, x.half, rows * in, s.context.stream());
    gemm(s.context, g, x.half, s.value_h(weight), bias, y);
  } else {
    gemm(s.context, g, x.f32, s.value(weight), bias, y);
  }
}

// Row-major linear backward: dx (rows, in) = dy W (written); dW (out, in) += dy^T x; dbias +=
// column sums of dy. x is the forward's operand (its bf16 copy already made); in bf16 mode dy is
// rounded into the shared scratch s.grad_h for the two products.
void linear_backward(const DeviceGpt::State& s, const float* dy, Operand x, const std::string& weight, float* dx,
                     float* d_weight, float* d_bias, std::int64_t rows, std::int64_t in, std::int64_t out) {
  const Gemm input_grad = product(s, Gemm{.m = rows, .n = in, .k = out});
  const Gemm weight_grad = product(s, Gemm{.m = out, .n = in, .k = rows, .transpose_a = true, .accumulate = true});
  if (s.options.bf16) {
    auto* dy_h = s.grad_h.as<__nv_bfloat16>();
    convert_f32_to_bf16(dy, dy_h, rows * out, s.context.stream());
    gemm(s.context, input_grad, dy_h, s.value_h(weight), nullptr, dx);
    gemm(s.context, weight_grad, dy_h, x.half, nullptr, d_weight);
  } else {
    gemm(s.context, input_grad, dy, s.value(weight), nullptr, dx);
    gemm(s.context, weight_grad, dy, x.f32, nullptr, d_weight);
  }
  if (d_bias != nullptr) column_sums_accumulate_f32(dy, d_bias, rows, out, s.context.stream());
}

FlashAttentionShape attention_shape(const DeviceGpt::State& s) {
  return FlashAttentionShape{.batch = s.B, .q_heads = s.H, .kv_heads = s.H, .seq = s.T, .head_dim = s.D,
                             .scale = 0.0f, .causal = true};
}

}  // namespace

void DeviceGpt::State::forward(std::int64_t layer_count) {
  cudaStream_t stream = context.stream();
  const float eps = config.norm_eps;
  const auto* ids_ptr = ids.as<std::int32_t>();
  auto* bad = reinterpret_cast<long long*>(bad_index.data());
  // Token rows of the tied table (real vocabulary) plus the first T rows of the position table.
  embedding_forward_f32(ids_ptr, value("wte"), residual[0].as<float>(), bad, N, V, C, stream);
  add_broadcast_rows_f32(residual[0].as<float>(), value("wpe"), B, T * C, stream);

  for (std::int64_t l = 0; l < layer_count; ++l) {
    const BlockActivations& a = blocks[static_cast<std::size_t>(l)];
    const float* x = residual[static_cast<std::size_t>(l)].as<float>();
    float* out = residual[static_cast<std::size_t>(l + 1)].as<float>();
    auto w = [&](const char* suffix) { return value(block_name(l, suffix)); };
    auto name = [&](const char* suffix) { return block_name(l, suffix); };
    layernorm_forward_f32(x, w("norm1.weight"), w("norm1.bias"), a.ln1, a.ln1_mean, a.ln1_rstd, N, C, eps, stream);
    linear_forward(*this, {a.ln1, a.ln1_h}, name("attn.qkv.weight"), w("attn.qkv.bias"), a.qkv, N, C, 3 * C);
    split_heads_f32(a.qkv, 3 * C, a.q, B, T, H, D, stream);
    split_heads_f32(a.qkv + C, 3 * C, a.k, B, T, H, D, stream);
    split_heads_f32(a.qkv + 2 * C, 3 * C, a.v, B, T, H, D, stream);
    flash_attention_forward_f32(a.q, a.k, a.v, a.att, a.lse, attention_shape(*this), stream);
    merge_heads_f32(a.att, a.merged, C, B, T, H, D, stream);
    float* branch = d_tmp.as<float>();  // free during the forward
    linear_forward(*this, {a.merged, a.merged_h}, name("attn.proj.weight"), w("attn.proj.bias"), branch, N, C, C);
    add_f32(x, branch, a.res_mid, N * C, stream);
    layernorm_forward_f32(a.res_mid, w("norm2.weight"), w("norm2.bias"), a.ln2, a.ln2_mean, a.ln2_rstd, N, C, eps,
                          stream);
    linear_forward(*this, {a.ln2, a.ln2_h}, name("mlp.fc.weight"), w("mlp.fc.bias"), a.fc, N, C, F);
    gelu_forward_f32(a.fc, a.gelu, N * F, stream);
    linear_forward(*this, {a.gelu, a.gelu_h}, name("mlp.proj.weight"), w("mlp.proj.bias"), branch, N, F, C);
    add_f32(a.res_mid, branch, out, N * C, stream);
  }

  layernorm_forward_f32(residual[static_cast<std::size_t>(layer_count)].as<float>(), value("norm_f.weight"),
                        value("norm_f.bias"), lnf.as<float>(), lnf_mean.as<float>(), lnf_rstd.as<float>(), N, C, eps,
                        stream);
  linear_forward(*this, {lnf.as<float>(), lnf_h.as<__nv_bfloat16>()}, "wte", nullptr, logits.as<float>(), N, C, V);
  cross_entropy_forward_f32(logits.as<float>(), targets.as<std::int32_t>(), losses.as<float>(), ce_lse.as<float>(), bad,
                            N, V, nn::GptModel::kIgnoreIndex, stream);
}

void DeviceGpt::State::backward(float loss_scale) {
  cudaStream_t stream = context.stream();
  const std::vector<float> scale(static_cast<std::size_t>(N), loss_scale);
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(grad_losses.data(), scale.data(), scale.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
  float* dlogits = logits.as<float>();  // the gradient overwrites the logits in place
  cross_entropy_backward_f32(logits.as<float>(), targets.as<std::int32_t>(), ce_lse.as<float>(),
                             grad_losses.as<float>(), dlogits, N, V, nn::GptModel::kIgnoreIndex, stream);
  // Scratch roles: d_res = gradient of the residual stream entering from above; d_tmp = a norm's
  // output gradient; d_res_mid = gradient at the block's mid residual.
  float* g_res = d_res.as<float>();
  float* g_tmp = d_tmp.as<float>();
  float* g_mid = d_res_mid.as<float>();
  float* scratch = norm_scratch.as<float>();
  linear_backward(*this, dlogits, {lnf.as<float>(), lnf_h.as<__nv_bfloat16>()}, "wte", g_tmp, grad("wte"), nullptr,
                  N, C, V);
  layernorm_backward_f32(g_tmp, residual[static_cast<std::size_t>(L)].as<float>(), value("norm_f.weight"),
                         lnf_mean.as<float>(), lnf_rstd.as<float>(), g_res, grad("norm_f.weight"), grad("norm_f.bias"),
                         scratch, norm_scratch_floats, N, C, stream);

  for (std::int64_t l = L - 1; l >= 0; --l) {
    const BlockActivations& a = blocks[static_cast<std::size_t>(l)];
    const float* x = residual[static_cast<std::size_t>(l)].as<float>();
    auto w = [&](const char* suffix) { return value(block_name(l, suffix)); };
    auto g = [&](const char* suffix) { return grad(block_name(l, suffix)); };
    auto name = [&](const char* suffix) { return block_name(l, suffix); };
    // MLP branch: x' = r + proj(gelu(fc(LN2(r)))).
    float* g_fc = d_fc.as<float>();
    linear_backward(*this, g_res, {a.gelu, a.gelu_h}, name("mlp.proj.weight"), g_fc, g("mlp.proj.weight"),
                    g("mlp.proj.bias"), N, F, C);
    gelu_backward_f32(a.fc, g_fc, g_fc, N * F, stream);
    linear_backward(*this, g_fc, {a.ln2, a.ln2_h}, name("mlp.fc.weight"), g_tmp, g("mlp.fc.weight"), g("mlp.fc.bias"),
                    N, C, F);
    layernorm_backward_f32(g_tmp, a.res_mid, w("norm2.weight"), a.ln2_mean, a.ln2_rstd, g_mid, g("norm2.weight"),
                           g("norm2.bias"), scratch, norm_scratch_floats, N, C, stream);
    add_f32(g_mid, g_res, g_mid, N * C, stream);
    // Attention branch: r = x + proj(merge(flash(heads(qkv(LN1(x)))))).
    linear_backward(*this, g_mid, {a.merged, a.merged_h}, name("attn.proj.weight"), d_merged.as<float>(),
                    g("attn.proj.weight"), g("attn.proj.bias"), N, C, C);
    split_heads_f32(d_merged.as<float>(), C, d_att.as<float>(), B, T, H, D, stream);
    flash_attention_backward_f32(a.q, a.k, a.v, a.att, a.lse, d_att.as<float>(), d_q.as<float>(), d_k.as<float>(),
                                 d_v.as<float>(), delta.as<float>(), N * H, attention_shape(*this), stream);
    float* g_qkv = d_qkv.as<float>();
    merge_heads_f32(d_q.as<float>(), g_qkv, 3 * C, B, T, H, D, stream);
    merge_heads_f32(d_k.as<float>(), g_qkv + C, 3 * C, B, T, H, D, stream);
    merge_heads_f32(d_v.as<float>(), g_qkv + 2 * C, 3 * C, B, T, H, D, stream);
    linear_backward(*this, g_qkv, {a.ln1, a.ln1_h}, name("attn.qkv.weight"), g_tmp, g("attn.qkv.weight"),
                    g("attn.qkv.bias"), N, C, 3 * C);
    layernorm_backward_f32(g_tmp, x, w("norm1.weight"), a.ln1_mean, a.ln1_rstd, g_res, g("norm1.weight"),
                           g("norm1.bias"), scratch, norm_scratch_floats, N, C, stream);
    add_f32(g_res, g_mid, g_res, N * C, stream);
  }

  auto* bad = reinterpret_cast<long long*>(bad_index.data());
  embedding_backward_f32(ids.as<std::int32_t>(), g_res, grad("wte"), bad, N, V, C, stream);
  column_sums_accumulate_f32(g_res, grad("wpe"), B, T * C, stream);  // position rows 0..T-1
}

}  // namespace myriad::cuda
