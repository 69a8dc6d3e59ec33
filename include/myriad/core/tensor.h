// Tensor — a typed, strided view of shared Storage.
//
// Invariants: shape and strides have the same rank; strides and offset are in elements (not
// bytes); every element a view can address lies inside its Storage (checked when views are
// made). Views (view, slice, select, transpose, permute) share storage and copy nothing;
// contiguous(), clone() and to() copy. A default-constructed Tensor is "undefined" and is used
// for optional arguments (e.g. a gradient nobody asked for).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "myriad/core/allocator.h"
#include "myriad/core/device.h"
#include "myriad/core/dtype.h"
#include "myriad/core/error.h"

namespace myriad {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

std::string shape_string(const Shape& shape);  // "[2, 3, 4]"
std::int64_t shape_numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);  // row-major

class Tensor {
 public:
  Tensor() = default;

  // New host or device memory, uninitialised / zero / filled.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // A view over existing storage; validates that the view stays inside it.
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                             std::int64_t offset, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size(int dim) const;  // negative dims count from the end
  std::int64_t stride(int dim) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  std::int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;

  // Pointer to the first element. data<T>() checks that T matches the dtype.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    MYRIAD_CHECK(dtype_ == DTypeOf<T>::value,
                 "tensor " << describe() << " accessed as " << dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(raw_data());
  }

  // Views (no copy).
  Tensor view(const Shape& shape) const;                              // contiguous tensors only; one dim may be -1
  Tensor reshape(const Shape& shape) const;                           // view when possible, otherwise a copy
  Tensor slice(int dim, std::int64_t start, std::int64_t end) const;  // [start, end)
  Tensor select(int dim, std::int64_t index) const;                   // drops `dim`
  Tensor transpose(int dim0, int dim1) const;
  Tensor permute(const std::vector<int>& order) const;

  // Copies.
  Tensor contiguous() const;             // *this when already contiguous
  Tensor clone() const;                  // always a fresh contiguous copy
  Tensor to(DType dtype) const;          // converting copy (f32 <-> bf16/f16 rounds to nearest even)
  void copy_from(const Tensor& source);  // same shape; converts dtype; any strides
  void fill(double value);
  void zero() { fill(0.0); }

  // Element access by index (slow; for tests and tools). Value converted through double.
  double get(const std::vector<std::int64_t>& index) const;
  void set(const std::vector<std::int64_t>& index, double value);

  std::string describe() const;  // "f32[2, 3] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_ = 0;
  DType dtype_ = DType::f32;

  int normalize_dim(int dim) const;
  std::int64_t element_offset(const std::vector<std::int64_t>& index) const;
};

}  // namespace myriad
