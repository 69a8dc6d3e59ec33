// GemmPlan, its text form and the timing that measures one (ops/cpu_gemm_plan.h).
#include "myriad/ops/cpu_gemm_plan.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "myriad/core/error.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {

const char* gemm_route_name(GemmRoute route) { return choice_name(route).data(); }  // literals: NUL-terminated

std::string describe(const GemmShape& shape) {
  std::ostringstream out;
  out << (shape.trans_a ? 'T' : 'N') << ' ' << (shape.trans_b ? 'T' : 'N') << ' ' << shape.m << " x " << shape.n
      << " x " << shape.k;
  return out.str();
}

std::optional<GemmRoute> GemmPlan::route(const GemmShape& shape) const {
  const auto it = routes_.find(shape);
  if (it == routes_.end()) return std::nullopt;
  return it->second;
}

std::string GemmPlan::to_text() const {
  std::ostringstream out;
  for (const auto& [shape, route] : routes_) {
    out << (shape.trans_a ? 'T' : 'N') << ' ' << (shape.trans_b ? 'T' : 'N') << ' ' << shape.m << ' ' << shape.n << ' '
        << shape.k << ' ' << gemm_route_name(route) << '\n';
  }
  return out.str();
}

GemmPlan GemmPlan::from_text(const std::string& text, const std::string& source) {
  GemmPlan plan;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string ta, tb, route, extra;
    GemmShape shape;
    const bool read = static_cast<bool>(fields >> ta >> tb >> shape.m >> shape.n >> shape.k >> route);
    const bool transposes_ok = (ta == "N" || ta == "T") && (tb == "N" || tb == "T");
    MYRIAD_CHECK(read && !(fields >> extra) && transposes_ok && shape.m > 0 && shape.n > 0 && shape.k > 0,
                 source << ": CPU GEMM plan line " << number << " '" << line
                        << "' is not 'N|T N|T m n k route' with positive m, n, k");
    shape.trans_a = ta == "T";
    shape.trans_b = tb == "T";
    const std::optional<GemmRoute> parsed = parse_choice<GemmRoute>(route);
    MYRIAD_CHECK(parsed.has_value(), source << ": CPU GEMM plan line " << number << " names the route '" << route
                                            << "': use openblas, onednn or onednn_cut");
    MYRIAD_CHECK(!plan.route(shape).has_value(),
                 source << ": CPU GEMM plan line " << number << " repeats the shape " << describe(shape));
    plan.set(shape, *parsed);
  }
  return plan;
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const std::size_t start = line.find_first_not_of(" \t", line.find(':') + 1);
      return start == std::string::npos ? std::string("unknown CPU") : line.substr(start);
    }
  }
  return "unknown CPU";
}

std::string gemm_machine_key() {
  std::ostringstream key;
  key << cpu_model_name() << "; " << std::thread::hardware_concurrency() << " logical CPUs; OpenMP threads "
      << omp_get_max_threads() << "; " << gemm_library_description(GemmLibrary::openblas);
  if (onednn_available()) key << "; " << gemm_library_description(GemmLibrary::onednn);
  key << "; routes";
  for (GemmRoute route : available_gemm_routes()) key << ' ' << gemm_route_name(route);
  return key.str();
}

std::vector<GemmRoute> available_gemm_routes() {
  std::vector<GemmRoute> routes{GemmRoute::openblas};
  if (gemm_library() == GemmLibrary::onednn) {
    routes.push_back(GemmRoute::onednn);
    if (omp_get_max_threads() > 1) routes.push_back(GemmRoute::onednn_cut);
  }
  return routes;
}

GemmRoute GemmShapeTiming::fastest() const {
  MYRIAD_CHECK(!seconds.empty(), "GemmShapeTiming: no route was timed for " << describe(shape));
  return std::min_element(seconds.begin(), seconds.end(),
                          [](const auto& x, const auto& y) { return x.second < y.second; })
      ->first;
}

std::vector<GemmShapeTiming> time_gemm_routes(const std::vector<GemmShape>& shapes, int rounds,
                                              std::int64_t max_bytes) {
  MYRIAD_CHECK(rounds >= 1, "time_gemm_routes: rounds is " << rounds << ", at least 1");
  MYRIAD_CHECK(!omp_in_parallel(), "time_gemm_routes: called inside an OpenMP parallel region");
  const std::vector<GemmRoute> routes = available_gemm_routes();
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  std::vector<GemmShapeTiming> out;
  std::vector<float> a, b, c;
  for (const GemmShape& shape : shapes) {
    const double bytes = 4.0 * (static_cast<double>(shape.m) * static_cast<double>(shape.k) +
                                static_cast<double>(shape.k) * static_cast<double>(shape.n) +
                                static_cast<double>(shape.m) * static_cast<double>(shape.n));
    if (bytes > static_cast<double>(max_bytes)) continue;
    // Stored as the calls store them: op(a) is m x k, so a is k x m when transposed (lda = m).
    const std::int64_t lda = shape.trans_a ? shape.m : shape.k, ldb = shape.trans_b ? shape.k : shape.n;
    a.resize(static_cast<std::size_t>(shape.m * shape.k));
    b.resize(static_cast<std::size_t>(shape.k * shape.n));
    c.assign(static_cast<std::size_t>(shape.m * shape.n), 0.0f);
    for (float& x : a) x = values(rng);
    for (float& x : b) x = values(rng);
    auto run = [&](GemmRoute route) {
      sgemm_on_route(route, shape.trans_a, shape.trans_b, shape.m, shape.n, shape.k, 1.0f, a.data(), lda, b.data(), ldb,
                     0.0f, c.data(), shape.n);
    };
    GemmShapeTiming timing{shape, {}};
    for (GemmRoute route : routes) {
      run(route);  // oneDNN generates its kernel on a shape's first call
      timing.seconds.emplace_back(route, std::numeric_limits<double>::infinity());
    }
    for (int round = 0; round < rounds; ++round) {
      for (auto& [route, best] : timing.seconds) {
        const auto start = std::chrono::steady_clock::now();
        run(route);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    }
    out.push_back(std::move(timing));
  }
  return out;
}

GemmPlan fastest_routes(const std::vector<GemmShapeTiming>& timings) {
  GemmPlan plan;
  for (const GemmShapeTiming& t : timings) plan.set(t.shape, t.fastest());
  return plan;
}

GemmPassTimes pass_times(const std::vector<GemmShapeTiming>& timings) {
  GemmPassTimes pass;
  for (const GemmShapeTiming& t : timings) {
    const GemmRoute fastest = t.fastest(), rule = fixed_rule_route(t.shape);
    for (const auto& [route, seconds] : t.seconds) {
      pass.alone[route] += seconds;
      if (route == fastest) pass.planned += seconds;
      if (route == rule) pass.fixed_rule += seconds;
    }
    ++pass.chosen[fastest];
  }
  return pass;
}

std::string describe(const GemmPassTimes& pass) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  bool first = true;
  for (const auto& [route, count] : pass.chosen) {
    out << (first ? "" : ", ") << count << " on " << gemm_route_name(route);
    first = false;
  }
  out << "; one pass " << pass.planned * 1e3 << " ms on the plan, " << pass.fixed_rule * 1e3 << " ms on the fixed rule";
  for (const auto& [route, seconds] : pass.alone)
    out << ", " << seconds * 1e3 << " ms on " << gemm_route_name(route) << " alone";
  return out.str();
}

}  // namespace myriad::cpu
