// ParameterStore — every parameter of a model and its gradient, in two flat f32 buffers.
//
// Parameters are registered by name and shape, then allocate() lays them out back to back in
// one value buffer and one gradient buffer (each parameter's value/grad is a view), which makes
// zeroing, clipping, optimizer sweeps, checkpoints and bucketed gradient reduction simple loops.
// initialize(seed) fills each parameter from Philox with stream = FNV-1a hash of its name and
// element index = its row-major index within that parameter, so a shard of a parameter held by
// another layout is initialised to exactly the same values.
// Tensor-parallel shards: add_shard() registers the part of a global parameter that one rank holds
// (ranges of global indices along one dimension, held back to back); initialize() draws the whole
// parameter and keeps the ranges, so every layout starts from the values of the serial model.
// A parameter that is not `primary` is a copy whose gradient and values another rank also holds
// (tp-replicated norms and biases on tp ranks > 0, the tied embedding's copy on the last pipeline
// stage): it is left out of the global gradient norm and of checkpoints, so each counts once.
// Gradient contract: gradients accumulate (`+=`) until zero_grads().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

enum class ParamKind { weight, bias, norm, embedding };
enum class ParamInit { normal, zeros, ones };

const char* param_kind_name(ParamKind kind);

struct IndexRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

struct Parameter {
  std::string name;
  Shape shape;                           // what this rank holds
  Shape global_shape;                    // the whole parameter (== shape unless sharded)
  int shard_dim = -1;                    // dimension split over tensor-parallel ranks; -1 = whole
  std::vector<IndexRange> shard_ranges;  // global indices along shard_dim, held back to back
  bool primary = true;                   // false: a copy another rank also holds (see the file comment)
  bool expert = false;                   // an MoE expert's: expert-parallel ranks hold different experts
  bool tp_partial = false;  // its gradient is this tp rank's tokens' share: summed over tp before the update
  ParamKind kind = ParamKind::weight;
  ParamInit init = ParamInit::normal;
  float init_std = 0.0f;
  std::int64_t offset = 0;  // element offset in the flat buffers
  Tensor value;             // view into flat_values()
  Tensor grad;              // view into flat_grads()
  // 16-bit training: the value as the GEMMs' 16-bit operand (bind_operands), kept equal to
  // `value` by its owner (the optimizer's update or a refresh); undefined: converted per use.
  Tensor operand;
  // Weight-only INT8 (inference, GptModel::attach_int8): when defined, the forward reads this int8
  // weight (the parameter's shape) with its scales (ops/int8_linear.h: the shape with the last
  // dimension replaced by its groups; a 3-D expert weight has one matrix of scales per expert)
  // instead of `value`, which release_int8_values() then frees.
  Tensor int8_values, int8_scales;
  std::int64_t int8_group = 0;
};

class ParameterStore {
 public:
  // Registers a parameter; returns its index. Only before allocate().
  std::size_t add(const std::string& name, const Shape& shape, ParamKind kind, ParamInit init, float init_std = 0.0f);
  // Registers the ranges [r.begin, r.end) along `dim` of a parameter of `global_shape`.
  std::size_t add_shard(const std::string& name, const Shape& global_shape, int dim, std::vector<IndexRange> ranges,
                        ParamKind kind, ParamInit init, float init_std = 0.0f);
  void set_primary(std::size_t index, bool primary) { params_[index].primary = primary; }
  void set_expert(std::size_t index) { params_[index].expert = true; }
  void set_tp_partial(std::size_t index) { params_[index].tp_partial = true; }
  // Lays the parameters out in one value and one gradient buffer (zeros) at `placement` (the
  // host by default, or a device backend's memory).
  void allocate(const ops::Placement& placement = {});
  const ops::Placement& placement() const { return placement_; }
  // Fills the values (drawn on the host, by global index: the same for any split or placement).
  void initialize(std::uint64_t seed);
  void zero_grads();

  bool allocated() const { return allocated_; }
  std::size_t size() const { return params_.size(); }
  Parameter& operator[](std::size_t i) { return params_[i]; }
  const Parameter& operator[](std::size_t i) const { return params_[i]; }
  std::vector<Parameter>& all() { return params_; }
  const std::vector<Parameter>& all() const { return params_; }
  const Parameter& find(const std::string& name) const;  // throws naming the parameter
  Tensor& flat_values() { return values_; }
  Tensor& flat_grads() { return grads_; }

  // Sharded layouts (ZeRO 2/3): point the value and/or gradient views of every parameter inside
  // [begin, end) into `values` / `grads` (element 0 = flat element `begin`); an undefined tensor
  // leaves that side alone. unbind() makes those views undefined (any use is then an error).
  // drop_flat_values() / drop_flat_grads() free the full buffers (views into them go undefined).
  void rebind(std::int64_t begin, std::int64_t end, const Tensor& values, const Tensor& grads);
  void unbind(std::int64_t begin, std::int64_t end, bool values, bool grads);
  // Every parameter's `operand` <- a view of `operands` (bf16 / f16, numel() elements, the flat
  // layout); an undefined tensor unbinds them.
  void bind_operands(const Tensor& operands);
  void drop_flat_values();
  void drop_flat_grads();
  std::int64_t numel() const { return total_; }

  // Weight-only INT8 serving (inference only): frees the f32 value of every parameter that has
  // int8 values attached and `keep_f32(p)` false. The other values move into one new compact
  // buffer (their views point into it); the flat value and gradient buffers are freed, so
  // flat_values() / flat_grads() are undefined afterwards (as under ZeRO-3, any flat-layout use is
  // an error) and no parameter has a gradient. Whatever else holds views of the old buffers
  // (an optimizer's segments) must let go of them for the memory to return.
  template <typename KeepF32>
  void release_int8_values(KeepF32&& keep_f32) {
    std::vector<bool> keep;
    for (const Parameter& p : params_) keep.push_back(!p.int8_values.defined() || keep_f32(p));
    compact_values(keep);
  }
  // Bytes of parameter values resident: the flat (or compact) f32 buffer and the int8 weights
  // with their scales.
  std::int64_t value_bytes() const;

 private:
  void compact_values(const std::vector<bool>& keep);  // release_int8_values' work

  std::vector<Parameter> params_;
  Tensor values_;
  Tensor compact_values_;  // after release_int8_values: the f32 values kept, back to back
  Tensor grads_;
  ops::Placement placement_;
  std::int64_t total_ = 0;
  bool allocated_ = false;
};

std::uint64_t stable_name_hash(const std::string& name);  // FNV-1a 64

// Calls fn(box, local_piece) for each piece of the global parameter that `p` holds: `box` has one
// range per dimension of p.global_shape (the whole parameter, or one shard range along
// p.shard_dim), `local_piece` is the matching view of `local` (a tensor of p.shape).
template <typename Fn>
void for_each_held_box(const Parameter& p, const Tensor& local, Fn&& fn) {
  std::vector<IndexRange> box;
  for (std::int64_t extent : p.global_shape) box.push_back({0, extent});
  if (p.shard_dim < 0) {
    fn(box, local);
    return;
  }
  std::int64_t at = 0;
  for (const IndexRange& r : p.shard_ranges) {
    box[static_cast<std::size_t>(p.shard_dim)] = r;
    fn(box, local.slice(p.shard_dim, at, at + r.size()));
    at += r.size();
  }
}

// Calls fn(global_piece, local_piece): views of `global` (the whole parameter, p.global_shape)
// and of `local` (p.shape) that hold the same elements.
template <typename Fn>
void for_each_shard_piece(const Parameter& p, const Tensor& global, const Tensor& local, Fn&& fn) {
  for_each_held_box(p, local, [&](const std::vector<IndexRange>& box, const Tensor& piece) {
    fn(p.shard_dim < 0 ? global : global.slice(p.shard_dim, box[p.shard_dim].begin, box[p.shard_dim].end), piece);
  });
}

// The view of parameter `p` inside a flat buffer laid out like its store.
inline Tensor parameter_view(const Tensor& flat, const Parameter& p) {
  return Tensor::from_storage(flat.storage(), p.shape, contiguous_strides(p.shape), flat.offset() + p.offset,
                              DType::f32);
}

}  // namespace myriad::nn
