// The CPU GEMM libraries this machine has, side by side: OpenBLAS (linked), oneDNN's dnnl_sgemm and
// BLIS's bli_sgemm (each loaded with dlopen, RTLD_LOCAL, when its Debian package is installed:
// libdnnl2, libblis4-openmp), timed on the same row-major fp32 shapes in rounds alternated between
// the libraries (so a VM's drifting speed hits them alike). Each shape as one of a linear layer's
// three GEMMs: the forward x W^T, the input gradient dy W, the weight gradient dy^T x. The CPU ops
// run oneDNN where it loads (ops/cpu_gemm.h; docs/performance.md, "The CPU GEMM"), through
// cpu::sgemm, which cuts some shapes into per-thread calls: it is timed too, as the last column,
// and against OpenBLAS (the column "cpu::sgemm / OpenBLAS": issue 45's "never slower than OpenBLAS").
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

// What print_gemm_libraries measured: the libraries found, then cpu::sgemm (always last), and each
// shape's best time per entry (seconds[shape][entry], in the order of `names`).
struct GemmLibraryTimes {
  std::vector<std::string> names;
  std::vector<std::vector<double>> seconds;
};

// Prints the table (GFLOP/s per library per shape, the fastest named) and returns what it measured.
GemmLibraryTimes print_gemm_libraries(const std::vector<GemmShape>& shapes, int rounds);

// BLIS as loaded, for the table's notes: "BLIS 0.9.0, its 'generic' configuration for this CPU, 2
// threads" (the sub-configuration BLIS picked at load: 'generic' means reference kernels, as on a CPU
// family its build does not know); "" when BLIS did not load.
std::string describe_blis();

// The GEMMs of a GPT block's four linear layers (qkv, attention projection, MLP in, MLP out) and of
// the LM head, each as its forward x W^T, input gradient dy W and weight gradient dy^T x, for each
// token count in turn (15 shapes each, the head's three last); then the 1024^3 square.
std::vector<GemmShape> step_gemm_shapes(const std::vector<std::int64_t>& token_counts, std::int64_t embd,
                                        std::int64_t vocab);

// The training step's GEMMs alone, per library: `layers` blocks and the LM head of
// step_gemm_shapes(token_counts, ...), timed at the rates of `times`. Prints the GEMM time of one
// step and its average rate against the 1024^3 sgemm: the ceiling of a step's "model / sgemm" when
// every other op took no time.
void print_step_gemm_ceiling(const std::vector<GemmShape>& shapes, const GemmLibraryTimes& times,
                             const std::vector<std::int64_t>& token_counts, std::int64_t layers);

}  // namespace myriad::bench
