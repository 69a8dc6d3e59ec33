// Grouped matmul dispatch points: validate dtypes / shapes / contiguity / the host offsets / one
// device, then pick the backend. The CPU reference receives f32 operands (16-bit ones widened
// exactly, as matmul's dispatch does); a device backend receives them as they are.
#include "myriad/ops/grouped_matmul.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_operand.h"

namespace myriad {

namespace {

struct GroupedDims {
  std::int64_t rows, in, out, groups;  // R, K, M, G
};

// x (R, K) and weight (G, M, K): both f32, both bf16 or both f16, contiguous.
GroupedDims check_operands(const char* op, const Tensor& x, const Tensor& weight) {
  ops::check_rank(op, "x", x, 2);
  ops::check_rank(op, "weight", weight, 3);
  const DType t = x.dtype();
  MYRIAD_CHECK((t == DType::f32 || t == DType::bf16 || t == DType::f16) && weight.dtype() == t,
               op << ": x " << x.describe() << " and weight " << weight.describe()
                  << " must be both f32, both bf16 or both f16 (16-bit operands, f32 sums and outputs)");
  MYRIAD_CHECK(weight.size(2) == x.size(1), op << ": 'weight' has shape " << shape_string(weight.shape())
                                               << ", expected (G, M, " << x.size(1) << ") (K of x " << x.describe()
                                               << ")");
  ops::check_contiguous(op, "x", x);
  ops::check_contiguous(op, "weight", weight);
  return {x.size(0), x.size(1), weight.size(1), weight.size(0)};
}

// G + 1 entries, offsets[0] = 0, non-decreasing, offsets[G] = R.
void check_offsets(const char* op, const std::vector<std::int64_t>& offsets, const GroupedDims& dims) {
  MYRIAD_CHECK(static_cast<std::int64_t>(offsets.size()) == dims.groups + 1,
               op << ": 'offsets' has " << offsets.size() << " entries, expected G + 1 = " << dims.groups + 1
                  << " (G = " << dims.groups << " groups of weight)");
  MYRIAD_CHECK(offsets.front() == 0, op << ": 'offsets' must start at 0, offsets[0] = " << offsets.front());
  for (std::size_t g = 1; g < offsets.size(); ++g) {
    MYRIAD_CHECK(offsets[g] >= offsets[g - 1], op << ": 'offsets' must be non-decreasing, offsets[" << g << "] = "
                                                  << offsets[g] << " < offsets[" << g - 1 << "] = " << offsets[g - 1]);
  }
  MYRIAD_CHECK(offsets.back() == dims.rows, op << ": 'offsets' must end at R = " << dims.rows
                                               << " (rows of x), offsets[" << offsets.size() - 1
                                               << "] = " << offsets.back());
}

}  // namespace

void grouped_matmul_forward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const std::vector<std::int64_t>& offsets, Tensor& out) {
  const char* op = "grouped_matmul_forward";
  const GroupedDims dims = check_operands(op, x, weight);
  check_offsets(op, offsets, dims);
  if (bias.defined()) ops::check_f32_contiguous(op, "bias", bias, {dims.groups, dims.out});
  ops::check_f32_contiguous(op, "out", out, {dims.rows, dims.out});
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"x", &x}, {"weight", &weight}, {"bias", &bias}, {"out", &out}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu())
    return cpu::grouped_matmul_forward(args, ops::as_f32_operand(x), ops::as_f32_operand(weight), bias, offsets, out);
  ops::backend_of(op, tensors).grouped_matmul_forward(args, x, weight, bias, offsets, out);
}

void grouped_matmul_backward(const GroupedMatmulArgs& args, const Tensor& x, const Tensor& weight,
                             const std::vector<std::int64_t>& offsets, const Tensor& grad_out, Tensor& grad_x,
                             Tensor& grad_weight, Tensor& grad_bias) {
  const char* op = "grouped_matmul_backward";
  const GroupedDims dims = check_operands(op, x, weight);
  check_offsets(op, offsets, dims);
  ops::check_f32_contiguous(op, "grad_out", grad_out, {dims.rows, dims.out});
  if (grad_x.defined()) ops::check_f32_contiguous(op, "grad_x", grad_x, x.shape());
  if (grad_weight.defined()) ops::check_f32_contiguous(op, "grad_weight", grad_weight, weight.shape());
  if (grad_bias.defined()) ops::check_f32_contiguous(op, "grad_bias", grad_bias, {dims.groups, dims.out});
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"x", &x},           {"weight", &weight},           {"grad_out", &grad_out},
      {"grad_x", &grad_x}, {"grad_weight", &grad_weight}, {"grad_bias", &grad_bias}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return cpu::grouped_matmul_backward(args, ops::as_f32_operand(x), ops::as_f32_operand(weight), offsets, grad_out,
                                        grad_x, grad_weight, grad_bias);
  }
  ops::backend_of(op, tensors)
      .grouped_matmul_backward(args, x, weight, offsets, grad_out, grad_x, grad_weight, grad_bias);
}

}  // namespace myriad
