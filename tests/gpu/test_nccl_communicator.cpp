// NcclCommunicator in a world of one (the GPU check runs on one GPU; NCCL refuses two ranks on one
// device, so multi-rank runs live in tests/mpi/test_nccl_communicator.cpp and need a GPU per
// rank). Checks every operation's result against the interface's definition on device tensors
// (f32, bf16, i64), unequal-chunk paths, the stream ordering after compute-stream work, the
// statistics, that host tensors go to the host group, and that bad arguments or tags are refused
// before anything is queued.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/distributed/nccl_communicator.h"
#include "myriad/distributed/loopback_communicator.h"

namespace myriad {
namespace {

using testing::expect_error_mentions;

Tensor random_host(const Shape& shape, std::uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  fill_uniform(t, -1.0f, 1.0f, 77, stream);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(NcclCommunicator, WorldOfOneCollectivesFollowTheInterface) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  distributed::LoopbackCommunicator host("solo");
  distributed::NcclCommunicator nccl(host, context);
  EXPECT_EQ(nccl.rank(), 0);
  EXPECT_EQ(nccl.size(), 1);
  EXPECT_EQ(nccl.name(), "solo");

  // all_reduce (sum and max) of one rank leaves the tensor as it is, f32 and bf16.
  Tensor values = random_host({1001}, 1);
  Tensor device = cuda::to_device(context, values);
  nccl.all_reduce(device);
  nccl.all_reduce(device, distributed::ReduceOp::max);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, device), values));
  Tensor half = values.to(DType::bf16);
  Tensor device_half = cuda::to_device(context, half);
  nccl.all_reduce(device_half);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, device_half), half));

  // reduce_scatter / all_gather / all_to_all copy input to output (odd sizes: one chunk of all).
  Tensor output = cuda::device_empty(context, {1001});
  nccl.reduce_scatter(device, output);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, output), values));
  Tensor gathered = cuda::device_empty(context, {1001});
  nccl.all_gather(output, gathered);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, gathered), values));
  Tensor indices = Tensor::empty({6}, DType::i64);
  for (int i = 0; i < 6; ++i) indices.data<std::int64_t>()[i] = 1000 + i;
  Tensor device_indices = cuda::to_device(context, indices);
  Tensor exchanged = cuda::device_empty(context, {6}, DType::i64);
  nccl.all_to_all(device_indices, exchanged);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, exchanged), indices));
  nccl.broadcast(device, 0);
  nccl.barrier();

  // The communicator waits for work queued on the compute stream before it reads a buffer.
  Tensor fresh = random_host({1 << 20}, 2);
  Tensor target = cuda::device_empty(context, {1 << 20});
  MYRIAD_CUDA_CHECK(
      cudaMemcpyAsync(target.raw_data(), fresh.raw_data(), fresh.nbytes(), cudaMemcpyHostToDevice, context.stream()));
  Tensor copy = cuda::device_empty(context, {1 << 20});
  nccl.all_gather(target, copy);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, copy), fresh));

  const distributed::CommStats stats = nccl.stats();
  EXPECT_EQ(stats[distributed::CommOp::all_reduce].calls, 3);
  EXPECT_EQ(stats[distributed::CommOp::all_gather].calls, 2);
  EXPECT_EQ(stats[distributed::CommOp::all_reduce].bytes_sent, 0);  // a ring of one moves nothing
  // Timing: an in-place all-reduce over one rank may enqueue nothing, so only what NCCL guarantees
  // is checked — a time is recorded for every call and it is never negative.
  EXPECT_GE(stats[distributed::CommOp::all_reduce].seconds, 0.0);
  EXPECT_GE(stats[distributed::CommOp::all_gather].seconds, 0.0);
  nccl.reset_stats();
  EXPECT_EQ(nccl.stats().total().calls, 0);
}

TEST(NcclCommunicator, HandsHostTensorsToItsHostGroupAndRefusesBadArgumentsBeforeQueueing) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  distributed::LoopbackCommunicator host("solo");
  distributed::NcclCommunicator nccl(host, context, distributed::NcclOptions{.p2p_tags = 2, .timeout_seconds = 30.0});
  Tensor on_host = Tensor::full({8}, 3.0);
  nccl.all_reduce(on_host);  // a host scalar vector: the host group's all_reduce (here, a world of one)
  EXPECT_EQ(host.stats()[distributed::CommOp::all_reduce].calls, 1);
  EXPECT_EQ(nccl.stats()[distributed::CommOp::all_reduce].calls, 0);
  EXPECT_EQ(on_host.data<float>()[7], 3.0f);
  Tensor device = cuda::device_empty(context, {8});
  Tensor too_small = cuda::device_empty(context, {7});
  expect_error_mentions([&] { nccl.reduce_scatter(device, too_small); }, {"reduce_scatter", "7 elements"});
  Tensor bytes = cuda::device_empty(context, {8}, DType::i8);
  expect_error_mentions([&] { nccl.all_reduce(bytes); }, {"cannot reduce dtype i8", "bf16"});
  expect_error_mentions([&] { nccl.send(device, 0, 0); }, {"send"});  // a world of one has no peer
  // Still usable after refused calls.
  nccl.all_reduce(device);
}

TEST(NcclCommunicator, SplitMakesAWorkingCommunicator) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  distributed::LoopbackCommunicator host("world");
  distributed::NcclCommunicator nccl(host, context);
  auto part = nccl.split(0, 0, "dp");
  EXPECT_EQ(part->name(), "dp");
  EXPECT_EQ(part->size(), 1);
  Tensor values = random_host({333}, 3);
  Tensor device = cuda::to_device(context, values);
  part->all_reduce(device);
  EXPECT_TRUE(same_bytes(cuda::to_host(context, device), values));
}

}  // namespace
}  // namespace myriad
