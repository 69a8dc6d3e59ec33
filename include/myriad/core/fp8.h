// The two 8-bit float formats of FP8 training (OCP FP8, as Hopper's tensor cores read them) on the CPU.
//
// E4M3 (`f8e4m3`, forward operands: activations and weights): 4 exponent bits (bias 7), 3 mantissa
// bits, largest finite 448, smallest normal 2^-6, subnormals down to 2^-9; no infinities, one NaN
// code per sign (0x7f / 0xff).
// E5M2 (`f8e5m2`, gradients): 5 exponent bits (bias 15), 2 mantissa bits, largest finite 57344,
// smallest normal 2^-14, subnormals down to 2^-16; infinities and NaNs like IEEE half.
// float_to_fp8 rounds to nearest even and saturates: every finite magnitude above the largest
// finite value — and an infinity — becomes that value with its sign (CUDA's __NV_SATFINITE, the
// conversion FP8 training quantises with); NaN stays NaN. fp8_to_float is exact (every FP8
// value is a float). Codes are carried as raw uint8 bit patterns.
#pragma once

#include <cstdint>

#include "myriad/core/dtype.h"

namespace myriad {

struct Fp8Format {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max_finite;
  bool has_infinity;  // E5M2: exponent all ones is inf / NaN; E4M3: only S.1111.111 is NaN
};

inline constexpr Fp8Format kE4M3{4, 3, 7, 448.0f, false};
inline constexpr Fp8Format kE5M2{5, 2, 15, 57344.0f, true};

// The format of an FP8 dtype (f8e4m3 or f8e5m2); throws for any other dtype.
const Fp8Format& fp8_format(DType dtype);

std::uint8_t float_to_fp8(float value, const Fp8Format& format);
float fp8_to_float(std::uint8_t code, const Fp8Format& format);
// The FP8 value nearest to `value` (saturating), as a float: fp8_to_float(float_to_fp8(value)).
float round_to_fp8(float value, const Fp8Format& format);

}  // namespace myriad
