// DeviceGpt forward and backward passes: the computation of nn::GptModel (serial) as a sequence
// of kernel launches and cuBLASLt GEMMs on the context's stream. Per block:
//   h = norm1(x); qkv = h Wqkv^T (+ b); q, k, v = heads(qkv); q, k = rope(q, k) (RoPE models)
//   att = flash(q, k, v) (GQA: Hkv key/value heads); r = x + merge(att) Wo^T (+ bo)
//   h2 = norm2(r); a = gelu(h2 Wfc^T + bfc) or silu(h2 Wg^T) * (h2 Wu^T); x' = r + a Wd^T (+ bd)
// then lnf = norm_f(x_L), logits = lnf Whead[:V]^T (the tied wte or lm_head), losses =
// cross-entropy. Norms are LayerNorm or RMSNorm. Under tensor parallelism (Megatron's f / g):
// q, k, v heads and the MLP columns are this rank's, the two row-parallel outputs (attention
// projection, MLP down projection) are all-reduced before their bias and residual, the
// column-parallel input gradients (qkv, fc / gate + up, head) after their GEMMs, the embedding
// lookup of the rank's vocabulary rows too; the loss combines the shards' log-sum-exp per token.
// The backward walks the same list in reverse;
// weight gradients accumulate through GEMMs with beta = 1, bias gradients through column sums,
// norm and embedding gradients through their kernels' `+=` outputs. In 16-bit mode (bf16 or f16
// operands) each GEMM reads 16-bit copies of its operands (linear_forward / linear_backward make
// them) and writes f32, and attention runs on 16-bit q, k, v through the tensor-core forward and
// backward kernels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "device_gpt_state.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/cuda/gemm.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {

namespace {

// A GEMM input: the f32 activation, and in 16-bit mode the buffer that holds (or receives) its
// 16-bit copy.
struct Operand {
  const float* f32 = nullptr;
  Half16* half = nullptr;
};

// The GEMM shape for the model's precision: f32 (optionally TF32) or 16-bit inputs with f32 outputs.
Gemm product(const DeviceGpt::State& s, Gemm g) {
  if (s.half_operands()) {
    g.type = s.half_type();
    g.output_type = CUDA_R_32F;
  } else {
    g.tf32 = s.options.tf32;
  }
  return g;
}

// Rounds x.f32 into x.half (16-bit mode) so that the forward GEMM and the weight gradient read it.
void prepare_operand(const DeviceGpt::State& s, Operand x, std::int64_t count) {
  if (s.half_operands()) s.to_half(x.f32, x.half, count);
}

// Row-major linear forward: y (rows, out) = x (rows, in) W^T + bias; x already prepared.
void linear_forward(const DeviceGpt::State& s, Operand x, const std::string& weight, const float* bias, float* y,
                    std::int64_t rows, std::int64_t in, std::int64_t out) {
  const Gemm g = product(s, Gemm{.m = rows, .n = out, .k = in, .transpose_b = true,
                                 .epilogue = bias != nullptr ? GemmEpilogue::bias : GemmEpilogue::none});
  if (s.half_operands()) {
    gemm(s.context, g, x.half, s.value_h(weight), bias, y);
  } else {
    gemm(s.context, g, x.f32, s.value(weight), bias, y);
  }
}

// Row-major linear backward: dx (rows, in) = dy W, written or (accumulate_dx) added; dW (out, in)
// += dy^T x; dbias (if any) += column sums of dy. x is the forward's prepared operand; in 16-bit
// mode dy is rounded into the shared scratch s.grad_h for the two products.
void linear_backward(const DeviceGpt::State& s, const float* dy, Operand x, const std::string& weight, float* dx,
                     float* d_weight, float* d_bias, std::int64_t rows, std::int64_t in, std::int64_t out,
                     bool accumulate_dx = false) {
  const Gemm input_grad = product(s, Gemm{.m = rows, .n = in, .k = out, .accumulate = accumulate_dx});
  const Gemm weight_grad = product(s, Gemm{.m = out, .n = in, .k = rows, .transpose_a = true, .accumulate = true});
  if (s.half_operands()) {
    auto* dy_h = s.grad_h.as<Half16>();
    s.to_half(dy, dy_h, rows * out);
    gemm(s.context, input_grad, dy_h, s.value_h(weight), nullptr, dx);
    gemm(s.context, weight_grad, dy_h, x.half, nullptr, d_weight);
  } else {
    gemm(s.context, input_grad, dy, s.value(weight), nullptr, dx);
    gemm(s.context, weight_grad, dy, x.f32, nullptr, d_weight);
  }
  if (d_bias != nullptr) column_sums_accumulate_f32(dy, d_bias, rows, out, s.context.stream());
}

// LayerNorm or RMSNorm over the R residual rows of x (the model's norm), with its saved statistics.
void norm_forward(const DeviceGpt::State& s, const float* x, const float* weight, const float* bias, float* out,
                  float* mean, float* rstd) {
  if (s.layernorm) {
    layernorm_forward_f32(x, weight, bias, out, mean, rstd, s.R, s.C, s.config.norm_eps, s.context.stream());
  } else {
    rmsnorm_forward_f32(x, weight, out, rstd, s.R, s.C, s.config.norm_eps, s.context.stream());
  }
}

void norm_backward(const DeviceGpt::State& s, const float* grad_out, const float* x, const float* weight,
                   const float* mean, const float* rstd, float* grad_x, float* grad_weight, float* grad_bias) {
  float* scratch = s.norm_scratch.as<float>();
  if (s.layernorm) {
    layernorm_backward_f32(grad_out, x, weight, mean, rstd, grad_x, grad_weight, grad_bias, scratch,
                           s.norm_scratch_floats, s.R, s.C, s.context.stream());
  } else {
    rmsnorm_backward_f32(grad_out, x, weight, rstd, grad_x, grad_weight, scratch, s.norm_scratch_floats, s.R, s.C,
                         s.context.stream());
  }
}

// RoPE on (B, heads, T, D) contiguous heads, seen as (B * heads, T, 1, D): the rotation depends
// on t and d only. `backward` rotates a gradient back.
void rotate(const DeviceGpt::State& s, float* heads_buffer, std::int64_t heads, bool backward) {
  rope_f32(heads_buffer, heads_buffer, s.rope_cos.as<float>(), s.rope_sin.as<float>(), s.B * heads, s.T, 1, s.D,
           backward, s.context.stream());
}

FlashAttentionShape attention_shape(const DeviceGpt::State& s) {
  return FlashAttentionShape{.batch = s.B, .q_heads = s.Hq, .kv_heads = s.Hkv, .seq = s.T, .head_dim = s.D,
                             .scale = 0.0f, .causal = true};
}

// y = x W^T summed over tp, + bias: a row-parallel output of the N rows of x (out = C) into the
// R residual rows y — all-reduced, or (sequence parallel) computed into d_tmp and reduce-scattered
// to this rank's rows; at tp 1 the bias rides the GEMM's epilogue.
void row_parallel_forward(DeviceGpt::State& s, Operand x, const std::string& weight, const float* bias, float* y,
                          std::int64_t in, std::int64_t out) {
  if (!s.tensor_parallel()) {
    linear_forward(s, x, weight, bias, y, s.N, in, out);
    return;
  }
  if (s.sequence_parallel) {
    float* partial = s.d_tmp.as<float>();
    linear_forward(s, x, weight, nullptr, partial, s.N, in, out);
    s.reduce_scatter_rows(partial, y);
  } else {
    linear_forward(s, x, weight, nullptr, y, s.N, in, out);
    s.reduce_over_tp(y, s.N * out);
  }
  if (bias != nullptr) add_broadcast_rows_f32(y, bias, s.R, out, s.context.stream());
}

// x (R rows of (B, T) positions from row `first`) += the learned position table's rows.
void add_positions(const DeviceGpt::State& s, float* x, const float* table, std::int64_t first) {
  cudaStream_t stream = s.context.stream();
  std::int64_t row = 0;
  while (row < s.R) {
    const std::int64_t position = (first + row) % s.T;
    if (position == 0 && s.R - row >= s.T) {  // whole sequences: one launch
      const std::int64_t sequences = (s.R - row) / s.T;
      add_broadcast_rows_f32(x + row * s.C, table, sequences, s.T * s.C, stream);
      row += sequences * s.T;
    } else {  // a partial sequence at either end
      const std::int64_t count = std::min(s.T - position, s.R - row);
      add_broadcast_rows_f32(x + row * s.C, table + position * s.C, 1, count * s.C, stream);
      row += count;
    }
  }
}

// The tensor-core attention of the operand format (16-bit mode) on block a's 16-bit q, k, v:
// forward into a.att_h and a.lse.
void attention_forward_half(const DeviceGpt::State& s, const BlockActivations& a) {
  const FlashAttentionShape shape = attention_shape(s);
  if (s.options.operands == DType::f16) {
    auto h = [](Half16* p) { return reinterpret_cast<__half*>(p); };
    flash_attention_forward_tc_f16(h(a.q_h), h(a.k_h), h(a.v_h), h(a.att_h), a.lse, shape, s.context.stream());
  } else {
    auto h = [](Half16* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
    flash_attention_forward_tc_bf16(h(a.q_h), h(a.k_h), h(a.v_h), h(a.att_h), a.lse, shape, s.context.stream());
  }
}

// Its backward from the 16-bit output gradient in s.d_att_h into s.d_q_h, d_k_h, d_v_h.
void attention_backward_half(const DeviceGpt::State& s, const BlockActivations& a) {
  const FlashAttentionShape shape = attention_shape(s);
  Half16 *g_att = s.d_att_h.as<Half16>(), *g_q = s.d_q_h.as<Half16>(), *g_k = s.d_k_h.as<Half16>(),
         *g_v = s.d_v_h.as<Half16>();
  if (s.options.operands == DType::f16) {
    auto h = [](Half16* p) { return reinterpret_cast<__half*>(p); };
    flash_attention_backward_tc_f16(h(a.q_h), h(a.k_h), h(a.v_h), h(a.att_h), a.lse, h(g_att), h(g_q), h(g_k), h(g_v),
                                    s.delta.as<float>(), s.N * s.Hq, shape, s.context.stream());
  } else {
    auto h = [](Half16* p) { return reinterpret_cast<__nv_bfloat16*>(p); };
    flash_attention_backward_tc_bf16(h(a.q_h), h(a.k_h), h(a.v_h), h(a.att_h), a.lse, h(g_att), h(g_q), h(g_k),
                                     h(g_v), s.delta.as<float>(), s.N * s.Hq, shape, s.context.stream());
  }
}

}  // namespace

// Without flat values each unit is acquired from the value store around the kernels that read
// it; a tied head keeps the embeddings' unit from the lookup on. When the backward follows, the
// units it starts with — the head's and the last block's — stay acquired (held_units) instead of
// being gathered again.
void DeviceGpt::State::forward_chunk(int chunk, bool backward_follows) {
  const auto [first, last] = chunk_blocks[static_cast<std::size_t>(chunk)];
  const bool tied_here = chunk_is_last(chunk) && tied_head();
  const bool hold = backward_follows && value_store != nullptr;
  auto done_with = [&](int unit) {
    if (hold) {
      held_units.push_back(unit);
    } else {
      release_values(unit);
    }
  };
  if (chunk_is_first(chunk)) {
    acquire_values(embedding_unit, true);
    embed();
    if (!tied_here) release_values(embedding_unit);
  }
  for (int i = first; i < last; ++i) {
    const int unit = block_units[static_cast<std::size_t>(i)];
    acquire_values(unit, true);
    forward_block(i, i + chunk);
    if (i == last - 1 && chunk_is_last(chunk)) {
      done_with(unit);
    } else {
      release_values(unit);
    }
  }
  if (chunk_is_last(chunk)) {
    acquire_values(head_unit, true);
    if (tied_here && !chunk_is_first(chunk)) acquire_values(embedding_unit, true);
    head_forward(residual[static_cast<std::size_t>(last + chunk)].as<float>());
    done_with(head_unit);
    if (tied_here) done_with(embedding_unit);
  }
}

void DeviceGpt::State::release_after_backward(int unit) {
  release_values(unit);
  const auto held = std::find(held_units.begin(), held_units.end(), unit);
  if (held == held_units.end()) return;
  held_units.erase(held);
  release_values(unit);
}

// Token rows of the embedding table (real vocabulary), plus the first T rows of the position
// table for learned positions, into residual[0] (the first chunk's input).
void DeviceGpt::State::embed() {
  cudaStream_t stream = context.stream();
  float* x0 = residual[0].as<float>();
  if (tensor_parallel()) {  // this rank's vocabulary rows, zeros elsewhere, summed over tp
    float* lookup = sequence_parallel ? d_full.as<float>() : x0;
    embedding_forward_f32(shard_ids.as<std::int32_t>(), value("wte"), lookup,
                          reinterpret_cast<long long*>(shard_bad_index.data()), N, Vl, C, stream);
    if (sequence_parallel) {
      reduce_scatter_rows(lookup, x0);
    } else {
      reduce_over_tp(x0, N * C);
    }
  } else {
    embedding_forward_f32(ids.as<std::int32_t>(), value("wte"), x0, reinterpret_cast<long long*>(bad_index.data()),
                          N, V, C, stream);
  }
  if (!rope) add_positions(*this, x0, value("wpe"), row_start);
}

// Final norm, logits and per-token losses from the last block's output x.
void DeviceGpt::State::head_forward(const float* x) {
  cudaStream_t stream = context.stream();
  norm_to_all_rows(x, value("norm_f.weight"), optional_value("norm_f.bias"), lnf.as<float>(), lnf_mean.as<float>(),
                   lnf_rstd.as<float>());
  const Operand final_norm{lnf.as<float>(), lnf_h.as<Half16>()};
  prepare_operand(*this, final_norm, N * C);
  if (!tensor_parallel()) {
    linear_forward(*this, final_norm, head_weight, nullptr, logits.as<float>(), N, C, V);
    cross_entropy_forward_f32(logits.as<float>(), targets.as<std::int32_t>(), losses.as<float>(), ce_lse.as<float>(),
                              reinterpret_cast<long long*>(bad_index.data()), N, V, nn::GptModel::kIgnoreIndex,
                              stream);
    return;
  }
  // The shard's real vocabulary columns (the first Vr rows of its head rows; padding never exists
  // as logits), its cross-entropy with the targets it holds, then the whole vocabulary's.
  if (Vr > 0) {
    linear_forward(*this, final_norm, head_weight, nullptr, logits.as<float>(), N, C, Vr);
    cross_entropy_forward_f32(logits.as<float>(), shard_targets.as<std::int32_t>(), losses.as<float>(),
                              ce_lse.as<float>(), reinterpret_cast<long long*>(shard_bad_index.data()), N, Vr,
                              nn::GptModel::kIgnoreIndex, stream);
  }
  combine_vocab_parallel_losses();
}

void DeviceGpt::State::reduce_over_tp(float* x, std::int64_t n) const {
  if (!tensor_parallel()) return;
  tp_device->all_reduce_async(view_device_floats(context, x, {n}))->wait();
}

namespace {

Tensor device_floats(const DeviceGpt::State& s, const float* p, std::int64_t n) {
  return view_device_floats(s.context, const_cast<float*>(p), {n});
}

}  // namespace

void DeviceGpt::State::all_gather_rows(const float* rows, float* all) const {
  tp_device->all_gather_async(device_floats(*this, rows, R * C), device_floats(*this, all, N * C))->wait();
}

void DeviceGpt::State::reduce_scatter_rows(const float* all, float* rows) const {
  tp_device->reduce_scatter_async(device_floats(*this, all, N * C), device_floats(*this, rows, R * C))->wait();
}

void DeviceGpt::State::norm_to_all_rows(const float* x, const float* weight, const float* bias, float* out,
                                        float* mean, float* rstd) {
  if (!sequence_parallel) {
    norm_forward(*this, x, weight, bias, out, mean, rstd);
    return;
  }
  norm_forward(*this, x, weight, bias, h_rows.as<float>(), mean, rstd);
  all_gather_rows(h_rows.as<float>(), out);
}

float* DeviceGpt::State::reduce_input_grad(float* partial) {
  if (!tensor_parallel()) return partial;
  if (!sequence_parallel) {
    reduce_over_tp(partial, N * C);
    return partial;
  }
  reduce_scatter_rows(partial, d_rows.as<float>());
  return d_rows.as<float>();
}

const float* DeviceGpt::State::all_rows_grad(const float* rows) {
  if (!sequence_parallel) return rows;
  all_gather_rows(rows, d_full.as<float>());
  return d_full.as<float>();
}

void DeviceGpt::State::norm_backward_rows(const float* grad_out, const float* x, const float* weight,
                                          const float* mean, const float* rstd, float* grad_x, float* grad_weight,
                                          float* grad_bias) {
  if (!sequence_parallel) {
    norm_backward(*this, grad_out, x, weight, mean, rstd, grad_x, grad_weight, grad_bias);
    return;
  }
  cudaStream_t stream = context.stream();
  float* partial = norm_grads.as<float>();  // [weight | bias] over this rank's rows
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(partial, 0, norm_grads.bytes(), stream));
  norm_backward(*this, grad_out, x, weight, mean, rstd, grad_x, partial, grad_bias != nullptr ? partial + C : nullptr);
  reduce_over_tp(partial, 2 * C);
  add_f32(grad_weight, partial, grad_weight, C, stream);
  if (grad_bias != nullptr) add_f32(grad_bias, partial + C, grad_bias, C, stream);
}

// Per token: every shard's lse_r (log-sum-exp over its columns; -inf for a shard without real
// columns) and, on the shard holding the target, its logit x_t = lse_r - loss_r. The whole row's
// lse = M + log sum_r exp(lse_r - M) (float64, M the largest), loss = lse - x_t (0 when ignored).
void DeviceGpt::State::combine_vocab_parallel_losses() {
  cudaStream_t stream = context.stream();
  Tensor local_lse = Tensor::full({N}, -INFINITY), local_loss = Tensor::zeros({N});
  if (Vr > 0) {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(local_lse.raw_data(), ce_lse.data(), local_lse.nbytes(), cudaMemcpyDeviceToHost,
                                      stream));
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(local_loss.raw_data(), losses.data(), local_loss.nbytes(),
                                      cudaMemcpyDeviceToHost, stream));
  }
  context.synchronize();
  const std::int32_t* target = batch_targets.data<std::int32_t>();
  Tensor target_logit = Tensor::zeros({N});
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t column = static_cast<std::int64_t>(target[i]) - vocab_start;
    if (target[i] != nn::GptModel::kIgnoreIndex && column >= 0 && column < Vr) {
      target_logit.data<float>()[i] = local_lse.data<float>()[i] - local_loss.data<float>()[i];
    }
  }
  const int ranks = tp->size();
  Tensor every_lse = Tensor::empty({ranks * N});
  tp->all_gather(local_lse, every_lse);
  tp->all_reduce(target_logit);
  Tensor whole_lse = Tensor::empty({N}), whole_loss = Tensor::empty({N});
  for (std::int64_t i = 0; i < N; ++i) {
    double top = -INFINITY;
    for (int r = 0; r < ranks; ++r) top = std::max(top, static_cast<double>(every_lse.data<float>()[r * N + i]));
    double sum = 0.0;
    for (int r = 0; r < ranks; ++r) sum += std::exp(static_cast<double>(every_lse.data<float>()[r * N + i]) - top);
    const double lse = top + std::log(sum);
    whole_lse.data<float>()[i] = static_cast<float>(lse);
    whole_loss.data<float>()[i] =
        target[i] == nn::GptModel::kIgnoreIndex ? 0.0f : static_cast<float>(lse - target_logit.data<float>()[i]);
  }
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(ce_lse.data(), whole_lse.raw_data(), whole_lse.nbytes(), cudaMemcpyHostToDevice,
                                    stream));
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(losses.data(), whole_loss.raw_data(), whole_loss.nbytes(), cudaMemcpyHostToDevice,
                                    stream));  // pageable: read before the call returns
}

void DeviceGpt::State::forward_block(int block, int row, bool recompute) {
  cudaStream_t stream = context.stream();
  const BlockActivations& a = blocks[static_cast<std::size_t>(block)];
  const float* x = residual[static_cast<std::size_t>(row)].as<float>();
  float* out = residual[static_cast<std::size_t>(row + 1)].as<float>();
  const int l = layers[static_cast<std::size_t>(block)];  // the global layer: parameter names
  auto w = [&](const char* suffix) { return value(block_name(l, suffix)); };
  auto maybe = [&](const char* suffix) { return optional_value(block_name(l, suffix)); };
  auto name = [&](const char* suffix) { return block_name(l, suffix); };
  // Attention.
  norm_to_all_rows(x, w("norm1.weight"), maybe("norm1.bias"), a.ln1, a.ln1_mean, a.ln1_rstd);
  prepare_operand(*this, {a.ln1, a.ln1_h}, N * C);
  linear_forward(*this, {a.ln1, a.ln1_h}, name("attn.qkv.weight"), maybe("attn.qkv.bias"), a.qkv, N, C, W);
  split_heads_f32(a.qkv, W, a.q, B, T, Hq, D, stream);
  split_heads_f32(a.qkv + Hq * D, W, a.k, B, T, Hkv, D, stream);
  split_heads_f32(a.qkv + (Hq + Hkv) * D, W, a.v, B, T, Hkv, D, stream);
  if (rope) {
    rotate(*this, a.q, Hq, false);
    rotate(*this, a.k, Hkv, false);
  }
  if (half_operands()) {  // tensor-core attention on 16-bit operands; f32 output for the merge
    to_half(a.q, a.q_h, N * A);
    to_half(a.k, a.k_h, N * Hkv * D);
    to_half(a.v, a.v_h, N * Hkv * D);
    attention_forward_half(*this, a);
    from_half(a.att_h, a.att, N * A);
  } else {
    flash_attention_forward_f32(a.q, a.k, a.v, a.att, a.lse, attention_shape(*this), stream);
  }
  merge_heads_f32(a.att, a.merged, A, B, T, Hq, D, stream);
  // The branch's R rows: d_tmp (free during the forward), or with sequence parallelism d_rows
  // (d_tmp then holds the row-parallel GEMM's partial output of all rows).
  float* branch = sequence_parallel ? d_rows.as<float>() : d_tmp.as<float>();
  prepare_operand(*this, {a.merged, a.merged_h}, N * A);
  row_parallel_forward(*this, {a.merged, a.merged_h}, name("attn.proj.weight"), maybe("attn.proj.bias"), branch, A, C);
  add_f32(x, branch, a.res_mid, R * C, stream);
  // MLP.
  norm_to_all_rows(a.res_mid, w("norm2.weight"), maybe("norm2.bias"), a.ln2, a.ln2_mean, a.ln2_rstd);
  prepare_operand(*this, {a.ln2, a.ln2_h}, N * C);
  if (swiglu) {
    linear_forward(*this, {a.ln2, a.ln2_h}, name("mlp.gate.weight"), maybe("mlp.gate.bias"), a.fc, N, C, F);
    linear_forward(*this, {a.ln2, a.ln2_h}, name("mlp.up.weight"), nullptr, a.up, N, C, F);
    swiglu_forward_f32(a.fc, a.up, a.act, N * F, stream);
  } else {
    linear_forward(*this, {a.ln2, a.ln2_h}, name("mlp.fc.weight"), maybe("mlp.fc.bias"), a.fc, N, C, F);
    gelu_forward_f32(a.fc, a.act, N * F, stream);
  }
  prepare_operand(*this, {a.act, a.act_h}, N * F);
  // Recompute stops here: the backward needs no block output (which the forward already wrote,
  // and a pipeline may still be sending), so the down projection and its reduction are skipped.
  if (recompute) return;
  row_parallel_forward(*this, {a.act, a.act_h}, name(swiglu ? "mlp.down.weight" : "mlp.proj.weight"),
                       maybe("mlp.proj.bias"), branch, F, C);
  add_f32(a.res_mid, branch, out, R * C, stream);
}

// Selective recompute: the activations rebuilt without a GEMM — both norm outputs (and their
// 16-bit copies) from the block input and mid residual, and the MLP activation from fc (and up).
// The statistics are recomputed too (bit-identical to the kept ones: same kernels, same inputs).
void DeviceGpt::State::rebuild_cheap_activations(int block, int row) {
  cudaStream_t stream = context.stream();
  const BlockActivations& a = blocks[static_cast<std::size_t>(block)];
  const float* x = residual[static_cast<std::size_t>(row)].as<float>();
  const int l = layers[static_cast<std::size_t>(block)];
  auto w = [&](const char* suffix) { return value(block_name(l, suffix)); };
  auto maybe = [&](const char* suffix) { return optional_value(block_name(l, suffix)); };
  norm_to_all_rows(x, w("norm1.weight"), maybe("norm1.bias"), a.ln1, a.ln1_mean, a.ln1_rstd);
  prepare_operand(*this, {a.ln1, a.ln1_h}, N * C);
  norm_to_all_rows(a.res_mid, w("norm2.weight"), maybe("norm2.bias"), a.ln2, a.ln2_mean, a.ln2_rstd);
  prepare_operand(*this, {a.ln2, a.ln2_h}, N * C);
  if (swiglu) {
    swiglu_forward_f32(a.fc, a.up, a.act, N * F, stream);
  } else {
    gelu_forward_f32(a.fc, a.act, N * F, stream);
  }
  prepare_operand(*this, {a.act, a.act_h}, N * F);
}

void DeviceGpt::State::backward_chunk(int chunk, float loss_scale) {
  const auto [first, last] = chunk_blocks[static_cast<std::size_t>(chunk)];
  float* g = chunk_grads[static_cast<std::size_t>(chunk)].as<float>();  // dL/d the residual stream, R rows
  if (chunk_is_last(chunk)) {
    const int tied_unit = tied_head() ? embedding_unit : -1;
    acquire_values(head_unit, false);  // nested when the forward held it; starts the next prefetch
    acquire_values(tied_unit, false);
    head_backward(loss_scale, residual[static_cast<std::size_t>(last + chunk)].as<float>(), g);
    release_after_backward(head_unit);
    release_after_backward(tied_unit);
    gradients_ready(head_unit);
    if (!first_stage) gradients_ready(embedding_unit);  // a tied copy on the last pipeline stage
  }
  for (int i = last; i-- > first;) {
    const int unit = block_units[static_cast<std::size_t>(i)];
    acquire_values(unit, false);
    if (options.recompute == nn::Recompute::full) forward_block(i, i + chunk, true);  // into the shared activations
    if (options.recompute == nn::Recompute::selective) rebuild_cheap_activations(i, i + chunk);
    block_backward(i, i + chunk, g);
    release_after_backward(unit);
    gradients_ready(unit);
  }
  if (chunk_is_first(chunk)) {  // the lookup's backward reads no values
    embed_backward(g);
    gradients_ready(embedding_unit);
  }
}

// From the per-token losses (seeded with loss_scale) back to grad_x = dL/d x, x the last block's
// output (R rows).
void DeviceGpt::State::head_backward(float loss_scale, const float* x, float* grad_x) {
  cudaStream_t stream = context.stream();
  const std::vector<float> scale(static_cast<std::size_t>(N), loss_scale);
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(grad_losses.data(), scale.data(), scale.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
  float* dlogits = logits.as<float>();  // the gradient overwrites the logits in place
  if (!tensor_parallel()) {
    cross_entropy_backward_f32(logits.as<float>(), targets.as<std::int32_t>(), ce_lse.as<float>(),
                               grad_losses.as<float>(), dlogits, N, V, nn::GptModel::kIgnoreIndex, stream);
  } else if (Vr > 0) {  // the shard's columns with the whole row's lse
    cross_entropy_backward_shard_f32(logits.as<float>(), targets.as<std::int32_t>(), ce_lse.as<float>(),
                                     grad_losses.as<float>(), dlogits, N, Vr, vocab_start, nn::GptModel::kIgnoreIndex,
                                     stream);
  }
  float* g_tmp = d_tmp.as<float>();
  const std::int64_t head_columns = tensor_parallel() ? Vr : V;
  if (head_columns > 0) {
    linear_backward(*this, dlogits, {lnf.as<float>(), lnf_h.as<Half16>()}, head_weight, g_tmp, grad(head_weight),
                    nullptr, N, C, head_columns);
  } else {
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(g_tmp, 0, static_cast<std::size_t>(N * C) * sizeof(float), stream));
  }
  norm_backward_rows(reduce_input_grad(g_tmp), x, value("norm_f.weight"), lnf_mean.as<float>(), lnf_rstd.as<float>(),
                     grad_x, grad("norm_f.weight"), optional_grad("norm_f.bias"));
}

// One block's backward: g_res = dL/d its output (R rows) in, dL/d its input out. Scratch roles:
// d_tmp = a column-parallel input's gradient of all rows (this rank's part under tp); d_res_mid
// = gradient at the block's mid residual (R rows); reduce_input_grad gives a norm's output
// gradient of the R rows.
void DeviceGpt::State::block_backward(int block, int row, float* g_res) {
  cudaStream_t stream = context.stream();
  float* g_tmp = d_tmp.as<float>();
  float* g_mid = d_res_mid.as<float>();
  const BlockActivations& a = blocks[static_cast<std::size_t>(block)];
  const float* x = residual[static_cast<std::size_t>(row)].as<float>();
  const int l = layers[static_cast<std::size_t>(block)];  // the global layer: parameter names
  auto w = [&](const char* suffix) { return value(block_name(l, suffix)); };
  auto g = [&](const char* suffix) { return grad(block_name(l, suffix)); };
  auto maybe_g = [&](const char* suffix) { return optional_grad(block_name(l, suffix)); };
  auto name = [&](const char* suffix) { return block_name(l, suffix); };
  // MLP branch: x' = r + act(LN2(r)) Wd^T.
  float* g_fc = d_fc.as<float>();
  const char* down = swiglu ? "mlp.down.weight" : "mlp.proj.weight";
  linear_backward(*this, all_rows_grad(g_res), {a.act, a.act_h}, name(down), g_fc, g(down), maybe_g("mlp.proj.bias"),
                  N, F, C);
  if (swiglu) {
    float* g_up = d_up.as<float>();
    swiglu_backward_f32(a.fc, a.up, g_fc, g_fc, g_up, N * F, stream);  // gate gradient in place
    linear_backward(*this, g_fc, {a.ln2, a.ln2_h}, name("mlp.gate.weight"), g_tmp, g("mlp.gate.weight"),
                    maybe_g("mlp.gate.bias"), N, C, F);
    linear_backward(*this, g_up, {a.ln2, a.ln2_h}, name("mlp.up.weight"), g_tmp, g("mlp.up.weight"), nullptr, N, C,
                    F, /*accumulate_dx=*/true);
  } else {
    gelu_backward_f32(a.fc, g_fc, g_fc, N * F, stream);
    linear_backward(*this, g_fc, {a.ln2, a.ln2_h}, name("mlp.fc.weight"), g_tmp, g("mlp.fc.weight"),
                    maybe_g("mlp.fc.bias"), N, C, F);
  }
  norm_backward_rows(reduce_input_grad(g_tmp), a.res_mid, w("norm2.weight"), a.ln2_mean, a.ln2_rstd, g_mid,
                     g("norm2.weight"), maybe_g("norm2.bias"));
  add_f32(g_mid, g_res, g_mid, R * C, stream);
  // Attention branch: r = x + merge(flash(rope(heads(qkv(LN1(x)))))) Wo^T.
  linear_backward(*this, all_rows_grad(g_mid), {a.merged, a.merged_h}, name("attn.proj.weight"),
                  d_merged.as<float>(), g("attn.proj.weight"), maybe_g("attn.proj.bias"), N, A, C);
  split_heads_f32(d_merged.as<float>(), A, d_att.as<float>(), B, T, Hq, D, stream);
  if (half_operands()) {  // the tensor-core backward on the forward's 16-bit operands, gradients widened
    to_half(d_att.as<float>(), d_att_h.as<Half16>(), N * A);
    attention_backward_half(*this, a);
    from_half(d_q_h.as<Half16>(), d_q.as<float>(), N * A);
    from_half(d_k_h.as<Half16>(), d_k.as<float>(), N * Hkv * D);
    from_half(d_v_h.as<Half16>(), d_v.as<float>(), N * Hkv * D);
  } else {
    flash_attention_backward_f32(a.q, a.k, a.v, a.att, a.lse, d_att.as<float>(), d_q.as<float>(), d_k.as<float>(),
                                 d_v.as<float>(), delta.as<float>(), N * Hq, attention_shape(*this), stream);
  }
  if (rope) {
    rotate(*this, d_q.as<float>(), Hq, true);
    rotate(*this, d_k.as<float>(), Hkv, true);
  }
  float* g_qkv = d_qkv.as<float>();
  merge_heads_f32(d_q.as<float>(), g_qkv, W, B, T, Hq, D, stream);
  merge_heads_f32(d_k.as<float>(), g_qkv + Hq * D, W, B, T, Hkv, D, stream);
  merge_heads_f32(d_v.as<float>(), g_qkv + (Hq + Hkv) * D, W, B, T, Hkv, D, stream);
  linear_backward(*this, g_qkv, {a.ln1, a.ln1_h}, name("attn.qkv.weight"), g_tmp, g("attn.qkv.weight"),
                  maybe_g("attn.qkv.bias"), N, C, W);
  norm_backward_rows(reduce_input_grad(g_tmp), x, w("norm1.weight"), a.ln1_mean, a.ln1_rstd, g_res,
                     g("norm1.weight"), maybe_g("norm1.bias"));
  add_f32(g_res, g_mid, g_res, R * C, stream);
}

// The embeddings' gradients from dL/d residual[0] (R rows): the gradient of all rows (sequence
// parallel: all-gathered, so that the lookups' and the replicated position table's gradients are
// complete on every rank without a reduction).
void DeviceGpt::State::embed_backward(const float* grad_x0) {
  cudaStream_t stream = context.stream();
  const float* g_all = all_rows_grad(grad_x0);
  if (tensor_parallel()) {  // this rank's vocabulary rows (grad_out is the same on every tp rank)
    embedding_backward_f32(shard_ids.as<std::int32_t>(), g_all, grad("wte"),
                           reinterpret_cast<long long*>(shard_bad_index.data()), N, Vl, C, stream);
  } else {
    embedding_backward_f32(ids.as<std::int32_t>(), g_all, grad("wte"), reinterpret_cast<long long*>(bad_index.data()),
                           N, V, C, stream);
  }
  if (!rope) column_sums_accumulate_f32(g_all, grad("wpe"), B, T * C, stream);  // position rows 0..T-1
}

}  // namespace myriad::cuda
