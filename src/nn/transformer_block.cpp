// TransformerBlock forward / recompute / backward over the ops; activations cross the tensor-
// parallel group only through the split's TensorParallel (the identity for a group of one), so
// the code reads as the serial block.
#include "myriad/nn/transformer_block.h"

#include <cmath>
#include <cstring>

#include "myriad/nn/fp8_linear.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/attention.h"
#include "myriad/nn/ring_attention.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/placement.h"
#include "myriad/ops/rope.h"
#include "myriad/ops/elementwise.h"

namespace myriad::nn {

namespace {

// (B, T, heads, D) strided view of the column block [first_col, first_col + heads*D) of a
// (B, T, W) tensor (of its dtype).
Tensor head_view(const Tensor& packed, std::int64_t first_col, std::int64_t heads, std::int64_t head_dim) {
  const std::int64_t B = packed.size(0), T = packed.size(1), W = packed.size(2);
  return Tensor::from_storage(packed.storage(), {B, T, heads, head_dim}, {T * W, W, head_dim, 1},
                              packed.offset() + first_col, packed.dtype());
}

Tensor bhtd(const Tensor& bthd) { return bthd.permute({0, 2, 1, 3}); }

Tensor optional(const ParameterStore& store, std::size_t index, bool grad) {
  if (index == static_cast<std::size_t>(-1)) return Tensor();
  return grad ? store[index].grad : store[index].value;
}

// Block r of n over tp parts (whole sequences of a micro-batch under tp: moe_sequences).
IndexRange block_of(std::int64_t n, int tp, int r) { return {n * r / tp, n * (r + 1) / tp}; }

}  // namespace

ParameterSpec qkv_weight_spec(const TransformerConfig& c, const std::string& prefix) {
  const std::int64_t D = c.head_dim();
  return {.name = prefix + "attn.qkv.weight",
          .shape = {c.qkv_width(), c.n_embd},
          .init_std = c.init_std,
          .row_segments = {c.n_head * D, c.n_kv_head * D, c.n_kv_head * D},
          .granule = D};
}

ParameterSpec mlp_in_weight_spec(const TransformerConfig& c, const std::string& prefix) {
  return {.name = prefix + (c.mlp == MlpKind::gelu ? "mlp.fc.weight" : "mlp.gate.weight"),
          .shape = {c.ffn_hidden, c.n_embd},
          .init_std = c.init_std};
}

LocalWidths local_widths(const TransformerConfig& c, const ModelSplit& split) {
  const ShardCoordinate at = split.shard_coordinate();
  const ShardPlacement qkv = split.shard_plan().place(qkv_weight_spec(c, "blocks.0."), at);
  const ShardPlacement ffn = split.shard_plan().place(mlp_in_weight_spec(c, "blocks.0."), at);
  const std::int64_t D = c.head_dim();
  auto held = [](const ShardPlacement& p, std::size_t i, std::int64_t whole) {
    return p.dim < 0 ? whole : p.ranges[i].size();
  };
  return {.heads = held(qkv, 0, c.n_head * D) / D,
          .kv_heads = held(qkv, 1, c.n_kv_head * D) / D,
          .ffn = held(ffn, 0, c.ffn_hidden),
          .head_dim = D};
}

Shape residual_shape(const TransformerConfig& c, const ModelSplit& split, std::int64_t B, std::int64_t T) {
  if (split.sharded_sequence()) return {1, B * T / split.tp_size(), c.n_embd};
  return {B, T, c.n_embd};
}

std::vector<ActivationSlot> block_activation_slots(const TransformerConfig& c, const ModelSplit& split, std::int64_t B,
                                                   std::int64_t T, DType gemm_inputs) {
  const LocalWidths w = local_widths(c, split);
  const std::int64_t C = c.n_embd, F = w.ffn, D = w.head_dim, Hq = w.heads;
  const Shape rows = residual_shape(c, split, B, T);
  const Shape stats = {rows[0], rows[1]};
  std::vector<ActivationSlot> slots = {
      {&BlockActivations::ln1_mean, stats, true},
      {&BlockActivations::ln1_rstd, stats, true},
      {&BlockActivations::h1, {B, T, C}, false, !split.sharded_sequence()},
      {&BlockActivations::qkv, {B, T, w.qkv()}, true},
      {&BlockActivations::att, {B, T, Hq * D}, true},
      {&BlockActivations::lse, {B, Hq, T}, true},
      {&BlockActivations::x_mid, rows, true},
      {&BlockActivations::ln2_mean, stats, true},
      {&BlockActivations::ln2_rstd, stats, true},
      {&BlockActivations::h2, {B, T, C}, false, !split.sharded_sequence()},
      {&BlockActivations::fc, {B, T, F}, true, true, true},
      {&BlockActivations::act, {B, T, F}, false, true, true},
  };
  if (c.positions == PositionKind::rope) {
    slots.push_back({&BlockActivations::q_rot, {B, T, Hq, D}, true});
    slots.push_back({&BlockActivations::k_rot, {B, T, w.kv_heads, D}, true});
  }
  if (c.mlp == MlpKind::swiglu) slots.push_back({&BlockActivations::up, {B, T, F}, true, true, true});
  // The attention rounds the rotated q, k to the format and writes values of it (only it reads
  // q_rot, k_rot; only the proj GEMM and its backward read att); without RoPE it reads q, k, v from
  // qkv and rounds them too, so qkv holds the same values in the format (with RoPE, the rotation
  // reads q, k before any rounding: f32); h1, h2 and act only GEMMs read, but the
  // sequence-parallel gathers carry f32 rows and an MoE layer's router reads h2.
  const bool attention_in_format = sixteen_bit_attention(c, split), gathered = split.sharded_sequence();
  bool any_moe = false;
  for (int layer = 0; layer < c.n_layer; ++layer) any_moe = any_moe || c.moe.is_moe_layer(layer);
  for (ActivationSlot& slot : slots) {
    const auto m = slot.member;
    const bool attention_operand = m == &BlockActivations::att || m == &BlockActivations::q_rot ||
                                   m == &BlockActivations::k_rot ||
                                   (m == &BlockActivations::qkv && c.positions == PositionKind::learned);
    // The MLP activation's inputs, kept with its output: SwiGLU's gate and up pre-activations (the
    // activation reads them widened, as PyTorch's autocast runs it on 16-bit tensors) and a GELU's
    // pre-activation (only the backward reads it: linear_dgelu_backward, widened; the forward's
    // GELU is of the f32 value, as cuBLASLt's GELU_AUX epilogue writes both).
    const bool activation_input =
        m == &BlockActivations::fc || (c.mlp == MlpKind::swiglu && m == &BlockActivations::up);
    const bool gemm_operand = m == &BlockActivations::h1 || m == &BlockActivations::act || activation_input ||
                              (m == &BlockActivations::h2 && !any_moe);
    if ((attention_operand && attention_in_format) || (gemm_operand && !gathered)) slot.dtype = gemm_inputs;
  }
  return slots;
}

BlockGradientFormats block_gradient_formats(const TransformerConfig& c, const ModelSplit& split, DType gemm_inputs) {
  BlockGradientFormats formats;
  if (gemm_inputs == DType::f32) return formats;
  if (sixteen_bit_attention(c, split)) formats.attention = gemm_inputs;
  // The MLP activation's input gradient(s): SwiGLU's always (its backward writes them rounded), a
  // GELU's where its pre-activation is kept in the format (not under sequence parallelism, whose
  // gathered rows stay f32).
  if (c.mlp == MlpKind::swiglu || !split.sharded_sequence()) formats.mlp = gemm_inputs;
  return formats;
}

BlockScratch make_block_scratch(const ops::Placement& placement, const TransformerConfig& c, const ModelSplit& split,
                                std::int64_t B, std::int64_t T, DType gemm_inputs) {
  const LocalWidths w = local_widths(c, split);
  const std::int64_t C = c.n_embd, F = w.ffn;
  const Shape rows = residual_shape(c, split, B, T);
  const BlockGradientFormats formats = block_gradient_formats(c, split, gemm_inputs);
  BlockScratch s;
  s.d_h = placement.empty({B, T, C});
  s.d_att = placement.empty({B, T, w.heads * w.head_dim}, formats.attention);
  s.d_tmp = placement.empty(rows);
  s.y_wide = placement.empty(rows);
  s.d_qkv = placement.empty({B, T, w.qkv()}, formats.attention);
  s.d_fc = placement.empty({B, T, F}, formats.mlp);
  s.d_act = placement.empty({B, T, F});
  if (c.mlp == MlpKind::swiglu) s.d_up = placement.empty({B, T, F}, formats.mlp);
  s.norm_grads = placement.empty({4 * C});
  if (split.sharded_sequence()) {
    s.d_full = placement.empty({B, T, C});
    s.d_hs = placement.empty(rows);
    s.h_rows = placement.empty(rows);
  }
  return s;
}

TransformerBlock::TransformerBlock(const TransformerConfig& config, const ModelSplit& split, int layer,
                                   ParameterStore& store)
    : config_(config), split_(split), layer_(layer), widths_(local_widths(config, split)) {
  const std::int64_t C = config.n_embd, F = config.ffn_hidden;
  const std::string prefix = "blocks." + std::to_string(layer) + ".";
  const float std = config.init_std;
  // GPT-2 scales the init of projections that write into the residual stream by 1/sqrt(2L).
  const float residual_std = std / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  const bool layernorm = config.norm == NormKind::layernorm;
  // Each parameter declared whole; the shard plan decides this rank's part (shard_plan.h).
  auto declare = [&](const ParameterSpec& spec) {
    return parallelize(spec, split.shard_plan(), split.shard_coordinate(), store);
  };
  auto vector = [&](const std::string& name, ParamKind kind, ParamInit init, std::int64_t n) {
    return declare({.name = prefix + name, .shape = {n}, .kind = kind, .init = init});
  };
  norm1_w_ = vector("norm1.weight", ParamKind::norm, ParamInit::ones, C);
  if (layernorm) norm1_b_ = vector("norm1.bias", ParamKind::bias, ParamInit::zeros, C);
  const ParameterSpec qkv = qkv_weight_spec(config, prefix);
  qkv_w_ = declare(qkv);
  if (config.bias) {
    qkv_b_ = declare({.name = prefix + "attn.qkv.bias",
                      .shape = {config.qkv_width()},
                      .kind = ParamKind::bias,
                      .init = ParamInit::zeros,
                      .row_segments = qkv.row_segments,
                      .granule = qkv.granule});
  }
  proj_w_ = declare({.name = prefix + "attn.proj.weight", .shape = {C, C}, .init_std = residual_std});
  if (config.bias) proj_b_ = vector("attn.proj.bias", ParamKind::bias, ParamInit::zeros, C);
  norm2_w_ = vector("norm2.weight", ParamKind::norm, ParamInit::ones, C);
  if (layernorm) norm2_b_ = vector("norm2.bias", ParamKind::bias, ParamInit::zeros, C);
  if (config.moe.is_moe_layer(layer)) {
    moe_.emplace(config, split, layer, store);
    return;
  }
  const ParameterSpec fc = mlp_in_weight_spec(config, prefix);
  fc_w_ = declare(fc);
  if (config.bias) {
    const std::string fc_bias = fc.name.substr(0, fc.name.size() - std::string("weight").size()) + "bias";
    fc_b_ = declare({.name = fc_bias, .shape = {F}, .kind = ParamKind::bias, .init = ParamInit::zeros});
  }
  if (config.mlp == MlpKind::swiglu) {
    up_w_ = declare({.name = prefix + "mlp.up.weight", .shape = {F, C}, .init_std = std});
  }
  const std::string out_name = config.mlp == MlpKind::gelu ? "mlp.proj.weight" : "mlp.down.weight";
  out_w_ = declare({.name = prefix + out_name, .shape = {C, F}, .init_std = residual_std});
  if (config.bias) out_b_ = vector("mlp.proj.bias", ParamKind::bias, ParamInit::zeros, C);
}

void TransformerBlock::norm_forward(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x,
                                    Tensor& out, Tensor& mean, Tensor& rstd) const {
  if (config_.norm == NormKind::layernorm) {
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, x, store[w].value, optional(store, b, false), out, mean,
                      rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, x, store[w].value, out, rstd);
  }
}

void TransformerBlock::norm_backward(const ParameterStore& store, std::size_t w, const Tensor& x, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_w,
                                     Tensor& grad_b) const {
  if (config_.norm == NormKind::layernorm) {
    layernorm_backward(LayernormArgs{.eps = config_.norm_eps}, x, store[w].value, mean, rstd, grad_out, grad_x, grad_w,
                       grad_b);
  } else {
    rmsnorm_backward(RmsnormArgs{.eps = config_.norm_eps}, x, store[w].value, rstd, grad_out, grad_x, grad_w);
  }
}

// Where a norm parameter's gradient goes first: one of four C-sized slots of scratch.norm_grads
// (the sum over this rank's rows), summed over the group and added into the store at the end.
Tensor TransformerBlock::norm_grad_target(std::size_t index, BlockScratch& s, int slot) const {
  if (index == npos) return Tensor();
  const std::int64_t C = config_.n_embd;
  return s.norm_grads.slice(0, slot * C, (slot + 1) * C);
}

void TransformerBlock::mlp_activation(const BlockActivations& acts, Tensor& act) const {
  if (config_.mlp == MlpKind::gelu) {
    gelu_forward(GeluArgs{}, acts.fc, act);
  } else {
    swiglu_forward(SwigluArgs{}, acts.fc, acts.up, act);
  }
}

// full <- norm(x) for the column-parallel layers: the norm of this rank's rows, gathered.
void TransformerBlock::norm_and_gather(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x,
                                       Tensor& rows_scratch, Tensor& full, Tensor& mean, Tensor& rstd) const {
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor rows = tp.rows_of(full, rows_scratch);
  norm_forward(store, w, b, x, rows, mean, rstd);
  tp.gather_rows(rows, full);
}

// full <- norm(x) gathered, as norm_and_gather, with `consume` run on each block of full's rows as
// soon as it is in place (TensorParallel::gather_rows_overlapped): the column-parallel GEMMs that
// read full overlap the gather.
void TransformerBlock::norm_gather_and(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x,
                                       Tensor& rows_scratch, Tensor& full, Tensor& mean, Tensor& rstd,
                                       const TensorParallel::RowsConsumer& consume) const {
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor rows = tp.rows_of(full, rows_scratch);
  norm_forward(store, w, b, x, rows, mean, rstd);
  tp.gather_rows_overlapped(rows, full, consume);
}

// Rows [begin, end) of a (..., C) activation, as (end - begin, C).
static Tensor row_block(const Tensor& t, std::int64_t begin, std::int64_t end) {
  return t.view({t.numel() / t.size(-1), t.size(-1)}).slice(0, begin, end);
}

// out = residual + the row-parallel linear of `in` (`partial`: (B, T, C) scratch). A 16-bit out:
// the linear's f32 result in `wide`, the sum rounded once into out.
void TransformerBlock::row_parallel_output(std::optional<BlockLinear> which, const Tensor& in, const Parameter& weight,
                                           const Tensor& bias, const Tensor& residual, Tensor& partial, Tensor& out,
                                           Tensor* wide) const {
  MYRIAD_CHECK(out.dtype() == DType::f32 || wide != nullptr,
               "block " << layer_ << ": a 16-bit output " << out.describe() << " needs an f32 scratch for its sum");
  Tensor& sum = out.dtype() == DType::f32 ? out : *wide;
  if (weight.int8_values.defined()) {  // INT8 inference: whole layers only (GptModel::attach_int8)
    linear_forward(in, weight, bias, sum, operands_);
  } else {
    Fp8WeightOnce codes;
    if (which) fp8_first_scale(*which, Fp8Role::input, in);
    split_.tensor_parallel().row_parallel_linear(
        [&](const Tensor& b, std::int64_t begin, std::int64_t end, Tensor& o) {
          dense_linear_forward(which, row_block(in, begin, end), weight, b, o, &codes);
        },
        bias, partial, sum);
  }
  add(sum, residual, out);
}

// A dense linear layer of the block: FP8 GEMMs under training.precision fp8 (training's forward:
// `which` given), else the GEMM operand format (its kept 16-bit weight copy).
void TransformerBlock::dense_linear_forward(std::optional<BlockLinear> which, const Tensor& in, const Parameter& weight,
                                            const Tensor& bias, Tensor& out, Fp8WeightOnce* once) const {
  if (fp8_ != nullptr && which && !weight.int8_values.defined()) {
    const std::int64_t slot = fp8_slot(*which);
    if (once == nullptr) {
      fp8_linear_forward(in, weight.value, bias, out, *fp8_, slot);
      return;
    }
    if (!*once) *once = fp8_quantize_weight(weight.value, false, *fp8_, slot);
    fp8_linear_forward(in, **once, bias, out, *fp8_, slot);
    return;
  }
  linear_forward(in, weight, bias, out, operands_);
}

void TransformerBlock::dense_linear_backward(BlockLinear which, const Tensor& in, Parameter& weight,
                                             const Tensor& grad_out, Tensor& grad_in, bool accumulate,
                                             Tensor& grad_bias) const {
  if (fp8_ != nullptr) {
    fp8_linear_backward(in, weight.value, grad_out, grad_in, accumulate, weight.grad, grad_bias, *fp8_,
                        fp8_slot(which));
    return;
  }
  linear_backward(in, weight_operand(weight, operands_), grad_out, grad_in, accumulate, weight.grad, grad_bias,
                  operands_);
}

std::string fp8_tensor_name(const TransformerConfig& config, std::int64_t linear, Fp8Role role) {
  const bool gelu = config.mlp == MlpKind::gelu;
  const char* weights[kFp8LinearsPerBlock] = {"attn.qkv.weight", "attn.proj.weight",
                                              gelu ? "mlp.fc.weight" : "mlp.gate.weight", "mlp.up.weight",
                                              gelu ? "mlp.proj.weight" : "mlp.down.weight"};
  const std::string weight = "blocks." + std::to_string(linear / kFp8LinearsPerBlock) + "." +
                             weights[static_cast<std::size_t>(linear % kFp8LinearsPerBlock)];
  switch (role) {
    case Fp8Role::input:
      return "the input of " + weight;
    case Fp8Role::weight:
      return weight;
    case Fp8Role::grad:
      break;
  }
  return "the output gradient of " + weight;
}

// A GELU MLP's input layer runs with its activation as one op (linear_gelu_forward and, backward,
// linear_dgelu_backward: cuBLASLt's GELU epilogues on a device) unless its GEMMs are FP8 or INT8.
bool TransformerBlock::fuses_gelu(const Parameter& fc_weight) const {
  return config_.mlp == MlpKind::gelu && fp8_ == nullptr && !fc_weight.int8_values.defined();
}

std::int64_t TransformerBlock::fp8_slot(BlockLinear which) const {
  return static_cast<std::int64_t>(layer_) * kFp8LinearsPerBlock + static_cast<int>(which);
}

// Dense attention's arguments, or block-sparse ones with this forward's layout (kept in `a` for
// backward; the selection reads q and k: model.attention, nn/block_selection.h). On a device the
// selection runs where q and k are (ops/block_selection.h): its fixed-capacity layout stays there
// and its stats go to a.selection_totals, so nothing waits on the host; on the host it is the
// compressed BlockLayout.
AttentionArgs TransformerBlock::attention_args(const Tensor& q, const Tensor& k, BlockActivations& a) const {
  AttentionArgs args;
  a.selection = BlockSelectionStats{};
  a.layout.reset();
  a.selected.reset();
  if (!config_.attention.block_sparse()) {
    args.operands = attention_operands();
    return args;
  }
  const float scale = attention_scale(args, config_.head_dim());
  if (config_.attention.selects() && !q.device().is_cpu()) {
    a.selected = std::make_shared<const SelectedBlocks>(
        selected_blocks(config_.attention, bhtd(q), bhtd(k), scale, split_.context_parallel(), a.selection_totals));
    args.selected = a.selected.get();
    return args;
  }
  a.layout = std::make_shared<const BlockLayout>(
      attention_layout(config_.attention, bhtd(q), bhtd(k), scale, split_.context_parallel(), &a.selection));
  args.layout = a.layout.get();
  return args;
}

// The rule for 16-bit attention products (ops/attention.h), the same on every backend: dense
// attention (block-sparse stays f32: the tensor-core kernels' layout tile differs) without
// context parallelism (ring attention adds partial gradients: f32), head dim 64 or 128 (the
// tensor-core kernels'), under a 16-bit GEMM operand format.
bool sixteen_bit_attention(const TransformerConfig& config, const ModelSplit& split) {
  const std::int64_t D = config.head_dim();
  const bool dense = !config.attention.block_sparse() && split.context_parallel().size() == 1;
  return dense && (D == 64 || D == 128);
}

DType TransformerBlock::attention_operands() const {
  return sixteen_bit_attention(config_, split_) ? operands_ : DType::f32;
}

// RoPE (or its backward) at the rows' global positions: one call, or one per chunk under context
// parallelism (nn/context_parallel.h). out may be x.
void TransformerBlock::rope_at_positions(bool backward, const Tensor& x, Tensor& out) const {
  RopeArgs rope{.theta = config_.rope_theta};
  const ContextParallel& cp = split_.context_parallel();
  auto apply = [&](const Tensor& in, Tensor& o) { backward ? rope_backward(rope, in, o) : rope_forward(rope, in, o); };
  if (cp.size() == 1) {
    apply(x, out);
    return;
  }
  const std::int64_t c = x.size(1) / 2;
  for (int half = 0; half < 2; ++half) {
    rope.position_offset = cp.chunk_index(half) * c;
    Tensor out_half = out.slice(1, half * c, (half + 1) * c);
    apply(x.slice(1, half * c, (half + 1) * c), out_half);
  }
}

void TransformerBlock::forward(const ParameterStore& store, const Tensor& x, Tensor& y, BlockActivations& a,
                               BlockScratch& s) const {
  const std::int64_t Hq = widths_.heads, Hkv = widths_.kv_heads, D = widths_.head_dim;
  const std::int64_t B = a.h1.size(0), T = a.h1.size(1);
  const Tensor qkv_b = optional(store, qkv_b_, false);
  a.norm_rows_only = false;  // h1 and h2 gathered whole below
  Fp8WeightOnce qkv_codes;
  norm_gather_and(
      store, norm1_w_, norm1_b_, x, s.h_rows, a.h1, a.ln1_mean, a.ln1_rstd, [&](std::int64_t begin, std::int64_t end) {
        Tensor out = row_block(a.qkv, begin, end);
        dense_linear_forward(BlockLinear::qkv, row_block(a.h1, begin, end), store[qkv_w_], qkv_b, out, &qkv_codes);
      });
  Tensor q = head_view(a.qkv, 0, Hq, D), k = head_view(a.qkv, Hq * D, Hkv, D);
  Tensor v = head_view(a.qkv, (Hq + Hkv) * D, Hkv, D);
  if (config_.positions == PositionKind::rope) {
    rope_at_positions(false, q, a.q_rot);
    rope_at_positions(false, k, a.k_rot);
    q = a.q_rot;
    k = a.k_rot;
  }
  Tensor att_heads = bhtd(a.att.view({B, T, Hq, D}));
  const AttentionArgs args = attention_args(q, k, a);
  ring_attention_forward(split_.context_parallel(), args, bhtd(q), bhtd(k), bhtd(v), att_heads, a.lse);
  row_parallel_output(BlockLinear::proj, a.att, store[proj_w_], optional(store, proj_b_, false), x, s.d_h, a.x_mid);
  if (moe_) {
    norm_and_gather(store, norm2_w_, norm2_b_, a.x_mid, s.h_rows, a.h2, a.ln2_mean, a.ln2_rstd);
    moe_forward(store, a, s, y);
    return;
  }
  const bool fused = fuses_gelu(store[fc_w_]);
  const Tensor fc_b = optional(store, fc_b_, false);
  // The MLP's input layer(s) on each block of gathered rows (with the GELU when fused).
  Fp8WeightOnce fc_codes, up_codes;
  norm_gather_and(store, norm2_w_, norm2_b_, a.x_mid, s.h_rows, a.h2, a.ln2_mean, a.ln2_rstd,
                  [&](std::int64_t begin, std::int64_t end) {
                    const Tensor in = row_block(a.h2, begin, end);
                    Tensor fc = row_block(a.fc, begin, end);
                    if (fused) {
                      Tensor act = row_block(a.act, begin, end);
                      linear_gelu_forward(in, store[fc_w_], fc_b, fc, act, operands_);
                      return;
                    }
                    dense_linear_forward(BlockLinear::fc, in, store[fc_w_], fc_b, fc, &fc_codes);
                    if (config_.mlp == MlpKind::swiglu) {
                      Tensor up = row_block(a.up, begin, end);
                      dense_linear_forward(BlockLinear::up, in, store[up_w_], Tensor(), up, &up_codes);
                    }
                  });
  if (!fused) mlp_activation(a, a.act);
  row_parallel_output(BlockLinear::out, a.act, store[out_w_], optional(store, out_b_, false), a.x_mid, s.d_h, y,
                      &s.y_wide);
}

void TransformerBlock::recompute(const ParameterStore& store, const Tensor& x, BlockActivations& a,
                                 BlockScratch& scratch, Recompute mode) const {
  if (mode == Recompute::none && !split_.sharded_sequence()) return;
  if (mode == Recompute::full) {
    forward(store, x, scratch.y_wide, a, scratch);
    return;
  }
  if (split_.sharded_sequence()) {  // the rows only: backward gathers them beside its GEMMs
    norm_rows(store, norm1_w_, norm1_b_, x, a.h1, a.ln1_mean, a.ln1_rstd);
    if (moe_) {  // the MoE layer's backward reads its input whole
      norm_and_gather(store, norm2_w_, norm2_b_, a.x_mid, scratch.h_rows, a.h2, a.ln2_mean, a.ln2_rstd);
    } else {
      norm_rows(store, norm2_w_, norm2_b_, a.x_mid, a.h2, a.ln2_mean, a.ln2_rstd);
    }
    a.norm_rows_only = true;
  } else {
    norm_and_gather(store, norm1_w_, norm1_b_, x, scratch.h_rows, a.h1, a.ln1_mean, a.ln1_rstd);
    norm_and_gather(store, norm2_w_, norm2_b_, a.x_mid, scratch.h_rows, a.h2, a.ln2_mean, a.ln2_rstd);
  }
  if (mode == Recompute::selective && !moe_) mlp_activation(a, a.act);
}

// full's own rows (TensorParallel::own_rows_of) <- norm(x), x this rank's rows; the rest of full is
// left to a later gather.
void TransformerBlock::norm_rows(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x,
                                 Tensor& full, Tensor& mean, Tensor& rstd) const {
  Tensor own = split_.tensor_parallel().own_rows_of(full);
  norm_forward(store, w, b, x, own, mean, rstd);
}

// Under FP8 the step's first quantisation of a tensor sets its just-in-time scale: from the whole
// tensor, as in a group of one, where a ring would otherwise quantise a block of it first.
void TransformerBlock::fp8_first_scale(BlockLinear which, Fp8Role role, const Tensor& whole) const {
  if (fp8_ != nullptr) (void)fp8_->scale(fp8_slot(which), role, row_block(whole, 0, whole.numel() / whole.size(-1)));
}

// The full (B, T, C) gradient of a row-parallel output (the backward of its reduction).
Tensor TransformerBlock::gathered_grad(const Tensor& grad, BlockScratch& s) const {
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor full = tp.full_of(grad, s.d_full);
  tp.gather_rows(grad, full);
  return full;
}

// The same, with `input_grad(dy, begin, end)` — the row-parallel layer's input-gradient GEMM on
// rows [begin, end), dy those rows of the full gradient — run on each block as it arrives
// (TensorParallel::gather_rows_overlapped). Returns the full gradient for the weight's.
Tensor TransformerBlock::gathered_grad_overlapped(
    const Tensor& grad, BlockScratch& s,
    const std::function<void(const Tensor& dy, std::int64_t begin, std::int64_t end)>& input_grad) const {
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor full = tp.full_of(grad, s.d_full);
  tp.gather_rows_overlapped(
      grad, full, [&](std::int64_t begin, std::int64_t end) { input_grad(row_block(full, begin, end), begin, end); });
  return full;
}

// A dense layer's input gradient alone (written, or accumulated), on a block of rows; under FP8
// the weight's transposed codes are quantised at the layer's first block (`once`).
void TransformerBlock::dense_input_grad(BlockLinear which, Parameter& weight, const Tensor& grad_out, Tensor& grad_in,
                                        bool accumulate, Fp8WeightOnce& once) const {
  if (fp8_ != nullptr) {
    const std::int64_t slot = fp8_slot(which);
    if (!once) once = fp8_quantize_weight(weight.value, true, *fp8_, slot);
    fp8_linear_input_grad(grad_out, *once, grad_in, accumulate, *fp8_, slot);
    return;
  }
  // grad_out W: the input gradient's GEMM alone (the input is not needed, nor converted).
  matmul_forward(MatmulArgs{.accumulate = accumulate}, gemm_operand(grad_out, operands_),
                 weight_operand(weight, operands_), grad_in);
}

// A row-parallel layer's backward from its rows' output gradient `grad`: grad_in (written) and its
// weight and bias gradients. Under sequence parallelism the input gradient runs block by block as
// the output gradient is gathered, then the weight's over all rows; else one backward (the output
// gradient converted or quantised once for both GEMMs).
void TransformerBlock::row_parallel_backward(BlockLinear which, const Tensor& in, Parameter& weight, const Tensor& grad,
                                             Tensor& grad_in, Tensor& grad_bias, BlockScratch& s) const {
  if (!split_.tensor_parallel().shards_rows()) {
    dense_linear_backward(which, in, weight, grad, grad_in, false, grad_bias);
    return;
  }
  Fp8WeightOnce codes;
  const Tensor full = gathered_grad_overlapped(grad, s, [&](const Tensor& dy, std::int64_t begin, std::int64_t end) {
    Tensor block = row_block(grad_in, begin, end);
    dense_input_grad(which, weight, dy, block, false, codes);
  });
  Tensor no_grad_in;
  dense_linear_backward(which, in, weight, full, no_grad_in, false, grad_bias);
}

// dL/d(the layers' common input), summed over the group into this rank's rows: the input gradients
// of the column-parallel `layers` (written by the first, accumulated by the rest), and their weight
// and bias gradients over all rows. In a group the input gradient is produced block by block into
// its reduction, each block's in flight while the next is produced (TensorParallel::
// reduce_to_rows_overlapped: a ring reduce-scatter under sequence parallelism, else block
// all-reduces); alone, one backward per layer.
Tensor TransformerBlock::column_parallel_backward(ParameterStore& store, const Tensor& in, bool gather_in,
                                                  std::vector<ColumnLinear> layers, BlockScratch& s) const {
  const TensorParallel& tp = split_.tensor_parallel();
  if (gather_in) {  // `in` holds this rank's rows: the weight gradients block by block as the rest arrive
    for (ColumnLinear& layer : layers) fp8_first_scale(layer.which, Fp8Role::grad, layer.grad_out);
    Tensor full = in;
    tp.gather_rows_overlapped(tp.own_rows_of(full), full, [&](std::int64_t begin, std::int64_t end) {
      for (ColumnLinear& layer : layers) {
        Tensor no_grad_in;
        dense_linear_backward(layer.which, row_block(full, begin, end), store[layer.weight],
                              row_block(layer.grad_out, begin, end), no_grad_in, false, layer.grad_bias);
      }
    });
  }
  if (tp.size() == 1) {  // nothing to reduce: each layer's gradients in one backward
    bool accumulate = false;
    for (ColumnLinear& layer : layers) {
      dense_linear_backward(layer.which, in, store[layer.weight], layer.grad_out, s.d_h, accumulate, layer.grad_bias);
      accumulate = true;
    }
    return s.d_h;
  }
  if (!gather_in) {  // else done beside the gather
    for (ColumnLinear& layer : layers) {
      Tensor no_grad_in;
      dense_linear_backward(layer.which, in, store[layer.weight], layer.grad_out, no_grad_in, false, layer.grad_bias);
    }
  }
  std::vector<Fp8WeightOnce> codes(layers.size());
  Tensor rows = tp.rows_of(s.d_h, s.d_hs);
  tp.reduce_to_rows_overlapped(s.d_h, rows, [&](std::int64_t begin, std::int64_t end, Tensor& out) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      dense_input_grad(layers[i].which, store[layers[i].weight], row_block(layers[i].grad_out, begin, end), out, i > 0,
                       codes[i]);
    }
  });
  return rows;
}

// Under tp the MoE layer runs on this rank's B / tp sequences of the gathered input (moe_layer.h);
// a batch that does not split runs whole on every rank (forward only: training batches split).
IndexRange TransformerBlock::moe_sequences(std::int64_t B) const {
  const int tp = split_.tp_size();
  if (tp == 1 || B % tp != 0) return {0, B};
  return block_of(B, tp, split_.tp_rank());
}

// y = x_mid + the MoE layer's output: this rank's sequences written into the (B, T, C) partial
// buffer (zeros elsewhere) and summed over the group like a row-parallel output. A batch that
// does not split ran whole on every rank: tp rank 0's copy is the one summed.
void TransformerBlock::moe_forward(const ParameterStore& store, BlockActivations& a, BlockScratch& s, Tensor& y) const {
  const TensorParallel& tp = split_.tensor_parallel();
  const std::int64_t B = a.h2.size(0);
  const IndexRange mine = moe_sequences(B);
  if (mine.size() < B) zero(s.d_h);
  Tensor out = s.d_h.slice(0, mine.begin, mine.end);
  moe_->forward(store, a.h2.slice(0, mine.begin, mine.end), out, *a.moe);
  if (mine.size() == B && tp.rank() != 0) zero(s.d_h);
  Tensor rows = tp.rows_of(s.d_h, s.d_tmp);
  tp.reduce_to_rows(s.d_h, rows);
  add(a.x_mid, rows, y);
}

// s.d_h <- this rank's partial dL/d h2: the MoE layer's input gradient for its sequences, zeros
// elsewhere (summed over the group by the caller's reduced_input_grad).
void TransformerBlock::moe_backward(ParameterStore& store, const BlockActivations& a, BlockScratch& s,
                                    const Tensor& grad, const AuxLossScale& loss_scale) const {
  const std::int64_t B = a.h2.size(0);
  const IndexRange mine = moe_sequences(B);
  MYRIAD_CHECK(mine.size() < B || split_.tp_size() == 1,
               "moe: layer " << layer_ << " trains on a micro-batch of " << B << " sequences, which tp "
                             << split_.tp_size() << " cannot split (training.micro_batch must be a multiple of tp)");
  const Tensor full_grad = gathered_grad(grad, s);
  if (mine.size() < B) zero(s.d_h);
  Tensor d_h = s.d_h.slice(0, mine.begin, mine.end);
  moe_->backward(store, a.h2.slice(0, mine.begin, mine.end), *a.moe, full_grad.slice(0, mine.begin, mine.end), d_h,
                 loss_scale);
}

// s.d_h holds this rank's partial gradient of a column-parallel input: summed over the group into
// this rank's rows (the backward of the input's gather).
Tensor TransformerBlock::reduced_input_grad(BlockScratch& s) const {
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor rows = tp.rows_of(s.d_h, s.d_hs);
  tp.reduce_to_rows(s.d_h, rows);
  return rows;
}

void TransformerBlock::backward(ParameterStore& store, const Tensor& x, const BlockActivations& a, BlockScratch& s,
                                Tensor& grad, const AuxLossScale& loss_scale) const {
  const std::int64_t B = a.h1.size(0), T = a.h1.size(1);
  const std::int64_t Hq = widths_.heads, Hkv = widths_.kv_heads, D = widths_.head_dim;
  zero(s.norm_grads);
  // MLP: d_h2 <- dL/d h2, this rank's rows (the partial sums of the dense MLP, or of the MoE layer on
  // this rank's sequences, reduced over the tp group).
  Tensor d_h2;
  if (moe_) {
    moe_backward(store, a, s, grad, loss_scale);
    d_h2 = reduced_input_grad(s);
  } else {
    Tensor out_b = optional(store, out_b_, true), fc_b = optional(store, fc_b_, true), none;
    const bool fused = fuses_gelu(store[fc_w_]);
    if (fused) {
      // The output layer's input gradient through the GELU in one op that also gives the input
      // layer's bias gradient, block by block as its output gradient is gathered; then its weight
      // and bias gradients over all rows.
      const Tensor d_out =
          gathered_grad_overlapped(grad, s, [&](const Tensor& dy, std::int64_t begin, std::int64_t end) {
            Tensor d_fc = row_block(s.d_fc, begin, end);
            linear_dgelu_backward(dy, store[out_w_], row_block(a.fc, begin, end), d_fc, fc_b, operands_);
          });
      Tensor no_grad_act;
      dense_linear_backward(BlockLinear::out, a.act, store[out_w_], d_out, no_grad_act, false, out_b);
    } else {
      row_parallel_backward(BlockLinear::out, a.act, store[out_w_], grad, s.d_act, out_b, s);
    }
    std::vector<ColumnLinear> inputs;
    if (fused) {
      inputs.push_back({BlockLinear::fc, fc_w_, s.d_fc, none});
    } else if (config_.mlp == MlpKind::gelu) {
      gelu_backward(GeluArgs{}, a.fc, s.d_act, s.d_fc);
      inputs.push_back({BlockLinear::fc, fc_w_, s.d_fc, fc_b});
    } else {
      swiglu_backward(SwigluArgs{}, a.fc, a.up, s.d_act, s.d_fc, s.d_up);
      inputs.push_back({BlockLinear::fc, fc_w_, s.d_fc, fc_b});
      inputs.push_back({BlockLinear::up, up_w_, s.d_up, none});
    }
    d_h2 = column_parallel_backward(store, a.h2, a.norm_rows_only, std::move(inputs), s);
  }
  Tensor n2w = norm_grad_target(norm2_w_, s, 2), n2b = norm_grad_target(norm2_b_, s, 3);
  norm_backward(store, norm2_w_, a.x_mid, a.ln2_mean, a.ln2_rstd, d_h2, s.d_tmp, n2w, n2b);
  add_into(grad, s.d_tmp);  // grad = dL/dx_mid
  // Attention.
  Tensor proj_b = optional(store, proj_b_, true);
  row_parallel_backward(BlockLinear::proj, a.att, store[proj_w_], grad, s.d_att, proj_b, s);
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
  AttentionArgs args;
  args.layout = a.layout.get();
  args.selected = a.selected.get();
  if (!config_.attention.block_sparse()) args.operands = attention_operands();
  MYRIAD_CHECK(!config_.attention.block_sparse() || args.layout != nullptr || args.selected != nullptr,
               "attention: layer " << layer_ << " backward without its forward's block layout");
  ring_attention_backward(split_.context_parallel(), args, bhtd(q), bhtd(k), bhtd(v), att_heads, a.lse, d_att_heads,
                          dq_h, dk_h, dv_h);
  if (config_.positions == PositionKind::rope) {
    rope_at_positions(true, dq, dq);
    rope_at_positions(true, dk, dk);
  }
  Tensor qkv_b = optional(store, qkv_b_, true);
  const Tensor d_h1 =
      column_parallel_backward(store, a.h1, a.norm_rows_only, {{BlockLinear::qkv, qkv_w_, s.d_qkv, qkv_b}}, s);
  Tensor n1w = norm_grad_target(norm1_w_, s, 0), n1b = norm_grad_target(norm1_b_, s, 1);
  norm_backward(store, norm1_w_, x, a.ln1_mean, a.ln1_rstd, d_h1, s.d_tmp, n1w, n1b);
  add_into(grad, s.d_tmp);  // grad = dL/dx
  // The norms' gradients: from this rank's rows under sequence parallelism, where the shard plan
  // makes them tp_token_share (summed over tp once per step, before the update).
  const std::int64_t C = config_.n_embd;
  const std::size_t norms[4] = {norm1_w_, norm1_b_, norm2_w_, norm2_b_};
  for (int slot = 0; slot < 4; ++slot) {
    if (norms[slot] != npos) add_into(store[norms[slot]].grad, s.norm_grads.slice(0, slot * C, (slot + 1) * C));
  }
}

}  // namespace myriad::nn
