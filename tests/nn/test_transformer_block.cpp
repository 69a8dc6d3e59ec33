// TransformerBlock's backward with the gradients mixed precision keeps in 16 bits
// (block_gradient_formats: the attention's d_att, d_qkv at head dim 64 / 128, SwiGLU's d_fc, d_up):
// one forward, then the same backward on an f32 scratch (the GEMMs round those gradients per call)
// and on the kept-format scratch. Every weight's gradient and the input gradient are equal bit for
// bit; a bias gradient, now the column sums of the 16-bit values, within their rounding (equal where
// the kept values are the f32 ones: a GPT-2 block). And the residual stream in 16 bits: a block
// reading a bf16 / f16 x and writing a 16-bit y gives, bit for bit, the y of the f32 block rounded
// once and the gradients of the f32 block on the same values; and a GPT-2 block's qkv kept in the
// format (no RoPE reads it before the attention rounds it) gives those of an f32 qkv.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/nn/transformer_block.h"
#include "myriad/ops/elementwise.h"
#include "reference.h"

namespace myriad::nn {
namespace {

struct KeptGradientsRun {
  std::vector<std::vector<double>> grads;  // per parameter
  std::vector<double> input_grad;
};

KeptGradientsRun block_backward_on(const TransformerBlock& block, ParameterStore& store, const Tensor& x,
                                   const BlockActivations& acts, BlockScratch scratch, const Tensor& grad_y) {
  store.zero_grads();
  Tensor grad = grad_y.clone();
  block.backward(store, x, acts, scratch, grad, {1.0f});
  KeptGradientsRun r;
  for (const Parameter& p : store.all()) r.grads.push_back(testing::to_f64(p.grad));
  r.input_grad = testing::to_f64(grad);
  return r;
}

// `biases_exact`: a GPT-2 block's kept gradients hold the values the f32 ones had (the attention
// rounds its gradients; no RoPE follows; the GELU's d_fc is f32 in both runs here), so its biases' too.
void expect_kept_gradients_change_only_biases(const TransformerConfig& config, const char* name, bool biases_exact) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, T = 6;
  const DType format = DType::bf16;
  const ModelSplit split;
  const BlockGradientFormats formats = block_gradient_formats(config, split, format);
  ASSERT_EQ(formats.attention, format) << name << ": head dim " << config.head_dim();
  ParameterStore store;
  TransformerBlock block(config, split, 0, store);
  store.allocate();
  store.initialize(seed);
  for (Parameter& p : store.all()) {  // biases away from their zero init, so their gradients matter
    if (p.kind == ParamKind::bias) p.value.copy_from(testing::random_tensor(p.value.shape(), seed, 40));
  }
  block.set_gemm_operands(format);
  BlockActivations acts;
  for (const ActivationSlot& slot : block_activation_slots(config, split, B, T, format)) {
    acts.*(slot.member) = Tensor::empty(slot.shape, slot.dtype);
  }
  // SwiGLU's gate and up in f32 here: a 16-bit gate takes 16-bit gradients only (ops/activations.h),
  // and this compares the gradients' formats. A GELU's pre-activation and its gradient share a type
  // (ops/linear.h): both f32 here, so the GELU MLP's part is the f32 one in both runs.
  acts.fc = Tensor::empty(acts.fc.shape());
  if (config.mlp == MlpKind::swiglu) acts.up = Tensor::empty(acts.up.shape());
  const Tensor x = testing::random_tensor({B, T, config.n_embd}, seed, 1).to(format).to(DType::f32);
  Tensor y = Tensor::empty({B, T, config.n_embd});
  BlockScratch wide = make_block_scratch({}, config, split, B, T, DType::f32);
  BlockScratch narrow = make_block_scratch({}, config, split, B, T, format);
  if (config.mlp == MlpKind::gelu) narrow.d_fc = Tensor::empty(narrow.d_fc.shape());
  ASSERT_EQ(narrow.d_qkv.dtype(), format);
  ASSERT_EQ(narrow.d_att.dtype(), format);
  ASSERT_EQ(wide.d_qkv.dtype(), DType::f32);
  block.forward(store, x, y, acts, wide);
  const Tensor grad_y = testing::random_tensor({B, T, config.n_embd}, seed, 2).to(format).to(DType::f32);
  const KeptGradientsRun f32_scratch = block_backward_on(block, store, x, acts, wide, grad_y);
  const KeptGradientsRun kept = block_backward_on(block, store, x, acts, narrow, grad_y);
  EXPECT_EQ(kept.input_grad, f32_scratch.input_grad) << name << ": dL/dx";
  int biases_checked = 0;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const Parameter& p = store[i];
    if (p.kind != ParamKind::bias || biases_exact) {
      EXPECT_EQ(kept.grads[i], f32_scratch.grads[i]) << name << ": " << p.name;
      continue;
    }
    // Column sums of N values each rounded once (half an ulp of bf16, 2^-8, relative).
    const std::vector<double>& got = kept.grads[i];
    const std::vector<double>& want = f32_scratch.grads[i];
    for (std::size_t j = 0; j < want.size(); ++j) {
      EXPECT_NEAR(got[j], want[j], 1e-6 + std::ldexp(1.0, -8) * static_cast<double>(B * T) * 0.5)
          << name << ": " << p.name << "[" << j << "]";
    }
    ++biases_checked;
  }
  EXPECT_TRUE(biases_exact || biases_checked > 0) << name;
}

TEST(TransformerBlock, KeptSixteenBitGradientsGiveTheWeightGradientsOfF32Ones) {
  TransformerConfig gpt2 = TransformerConfig::gpt2(64, 1, 2, 128, 8);  // head dim 64: 16-bit attention
  expect_kept_gradients_change_only_biases(gpt2, "GPT-2 block", true);
  TransformerConfig llama = TransformerConfig::llama(64, 1, 2, 1, 128, 8);  // RoPE, SwiGLU, grouped kv
  llama.bias = true;
  ASSERT_EQ(block_gradient_formats(llama, ModelSplit{}, DType::bf16).mlp, DType::bf16);
  expect_kept_gradients_change_only_biases(llama, "LLaMA block with biases", false);
  // Not kept: f32 operands. A GELU MLP's d_fc is kept with its pre-activation (the test below).
  EXPECT_EQ(block_gradient_formats(llama, ModelSplit{}, DType::f32).attention, DType::f32);
  EXPECT_EQ(block_gradient_formats(gpt2, ModelSplit{}, DType::bf16).mlp, DType::bf16);
}

// One block, forward and backward, on x of the residual format (f32 holding values of `format`, or
// `format` itself); y is written in that format too (an f32 y then rounded to `format`).
struct ResidualRun {
  std::vector<double> y;
  KeptGradientsRun backward;
};

// `f32_qkv`: the qkv activation in f32 whatever block_activation_slots keeps it in.
ResidualRun run_on_residual(const TransformerConfig& config, DType format, DType residual, std::uint64_t seed,
                            bool f32_qkv = false) {
  const std::int64_t B = 2, T = 6;
  const ModelSplit split;
  ParameterStore store;
  TransformerBlock block(config, split, 0, store);
  store.allocate();
  store.initialize(seed);
  for (Parameter& p : store.all()) {
    if (p.kind == ParamKind::bias) p.value.copy_from(testing::random_tensor(p.value.shape(), seed, 40));
  }
  block.set_gemm_operands(format);
  BlockActivations acts;
  for (const ActivationSlot& slot : block_activation_slots(config, split, B, T, format)) {
    if (slot.dense_mlp && block.moe() != nullptr) continue;
    acts.*(slot.member) = Tensor::empty(slot.shape, slot.dtype);
  }
  if (block.moe() != nullptr) acts.moe = std::make_shared<MoeActivations>();
  if (f32_qkv) acts.qkv = Tensor::empty(acts.qkv.shape());
  const Tensor x = testing::random_tensor({B, T, config.n_embd}, seed, 1).to(format).to(residual);
  Tensor y = Tensor::empty({B, T, config.n_embd}, residual);
  BlockScratch scratch = make_block_scratch({}, config, split, B, T, format);
  block.forward(store, x, y, acts, scratch);
  if (residual == DType::f32) round_to_format(y, format);
  ResidualRun r;
  r.y = testing::to_f64(y);
  const Tensor grad_y = testing::random_tensor({B, T, config.n_embd}, seed, 2).to(format).to(DType::f32);
  r.backward = block_backward_on(block, store, x, acts, scratch, grad_y);
  return r;
}

TEST(TransformerBlock, ASixteenBitResidualStreamGivesTheNumbersOfTheRoundedF32One) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TransformerConfig llama = TransformerConfig::llama(64, 1, 2, 1, 128, 8);
  llama.bias = true;
  TransformerConfig moe = TransformerConfig::llama(16, 1, 2, 2, 16, 8);  // head dim 8: f32 attention
  moe.moe.num_experts = 4;
  moe.moe.top_k = 2;
  moe.moe.expert_capacity = 3;
  const std::pair<TransformerConfig, const char*> blocks[] = {
      {TransformerConfig::gpt2(64, 1, 2, 128, 8), "GPT-2 block"}, {llama, "LLaMA block"}, {moe, "MoE block"}};
  for (const auto& [config, name] : blocks) {
    for (DType format : {DType::bf16, DType::f16}) {
      const ResidualRun f32 = run_on_residual(config, format, DType::f32, seed);
      const ResidualRun kept = run_on_residual(config, format, format, seed);
      const std::string what = std::string(name) + " " + std::string(dtype_name(format));
      EXPECT_EQ(kept.y, f32.y) << what << ": y";
      EXPECT_EQ(kept.backward.input_grad, f32.backward.input_grad) << what << ": dL/dx";
      EXPECT_EQ(kept.backward.grads, f32.backward.grads) << what << ": parameter gradients";
      if (config.positions == PositionKind::learned) {  // qkv kept 16-bit: the values the attention rounds to
        const ResidualRun wide_qkv = run_on_residual(config, format, format, seed, true);
        EXPECT_EQ(kept.y, wide_qkv.y) << what << ": y with an f32 qkv";
        EXPECT_EQ(kept.backward.input_grad, wide_qkv.backward.input_grad) << what << ": dL/dx with an f32 qkv";
        EXPECT_EQ(kept.backward.grads, wide_qkv.backward.grads) << what << ": gradients with an f32 qkv";
      }
    }
  }
}

}  // namespace
}  // namespace myriad::nn
