// Argument checks shared by every op's dispatch point.
//
// Each check throws myriad::Error naming the op, the argument and the offending shape / dtype /
// device, e.g. "layernorm_forward: weight has shape [5], expected [4] (C of input f32[2, 4] cpu)".
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "myriad/core/tensor.h"

namespace myriad::ops {

using NamedTensor = std::pair<const char*, const Tensor*>;

void check_defined(const char* op, const char* name, const Tensor& t);
void check_dtype(const char* op, const char* name, const Tensor& t, DType expected);
void check_rank(const char* op, const char* name, const Tensor& t, int expected_rank);
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& expected);
void check_contiguous(const char* op, const char* name, const Tensor& t);
// A contiguous f32 tensor of exactly `shape` (an output, a gradient, a parameter).
void check_f32_contiguous(const char* op, const char* name, const Tensor& t, const Shape& shape);
// A forward op's output that may be kept in a GEMM operand format: contiguous, exactly `shape`,
// f32 or bf16 / f16 (the op computes in f32 and rounds each value once, to nearest even).
void check_f32_or_16bit_output(const char* op, const char* name, const Tensor& t, const Shape& shape);
// Rows of channels: a contiguous f32 tensor of at least one dim with C = t.size(-1) >= 1; returns C.
std::int64_t check_f32_rows(const char* op, const char* name, const Tensor& t);
// The same rows in f32 or a 16-bit format (bf16 / f16: mixed precision's residual stream, read
// widened exactly); returns C.
std::int64_t check_float_rows(const char* op, const char* name, const Tensor& t);
// A 16-bit input and a 16-bit output of one op share their format (bf16 with bf16, f16 with f16).
void check_one_16bit_format(const char* op, const char* in_name, const Tensor& in, const char* out_name,
                            const Tensor& out);
// All defined tensors in `tensors` live on one device; returns it.
Device check_same_device(const char* op, std::initializer_list<NamedTensor> tensors);
[[noreturn]] void throw_unsupported_device(const char* op, const Device& device);

}  // namespace myriad::ops
