// Implementation of the benchmark harness (see harness.h).
#include "harness.h"

#include "profile_file.h"

#include "myriad/core/cli_numbers.h"
#include "myriad/core/error.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "myriad/ops/cpu_gemm.h"
#include "myriad/ops/cpu_isa.h"
#include "myriad/train/metrics/peak_flops.h"

extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace myriad::bench {

Timing time_it(const std::function<void()>& fn, int warmup, int min_repeats, double min_total_s, int max_repeats) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> samples;
  double total = 0;
  while (static_cast<int>(samples.size()) < max_repeats &&
         (static_cast<int>(samples.size()) < min_repeats || total < min_total_s)) {
    auto start = std::chrono::steady_clock::now();
    fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back(s);
    total += s;
  }
  Timing t;
  t.repeats = static_cast<int>(samples.size());
  t.min_s = *std::min_element(samples.begin(), samples.end());
  t.median_s = median(std::move(samples));
  return t;
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  std::size_t n = samples.size();
  return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

PairedTiming time_paired(const std::function<void()>& first, const std::function<void()>& second, int min_pairs,
                         double min_total_s, int max_pairs) {
  first();
  second();
  std::vector<double> a, b;
  double total = 0;
  auto timed = [](const std::function<void()>& fn) {
    auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  while (static_cast<int>(a.size()) < max_pairs && (static_cast<int>(a.size()) < min_pairs || total < min_total_s)) {
    a.push_back(timed(first));
    b.push_back(timed(second));
    total += a.back() + b.back();
  }
  return PairedTiming{median(a), median(b), static_cast<int>(a.size())};
}

std::string describe_machine() {
  std::ostringstream out;
  out << cpu::cpu_model_name() << ", " << std::thread::hardware_concurrency() << " logical CPUs, OMP threads "
      << omp_get_max_threads() << ", OpenBLAS " << openblas_get_config()
      << "; the CPU ops' GEMM: " << cpu::gemm_library_description(cpu::gemm_library()) << " (MYRIAD_CPU_GEMM)";
  return out.str();
}

void print_header(const std::string& title, int argc, char** argv) {
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::cout << "# " << title << "\n\n"
            << "- machine: " << describe_machine() << "\n"
            << "- BLAS kernel: " << describe_blas_kernel() << "; widest fp32 vector ISA: " << describe_peak_vector_isa()
            << "\n"
            << "- the CPU ops' vector kernels: " << cpu::vector_kernels_description() << "\n"
            << "- command: `" << joined_command_line(argc, argv) << "`\n"
            << "- date: " << date << "\n\n";
}

double measure_fp32_peak_gflops(double seconds) {
  return train::measure_fma_peak_flops(train::widest_vector_isa(), seconds).flops_per_second / 1e9;
}

std::string describe_peak_vector_isa() { return train::describe_vector_isa(train::widest_vector_isa()); }

std::string describe_blas_kernel() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return std::string(openblas_get_corename()) + " (OPENBLAS_CORETYPE " +
         (coretype != nullptr ? std::string("=") + coretype : std::string("unset")) + ")";
}

void Table::print() const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], c < row.size() ? row[c].size() : 0);
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::cout << "|";
    for (std::size_t c = 0; c < headers_.size(); ++c) {
      std::string cell = c < cells.size() ? cells[c] : "";
      std::cout << " " << cell << std::string(width[c] - cell.size(), ' ') << " |";
    }
    std::cout << "\n";
  };
  line(headers_);
  std::cout << "|";
  for (std::size_t c = 0; c < headers_.size(); ++c) std::cout << std::string(width[c] + 2, '-') << "|";
  std::cout << "\n";
  for (const auto& row : rows_) line(row);
  std::cout << std::flush;
}

std::string fmt(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string percent(double ratio, int decimals) { return fmt(100.0 * ratio, decimals) + "%"; }

std::string bytes_human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return fmt(bytes, u == 0 ? 0 : 1) + " " + units[u];
}

void do_not_optimize(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

std::int64_t whole_option(const std::string& option, const std::string& text, std::int64_t least) {
  const std::int64_t value = tools::parse_int(option, text);
  MYRIAD_CHECK(value >= least, option << ": expected a whole number >= " << least << ", got '" << text << "'");
  return value;
}

int run_reporting_errors(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const myriad::Error& e) {
    std::cerr << program << ": " << e.message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
  }
  return 1;
}

}  // namespace myriad::bench
