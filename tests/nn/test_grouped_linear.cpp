// nn::grouped_linear_forward against float64: with an INT8 expert weight (G, M, K) attached to the
// parameter, each group's rows times its expert's dequantised matrix (empty groups, per channel
// and per group scales); without one, the grouped matmul of the f32 value; bad offsets and 16-bit
// operands with an INT8 weight are refused naming the parameter.
#include <gtest/gtest.h>

#include <vector>

#include "myriad/nn/linear.h"
#include "myriad/ops/int8_linear.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad::nn {
namespace {

TEST(GroupedLinear, Int8ExpertsEqualFloat64OnEachExpertsDequantisedMatrix) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t G = 4, M = 19, K = 40;
  const std::vector<std::int64_t> offsets{0, 5, 5, 12, 20};  // expert 1 gets no rows
  const std::int64_t R = offsets.back();
  const Tensor w = testing::random_tensor({G, M, K}, seed, 0, -2.0f, 2.0f);
  const Tensor x = testing::random_tensor({R, K}, seed, 1);
  const std::vector<double> vx = testing::to_f64(x);
  for (std::int64_t group : {0, 16}) {
    SCOPED_TRACE("group_size " + std::to_string(group));
    const std::int64_t groups = int8_groups(K, group);
    Parameter p;
    p.name = "blocks.0.moe.experts.gate.weight";
    p.shape = {G, M, K};
    p.int8_values = Tensor::empty({G, M, K}, DType::i8);
    p.int8_scales = Tensor::empty({G, M, groups});
    p.int8_group = group;
    Tensor q = p.int8_values.view({G * M, K}), scales = p.int8_scales.view({G * M, groups});
    quantize_int8(Int8Args{.group_size = group}, w.view({G * M, K}), q, scales);  // per expert per channel
    Tensor deq = Tensor::empty({G * M, K});
    dequantize_int8(Int8Args{.group_size = group}, q, scales, deq);
    const std::vector<double> vw = testing::to_f64(deq);
    std::vector<double> expected;
    for (std::int64_t g = 0; g < G; ++g) {
      for (std::int64_t r = offsets[g]; r < offsets[g + 1]; ++r) {
        for (std::int64_t m = 0; m < M; ++m) {
          double sum = 0.0;
          for (std::int64_t k = 0; k < K; ++k) sum += vx[r * K + k] * vw[(g * M + m) * K + k];
          expected.push_back(sum);
        }
      }
    }
    Tensor out = Tensor::full({R, M}, 7.0);
    grouped_linear_forward(x, p, offsets, out);
    testing::expect_close(out, expected, 1e-5, 1e-5, "out");
    // The f32 parameter (no INT8 attached) through the grouped matmul gives the same numbers.
    Parameter plain;
    plain.name = "plain";
    plain.shape = {G, M, K};
    plain.value = deq.view({G, M, K});
    Tensor out_f32 = Tensor::empty({R, M});
    grouped_linear_forward(x, plain, offsets, out_f32);
    testing::expect_close(out_f32, expected, 1e-5, 1e-5, "f32 out");

    testing::expect_error_naming(
        [&] {
          grouped_linear_forward(x, p, {0, 5, 5, 12}, out);
        },
        {"blocks.0.moe.experts.gate.weight", "offsets"});
    testing::expect_error_naming([&] { grouped_linear_forward(x, p, offsets, out, DType::bf16); },
                                 {"blocks.0.moe.experts.gate.weight", "bf16"});
  }
}

}  // namespace
}  // namespace myriad::nn
