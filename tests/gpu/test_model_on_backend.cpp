// One model, two backends: nn::GptModel built with a CudaBackend placement (its parameters,
// activations and scratch in that backend's memory, every op dispatched there) against the same
// GptModel on the host, from the same seed and batch — loss, every parameter gradient, each
// recompute mode, both families (GPT-2: LayerNorm, GELU, learned positions, tied head; LLaMA:
// RMSNorm, SwiGLU, RoPE, grouped-query attention), evaluation-only forwards and logits. Runs on a
// GPU (label gpu) and, in every CI run, on the emulated CUDA layer. KV-cache decoding on the
// backend equals the host's; block-sparse attention selecting per head selects on the device as
// the host does (the same blocks and stats).
#include <gtest/gtest.h>

#include "cuda_backend_fixture.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;
using testing::expect_error_mentions;

struct Batch {
  Tensor ids, targets;
};

Batch make_batch(std::int64_t B, std::int64_t T, std::int64_t vocab) {
  Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  for (std::int64_t i = 0; i < B * T; ++i) {
    batch.ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + 11) % vocab);
    batch.targets.data<std::int32_t>()[i] =
        i % 9 == 4 ? nn::GptModel::kIgnoreIndex : static_cast<std::int32_t>((i * 53 + 5) % vocab);
  }
  return batch;
}

// max |device - host| over a flat buffer, relative to the buffer's largest magnitude.
double relative_gap(const Tensor& device_values, const Tensor& host_values, CudaBackendTest& fixture) {
  const std::vector<double> got = testing::to_f64(device_values), want = testing::to_f64(host_values);
  (void)fixture;
  double worst = 0.0, scale = 1e-30;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}

class ModelOnBackendTest : public CudaBackendTest {
 protected:
  // `precision` bf16: both models compute as training.precision bf16 does (residual stream rounded,
  // every GEMM on bf16 operands); a GPU sums the GEMMs in another order, which a bf16 rounding can
  // turn into one bf16 step (2^-8) of a value, hence the looser bounds.
  void expect_same_step(const nn::TransformerConfig& config, Recompute mode, DType precision = DType::f32,
                        std::int64_t T = 32) {
    SCOPED_TRACE(::testing::Message() << "recompute " << static_cast<int>(mode));
    const bool low = precision != DType::f32;
    const double loss_tolerance = low ? 2e-3 : 1e-5, grad_tolerance = low ? 5e-2 : 1e-4;
    nn::GptModel host(config);
    nn::GptModel device(config, {}, true, ops::Placement{backend_.get()});
    host.set_activation_precision(precision);
    device.set_activation_precision(precision);
    host.initialize(2026);
    device.initialize(2026);
    EXPECT_EQ(device.parameters().flat_values().device(), Device::cuda(0));
    EXPECT_EQ(testing::to_f64(backend_->copy_to_host(device.parameters().flat_values())),
              testing::to_f64(host.parameters().flat_values()))
        << "the device model starts from the host model's values";
    const Batch batch = make_batch(2, T, config.vocab_size);
    for (int micro = 0; micro < 2; ++micro) {  // two micro-batches: gradients accumulate
      const nn::LossSum h = host.forward_backward(batch.ids, batch.targets, 1.0f / 57.0f, mode);
      const nn::LossSum d = device.forward_backward(batch.ids, batch.targets, 1.0f / 57.0f, mode);
      EXPECT_EQ(d.tokens, h.tokens);
      EXPECT_NEAR(d.sum, h.sum, loss_tolerance * std::abs(h.sum)) << "micro-batch " << micro;
    }
    const nn::BlockSelectionStats kept_h = host.attention_stats(), kept_d = device.attention_stats();
    EXPECT_EQ(kept_d.query_blocks, kept_h.query_blocks);
    EXPECT_EQ(kept_d.kept_blocks, kept_h.kept_blocks);
    EXPECT_EQ(kept_d.causal_blocks, kept_h.causal_blocks);
    EXPECT_EQ(kept_d.selecting_rows, kept_h.selecting_rows);
    EXPECT_NEAR(kept_d.estimated_mass, kept_h.estimated_mass, 1e-6 * (1.0 + kept_h.estimated_mass));
    const double gap =
        relative_gap(backend_->copy_to_host(device.parameters().flat_grads()), host.parameters().flat_grads(), *this);
    EXPECT_LE(gap, grad_tolerance) << "largest gradient difference relative to the largest gradient";
    const nn::LossSum eval_h = host.forward_loss(batch.ids, batch.targets);
    const nn::LossSum eval_d = device.forward_loss(batch.ids, batch.targets);
    EXPECT_NEAR(eval_d.sum, eval_h.sum, loss_tolerance * std::abs(eval_h.sum));
    const Tensor logits_h = host.forward_logits(batch.ids), logits_d = device.forward_logits(batch.ids);
    EXPECT_TRUE(logits_d.device().is_cpu());
    EXPECT_LE(relative_gap(logits_d, logits_h, *this), low ? 1e-2 : 1e-5);
  }
};

TEST_F(ModelOnBackendTest, Gpt2FamilyEqualsTheHostModelInEveryRecomputeMode) {
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    expect_same_step(nn::TransformerConfig::gpt2(200, 2, 2, 128, 64), mode);
  }
}

TEST_F(ModelOnBackendTest, Bf16ComputeEqualsTheHostModel) {
  expect_same_step(nn::TransformerConfig::gpt2(200, 2, 2, 128, 64), Recompute::none, DType::bf16);
  expect_same_step(nn::TransformerConfig::llama(200, 2, 2, 1, 128, 64), Recompute::selective, DType::bf16);
}

// Block-sparse attention selecting its blocks per head: the device model selects on the device
// (its layout read in place by the flash kernels, its stats added there) as the host selects.
TEST_F(ModelOnBackendTest, SelectingBlockSparseEqualsTheHostModel) {
  nn::TransformerConfig config = nn::TransformerConfig::llama(200, 2, 2, 1, 128, 128);
  config.attention.kind = nn::AttentionKind::block_sparse;
  config.attention.block_size = 32;
  config.attention.fixed = FixedBlockPattern{.local_blocks = 0, .global_blocks = 1};
  config.attention.sparse_ratio = 0.6;
  config.attention.max_blocks = 1;
  for (Recompute mode : {Recompute::none, Recompute::full}) expect_same_step(config, mode, DType::f32, 128);
}

TEST_F(ModelOnBackendTest, LlamaFamilyEqualsTheHostModel) {
  expect_same_step(nn::TransformerConfig::llama(200, 2, 2, 1, 128, 64), Recompute::none);
}

// Training: the same AdamW optimizer over the device model's parameters keeps its moments on the
// device (one implementation, the ops' CPU or CUDA update) and follows the host run step by step.
TEST_F(ModelOnBackendTest, AdamWStepsOnTheDeviceFollowTheHostRun) {
  const nn::TransformerConfig config = nn::TransformerConfig::llama(200, 2, 2, 1, 128, 64);
  nn::GptModel host(config), device(config, {}, true, ops::Placement{backend_.get()});
  host.initialize(7);
  device.initialize(7);
  const optim::AdamWConfig adam{.weight_decay = 0.1f, .grad_clip = 0.5f};
  optim::AdamWOptimizer host_adam(host.parameters(), adam), device_adam(device.parameters(), adam);
  EXPECT_EQ(device_adam.m().device(), Device::cuda(0));
  const Batch batch = make_batch(2, 32, config.vocab_size);
  std::vector<double> host_losses, device_losses;
  for (int step = 0; step < 4; ++step) {
    for (nn::GptModel* model : {&host, &device}) model->parameters().zero_grads();
    host_losses.push_back(host.forward_backward(batch.ids, batch.targets, 1.0f / 57.0f, Recompute::none).sum);
    device_losses.push_back(device.forward_backward(batch.ids, batch.targets, 1.0f / 57.0f, Recompute::none).sum);
    const optim::OptimizerStepStats h = host_adam.step(3e-3f), d = device_adam.step(3e-3f);
    EXPECT_NEAR(d.grad_norm, h.grad_norm, 1e-4 * h.grad_norm) << "step " << step;
    EXPECT_NEAR(d.clip_scale, h.clip_scale, 1e-4) << "step " << step;
  }
  for (std::size_t i = 0; i < host_losses.size(); ++i) {
    EXPECT_NEAR(device_losses[i], host_losses[i], 1e-4 * std::abs(host_losses[i])) << "step " << i;
  }
  EXPECT_LT(host_losses.back(), host_losses.front()) << "the run must learn for the comparison to mean much";
  EXPECT_LE(
      relative_gap(backend_->copy_to_host(device.parameters().flat_values()), host.parameters().flat_values(), *this),
      1e-4);
  EXPECT_LE(relative_gap(backend_->copy_to_host(device_adam.v()), host_adam.v(), *this), 1e-3);
}

// Every op of the backend runs on its tensors' GPU whatever the caller's current device is (a
// rank's GPU need not be device 0): the whole model on a second GPU, with device 0 current. On
// the emulated layer every launch is checked against the current device.
TEST(ModelOnSecondGpu, EveryLaunchLandsOnTheTensorsDevice) {
  if (cuda::cuda_device_count_or_zero() < 2) GTEST_SKIP() << "needs two CUDA devices";
  MYRIAD_CUDA_CHECK(cudaSetDevice(0));
  cuda::DeviceContext context(1);
  cuda::CudaBackend backend(context);
  const nn::TransformerConfig config = nn::TransformerConfig::llama(200, 2, 2, 1, 128, 64);
  nn::GptModel host(config), device(config, {}, true, ops::Placement{&backend});
  host.initialize(3);
  device.initialize(3);
  const Batch batch = make_batch(2, 16, config.vocab_size);
  const nn::LossSum h = host.forward_backward(batch.ids, batch.targets, 1.0f, Recompute::full);
  const nn::LossSum d = device.forward_backward(batch.ids, batch.targets, 1.0f, Recompute::full);
  EXPECT_NEAR(d.sum, h.sum, 1e-5 * std::abs(h.sum));
  optim::AdamWOptimizer adam(device.parameters(), optim::AdamWConfig{});
  EXPECT_TRUE(std::isfinite(adam.step(1e-3f).grad_norm));
  int current = -1;
  MYRIAD_CUDA_CHECK(cudaGetDevice(&current));
  EXPECT_EQ(current, 0) << "the backend changed the caller's current device";
}

// Paged KV-cache decoding on the backend: the same logits as the host model's decode, a prompt
// step then position by position, for both families (the LLaMA one with RoPE offsets and
// grouped kv heads), two sequences batched.
TEST_F(ModelOnBackendTest, PagedDecodingOnTheBackendEqualsTheHost) {
  for (const nn::TransformerConfig& config :
       {nn::TransformerConfig::gpt2(200, 2, 2, 128, 64), nn::TransformerConfig::llama(200, 2, 4, 2, 256, 64)}) {
    nn::GptModel host(config), device(config, {}, true, ops::Placement{backend_.get()});
    host.initialize(11);
    device.initialize(11);
    nn::PagedKvCache host_cache = host.make_paged_kv_cache(4, 8), device_cache = device.make_paged_kv_cache(4, 8);
    EXPECT_EQ(device_cache.k[0].device(), Device::cuda(0));
    const std::vector<std::int32_t> first = {0, 2, 4, 6}, second = {7, 5, 3, 1};
    std::vector<nn::DecodeSequence> step = {{.tokens = {5, 9, 13}, .start = 0, .blocks = &first},
                                            {.tokens = {21}, .start = 0, .blocks = &second}};
    for (int round = 0; round < 9; ++round) {
      const Tensor want = host.decode(step, host_cache), got = device.decode(step, device_cache);
      EXPECT_TRUE(got.device().is_cpu());
      EXPECT_LE(relative_gap(got, want, *this), 1e-5) << "round " << round;
      for (nn::DecodeSequence& seq : step) {
        seq.start += static_cast<std::int64_t>(seq.tokens.size());
        seq.tokens = {static_cast<std::int32_t>((seq.start * 31 + 7) % config.vocab_size)};
      }
    }
  }
}

}  // namespace
}  // namespace myriad
