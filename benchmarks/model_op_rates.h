// Rates of the engine's own ops at one transformer block's shapes (M tokens, width C, GELU MLP of
// 4C), for the machine profile that bench_gemm --profile writes:
// - GEMMs forward and backward: matmul_forward, then matmul_backward (grad of both operands) of
//   the block's linear layers, (M, K) x (N, K)^T: K C -> N 3C, C, 4C and K 4C -> N C, plus the
//   head K C -> N V. FLOPs 6 M N K per shape over the summed median times. The same on one rank of
//   a tp split (tp 2, 4, 8 dividing C): qkv and fc N / tp, proj and fc2 K / tp, head V / tp.
// - The planner's memory-class ops as it counts their bytes (step_time.py layer_pass, gpt2, f32),
//   each rate = those bytes over the measured time of the engine's ops, forward + backward
//   (backward bytes = 2 x forward, the planner's rule): memory = two layernorms (read C, write C per
//   row) and two residual adds (read 2C, write C); activation = the GELU (read 4C, write 4C).
//   Bias adds, softmax and the loss are not in them (the planner counts no bytes for them in a block).
// - The optimizer: adamw_update plus zeroing the gradients over `optimizer_elements` f32 elements,
//   32 bytes per element (read p, g, m, v; write p, m, v; write g) -- the planner's count, whose
//   extra 4-byte gradient-norm read is charged at the same rate.
// Invariants: every tensor is filled before timing; times are medians of time_it (>= 5 calls).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace myriad::bench {

struct ModelOpRates {
  double gemm_training_flops_per_s = 0;  // forward + backward GEMMs of the block and head
  double gemm_backward_flops_per_s = 0;  // the backward part alone
  std::vector<std::pair<int, double>> gemm_training_flops_per_s_by_tp;  // (tp, rate) of one rank's split GEMMs
  double memory_bytes_per_s = 0;      // layernorms + residual adds, planner-counted bytes / time
  double memory_seconds = 0;          // their time for one block, forward + backward
  double activation_bytes_per_s = 0;  // GELU, planner-counted bytes / time
  double activation_seconds = 0;      // its time for one block, forward + backward
  double optimizer_bytes_per_s = 0;   // AdamW + zeroing, 32 bytes per element / time
};

ModelOpRates measure_model_op_rates(std::int64_t tokens, std::int64_t embd, std::int64_t vocab,
                                    std::int64_t optimizer_elements = std::int64_t{4} << 20);

}  // namespace myriad::bench
