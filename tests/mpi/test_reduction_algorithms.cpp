// Tree and hierarchical reductions (parallel.dp_reduce) against the flat ring, for every node
// grouping the world size allows (L members per node, L dividing the world): integer sums and
// max equal the ring's bit for bit (exact in any association), as do reduce-scatter chunks and
// all-gathers (the same flat chunk rule); f32 sums are within the rounding bound of the double
// reference and bitwise identical on every rank; async ops overlap and complete; the bytes that
// cross nodes equal the closed form 2 S (N-1) / (N L) per rank. With exact sums
// (parallel.dp_reduce_exact) f32 sums and reduce-scatters are bit for bit the same for the ring,
// the tree and every node grouping — which plain f32 hierarchical sums are not.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "mpi_test_support.h"
#include "myriad/ops/exact_sum.h"
#include "myriad/distributed/hierarchical_communicator.h"
#include "myriad/distributed/ring_communicator.h"
#include "myriad/distributed/tree_communicator.h"

namespace myriad::distributed {
namespace {

using myriad::testing::element;
using myriad::testing::fill_input;
using myriad::testing::input_value;
using myriad::testing::make_world;

std::vector<int> groupings(int world) {  // members per node
  std::vector<int> out;
  for (int per_node = 1; per_node <= world; ++per_node) {
    if (world % per_node == 0) out.push_back(per_node);
  }
  return out;
}

// Every algorithm for this world: tree, then hierarchical with each grouping (and first the ring,
// which only exists as a composed communicator with exact sums).
std::vector<std::unique_ptr<ComposedCommunicator>> algorithms(bool exact = false) {
  std::vector<std::unique_ptr<ComposedCommunicator>> out;
  if (exact) out.push_back(std::make_unique<RingCommunicator>(make_world("ring_test"), true));
  out.push_back(std::make_unique<TreeCommunicator>(make_world("tree_test"), exact));
  const int world = myriad::testing::world_size();
  for (int per_node : groupings(world)) {
    out.push_back(std::make_unique<HierarchicalCommunicator>(make_world("hier_test"),
                                                             NodeGrouping{world / per_node, per_node}, exact));
  }
  return out;
}

std::vector<std::int64_t> sizes(int ranks) { return {0, 1, ranks - 1, ranks + 1, 1000003}; }

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  EXPECT_EQ(myriad::testing::fnv1a(got), myriad::testing::fnv1a(want)) << what << ": differs from the flat ring";
}

TEST(ReductionAlgorithms, IntegerAndMaxReductionsEqualTheFlatRingBitForBit) {
  auto ring = make_world("ring");
  const int r = ring->rank();
  std::uint64_t seed = 500;
  for (auto& algorithm : algorithms()) {
    for (DType dtype : {DType::i64, DType::i32, DType::f32}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        if (dtype == DType::f32 && op == ReduceOp::sum) continue;  // rounding: the next test
        for (std::int64_t n : sizes(ring->size())) {
          std::ostringstream what;
          what << algorithm->algorithm() << " " << dtype_name(dtype) << (op == ReduceOp::sum ? " sum" : " max")
               << " n=" << n;
          SCOPED_TRACE(what.str());
          ++seed;
          Tensor mine = Tensor::empty({n}, dtype), flat = Tensor::empty({n}, dtype);
          fill_input(mine, seed, r);
          fill_input(flat, seed, r);
          algorithm->all_reduce(mine, op);
          ring->all_reduce(flat, op);
          expect_same_bits(mine, flat, "all_reduce");

          Tensor input = Tensor::empty({n}, dtype);
          fill_input(input, seed + 7, r);
          const std::int64_t chunk = chunk_range(n, ring->size(), r).size();
          Tensor out = Tensor::empty({chunk}, dtype), flat_out = Tensor::empty({chunk}, dtype);
          algorithm->reduce_scatter(input, out, op);
          ring->reduce_scatter(input, flat_out, op);
          expect_same_bits(out, flat_out, "reduce_scatter");
        }
      }
    }
  }
}

TEST(ReductionAlgorithms, FloatSumsAreWithinRoundingAndIdenticalOnEveryRank) {
  const int ranks = myriad::testing::world_size(), r = myriad::testing::world_rank();
  std::uint64_t seed = 900;
  for (auto& algorithm : algorithms()) {
    for (std::int64_t n : sizes(ranks)) {
      SCOPED_TRACE(algorithm->algorithm() + " n=" + std::to_string(n));
      ++seed;
      Tensor t = Tensor::empty({n}, DType::f32);
      fill_input(t, seed, r);
      algorithm->all_reduce(t);
      // Any association of `ranks` values in [-1, 1): |error| <= (ranks - 1) * ranks * 2^-24.
      const double bound = (ranks - 1) * ranks * std::ldexp(1.0, -24);
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        double want = 0.0;
        for (int p = 0; p < ranks; ++p) want += input_value(DType::f32, seed, p, i);
        if (std::fabs(element(t, i) - want) > bound) ++bad;
      }
      EXPECT_EQ(bad, 0);
      const std::vector<std::uint64_t> hashes = myriad::testing::hashes_on_all_ranks(t);
      for (int p = 1; p < ranks; ++p) EXPECT_EQ(hashes[p], hashes[0]) << "rank " << p << " differs from rank 0";
    }
  }
}

TEST(ReductionAlgorithms, ExactFloatSumsAreTheSameBitsForEveryAlgorithmAndGrouping) {
  const int ranks = myriad::testing::world_size(), r = myriad::testing::world_rank();
  auto exact = algorithms(true);
  const int headroom = exact_sum_headroom(ranks);
  std::uint64_t seed = 1300;
  for (std::int64_t n : sizes(ranks)) {
    ++seed;
    Tensor input = Tensor::empty({n}, DType::f32);
    fill_input(input, seed, r);
    for (std::int64_t i = 0; i < n; ++i) {  // magnitudes spread over 2^24 within each block
      input.data<float>()[i] = std::ldexp(input.data<float>()[i], static_cast<int>((i * 7 + r) % 25) - 12);
    }
    const std::int64_t chunk = chunk_range(n, ranks, r).size();
    Tensor first_sum, first_chunk;
    for (auto& algorithm : exact) {
      SCOPED_TRACE(algorithm->description() + " n=" + std::to_string(n));
      EXPECT_TRUE(algorithm->exact_sums());
      Tensor sum = input.clone(), out = Tensor::empty({chunk}, DType::f32);
      algorithm->all_reduce(sum);
      algorithm->reduce_scatter(input, out);
      if (!first_sum.defined()) {
        first_sum = sum;
        first_chunk = out;
        // The exact sum: within half an f32 ulp plus the grid error P 2^(E + h - 63), E <= 13.
        std::int64_t bad = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          double want = 0.0;
          for (int p = 0; p < ranks; ++p) {
            want += std::ldexp(static_cast<float>(input_value(DType::f32, seed, p, i)),
                               static_cast<int>((i * 7 + p) % 25) - 12);
          }
          const auto f = static_cast<float>(want);
          const double half_ulp = 0.5 * (std::nextafter(std::fabs(f), 1e30f) - std::fabs(f));
          if (std::fabs(element(sum, i) - want) > half_ulp + ranks * std::ldexp(1.0, 13 + headroom - 63)) ++bad;
        }
        EXPECT_EQ(bad, 0);
        const ChunkRange mine = chunk_range(n, ranks, r);
        for (std::int64_t i = 0; i < chunk; ++i) ASSERT_EQ(element(out, i), element(sum, mine.begin + i)) << i;
        continue;
      }
      expect_same_bits(sum, first_sum, "exact all_reduce");
      expect_same_bits(out, first_chunk, "exact reduce_scatter");
    }
  }
}

TEST(ReductionAlgorithms, PlainFloatSumsOfTwoLevelGroupingsDifferFromTheRing) {
  // Why exact sums exist: without them a hierarchical f32 sum is another association.
  const int ranks = myriad::testing::world_size(), r = myriad::testing::world_rank();
  auto ring = make_world("ring");
  const std::int64_t n = 100003;
  for (int per_node : groupings(ranks)) {
    if (per_node < 2 || per_node == ranks) continue;
    HierarchicalCommunicator hier(make_world("hier_plain"), NodeGrouping{ranks / per_node, per_node});
    Tensor a = Tensor::empty({n}, DType::f32);
    fill_input(a, 4242, r);
    Tensor b = a.clone();
    hier.all_reduce(a);
    ring->all_reduce(b);
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i) differ += a.data<float>()[i] != b.data<float>()[i];
    EXPECT_GT(differ, 0) << hier.algorithm() << ": plain sums never differ, so the exact test shows nothing";
  }
}

TEST(ReductionAlgorithms, ExactSumsPropagateNonFiniteValuesByBlock) {
  const int ranks = myriad::testing::world_size(), r = myriad::testing::world_rank();
  for (auto& algorithm : algorithms(true)) {
    SCOPED_TRACE(algorithm->description());
    Tensor t = Tensor::full({3 * kExactSumBlock}, 0.5, DType::f32);
    if (r == ranks - 1) t.data<float>()[kExactSumBlock + 1] = std::numeric_limits<float>::infinity();
    algorithm->all_reduce(t);
    const float* x = t.data<float>();
    EXPECT_EQ(x[0], 0.5f * static_cast<float>(ranks));
    EXPECT_TRUE(std::isnan(x[kExactSumBlock]) && std::isnan(x[2 * kExactSumBlock - 1]));
    EXPECT_EQ(x[2 * kExactSumBlock], 0.5f * static_cast<float>(ranks));
  }
}

TEST(ReductionAlgorithms, AllGatherEqualsTheFlatRing) {
  auto ring = make_world("ring");
  const int ranks = ring->size(), r = ring->rank();
  for (auto& algorithm : algorithms()) {
    for (std::int64_t n : sizes(ranks)) {
      SCOPED_TRACE(algorithm->algorithm() + " n=" + std::to_string(n));
      Tensor piece = Tensor::empty({chunk_range(n, ranks, r).size()}, DType::i64);
      fill_input(piece, 77, r);
      Tensor out = Tensor::empty({n}, DType::i64), flat = Tensor::empty({n}, DType::i64);
      algorithm->all_gather(piece, out);
      ring->all_gather(piece, flat);
      expect_same_bits(out, flat, "all_gather");
    }
  }
}

TEST(ReductionAlgorithms, AsyncReductionsOverlapAndCompleteInAnyWaitOrder) {
  const int r = myriad::testing::world_rank();
  for (auto& algorithm : algorithms()) {
    SCOPED_TRACE(algorithm->algorithm());
    std::vector<Tensor> tensors;
    std::vector<WorkHandle> works;
    for (int k = 0; k < 4; ++k) {
      tensors.push_back(Tensor::full({1000 + k}, static_cast<double>(r + k), DType::i64));
      works.push_back(algorithm->all_reduce_async(tensors.back()));
    }
    for (int k = 3; k >= 0; --k) works[static_cast<std::size_t>(k)]->wait();
    const int ranks = algorithm->size();
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(tensors[static_cast<std::size_t>(k)].data<std::int64_t>()[999],
                static_cast<std::int64_t>(ranks * (ranks - 1) / 2 + ranks * k));
    }
    EXPECT_EQ(algorithm->stats()[CommOp::all_reduce].calls, 4);
  }
}

TEST(ReductionAlgorithms, HierarchicalCrossNodeBytesFollowTheClosedForm) {
  const int ranks = myriad::testing::world_size();
  const std::int64_t n = 92160;  // divisible by 1..6 and 8: every chunk of every grouping is equal
  for (int per_node : groupings(ranks)) {
    const int nodes = ranks / per_node;
    HierarchicalCommunicator hier(make_world("hier_bytes"), NodeGrouping{nodes, per_node});
    Tensor t = Tensor::full({n}, 1.0, DType::f32);
    hier.all_reduce(t);
    EXPECT_EQ(t.data<float>()[n - 1], static_cast<float>(ranks));
    std::int64_t inter = 0, intra = 0;
    for (const auto& [role, stats] : hier.levels()) (role == "inter-node" ? inter : intra) += stats.total().bytes_sent;
    const std::int64_t bytes = n * 4;
    EXPECT_EQ(inter, 2 * bytes * (nodes - 1) / (nodes * per_node)) << nodes << " nodes x " << per_node;
    EXPECT_EQ(intra, 2 * bytes * (per_node - 1) / per_node) << nodes << " nodes x " << per_node;
    EXPECT_EQ(hier.stats()[CommOp::all_reduce].bytes_sent, inter + intra);
  }
}

TEST(ReductionAlgorithms, ABadArgumentThrowsAtTheCallAndLeavesTheGroupUsable) {
  const int ranks = myriad::testing::world_size();
  HierarchicalCommunicator hier(make_world("hier_args"), NodeGrouping{ranks, 1});
  Tensor bf = Tensor::zeros({4}, DType::bf16);
  EXPECT_THROW(hier.all_reduce(bf), Error);
  Tensor t = Tensor::full({3}, 2.0, DType::i32);
  hier.all_reduce(t);
  EXPECT_EQ(t.data<std::int32_t>()[2], 2 * ranks);
}

}  // namespace
}  // namespace myriad::distributed
