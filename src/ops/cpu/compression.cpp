// CPU compression codes with error feedback (ops/compression.h): the reference arithmetic, one
// pass per block in index order (sign's scale summed in float64 element by element). Serial and
// deterministic; the top-k selection is std::nth_element under the total order (|y| descending,
// index ascending), so the kept set does not depend on the algorithm. Compiled with
// -ffp-contract=off (src/CMakeLists.txt): each product is rounded before it is added, as the
// CUDA kernels round it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/compression.h"

namespace myriad::cpu {

namespace {

void put_float(std::byte* at, float value) { std::memcpy(at, &value, sizeof(float)); }
float get_float(const std::byte* at) {
  float value = 0.0f;
  std::memcpy(&value, at, sizeof(float));
  return value;
}

template <typename Block>
void for_each_block(std::int64_t n, std::int64_t block, Block&& visit) {
  for (std::int64_t begin = 0; begin < n; begin += block) visit(begin, std::min(block, n - begin));
}

// y (n) -> code; e[i] = y[i] - decoded[i] (e holds y on entry, may be y itself).
void encode_sign(const float* y, std::int64_t n, std::byte* code, float* e) {
  for_each_block(n, kSignCompressionBlock, [&](std::int64_t begin, std::int64_t b) {
    double mass = 0.0;
    for (std::int64_t i = 0; i < b; ++i) mass += std::fabs(y[begin + i]);
    const float scale = static_cast<float>(mass / static_cast<double>(b));
    put_float(code, scale);
    std::byte* bits = code + 4;
    std::memset(bits, 0, static_cast<std::size_t>((b + 7) / 8));
    for (std::int64_t i = 0; i < b; ++i) {
      const bool negative = y[begin + i] < 0.0f;
      if (negative) bits[i / 8] |= std::byte{static_cast<unsigned char>(1u << (i % 8))};
      e[begin + i] = y[begin + i] - (negative ? -scale : scale);
    }
    code += 4 + (b + 7) / 8;
  });
}

void encode_int8(const float* y, std::int64_t n, std::byte* code, float* e) {
  for_each_block(n, kInt8CompressionBlock, [&](std::int64_t begin, std::int64_t b) {
    float largest = 0.0f;
    for (std::int64_t i = 0; i < b; ++i) largest = std::max(largest, std::fabs(y[begin + i]));
    const float scale = largest / 127.0f;
    put_float(code, scale);
    auto* q = reinterpret_cast<std::int8_t*>(code + 4);
    for (std::int64_t i = 0; i < b; ++i) {
      const float level = scale > 0.0f ? std::nearbyint(y[begin + i] / scale) : 0.0f;
      q[i] = static_cast<std::int8_t>(std::clamp(level, -127.0f, 127.0f));
      e[begin + i] = y[begin + i] - static_cast<float>(q[i]) * scale;
    }
    code += 4 + b;
  });
}

void encode_topk(double ratio, const float* y, std::int64_t n, std::byte* code, float* e) {
  const std::int64_t k = topk_count(ratio, n);
  if (k == 0) return;
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto heavier = [&](std::int32_t a, std::int32_t b) {
    const float fa = std::fabs(y[a]), fb = std::fabs(y[b]);
    return fa > fb || (fa == fb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), heavier);
  order.resize(static_cast<std::size_t>(k));
  std::sort(order.begin(), order.end());
  std::vector<float> kept(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < k; ++j) kept[static_cast<std::size_t>(j)] = y[order[static_cast<std::size_t>(j)]];
  std::memcpy(code, order.data(), static_cast<std::size_t>(k) * 4);
  std::memcpy(code + 4 * k, kept.data(), static_cast<std::size_t>(k) * 4);
  // Unsent elements keep y - 0 = y; sent ones y - y.
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int32_t i = order[static_cast<std::size_t>(j)];
    e[i] = y[i] - kept[static_cast<std::size_t>(j)];
  }
}

}  // namespace

void compress_encode(const CompressionSpec& spec, const Tensor& x, Tensor& error, Tensor& code) {
  const std::int64_t n = x.numel();
  const float* in = x.data<float>();
  float* e = error.data<float>();
  for (std::int64_t i = 0; i < n; ++i) e[i] = in[i] + e[i];  // e holds y = x + e from here
  auto* bytes = static_cast<std::byte*>(code.raw_data());
  switch (spec.kind) {
    case Compression::sign:
      return encode_sign(e, n, bytes, e);
    case Compression::int8:
      return encode_int8(e, n, bytes, e);
    case Compression::topk:
      return encode_topk(spec.topk_ratio, e, n, bytes, e);
  }
}

void compress_decode(const CompressionSpec& spec, const Tensor& code, Tensor& out, bool accumulate) {
  const std::int64_t n = out.numel();
  float* decoded = out.data<float>();
  const auto* bytes = static_cast<const std::byte*>(code.raw_data());
  if (!accumulate) std::fill(decoded, decoded + n, 0.0f);
  switch (spec.kind) {
    case Compression::sign:
      for_each_block(n, kSignCompressionBlock, [&](std::int64_t begin, std::int64_t b) {
        const float scale = get_float(bytes);
        const std::byte* bits = bytes + 4;
        for (std::int64_t i = 0; i < b; ++i) {
          const bool negative = (bits[i / 8] & std::byte{static_cast<unsigned char>(1u << (i % 8))}) != std::byte{0};
          decoded[begin + i] += negative ? -scale : scale;
        }
        bytes += 4 + (b + 7) / 8;
      });
      return;
    case Compression::int8:
      for_each_block(n, kInt8CompressionBlock, [&](std::int64_t begin, std::int64_t b) {
        const float scale = get_float(bytes);
        const auto* q = reinterpret_cast<const std::int8_t*>(bytes + 4);
        for (std::int64_t i = 0; i < b; ++i) decoded[begin + i] += static_cast<float>(q[i]) * scale;
        bytes += 4 + b;
      });
      return;
    case Compression::topk: {
      const std::int64_t k = topk_count(spec.topk_ratio, n);
      for (std::int64_t j = 0; j < k; ++j) {
        std::int32_t index = 0;
        std::memcpy(&index, bytes + 4 * j, 4);
        MYRIAD_CHECK(index >= 0 && index < n,
                     "compress_decode: top-k code index " << index << " outside a segment of " << n);
        decoded[index] += get_float(bytes + 4 * (k + j));
      }
      return;
    }
  }
}

}  // namespace myriad::cpu
