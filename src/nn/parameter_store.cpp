// ParameterStore: registration, flat layout, Philox initialisation by name and index.
#include "myriad/nn/parameter_store.h"

#include <algorithm>
#include <cstring>

#include "myriad/core/philox.h"
#include "myriad/ops/elementwise.h"

namespace myriad::nn {

const char* param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::weight:
      return "weight";
    case ParamKind::bias:
      return "bias";
    case ParamKind::norm:
      return "norm";
    case ParamKind::embedding:
      return "embedding";
  }
  return "?";
}

std::uint64_t stable_name_hash(const std::string& name) {
  std::uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::size_t ParameterStore::add(const std::string& name, const Shape& shape, ParamKind kind, ParamInit init,
                                float init_std) {
  MYRIAD_CHECK(!allocated(), "parameter '" << name << "' registered after allocate()");
  for (const Parameter& p : params_) MYRIAD_CHECK(p.name != name, "parameter '" << name << "' registered twice");
  Parameter p;
  p.name = name;
  p.shape = shape;
  p.global_shape = shape;
  p.kind = kind;
  p.init = init;
  p.init_std = init_std;
  p.offset = total_;
  // Keep every parameter 16-element (64-byte) aligned inside the flat buffers.
  total_ += (shape_numel(shape) + 15) / 16 * 16;
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

std::size_t ParameterStore::add_shard(const std::string& name, const Shape& global_shape, int dim,
                                      std::vector<IndexRange> ranges, ParamKind kind, ParamInit init, float init_std) {
  MYRIAD_CHECK(dim >= 0 && dim < static_cast<int>(global_shape.size()),
               "parameter '" << name << "': shard dimension " << dim << " is outside its " << global_shape.size()
                             << " dimensions");
  Shape local = global_shape;
  local[static_cast<std::size_t>(dim)] = 0;
  for (const IndexRange& r : ranges) {
    MYRIAD_CHECK(r.begin >= 0 && r.begin < r.end && r.end <= global_shape[static_cast<std::size_t>(dim)],
                 "parameter '" << name << "': shard range [" << r.begin << ", " << r.end << ") is outside [0, "
                               << global_shape[static_cast<std::size_t>(dim)] << ")");
    local[static_cast<std::size_t>(dim)] += r.size();
  }
  const std::size_t index = add(name, local, kind, init, init_std);
  Parameter& p = params_[index];
  p.global_shape = global_shape;
  if (local != global_shape) {
    p.shard_dim = dim;
    p.shard_ranges = std::move(ranges);
  }
  return index;
}

void ParameterStore::allocate(const ops::Placement& placement) {
  MYRIAD_CHECK(!allocated(), "ParameterStore::allocate called twice");
  placement_ = placement;
  values_ = placement.zeros({total_});
  grads_ = placement.zeros({total_});
  allocated_ = true;
  for (Parameter& p : params_) {
    p.value = Tensor::from_storage(values_.storage(), p.shape, contiguous_strides(p.shape), p.offset, DType::f32);
    p.grad = Tensor::from_storage(grads_.storage(), p.shape, contiguous_strides(p.shape), p.offset, DType::f32);
  }
}

void ParameterStore::initialize(std::uint64_t seed) {
  MYRIAD_CHECK(allocated(), "ParameterStore::initialize before allocate()");
  // Values are drawn on the host (Philox by global index) and then placed, so a device model
  // starts from exactly the host model's values.
  Tensor host = placement_.on_host() ? values_ : Tensor::zeros({total_});
  for (Parameter& p : params_) {
    Tensor value = parameter_view(host, p);
    switch (p.init) {
      case ParamInit::zeros:
        value.fill(0.0);
        break;
      case ParamInit::ones:
        value.fill(1.0);
        break;
      case ParamInit::normal:
        if (p.shard_dim < 0) {
          fill_normal(value, 0.0f, p.init_std, seed, stable_name_hash(p.name));
        } else {  // draw the whole parameter, keep this rank's ranges (split-invariant)
          Tensor whole = Tensor::empty(p.global_shape);
          fill_normal(whole, 0.0f, p.init_std, seed, stable_name_hash(p.name));
          for_each_shard_piece(p, whole, value, [](const Tensor& g, Tensor l) { l.copy_from(g); });
        }
        break;
    }
  }
  if (!placement_.on_host()) copy(placement_.from_host(host), values_);
}

void ParameterStore::zero_grads() {
  if (grads_.defined()) zero(grads_);
}

void ParameterStore::rebind(std::int64_t begin, std::int64_t end, const Tensor& values, const Tensor& grads) {
  for (Parameter& p : params_) {
    if (p.offset < begin || p.offset >= end) continue;
    const std::int64_t local = p.offset - begin;
    for (const Tensor* buffer : {&values, &grads}) {
      if (!buffer->defined()) continue;
      MYRIAD_CHECK(local + shape_numel(p.shape) <= buffer->numel(),
                   "ParameterStore::rebind: parameter '" << p.name << "' does not fit the " << buffer->numel()
                                                         << "-element buffer of range [" << begin << ", " << end
                                                         << ")");
      Tensor view = Tensor::from_storage(buffer->storage(), p.shape, contiguous_strides(p.shape),
                                         buffer->offset() + local, DType::f32);
      (buffer == &values ? p.value : p.grad) = view;
    }
  }
}

void ParameterStore::bind_operands(const Tensor& operands) {
  MYRIAD_CHECK(!operands.defined() || operands.numel() == total_,
               "ParameterStore::bind_operands: " << operands.numel() << " operands for " << total_ << " elements");
  for (Parameter& p : params_) {
    p.operand = operands.defined() ? Tensor::from_storage(operands.storage(), p.shape, contiguous_strides(p.shape),
                                                          operands.offset() + p.offset, operands.dtype())
                                   : Tensor();
  }
}

void ParameterStore::unbind(std::int64_t begin, std::int64_t end, bool values, bool grads) {
  for (Parameter& p : params_) {
    if (p.offset < begin || p.offset >= end) continue;
    if (values) p.value = Tensor();
    if (grads) p.grad = Tensor();
  }
}

void ParameterStore::drop_flat_values() {
  values_ = Tensor();
  for (Parameter& p : params_) p.value = Tensor();
}

void ParameterStore::drop_flat_grads() {
  grads_ = Tensor();
  for (Parameter& p : params_) p.grad = Tensor();
}

void ParameterStore::compact_values(const std::vector<bool>& keep) {
  MYRIAD_CHECK(allocated() && values_.defined(),
               "ParameterStore::release_int8_values: the flat values are not resident (sharded or released)");
  std::int64_t total = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (keep[i]) total += (shape_numel(params_[i].shape) + 15) / 16 * 16;
  }
  Tensor compact = placement_.empty({std::max<std::int64_t>(total, 1)});
  std::int64_t at = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    p.grad = Tensor();
    if (!keep[i]) {
      p.value = Tensor();
      continue;
    }
    Tensor view = Tensor::from_storage(compact.storage(), p.shape, contiguous_strides(p.shape), at, DType::f32);
    copy(p.value, view);
    p.value = view;
    at += (shape_numel(p.shape) + 15) / 16 * 16;
  }
  values_ = Tensor();
  grads_ = Tensor();
  compact_values_ = compact;
}

std::int64_t ParameterStore::value_bytes() const {
  std::int64_t bytes = 0;
  for (const Tensor* t : {&values_, &compact_values_}) {
    if (t->defined()) bytes += static_cast<std::int64_t>(t->nbytes());
  }
  for (const Parameter& p : params_) {
    if (p.int8_values.defined()) bytes += static_cast<std::int64_t>(p.int8_values.nbytes() + p.int8_scales.nbytes());
  }
  return bytes;
}

const Parameter& ParameterStore::find(const std::string& name) const {
  for (const Parameter& p : params_) {
    if (p.name == name) return p;
  }
  MYRIAD_THROW("no parameter named '" << name << "'");
}

}  // namespace myriad::nn
