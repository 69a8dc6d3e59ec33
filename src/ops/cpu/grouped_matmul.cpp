// CPU grouped matmul on OpenBLAS sgemm (ops/grouped_matmul.h): one row-major sgemm per non-empty
// group over that group's rows, which is what a grouped GEMM is on a CPU. Operands arrive as f32
// (the dispatch point widens 16-bit ones exactly). Groups write disjoint rows of out / grad_x and
// disjoint matrices of grad_weight / grad_bias, so with many small groups they run in parallel,
// one sgemm per thread (OpenBLAS's OpenMP build runs single-threaded inside a parallel region);
// with few large ones each sgemm uses the threads itself. Either way every output element is
// computed by one sgemm (OpenBLAS splits M and N, never K) and the bias gradient sums rows in
// increasing order, so the results do not depend on the thread count.
#include <omp.h>

#include <cstring>
#include <vector>

#include "myriad/ops/grouped_matmul.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {

namespace {

// Groups in parallel when there are enough of them for the threads, or when they are small
// enough that OpenBLAS would not thread inside one (the rule of matmul's batched loop).
bool parallel_groups(const std::vector<std::int64_t>& offsets, std::int64_t m, std::int64_t k) {
  const auto groups = static_cast<std::int64_t>(offsets.size()) - 1;
  const std::int64_t average_rows = groups > 0 ? offsets.back() / groups : 0;
  return groups >= 2 * omp_get_max_threads() || (groups >= 2 && average_rows * m * k < (1 << 21));
}

}  // namespace

void grouped_matmul_forward(const GroupedMatmulArgs&, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const std::vector<std::int64_t>& offsets, Tensor& out) {
  const std::int64_t groups = weight.size(0), m = weight.size(1), k = weight.size(2);
  const float* xp = x.data<float>();
  const float* wp = weight.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* out_p = out.data<float>();
#pragma omp parallel for schedule(dynamic) if (parallel_groups(offsets, m, k))
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n == 0 || m == 0) continue;
    float* o = out_p + r0 * m;
    if (k == 0) {
      std::memset(o, 0, static_cast<std::size_t>(n * m) * sizeof(float));
    } else {  // out_g (n, M) = x_g (n, K) @ W_g^T, W_g stored (M, K)
      sgemm(false, true, n, m, k, 1.0f, xp + r0 * k, k, wp + g * m * k, k, 0.0f, o, m);
    }
    if (bp == nullptr) continue;
    const float* b = bp + g * m;
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < m; ++c) o[r * m + c] += b[c];
  }
}

void grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                             const std::vector<std::int64_t>& offsets, const Tensor& grad_out, Tensor& grad_x,
                             Tensor& grad_weight, Tensor& grad_bias) {
  const std::int64_t groups = weight.size(0), m = weight.size(1), k = weight.size(2);
  const float* go = grad_out.data<float>();
  const float* xp = grad_weight.defined() ? x.data<float>() : nullptr;
  const float* wp = grad_x.defined() ? weight.data<float>() : nullptr;
  float* gx = grad_x.defined() ? grad_x.data<float>() : nullptr;
  float* gw = grad_weight.defined() ? grad_weight.data<float>() : nullptr;
  float* gb = grad_bias.defined() ? grad_bias.data<float>() : nullptr;
  const float beta_x = args.accumulate_grad_x ? 1.0f : 0.0f;
#pragma omp parallel for schedule(dynamic) if (parallel_groups(offsets, m, k))
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n == 0) continue;  // no rows: grad_weight_g and grad_bias_g unchanged
    const float* go_g = go + r0 * m;
    if (gx != nullptr && k > 0) {
      if (m == 0) {
        if (!args.accumulate_grad_x) std::memset(gx + r0 * k, 0, static_cast<std::size_t>(n * k) * sizeof(float));
      } else {  // grad_x_g (n, K) = grad_out_g (n, M) @ W_g (M, K)
        sgemm(false, false, n, k, m, 1.0f, go_g, m, wp + g * m * k, k, beta_x, gx + r0 * k, k);
      }
    }
    if (gw != nullptr && m > 0 && k > 0) {  // grad_W_g (M, K) += grad_out_g^T (M, n) @ x_g (n, K)
      sgemm(true, false, m, k, n, 1.0f, go_g, m, xp + r0 * k, k, 1.0f, gw + g * m * k, k);
    }
    if (gb != nullptr && m > 0) {  // column sums over the group's rows, rows in increasing order
      std::vector<float> sums(go_g, go_g + m);
      for (std::int64_t r = 1; r < n; ++r)
        for (std::int64_t c = 0; c < m; ++c) sums[c] += go_g[r * m + c];
      for (std::int64_t c = 0; c < m; ++c) gb[g * m + c] += sums[c];
    }
  }
}

}  // namespace myriad::cpu
