// nn::grouped_linear_forward — an MoE layer's experts as one call (nn/linear.h): the grouped matmul
// op on the f32 (or 16-bit) weight, or, for a weight-only INT8 expert weight (G, M, K) with scales
// (G, M, groups), one int8 linear per non-empty group on that group's rows and matrix (the same
// int8 GEMM the dense layers use, on every backend; views, no copies).
#include "myriad/core/error.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/grouped_matmul.h"
#include "myriad/ops/int8_linear.h"

namespace myriad::nn {

void grouped_linear_forward(const Tensor& x, const Parameter& weight, const std::vector<std::int64_t>& offsets,
                            Tensor& out, DType operands) {
  if (!weight.int8_values.defined()) {
    grouped_matmul_forward({}, x, weight_operand(weight, operands), Tensor(), offsets, out);
    return;
  }
  const Tensor& q = weight.int8_values;       // (G, M, K)
  const Tensor& scales = weight.int8_scales;  // (G, M, groups)
  MYRIAD_CHECK(operands == DType::f32, "experts '" << weight.name << "': an INT8 weight computes with f32 activations, "
                                                   << "not " << dtype_name(operands) << " GEMM operands");
  MYRIAD_CHECK(q.dim() == 3 && offsets.size() == static_cast<std::size_t>(q.size(0)) + 1,
               "experts '" << weight.name << "': INT8 weight " << q.describe()
                           << " needs (G, M, K) and G + 1 = " << offsets.size() << " offsets");
  MYRIAD_CHECK(
      x.dim() == 2 && out.dim() == 2 && offsets.front() == 0 && offsets.back() == x.size(0) && out.size(0) == x.size(0),
      "experts '" << weight.name << "': rows x " << x.describe() << ", out " << out.describe()
                  << " must match the offsets' " << offsets.back() << " rows");
  const std::int64_t M = q.size(1), K = q.size(2), groups = scales.size(2);
  for (std::int64_t g = 0; g < q.size(0); ++g) {
    const std::int64_t begin = offsets[g], end = offsets[g + 1];
    MYRIAD_CHECK(begin <= end, "experts '" << weight.name << "': offsets[" << g << "] " << begin << " > offsets["
                                           << g + 1 << "] " << end);
    if (begin == end) continue;
    Tensor rows_out = out.slice(0, begin, end);
    int8_linear_forward(Int8Args{.group_size = weight.int8_group}, x.slice(0, begin, end),
                        q.slice(0, g, g + 1).view({M, K}), scales.slice(0, g, g + 1).view({M, groups}), Tensor(),
                        rows_out);
  }
}

}  // namespace myriad::nn
