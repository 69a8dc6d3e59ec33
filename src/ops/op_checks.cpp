// Shared op argument checks; messages name op, argument, shapes, dtypes and devices.
#include "myriad/ops/op_checks.h"

namespace myriad::ops {

void check_defined(const char* op, const char* name, const Tensor& t) {
  MYRIAD_CHECK(t.defined(), op << ": argument '" << name << "' is undefined");
}

void check_dtype(const char* op, const char* name, const Tensor& t, DType expected) {
  check_defined(op, name, t);
  MYRIAD_CHECK(t.dtype() == expected, op << ": '" << name << "' has dtype " << dtype_name(t.dtype()) << ", expected "
                                         << dtype_name(expected) << " (" << t.describe() << ")");
}

void check_rank(const char* op, const char* name, const Tensor& t, int expected_rank) {
  check_defined(op, name, t);
  MYRIAD_CHECK(t.dim() == expected_rank, op << ": '" << name << "' has shape " << shape_string(t.shape())
                                            << ", expected " << expected_rank << " dimensions");
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected) {
  check_defined(op, name, t);
  MYRIAD_CHECK(t.shape() == expected, op << ": '" << name << "' has shape " << shape_string(t.shape()) << ", expected "
                                         << shape_string(expected));
}

void check_contiguous(const char* op, const char* name, const Tensor& t) {
  check_defined(op, name, t);
  MYRIAD_CHECK(t.is_contiguous(), op << ": '" << name << "' must be contiguous, has shape " << shape_string(t.shape())
                                     << " strides " << shape_string(t.strides()));
}

void check_f32_contiguous(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  check_dtype(op, name, t, DType::f32);
  check_shape(op, name, t, shape);
  check_contiguous(op, name, t);
}

void check_f32_or_16bit_output(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  MYRIAD_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16,
               op << ": '" << name << "' " << t.describe() << " must be f32, bf16 or f16");
  check_shape(op, name, t, shape);
  check_contiguous(op, name, t);
}

std::int64_t check_f32_rows(const char* op, const char* name, const Tensor& t) {
  check_dtype(op, name, t, DType::f32);
  MYRIAD_CHECK(t.dim() >= 1 && t.size(-1) >= 1, op << ": '" << name << "' has shape " << shape_string(t.shape())
                                                   << ", expected (N, C) or (..., C) with C >= 1");
  check_contiguous(op, name, t);
  return t.size(-1);
}

std::int64_t check_float_rows(const char* op, const char* name, const Tensor& t) {
  MYRIAD_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16,
               op << ": '" << name << "' " << t.describe() << " must be f32, bf16 or f16");
  MYRIAD_CHECK(t.dim() >= 1 && t.size(-1) >= 1, op << ": '" << name << "' has shape " << shape_string(t.shape())
                                                   << ", expected (N, C) or (..., C) with C >= 1");
  check_contiguous(op, name, t);
  return t.size(-1);
}

void check_one_16bit_format(const char* op, const char* in_name, const Tensor& in, const char* out_name,
                            const Tensor& out) {
  MYRIAD_CHECK(in.dtype() == DType::f32 || out.dtype() == DType::f32 || in.dtype() == out.dtype(),
               op << ": '" << in_name << "' " << in.describe() << " and '" << out_name << "' " << out.describe()
                  << " are two different 16-bit formats (one of them must be f32, or both the same format)");
}

Device check_same_device(const char* op, std::initializer_list<NamedTensor> tensors) {
  const char* first_name = nullptr;
  Device device;
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr || !tensor->defined()) continue;
    if (first_name == nullptr) {
      first_name = name;
      device = tensor->device();
      continue;
    }
    MYRIAD_CHECK(tensor->device() == device, op << ": '" << name << "' is on " << tensor->device().str() << " but '"
                                                << first_name << "' is on " << device.str());
  }
  return device;
}

void throw_unsupported_device(const char* op, const Device& device) {
  MYRIAD_THROW(op << ": no implementation for device " << device.str()
                  << " (the CUDA backend provides device ops; this build or op has none)");
}

}  // namespace myriad::ops
