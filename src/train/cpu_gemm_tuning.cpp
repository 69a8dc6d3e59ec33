// CpuGemmTuning (cpu_gemm_tuning.h): training.cpu_gemm measured.
#include "myriad/train/cpu_gemm_tuning.h"

#include <chrono>
#include <map>

#include "myriad/core/logging.h"
#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

namespace {

constexpr int kTimingRounds = 3;  // best of 3 alternated calls per route and shape

// Rank 0 merges every rank's plan text — a shape's route from the lowest rank that timed it — and
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

}  // namespace

CpuGemmTuning::CpuGemmTuning(RankState& state) : state_(state) { cpu::set_gemm_plan(nullptr); }

CpuGemmTuning::~CpuGemmTuning() {
  if (plan_ != nullptr && cpu::gemm_plan() == plan_) cpu::set_gemm_plan(nullptr);
}

void CpuGemmTuning::install(std::shared_ptr<const cpu::GemmPlan> plan) {
  cpu::set_gemm_plan(plan);
  plan_ = std::move(plan);
}

void CpuGemmTuning::begin_step() {
  if (state_.config.training.cpu_gemm != CpuGemmChoice::measured || plan_ != nullptr) return;
  recording_.emplace();
}

void CpuGemmTuning::end_step() {
  if (!recording_) return;
  const std::vector<cpu::GemmShape> shapes = recording_->shapes();
  recording_.reset();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<cpu::GemmShapeTiming> timings = cpu::time_gemm_routes(shapes, kTimingRounds);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string text = agree_on_plan(state_.groups->world(), cpu::fastest_routes(timings));
  install(std::make_shared<const cpu::GemmPlan>(cpu::GemmPlan::from_text(text, "the run's agreed GEMM plan")));
  const std::size_t too_large = shapes.size() - timings.size();
  state_.log->info("CPU GEMMs measured after step {} ({:.1f} s, best of {} calls per route): {} shapes here{}, {}",
                   state_.step, seconds, kTimingRounds, shapes.size(),
                   too_large == 0 ? std::string()
                                  : fmt::format(" ({} over {} GiB of operands left on the fixed rule)", too_large,
                                                cpu::kGemmTimingMaxBytes >> 30),
                   cpu::describe(cpu::pass_times(timings)));
  auto file_log = file_only_logger(*state_.log);
  for (const cpu::GemmShapeTiming& t : timings) {
    std::string line = cpu::describe(t.shape) + ":";
    for (const auto& [route, s] : t.seconds) line += fmt::format(" {} {:.3f} ms", cpu::gemm_route_name(route), s * 1e3);
    file_log->info("CPU GEMM {} -> {}", line, cpu::gemm_route_name(*plan_->route(t.shape)));
  }
}

std::string CpuGemmTuning::plan_text() const { return plan_ ? plan_->to_text() : std::string(); }

void CpuGemmTuning::restore(const std::string& text, const std::string& source) {
  if (state_.config.training.cpu_gemm != CpuGemmChoice::measured) return;
  std::shared_ptr<const cpu::GemmPlan> plan;
  if (!text.empty()) plan = std::make_shared<const cpu::GemmPlan>(cpu::GemmPlan::from_text(text, source));
  for (const auto& [shape, route] : plan ? plan->routes() : std::map<cpu::GemmShape, cpu::GemmRoute>{}) {
    if (route != cpu::GemmRoute::openblas && cpu::gemm_library() != cpu::GemmLibrary::onednn) {
      state_.log->warn(
          "CPU GEMMs: {}'s plan runs {} on {}, which this run does not use (MYRIAD_CPU_GEMM, libdnnl2): measuring "
          "a new plan after the next step, so this run's last bits differ from the saved run's",
          source, cpu::describe(shape), cpu::gemm_route_name(route));
      plan = nullptr;
      break;
    }
  }
  install(plan);  // none: measured again after the next step
  if (plan != nullptr) {
    state_.log->info("CPU GEMMs: the measured plan of {} ({} shapes)", source, plan->routes().size());
  } else if (text.empty()) {
    state_.log->info("CPU GEMMs: {} records no measured plan; this run measures one after its next step", source);
  }
}

}  // namespace myriad::train
