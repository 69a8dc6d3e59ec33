// Compression dispatch point (ops/compression.h): the code sizes, argument checks, then the
// backend of the tensors' device.
#include "myriad/ops/compression.h"

#include <algorithm>
#include <cmath>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

void check_spec(const char* op, const CompressionSpec& spec) {
  MYRIAD_CHECK(spec.kind != Compression::topk || (spec.topk_ratio > 0.0 && spec.topk_ratio <= 1.0),
               op << ": top-k ratio " << spec.topk_ratio << " outside (0, 1] (training.topk_ratio)");
}

void check_code(const char* op, const CompressionSpec& spec, const Tensor& code, std::int64_t n) {
  ops::check_dtype(op, "code", code, DType::i8);
  ops::check_contiguous(op, "code", code);
  MYRIAD_CHECK(code.numel() == encoded_bytes(spec, n), op << ": a " << compression_name(spec.kind) << " code of " << n
                                                          << " elements has " << encoded_bytes(spec, n)
                                                          << " bytes, got " << code.numel());
}

}  // namespace

const char* compression_name(Compression kind) {
  switch (kind) {
    case Compression::sign:
      return "sign";
    case Compression::int8:
      return "int8";
    case Compression::topk:
      return "topk";
  }
  return "?";
}

std::int64_t topk_count(double ratio, std::int64_t n) {
  if (n == 0) return 0;
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(ratio * static_cast<double>(n))), 1, n);
}

std::int64_t encoded_bytes(const CompressionSpec& spec, std::int64_t elements) {
  switch (spec.kind) {
    case Compression::sign: {
      const std::int64_t full = elements / kSignCompressionBlock, rest = elements % kSignCompressionBlock;
      return full * (4 + kSignCompressionBlock / 8) + (rest > 0 ? 4 + (rest + 7) / 8 : 0);
    }
    case Compression::int8: {
      const std::int64_t blocks = (elements + kInt8CompressionBlock - 1) / kInt8CompressionBlock;
      return 4 * blocks + elements;
    }
    case Compression::topk:
      return 8 * topk_count(spec.topk_ratio, elements);
  }
  return 0;
}

void compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code) {
  const char* op = "compress_encode";
  check_spec(op, spec);
  ops::check_defined(op, "x", x);
  ops::check_f32_contiguous(op, "x", x, x.shape());
  ops::check_f32_contiguous(op, "error", error, x.shape());
  check_code(op, spec, code, x.numel());
  MYRIAD_CHECK(x.numel() == 0 || x.raw_data() != error.raw_data(), op << ": x and error are the same memory");
  const std::initializer_list<ops::NamedTensor> tensors = {{"x", &x}, {"error", &error}, {"code", &code}};
  if (ops::check_same_device(op, tensors).is_cpu()) return cpu::compress_encode(spec, x, error, code);
  ops::backend_of(op, tensors).compress_encode(spec, x, error, code);
}

void compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate) {
  const char* op = "compress_decode";
  check_spec(op, spec);
  ops::check_defined(op, "out", out);
  ops::check_f32_contiguous(op, "out", out, out.shape());
  check_code(op, spec, code, out.numel());
  const std::initializer_list<ops::NamedTensor> tensors = {{"code", &code}, {"out", &out}};
  if (ops::check_same_device(op, tensors).is_cpu()) return cpu::compress_decode(spec, code, out, accumulate);
  ops::backend_of(op, tensors).compress_decode(spec, code, out, accumulate);
}

}  // namespace myriad
