// The fixture of the backend-vs-CPU suites (test_cuda_backend*.cpp): a DeviceContext and a
// CudaBackend on GPU 0 (skipped without a GPU; always present on the emulated CUDA layer), random
// host inputs, uploads, and a comparison of a device result with the CPU op's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/cuda_backend.h"

namespace myriad::testing {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MYRIAD_REQUIRE_GPU();
    context_ = std::make_unique<cuda::DeviceContext>(0);
    backend_ = std::make_unique<cuda::CudaBackend>(*context_);
  }
  void TearDown() override {
    backend_.reset();
    context_.reset();
  }

  Tensor random(const Shape& shape, std::uint64_t stream) {
    Tensor t = Tensor::empty(shape);
    fill_uniform(t, -1.0f, 1.0f, 2026, stream);
    return t;
  }
  Tensor on_device(const Tensor& host) { return host.defined() ? backend_->copy_from_host(host) : Tensor(); }

  // max |device - reference| <= tolerance * (1 + max |reference|)
  void expect_close(const Tensor& device, const Tensor& reference, double tolerance, const char* what) {
    ASSERT_TRUE(device.defined());
    const Tensor got = backend_->copy_to_host(device);
    ASSERT_EQ(got.shape(), reference.shape()) << what;
    const Tensor want = reference.contiguous();
    double worst = 0.0, scale = 0.0;
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      const double r = want.data<float>()[i], g = got.data<float>()[i];
      ASSERT_TRUE(std::isfinite(g)) << what << "[" << i << "] = " << g;
      worst = std::max(worst, std::abs(g - r));
      scale = std::max(scale, std::abs(r));
    }
    EXPECT_LE(worst, tolerance * (1.0 + scale)) << what << ": max |device - cpu| " << worst;
  }

  std::unique_ptr<cuda::DeviceContext> context_;
  std::unique_ptr<cuda::CudaBackend> backend_;
};

}  // namespace myriad::testing
