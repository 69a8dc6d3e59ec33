// Shared benchmark harness: timing (warm-up + median of repeats), Markdown tables, process
// memory (current / peak RSS with a resettable peak), the machine description printed at the
// top of every benchmark (with the OpenBLAS kernel and the widest fp32 vector ISA), and a
// measured fp32 FMA peak at that width used as a roofline.
//
// Benchmarks check correctness before timing and print ratios against a baseline measured in
// the same run; numbers go to docs/performance.md with the printed machine line and command.
#pragma once

#include "myriad/core/process_memory.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace myriad::bench {

struct Timing {
  double median_s = 0;
  double min_s = 0;
  int repeats = 0;
};

// Runs fn `warmup` times, then at least `min_repeats` times and until `min_total_s` seconds of
// measured time have passed (at most `max_repeats`); returns median and minimum.
Timing time_it(const std::function<void()>& fn, int warmup = 1, int min_repeats = 3, double min_total_s = 0.3,
               int max_repeats = 1000);

// Median of samples (mean of the middle two for an even count); 0 for none.
double median(std::vector<double> samples);

// Times two functions call by call in alternation (a, b, a, b, ...) after one warm-up each,
// at least `min_pairs` pairs and until `min_total_s` seconds; returns both medians. Use it for
// ratios on a noisy machine: load drift hits both sides of every pair alike.
struct PairedTiming {
  double first_median_s = 0;
  double second_median_s = 0;
  int pairs = 0;
};
PairedTiming time_paired(const std::function<void()>& first, const std::function<void()>& second, int min_pairs = 10,
                         double min_total_s = 1.0, int max_pairs = 1000);

// One line: CPU model, logical CPUs, OpenMP threads, OpenBLAS build config.
std::string describe_machine();
// Prints "# <title>", machine, BLAS kernel, widest fp32 vector ISA, command and date.
void print_header(const std::string& title, int argc, char** argv);

// Process memory (current / peak RSS, resettable peak): myriad/core/process_memory.h.
using myriad::current_rss_bytes;
using myriad::peak_rss_bytes;
using myriad::reset_peak_rss;

// fp32 peak of this machine, measured: every OpenMP thread runs independent FMA chains held in
// registers (best round of ~1 ms bursts over `seconds`), on vectors of the widest ISA the CPU offers at run time
// (AVX-512 16 lanes, else AVX2+FMA 8, else AVX / SSE; train::measure_fma_peak_flops). GFLOP/s over all threads.
double measure_fp32_peak_gflops(double seconds = 0.5);
// "AVX-512 (16 fp32 lanes)": the ISA measure_fp32_peak_gflops and the datasheet estimate use.
std::string describe_peak_vector_isa();
// The OpenBLAS kernel that runs ("SkylakeX", "Haswell", "Prescott", ...) and OPENBLAS_CORETYPE
// as the environment sets it: "Haswell (OPENBLAS_CORETYPE unset)".
std::string describe_blas_kernel();

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void print() const;  // Markdown table on stdout

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double value, int decimals = 1);
std::string percent(double ratio, int decimals = 1);  // 0.953 -> "95.3%"
std::string bytes_human(double bytes);                // "12.3 MiB"

// The value of a numeric command-line option: a whole number >= `least` written in full
// ("1e3", "12abc", "" are refused: core/cli_numbers.h); throws myriad::Error naming the option.
std::int64_t whole_option(const std::string& option, const std::string& text, std::int64_t least = 1);

// A single-process benchmark's main: runs `body` and turns an error it throws (a file it cannot
// write, a config it cannot read) into "<program>: <message>" on stderr and exit status 1, instead of
// std::terminate's abort. Returns body's own status otherwise. Not for a body that owns an
// MpiRuntime: unwinding would run MPI_Finalize on one rank while the others wait in a collective
// (those benchmarks end the job through Communicator::abort, or std::terminate's abort).
int run_reporting_errors(const char* program, const std::function<int()>& body);

// Keeps the compiler from discarding a computed value.
void do_not_optimize(const void* p);

}  // namespace myriad::bench
