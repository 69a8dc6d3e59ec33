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
  // `t` placed here: a host tensor made contiguous (host placement) or copied to the backend; a
  // tensor of this backend as it is.
  Tensor from_host(const Tensor& t) const {
    if (!t.defined() || (!on_host() && t.storage()->context() == backend)) return t;
    return on_host() ? t.contiguous() : backend->copy_from_host(t);
  }
  // A contiguous host tensor with `t`'s values: a host tensor made contiguous, or a copy of a
  // (contiguous) device tensor, after the work queued before.
  Tensor to_host(const Tensor& t) const {
    if (!t.defined() || t.device().is_cpu()) return t.defined() ? t.contiguous() : t;
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
