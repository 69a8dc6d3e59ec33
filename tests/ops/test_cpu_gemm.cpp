// cpu::sgemm (ops/cpu_gemm.h) on each library this machine has, against a float64 reference on
// fresh random inputs: the four transpositions, leading dimensions wider than the matrices, vocabulary-
// sized m or n and few rows against a large b (oneDNN's per-thread slices), alpha,
// beta 0 (c's old contents ignored, NaN included) and 1 (accumulate), empty shapes and K = 0; the
// two libraries agree within f32 rounding; MYRIAD_CPU_GEMM's values (oneDNN where it loads by
// default) and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {
namespace {

// Restores the process's library when a test switched it.
class LibraryGuard {
 public:
  LibraryGuard() : saved_(gemm_library()) {}
  ~LibraryGuard() { set_gemm_library(saved_); }
  LibraryGuard(const LibraryGuard&) = delete;
  LibraryGuard& operator=(const LibraryGuard&) = delete;

 private:
  GemmLibrary saved_;
};

std::vector<GemmLibrary> libraries() {
  std::vector<GemmLibrary> out{GemmLibrary::openblas};
  if (onednn_available()) out.push_back(GemmLibrary::onednn);
  return out;
}

struct Problem {
  std::int64_t m, n, k;
  bool ta, tb;
  std::int64_t pad;  // extra columns in every leading dimension
};

std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// c = alpha op(a) op(b) + beta c in float64 over the stored operands.
std::vector<double> reference(const Problem& p, float alpha, const std::vector<float>& a, std::int64_t lda,
                              const std::vector<float>& b, std::int64_t ldb, float beta, const std::vector<float>& c,
                              std::int64_t ldc) {
  std::vector<double> out(c.begin(), c.end());
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) {
      double sum = 0.0;
      for (std::int64_t l = 0; l < p.k; ++l) {
        const double x = p.ta ? a[static_cast<std::size_t>(l * lda + i)] : a[static_cast<std::size_t>(i * lda + l)];
        const double y = p.tb ? b[static_cast<std::size_t>(j * ldb + l)] : b[static_cast<std::size_t>(l * ldb + j)];
        sum += x * y;
      }
      const auto at = static_cast<std::size_t>(i * ldc + j);
      out[at] = alpha * sum + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c[at]));
    }
  }
  return out;
}

TEST(CpuGemm, EveryLibraryMatchesFloat64InEveryTransposition) {
  LibraryGuard guard;
  std::mt19937 rng(std::random_device{}());
  const std::vector<Problem> problems = {{37, 53, 29, false, false, 0},
                                         {37, 53, 29, true, false, 3},
                                         {64, 48, 96, false, true, 5},
                                         {17, 130, 70, true, true, 1},
                                         {256, 96, 33, false, true, 0},
                                         {1, 77, 200, true, false, 2},
                                         // m or n >= 32768: oneDNN's calls cut into per-thread slices
                                         {40001, 3, 5, true, false, 2},
                                         {40001, 4, 6, false, true, 1},
                                         {3, 40001, 7, false, false, 3},
                                         {5, 33003, 4, true, true, 0},
                                         // few rows of a against a b of >= 2^20 elements: cut by columns
                                         {33, 1030, 1024, false, false, 2},
                                         {7, 2049, 520, false, true, 1}};
  for (GemmLibrary library : libraries()) {
    set_gemm_library(library);
    for (const Problem& p : problems) {
      for (const float beta : {0.0f, 1.0f}) {
        SCOPED_TRACE(std::string(gemm_library_name(library)) + " m " + std::to_string(p.m) + " n " +
                     std::to_string(p.n) + " k " + std::to_string(p.k) + (p.ta ? " Ta" : "") + (p.tb ? " Tb" : "") +
                     " beta " + std::to_string(beta));
        const std::int64_t a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
        const std::int64_t b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
        const std::int64_t lda = a_cols + p.pad, ldb = b_cols + p.pad, ldc = p.n + p.pad;
        const auto a = random_values(static_cast<std::size_t>(a_rows * lda), rng);
        const auto b = random_values(static_cast<std::size_t>(b_rows * ldb), rng);
        auto c = random_values(static_cast<std::size_t>(p.m * ldc), rng);
        if (beta == 0.0f) c[0] = std::numeric_limits<float>::quiet_NaN();  // beta 0 ignores c
        const float alpha = 0.75f;
        const std::vector<double> want = reference(p, alpha, a, lda, b, ldb, beta, c, ldc);
        sgemm(p.ta, p.tb, p.m, p.n, p.k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        double worst = 0.0;
        for (std::int64_t i = 0; i < p.m; ++i) {
          for (std::int64_t j = 0; j < p.n; ++j) {
            const auto at = static_cast<std::size_t>(i * ldc + j);
            ASSERT_TRUE(std::isfinite(c[at])) << "(" << i << ", " << j << ")";
            worst = std::max(worst, std::abs(c[at] - want[at]));
          }
        }
        EXPECT_LT(worst, 1e-5 * std::sqrt(static_cast<double>(p.k)) + 1e-6);
        // The padding columns of c are not written.
        for (std::int64_t i = 0; i < p.m; ++i)
          for (std::int64_t j = p.n; j < ldc; ++j)
            EXPECT_EQ(c[static_cast<std::size_t>(i * ldc + j)],
                      static_cast<float>(want[static_cast<std::size_t>(i * ldc + j)]));
      }
    }
  }
}

TEST(CpuGemm, EmptyShapesAndAnEmptySumFollowBeta) {
  LibraryGuard guard;
  for (GemmLibrary library : libraries()) {
    set_gemm_library(library);
    std::vector<float> a(6, 1.0f), b(6, 1.0f), c(6, 2.0f);
    sgemm(false, false, 0, 3, 2, 1.0f, a.data(), 2, b.data(), 3, 0.0f, c.data(), 3);  // m = 0: nothing
    sgemm(false, false, 2, 0, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, c.data(), 1);  // n = 0: nothing
    EXPECT_EQ(c, std::vector<float>(6, 2.0f)) << gemm_library_name(library);
    sgemm(false, false, 2, 3, 0, 1.0f, a.data(), 1, b.data(), 3, 0.5f, c.data(), 3);  // k = 0: c = beta c
    EXPECT_EQ(c, std::vector<float>(6, 1.0f)) << gemm_library_name(library);
  }
}

TEST(CpuGemm, TheLibrariesAgreeWithinRounding) {
  if (!onednn_available()) GTEST_SKIP() << "oneDNN (libdnnl2) is not installed";
  LibraryGuard guard;
  std::mt19937 rng(std::random_device{}());
  const std::int64_t m = 300, n = 200, k = 768;
  const auto a = random_values(static_cast<std::size_t>(m * k), rng),
             b = random_values(static_cast<std::size_t>(k * n), rng);
  std::vector<float> with_openblas(static_cast<std::size_t>(m * n)), with_onednn(with_openblas.size());
  set_gemm_library(GemmLibrary::openblas);
  sgemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, with_openblas.data(), n);
  set_gemm_library(GemmLibrary::onednn);
  sgemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, with_onednn.data(), n);
  double worst = 0.0;
  for (std::size_t i = 0; i < with_onednn.size(); ++i)
    worst = std::max(worst, std::abs(double(with_onednn[i]) - with_openblas[i]));
  EXPECT_LT(worst, 1e-4);
}

TEST(CpuGemm, TheEnvironmentChoiceIsOneOfThreeAndNamedInItsError) {
  EXPECT_EQ(gemm_library_for("openblas"), GemmLibrary::openblas);
  EXPECT_EQ(gemm_library_for("auto"), onednn_available() ? GemmLibrary::onednn : GemmLibrary::openblas);
  EXPECT_EQ(gemm_library_for(""), gemm_library_for("auto"));  // the default
  if (onednn_available()) {
    EXPECT_EQ(gemm_library_for("onednn"), GemmLibrary::onednn);
  } else {
    EXPECT_THROW(gemm_library_for("onednn"), Error);
  }
  try {
    gemm_library_for("mkl");
    FAIL() << "an unknown library was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MYRIAD_CPU_GEMM is 'mkl'"), std::string::npos) << e.what();
  }
  EXPECT_NE(gemm_library_description(GemmLibrary::openblas).find("OpenBLAS"), std::string::npos);
  if (onednn_available()) EXPECT_NE(gemm_library_description(GemmLibrary::onednn).find("oneDNN"), std::string::npos);
}

}  // namespace
}  // namespace myriad::cpu
