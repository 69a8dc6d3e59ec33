// LoopbackCommunicator: identity collectives of a world of one, the shared argument checks
// (named op, group and shapes), statistics that count calls but no bytes, split.
#include <gtest/gtest.h>

#include "myriad/distributed/loopback_communicator.h"
#include "test_helpers.h"

namespace myriad::distributed {
namespace {

using myriad::testing::expect_error_naming;

Tensor iota(std::int64_t n, DType dtype = DType::f32) {
  Tensor t = Tensor::empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) t.set({i}, static_cast<double>(i * 3 + 1));
  return t;
}

TEST(LoopbackCommunicator, IsAWorldOfOne) {
  LoopbackCommunicator comm("dp");
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.name(), "dp");
  EXPECT_EQ(LoopbackCommunicator().name(), "world");
}

TEST(LoopbackCommunicator, CollectivesAreTheIdentity) {
  LoopbackCommunicator comm;
  for (DType dtype : {DType::f32, DType::i32, DType::i64}) {
    Tensor t = iota(7, dtype);
    comm.all_reduce(t, ReduceOp::sum);
    comm.all_reduce(t, ReduceOp::max);
    comm.broadcast(t, 0);
    for (std::int64_t i = 0; i < 7; ++i) EXPECT_EQ(t.get({i}), i * 3 + 1);
    Tensor out = Tensor::zeros({7}, dtype);
    comm.reduce_scatter(t, out);
    EXPECT_EQ(out.get({6}), 19);
    Tensor gathered = Tensor::zeros({7}, dtype);
    comm.all_gather(out, gathered);
    EXPECT_EQ(gathered.get({5}), 16);
    Tensor exchanged = Tensor::zeros({7}, dtype);
    comm.all_to_all(t, exchanged);
    EXPECT_EQ(exchanged.get({3}), 10);
    Tensor exchanged_v = Tensor::zeros({7}, dtype);
    comm.all_to_all_v(t, {7}, exchanged_v, {7});
    EXPECT_EQ(exchanged_v.get({0}), 1);
  }
  comm.all_reduce(Tensor::zeros({0}));  // empty tensors are fine
  comm.barrier();
}

TEST(LoopbackCommunicator, HandlesAreCompleted) {
  LoopbackCommunicator comm;
  WorkHandle h = comm.all_reduce_async(iota(3));
  EXPECT_TRUE(h->completed());
  h->wait();
  h->wait();
  EXPECT_TRUE(comm.barrier_async()->completed());
}

TEST(LoopbackCommunicator, StatsCountCallsAndNoBytes) {
  LoopbackCommunicator comm;
  Tensor t = iota(100);
  comm.all_reduce(t);
  comm.all_reduce(t);
  comm.broadcast(t, 0);
  comm.barrier();
  CommStats stats = comm.stats();
  EXPECT_EQ(stats[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(stats[CommOp::broadcast].calls, 1);
  EXPECT_EQ(stats[CommOp::barrier].calls, 1);
  EXPECT_EQ(stats.total().calls, 4);
  EXPECT_EQ(stats.total().bytes_sent, 0);
  EXPECT_EQ(stats.total().bytes_received, 0);
  comm.reset_stats();
  EXPECT_EQ(comm.stats().total().calls, 0);
}

TEST(LoopbackCommunicator, BadArgumentsNameOpGroupAndShapes) {
  LoopbackCommunicator comm("tp");
  expect_error_naming([&] { comm.all_reduce(Tensor::zeros({4}, DType::bf16)); },
                      {"all_reduce", "group 'tp'", "rank 0 of 1", "bf16"});
  expect_error_naming([&] { comm.reduce_scatter(Tensor::zeros({4}), Tensor::zeros({3})); },
                      {"reduce_scatter", "group 'tp'", "f32[4]", "f32[3]"});
  expect_error_naming([&] { comm.all_gather(Tensor::zeros({5}), Tensor::zeros({4})); }, {"all_gather", "f32[5]"});
  expect_error_naming([&] { comm.all_reduce(Tensor::zeros({2, 3}).transpose(0, 1)); }, {"contiguous"});
  expect_error_naming([&] { comm.broadcast(Tensor::zeros({1}), 1); }, {"broadcast", "root 1"});
  expect_error_naming([&] { comm.send(Tensor::zeros({1}), 0); }, {"send", "group 'tp'", "self"});
  expect_error_naming([&] { comm.recv(Tensor::zeros({1}), 0); }, {"recv", "self"});
  expect_error_naming([&] { comm.all_to_all_v(Tensor::zeros({3}), {3}, Tensor::zeros({2}), {2}); },
                      {"all_to_all_v", "itself"});
  expect_error_naming([&] { comm.all_to_all_v(Tensor::zeros({3}), {2}, Tensor::zeros({3}), {3}); },
                      {"all_to_all_v", "send counts add up to 2"});
  EXPECT_EQ(comm.stats().total().calls, 0);  // failed calls are not counted
}

TEST(LoopbackCommunicator, SplitGivesAnotherWorldOfOne) {
  LoopbackCommunicator comm;
  std::unique_ptr<Communicator> sub = comm.split(3, 0, "pp");
  EXPECT_EQ(sub->name(), "pp");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_THROW(comm.split(-1, 0, "x"), Error);
}

TEST(LoopbackCommunicatorDeathTest, AbortPrintsTheReasonAndExits) {
  LoopbackCommunicator comm;
  EXPECT_EXIT(comm.abort(3, "loss is NaN"), ::testing::ExitedWithCode(3), "\\[rank 0\\] fatal: loss is NaN");
}

}  // namespace
}  // namespace myriad::distributed
