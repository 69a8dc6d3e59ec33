// DeviceContext, DeviceBuffer and the CUDA/cuBLAS/NCCL check macros. The macro and bad-index
// tests need no GPU (status strings come from the libraries, the index check precedes any device
// work) and run everywhere; the rest skip without a device.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "gpu_test_support.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"

namespace myriad {
namespace {

using testing::expect_error_mentions;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(CudaCheck, FailureThrowsWithStatusExpressionAndCallSite) {
  const int line = __LINE__ + 2;
  try {
    MYRIAD_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "MYRIAD_CUDA_CHECK did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << what;
    EXPECT_NE(what.find("from cudaErrorInvalidValue"), std::string::npos) << what;
    EXPECT_EQ(e.line(), line);
    EXPECT_TRUE(ends_with(e.file(), "test_device_context.cpp")) << e.file();
  }
  EXPECT_NO_THROW(MYRIAD_CUDA_CHECK(cudaSuccess));
}

TEST(CudaCheck, CublasAndNcclFailuresThrow) {
  expect_error_mentions([] { MYRIAD_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); },
                        {"cuBLAS error", "CUBLAS_STATUS_NOT_INITIALIZED", "from CUBLAS_STATUS_NOT_INITIALIZED"});
  EXPECT_NO_THROW(MYRIAD_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
  // 4 is ncclInvalidArgument; the text depends on whether NCCL is built in, the code does not.
  expect_error_mentions([] { MYRIAD_NCCL_CHECK(4); }, {"NCCL error 4", "from 4"});
  EXPECT_NO_THROW(MYRIAD_NCCL_CHECK(0));
}

TEST(DeviceContext, BadIndexThrowsNamingTheIndexAndCount) {
  const int count = cuda::cuda_device_count_or_zero();
  EXPECT_GE(count, 0);
  const std::string visible = "(" + std::to_string(count) + " visible)";
  expect_error_mentions([] { cuda::DeviceContext context(-1); }, {"no CUDA device -1", "visible"});
  expect_error_mentions([&] { cuda::DeviceContext context(count); },
                        {"no CUDA device " + std::to_string(count), visible});
}

TEST(DeviceContext, OwnsStreamHandleAndWorkspaceAndKeepsCurrentDevice) {
  MYRIAD_REQUIRE_GPU();
  const int count = cuda::cuda_device_count_or_zero();
  int before = -1;
  MYRIAD_CUDA_CHECK(cudaGetDevice(&before));
  {
    const int target = count - 1;  // a different device from the current one when there are several
    cuda::DeviceContext context(target, std::size_t{1} << 20);
    EXPECT_EQ(context.device(), target);
    EXPECT_NE(context.stream(), nullptr);
    EXPECT_NE(context.cublaslt(), nullptr);
    EXPECT_NE(context.workspace(), nullptr);
    EXPECT_EQ(context.workspace_bytes(), std::size_t{1} << 20);
    int during = -1;
    MYRIAD_CUDA_CHECK(cudaGetDevice(&during));
    EXPECT_EQ(during, before) << "constructing a context changed the current device";
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(context.workspace(), 0, context.workspace_bytes(), context.stream()));
    EXPECT_NO_THROW(context.synchronize());
  }
  int after = -1;
  MYRIAD_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, before) << "destroying a context changed the current device";
}

TEST(DeviceBuffer, AllocatesMovesAndReleases) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceBuffer empty(0, 0);
  EXPECT_EQ(empty.data(), nullptr);
  cuda::DeviceBuffer a(4096, 0);
  ASSERT_NE(a.data(), nullptr);
  void* address = a.data();
  cuda::DeviceBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is under test
  EXPECT_EQ(a.bytes(), 0u);
  EXPECT_EQ(b.data(), address);
  EXPECT_EQ(b.bytes(), 4096u);
  cuda::DeviceBuffer c(256, 0);
  c = std::move(b);
  EXPECT_EQ(c.data(), address);
  EXPECT_EQ(c.device(), 0);
  expect_error_mentions([] { cuda::DeviceBuffer huge(std::size_t{1} << 62, 0); }, {"cudaMalloc", "bytes on cuda:0"});
}

}  // namespace
}  // namespace myriad

namespace myriad {
namespace {

// The context's caching allocator over cudaMalloc: memory is usable on the device, a freed block
// is reused on its stream, and asking for more than the device has is a clear error after the
// cache was released (CachingAllocator's logic itself is tested without a GPU in
// tests/core/test_caching_allocator.cpp).
TEST(DeviceAllocator, CachesDeviceMemoryAndReportsOutOfMemory) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  CachingAllocator& cache = context.allocator();
  const auto stream = reinterpret_cast<StreamId>(context.stream());
  void* a = cache.allocate(3 << 20, stream);
  ASSERT_NE(a, nullptr);
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(a, 0x5a, 3 << 20, context.stream()));
  unsigned char byte = 0;
  MYRIAD_CUDA_CHECK(
      cudaMemcpyAsync(&byte, static_cast<unsigned char*>(a) + 12345, 1, cudaMemcpyDeviceToHost, context.stream()));
  context.synchronize();
  EXPECT_EQ(byte, 0x5a);
  cache.free(a);
  EXPECT_EQ(cache.allocate(3 << 20, stream), a);
  EXPECT_EQ(cache.stats().raw_allocations, 1);
  size_t free_bytes = 0, total_bytes = 0;
  MYRIAD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  testing::expect_error_mentions([&] { cache.allocate(total_bytes * 2, stream); },
                                 {"out of memory on cuda:0", "in use 4.0 MiB"});
  cache.free(a);
}

}  // namespace
}  // namespace myriad
