// A measured plan for the CPU GEMMs: for each GEMM shape a run calls, the route that ran it fastest
// on this machine, timed against the others (training.cpu_gemm measured).
//
// Routes: OpenBLAS; oneDNN's sgemm with its own threading; oneDNN cut into one single-threaded call
// per OpenMP thread along the larger output dimension. Which wins depends on the machine, the
// library versions and the shape (docs/performance.md, "The CPU GEMM"), so the plan is measured
// rather than written down. A plan's text is one line per shape, "N T 256 768 3072 onednn_cut"
// (op(a), op(b), m, n, k, route), sorted: the same plan always prints the same text, which the
// ranks of a run agree on and a checkpoint keeps, so a run computes alike on every rank and after
// a resume (the routes differ in the last bits of their sums).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "myriad/core/choice.h"

namespace myriad::cpu {

enum class GemmRoute { openblas, onednn, onednn_cut };
// "openblas" | "onednn" | "onednn_cut" (ChoiceTraits<GemmRoute> below).
const char* gemm_route_name(GemmRoute route);

// One GEMM's shape as cpu::sgemm sees it (leading dimensions aside).
struct GemmShape {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  auto operator<=>(const GemmShape&) const = default;
};
std::string describe(const GemmShape& shape);  // "N T 256 x 768 x 3072"

class GemmPlan {
 public:
  void set(const GemmShape& shape, GemmRoute route) { routes_[shape] = route; }
  std::optional<GemmRoute> route(const GemmShape& shape) const;
  const std::map<GemmShape, GemmRoute>& routes() const { return routes_; }
  bool empty() const { return routes_.empty(); }

  std::string to_text() const;
  // Parses to_text()'s form (lines starting with '#' are comments); throws naming `source` and the
  // line for anything else.
  static GemmPlan from_text(const std::string& text, const std::string& source);

 private:
  std::map<GemmShape, GemmRoute> routes_;
};

// The CPU's model name (/proc/cpuinfo), or "unknown CPU".
std::string cpu_model_name();
// What a measured route depends on besides the shape: the CPU model, its logical CPUs, this
// process's OpenMP threads, the libraries (with versions and OpenBLAS's kernel) and the routes
// available — one line, the key of the machine's route cache (train/cpu_gemm_cache.h).
std::string gemm_machine_key();

// The routes this process can run now: OpenBLAS always; oneDNN's two when it is the process's
// library (ops/cpu_gemm.h); the cut only with more than one OpenMP thread.
std::vector<GemmRoute> available_gemm_routes();

// What measuring one shape found: each route's best time (seconds), in available_gemm_routes()'s order.
struct GemmShapeTiming {
  GemmShape shape;
  std::vector<std::pair<GemmRoute, double>> seconds;
  GemmRoute fastest() const;
};

// Times every route of available_gemm_routes() on each shape — one untimed call each, then
// `rounds` rounds alternating between the routes, the best call of each kept — on buffers of its
// own filled with values in [-1, 1). A shape whose a, b and c together exceed `max_bytes` is left
// out (not timed, so no plan lists it): the timing must not need more memory than the run has.
// Call it outside any OpenMP parallel region.
inline constexpr std::int64_t kGemmTimingMaxBytes = std::int64_t{1} << 31;  // 2 GiB
std::vector<GemmShapeTiming> time_gemm_routes(const std::vector<GemmShape>& shapes, int rounds,
                                              std::int64_t max_bytes = kGemmTimingMaxBytes);
// The plan that runs each timed shape on its fastest route.
GemmPlan fastest_routes(const std::vector<GemmShapeTiming>& timings);

// What one pass over the timed shapes takes, in seconds: on each shape's fastest route (the
// plan), on the fixed rule's route (ops/cpu_gemm.h), and on each route alone.
struct GemmPassTimes {
  double planned = 0, fixed_rule = 0;
  std::map<GemmRoute, double> alone;  // every timed route
  std::map<GemmRoute, int> chosen;    // how many shapes the plan gives each route
};
GemmPassTimes pass_times(const std::vector<GemmShapeTiming>& timings);
// "12 on onednn, 6 on onednn_cut; one pass 13.75 ms on the plan, 14.02 ms on the fixed rule,
// 15.27 ms on openblas alone, ..."
std::string describe(const GemmPassTimes& pass);

}  // namespace myriad::cpu

namespace myriad {
template <>
struct ChoiceTraits<cpu::GemmRoute> {
  static constexpr std::array<std::string_view, 3> names{"openblas", "onednn", "onednn_cut"};
};
}  // namespace myriad
