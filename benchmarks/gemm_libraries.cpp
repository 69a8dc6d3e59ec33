// bench_gemm --libraries: see gemm_libraries.h. Each library's C API is declared here by its
// documented signature (oneDNN dnnl_sgemm: row-major, 'N'/'T'; BLIS bli_sgemm: typed API with row
// and column strides) and looked up with dlsym, so the build needs neither library.
#include "gemm_libraries.h"

#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <utility>

#include "harness.h"
#include "myriad/core/error.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::bench {

namespace {

using DnnlSgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                          const float*, std::int64_t, float, float*, std::int64_t);
// bli_sgemm(transa, transb, m, n, k, alpha, a, rs_a, cs_a, b, rs_b, cs_b, beta, c, rs_c, cs_c); trans_t 0 = none.
using BlisSgemm = void (*)(int, int, std::int64_t, std::int64_t, std::int64_t, const float*, const float*, std::int64_t,
                           std::int64_t, const float*, std::int64_t, std::int64_t, const float*, float*, std::int64_t,
                           std::int64_t);

// Leading dimensions of the stored (row-major, unpadded) operands.
std::int64_t lda(const GemmShape& s) { return s.trans_a ? s.m : s.k; }
std::int64_t ldb(const GemmShape& s) { return s.trans_b ? s.k : s.n; }

struct Library {
  std::string name;
  std::function<void(const GemmShape&, const float*, const float*, float*)> sgemm;  // C = A B, row-major
  bool ops_entry = false;  // cpu::sgemm: what the CPU ops call (a library plus its per-thread cuts), not a library
};

void* open_first(const std::vector<const char*>& names) {
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  return nullptr;
}

void* open_blis() { return open_first({"libblis.so.4", "libblis-openmp.so.4"}); }

std::vector<Library> libraries() {
  std::vector<Library> out;
  out.push_back(
      {"OpenBLAS", [](const GemmShape& s, const float* a, const float* b, float* c) {
         cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans,
                     static_cast<blasint>(s.m), static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, a,
                     static_cast<blasint>(lda(s)), b, static_cast<blasint>(ldb(s)), 0.0f, c, static_cast<blasint>(s.n));
       }});
  if (void* dnnl = open_first({"libdnnl.so.3", "libdnnl.so.2"})) {
    if (auto fn = reinterpret_cast<DnnlSgemm>(dlsym(dnnl, "dnnl_sgemm"))) {
      out.push_back({"oneDNN", [fn](const GemmShape& s, const float* a, const float* b, float* c) {
                       fn(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a, lda(s), b, ldb(s), 0.0f,
                          c, s.n);
                     }});
    }
  }
  if (void* blis = open_blis()) {
    if (auto fn = reinterpret_cast<BlisSgemm>(dlsym(blis, "bli_sgemm"))) {
      out.push_back({"BLIS", [fn](const GemmShape& s, const float* a, const float* b, float* c) {
                       const float one = 1.0f, zero = 0.0f;
                       // A transposed operand is the stored matrix with its row and column strides swapped.
                       const std::int64_t rs_a = s.trans_a ? 1 : lda(s), cs_a = s.trans_a ? lda(s) : 1;
                       const std::int64_t rs_b = s.trans_b ? 1 : ldb(s), cs_b = s.trans_b ? ldb(s) : 1;
                       fn(0, 0, s.m, s.n, s.k, &one, a, rs_a, cs_a, b, rs_b, cs_b, &zero, c, s.n, 1);
                     }});
    }
  }
  // The CPU ops' own entry point: the process's library (MYRIAD_CPU_GEMM) with the cuts of
  // ops/cpu/cpu_gemm.cpp, so each row shows what the model's GEMM of that shape runs at.
  out.push_back({"cpu::sgemm",
                 [](const GemmShape& s, const float* a, const float* b, float* c) {
                   cpu::sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a, lda(s), b, ldb(s), 0.0f, c, s.n);
                 },
                 true});
  return out;
}

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string describe_blis() {
  void* blis = open_blis();
  if (blis == nullptr) return "";
  // BLIS's documented query functions: arch_t bli_arch_query_id(), const char* bli_arch_string(arch_t),
  // const char* bli_info_get_version_str(), dim_t bli_thread_get_num_threads() (-1: not set).
  auto arch_id = reinterpret_cast<int (*)()>(dlsym(blis, "bli_arch_query_id"));
  auto arch_name = reinterpret_cast<const char* (*)(int)>(dlsym(blis, "bli_arch_string"));
  auto version = reinterpret_cast<const char* (*)()>(dlsym(blis, "bli_info_get_version_str"));
  auto threads = reinterpret_cast<std::int64_t (*)()>(dlsym(blis, "bli_thread_get_num_threads"));
  std::string out = "BLIS ";
  out += version != nullptr ? version() : "(version unknown)";
  if (arch_id != nullptr && arch_name != nullptr)
    out += std::string(", its '") + arch_name(arch_id()) + "' configuration";
  if (threads != nullptr) {
    const std::int64_t n = threads();
    out += n > 0 ? ", " + std::to_string(n) + " threads" : std::string(", threads not set (one)");
  }
  return out;
}

GemmLibraryTimes print_gemm_libraries(const std::vector<GemmShape>& shapes, int rounds) {
  const std::vector<Library> libs = libraries();
  std::vector<std::string> header{"GEMM", "M", "N", "K"}, names;
  std::vector<std::vector<double>> measured;
  for (const Library& lib : libs) {
    header.push_back(lib.name + " GFLOP/s");
    names.push_back(lib.name);
  }
  header.push_back("fastest library");
  header.push_back("cpu::sgemm / OpenBLAS");
  Table table(header);
  for (const GemmShape& s : shapes) {
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k)), b(static_cast<std::size_t>(s.k * s.n)),
        c(static_cast<std::size_t>(s.m * s.n));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
    std::vector<double> best(libs.size(), 1e30);
    for (const Library& lib : libs) lib.sgemm(s, a.data(), b.data(), c.data());  // warm-up
    for (int r = 0; r < rounds; ++r) {
      for (std::size_t l = 0; l < libs.size(); ++l) {
        best[l] = std::min(best[l], seconds_of([&] { libs[l].sgemm(s, a.data(), b.data(), c.data()); }));
      }
    }
    std::vector<std::string> row{s.pass, std::to_string(s.m), std::to_string(s.n), std::to_string(s.k)};
    const double flops = 2.0 * static_cast<double>(s.m) * s.n * s.k;
    for (double t : best) row.push_back(fmt(flops / t / 1e9, 1));
    std::size_t fastest = 0;
    for (std::size_t l = 1; l < libs.size(); ++l) {
      if (!libs[l].ops_entry && best[l] < best[fastest]) fastest = l;
    }
    row.push_back(libs[fastest].name);
    row.push_back(fmt(best.front() / best.back(), 2) + "x");  // OpenBLAS first, cpu::sgemm last
    table.add_row(row);
    measured.push_back(best);
  }
  table.print();
  return {names, measured};
}

namespace {
constexpr std::size_t kPerTokenCount = 15;  // step_gemm_shapes: 5 linear layers x 3 GEMMs; the LM head last
}  // namespace

std::vector<GemmShape> step_gemm_shapes(const std::vector<std::int64_t>& token_counts, std::int64_t embd,
                                        std::int64_t vocab) {
  std::vector<GemmShape> shapes;
  // A linear layer of `in` -> `out` features on m token rows: forward y = x W^T (m x out x in, W
  // stored (out, in)), input gradient dx = dy W (m x in x out), weight gradient dW = dy^T x (out x in
  // x m).
  for (std::int64_t m : token_counts) {
    for (auto [out, in] :
         {std::pair{3 * embd, embd}, {embd, embd}, {4 * embd, embd}, {embd, 4 * embd}, {vocab, embd}}) {
      shapes.push_back({m, out, in, false, true, "x W^T"});
      shapes.push_back({m, in, out, false, false, "dy W"});
      shapes.push_back({out, in, m, true, false, "dy^T x"});
    }
  }
  shapes.push_back({1024, 1024, 1024});
  return shapes;
}

void print_step_gemm_ceiling(const std::vector<GemmShape>& shapes, const GemmLibraryTimes& times,
                             const std::vector<std::int64_t>& token_counts, std::int64_t layers) {
  MYRIAD_CHECK(shapes.size() == token_counts.size() * kPerTokenCount + 1 && times.seconds.size() == shapes.size(),
               "print_step_gemm_ceiling: " << shapes.size() << " shapes for " << token_counts.size()
                                           << " token counts (15 each, then the square)");
  const std::vector<double>& square = times.seconds.back();
  const GemmShape& sq = shapes.back();
  const double square_flops = 2.0 * static_cast<double>(sq.m) * sq.n * sq.k;
  double best_square = 0;
  for (double t : square) best_square = std::max(best_square, square_flops / t / 1e9);
  Table table(
      {"token rows", "library", "GEMM GFLOP/step", "GEMM ms/step", "GEMM GFLOP/s", "/ its 1024^3", "/ best 1024^3"});
  for (std::size_t g = 0; g < token_counts.size(); ++g) {
    for (std::size_t l = 0; l < times.names.size(); ++l) {
      double flops = 0, seconds = 0;
      for (std::size_t i = 0; i < kPerTokenCount; ++i) {
        const std::size_t index = g * kPerTokenCount + i;
        const GemmShape& s = shapes[index];
        const double count = i >= kPerTokenCount - 3 ? 1.0 : static_cast<double>(layers);  // the head once
        flops += count * 2.0 * static_cast<double>(s.m) * s.n * s.k;
        seconds += count * times.seconds[index][l];
      }
      const double rate = flops / seconds / 1e9;
      table.add_row({std::to_string(token_counts[g]), times.names[l], fmt(flops / 1e9, 1), fmt(seconds * 1e3, 1),
                     fmt(rate, 1), percent(rate / (square_flops / square[l] / 1e9)), percent(rate / best_square)});
    }
  }
  std::cout << "\n## The step's GEMMs alone (" << layers
            << " blocks + the LM head, forward and both gradients, at the best times above)\n\n";
  table.print();
  std::cout << "\n- '/ best 1024^3' is the most a training step's 'model / sgemm' can reach on this library with "
               "every other op free (attention's 6 L T C FLOPs aside: +0.5 % of the model FLOPs at T 64, +1.9 % "
               "at T 256 for GPT-2 124M)\n";
}

}  // namespace myriad::bench
