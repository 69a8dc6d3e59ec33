// CpuGemmTuning (cpu_gemm_tuning.h): training.cpu_gemm measured.
#include "myriad/train/cpu_gemm_tuning.h"

#include <chrono>

#include "myriad/core/logging.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/train/cpu_gemm_cache.h"

namespace myriad::train {

namespace {

constexpr int kTimingRounds = 3;  // best of 3 alternated calls per route and shape

// Rank 0 merges every rank's plan text — a shape's route from the lowest rank that has it — and
// every rank receives the merged text.
std::string agree_on_plan(distributed::Communicator& world, const cpu::GemmPlan& mine) {
  const std::vector<std::string> texts = distributed::gather_strings_to_rank0(world, mine.to_text());
  std::string merged_text;
  if (world.rank() == 0) {
    cpu::GemmPlan merged;
    for (std::size_t r = 0; r < texts.size(); ++r) {
      const cpu::GemmPlan plan = cpu::GemmPlan::from_text(texts[r], "rank " + std::to_string(r) + "'s GEMM plan");
      for (const auto& [shape, route] : plan.routes()) {
        if (!merged.route(shape)) merged.set(shape, route);
      }
    }
    merged_text = merged.to_text();
  }
  return distributed::broadcast_string(world, merged_text);
}

// The timing's part of the settling's log line: what was timed, and one pass over it per route.
std::string timing_summary(const std::vector<cpu::GemmRoute>& routes, std::size_t untimed_shapes,
                           const std::vector<cpu::GemmShapeTiming>& timings, double seconds) {
  if (routes.size() == 1)
    return fmt::format("{} on the one route this process has ({})", untimed_shapes, cpu::gemm_route_name(routes[0]));
  if (untimed_shapes == 0) return "none timed";
  const std::size_t too_large = untimed_shapes - timings.size();
  const std::string left_out = too_large == 0 ? std::string()
                                              : fmt::format("; {} over {} GiB of operands left on the fixed rule",
                                                            too_large, cpu::kGemmTimingMaxBytes >> 30);
  return fmt::format("{} timed ({:.1f} s, best of {} calls per route{}): {}", timings.size(), seconds, kTimingRounds,
                     left_out, cpu::describe(cpu::pass_times(timings)));
}

}  // namespace

CpuGemmTuning::CpuGemmTuning(RankState& state) : state_(state) { cpu::set_gemm_plan(nullptr); }

CpuGemmTuning::~CpuGemmTuning() {
  if (plan_ != nullptr && cpu::gemm_plan() == plan_) cpu::set_gemm_plan(nullptr);
}

void CpuGemmTuning::install(std::shared_ptr<const cpu::GemmPlan> plan) {
  cpu::set_gemm_plan(plan);
  plan_ = std::move(plan);
}

bool CpuGemmTuning::measured() const { return state_.config.training.cpu_gemm == CpuGemmChoice::measured; }

void CpuGemmTuning::activate() {
  // The process's plan is this engine's (another engine of the process may have changed it since).
  if (cpu::gemm_plan() != plan_) cpu::set_gemm_plan(plan_);
}

void CpuGemmTuning::begin_step() {
  activate();
  if (measured() && !covered_ && !recording_) recording_.emplace();
}

void CpuGemmTuning::abandon_step() { recording_.reset(); }

void CpuGemmTuning::end_step() {
  if (!recording_) return;
  const std::vector<cpu::GemmShape> shapes = recording_->shapes();
  recording_.reset();
  distributed::Communicator& world = state_.groups->world();
  // Rank 0's machine cache gives the routes it knows to every rank.
  const CpuGemmCache cache = CpuGemmCache::from_environment();
  std::string cached_text, cache_problem;
  if (world.rank() == 0) cached_text = cache.read(&cache_problem).to_text();
  const cpu::GemmPlan cached =
      cpu::GemmPlan::from_text(distributed::broadcast_string(world, cached_text), "rank 0's GEMM route cache");
  // Each shape's route: the run's plan (restored from a checkpoint), else the cache, else timed.
  cpu::GemmPlan mine;
  std::vector<cpu::GemmShape> to_time;
  std::size_t from_plan = 0, from_cache = 0;
  for (const cpu::GemmShape& shape : shapes) {
    if (const std::optional<cpu::GemmRoute> route = plan_ ? plan_->route(shape) : std::nullopt) {
      mine.set(shape, *route);
      ++from_plan;
    } else if (const std::optional<cpu::GemmRoute> cached_route = cached.route(shape)) {
      mine.set(shape, *cached_route);
      ++from_cache;
    } else {
      to_time.push_back(shape);
    }
  }
  const std::vector<cpu::GemmRoute> routes = cpu::available_gemm_routes();
  std::vector<cpu::GemmShapeTiming> timings;
  const auto start = std::chrono::steady_clock::now();
  if (routes.size() == 1) {
    for (const cpu::GemmShape& shape : to_time) mine.set(shape, routes[0]);  // nothing to choose between
  } else {
    // A rank that fails (memory for a vocabulary-sized GEMM's operands) fails every rank here.
    distributed::run_on_every_rank(world, "timing the CPU GEMM routes",
                                   [&] { timings = cpu::time_gemm_routes(to_time, kTimingRounds); });
    for (const cpu::GemmShapeTiming& t : timings) mine.set(t.shape, t.fastest());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cpu::GemmPlan agreed = cpu::GemmPlan::from_text(agree_on_plan(world, mine), "the run's agreed GEMM plan");
  if (plan_ != nullptr) {  // shapes of the restored plan that this layout does not run are kept
    for (const auto& [shape, route] : plan_->routes()) {
      if (!agreed.route(shape)) agreed.set(shape, route);
    }
  }
  install(std::make_shared<const cpu::GemmPlan>(std::move(agreed)));
  covered_ = true;
  if (!cache_problem.empty()) state_.log->warn("CPU GEMMs: the route cache is not used: {}", cache_problem);
  if (world.rank() == 0) {
    if (const std::string problem = cache.add(*plan_); !problem.empty())
      state_.log->warn("CPU GEMMs: the route cache was not written: {}", problem);
  }
  state_.log->info(
      "CPU GEMMs after step {}: {} shapes here: {} from the run's plan, {} from the machine's route cache "
      "({}), {}",
      state_.step, shapes.size(), from_plan, from_cache,
      cache.enabled() ? cache.path() : std::string("off: MYRIAD_CPU_GEMM_CACHE"),
      timing_summary(routes, to_time.size(), timings, seconds));
  auto file_log = file_only_logger(*state_.log);
  for (const cpu::GemmShapeTiming& t : timings) {
    std::string timed = cpu::describe(t.shape) + ":";
    for (const auto& [route, s] : t.seconds)
      timed += fmt::format(" {} {:.3f} ms", cpu::gemm_route_name(route), s * 1e3);
    file_log->info("CPU GEMM {} -> {}", timed, cpu::gemm_route_name(*plan_->route(t.shape)));
  }
}

std::string CpuGemmTuning::plan_text() const { return plan_ ? plan_->to_text() : std::string(); }

void CpuGemmTuning::restore(const cpu::GemmPlan& saved, const std::string& source) {
  if (!measured()) return;
  std::shared_ptr<const cpu::GemmPlan> plan;
  if (!saved.empty()) plan = std::make_shared<const cpu::GemmPlan>(saved);
  for (const auto& [shape, route] : saved.routes()) {
    if (route != cpu::GemmRoute::openblas && cpu::gemm_library() != cpu::GemmLibrary::onednn) {
      state_.log->warn(
          "CPU GEMMs: {}'s plan runs {} on {}, which this run does not use (MYRIAD_CPU_GEMM, libdnnl2): measuring "
          "a new plan after the next step, so this run's last bits differ from the saved run's",
          source, cpu::describe(shape), cpu::gemm_route_name(route));
      plan = nullptr;
      break;
    }
  }
  install(plan);
  covered_ = false;  // the next step checks its shapes against it (another layout or batch has others)
  if (plan != nullptr) {
    state_.log->info("CPU GEMMs: the measured plan of {} ({} shapes)", source, plan->routes().size());
  } else if (saved.empty()) {
    state_.log->info("CPU GEMMs: {} records no measured plan; this run measures one after its next step", source);
  }
}

}  // namespace myriad::train
