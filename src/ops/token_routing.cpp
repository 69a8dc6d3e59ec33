// Token routing dispatch points: validate dtypes / shapes / contiguity / one device, then pick
// the backend. Index values (source, slot) are checked by the backend: they live in the index
// tensors' memory.
#include "myriad/ops/token_routing.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

void check_f32_matrix(const char* op, const char* name, const Tensor& t) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_rank(op, name, t, 2);
  ops::check_contiguous(op, name, t);
}

void check_index(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  ops::check_dtype(op, name, t, DType::i32);
  ops::check_shape(op, name, t, shape);
  ops::check_contiguous(op, name, t);
}

// slot (N, K) and weight (N, K) or undefined; returns K.
std::int64_t check_slot_and_weight(const char* op, const Tensor& slot, const Tensor& weight) {
  ops::check_dtype(op, "slot", slot, DType::i32);
  ops::check_rank(op, "slot", slot, 2);
  ops::check_contiguous(op, "slot", slot);
  if (weight.defined()) {
    ops::check_dtype(op, "weight", weight, DType::f32);
    ops::check_shape(op, "weight", weight, slot.shape());
    ops::check_contiguous(op, "weight", weight);
  }
  return slot.size(1);
}

}  // namespace

void gather_rows(const Tensor& x, const Tensor& source, Tensor& out, const RowIndexArgs& args) {
  const char* op = "gather_rows";
  check_f32_matrix(op, "x", x);
  check_f32_matrix(op, "out", out);
  check_index(op, "source", source, {out.size(0)});
  ops::check_shape(op, "out", out, {out.size(0), x.size(1)});
  const std::initializer_list<ops::NamedTensor> tensors = {{"x", &x}, {"source", &source}, {"out", &out}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::gather_rows(x, source, out);
  ops::backend_of(op, tensors).gather_rows(x, source, out, args);
}

void combine_rows_forward(const Tensor& rows, const Tensor& slot, const Tensor& weight, Tensor& out,
                          const RowIndexArgs& args) {
  const char* op = "combine_rows_forward";
  check_f32_matrix(op, "rows", rows);
  check_slot_and_weight(op, slot, weight);
  check_f32_matrix(op, "out", out);
  ops::check_shape(op, "out", out, {slot.size(0), rows.size(1)});
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"rows", &rows}, {"slot", &slot}, {"weight", &weight}, {"out", &out}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::combine_rows_forward(rows, slot, weight, out);
  ops::backend_of(op, tensors).combine_rows_forward(rows, slot, weight, out, args);
}

void combine_rows_backward(const Tensor& rows, const Tensor& slot, const Tensor& weight, const Tensor& grad_out,
                           Tensor& grad_rows, Tensor& grad_weight, const RowIndexArgs& args) {
  const char* op = "combine_rows_backward";
  check_f32_matrix(op, "grad_rows", grad_rows);
  check_slot_and_weight(op, slot, weight);
  check_f32_matrix(op, "grad_out", grad_out);
  ops::check_shape(op, "grad_out", grad_out, {slot.size(0), grad_rows.size(1)});
  if (grad_weight.defined()) {
    ops::check_defined(op, "rows", rows);  // read for grad_weight only
    ops::check_dtype(op, "grad_weight", grad_weight, DType::f32);
    ops::check_shape(op, "grad_weight", grad_weight, slot.shape());
    ops::check_contiguous(op, "grad_weight", grad_weight);
  }
  if (rows.defined()) {
    check_f32_matrix(op, "rows", rows);
    ops::check_shape(op, "rows", rows, grad_rows.shape());
  }
  const std::initializer_list<ops::NamedTensor> tensors = {{"rows", &rows},           {"slot", &slot},
                                                           {"weight", &weight},       {"grad_out", &grad_out},
                                                           {"grad_rows", &grad_rows}, {"grad_weight", &grad_weight}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::combine_rows_backward(rows, slot, weight, grad_out, grad_rows, grad_weight);
  ops::backend_of(op, tensors).combine_rows_backward(rows, slot, weight, grad_out, grad_rows, grad_weight, args);
}

}  // namespace myriad
