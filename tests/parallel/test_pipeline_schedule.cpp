// Pipeline schedules as data: a worked 1F1B example spelled out action by action, the GPipe / 1F1B /
// interleaved grids (pairings, order, idle fraction equal to the bubble formula, peak in-flight),
// broken schedules reported with rank and micro-batch, and argument errors naming the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "myriad/parallel/pipeline_schedule.h"
#include "test_helpers.h"

namespace myriad::parallel {
namespace {

using myriad::testing::expect_error_naming;
using Lists = std::vector<std::vector<PipelineAction>>;
using A = PipelineAction;

A fwd(int mb, int chunk = 0) { return {A::forward, mb, chunk, -1}; }
A bwd(int mb, int chunk = 0) { return {A::backward, mb, chunk, -1}; }
A send_act(int mb, int peer, int chunk = 0) { return {A::send_activation, mb, chunk, peer}; }
A recv_act(int mb, int peer, int chunk = 0) { return {A::recv_activation, mb, chunk, peer}; }
A send_grad(int mb, int peer, int chunk = 0) { return {A::send_gradient, mb, chunk, peer}; }
A recv_grad(int mb, int peer, int chunk = 0) { return {A::recv_gradient, mb, chunk, peer}; }

// p = 2, m = 3, 1F1B. Rank 0 warms up with one forward; rank 1 (last stage) has no warm-up.
Lists worked_example() {
  return {
      {fwd(0), send_act(0, 1), fwd(1), send_act(1, 1), recv_grad(0, 1), bwd(0), fwd(2), send_act(2, 1), recv_grad(1, 1),
       bwd(1), recv_grad(2, 1), bwd(2)},
      {recv_act(0, 0), fwd(0), bwd(0), send_grad(0, 0), recv_act(1, 0), fwd(1), bwd(1), send_grad(1, 0), recv_act(2, 0),
       fwd(2), bwd(2), send_grad(2, 0)},
  };
}

TEST(PipelineSchedule, WorkedExampleOneFOneB) {
  const Lists lists = build_schedule(PipelineSchedule::one_f_one_b, 2, 3, 1);
  ASSERT_EQ(lists.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(lists[r].size(), worked_example()[r].size()) << "rank " << r;
    for (std::size_t i = 0; i < lists[r].size(); ++i) {
      EXPECT_EQ(lists[r][i], worked_example()[r][i]) << "rank " << r << " step " << i << ": " << describe(lists[r][i]);
    }
  }
  // Forward 1, backward 1: rank 0 F0 [0,1] F1 [1,2] B0 [3,4] F2 [4,5] B1 [5,6] B2 [7,8];
  // rank 1 F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5] F2 [5,6] B2 [6,7]. 6 busy of 8 on each: 1/4 idle.
  const ScheduleCheck check = simulate_schedule(lists, 2, 3, 1, 1.0);
  ASSERT_TRUE(check.ok) << check.problem;
  EXPECT_EQ(check.makespan, 8.0);
  EXPECT_EQ(check.steps, 8);
  EXPECT_DOUBLE_EQ(check.idle_fraction, 0.25);
  EXPECT_EQ(check.peak_in_flight, (std::vector<int>{2, 1}));
  EXPECT_TRUE(check.fifo_per_peer);
  EXPECT_EQ(describe(lists[0][1]), "send_activation(micro-batch 0, chunk 0) to rank 1");
  EXPECT_EQ(describe(lists[1][0]), "recv_activation(micro-batch 0, chunk 0) from rank 0");
}

// Checks that need no simulator: on each rank every (micro-batch, chunk) is run forward once and
// backward once, forward first; every send has exactly one matching recv on its peer and back.
void expect_well_paired(const Lists& lists, int p, int m, int v, const std::string& label) {
  std::map<std::tuple<int, int, int>, int> messages;  // (kind, micro-batch, sender's global stage) -> sends - recvs
  for (int r = 0; r < p; ++r) {
    std::map<std::pair<int, int>, int> forward_at, backward_at;
    for (int i = 0; i < static_cast<int>(lists[r].size()); ++i) {
      const A& a = lists[r][i];
      const int g = a.chunk * p + r;
      const std::pair<int, int> key{a.micro_batch, a.chunk};
      switch (a.type) {
        case A::forward:
          EXPECT_TRUE(forward_at.emplace(key, i).second) << label << " rank " << r;
          break;
        case A::backward:
          EXPECT_TRUE(backward_at.emplace(key, i).second) << label << " rank " << r;
          break;
        case A::send_activation:
          ++messages[{0, a.micro_batch, g}];
          break;
        case A::recv_activation:
          --messages[{0, a.micro_batch, g - 1}];
          break;
        case A::send_gradient:
          ++messages[{1, a.micro_batch, g}];
          break;
        case A::recv_gradient:
          --messages[{1, a.micro_batch, g + 1}];
          break;
      }
    }
    EXPECT_EQ(static_cast<int>(forward_at.size()), m * v) << label << " rank " << r;
    EXPECT_EQ(static_cast<int>(backward_at.size()), m * v) << label << " rank " << r;
    for (const auto& [key, at] : forward_at) {
      ASSERT_TRUE(backward_at.count(key)) << label << " rank " << r << " micro-batch " << key.first;
      EXPECT_LT(at, backward_at[key]) << label << " rank " << r << " micro-batch " << key.first;
    }
  }
  // m micro-batches cross each of the p v - 1 stage boundaries once forward and once backward.
  EXPECT_EQ(static_cast<int>(messages.size()), 2 * m * (p * v - 1)) << label;
  for (const auto& [key, balance] : messages) EXPECT_EQ(balance, 0) << label << " micro-batch " << std::get<1>(key);
}

int expected_peak(PipelineSchedule kind, int p, int m, int v, int r) {
  switch (kind) {
    case PipelineSchedule::gpipe:
      return m;
    case PipelineSchedule::one_f_one_b:
      return std::min(p - r, m);
    case PipelineSchedule::interleaved:
      return std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
  }
  return -1;
}

struct Case {
  PipelineSchedule kind;
  int v;
};
constexpr Case kCases[] = {{PipelineSchedule::gpipe, 1},
                           {PipelineSchedule::one_f_one_b, 1},
                           {PipelineSchedule::interleaved, 2},
                           {PipelineSchedule::interleaved, 3}};

// The documented model: forward 1, backward b, free communication, buffered sends. The formulas
// are exact there for b = 1 and for b = 2 alike.
TEST(PipelineSchedule, GridMatchesBubbleFormulaPairingsAndPeaks) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      for (const Case& c : kCases) {
        const std::string label = std::string(choice_name(c.kind)) + " p " + std::to_string(p) + " m " +
                                  std::to_string(m) + " v " + std::to_string(c.v);
        const Lists lists = build_schedule(c.kind, p, m, c.v);
        ASSERT_EQ(static_cast<int>(lists.size()), p) << label;
        expect_well_paired(lists, p, m, c.v, label);
        for (double b : {1.0, 2.0}) {
          const ScheduleCheck check = simulate_schedule(lists, p, m, c.v, b);
          ASSERT_TRUE(check.ok) << label << " b " << b << ": " << check.problem;
          EXPECT_TRUE(check.problem.empty());
          EXPECT_TRUE(check.fifo_per_peer) << label;
          EXPECT_NEAR(check.idle_fraction, bubble_formula(c.kind, p, m, c.v), 1e-12) << label << " b " << b;
          EXPECT_DOUBLE_EQ(check.makespan, (c.v * m + p - 1) * (1.0 + b)) << label << " b " << b;
          ASSERT_EQ(static_cast<int>(check.peak_in_flight.size()), p);
          for (int r = 0; r < p; ++r) {
            EXPECT_EQ(check.peak_in_flight[r], expected_peak(c.kind, p, m, c.v, r)) << label << " rank " << r;
          }
          if (c.kind == PipelineSchedule::one_f_one_b) {
            for (int r = 0; r < p; ++r) EXPECT_LE(check.peak_in_flight[r], p - r) << label;
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, BubbleFormulas) {
  EXPECT_DOUBLE_EQ(bubble_formula(PipelineSchedule::gpipe, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_formula(PipelineSchedule::one_f_one_b, 4, 8, 1), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_formula(PipelineSchedule::interleaved, 4, 8, 2), 3.0 / 19.0);
  EXPECT_EQ(bubble_formula(PipelineSchedule::one_f_one_b, 1, 5, 1), 0.0);
  const ScheduleCheck single = simulate_schedule(build_schedule(PipelineSchedule::one_f_one_b, 1, 5, 1), 1, 5, 1);
  ASSERT_TRUE(single.ok) << single.problem;
  EXPECT_EQ(single.idle_fraction, 0.0);
  EXPECT_EQ(single.steps, 15);  // 5 x (1 + 2)
}

// Prints the table of docs/parallelism.md (measured, b = 2; b = 1 gives the same numbers).
TEST(PipelineSchedule, PrintIdleFractionTable) {
  std::printf("| p | m | GPipe | 1F1B | interleaved v=2 | interleaved v=3 |\n|---|---|---|---|---|---|\n");
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      std::printf("| %d | %d |", p, m);
      for (const Case& c : kCases) {
        const ScheduleCheck check = simulate_schedule(build_schedule(c.kind, p, m, c.v), p, m, c.v, 2.0);
        ASSERT_TRUE(check.ok) << check.problem;
        std::printf(" %.4f |", check.idle_fraction);
      }
      std::printf("\n");
    }
  }
}

void expect_problem(const Lists& lists, int p, int m, int v, std::initializer_list<std::string> needles) {
  const ScheduleCheck check = simulate_schedule(lists, p, m, v);
  EXPECT_FALSE(check.ok);
  for (const std::string& needle : needles) {
    EXPECT_NE(check.problem.find(needle), std::string::npos) << "'" << needle << "' not in: " << check.problem;
  }
}

TEST(PipelineSchedule, RecvWithNoSendIsReported) {
  Lists lists = worked_example();
  lists[0].erase(lists[0].begin() + 7);  // rank 0 never sends the activation of micro-batch 2
  expect_problem(lists, 2, 3, 1,
                 {"receive with no matching send", "rank 1 waits at action 8",
                  "recv_activation(micro-batch 2, chunk 0) from rank 0, "
                  "which rank 0 does not send in the rest of its list"});
}

TEST(PipelineSchedule, BackwardBeforeForwardIsReported) {
  Lists lists = worked_example();
  std::swap(lists[1][1], lists[1][2]);  // rank 1: backward of micro-batch 0 before its forward
  expect_problem(lists, 2, 3, 1, {"rank 1, action 1", "backward(micro-batch 0, chunk 0)", "before its forward"});
}

TEST(PipelineSchedule, SendsMovedBehindReceivesDeadlock) {
  Lists lists = worked_example();
  std::swap(lists[0][3], lists[0][4]);  // rank 0 waits for gradient 0 before sending activation 1
  std::swap(lists[1][3], lists[1][4]);  // rank 1 waits for activation 1 before sending gradient 0
  expect_problem(lists, 2, 3, 1,
                 {"deadlock", "rank 0 waits at action 3 in recv_gradient(micro-batch 0, chunk 0) from rank 1",
                  "rank 1 waits at action 3 in recv_activation(micro-batch 1, chunk 0) from rank 0"});
}

TEST(PipelineSchedule, OtherMalformedSchedulesAreReported) {
  Lists lists = worked_example();
  lists[1].pop_back();  // rank 1 never sends gradient 2; rank 0 waits for it
  expect_problem(lists, 2, 3, 1,
                 {"receive with no matching send: rank 0 waits at action 10 in recv_gradient(micro-batch 2, chunk 0) "
                  "from rank 1, which rank 1 finished its list without sending"});

  lists = worked_example();
  lists[0].insert(lists[0].begin() + 2, send_act(0, 1));  // sent twice
  expect_problem(lists, 2, 3, 1, {"rank 0, action 2", "micro-batch 0", "sent a second time"});

  lists = worked_example();
  lists[1].erase(lists[1].begin() + 9, lists[1].begin() + 12);  // rank 1 drops F2, B2, send_grad 2
  lists[0].erase(lists[0].begin() + 10, lists[0].end());        // and rank 0 stops waiting for it
  expect_problem(lists, 2, 3, 1, {"rank 0 never runs the backward of micro-batch 2"});

  lists = worked_example();
  lists[1].erase(lists[1].begin() + 8, lists[1].begin() + 12);  // rank 1 never receives activation 2
  lists[0].erase(lists[0].begin() + 10, lists[0].end());
  lists[1].insert(lists[1].end(), {fwd(2), bwd(2)});
  expect_problem(lists, 2, 3, 1, {"rank 1, action 8", "forward(micro-batch 2, chunk 0)", "before its recv_activation"});

  lists = worked_example();
  lists[1][0].peer = 5;
  expect_problem(lists, 2, 3, 1, {"rank 1, action 0", "peer should be rank 0"});

  lists = worked_example();
  lists[0][0].micro_batch = 3;
  expect_problem(lists, 2, 3, 1, {"rank 0, action 0", "micro-batch outside [0, 3)"});

  lists = worked_example();
  lists[1].push_back(send_act(2, 0));  // the last stage has nowhere to send
  expect_problem(lists, 2, 3, 1, {"rank 1, action 12", "no next stage"});
}

TEST(PipelineSchedule, WrapAroundAndEndsAreChecked) {
  // Interleaved p = 2, v = 2: global stage 1 (rank 1, chunk 0) feeds global stage 2 (rank 0, chunk 1).
  Lists lists = build_schedule(PipelineSchedule::interleaved, 2, 2, 2);
  EXPECT_EQ(std::count(lists[1].begin(), lists[1].end(), send_act(1, 0, 0)), 1);
  ASSERT_TRUE(simulate_schedule(lists, 2, 2, 2).ok);
  auto it = std::find(lists[0].begin(), lists[0].end(), recv_act(1, 1, 1));
  ASSERT_NE(it, lists[0].end());
  lists[0].erase(it);
  expect_problem(lists, 2, 2, 2, {"rank 0", "forward(micro-batch 1, chunk 1)", "before its recv_activation"});

  lists = build_schedule(PipelineSchedule::gpipe, 3, 1, 1);
  lists[0].push_back({A::send_gradient, 0, 0, 2});  // global stage 0 has no previous stage
  expect_problem(lists, 3, 1, 1, {"rank 0, action 4", "no previous stage"});
}

TEST(PipelineSchedule, ArgumentErrorsNameTheNumbers) {
  expect_error_naming([] { build_schedule(PipelineSchedule::gpipe, 0, 4, 1); }, {"pipeline stages (0)"});
  expect_error_naming([] { build_schedule(PipelineSchedule::one_f_one_b, 2, 0, 1); }, {"micro-batches (0)"});
  expect_error_naming([] { build_schedule(PipelineSchedule::one_f_one_b, 2, 4, 0); }, {"virtual stages (0)"});
  expect_error_naming([] { build_schedule(PipelineSchedule::one_f_one_b, 2, 4, 3); }, {"3 virtual stages", "1f1b"});
  expect_error_naming([] { build_schedule(PipelineSchedule::gpipe, 2, 4, 2); }, {"2 virtual stages", "gpipe"});
  expect_error_naming([] { build_schedule(PipelineSchedule::interleaved, 1, 4, 2); }, {">= 2 pipeline stages, got 1"});
  expect_error_naming([] { build_schedule(PipelineSchedule::interleaved, 4, 6, 2); },
                      {"micro-batches (6)", "pipeline stages (4)"});
  const Lists lists = build_schedule(PipelineSchedule::one_f_one_b, 2, 3, 1);
  expect_error_naming([&] { simulate_schedule(lists, 3, 3, 1); }, {"2 rank lists for 3 stages"});
  expect_error_naming([&] { simulate_schedule(lists, 2, 3, 1, 0.0); }, {"backward_cost must be > 0, got 0"});
  expect_error_naming([&] { simulate_schedule(lists, 2, -1, 1); }, {"micro-batches (-1)"});
}

}  // namespace
}  // namespace myriad::parallel
