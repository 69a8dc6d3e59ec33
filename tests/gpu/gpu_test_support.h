// GPU test support: MYRIAD_REQUIRE_GPU() skips a test when no CUDA device is usable;
// DeviceArray<T> holds n elements on the GPU at an optional element offset (to exercise
// unaligned paths), copied on the context's stream so copies and kernels are ordered, and starts
// filled with 0xFF bytes (NaN for f32 and bf16) so a kernel that fails to write is caught;
// expect_error_mentions checks a myriad::Error message for validation tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/core/philox.h"
#include "myriad/core/tensor.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "reference.h"

#define MYRIAD_REQUIRE_GPU()                                                          \
  do {                                                                                \
    if (::myriad::cuda::cuda_device_count_or_zero() == 0) {                           \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reports none or an error)"; \
    }                                                                                 \
  } while (0)

namespace myriad::testing {

// n floats uniform in [low, high) from Philox (seed, stream): fresh inputs for a kernel test.
inline std::vector<float> random_floats(std::int64_t n, float low, float high, std::uint64_t seed,
                                        std::uint64_t stream) {
  Tensor t = Tensor::empty({std::max<std::int64_t>(n, 1)});
  fill_uniform(t, low, high, seed, stream);
  return std::vector<float>(t.data<float>(), t.data<float>() + n);
}

// n floats of testing::random_tensor({n}, seed, stream, low, high), as a host vector.
inline std::vector<float> random_tensor_floats(std::int64_t n, std::uint64_t seed, std::uint64_t stream, float low,
                                               float high) {
  Tensor t = random_tensor({n}, seed, stream, low, high);
  return std::vector<float>(t.data<float>(), t.data<float>() + n);
}

inline std::vector<double> as_f64(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// `call` must throw myriad::Error whose message contains every needle.
inline void expect_error_mentions(const std::function<void()>& call, const std::vector<std::string>& needles) {
  try {
    call();
    ADD_FAILURE() << "no myriad::Error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& needle : needles) EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

template <typename T>
class DeviceArray {
 public:
  DeviceArray(const cuda::DeviceContext& context, std::int64_t n, std::int64_t offset = 0)
      : context_(&context),
        buffer_(static_cast<std::size_t>(n + offset) * sizeof(T), context.device()),
        n_(n),
        offset_(offset) {
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(buffer_.data(), 0xff, buffer_.bytes(), context.stream()));
  }
  DeviceArray(const cuda::DeviceContext& context, const std::vector<T>& host, std::int64_t offset = 0)
      : DeviceArray(context, static_cast<std::int64_t>(host.size()), offset) {
    upload(host);
  }

  T* get() const { return buffer_.as<T>() + offset_; }
  std::int64_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    ASSERT_EQ(static_cast<std::int64_t>(host.size()), n_);
    MYRIAD_CUDA_CHECK(
        cudaMemcpyAsync(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, context_->stream()));
    context_->synchronize();
  }

  std::vector<T> download() const {
    std::vector<T> host(static_cast<std::size_t>(n_));
    MYRIAD_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), get(), host.size() * sizeof(T), cudaMemcpyDeviceToHost, context_->stream()));
    context_->synchronize();
    return host;
  }

 private:
  const cuda::DeviceContext* context_;
  cuda::DeviceBuffer buffer_;
  std::int64_t n_;
  std::int64_t offset_;
};

}  // namespace myriad::testing
