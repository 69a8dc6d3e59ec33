// NcclCommunicator across ranks, one GPU per rank (built only with NCCL; skips unless every rank
// of the node has a GPU of its own, which CI and the one-GPU check do not have). Each operation
// runs over NCCL on device tensors and over MpiCommunicator on host copies of the same inputs;
// the results must agree — exactly for i64, within f32 rounding of a different summation order
// for f32 — including unequal chunks, tagged point-to-point crossing in both directions (the
// pipeline's pattern) and all_to_all_v — and with exact sums the host's exact f32 sums bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "mpi_test_support.h"
#include "myriad/core/local_device.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/distributed/nccl_communicator.h"
#include "myriad/distributed/ring_communicator.h"

namespace myriad {
namespace {

using testing::fill_input;
using testing::make_world;

// Whether every rank has a GPU of its own; the same answer on every rank (so all skip together).
bool every_rank_has_a_gpu() {
  const int devices = cuda::cuda_device_count_or_zero();
  int ok = 1;
  try {
    select_local_device(local_rank_from_environment(), devices);
  } catch (const Error&) {
    ok = 0;
  }
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

void expect_close(const Tensor& actual, const Tensor& expected, double tolerance, const char* what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    ASSERT_NEAR(testing::element(actual, i), testing::element(expected, i), tolerance) << what << " element " << i;
  }
}

class NcclAcrossRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs one GPU per rank on every node";
    const int device = select_local_device(local_rank_from_environment(), cuda::cuda_device_count_or_zero());
    context_ = std::make_unique<cuda::DeviceContext>(device);
    host_ = make_world("world");
    reference_ = make_world("reference");
    nccl_ = std::make_unique<distributed::NcclCommunicator>(*host_, *context_);
  }

  std::unique_ptr<cuda::DeviceContext> context_;
  std::unique_ptr<distributed::MpiCommunicator> host_, reference_;
  std::unique_ptr<distributed::NcclCommunicator> nccl_;
};

TEST_F(NcclAcrossRanks, CollectivesMatchMpi) {
  const int rank = nccl_->rank(), size = nccl_->size();
  for (DType dtype : {DType::f32, DType::i64}) {
    const double tolerance = dtype == DType::f32 ? 1e-5 * size : 0.0;
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{4096} * size + 3}) {
      Tensor input = Tensor::empty({n}, dtype);
      fill_input(input, 11 + n, rank);
      Tensor expected = input.clone();
      reference_->all_reduce(expected);
      Tensor device = cuda::to_device(*context_, input);
      nccl_->all_reduce(device);
      expect_close(cuda::to_host(*context_, device), expected, tolerance, "all_reduce");

      const std::int64_t chunk = distributed::chunk_range(n, size, rank).size();
      Tensor scattered_expected = Tensor::empty({chunk}, dtype);
      reference_->reduce_scatter(input, scattered_expected);
      Tensor scattered = cuda::device_empty(*context_, {chunk}, dtype);
      nccl_->reduce_scatter(cuda::to_device(*context_, input), scattered);
      expect_close(cuda::to_host(*context_, scattered), scattered_expected, tolerance, "reduce_scatter");

      Tensor gathered_expected = Tensor::empty({n}, dtype);
      reference_->all_gather(scattered_expected, gathered_expected);
      Tensor gathered = cuda::device_empty(*context_, {n}, dtype);
      nccl_->all_gather(cuda::to_device(*context_, scattered_expected), gathered);
      expect_close(cuda::to_host(*context_, gathered), gathered_expected, 0.0, "all_gather");

      Tensor broadcast = cuda::to_device(*context_, input);
      nccl_->broadcast(broadcast, size - 1);
      Tensor broadcast_expected = input.clone();
      reference_->broadcast(broadcast_expected, size - 1);
      expect_close(cuda::to_host(*context_, broadcast), broadcast_expected, 0.0, "broadcast");
    }
  }
}

// NcclOptions::hierarchy (2 nodes of size / 2 ranks): the all-reduce as intra-node reduce-scatter,
// inter-node all-reduce, intra-node all-gather (plus a flat all-reduce of the elements past the
// last whole chunk) equals MPI's, sum and max, for sizes below, at and past a multiple of the node.
TEST_F(NcclAcrossRanks, HierarchicalAllReduceMatchesMpi) {
  const int rank = nccl_->rank(), size = nccl_->size();
  if (size < 4 || size % 2 != 0) GTEST_SKIP() << "two nodes of at least two ranks";
  const distributed::NodeGrouping nodes{.nodes = 2, .per_node = size / 2};
  distributed::NcclCommunicator hierarchical(*host_, *context_, distributed::NcclOptions{.hierarchy = nodes});
  EXPECT_EQ(hierarchical.hierarchy().nodes, 2);
  EXPECT_EQ(hierarchical.hierarchy().per_node, size / 2);
  EXPECT_EQ(nccl_->hierarchy().nodes, 1);  // the default: flat
  for (DType dtype : {DType::f32, DType::i64}) {
    const double tolerance = dtype == DType::f32 ? 1e-5 * size : 0.0;
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{size / 2}, std::int64_t{1000} * size + 3}) {
      for (distributed::ReduceOp op : {distributed::ReduceOp::sum, distributed::ReduceOp::max}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dtype) << " n " << n << (op == distributed::ReduceOp::sum ? " sum" : " max"));
        Tensor input = Tensor::empty({n}, dtype);
        fill_input(input, 23 + n, rank);
        Tensor expected = input.clone();
        reference_->all_reduce(expected, op);
        Tensor device = cuda::to_device(*context_, input);
        hierarchical.all_reduce(device, op);
        expect_close(cuda::to_host(*context_, device), expected, tolerance, "hierarchical all_reduce");
      }
    }
  }
  EXPECT_THROW(distributed::NcclCommunicator(*host_, *context_,
                                             distributed::NcclOptions{.hierarchy = {.nodes = 3, .per_node = 3}}),
               Error);
}

// NcclOptions::exact_sums (parallel.dp_reduce_exact on the device): f32 all-reduces and
// reduce-scatters of device tensors — the exponents, terms and values computed by the device
// kernels, the integers summed by NCCL, flat and (np4) hierarchical — are the host's exact sums
// (a RingCommunicator with exact sums over MPI) bit for bit: values over many binades, a block
// of zeros, a NaN on one rank and an infinity on another, equal and unequal chunks. Max and
// integer sums run as before.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST_F(NcclAcrossRanks, ExactSumsEqualTheHostExactSumsBitForBit) {
  const int rank = nccl_->rank(), size = nccl_->size();
  distributed::RingCommunicator reference(make_world("exact_reference"), true);
  std::vector<std::unique_ptr<distributed::NcclCommunicator>> exact;
  exact.push_back(
      std::make_unique<distributed::NcclCommunicator>(*host_, *context_, distributed::NcclOptions{.exact_sums = true}));
  if (size >= 4 && size % 2 == 0) {
    exact.push_back(std::make_unique<distributed::NcclCommunicator>(
        *host_, *context_,
        distributed::NcclOptions{.hierarchy = {.nodes = 2, .per_node = size / 2}, .exact_sums = true}));
  }
  for (const auto& nccl : exact) {
    for (std::int64_t n :
         {std::int64_t{1}, std::int64_t{300}, std::int64_t{256} * size * 5, std::int64_t{256} * size * 5 + 3}) {
      SCOPED_TRACE(::testing::Message() << "hierarchy " << nccl->hierarchy().nodes << " x "
                                        << nccl->hierarchy().per_node << ", n " << n);
      Tensor input = Tensor::empty({n});
      fill_input(input, 31 + n, rank);
      float* x = input.data<float>();
      for (std::int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>((i / 200 * 13 + rank) % 90) - 60);
      if (n > 1024) {
        for (std::int64_t i = 256; i < 512; ++i) x[i] = 0.0f;
        if (rank == 0) x[600] = std::numeric_limits<float>::quiet_NaN();
        if (rank == size - 1) x[900] = std::numeric_limits<float>::infinity();
      }
      Tensor expected = input.clone();
      reference.all_reduce(expected);
      Tensor device = cuda::to_device(*context_, input);
      nccl->all_reduce(device);
      EXPECT_TRUE(same_bits(cuda::to_host(*context_, device), expected)) << "all_reduce";

      const std::int64_t chunk = distributed::chunk_range(n, size, rank).size();
      Tensor scattered_expected = Tensor::empty({chunk});
      reference.reduce_scatter(input, scattered_expected);
      Tensor scattered = cuda::device_empty(*context_, {chunk});
      nccl->reduce_scatter(cuda::to_device(*context_, input), scattered);
      EXPECT_TRUE(same_bits(cuda::to_host(*context_, scattered), scattered_expected)) << "reduce_scatter";

      if (n > 1024) continue;  // max with a NaN: MPI's and NCCL's rules differ, which is not the point here
      Tensor maxima = input.clone();
      reference_->all_reduce(maxima, distributed::ReduceOp::max);
      Tensor device_maxima = cuda::to_device(*context_, input);
      nccl->all_reduce(device_maxima, distributed::ReduceOp::max);
      EXPECT_TRUE(same_bits(cuda::to_host(*context_, device_maxima), maxima)) << "max";
    }
  }
}

TEST_F(NcclAcrossRanks, TaggedSendRecvCrossInBothDirections) {
  const int rank = nccl_->rank(), size = nccl_->size();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  Tensor forward = Tensor::empty({777}), backward = Tensor::empty({555});
  fill_input(forward, 5, rank);
  fill_input(backward, 6, rank);
  Tensor got_forward = cuda::device_empty(*context_, {777});
  Tensor got_backward = cuda::device_empty(*context_, {555});
  // Receives posted before sends, tags in opposite orders on the two sides of each pair.
  auto r1 = nccl_->recv_async(got_backward, next, 1);
  auto r0 = nccl_->recv_async(got_forward, previous, 0);
  auto s0 = nccl_->send_async(cuda::to_device(*context_, forward), next, 0);
  auto s1 = nccl_->send_async(cuda::to_device(*context_, backward), previous, 1);
  for (auto& work : {r1, r0, s0, s1}) work->wait();
  Tensor expected_forward = Tensor::empty({777}), expected_backward = Tensor::empty({555});
  fill_input(expected_forward, 5, previous);
  fill_input(expected_backward, 6, next);
  expect_close(cuda::to_host(*context_, got_forward), expected_forward, 0.0, "send tag 0");
  expect_close(cuda::to_host(*context_, got_backward), expected_backward, 0.0, "send tag 1");
}

TEST_F(NcclAcrossRanks, AllToAllVMatchesMpi) {
  const int rank = nccl_->rank(), size = nccl_->size();
  std::vector<std::int64_t> send_counts(size), recv_counts(size);
  for (int p = 0; p < size; ++p) {
    send_counts[p] = 3 + (rank * 7 + p * 5) % 11;  // what `rank` sends to p
    recv_counts[p] = 3 + (p * 7 + rank * 5) % 11;  // what p sends to `rank`
  }
  std::int64_t sent = 0, received = 0;
  for (int p = 0; p < size; ++p) sent += send_counts[p], received += recv_counts[p];
  Tensor input = Tensor::empty({sent}, DType::i64);
  fill_input(input, 9, rank);
  Tensor expected = Tensor::empty({received}, DType::i64);
  reference_->all_to_all_v(input, send_counts, expected, recv_counts);
  Tensor output = cuda::device_empty(*context_, {received}, DType::i64);
  nccl_->all_to_all_v(cuda::to_device(*context_, input), send_counts, output, recv_counts);
  expect_close(cuda::to_host(*context_, output), expected, 0.0, "all_to_all_v");
}

}  // namespace
}  // namespace myriad
