// Tensor views, copies and conversions. Strided copies walk the destination in row-major order
// with an index counter; contiguous same-dtype copies are a single memcpy.
#include "myriad/core/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "myriad/core/fp8.h"
#include "myriad/core/half.h"

namespace myriad {

std::string shape_string(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t running = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = running;
    running *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

static void check_shape(const Shape& shape) {
  for (std::int64_t s : shape) MYRIAD_CHECK(s >= 0, "negative dimension in shape " << shape_string(shape));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  MYRIAD_CHECK(device.is_cpu(),
               "Tensor::empty on " << device.str() << ": device tensors are created by the CUDA backend's allocator");
  std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  return from_storage(Storage::allocate_host(bytes), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                            std::int64_t offset, DType dtype) {
  MYRIAD_CHECK(storage != nullptr, "Tensor::from_storage: null storage");
  MYRIAD_CHECK(shape.size() == strides.size(), "Tensor::from_storage: shape " << shape_string(shape) << " and strides "
                                                                              << shape_string(strides)
                                                                              << " differ in rank");
  check_shape(shape);
  MYRIAD_CHECK(offset >= 0, "Tensor::from_storage: negative offset " << offset);
  if (shape_numel(shape) > 0) {
    std::int64_t lowest = offset, highest = offset;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      std::int64_t reach = (shape[i] - 1) * strides[i];
      (reach < 0 ? lowest : highest) += reach;
    }
    std::int64_t capacity = static_cast<std::int64_t>(storage->bytes() / dtype_size(dtype));
    MYRIAD_CHECK(lowest >= 0 && highest < capacity,
                 "view " << shape_string(shape) << " strides " << shape_string(strides) << " offset " << offset
                         << " reaches elements [" << lowest << ", " << highest << "] outside storage of " << capacity
                         << " " << dtype_name(dtype) << " elements");
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset;
  t.dtype_ = dtype;
  return t;
}

int Tensor::normalize_dim(int dim) const {
  int rank = this->dim();
  int d = dim < 0 ? dim + rank : dim;
  MYRIAD_CHECK(d >= 0 && d < rank, "dimension " << dim << " out of range for tensor " << describe());
  return d;
}

std::int64_t Tensor::size(int dim) const { return shape_[normalize_dim(dim)]; }
std::int64_t Tensor::stride(int dim) const { return strides_[normalize_dim(dim)]; }

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  MYRIAD_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  MYRIAD_CHECK(is_contiguous(), "view " << shape_string(shape) << " of non-contiguous tensor " << describe()
                                        << "; use reshape() or contiguous()");
  Shape resolved = shape;
  int inferred = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      MYRIAD_CHECK(inferred < 0, "view " << shape_string(shape) << ": at most one dimension may be -1");
      inferred = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    MYRIAD_CHECK(known > 0 && numel() % known == 0,
                 "view " << shape_string(shape) << " incompatible with " << describe());
    resolved[inferred] = numel() / known;
  }
  MYRIAD_CHECK(shape_numel(resolved) == numel(), "view " << shape_string(shape) << " has " << shape_numel(resolved)
                                                         << " elements, tensor " << describe() << " has " << numel());
  return from_storage(storage_, resolved, contiguous_strides(resolved), offset_, dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::slice(int dim, std::int64_t start, std::int64_t end) const {
  int d = normalize_dim(dim);
  MYRIAD_CHECK(0 <= start && start <= end && end <= shape_[d],
               "slice [" << start << ", " << end << ") of dim " << d << " out of range for " << describe());
  Shape shape = shape_;
  shape[d] = end - start;
  return from_storage(storage_, shape, strides_, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::select(int dim, std::int64_t index) const {
  int d = normalize_dim(dim);
  MYRIAD_CHECK(0 <= index && index < shape_[d],
               "select index " << index << " of dim " << d << " out of range for " << describe());
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return from_storage(storage_, shape, strides, offset_ + index * strides_[d], dtype_);
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  std::vector<int> order(dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_dim(dim0)], order[normalize_dim(dim1)]);
  return permute(order);
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  MYRIAD_CHECK(static_cast<int>(order.size()) == dim(),
               "permute with " << order.size() << " dims for tensor " << describe());
  std::vector<bool> seen(dim(), false);
  Shape shape(dim());
  Strides strides(dim());
  for (int i = 0; i < dim(); ++i) {
    int source = normalize_dim(order[i]);
    MYRIAD_CHECK(!seen[source], "permute: dimension " << source << " repeated");
    seen[source] = true;
    shape[i] = shape_[source];
    strides[i] = strides_[source];
  }
  return from_storage(storage_, shape, strides, offset_, dtype_);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor copy = empty(shape_, dtype_, device());
  copy.copy_from(*this);
  return copy;
}

Tensor Tensor::to(DType dtype) const {
  Tensor copy = empty(shape_, dtype, device());
  copy.copy_from(*this);
  return copy;
}

namespace {

double load_element(const void* base, std::int64_t index, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(base)[index];
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::f16:
      return f16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::i32:
      return static_cast<const std::int32_t*>(base)[index];
    case DType::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[index]);
    case DType::u16:
      return static_cast<const std::uint16_t*>(base)[index];
    case DType::i8:
      return static_cast<const std::int8_t*>(base)[index];
    case DType::f64:
      return static_cast<const double*>(base)[index];
    case DType::f8e4m3:
    case DType::f8e5m2:
      return fp8_to_float(static_cast<const std::uint8_t*>(base)[index], fp8_format(dtype));
  }
  return 0.0;
}

void store_element(void* base, std::int64_t index, DType dtype, double value) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(base)[index] = static_cast<float>(value);
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(value));
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(base)[index] = float_to_f16(static_cast<float>(value));
      return;
    case DType::i32:
      static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(value);
      return;
    case DType::i64:
      static_cast<std::int64_t*>(base)[index] = static_cast<std::int64_t>(value);
      return;
    case DType::u16:
      static_cast<std::uint16_t*>(base)[index] = static_cast<std::uint16_t>(value);
      return;
    case DType::i8:
      static_cast<std::int8_t*>(base)[index] = static_cast<std::int8_t>(value);
      return;
    case DType::f64:
      static_cast<double*>(base)[index] = value;
      return;
    case DType::f8e4m3:
    case DType::f8e5m2:
      static_cast<std::uint8_t*>(base)[index] = float_to_fp8(static_cast<float>(value), fp8_format(dtype));
      return;
  }
}

// Calls fn(destination_offset, source_offset) for every element in row-major order.
template <typename Fn>
void for_each_pair(const Shape& shape, const Strides& dst_strides, const Strides& src_strides, Fn fn) {
  std::int64_t total = shape_numel(shape);
  if (total == 0) return;
  int rank = static_cast<int>(shape.size());
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t dst = 0, src = 0;
  for (std::int64_t n = 0; n < total; ++n) {
    fn(dst, src);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        dst += dst_strides[d];
        src += src_strides[d];
        break;
      }
      dst -= (shape[d] - 1) * dst_strides[d];
      src -= (shape[d] - 1) * src_strides[d];
      index[d] = 0;
    }
  }
}

}  // namespace

namespace {

// f32 <-> bf16 / f16 between contiguous tensors as one tight loop (the mixed-precision refreshes
// and GEMM operand copies: a GPT-2-sized buffer in milliseconds, not through a double per element
// as the general path below); false for any other pair of dtypes.
bool convert_contiguous(const Tensor& source, Tensor& dest) {
  const std::int64_t n = dest.numel();
  const DType from = source.dtype(), to = dest.dtype();
  const bool sixteen_from = from == DType::bf16 || from == DType::f16,
             sixteen_to = to == DType::bf16 || to == DType::f16;
  if (from == DType::f32 && sixteen_to) {
    const float* in = static_cast<const float*>(source.raw_data());
    auto* out = static_cast<std::uint16_t*>(dest.raw_data());
    if (to == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
      for (std::int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
    } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (std::int64_t i = 0; i < n; ++i) out[i] = float_to_f16(in[i]);
    }
    return true;
  }
  if (sixteen_from && to == DType::f32) {
    const auto* in = static_cast<const std::uint16_t*>(source.raw_data());
    float* out = static_cast<float*>(dest.raw_data());
    if (from == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
      for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
    } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (std::int64_t i = 0; i < n; ++i) out[i] = f16_to_float(in[i]);
    }
    return true;
  }
  return false;
}

}  // namespace

void Tensor::copy_from(const Tensor& source) {
  MYRIAD_CHECK(defined() && source.defined(), "copy_from with an undefined tensor");
  MYRIAD_CHECK(shape_ == source.shape_,
               "copy_from: destination " << describe() << " and source " << source.describe() << " differ in shape");
  MYRIAD_CHECK(device().is_cpu() && source.device().is_cpu(), "copy_from between " << source.device().str() << " and "
                                                                                   << device().str()
                                                                                   << " needs the CUDA backend's copy");
  if (dtype_ == source.dtype_ && is_contiguous() && source.is_contiguous()) {
    std::memmove(raw_data(), source.raw_data(), nbytes());
    return;
  }
  if (is_contiguous() && source.is_contiguous() && convert_contiguous(source, *this)) return;
  void* dst_base = raw_data();
  const void* src_base = source.raw_data();
  if (dtype_ == source.dtype_) {
    std::size_t width = dtype_size(dtype_);
    for_each_pair(shape_, strides_, source.strides_, [&](std::int64_t d, std::int64_t s) {
      std::memcpy(static_cast<char*>(dst_base) + d * width, static_cast<const char*>(src_base) + s * width, width);
    });
    return;
  }
  for_each_pair(shape_, strides_, source.strides_, [&](std::int64_t d, std::int64_t s) {
    store_element(dst_base, d, dtype_, load_element(src_base, s, source.dtype_));
  });
}

void Tensor::fill(double value) {
  MYRIAD_CHECK(device().is_cpu(), "fill of " << describe() << " needs the CUDA backend");
  void* base = raw_data();
  Strides zero_strides(strides_.size(), 0);
  if (dtype_ == DType::f32 && is_contiguous()) {
    std::fill_n(static_cast<float*>(base), numel(), static_cast<float>(value));
    return;
  }
  for_each_pair(shape_, strides_, zero_strides,
                [&](std::int64_t d, std::int64_t) { store_element(base, d, dtype_, value); });
}

std::int64_t Tensor::element_offset(const std::vector<std::int64_t>& index) const {
  MYRIAD_CHECK(static_cast<int>(index.size()) == dim(),
               "index of rank " << index.size() << " for tensor " << describe());
  std::int64_t off = 0;
  for (int i = 0; i < dim(); ++i) {
    MYRIAD_CHECK(index[i] >= 0 && index[i] < shape_[i],
                 "index " << shape_string(index) << " out of range for tensor " << describe());
    off += index[i] * strides_[i];
  }
  return off;
}

double Tensor::get(const std::vector<std::int64_t>& index) const {
  MYRIAD_CHECK(device().is_cpu(), "get on " << describe());
  return load_element(raw_data(), element_offset(index), dtype_);
}

void Tensor::set(const std::vector<std::int64_t>& index, double value) {
  MYRIAD_CHECK(device().is_cpu(), "set on " << describe());
  store_element(raw_data(), element_offset(index), dtype_, value);
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_string(shape_) + " " + device().str();
}

}  // namespace myriad
