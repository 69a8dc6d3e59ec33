// MetaBackend: counted allocations without memory (see meta_backend.h).
#include "myriad/ops/meta_backend.h"

#include <algorithm>

namespace myriad::ops {

MetaBackend::MetaBackend() = default;

MetaBackend::~MetaBackend() { *alive_ = false; }

Tensor MetaBackend::empty(const Shape& shape, DType dtype) {
  const std::int64_t bytes = shape_numel(shape) * static_cast<std::int64_t>(dtype_size(dtype));
  for (MetaUsage* usage : {&total_, &by_label_[label_]}) {
    usage->live_bytes += bytes;
    usage->peak_bytes = std::max(usage->peak_bytes, usage->live_bytes);
    ++usage->tensors;
  }
  std::weak_ptr<bool> alive = alive_;
  auto storage = Storage::wrap(
      nullptr, static_cast<std::size_t>(bytes), Device::meta(),
      [this, alive, label = label_, bytes](void*) {
        if (auto flag = alive.lock(); flag && *flag) release(label, bytes);
      },
      this);
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

void MetaBackend::release(const std::string& label, std::int64_t bytes) {
  for (MetaUsage* usage : {&total_, &by_label_[label]}) {
    usage->live_bytes -= bytes;
    --usage->tensors;
  }
}

Tensor MetaBackend::copy_from_host(const Tensor& host) { return empty(host.shape(), host.dtype()); }

Tensor MetaBackend::copy_to_host(const Tensor&) { no_values("copy_to_host"); }

void MetaBackend::no_values(const char* op) const {
  MYRIAD_THROW(op << ": meta tensors have a shape but no values (a dry run builds a layout and counts its "
                     "memory; it computes nothing)");
}

void MetaBackend::matmul_forward(const MatmulArgs&, const Tensor&, const Tensor&, Tensor&) {
  no_values("matmul_forward");
}
void MetaBackend::matmul_backward(const MatmulArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  no_values("matmul_backward");
}
void MetaBackend::layernorm_forward(const LayernormArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                    Tensor&) {
  no_values("layernorm_forward");
}
void MetaBackend::layernorm_backward(const LayernormArgs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, Tensor&, Tensor&, Tensor&) {
  no_values("layernorm_backward");
}
void MetaBackend::rmsnorm_forward(const RmsnormArgs&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  no_values("rmsnorm_forward");
}
void MetaBackend::rmsnorm_backward(const RmsnormArgs&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                   Tensor&, Tensor&) {
  no_values("rmsnorm_backward");
}
void MetaBackend::gelu_forward(const GeluArgs&, const Tensor&, Tensor&) { no_values("gelu_forward"); }
void MetaBackend::gelu_backward(const GeluArgs&, const Tensor&, const Tensor&, Tensor&) { no_values("gelu_backward"); }
void MetaBackend::swiglu_forward(const SwigluArgs&, const Tensor&, const Tensor&, Tensor&) {
  no_values("swiglu_forward");
}
void MetaBackend::swiglu_backward(const SwigluArgs&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) {
  no_values("swiglu_backward");
}

}  // namespace myriad::ops
