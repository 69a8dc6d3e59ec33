// ops::Placement — where a model's tensors live: the host (no backend) or the device of one
// ops::Backend. The model is written once over it: every buffer it allocates comes from
// empty()/zeros(), host inputs (token ids, targets) enter through from_host(), and the few values
// the host needs (the loss sum, logits for sampling) leave through to_host(). On the host these
// are the plain host operations (from_host / to_host return their argument).
#pragma once

#include "myriad/ops/backend.h"

namespace myriad::ops {

struct Placement {
  Backend* backend = nullptr;  // null: the host; else outlives every tensor made here

  bool on_host() const { return backend == nullptr; }
  Device device() const { return on_host() ? Device::cpu() : backend->device(); }
  Tensor empty(const Shape& shape, DType dtype = DType::f32) const {
    return on_host() ? Tensor::empty(shape, dtype) : backend->empty(shape, dtype);
  }
  Tensor zeros(const Shape& shape, DType dtype = DType::f32) const {
    if (on_host()) return Tensor::zeros(shape, dtype);
    Tensor t = backend->empty(shape, dtype);
    backend->zero(t);
    return t;
  }
  // `t` placed here: itself when it already is (host tensor, host placement; or this backend's),
  // else a copy of the host tensor.
  Tensor from_host(const Tensor& t) const {
    if (!t.defined() || on_host() || t.storage()->context() == backend) return t;
    return backend->copy_from_host(t);
  }
  // A host tensor with `t`'s values: itself on the host, else a copy (waits for queued work).
  Tensor to_host(const Tensor& t) const {
    if (!t.defined() || t.device().is_cpu()) return t;
    MYRIAD_CHECK(t.is_contiguous(), "Placement::to_host: " << t.describe() << " must be contiguous");
    return backend->copy_to_host(t);
  }
};

// Where `t` lives: the host, or the backend that made its memory (throws naming `what` for
// device memory that no backend made).
inline Placement placement_of(const Tensor& t, const char* what) {
  if (!t.defined() || t.device().is_cpu()) return {};
  return Placement{&backend_of(what, {{"tensor", &t}})};
}

}  // namespace myriad::ops
