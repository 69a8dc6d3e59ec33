// Device tensors (cuda/device_tensor.h): allocation from the context's caching allocator, round
// trips host -> device -> host bit for bit (strided sources too), memory returned to the cache
// when the last view goes, and argument errors. Skips without a device.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/device_tensor.h"

namespace myriad {
namespace {

using testing::expect_error_mentions;

TEST(DeviceTensor, RoundTripIsBitExactAndReturnsMemoryToTheCache) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  Tensor host = Tensor::empty({37, 53});
  fill_uniform(host, -3.0f, 3.0f, 2026, 11);
  const auto before = context.allocator().stats();
  {
    Tensor device = cuda::to_device(context, host.transpose(0, 1));  // strided source
    EXPECT_EQ(device.device(), Device::cuda(0));
    EXPECT_EQ(device.shape(), (Shape{53, 37}));
    Tensor back = cuda::to_host(context, device);
    Tensor expected = host.transpose(0, 1).contiguous();
    EXPECT_EQ(std::memcmp(back.raw_data(), expected.raw_data(), expected.nbytes()), 0);
    EXPECT_GT(context.allocator().stats().in_use, before.in_use);
    cuda::zero_device(context, device);
    Tensor zeros = cuda::to_host(context, device);
    for (std::int64_t i = 0; i < zeros.numel(); ++i) ASSERT_EQ(zeros.data<float>()[i], 0.0f);
  }
  EXPECT_EQ(context.allocator().stats().in_use, before.in_use);
}

TEST(DeviceTensor, ErrorsNameTheTensorAndDevice) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  Tensor host = Tensor::zeros({4});
  expect_error_mentions([&] { cuda::to_host(context, host); }, {"to_host", "f32[4] cpu", "cuda:0"});
  Tensor device = cuda::to_device(context, host);
  expect_error_mentions([&] { cuda::to_device(context, device); }, {"to_device", "not a host tensor"});
}

}  // namespace
}  // namespace myriad
