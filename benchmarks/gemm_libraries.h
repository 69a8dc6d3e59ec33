// The CPU GEMM libraries this machine has, side by side: OpenBLAS (linked), oneDNN's dnnl_sgemm and
// BLIS's bli_sgemm (each loaded with dlopen, RTLD_LOCAL, when its Debian package is installed:
// libdnnl2, libblis4-openmp), timed on the same row-major fp32 shapes in rounds alternated between
// the libraries (so a VM's drifting speed hits them alike). Each shape as one of a linear layer's
// three GEMMs: the forward x W^T, the input gradient dy W, the weight gradient dy^T x. The CPU ops
// run oneDNN where it loads (ops/cpu_gemm.h; docs/performance.md, "The CPU GEMM").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace myriad::bench {

struct GemmShape {
  std::int64_t m, n, k;
  bool trans_a = false, trans_b = false;
  std::string pass = "C = A B";  // which GEMM of a linear layer it is
};

// Prints the table (GFLOP/s per library per shape, the fastest named) and returns the libraries found.
std::vector<std::string> print_gemm_libraries(const std::vector<GemmShape>& shapes, int rounds);

}  // namespace myriad::bench
