// The machine profile a benchmark writes with --profile FILE: JSON of schema
// "myriad.machine_profile/1", the planner's calibration (python/myriad/planner/hardware.py documents
// every key; docs/planning.md the rules). One file, several writers: each benchmark
// replaces only its own keys and keeps the others', so bench_gemm, bench_attention and
// bench_collectives can run in any order into the same file.
//
// The file itself (atomic writes, header keys) is profile_file.h's; this adds the CPU machine's
// description and `cores`.
#pragma once

#include <nlohmann/json.hpp>

#include "profile_file.h"

#include <string>
#include <utility>
#include <vector>

namespace myriad::bench {

// Reads `path` if it exists, applies `parts` and the header keys, writes it back atomically.
// `benchmark` names the writer ("bench_gemm"); argc/argv give its command line. Throws myriad::Error.
void merge_machine_profile(const std::string& path, const std::string& benchmark, const std::vector<ProfilePart>& parts,
                           int argc, char** argv);

// Alpha-beta link from ring all-reduce times over `ranks` ranks, the step-time model's formula
// (step_time.py ring_all_reduce_s): t = 2(n-1) * alpha + 2(n-1)/n * bytes * beta. Weighted least
// squares on the relative error (weight 1/t^2), so small (latency) and large (bandwidth) messages
// count alike; alpha is clamped at 0 (then beta is refitted alone). Needs >= 2 distinct sizes and
// throws when beta comes out <= 0 (times that do not grow with the size: a latency-bound sweep).
struct AlphaBeta {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double max_relative_error = 0;  // of the fit over the points
};
AlphaBeta fit_ring_all_reduce(const std::vector<std::pair<double, double>>& bytes_seconds, int ranks);

// STREAM-like bandwidth on the OpenMP threads the process has: copy (a = b) and triad
// (a = b + s * c) over arrays of `array_bytes` each, best of `repeats` passes; bytes counted as
// STREAM does (copy 2, triad 3 arrays per pass; no write-allocate traffic).
struct StreamRates {
  double copy_bytes_per_s = 0;
  double triad_bytes_per_s = 0;
  double array_bytes = 0;
};
StreamRates measure_stream(double array_bytes, int repeats = 10);

}  // namespace myriad::bench
