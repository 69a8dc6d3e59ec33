// DType — the element types a Tensor can hold, their sizes and names.
//
// Floating types: f32 (compute and master weights), bf16 and f16 (storage / mixed precision,
// converted on the CPU by core/half.h). Integer types: i32 and i64 (token ids, indices),
// u16 (compact token shards), i8 (quantised export). f64: float64 sums kept where the model
// computes (the MoE routing totals), not an operand of the compute ops. f8e4m3 and f8e5m2: the
// FP8 GEMM operands of training.precision fp8 (core/fp8.h), made by the fp8_quantize op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace myriad {

enum class DType : std::uint8_t { f32, bf16, f16, i32, i64, u16, i8, f64, f8e4m3, f8e5m2 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
DType parse_dtype(std::string_view name);  // inverse of dtype_name; throws naming the allowed set
bool is_floating(DType dtype);

// Compile-time mapping from C++ element type to DType, used by Tensor::data<T>() checks.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<std::uint16_t> {
  static constexpr DType value = DType::u16;
};
template <>
struct DTypeOf<std::int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};

}  // namespace myriad
