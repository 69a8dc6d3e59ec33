// The CPU GEMM libraries this machine has, side by side: OpenBLAS (linked), oneDNN's dnnl_sgemm and
// BLIS's bli_sgemm (each loaded with dlopen, RTLD_LOCAL, when its Debian package is installed:
// libdnnl2, libblis4-openmp), timed on the same row-major fp32 shapes in rounds alternated between
// the libraries (so a VM's drifting speed hits them alike). Measurement only: the engine's matmul
// still calls OpenBLAS (docs/performance.md, "GEMM libraries").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace myriad::bench {

struct GemmShape {
  std::int64_t m, n, k;
};

// Prints the table (GFLOP/s per library per shape, the fastest named) and returns the libraries found.
std::vector<std::string> print_gemm_libraries(const std::vector<GemmShape>& shapes, int rounds);

}  // namespace myriad::bench
