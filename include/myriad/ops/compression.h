// Compression codes with error feedback: the encode and decode of one segment of f32 values as
// sign, int8 or top-k bytes (used by distributed::CompressedSum for 1-bit Adam's momentum and
// int8 / top-k gradient compression). Ops: the CPU reference below, a device backend's kernels
// behind the same dispatch point (cuda: kernels/optim/compression.cu).
//
//   compress_encode(spec, x, error, code)    y = x + error; code = encode(y); error = y - decode(code)
//   compress_decode(spec, code, out, acc)    out = decode(code)   (acc: out += decode(code))
//
// Codes (a segment = what one call sees; blocks never span segments):
//   sign  blocks of 64: an f32 scale = mean |y| of the block (summed in float64, in index order)
//         and one bit per element (bit i % 8 of byte i / 8 set when y < 0); decodes to ±scale.
//         4 + ceil(b / 8) bytes per block of b.
//   int8  blocks of 256: an f32 scale = max |y| / 127 and q = clamp(nearbyint(y / scale), ±127)
//         as int8 (0 when the scale is 0); decodes to q * scale. 4 + b bytes per block of b.
//   topk  k = topk_count(ratio, n) = clamp(ceil(ratio n), 1, n) elements: the k largest |y|, ties
//         to the lower index, as k i32 indices in increasing order, then their k f32 values y;
//         the rest decode to 0. 8 k bytes.
// Every value is little-endian, unaligned within the code. The decoded values are exactly what
// encode subtracts for the error (error = y - decoded, rounded once), so a backend that follows
// these formulas gives the CPU's bytes (the CUDA kernels do: no fused multiply-adds).
// Tensors: x, error, out (n) contiguous f32; code (encoded_bytes(spec, n)) contiguous i8; one device;
// x and error must not be the same memory. Decoding a top-k code trusts its indices (the encoder's):
// the CPU rejects one outside [0, n), a device kernel skips it.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad {

enum class Compression { sign, int8, topk };
const char* compression_name(Compression kind);

struct CompressionSpec {
  Compression kind = Compression::sign;
  double topk_ratio = 0.01;  // topk: fraction of each segment's elements sent, in (0, 1]
};

constexpr std::int64_t kSignCompressionBlock = 64;
constexpr std::int64_t kInt8CompressionBlock = 256;

// Elements a top-k code of a segment of n keeps (0 for n = 0).
std::int64_t topk_count(double ratio, std::int64_t n);
// Bytes of the code of a segment of `elements` floats.
std::int64_t encoded_bytes(const CompressionSpec& spec, std::int64_t elements);

void compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code);      // (n) -> bytes
void compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate);  // bytes -> (n)

namespace cpu {
void compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code);
void compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate);
}  // namespace cpu

}  // namespace myriad
