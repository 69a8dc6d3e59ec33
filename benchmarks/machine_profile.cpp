// Implementation of the machine profile writer, the alpha-beta fit and the STREAM-like
// measurement (see machine_profile.h).
#include "machine_profile.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "harness.h"
#include "myriad/core/error.h"

namespace myriad::bench {

void merge_machine_profile(const std::string& path, const std::string& benchmark, const std::vector<ProfilePart>& parts,
                           int argc, char** argv) {
  std::vector<ProfilePart> all = parts;
  all.emplace_back("cores", static_cast<int>(std::thread::hardware_concurrency()));
  write_profile_parts(path, benchmark, all, describe_machine(), joined_command_line(argc, argv));
}

AlphaBeta fit_ring_all_reduce(const std::vector<std::pair<double, double>>& bytes_seconds, int ranks) {
  MYRIAD_CHECK(ranks >= 2 && bytes_seconds.size() >= 2, "alpha-beta fit needs >= 2 ranks and >= 2 sizes");
  const double n = ranks, steps = 2.0 * (n - 1.0), volume = 2.0 * (n - 1.0) / n;
  // Minimise sum w (alpha * steps + beta * volume * bytes - t)^2 with w = 1 / t^2: 2x2 normal equations.
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  for (const auto& [bytes, t] : bytes_seconds) {
    const double w = 1.0 / (t * t), x1 = steps, x2 = volume * bytes;
    s11 += w * x1 * x1;
    s12 += w * x1 * x2;
    s22 += w * x2 * x2;
    r1 += w * x1 * t;
    r2 += w * x2 * t;
  }
  AlphaBeta fit;
  const double det = s11 * s22 - s12 * s12;
  MYRIAD_CHECK(det > 0, "alpha-beta fit: the sizes must differ");
  fit.alpha_s = (r1 * s22 - r2 * s12) / det;
  fit.beta_s_per_byte = (s11 * r2 - s12 * r1) / det;
  if (fit.alpha_s < 0) {
    fit.alpha_s = 0;
    fit.beta_s_per_byte = r2 / s22;
  }
  MYRIAD_CHECK(fit.beta_s_per_byte > 0, "alpha-beta fit: the times do not grow with the size (beta "
                                            << fit.beta_s_per_byte << " s/B): the sweep is latency-bound up to "
                                            << bytes_seconds.back().first << " B; raise --max-bytes");
  for (const auto& [bytes, t] : bytes_seconds) {
    const double model = fit.alpha_s * steps + fit.beta_s_per_byte * volume * bytes;
    fit.max_relative_error = std::max(fit.max_relative_error, std::fabs(model - t) / t);
  }
  return fit;
}

StreamRates measure_stream(double array_bytes, int repeats) {
  const auto n = static_cast<std::int64_t>(array_bytes / sizeof(float));
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  auto best_of = [&](auto&& body) {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      body();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      do_not_optimize(a.data());
    }
    return best;
  };
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const double copy_s = best_of([&] {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pa[i] = pb[i];
  });
  const double triad_s = best_of([&] {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  });
  const double bytes = static_cast<double>(n) * sizeof(float);
  return StreamRates{2.0 * bytes / copy_s, 3.0 * bytes / triad_s, bytes};
}

}  // namespace myriad::bench
