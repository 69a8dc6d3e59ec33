// DeviceGpt: scope checks, buffer allocation, host <-> device parameter copies and the AdamW step
// (the passes are in device_gpt_passes.cpp). See device_gpt.h.
#include "myriad/cuda/device_gpt.h"

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "device_gpt_state.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {

namespace {

void check_scope(const nn::TransformerConfig& c, std::int64_t batch, std::int64_t seq, const DeviceGptOptions& o) {
  c.validate();
  MYRIAD_CHECK(o.operands == DType::f32 || o.operands == DType::bf16 || o.operands == DType::f16,
               "DeviceGpt: GEMM operands " << dtype_name(o.operands) << " (f32, bf16 or f16)");
  MYRIAD_CHECK(!o.tf32 || o.operands == DType::f32, "DeviceGpt: tf32 applies to f32 operands, not "
                                                        << dtype_name(o.operands));
  MYRIAD_CHECK(c.head_dim() == 64 || c.head_dim() == 128,
               "DeviceGpt: head dim " << c.head_dim() << " (model.n_embd / model.n_head); flash attention has 64 and 128");
  MYRIAD_CHECK(batch > 0 && seq > 0 && seq <= c.context_length,
               "DeviceGpt: batch " << batch << " x seq " << seq << " (seq must be in [1, context_length " << c.context_length
                                   << "])");
}

// Hands out consecutive pieces of one buffer, each rounded up to 16 elements (64 bytes of f32,
// 32 of 16-bit values: the alignment the kernels and GEMMs want); without a base it only counts.
template <typename T>
struct Carver {
  T* base = nullptr;
  std::int64_t used = 0;
  T* take(std::int64_t n) {
    T* piece = base == nullptr ? nullptr : base + used;
    used += (n + 15) / 16 * 16;
    return piece;
  }
};

DeviceBuffer floats(std::int64_t count, int device) {
  return DeviceBuffer(static_cast<std::size_t>(count) * sizeof(float), device);
}

struct Carvers {
  Carver<float> f;
  Carver<Half16> h;
};

// Each block's activations are carved out of buffers: the ones the block keeps out of its own
// f32 (and in 16-bit mode 16-bit) buffer, the ones recompute rebuilds in backward out of one
// shared set that every block reuses — none: everything kept; selective: all but the norm
// outputs and the MLP activation (cheap: no GEMM); full: nothing (the block input is always
// kept in residual). The same carving runs once without buffers to size them, then per block.
void carve_block(const DeviceGpt::State& s, Carvers& own, Carvers& shared, BlockActivations& a) {
  const nn::Recompute mode = s.options.recompute;
  const std::int64_t N = s.N, R = s.R, C = s.C, A = s.A, F = s.F, kv = s.N * s.Hkv * s.D;
  auto kept = [&](bool cheap) { return mode == nn::Recompute::none || (mode == nn::Recompute::selective && !cheap); };
  auto f = [&](std::int64_t n, bool cheap = false) { return (kept(cheap) ? own.f : shared.f).take(n); };
  const bool half = s.half_operands();  // 16-bit copies only in 16-bit mode
  auto h = [&](std::int64_t n, bool cheap = false) { return half ? (kept(cheap) ? own.h : shared.h).take(n) : nullptr; };
  a.ln1 = f(N * C, true);
  a.ln1_mean = f(R);
  a.ln1_rstd = f(R);
  a.qkv = f(N * s.W);
  a.q = f(N * A);
  a.k = f(kv);
  a.v = f(kv);
  a.att = f(N * A);
  a.lse = f(N * s.Hq);
  a.merged = f(N * A);
  a.res_mid = f(R * C);
  a.ln2 = f(N * C, true);
  a.ln2_mean = f(R);
  a.ln2_rstd = f(R);
  a.fc = f(N * F);
  a.up = s.swiglu ? f(N * F) : nullptr;
  a.act = f(N * F, true);
  a.ln1_h = h(N * C, true);
  a.merged_h = h(N * A);
  a.ln2_h = h(N * C, true);
  a.act_h = h(N * F, true);
  a.q_h = h(N * A);
  a.k_h = h(kv);
  a.v_h = h(kv);
  a.att_h = h(N * A);
}

DeviceBuffer halves(std::int64_t count, int device) {
  return DeviceBuffer(static_cast<std::size_t>(count) * sizeof(Half16), device);
}

DeviceBuffer int32s(std::int64_t count, int device) {
  return DeviceBuffer(static_cast<std::size_t>(count) * sizeof(std::int32_t), device);
}

// Buffers of the carving's sizes (none for zero elements: a mode that keeps nothing, or no
// 16-bit copies), and carvers over them.
Carvers carving_buffers(const Carvers& size, int device, std::vector<DeviceBuffer>& f32, std::vector<DeviceBuffer>& h16) {
  Carvers c;
  if (size.f.used > 0) {
    f32.push_back(floats(size.f.used, device));
    c.f.base = f32.back().as<float>();
  }
  if (size.h.used > 0) {
    h16.push_back(halves(size.h.used, device));
    c.h.base = h16.back().as<Half16>();
  }
  return c;
}

nn::ModelSplit layout_split(const DeviceGptOptions& o) {
  nn::ModelSplit split;
  split.tp = o.tp != nullptr && o.tp->size() > 1 ? o.tp : nullptr;
  split.sequence_parallel = o.sequence_parallel;
  split.chunks = o.chunks;
  split.first_stage = o.first_stage;
  split.last_stage = o.last_stage;
  return split;
}

}  // namespace

DeviceGpt::State::State(DeviceContext& ctx, const nn::TransformerConfig& cfg, std::int64_t batch, std::int64_t seq,
                        DeviceGptOptions opts)
    : context(ctx), config(cfg), options(opts), layout_model(cfg, layout_split(opts), /*allocate=*/false) {
  const int tp_size = opts.tp != nullptr ? opts.tp->size() : 1;
  if (tp_size > 1) {
    MYRIAD_CHECK(opts.tp_device != nullptr && opts.tp_device->size() == tp_size &&
                     opts.tp_device->rank() == opts.tp->rank(),
                 "DeviceGpt: tensor parallelism over " << tp_size << " ranks needs the same group on the device "
                                                       << "(DeviceGptOptions::tp_device)");
    tp = opts.tp;
    tp_device = opts.tp_device;
  }
  B = batch;
  T = seq;
  N = batch * seq;
  C = cfg.n_embd;
  Hq = cfg.local_heads(tp_size);
  Hkv = cfg.local_kv_heads(tp_size);
  D = cfg.head_dim();
  A = Hq * D;
  W = cfg.local_qkv_width(tp_size);
  F = cfg.local_ffn(tp_size);
  V = cfg.vocab_size;
  first_stage = opts.first_stage;
  last_stage = opts.last_stage;
  if (opts.chunks.empty()) {
    chunk_blocks.emplace_back(0, cfg.n_layer);
    for (int l = 0; l < cfg.n_layer; ++l) layers.push_back(l);
  } else {
    for (const std::vector<int>& chunk : opts.chunks) {
      const int first = static_cast<int>(layers.size());
      layers.insert(layers.end(), chunk.begin(), chunk.end());
      chunk_blocks.emplace_back(first, static_cast<int>(layers.size()));
    }
  }
  L = static_cast<std::int64_t>(layers.size());
  Vl = cfg.padded_vocab_size() / tp_size;
  vocab_start = Vl * (tp_size > 1 ? opts.tp->rank() : 0);
  Vr = tp_size > 1 ? std::clamp<std::int64_t>(V - vocab_start, 0, Vl) : V;
  sequence_parallel = opts.sequence_parallel && tp_size > 1;
  MYRIAD_CHECK(!sequence_parallel || N % tp_size == 0,
               "DeviceGpt: sequence parallelism splits the batch " << batch << " x seq " << seq << " = " << N
                                                                   << " token rows over tp " << tp_size
                                                                   << ": they must divide evenly");
  R = sequence_parallel ? N / tp_size : N;
  row_start = sequence_parallel ? R * opts.tp->rank() : 0;
  layernorm = cfg.norm == nn::NormKind::layernorm;
  swiglu = cfg.mlp == nn::MlpKind::swiglu;
  rope = cfg.positions == nn::PositionKind::rope;
  bias = cfg.bias;
  head_weight = cfg.tie_embeddings ? "wte" : "lm_head.weight";
  const int dev = ctx.device();
  const std::int64_t total = layout_model.parameters().numel();
  MYRIAD_CHECK(opts.flat_values || !opts.optimizer,
               "DeviceGpt: its own optimizer needs the flat values (DeviceGptOptions::flat_values)");
  MYRIAD_CHECK(opts.flat_gradients || !opts.optimizer,
               "DeviceGpt: its own optimizer needs the flat gradients (DeviceGptOptions::flat_gradients)");
  if (opts.flat_values) values = floats(total, dev);
  if (opts.flat_gradients) grads = floats(total, dev);
  DeviceGuard guard(dev);
  for (DeviceBuffer* b : {&values, &grads}) MYRIAD_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->bytes(), ctx.stream()));
  if (opts.optimizer) {
    std::vector<DeviceAdamWSegment> segments;  // whole parameters in store order: AdamWOptimizer's layout
    for (const nn::Parameter& p : layout_model.parameters().all()) {
      segments.push_back({.value_offset = p.offset, .grad_offset = p.offset, .numel = shape_numel(p.shape),
                          .kind = p.kind});
    }
    optimizer = std::make_unique<DeviceAdamW>(ctx, std::move(segments), total);
  }

  // The shared activations of recompute (one set for every block and slot), then slot 0.
  Carvers own_size, shared_size;
  BlockActivations sizing{};
  carve_block(*this, own_size, shared_size, sizing);
  const Carvers shared = carving_buffers(shared_size, dev, shared_buffers, shared_buffers);
  shared_f32 = shared.f.base;
  shared_h16 = shared.h.base;
  parked.resize(1);
  allocate_slot();
  const std::int64_t kv = N * Hkv * D;
  if (half_operands()) {
    if (opts.flat_values) values_h = halves(total, dev);
    grad_h = halves(std::max({N * Vr, N * F, N * W, N * C}), dev);
    d_att_h = halves(N * A, dev);
    d_q_h = halves(N * A, dev);
    d_k_h = halves(kv, dev);
    d_v_h = halves(kv, dev);
  }
  for (int u = 0; u < static_cast<int>(layout_model.units().size()); ++u) {
    const std::string& name = layout_model.units()[static_cast<std::size_t>(u)].name;
    if (name == "embeddings") embedding_unit = u;
    if (name == "head") head_unit = u;
  }
  for (std::int64_t i = 0; i < L; ++i) {
    const std::string name = "blocks." + std::to_string(layers[static_cast<std::size_t>(i)]);
    const auto& units = layout_model.units();
    const auto it = std::find_if(units.begin(), units.end(), [&](const nn::ParamUnit& u) { return u.name == name; });
    MYRIAD_CHECK(it != units.end(), "DeviceGpt: no parameter unit '" << name << "' in the layout");
    block_units.push_back(static_cast<int>(it - units.begin()));
  }
  if (rope) {
    rope_cos = floats(T * D / 2, dev);
    rope_sin = floats(T * D / 2, dev);
    rope_table_f32(rope_cos.as<float>(), rope_sin.as<float>(), T, D, cfg.rope_theta, 0, ctx.stream());
  }
  grad_losses = floats(N, dev);
  bad_index = DeviceBuffer(sizeof(long long), dev);
  if (tensor_parallel()) shard_bad_index = DeviceBuffer(sizeof(long long), dev);
  d_res_mid = floats(R * C, dev);
  d_tmp = floats(N * C, dev);
  if (sequence_parallel) {
    h_rows = floats(R * C, dev);
    d_rows = floats(R * C, dev);
    d_full = floats(N * C, dev);
    norm_grads = floats(2 * C, dev);
  }
  for (DeviceBuffer* b : {&d_merged, &d_att, &d_q}) *b = floats(N * A, dev);
  for (DeviceBuffer* b : {&d_k, &d_v}) *b = floats(kv, dev);
  d_qkv = floats(N * W, dev);
  d_fc = floats(N * F, dev);
  if (swiglu) d_up = floats(N * F, dev);
  delta = floats(N * Hq, dev);
  norm_scratch_floats = std::max<std::int64_t>(layernorm_backward_scratch_floats(R, C), 1);
  norm_scratch = floats(norm_scratch_floats, dev);

  shared_bytes = 0;
  for (const DeviceBuffer& b : shared_buffers) shared_bytes += b.bytes();
  for (const DeviceBuffer* b : {&grad_losses, &d_res_mid, &d_tmp, &d_merged, &d_att, &d_q, &d_k, &d_v, &d_qkv, &d_fc,
                                &d_up, &delta, &norm_scratch, &grad_h, &rope_cos, &rope_sin, &d_att_h, &d_q_h, &d_k_h,
                                &d_v_h, &h_rows, &d_rows, &d_full, &norm_grads}) {
    shared_bytes += b->bytes();
  }
}

void DeviceGpt::State::allocate_slot() {
  const int dev = context.device();
  const int chunks = static_cast<int>(chunk_blocks.size());
  for (std::int64_t r = 0; r < L + chunks; ++r) residual.push_back(floats(R * C, dev));
  Carvers own_size, shared_size;
  BlockActivations sizing{};
  carve_block(*this, own_size, shared_size, sizing);
  for (std::int64_t i = 0; i < L; ++i) {
    Carvers own = carving_buffers(own_size, dev, block_buffers, block_half_buffers);
    Carvers shared{{shared_f32}, {shared_h16}};  // every block starts at the same shared pointers
    BlockActivations a{};
    carve_block(*this, own, shared, a);
    blocks.push_back(a);
  }
  for (int c = 0; c < chunks; ++c) chunk_grads.push_back(floats(R * C, dev));
  ids = int32s(N, dev);
  targets = int32s(N, dev);
  if (tensor_parallel()) {
    shard_ids = int32s(N, dev);
    shard_targets = int32s(N, dev);
  }
  if (last_stage) {
    lnf = floats(N * C, dev);
    lnf_mean = floats(R, dev);
    lnf_rstd = floats(R, dev);
    if (half_operands()) lnf_h = halves(N * C, dev);
    logits = floats(std::max<std::int64_t>(N * Vr, 1), dev);
    losses = floats(N, dev);
    ce_lse = floats(N, dev);
  }
  std::size_t bytes = 0;
  for (const auto* list : {&residual, &block_buffers, &block_half_buffers, &chunk_grads}) {
    for (const DeviceBuffer& b : *list) bytes += b.bytes();
  }
  for (const DeviceBuffer* b : {&lnf, &lnf_mean, &lnf_rstd, &lnf_h, &logits, &losses, &ce_lse, &ids, &targets,
                                &shard_ids, &shard_targets}) {
    bytes += b->bytes();
  }
  slot_bytes = bytes;
}

void DeviceGpt::State::swap_slot(SlotBuffers& o) {
  std::swap(residual, o.residual);
  std::swap(block_buffers, o.block_buffers);
  std::swap(block_half_buffers, o.block_half_buffers);
  std::swap(blocks, o.blocks);
  for (auto [mine, theirs] : {std::pair{&lnf, &o.lnf}, {&lnf_mean, &o.lnf_mean}, {&lnf_rstd, &o.lnf_rstd},
                              {&lnf_h, &o.lnf_h}, {&logits, &o.logits}, {&losses, &o.losses}, {&ce_lse, &o.ce_lse},
                              {&ids, &o.ids}, {&targets, &o.targets}, {&shard_ids, &o.shard_ids},
                              {&shard_targets, &o.shard_targets}}) {
    std::swap(*mine, *theirs);
  }
  std::swap(batch_targets, o.batch_targets);
  std::swap(chunk_grads, o.chunk_grads);
}

void DeviceGpt::State::add_slot() {
  SlotBuffers active;
  swap_slot(active);  // the members are empty now
  allocate_slot();
  SlotBuffers made;
  swap_slot(made);    // the members are empty again
  swap_slot(active);  // the active slot is back
  parked.push_back(std::move(made));
}

void DeviceGpt::State::use_slot(int slot) {
  MYRIAD_CHECK(slot >= 0 && slot < static_cast<int>(parked.size()),
               "DeviceGpt: slot " << slot << " of " << parked.size() << " (prepare_slots first)");
  if (slot == active_slot) return;
  swap_slot(parked[static_cast<std::size_t>(active_slot)]);
  swap_slot(parked[static_cast<std::size_t>(slot)]);
  active_slot = slot;
}

float* DeviceGpt::State::value(const std::string& name) const {
  return value_of(layout_model.parameters().find(name));
}

int DeviceGpt::State::unit_of(const nn::Parameter& p) const {
  const auto& units = layout_model.units();
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (p.offset >= units[u].begin && p.offset < units[u].end) return static_cast<int>(u);
  }
  MYRIAD_THROW("DeviceGpt: parameter '" << p.name << "' lies in no parameter unit");
}

float* DeviceGpt::State::value_of(const nn::Parameter& p) const {
  if (options.flat_values) return values.as<float>() + p.offset;
  MYRIAD_CHECK(value_store, "DeviceGpt: a pass without flat values needs set_unit_value_store");
  const int u = unit_of(p);
  return value_store->unit_values(u) + (p.offset - layout_model.units()[static_cast<std::size_t>(u)].begin);
}

float* DeviceGpt::State::grad(const std::string& name) const {
  return gradient_of(layout_model.parameters().find(name));
}

float* DeviceGpt::State::gradient_of(const nn::Parameter& p) const {
  if (options.flat_gradients) return grads.as<float>() + p.offset;
  MYRIAD_CHECK(gradient_store, "DeviceGpt: a backward without flat gradients needs set_unit_gradient_store");
  const int u = unit_of(p);
  return gradient_store->unit_gradients(u) + (p.offset - layout_model.units()[static_cast<std::size_t>(u)].begin);
}

float* DeviceGpt::State::optional_value(const std::string& name) const {
  for (const nn::Parameter& p : layout_model.parameters().all()) {
    if (p.name == name) return value_of(p);
  }
  return nullptr;
}

float* DeviceGpt::State::optional_grad(const std::string& name) const {
  for (const nn::Parameter& p : layout_model.parameters().all()) {
    if (p.name == name) return gradient_of(p);
  }
  return nullptr;
}

const Half16* DeviceGpt::State::value_h(const std::string& name) const {
  const nn::Parameter& p = layout_model.parameters().find(name);
  if (options.flat_values) return values_h.as<Half16>() + p.offset;
  MYRIAD_CHECK(value_store, "DeviceGpt: a pass without flat values needs set_unit_value_store");
  const int u = unit_of(p);
  return value_store->unit_values_h(u) + (p.offset - layout_model.units()[static_cast<std::size_t>(u)].begin);
}

void DeviceGpt::State::refresh_half_weights() {
  if (!half_operands() || !options.flat_values) return;  // without flat values the unit store rounds
  to_half(values.as<float>(), values_h.as<Half16>(), layout_model.parameters().numel());
}

void DeviceGpt::State::to_half(const float* x, Half16* out, std::int64_t n) const {
  if (options.operands == DType::f16) {
    convert_f32_to_f16(x, reinterpret_cast<__half*>(out), n, context.stream());
  } else {
    convert_f32_to_bf16(x, reinterpret_cast<__nv_bfloat16*>(out), n, context.stream());
  }
}

void DeviceGpt::State::from_half(const Half16* x, float* out, std::int64_t n) const {
  if (options.operands == DType::f16) {
    convert_f16_to_f32(reinterpret_cast<const __half*>(x), out, n, context.stream());
  } else {
    convert_bf16_to_f32(reinterpret_cast<const __nv_bfloat16*>(x), out, n, context.stream());
  }
}

nn::LossSum DeviceGpt::State::read_losses(const Tensor& host_targets, const std::function<void()>& passes) {
  DeviceGuard guard(context.device());
  cudaStream_t stream = context.stream();
  const long long no_bad_index = std::numeric_limits<long long>::max();
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(bad_index.data(), &no_bad_index, sizeof no_bad_index, cudaMemcpyHostToDevice,
                                    stream));
  passes();
  // One synchronisation: the per-token losses (summed in token order in float64, as on the CPU)
  // and the first bad id / target position.
  std::vector<float> host_losses(static_cast<std::size_t>(N));
  long long bad = 0;
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(host_losses.data(), losses.data(), host_losses.size() * sizeof(float),
                                    cudaMemcpyDeviceToHost, stream));
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(&bad, bad_index.data(), sizeof bad, cudaMemcpyDeviceToHost, stream));
  context.synchronize();
  MYRIAD_CHECK(bad == no_bad_index, "DeviceGpt: token or target at flat position " << bad
                                                                                  << " is outside the vocabulary [0, "
                                                                                  << V << ")");
  nn::LossSum result;
  const std::int32_t* target_values = host_targets.data<std::int32_t>();
  for (std::int64_t i = 0; i < N; ++i) {
    if (target_values[i] == nn::GptModel::kIgnoreIndex) continue;
    result.sum += host_losses[static_cast<std::size_t>(i)];
    result.tokens += 1;
  }
  return result;
}

DeviceGpt::DeviceGpt(DeviceContext& context, const nn::TransformerConfig& config, std::int64_t batch, std::int64_t seq,
                     DeviceGptOptions options) {
  check_scope(config, batch, seq, options);
  state_ = std::make_unique<State>(context, config, batch, seq, options);
  context.synchronize();
}

DeviceGpt::~DeviceGpt() {
  if (state_) (void)cudaStreamSynchronize(state_->context.stream());  // buffers may still be in use
}

const nn::TransformerConfig& DeviceGpt::config() const { return state_->config; }
const nn::ParameterStore& DeviceGpt::layout() const { return state_->layout_model.parameters(); }
std::int64_t DeviceGpt::parameter_floats() const { return layout().numel(); }
std::int64_t DeviceGpt::steps_taken() const { return state_->optimizer ? state_->optimizer->steps_taken() : 0; }
std::size_t DeviceGpt::activation_bytes() const { return saved_activation_bytes() + scratch_bytes(); }
std::size_t DeviceGpt::saved_activation_bytes() const { return state_->slot_bytes * state_->parked.size(); }
std::size_t DeviceGpt::scratch_bytes() const { return state_->shared_bytes; }
std::size_t DeviceGpt::parameter_bytes() const { return state_->values.bytes() + state_->values_h.bytes(); }
std::size_t DeviceGpt::gradient_bytes() const { return state_->grads.bytes(); }

void DeviceGpt::load_values(const Tensor& flat_values) {
  MYRIAD_CHECK(state_->options.flat_values, "DeviceGpt::load_values: built without flat values");
  MYRIAD_CHECK(flat_values.defined() && flat_values.device().is_cpu() && flat_values.dtype() == DType::f32 &&
                   flat_values.is_contiguous() && flat_values.numel() == parameter_floats(),
               "DeviceGpt::load_values: expected a contiguous host f32[" << parameter_floats() << "] (the flat "
                                                                         << "values of nn::ParameterStore), got "
                                                                         << (flat_values.defined() ? flat_values.describe()
                                                                                                   : "undefined"));
  DeviceGuard guard(state_->context.device());
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(state_->values.data(), flat_values.raw_data(), flat_values.nbytes(),
                                    cudaMemcpyHostToDevice, state_->context.stream()));
  state_->refresh_half_weights();
  state_->context.synchronize();
}

namespace {

Tensor download(const DeviceContext& context, const DeviceBuffer& buffer, std::int64_t count) {
  Tensor host = Tensor::empty({count});
  DeviceGuard guard(context.device());
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(host.raw_data(), buffer.data(), host.nbytes(), cudaMemcpyDeviceToHost,
                                    context.stream()));
  context.synchronize();
  return host;
}

}  // namespace

Tensor DeviceGpt::values_to_host() const {
  MYRIAD_CHECK(state_->options.flat_values, "DeviceGpt::values_to_host: built without flat values");
  return download(state_->context, state_->values, parameter_floats());
}
Tensor DeviceGpt::grads_to_host() const {
  MYRIAD_CHECK(state_->options.flat_gradients, "DeviceGpt::grads_to_host: built without flat gradients");
  return download(state_->context, state_->grads, parameter_floats());
}

const std::vector<nn::ParamUnit>& DeviceGpt::units() const { return state_->layout_model.units(); }

void DeviceGpt::set_unit_gradients_ready(std::function<void(int)> callback) {
  state_->unit_gradients_ready = std::move(callback);
}

void DeviceGpt::set_unit_gradient_store(UnitGradientStore* store) { state_->gradient_store = store; }
void DeviceGpt::set_unit_value_store(UnitValueStore* store) { state_->value_store = store; }

namespace {

// A device tensor viewing a DeviceBuffer's first `n` floats (the buffer keeps ownership).
Tensor flat_view(const DeviceGpt::State& s, const DeviceBuffer& buffer, std::int64_t n) {
  return view_device_floats(s.context, buffer.as<float>(), {n});
}

}  // namespace

Tensor DeviceGpt::gradients() {
  MYRIAD_CHECK(state_->options.flat_gradients, "DeviceGpt::gradients: built without flat gradients");
  return flat_view(*state_, state_->grads, parameter_floats());
}
Tensor DeviceGpt::values() {
  MYRIAD_CHECK(state_->options.flat_values, "DeviceGpt::values: built without flat values");
  return flat_view(*state_, state_->values, parameter_floats());
}
void DeviceGpt::values_changed() { state_->refresh_half_weights(); }

void DeviceGpt::zero_grads() {
  if (!state_->options.flat_gradients) return;  // the unit store zeroes what it hands out
  DeviceGuard guard(state_->context.device());
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(state_->grads.data(), 0, state_->grads.bytes(), state_->context.stream()));
}

namespace {

// ids / targets of a call: host i32 (rows, seq) with rows == batch, or 1..batch when `fewer_rows`.
void check_batch(const DeviceGpt::State& s, const Tensor& ids, const Tensor& targets, const char* what,
                 bool fewer_rows) {
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"ids", &ids}, {"targets", &targets}}) {
    const bool rows_ok = t->defined() && t->dim() == 2 &&
                         (fewer_rows ? t->size(0) >= 1 && t->size(0) <= s.B : t->size(0) == s.B);
    MYRIAD_CHECK(rows_ok && t->device().is_cpu() && t->dtype() == DType::i32 && t->size(1) == s.T,
                 "DeviceGpt::" << what << ": " << name << " must be host i32 [" << (fewer_rows ? "1.." : "") << s.B
                               << ", " << s.T << "], got " << (t->defined() ? t->describe() : "undefined"));
  }
  MYRIAD_CHECK(ids.size(0) == targets.size(0), "DeviceGpt::" << what << ": ids " << ids.describe() << " and targets "
                                                             << targets.describe() << " differ in rows");
}

// Every id in [0, V) and every target too or ignored, checked on the host: for a tensor-parallel
// shard (its kernels cannot tell a bad id from one another rank holds) and a pipeline stage (no
// rank sees both the embedding and the loss); a whole model's kernels report them (read_losses).
void check_vocabulary(const DeviceGpt::State& s, const Tensor& ids, const Tensor& targets) {
  const std::int32_t ignore = nn::GptModel::kIgnoreIndex;
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    const std::int32_t id = ids.data<std::int32_t>()[i], target = targets.data<std::int32_t>()[i];
    MYRIAD_CHECK(id >= 0 && id < s.V && (target == ignore || (target >= 0 && target < s.V)),
                 "DeviceGpt: token or target at flat position " << i << " is outside the vocabulary [0, " << s.V
                                                                << ")");
  }
}

// tp > 1: the ids and loss targets relative to this rank's vocabulary shard (see State).
// cudaMemcpyAsync from pageable memory has read the host vectors when it returns.
void upload_shard_batch(DeviceGpt::State& s, const Tensor& ids, const Tensor& targets) {
  const std::int64_t n = ids.numel();
  const std::int32_t ignore = nn::GptModel::kIgnoreIndex;
  std::vector<std::int32_t> shard_ids(static_cast<std::size_t>(n)), shard_targets(static_cast<std::size_t>(n));
  auto local = [&](std::int32_t global, std::int32_t elsewhere) {
    const std::int64_t column = static_cast<std::int64_t>(global) - s.vocab_start;
    return column >= 0 && column < s.Vr ? static_cast<std::int32_t>(column) : elsewhere;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t id = ids.data<std::int32_t>()[i], target = targets.data<std::int32_t>()[i];
    shard_ids[static_cast<std::size_t>(i)] = local(id, -1);
    shard_targets[static_cast<std::size_t>(i)] = target == ignore ? ignore : local(target, ignore);
  }
  cudaStream_t stream = s.context.stream();
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(s.shard_ids.data(), shard_ids.data(), shard_ids.size() * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, stream));
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(s.shard_targets.data(), shard_targets.data(),
                                    shard_targets.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream));
}

// The ids and targets of the active slot (checked on the host where no kernel can: see
// check_vocabulary).
void upload_batch(DeviceGpt::State& s, const Tensor& ids, const Tensor& targets) {
  DeviceGuard guard(s.context.device());
  cudaStream_t stream = s.context.stream();
  if (s.tensor_parallel() || !(s.first_stage && s.last_stage)) check_vocabulary(s, ids, targets);
  s.batch_targets = targets;
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(s.ids.data(), ids.raw_data(), ids.nbytes(), cudaMemcpyHostToDevice, stream));
  MYRIAD_CUDA_CHECK(
      cudaMemcpyAsync(s.targets.data(), targets.raw_data(), targets.nbytes(), cudaMemcpyHostToDevice, stream));
  if (s.tensor_parallel()) upload_shard_batch(s, ids, targets);
}

void require_whole_model(const DeviceGpt::State& s, const char* what) {
  MYRIAD_CHECK(s.first_stage && s.last_stage && s.chunk_blocks.size() == 1,
               "DeviceGpt::" << what << " needs a model holding every layer (this one is a pipeline stage: use "
                             << "forward_chunk / backward_chunk)");
}

// (rows <= batch, seq) host ids/targets padded to the batch: token 0 with ignored targets (no
// loss, no effect on the others).
std::pair<Tensor, Tensor> padded_batch(const DeviceGpt::State& s, const Tensor& ids, const Tensor& targets) {
  if (ids.size(0) == s.B) return {ids.contiguous(), targets.contiguous()};
  Tensor padded_ids = Tensor::zeros({s.B, s.T}, DType::i32);
  Tensor padded_targets = Tensor::full({s.B, s.T}, nn::GptModel::kIgnoreIndex, DType::i32);
  padded_ids.slice(0, 0, ids.size(0)).copy_from(ids);
  padded_targets.slice(0, 0, targets.size(0)).copy_from(targets);
  return {padded_ids, padded_targets};
}

}  // namespace

nn::LossSum DeviceGpt::forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale) {
  State& s = *state_;
  require_whole_model(s, "forward_backward");
  check_batch(s, ids, targets, "forward_backward", false);
  s.use_slot(0);
  const Tensor ids_c = ids.contiguous(), targets_c = targets.contiguous();
  upload_batch(s, ids_c, targets_c);
  return s.read_losses(targets_c, [&] {
    s.forward_chunk(0, true);
    s.backward_chunk(0, loss_scale);
  });
}

nn::LossSum DeviceGpt::forward_loss(const Tensor& ids, const Tensor& targets) {
  State& s = *state_;
  require_whole_model(s, "forward_loss");
  check_batch(s, ids, targets, "forward_loss", true);
  s.use_slot(0);
  const auto [padded_ids, padded_targets] = padded_batch(s, ids, targets);
  upload_batch(s, padded_ids, padded_targets);
  return s.read_losses(padded_targets, [&] { s.forward_chunk(0); });
}

int DeviceGpt::num_chunks() const { return static_cast<int>(state_->chunk_blocks.size()); }

void DeviceGpt::prepare_slots(int slots) {
  MYRIAD_CHECK(slots >= 1, "DeviceGpt::prepare_slots: " << slots << " slots");
  while (static_cast<int>(state_->parked.size()) < slots) state_->add_slot();
}

int DeviceGpt::slots() const { return static_cast<int>(state_->parked.size()); }

namespace {

Tensor slot_view(DeviceGpt::State& s, const DeviceBuffer& buffer) {
  return view_device_floats(s.context, buffer.as<float>(), {s.R, s.C});
}

void check_chunk(const DeviceGpt::State& s, int chunk, const char* what) {
  MYRIAD_CHECK(chunk >= 0 && chunk < static_cast<int>(s.chunk_blocks.size()),
               "DeviceGpt::" << what << ": chunk " << chunk << " of " << s.chunk_blocks.size());
}

}  // namespace

Tensor DeviceGpt::chunk_input(int chunk, int slot) {
  State& s = *state_;
  check_chunk(s, chunk, "chunk_input");
  s.use_slot(slot);
  return slot_view(s, s.residual[static_cast<std::size_t>(s.chunk_blocks[static_cast<std::size_t>(chunk)].first + chunk)]);
}

Tensor DeviceGpt::chunk_output(int chunk, int slot) {
  State& s = *state_;
  check_chunk(s, chunk, "chunk_output");
  s.use_slot(slot);
  return slot_view(s, s.residual[static_cast<std::size_t>(s.chunk_blocks[static_cast<std::size_t>(chunk)].second + chunk)]);
}

Tensor DeviceGpt::chunk_grad(int chunk, int slot) {
  State& s = *state_;
  check_chunk(s, chunk, "chunk_grad");
  s.use_slot(slot);
  return slot_view(s, s.chunk_grads[static_cast<std::size_t>(chunk)]);
}

nn::LossSum DeviceGpt::forward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets) {
  State& s = *state_;
  check_chunk(s, chunk, "forward_chunk");
  s.use_slot(slot);
  const bool first = s.chunk_is_first(chunk), last = s.chunk_is_last(chunk);
  if (first || last) {
    check_batch(s, ids, targets, "forward_chunk", true);
    const auto [padded_ids, padded_targets] = padded_batch(s, ids, targets);
    upload_batch(s, padded_ids, padded_targets);
  }
  if (!last) {
    s.forward_chunk(chunk);
    return {};
  }
  return s.read_losses(s.batch_targets, [&] { s.forward_chunk(chunk); });
}

void DeviceGpt::backward_chunk(int chunk, int slot, float loss_scale) {
  State& s = *state_;
  check_chunk(s, chunk, "backward_chunk");
  s.use_slot(slot);
  s.backward_chunk(chunk, loss_scale);
}

optim::OptimizerStepStats DeviceGpt::step(float lr, const optim::AdamWConfig& config, float unscale) {
  State& s = *state_;
  MYRIAD_CHECK(s.optimizer, "DeviceGpt::step: built without its optimizer (DeviceGptOptions::optimizer false)");
  const double sum_squares = s.optimizer->grad_sum_squares(s.grads.as<float>());
  const optim::OptimizerStepStats stats =
      s.optimizer->step(s.values.as<float>(), s.grads.as<float>(), lr, config, sum_squares, unscale);
  if (!stats.skipped) s.refresh_half_weights();
  return stats;
}

void DeviceGpt::load_optimizer_state(const Tensor& m, const Tensor& v, std::int64_t steps_taken) {
  MYRIAD_CHECK(state_->optimizer, "DeviceGpt::load_optimizer_state: built without its optimizer");
  state_->optimizer->load_state(m, v, steps_taken);
}

void DeviceGpt::optimizer_state_to_host(Tensor& m, Tensor& v) const {
  MYRIAD_CHECK(state_->optimizer, "DeviceGpt::optimizer_state_to_host: built without its optimizer");
  state_->optimizer->state_to_host(m, v);
}

}  // namespace myriad::cuda
