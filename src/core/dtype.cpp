// DType sizes and names.
#include "myriad/core/dtype.h"

#include "myriad/core/error.h"

namespace myriad {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u16:
      return 2;
    case DType::i8:
    case DType::f8e4m3:
    case DType::f8e5m2:
      return 1;
    case DType::f64:
      return 8;
  }
  MYRIAD_THROW("dtype_size: invalid DType value " << static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u16:
      return "u16";
    case DType::i8:
      return "i8";
    case DType::f64:
      return "f64";
    case DType::f8e4m3:
      return "f8e4m3";
    case DType::f8e5m2:
      return "f8e5m2";
  }
  MYRIAD_THROW("dtype_name: invalid DType value " << static_cast<int>(dtype));
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16, DType::i8, DType::f64,
                  DType::f8e4m3, DType::f8e5m2}) {
    if (dtype_name(d) == name) return d;
  }
  MYRIAD_THROW("unknown dtype '" << name << "'; allowed: f32, bf16, f16, i32, i64, u16, i8, f64, f8e4m3, f8e5m2");
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f8e4m3 ||
         dtype == DType::f8e5m2;
}

}  // namespace myriad
