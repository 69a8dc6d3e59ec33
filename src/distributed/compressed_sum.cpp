// CompressedSum: the sign / int8 / top-k codes and the two-phase exchange with error feedback
// (see compressed_sum.h).
#include "myriad/distributed/compressed_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "myriad/core/error.h"

namespace myriad::distributed {

namespace {
constexpr std::int64_t kSignBlock = 64;
constexpr std::int64_t kInt8Block = 256;

std::int64_t topk_count(double ratio, std::int64_t n) {
  if (n == 0) return 0;
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(ratio * static_cast<double>(n))), 1, n);
}

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

std::int64_t encoded_bytes(const CompressionSpec& spec, std::int64_t elements) {
  std::int64_t bytes = 0;
  switch (spec.kind) {
    case Compression::sign:
      for_each_block(elements, kSignBlock, [&](std::int64_t, std::int64_t b) { bytes += 4 + (b + 7) / 8; });
      return bytes;
    case Compression::int8:
      for_each_block(elements, kInt8Block, [&](std::int64_t, std::int64_t b) { bytes += 4 + b; });
      return bytes;
    case Compression::topk:
      return 8 * topk_count(spec.topk_ratio, elements);
  }
  return 0;
}

void encode(const CompressionSpec& spec, const float* y, std::int64_t n, std::byte* code, float* decoded) {
  switch (spec.kind) {
    case Compression::sign:
      for_each_block(n, kSignBlock, [&](std::int64_t begin, std::int64_t b) {
        double mass = 0.0;
        for (std::int64_t i = 0; i < b; ++i) mass += std::fabs(y[begin + i]);
        const float scale = static_cast<float>(mass / static_cast<double>(b));
        put_float(code, scale);
        std::byte* bits = code + 4;
        std::memset(bits, 0, static_cast<std::size_t>((b + 7) / 8));
        for (std::int64_t i = 0; i < b; ++i) {
          const bool negative = y[begin + i] < 0.0f;
          if (negative) bits[i / 8] |= std::byte{static_cast<unsigned char>(1u << (i % 8))};
          decoded[begin + i] = negative ? -scale : scale;
        }
        code += 4 + (b + 7) / 8;
      });
      return;
    case Compression::int8:
      for_each_block(n, kInt8Block, [&](std::int64_t begin, std::int64_t b) {
        float largest = 0.0f;
        for (std::int64_t i = 0; i < b; ++i) largest = std::max(largest, std::fabs(y[begin + i]));
        const float scale = largest / 127.0f;
        put_float(code, scale);
        auto* q = reinterpret_cast<std::int8_t*>(code + 4);
        for (std::int64_t i = 0; i < b; ++i) {
          const float level = scale > 0.0f ? std::nearbyint(y[begin + i] / scale) : 0.0f;
          q[i] = static_cast<std::int8_t>(std::clamp(level, -127.0f, 127.0f));
          decoded[begin + i] = static_cast<float>(q[i]) * scale;
        }
        code += 4 + b;
      });
      return;
    case Compression::topk: {
      const std::int64_t k = topk_count(spec.topk_ratio, n);
      std::vector<std::int32_t> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      auto heavier = [&](std::int32_t a, std::int32_t b) {
        const float fa = std::fabs(y[a]), fb = std::fabs(y[b]);
        return fa > fb || (fa == fb && a < b);
      };
      std::nth_element(order.begin(), order.begin() + k - (k > 0 ? 1 : 0), order.end(), heavier);
      order.resize(static_cast<std::size_t>(k));
      std::sort(order.begin(), order.end());
      std::vector<float> kept(static_cast<std::size_t>(k));
      for (std::int64_t j = 0; j < k; ++j) kept[static_cast<std::size_t>(j)] = y[order[static_cast<std::size_t>(j)]];
      std::memcpy(code, order.data(), static_cast<std::size_t>(k) * 4);
      std::memcpy(code + 4 * k, kept.data(), static_cast<std::size_t>(k) * 4);
      std::fill(decoded, decoded + n, 0.0f);
      for (std::int64_t j = 0; j < k; ++j)
        decoded[order[static_cast<std::size_t>(j)]] = kept[static_cast<std::size_t>(j)];
      return;
    }
  }
}

void decode(const CompressionSpec& spec, const std::byte* code, std::int64_t n, float* decoded, bool accumulate) {
  if (!accumulate) std::fill(decoded, decoded + n, 0.0f);
  switch (spec.kind) {
    case Compression::sign:
      for_each_block(n, kSignBlock, [&](std::int64_t begin, std::int64_t b) {
        const float scale = get_float(code);
        const std::byte* bits = code + 4;
        for (std::int64_t i = 0; i < b; ++i) {
          const bool negative = (bits[i / 8] & std::byte{static_cast<unsigned char>(1u << (i % 8))}) != std::byte{0};
          decoded[begin + i] += negative ? -scale : scale;
        }
        code += 4 + (b + 7) / 8;
      });
      return;
    case Compression::int8:
      for_each_block(n, kInt8Block, [&](std::int64_t begin, std::int64_t b) {
        const float scale = get_float(code);
        const auto* q = reinterpret_cast<const std::int8_t*>(code + 4);
        for (std::int64_t i = 0; i < b; ++i) decoded[begin + i] += static_cast<float>(q[i]) * scale;
        code += 4 + b;
      });
      return;
    case Compression::topk: {
      const std::int64_t k = topk_count(spec.topk_ratio, n);
      for (std::int64_t j = 0; j < k; ++j) {
        std::int32_t index = 0;
        std::memcpy(&index, code + 4 * j, 4);
        MYRIAD_CHECK(index >= 0 && index < n, "top-k code: index " << index << " outside a segment of " << n);
        decoded[index] += get_float(code + 4 * (k + j));
      }
      return;
    }
  }
}

CompressedSum::CompressedSum(Communicator& group, std::int64_t elements, CompressionSpec spec)
    : group_(group), n_(elements), spec_(spec) {
  MYRIAD_CHECK(elements >= 0, "CompressedSum: negative element count " << elements);
  MYRIAD_CHECK(spec.kind != Compression::topk || (spec.topk_ratio > 0.0 && spec.topk_ratio <= 1.0),
               "top-k compression: ratio " << spec.topk_ratio << " outside (0, 1]");
  const int ranks = group.size();
  for (int p = 0; p < ranks; ++p) chunk_bytes_.push_back(encoded_bytes(spec, chunk_range(n_, ranks, p).size()));
  worker_error_ = Tensor::zeros({n_});
  server_error_ = Tensor::zeros({chunk_range(n_, ranks, group.rank()).size()});
  scratch_ = Tensor::empty({n_});
  const std::int64_t total = std::accumulate(chunk_bytes_.begin(), chunk_bytes_.end(), std::int64_t{0});
  const std::int64_t mine = chunk_bytes_[static_cast<std::size_t>(group.rank())];
  to_servers_ = Tensor::empty({total}, DType::i8);
  at_server_ = Tensor::empty({mine * ranks}, DType::i8);
  from_server_ = Tensor::empty({mine * ranks}, DType::i8);
  at_worker_ = Tensor::empty({total}, DType::i8);
}

std::int64_t CompressedSum::bytes_sent_per_call() const {
  const int me = group_.rank(), ranks = group_.size();
  std::int64_t bytes = 0;
  for (int p = 0; p < ranks; ++p) {
    if (p != me) bytes += chunk_bytes_[static_cast<std::size_t>(p)] + chunk_bytes_[static_cast<std::size_t>(me)];
  }
  return bytes;
}

void CompressedSum::sum(Tensor& x) {
  MYRIAD_CHECK(x.dtype() == DType::f32 && x.is_contiguous() && x.device().is_cpu() && x.numel() == n_,
               "CompressedSum on group '" << group_.name() << "': expected " << n_
                                          << " contiguous host f32 elements, got " << x.numel());
  const int me = group_.rank(), ranks = group_.size();
  const std::int64_t mine = chunk_bytes_[static_cast<std::size_t>(me)];
  // Worker: y = x + e_w, encoded chunk by chunk; e_w = y - decoded.
  float* values = x.data<float>();
  float* error = worker_error_.data<float>();
  float* decoded = scratch_.data<float>();
  for (std::int64_t i = 0; i < n_; ++i) values[i] += error[i];
  auto* send = static_cast<std::byte*>(to_servers_.raw_data());
  std::int64_t at = 0;
  for (int p = 0; p < ranks; ++p) {
    const ChunkRange c = chunk_range(n_, ranks, p);
    encode(spec_, values + c.begin, c.size(), send + at, decoded + c.begin);
    at += chunk_bytes_[static_cast<std::size_t>(p)];
  }
  for (std::int64_t i = 0; i < n_; ++i) error[i] = values[i] - decoded[i];
  std::vector<std::int64_t> to_servers(chunk_bytes_), from_workers(static_cast<std::size_t>(ranks), mine);
  group_.all_to_all_v(to_servers_, to_servers, at_server_, from_workers);
  // Server: z = sum of the decoded contributions to my chunk + e_s; encode; e_s = z - decoded.
  const ChunkRange own = chunk_range(n_, ranks, me);
  float* z = decoded + own.begin;  // scratch: this chunk's part is free again
  const auto* contributions = static_cast<const std::byte*>(at_server_.raw_data());
  for (int q = 0; q < ranks; ++q) decode(spec_, contributions + q * mine, own.size(), z, q > 0);
  float* server_error = server_error_.data<float>();
  for (std::int64_t i = 0; i < own.size(); ++i) z[i] += server_error[i];
  float* server_decoded = values + own.begin;  // free: decoded into again below
  auto* result = static_cast<std::byte*>(from_server_.raw_data());
  encode(spec_, z, own.size(), result, server_decoded);
  for (std::int64_t i = 0; i < own.size(); ++i) server_error[i] = z[i] - server_decoded[i];
  for (int p = 1; p < ranks; ++p) std::memcpy(result + p * mine, result, static_cast<std::size_t>(mine));
  std::vector<std::int64_t> to_everyone(static_cast<std::size_t>(ranks), mine), from_servers(chunk_bytes_);
  group_.all_to_all_v(from_server_, to_everyone, at_worker_, from_servers);
  const auto* sums = static_cast<const std::byte*>(at_worker_.raw_data());
  at = 0;
  for (int p = 0; p < ranks; ++p) {
    const ChunkRange c = chunk_range(n_, ranks, p);
    decode(spec_, sums + at, c.size(), values + c.begin, false);
    at += chunk_bytes_[static_cast<std::size_t>(p)];
  }
}

}  // namespace myriad::distributed
