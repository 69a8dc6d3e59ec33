// MpiCommunicator collectives against references computed locally in double from every rank's
// input (regenerated from its seed), on uneven sizes (0, 1, size-1, 1000003 elements), f32 / i32
// / i64, sum and max; bitwise equality of all_reduce results across ranks; and the exact bytes
// each rank sends and receives, from the closed-form volumes of the algorithms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "mpi_test_support.h"

namespace myriad::distributed {
namespace {

using myriad::testing::chunk_elements;
using myriad::testing::element;
using myriad::testing::fill_input;
using myriad::testing::input_value;
using myriad::testing::make_world;

constexpr DType kReducible[] = {DType::f32, DType::i32, DType::i64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::max};

std::vector<std::int64_t> test_sizes(int ranks) { return {0, 1, ranks - 1, 1000003}; }

double reference_reduce(DType dtype, ReduceOp op, std::uint64_t seed, int ranks, std::int64_t index) {
  double acc = input_value(dtype, seed, 0, index);
  for (int r = 1; r < ranks; ++r) {
    const double v = input_value(dtype, seed, r, index);
    acc = op == ReduceOp::sum ? acc + v : std::max(acc, v);
  }
  return acc;
}

// f32 sums of `ranks` values in [-1, 1) differ from the exact sum by a few ulps of `ranks`.
double tolerance(DType dtype, ReduceOp op, int ranks) {
  return dtype == DType::f32 && op == ReduceOp::sum ? 4.0 * ranks * 1.2e-7 * ranks : 0.0;
}

std::string describe(DType dtype, ReduceOp op, std::int64_t n) {
  std::ostringstream out;
  out << dtype_name(dtype) << " " << (op == ReduceOp::sum ? "sum" : "max") << " n=" << n;
  return out.str();
}

// Counts mismatches (reports the first few) between tensor element i and expected(i).
template <typename Expected>
void expect_elements(const Tensor& tensor, std::int64_t count, double tol, Expected expected) {
  int reported = 0;
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const double want = expected(i), got = element(tensor, i);
    if (std::fabs(got - want) > tol) {
      ++bad;
      if (reported++ < 3) ADD_FAILURE() << "element " << i << ": got " << got << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0) << "mismatching elements";
}

TEST(MpiCommunicator, AllReduceMatchesReferenceBitwiseEqualAndSendsTheRingVolume) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  std::uint64_t seed = 100;
  for (DType dtype : kReducible) {
    for (ReduceOp op : kOps) {
      for (std::int64_t n : test_sizes(N)) {
        SCOPED_TRACE(describe(dtype, op, n));
        ++seed;
        Tensor t = Tensor::empty({n}, dtype);
        fill_input(t, seed, r);
        comm->reset_stats();
        comm->all_reduce(t, op);
        expect_elements(t, n, tolerance(dtype, op, N),
                        [&](std::int64_t i) { return reference_reduce(dtype, op, seed, N, i); });
        const std::vector<std::uint64_t> hashes = myriad::testing::hashes_on_all_ranks(t);
        for (int p = 1; p < N; ++p) EXPECT_EQ(hashes[p], hashes[0]) << "rank " << p << " differs from rank 0";
        // Reduce-scatter forwards every chunk but c_r, all-gather every chunk but c_{r+1}.
        const std::int64_t e = static_cast<std::int64_t>(dtype_size(dtype));
        const CommOpStats stats = comm->stats()[CommOp::all_reduce];
        EXPECT_EQ(stats.calls, 1);
        EXPECT_EQ(stats.bytes_sent, e * (2 * n - chunk_elements(n, N, r) - chunk_elements(n, N, r + 1)));
        EXPECT_EQ(stats.bytes_received, e * (2 * n - chunk_elements(n, N, r - 1) - chunk_elements(n, N, r)));
        EXPECT_EQ(myriad::testing::sum_on_all_ranks(stats.bytes_sent), e * 2 * (N - 1) * n);
      }
    }
  }
}

TEST(MpiCommunicator, ReduceScatterLeavesChunkRankOnRank) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  std::uint64_t seed = 200;
  for (DType dtype : kReducible) {
    for (ReduceOp op : kOps) {
      for (std::int64_t n : test_sizes(N)) {
        SCOPED_TRACE(describe(dtype, op, n));
        ++seed;
        Tensor input = Tensor::empty({n}, dtype);
        fill_input(input, seed, r);
        const Tensor before = input.clone();
        const std::int64_t begin = n * r / N, count = chunk_elements(n, N, r);
        Tensor output = Tensor::full({count}, -7, dtype);
        comm->reset_stats();
        comm->reduce_scatter(input, output, op);
        expect_elements(output, count, tolerance(dtype, op, N),
                        [&](std::int64_t i) { return reference_reduce(dtype, op, seed, N, begin + i); });
        EXPECT_EQ(myriad::testing::fnv1a(input), myriad::testing::fnv1a(before)) << "input modified";
        const std::int64_t e = static_cast<std::int64_t>(dtype_size(dtype));
        const CommOpStats stats = comm->stats()[CommOp::reduce_scatter];
        EXPECT_EQ(stats.bytes_sent, e * (n - chunk_elements(n, N, r)));
        EXPECT_EQ(stats.bytes_received, e * (n - chunk_elements(n, N, r - 1)));
      }
    }
  }
}

// Rank owning element i of n elements split over N ranks by the chunk rule.
int owner_of(std::int64_t i, std::int64_t n, int N) {
  int p = 0;
  while (n * (p + 1) / N <= i) ++p;
  return p;
}

TEST(MpiCommunicator, AllGatherConcatenatesChunksInRankOrder) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  std::uint64_t seed = 300;
  for (DType dtype : kReducible) {
    for (std::int64_t n : test_sizes(N)) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n));
      ++seed;
      // Rank p holds elements [n p / N, n (p+1) / N) of a sequence whose element i comes from p.
      const std::int64_t begin = n * r / N, count = chunk_elements(n, N, r);
      Tensor input = Tensor::empty({count}, dtype);
      fill_input(input, seed, r, begin);
      Tensor output = Tensor::zeros({n}, dtype);
      comm->reset_stats();
      comm->all_gather(input, output);
      expect_elements(output, n, 0.0, [&](std::int64_t i) { return input_value(dtype, seed, owner_of(i, n, N), i); });
      const std::int64_t e = static_cast<std::int64_t>(dtype_size(dtype));
      const CommOpStats stats = comm->stats()[CommOp::all_gather];
      EXPECT_EQ(stats.bytes_sent, e * (n - chunk_elements(n, N, r + 1)));
      EXPECT_EQ(stats.bytes_received, e * (n - chunk_elements(n, N, r)));
    }
  }
}

TEST(MpiCommunicator, AllGatherMovesAnyDtype) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  const std::int64_t n = 4099;
  const std::int64_t begin = n * r / N, count = chunk_elements(n, N, r);
  Tensor input = Tensor::empty({count}, DType::u16);
  for (std::int64_t i = 0; i < count; ++i)
    input.data<std::uint16_t>()[i] = static_cast<std::uint16_t>((begin + i) * 13);
  Tensor output = Tensor::zeros({n}, DType::u16);
  comm->all_gather(input, output);
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(output.data<std::uint16_t>()[i], static_cast<std::uint16_t>(i * 13)) << i;
}

TEST(MpiCommunicator, AllGatherInPlace) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  const std::int64_t n = 1001;
  Tensor output = Tensor::zeros({n}, DType::i32);
  const std::int64_t begin = n * r / N, end = n * (r + 1) / N;
  Tensor own = output.slice(0, begin, end);
  fill_input(own, 31, r, begin);
  comm->all_gather(own, output);
  for (std::int64_t i = 0; i < n; ++i)
    ASSERT_EQ(element(output, i), input_value(DType::i32, 31, owner_of(i, n, N), i)) << i;
}

// Children of relative rank v in a binomial tree over N ranks: v + 2^j for every 2^j below the
// lowest set bit of v (every 2^j < N for the root), when v + 2^j < N.
int binomial_children(int v, int N) {
  int children = 0;
  for (int step = 1; step < N; step <<= 1) {
    if (v != 0 && step >= (v & -v)) break;
    if (v + step < N) ++children;
  }
  return children;
}

TEST(MpiCommunicator, BroadcastFromEveryRootSendsTheTreeVolume) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  for (int root = 0; root < N; ++root) {
    for (std::int64_t n : test_sizes(N)) {
      SCOPED_TRACE("root " + std::to_string(root) + " n=" + std::to_string(n));
      const std::uint64_t seed = 400 + static_cast<std::uint64_t>(root);
      Tensor t = Tensor::empty({n}, DType::f32);
      fill_input(t, seed, r);  // non-roots start with their own values, which must be overwritten
      comm->reset_stats();
      comm->broadcast(t, root);
      expect_elements(t, n, 0.0, [&](std::int64_t i) { return input_value(DType::f32, seed, root, i); });
      const CommOpStats stats = comm->stats()[CommOp::broadcast];
      const int v = (r - root + N) % N;
      EXPECT_EQ(stats.bytes_sent, 4 * n * binomial_children(v, N));
      EXPECT_EQ(stats.bytes_received, r == root ? 0 : 4 * n);
      EXPECT_EQ(myriad::testing::sum_on_all_ranks(stats.bytes_sent), 4 * n * (N - 1));
    }
  }
}

TEST(MpiCommunicator, AllToAllExchangesEqualChunks) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  for (DType dtype : kReducible) {
    for (std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3}, std::int64_t{250001}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " chunk=" + std::to_string(k));
      const std::uint64_t seed = 500 + static_cast<std::uint64_t>(k);
      Tensor input = Tensor::empty({N * k}, dtype);
      fill_input(input, seed, r);
      Tensor output = Tensor::zeros({N * k}, dtype);
      comm->reset_stats();
      comm->all_to_all(input, output);
      // Chunk p of the output is chunk r of rank p's input.
      expect_elements(output, N * k, 0.0,
                      [&](std::int64_t i) { return input_value(dtype, seed, static_cast<int>(i / k), r * k + i % k); });
      const std::int64_t e = static_cast<std::int64_t>(dtype_size(dtype));
      const CommOpStats stats = comm->stats()[CommOp::all_to_all];
      EXPECT_EQ(stats.bytes_sent, e * (N - 1) * k);
      EXPECT_EQ(stats.bytes_received, e * (N - 1) * k);
    }
  }
}

TEST(MpiCommunicator, AllToAllVWithUnevenAndEmptyCounts) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  for (std::int64_t scale : {std::int64_t{1}, std::int64_t{20011}}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    auto count = [&](int from, int to) { return ((from * 7 + to * 3 + 1) % 5) * scale; };  // some are 0
    std::vector<std::int64_t> send(N), recv(N);
    std::int64_t send_total = 0, recv_total = 0, sent_to_others = 0;
    for (int p = 0; p < N; ++p) {
      send[p] = count(r, p);
      recv[p] = count(p, r);
      send_total += send[p];
      recv_total += recv[p];
      if (p != r) sent_to_others += send[p];
    }
    const std::uint64_t seed = 600 + static_cast<std::uint64_t>(scale);
    Tensor input = Tensor::empty({send_total}, DType::i64);
    fill_input(input, seed, r);
    Tensor output = Tensor::zeros({recv_total}, DType::i64);
    comm->reset_stats();
    comm->all_to_all_v(input, send, output, recv);
    std::int64_t at = 0;
    for (int p = 0; p < N; ++p) {
      std::int64_t offset_in_p = 0;  // where rank p's chunk for r starts in p's input
      for (int q = 0; q < r; ++q) offset_in_p += count(p, q);
      for (std::int64_t j = 0; j < recv[p]; ++j, ++at) {
        ASSERT_EQ(element(output, at), input_value(DType::i64, seed, p, offset_in_p + j)) << "from " << p << " j " << j;
      }
    }
    EXPECT_EQ(comm->stats()[CommOp::all_to_all].bytes_sent, 8 * sent_to_others);
  }
}

TEST(MpiCommunicator, SendRecvNeighbourExchangeDoesNotDeadlock) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000003}}) {  // eager and rendezvous sizes
    SCOPED_TRACE("n=" + std::to_string(n));
    Tensor out = Tensor::empty({n}, DType::f32);
    fill_input(out, 700, r);
    Tensor in = Tensor::zeros({n}, DType::f32);
    comm->reset_stats();
    WorkHandle sent = comm->send_async(out, next, 3);
    WorkHandle received = comm->recv_async(in, prev, 3);
    received->wait();
    sent->wait();
    EXPECT_TRUE(sent->completed() && received->completed());
    expect_elements(in, n, 0.0, [&](std::int64_t i) { return input_value(DType::f32, 700, prev, i); });
    const CommStats stats = comm->stats();
    EXPECT_EQ(stats[CommOp::send].bytes_sent, 4 * n);
    EXPECT_EQ(stats[CommOp::recv].bytes_received, 4 * n);
    EXPECT_EQ(stats[CommOp::send].calls, 1);
    EXPECT_EQ(stats[CommOp::recv].calls, 1);
  }
}

TEST(MpiCommunicator, RecvMatchesByTag) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  Tensor a = Tensor::full({5}, 10 + r, DType::i32), b = Tensor::full({7}, 20 + r, DType::i32);
  Tensor got_a = Tensor::zeros({5}, DType::i32), got_b = Tensor::zeros({7}, DType::i32);
  std::vector<WorkHandle> handles;
  handles.push_back(comm->send_async(a, next, 1));
  handles.push_back(comm->send_async(b, next, 2));
  handles.push_back(comm->recv_async(got_b, prev, 2));  // posted in the other order
  handles.push_back(comm->recv_async(got_a, prev, 1));
  for (auto& h : handles) h->wait();
  EXPECT_EQ(element(got_a, 4), 10 + prev);
  EXPECT_EQ(element(got_b, 6), 20 + prev);
}

TEST(MpiCommunicator, BarrierCountsNoBytes) {
  auto comm = make_world();
  comm->barrier();
  comm->barrier();
  const CommOpStats stats = comm->stats()[CommOp::barrier];
  EXPECT_EQ(stats.calls, 2);
  EXPECT_EQ(stats.bytes_sent, 0);
  EXPECT_EQ(stats.bytes_received, 0);
}

}  // namespace
}  // namespace myriad::distributed
