// MpiCommunicator beyond single collectives: several async ops in flight waited in and out of
// order, time statistics, issue-time argument errors (and the group staying usable after them),
// errors reported by MPI, split into halves, and transfers cut into many small MPI messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include "mpi_test_support.h"
#include "test_helpers.h"

namespace myriad::distributed {
namespace {

using myriad::testing::element;
using myriad::testing::expect_error_naming;
using myriad::testing::fill_input;
using myriad::testing::input_value;
using myriad::testing::make_world;

double reference_sum(std::uint64_t seed, int ranks, std::int64_t index) {
  double acc = 0;
  for (int r = 0; r < ranks; ++r) acc += input_value(DType::i64, seed, r, index);
  return acc;
}

TEST(MpiCommunicatorAsync, SeveralAllReducesWaitedInOrderAndOutOfOrder) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "waited in reverse" : "waited in order");
    std::vector<Tensor> tensors;
    std::vector<WorkHandle> handles;
    for (int k = 0; k < 5; ++k) {
      tensors.push_back(Tensor::empty({1000 + 50001 * k}, DType::i64));
      fill_input(tensors.back(), 800 + static_cast<std::uint64_t>(k), r);
      handles.push_back(comm->all_reduce_async(tensors.back()));
    }
    if (reverse) std::reverse(handles.begin(), handles.end());
    for (auto& h : handles) h->wait();
    for (auto& h : handles) EXPECT_TRUE(h->completed());
    for (int k = 0; k < 5; ++k) {
      const Tensor& t = tensors[k];
      for (std::int64_t i = 0; i < t.numel(); i += 997) {
        ASSERT_EQ(element(t, i), reference_sum(800 + static_cast<std::uint64_t>(k), N, i))
            << "tensor " << k << " i " << i;
      }
    }
    EXPECT_EQ(comm->stats()[CommOp::all_reduce].calls, reverse ? 10 : 5);
  }
}

TEST(MpiCommunicatorAsync, MixedOpsCompleteInIssueOrder) {
  auto comm = make_world();
  const int N = comm->size(), r = comm->rank();
  Tensor a = Tensor::full({333}, r + 1, DType::i32);
  Tensor gathered = Tensor::zeros({N}, DType::i32);
  Tensor mine = Tensor::full({1}, r, DType::i32);
  Tensor b = Tensor::full({77}, r == N - 1 ? 42 : -1, DType::f32);
  WorkHandle h1 = comm->all_reduce_async(a);
  WorkHandle h2 = comm->all_gather_async(mine, gathered);
  WorkHandle h3 = comm->broadcast_async(b, N - 1);
  h3->wait();  // the last one done implies the earlier ones are
  EXPECT_TRUE(h1->completed());
  EXPECT_TRUE(h2->completed());
  h2->wait();
  h1->wait();
  EXPECT_EQ(element(a, 332), N * (N + 1) / 2);
  for (int p = 0; p < N; ++p) EXPECT_EQ(element(gathered, p), p);
  EXPECT_EQ(element(b, 0), 42);
}

TEST(MpiCommunicatorAsync, TimeStatisticsOfABigOp) {
  auto comm = make_world();
  Tensor t = Tensor::full({1 << 22}, 1.0, DType::f32);  // 16 MiB
  const auto start = std::chrono::steady_clock::now();
  comm->all_reduce(t);
  const double call = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const CommOpStats stats = comm->stats()[CommOp::all_reduce];
  EXPECT_EQ(stats.calls, 1);
  EXPECT_GT(stats.seconds, 0.0);
  EXPECT_GT(stats.wait_seconds, 0.0);
  // Both within the blocking call (the wait includes the caller's wake-up, the op's time does not).
  EXPECT_LE(stats.wait_seconds, call);
  EXPECT_LE(stats.seconds, call);
  EXPECT_EQ(element(t, 12345), comm->size());
  const CommOpStats total = comm->stats().total();
  EXPECT_EQ(total.bytes_sent, stats.bytes_sent);
  comm->reset_stats();
  EXPECT_EQ(comm->stats().total().calls, 0);
}

TEST(MpiCommunicatorErrors, BadArgumentsThrowNamingOpGroupAndShapesAndLeaveTheGroupUsable) {
  auto comm = make_world("errors");
  const int N = comm->size(), r = comm->rank();
  expect_error_naming([&] { comm->all_reduce(Tensor::zeros({4}, DType::bf16)); },
                      {"all_reduce", "group 'errors'", "rank " + std::to_string(r) + " of", "bf16"});
  expect_error_naming([&] { comm->all_reduce(Tensor::zeros({2, 3}).transpose(0, 1)); }, {"all_reduce", "contiguous"});
  expect_error_naming([&] { comm->all_reduce(Tensor()); }, {"all_reduce", "undefined"});
  const std::int64_t expected_chunk = 10 * (r + 1) / N - 10 * r / N;
  expect_error_naming(
      [&] { comm->reduce_scatter(Tensor::zeros({10}), Tensor::zeros({expected_chunk + 1})); },
      {"reduce_scatter", "group 'errors'", "f32[10]", "f32[" + std::to_string(expected_chunk + 1) + "]"});
  expect_error_naming([&] { comm->reduce_scatter(Tensor::zeros({10}), Tensor::zeros({expected_chunk}, DType::i32)); },
                      {"reduce_scatter", "dtype"});
  expect_error_naming([&] { comm->all_gather(Tensor::zeros({expected_chunk + 2}), Tensor::zeros({10})); },
                      {"all_gather", "group 'errors'", "f32[10]"});
  expect_error_naming([&] { comm->broadcast(Tensor::zeros({3}), N); }, {"broadcast", "root " + std::to_string(N)});
  expect_error_naming([&] { comm->send(Tensor::zeros({3}), N); }, {"send", "peer " + std::to_string(N)});
  expect_error_naming([&] { comm->recv(Tensor::zeros({3}), -1); }, {"recv", "peer -1"});
  expect_error_naming([&] { comm->send(Tensor::zeros({3}), r); }, {"send", "self"});
  expect_error_naming([&] { comm->send(Tensor::zeros({3}), (r + 1) % N, -5); }, {"send", "tag -5"});
  expect_error_naming([&] { comm->all_to_all(Tensor::zeros({N * 3 + 1}), Tensor::zeros({N * 3 + 1})); },
                      {"all_to_all", "equal chunks"});
  std::vector<std::int64_t> counts(N, 1);
  expect_error_naming([&] { comm->all_to_all_v(Tensor::zeros({N}), counts, Tensor::zeros({N + 1}), counts); },
                      {"all_to_all_v", "recv counts add up to " + std::to_string(N)});
  expect_error_naming(
      [&] { comm->all_to_all_v(Tensor::zeros({N}), std::vector<std::int64_t>(N + 1, 0), Tensor::zeros({N}), counts); },
      {"all_to_all_v", "send counts for a group of " + std::to_string(N)});
  expect_error_naming([&] { comm->split(-1, 0, "bad"); }, {"split", "colour -1"});
  // Nothing was enqueued by the failed calls: the group still works.
  Tensor t = Tensor::full({5}, 1, DType::i32);
  comm->all_reduce(t);
  EXPECT_EQ(element(t, 4), N);
  EXPECT_EQ(comm->stats().total().calls, 1);
}

TEST(MpiCommunicatorErrors, SizeMismatchBetweenRanksIsReportedByTheReceiver) {
  auto comm = make_world("mismatch");
  const int r = comm->rank();
  if (r == 0) {
    comm->send(Tensor::zeros({10}), 1, 9);
  } else if (r == 1) {
    expect_error_naming([&] { comm->recv(Tensor::zeros({20}), 0, 9); },
                        {"recv", "group 'mismatch'", "rank 1", "from rank 0", "40 bytes", "80"});
    // The group is now unusable on this rank; later ops fail at once instead of hanging.
    expect_error_naming([&] { comm->all_reduce(Tensor::zeros({1})); }, {"unusable", "mismatch"});
  }
}

TEST(MpiCommunicatorErrors, TruncationIsAnMpiErrorNamingTheOp) {
  auto comm = make_world("truncate");
  const int r = comm->rank();
  if (r == 0) {
    comm->send(Tensor::zeros({20}), 1);
  } else if (r == 1) {
    expect_error_naming([&] { comm->recv(Tensor::zeros({10}), 0); }, {"recv", "group 'truncate'", "MPI_ERR_TRUNCATE"});
  }
}

TEST(MpiCommunicatorSplit, HalvesReduceWithinThemselves) {
  auto world = make_world();
  const int N = world->size(), r = world->rank();
  const int half = N / 2;
  const int color = r < half ? 0 : 1;
  // key = -r: ranks of each half are numbered in reverse world order.
  std::unique_ptr<Communicator> sub = world->split(color, -r, "half");
  const int members = color == 0 ? half : N - half;
  const int first = color == 0 ? 0 : half;
  EXPECT_EQ(sub->name(), "half");
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), first + members - 1 - r);
  Tensor t = Tensor::full({1001}, r, DType::i64);
  sub->all_reduce(t);
  std::int64_t expected = 0;
  for (int p = first; p < first + members; ++p) expected += p;
  EXPECT_EQ(element(t, 1000), expected);
  EXPECT_EQ(sub->stats()[CommOp::all_reduce].calls, 1);
  EXPECT_EQ(world->stats()[CommOp::all_reduce].calls, 0);  // split is not an op of the statistics
  // The world still works after the split, interleaved with the halves.
  Tensor w = Tensor::full({3}, 1, DType::i32);
  WorkHandle hw = world->all_reduce_async(w);
  Tensor s = Tensor::full({3}, 1, DType::i32);
  WorkHandle hs = sub->all_reduce_async(s);
  hs->wait();
  hw->wait();
  EXPECT_EQ(element(w, 0), N);
  EXPECT_EQ(element(s, 0), members);
}

TEST(MpiCommunicatorPieces, TransfersCutIntoSmallMessagesStayCorrect) {
  auto comm = make_world("pieces", MpiCommunicator::Options{.max_message_bytes = 4096});
  const int N = comm->size(), r = comm->rank();
  const std::int64_t n = 100003;  // ~100 pieces per step
  Tensor t = Tensor::empty({n}, DType::i64);
  fill_input(t, 900, r);
  comm->all_reduce(t);
  for (std::int64_t i = 0; i < n; i += 101) ASSERT_EQ(element(t, i), reference_sum(900, N, i)) << i;
  Tensor b = Tensor::empty({n}, DType::i64);
  fill_input(b, 901, r);
  comm->broadcast(b, N - 1);
  for (std::int64_t i = 0; i < n; i += 101) ASSERT_EQ(element(b, i), input_value(DType::i64, 901, N - 1, i)) << i;
  Tensor out = Tensor::empty({n}, DType::i64), in = Tensor::zeros({n}, DType::i64);
  fill_input(out, 902, r);
  WorkHandle hs = comm->send_async(out, (r + 1) % N);
  comm->recv(in, (r + N - 1) % N);
  hs->wait();
  for (std::int64_t i = 0; i < n; i += 101) ASSERT_EQ(element(in, i), input_value(DType::i64, 902, (r + N - 1) % N, i));
  EXPECT_EQ(comm->stats()[CommOp::send].bytes_sent, 8 * n);
}

}  // namespace
}  // namespace myriad::distributed
