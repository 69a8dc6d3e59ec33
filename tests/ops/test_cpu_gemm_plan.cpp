// The measured CPU GEMM plan (ops/cpu_gemm_plan.h, cpu_gemm.h): its text round-trips and refuses
// malformed lines naming the source and line; every route this process has matches a float64
// GEMM on fresh random inputs; an installed plan decides the route of the shapes it lists (bit for
// bit that route's result) and nothing else; recording sees calls outside parallel constructs only
// (active or not), and a recording destroyed on another thread frees its thread's slot;
// timing covers every route and the plan takes the fastest.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {
namespace {

// Uninstalls whatever plan a test installed.
struct PlanGuard {
  ~PlanGuard() { set_gemm_plan(nullptr); }
};

std::vector<float> uniform_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Operands of `shape`, stored as the calls store them (a is k x m when transposed).
struct Operands {
  GemmShape shape;
  std::vector<float> a, b;
  std::int64_t lda() const { return shape.trans_a ? shape.m : shape.k; }
  std::int64_t ldb() const { return shape.trans_b ? shape.k : shape.n; }
  double a_at(std::int64_t i, std::int64_t l) const {
    return a[static_cast<std::size_t>(shape.trans_a ? l * lda() + i : i * lda() + l)];
  }
  double b_at(std::int64_t l, std::int64_t j) const {
    return b[static_cast<std::size_t>(shape.trans_b ? j * ldb() + l : l * ldb() + j)];
  }
};

Operands operands(const GemmShape& shape, std::mt19937& rng) {
  return {shape, uniform_values(static_cast<std::size_t>(shape.m * shape.k), rng),
          uniform_values(static_cast<std::size_t>(shape.k * shape.n), rng)};
}

std::vector<float> run_route(const Operands& o, const std::optional<GemmRoute>& route) {
  std::vector<float> c(static_cast<std::size_t>(o.shape.m * o.shape.n), std::nanf(""));
  const GemmShape& s = o.shape;
  if (route) {
    sgemm_on_route(*route, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda(), o.b.data(), o.ldb(), 0.0f,
                   c.data(), s.n);
  } else {
    sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, o.a.data(), o.lda(), o.b.data(), o.ldb(), 0.0f, c.data(), s.n);
  }
  return c;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(CpuGemmPlan, TextRoundTripsAndSorts) {
  GemmPlan plan;
  plan.set({true, false, 768, 3072, 256}, GemmRoute::onednn);
  plan.set({false, true, 256, 2304, 768}, GemmRoute::onednn_cut);
  plan.set({false, false, 7, 9, 11}, GemmRoute::openblas);
  const std::string text = plan.to_text();
  EXPECT_EQ(text, "N N 7 9 11 openblas\nN T 256 2304 768 onednn_cut\nT N 768 3072 256 onednn\n");
  const GemmPlan back = GemmPlan::from_text(text, "test");
  EXPECT_EQ(back.routes(), plan.routes());
  EXPECT_EQ(back.route({false, true, 256, 2304, 768}), GemmRoute::onednn_cut);
  EXPECT_FALSE(back.route({false, true, 256, 2304, 769}).has_value());
}

TEST(CpuGemmPlan, MalformedLinesAreRefusedNamingTheSourceAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"N N 7 9 11 openblas\nX N 1 2 3 onednn\n", "line 2"},
      {"N N 7 9 onednn\n", "line 1"},
      {"N N 7 9 11 mkl\n", "'mkl'"},
      {"N N 0 9 11 openblas\n", "positive"},
      {"N N 7 9 11 openblas extra\n", "line 1"},
      {"N N 7 9 11 openblas\nN N 7 9 11 onednn\n", "repeats"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      (void)GemmPlan::from_text(text, "ckpt/manifest.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("ckpt/manifest.json"), std::string::npos) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
    }
  }
}

TEST(CpuGemmPlan, EveryRouteMatchesFloat64) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<GemmShape> shapes = {
      {false, false, 37, 53, 29}, {true, false, 64, 130, 70}, {false, true, 33, 1030, 96}, {true, true, 2049, 17, 40}};
  for (GemmRoute route : available_gemm_routes()) {
    for (const GemmShape& shape : shapes) {
      const Operands o = operands(shape, rng);
      const std::vector<float> c = run_route(o, route);
      double worst = 0.0;
      for (std::int64_t i = 0; i < shape.m; ++i) {
        for (std::int64_t j = 0; j < shape.n; ++j) {
          double sum = 0.0;
          for (std::int64_t l = 0; l < shape.k; ++l) sum += o.a_at(i, l) * o.b_at(l, j);
          worst = std::max(worst, std::abs(sum - c[static_cast<std::size_t>(i * shape.n + j)]));
        }
      }
      // |a|, |b| < 1: each sum's f32 error is below k * 2^-24 * k, loosely.
      EXPECT_LT(worst, 1e-5 * static_cast<double>(shape.k)) << gemm_route_name(route) << " " << describe(shape);
    }
  }
}

TEST(CpuGemmPlan, AnInstalledPlanDecidesTheRouteOfTheShapesItLists) {
  if (gemm_library() != GemmLibrary::onednn) GTEST_SKIP() << "one route only: oneDNN is not this process's library";
  PlanGuard guard;
  std::mt19937 rng(std::random_device{}());
  const GemmShape listed{false, true, 48, 80, 1000}, other{false, true, 48, 80, 999};
  const Operands o = operands(listed, rng), p = operands(other, rng);
  const std::vector<float> on_openblas = run_route(o, GemmRoute::openblas), on_onednn = run_route(o, GemmRoute::onednn);
  if (same_bits(on_openblas, on_onednn)) GTEST_SKIP() << "the two libraries agree bit for bit on these inputs";
  const std::vector<float> other_by_rule = run_route(p, std::nullopt);
  for (GemmRoute route : {GemmRoute::openblas, GemmRoute::onednn}) {
    auto plan = std::make_shared<GemmPlan>();
    plan->set(listed, route);
    set_gemm_plan(plan);
    EXPECT_TRUE(same_bits(run_route(o, std::nullopt), route == GemmRoute::openblas ? on_openblas : on_onednn))
        << gemm_route_name(route);
    EXPECT_TRUE(same_bits(run_route(p, std::nullopt), other_by_rule)) << "a shape the plan does not list moved";
  }
  set_gemm_plan(nullptr);
  EXPECT_TRUE(same_bits(run_route(o, std::nullopt), on_onednn)) << "the rule (oneDNN) after the plan was removed";
}

TEST(CpuGemmPlan, RecordingSeesCallsOutsideParallelRegionsOnly) {
  std::vector<float> a(64 * 64, 0.5f), b(64 * 64, 0.25f), c(64 * 64);
  auto call = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    sgemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  };
  GemmShapeRecording recording;
  EXPECT_THROW(GemmShapeRecording nested, Error);
  call(8, 16, 32);
  call(8, 16, 32);
  call(4, 4, 0);  // no product
#pragma omp parallel num_threads(2)
  {
    std::vector<float> own(64 * 64);
    sgemm(false, false, 5, 6, 7, 1.0f, a.data(), 7, b.data(), 6, 0.0f, own.data(), 6);
  }
  const bool never = a[0] > 1.0f;  // an inactive parallel construct: still inside one
#pragma omp parallel if (never)
  call(6, 6, 6);
  call(2, 3, 4);
  const std::vector<GemmShape> expected = {{false, false, 2, 3, 4}, {false, false, 8, 16, 32}};
  EXPECT_EQ(recording.shapes(), expected);
}

TEST(CpuGemmPlan, ARecordingEndedOnAnotherThreadFreesItsThreadsSlot) {
  std::optional<GemmShapeRecording> recording;
  recording.emplace();
  std::thread([&] { recording.reset(); }).join();
  std::vector<float> a(16, 1.0f), c(16);
  sgemm(false, false, 4, 4, 4, 1.0f, a.data(), 4, a.data(), 4, 0.0f, c.data(), 4);  // no recording to write to
  EXPECT_EQ(c[0], 4.0f);
  EXPECT_NO_THROW(GemmShapeRecording again);
}

TEST(CpuGemmPlan, TimingCoversEveryRouteAndThePlanTakesTheFastest) {
  const std::vector<GemmShape> shapes = {{false, true, 64, 256, 128}, {true, false, 128, 64, 64}};
  const std::vector<GemmShapeTiming> timings = time_gemm_routes(shapes, 2);
  ASSERT_EQ(timings.size(), shapes.size());
  const GemmPlan plan = fastest_routes(timings);
  for (const GemmShapeTiming& t : timings) {
    ASSERT_EQ(t.seconds.size(), available_gemm_routes().size());
    double best = 1e30;
    for (const auto& [route, seconds] : t.seconds) {
      EXPECT_GT(seconds, 0.0);
      EXPECT_TRUE(std::isfinite(seconds));
      best = std::min(best, seconds);
    }
    const GemmRoute chosen = *plan.route(t.shape);
    for (const auto& [route, seconds] : t.seconds) {
      if (route == chosen) EXPECT_EQ(seconds, best) << describe(t.shape);
    }
  }
  // Operands over the memory bound are not timed: 64 x 256 x 128 needs 4 * (8192 + 32768 + 16384) bytes.
  const std::vector<GemmShapeTiming> bounded = time_gemm_routes(shapes, 1, 4 * (8192 + 32768 + 16384) - 1);
  ASSERT_EQ(bounded.size(), 1u);
  EXPECT_EQ(bounded[0].shape, shapes[1]);
}

}  // namespace
}  // namespace myriad::cpu
