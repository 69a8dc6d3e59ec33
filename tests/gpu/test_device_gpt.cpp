// DeviceGpt (the training step on one GPU) against nn::GptModel and optim::AdamWOptimizer on the
// CPU, for both model families (GPT-2; LLaMA-style with RMSNorm, SwiGLU, RoPE, GQA, untied head),
// from the same initial parameters and the same fresh random batch:
//  - loss, and every parameter's gradient after one forward/backward (f32 on both sides, only
//    summation orders differ: |gpu - cpu| <= 1e-4 x max|cpu grad of that tensor| + 1e-7);
//  - the loss curve over 4 AdamW steps with clipping (relative 1e-4; TF32 GEMMs 2e-2; bf16
//    GEMM operands (8-bit mantissas) 3e-2, and the bf16 gap must be visible: > 1e-6; f16
//    operands (11-bit mantissas) with a loss scale of 1024 unscaled by step(): 1e-2, gap > 1e-7);
//  - f16 with a loss scale that overflows: the step is skipped and changes nothing;
//  - activation recompute (selective, full): gradients bit-identical to keeping everything (the
//    same kernels on the same inputs), in f32 and bf16, with fewer activation bytes;
//  - ignored targets, and a token outside the vocabulary reported with its position;
//  - without flat gradients (ZeRO 2), the units' gradients handed to a UnitGradientStore equal
//    the flat buffer's bit for bit, each unit reported final once per backward; without flat
//    values either (ZeRO 3), reading each unit from a UnitValueStore gives the same losses and
//    gradients bit for bit, every acquisition released.
// Skips without a device (DeviceGpt allocates on construction, after its scope checks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "gpu_test_support.h"
#include "myriad/core/half.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/device_gpt.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::expect_error_mentions;

nn::TransformerConfig tiny_gpt2() {
  // Vocabulary 200 (padded to 256), 2 layers, 2 heads of 64, block 64.
  return nn::TransformerConfig::gpt2(200, 2, 2, 128, 64);
}

struct Batch {
  Tensor ids, targets;
  float loss_scale = 0.0f;
};

Batch random_batch(std::int64_t B, std::int64_t T, std::int64_t vocab, std::uint64_t seed, std::uint64_t stream) {
  Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  Tensor u = Tensor::empty({2 * B * T});
  fill_uniform(u, 0.0f, 1.0f, seed, stream);
  std::int64_t valid = 0;
  for (std::int64_t i = 0; i < B * T; ++i) {
    batch.ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(u.data<float>()[i] * static_cast<float>(vocab)) %
                                        static_cast<std::int32_t>(vocab);
    const float r = u.data<float>()[B * T + i];
    const bool ignored = i % 13 == 5;  // a few ignored targets
    batch.targets.data<std::int32_t>()[i] =
        ignored ? nn::GptModel::kIgnoreIndex : static_cast<std::int32_t>(r * static_cast<float>(vocab)) % vocab;
    valid += ignored ? 0 : 1;
  }
  batch.loss_scale = 1.0f / static_cast<float>(valid);
  return batch;
}

void expect_gradients_match(const nn::ParameterStore& cpu, const Tensor& device_grads) {
  for (const nn::Parameter& p : cpu.all()) {
    const Tensor expected = p.grad.contiguous();
    const float* want = expected.data<float>();
    const float* got = device_grads.data<float>() + p.offset;
    double largest = 0.0;
    for (std::int64_t i = 0; i < expected.numel(); ++i) largest = std::max(largest, std::fabs(double{want[i]}));
    const double tolerance = 1e-4 * largest + 1e-7;
    for (std::int64_t i = 0; i < expected.numel(); ++i) {
      ASSERT_NEAR(got[i], want[i], tolerance) << p.name << " element " << i << " (max |grad| " << largest << ")";
    }
  }
}

// A LLaMA-style model: RMSNorm, SwiGLU, RoPE, grouped-query attention (2 query heads, 1 key/value
// head of 64), untied head, no biases.
nn::TransformerConfig tiny_llama() { return nn::TransformerConfig::llama(200, 2, 2, 1, 128, 64); }

// The CPU model and a DeviceGpt that start from the same parameters.
struct Twins {
  nn::GptModel cpu;
  cuda::DeviceContext context{0};
  cuda::DeviceGpt gpu;

  Twins(std::uint64_t seed, std::int64_t B, std::int64_t T, cuda::DeviceGptOptions options = {},
        const nn::TransformerConfig& config = tiny_gpt2())
      : cpu(config), gpu(context, config, B, T, options) {
    cpu.initialize(seed);
    EXPECT_EQ(gpu.parameter_floats(), cpu.parameters().numel());
    gpu.load_values(cpu.parameters().flat_values());
  }

  // One forward/backward of `batch` on both, from zeroed gradients: {cpu, gpu}. The GPU's loss
  // gradient is multiplied by `gpu_loss_scale` (fp16 loss scaling; its step() unscales).
  std::pair<nn::LossSum, nn::LossSum> forward_backward(const Batch& batch, float gpu_loss_scale = 1.0f) {
    cpu.parameters().zero_grads();
    gpu.zero_grads();
    return {cpu.forward_backward(batch.ids, batch.targets, batch.loss_scale, nn::Recompute::none),
            gpu.forward_backward(batch.ids, batch.targets, batch.loss_scale * gpu_loss_scale)};
  }
};

class DeviceGptModels : public ::testing::TestWithParam<const char*> {
 protected:
  nn::TransformerConfig config() const { return std::string(GetParam()) == "gpt2" ? tiny_gpt2() : tiny_llama(); }
};

TEST_P(DeviceGptModels, GradientsMatchTheCpuModel) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Twins twins(seed, 2, 48, {}, config());
  const auto [want, got] = twins.forward_backward(random_batch(2, 48, config().vocab_size, seed, 1));
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.sum, want.sum, 1e-5 * std::fabs(want.sum));
  expect_gradients_match(twins.cpu.parameters(), twins.gpu.grads_to_host());
}

TEST_P(DeviceGptModels, RecomputeGivesBitIdenticalGradientsWithLessMemory) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Batch batch = random_batch(2, 48, config().vocab_size, seed, 1);
  for (DType operands : {DType::f32, DType::bf16}) {
    std::vector<Tensor> grads;
    std::vector<std::size_t> bytes;
    for (nn::Recompute mode : {nn::Recompute::none, nn::Recompute::selective, nn::Recompute::full}) {
      Twins twins(seed, 2, 48, {.operands = operands, .recompute = mode}, config());
      const auto [want, got] = twins.forward_backward(batch);
      grads.push_back(twins.gpu.grads_to_host());
      bytes.push_back(twins.gpu.activation_bytes());
      const std::string what = std::string(dtype_name(operands)) + " recompute " + nn::recompute_name(mode);
      EXPECT_EQ(testing::to_f64(grads.back()), testing::to_f64(grads.front())) << what;
    }
    EXPECT_LT(bytes[1], bytes[0]) << "selective must keep fewer activations";
    EXPECT_LT(bytes[2], bytes[1]) << "full must keep fewer activations than selective";
  }
}

// A UnitGradientStore that hands out fresh device buffers per unit and, when the model reports a
// unit final, copies its buffer into a host flat gradient and frees it; it checks the model's
// protocol: every unit reported exactly once per backward, after it was first written.
class RecordingUnitStore final : public cuda::UnitGradientStore {
 public:
  RecordingUnitStore(cuda::DeviceContext& context, cuda::DeviceGpt& model)
      : context_(context), model_(model), buffers_(model.units().size()) {
    model.set_unit_gradient_store(this);
    model.set_unit_gradients_ready([this](int unit) { ready(unit); });
  }
  void begin_backward() {
    flat_ = Tensor::zeros({model_.parameter_floats()});
    reported_.assign(buffers_.size(), 0);
  }
  float* unit_gradients(int unit) override {
    auto& buffer = buffers_.at(static_cast<std::size_t>(unit));
    EXPECT_EQ(reported_[static_cast<std::size_t>(unit)], 0) << "unit " << unit << " written after it was final";
    if (!buffer.defined()) {
      buffer = cuda::device_empty(context_, {model_.units()[static_cast<std::size_t>(unit)].size()});
      cuda::zero_device(context_, buffer);
    }
    return buffer.data<float>();
  }
  // Each unit's gradients, placed at its flat range; every unit must have been reported once.
  const Tensor& flat() const {
    for (std::size_t u = 0; u < reported_.size(); ++u) EXPECT_EQ(reported_[u], 1) << "unit " << u;
    return flat_;
  }

 private:
  void ready(int unit) {
    auto& buffer = buffers_.at(static_cast<std::size_t>(unit));
    ++reported_[static_cast<std::size_t>(unit)];
    ASSERT_TRUE(buffer.defined()) << "unit " << unit << " reported final without gradients";
    const Tensor host = cuda::to_host(context_, buffer);
    std::copy_n(host.data<float>(), host.numel(),
                flat_.data<float>() + model_.units()[static_cast<std::size_t>(unit)].begin);
    buffer = Tensor();
  }

  cuda::DeviceContext& context_;
  cuda::DeviceGpt& model_;
  std::vector<Tensor> buffers_;
  std::vector<int> reported_;
  Tensor flat_;
};

// Without flat gradients (ZeRO 2's layout) the backward writes each unit into the store's buffers
// and reports it final once: the units' gradients are bit-identical to the flat buffer's, for two
// consecutive backwards (each store buffer starts from zero; the flat one is zeroed in between).
TEST_P(DeviceGptModels, UnitGradientStoreGetsTheFlatGradientsUnitByUnit) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Twins flat(seed, 2, 48, {}, config());
  Twins units(seed, 2, 48, {.optimizer = false, .flat_gradients = false}, config());
  EXPECT_EQ(units.gpu.gradient_bytes(), 0u);
  expect_error_mentions([&] { units.gpu.gradients(); }, {"without flat gradients"});
  RecordingUnitStore store(units.context, units.gpu);
  for (std::uint64_t micro = 0; micro < 2; ++micro) {
    const Batch batch = random_batch(2, 48, config().vocab_size, seed, 1 + micro);
    flat.forward_backward(batch);
    store.begin_backward();
    units.forward_backward(batch);
    EXPECT_EQ(testing::to_f64(store.flat()), testing::to_f64(flat.gpu.grads_to_host())) << "backward " << micro;
  }
}

// A UnitValueStore over a host copy of the flat values: a unit is uploaded into a fresh device
// buffer at its first acquisition (with 16-bit operands also its copy, rounded on the host) and
// freed at its last release; it checks that values are read only while acquired and that every
// acquisition is released.
class RecordingValueStore final : public cuda::UnitValueStore {
 public:
  RecordingValueStore(cuda::DeviceContext& context, cuda::DeviceGpt& model, Tensor flat_values, DType operands)
      : context_(context), model_(model), host_(std::move(flat_values)), operands_(operands),
        buffers_(model.units().size()), rounded_(model.units().size()), refs_(model.units().size(), 0),
        acquisitions_(model.units().size(), 0) {
    model.set_unit_value_store(this);
  }
  void acquire(int unit, bool) override {
    const auto u = static_cast<std::size_t>(unit);
    ++acquisitions_.at(u);
    if (refs_[u]++ > 0) return;
    const nn::ParamUnit& range = model_.units()[u];
    buffers_[u] = cuda::to_device(context_, host_.slice(0, range.begin, range.end));
    if (operands_ == DType::f32) return;
    Tensor bits = Tensor::empty({range.size()}, operands_);
    auto* out = static_cast<std::uint16_t*>(bits.raw_data());
    for (std::int64_t i = 0; i < range.size(); ++i) {
      const float x = host_.data<float>()[range.begin + i];
      out[i] = operands_ == DType::f16 ? float_to_f16(x) : float_to_bf16(x);
    }
    rounded_[u] = cuda::to_device(context_, bits);
  }
  void release(int unit) override {
    const auto u = static_cast<std::size_t>(unit);
    ASSERT_GT(refs_.at(u), 0) << "unit " << unit << " released without an acquisition";
    if (--refs_[u] == 0) buffers_[u] = rounded_[u] = Tensor();
  }
  float* unit_values(int unit) override {
    const auto u = static_cast<std::size_t>(unit);
    EXPECT_GT(refs_.at(u), 0) << "unit " << unit << " read without an acquisition";
    return buffers_[u].data<float>();
  }
  const std::uint16_t* unit_values_h(int unit) override {
    const auto u = static_cast<std::size_t>(unit);
    EXPECT_TRUE(refs_.at(u) > 0 && rounded_[u].defined()) << "16-bit unit " << unit << " read without an acquisition";
    return static_cast<const std::uint16_t*>(rounded_[u].raw_data());
  }
  // Every unit acquired at least once since the last call, and none still held.
  void expect_balanced() {
    for (std::size_t u = 0; u < refs_.size(); ++u) {
      EXPECT_EQ(refs_[u], 0) << "unit " << u << " still acquired";
      EXPECT_GT(acquisitions_[u], 0) << "unit " << u << " never acquired";
    }
    acquisitions_.assign(refs_.size(), 0);
  }

 private:
  cuda::DeviceContext& context_;
  cuda::DeviceGpt& model_;
  Tensor host_;
  DType operands_;
  std::vector<Tensor> buffers_, rounded_;
  std::vector<int> refs_, acquisitions_;
};

// Without flat values or gradients (ZeRO 3's layout) the passes read each unit (and its 16-bit
// copy) from a value store between its acquire and release: losses and gradients bit-identical to
// the flat model's, f32 and bf16, and with full recompute (the backward's forward reads the
// block's values too), for a training pass and an evaluation, every acquisition released.
TEST_P(DeviceGptModels, UnitValueStoreGivesTheFlatModelsLossAndGradients) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Batch batch = random_batch(2, 48, config().vocab_size, seed, 1);
  for (auto [operands, recompute] : {std::pair{DType::f32, nn::Recompute::none}, {DType::bf16, nn::Recompute::none},
                                     {DType::f32, nn::Recompute::full}}) {
    SCOPED_TRACE(std::string(dtype_name(operands)) + " recompute " + nn::recompute_name(recompute));
    Twins flat(seed, 2, 48, {.operands = operands, .recompute = recompute}, config());
    cuda::DeviceContext context(0);
    cuda::DeviceGpt sharded(context, config(), 2, 48,
                            {.operands = operands, .optimizer = false, .recompute = recompute, .flat_gradients = false,
                             .flat_values = false});
    EXPECT_EQ(sharded.parameter_bytes(), 0u);
    RecordingUnitStore gradients(context, sharded);
    RecordingValueStore values(context, sharded, flat.cpu.parameters().flat_values().clone(), operands);
    const nn::LossSum want = flat.forward_backward(batch).second;
    gradients.begin_backward();
    const nn::LossSum got = sharded.forward_backward(batch.ids, batch.targets, batch.loss_scale);
    values.expect_balanced();
    EXPECT_EQ(got.sum, want.sum);
    EXPECT_EQ(testing::to_f64(gradients.flat()), testing::to_f64(flat.gpu.grads_to_host()));
    EXPECT_EQ(sharded.forward_loss(batch.ids, batch.targets).sum, flat.gpu.forward_loss(batch.ids, batch.targets).sum);
    values.expect_balanced();
  }
}

// `least_gap`: the largest relative loss gap over the steps must reach it (bf16 rounding must show).
// `loss_scale`: the GPU's gradients are computed scaled by it and unscaled by its step().
void expect_same_loss_curve(cuda::DeviceGptOptions options, double tolerance, double least_gap = 0.0,
                            const nn::TransformerConfig& config = tiny_gpt2(), float loss_scale = 1.0f) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 4, T = 64;
  Twins twins(seed, B, T, options, config);
  const optim::AdamWConfig adamw{.grad_clip = 0.5f};
  optim::AdamWOptimizer optimizer(twins.cpu.parameters(), adamw);
  double largest_gap = 0.0;
  for (int step = 0; step < 4; ++step) {
    const auto [want, got] = twins.forward_backward(
        random_batch(B, T, config.vocab_size, seed, 10 + static_cast<std::uint64_t>(step)), loss_scale);
    EXPECT_NEAR(got.sum / got.tokens, want.sum / want.tokens, tolerance * want.sum / want.tokens) << "step " << step;
    largest_gap = std::max(largest_gap, std::fabs(got.sum / got.tokens - want.sum / want.tokens) / (want.sum / want.tokens));
    const optim::OptimizerStepStats cpu_step = optimizer.step(3e-3f);
    const optim::OptimizerStepStats gpu_step = twins.gpu.step(3e-3f, adamw, 1.0f / loss_scale);
    EXPECT_FALSE(gpu_step.skipped) << "step " << step;
    EXPECT_NEAR(gpu_step.grad_norm, cpu_step.grad_norm, tolerance * cpu_step.grad_norm) << "step " << step;
    EXPECT_EQ(twins.gpu.steps_taken(), optimizer.steps_taken());
  }
  EXPECT_GE(largest_gap, least_gap);
}

TEST_P(DeviceGptModels, LossCurveMatchesTheCpuOverAdamWSteps) {
  MYRIAD_REQUIRE_GPU();
  expect_same_loss_curve({}, 1e-4, 0.0, config());
}

TEST_P(DeviceGptModels, Bf16LossCurveStaysClose) {
  MYRIAD_REQUIRE_GPU();
  expect_same_loss_curve({.operands = DType::bf16}, 3e-2, 1e-6, config());
}

TEST_P(DeviceGptModels, Fp16LossCurveWithLossScalingStaysClose) {
  MYRIAD_REQUIRE_GPU();
  expect_same_loss_curve({.operands = DType::f16}, 1e-2, 1e-7, config(), 1024.0f);
}

INSTANTIATE_TEST_SUITE_P(Families, DeviceGptModels, ::testing::Values("gpt2", "llama"));

TEST(DeviceGpt, Tf32LossCurveStaysClose) {
  MYRIAD_REQUIRE_GPU();
  expect_same_loss_curve({.tf32 = true}, 2e-2);
}



// A loss scale of 2^40 overflows f16 (the scaled loss gradients exceed 65504): the gradients hold
// inf, the norm is not finite, and step() skips: parameters, moments and the step count stay.
TEST(DeviceGpt, Fp16OverflowSkipsTheStepAndChangesNothing) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Twins twins(seed, 2, 32, {.operands = DType::f16});
  const Tensor before = twins.gpu.values_to_host();
  twins.forward_backward(random_batch(2, 32, 200, seed, 1), std::ldexp(1.0f, 40));
  const optim::OptimizerStepStats stats = twins.gpu.step(3e-3f, optim::AdamWConfig{}, std::ldexp(1.0f, -40));
  EXPECT_TRUE(stats.skipped);
  EXPECT_FALSE(std::isfinite(stats.grad_norm));
  EXPECT_EQ(twins.gpu.steps_taken(), 0);
  EXPECT_EQ(testing::to_f64(twins.gpu.values_to_host()), testing::to_f64(before));
  // A scale that fits trains: the next step is taken.
  twins.forward_backward(random_batch(2, 32, 200, seed, 2), 1024.0f);
  EXPECT_FALSE(twins.gpu.step(3e-3f, optim::AdamWConfig{}, 1.0f / 1024.0f).skipped);
  EXPECT_EQ(twins.gpu.steps_taken(), 1);
}

TEST(DeviceGpt, ForwardLossOfFewerRowsMatchesTheCpuAndLeavesGradients) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Twins twins(seed, 4, 32);
  const Batch batch = random_batch(3, 32, tiny_gpt2().vocab_size, seed, 3);
  twins.gpu.zero_grads();
  const nn::LossSum want = twins.cpu.forward_loss(batch.ids, batch.targets);
  const nn::LossSum got = twins.gpu.forward_loss(batch.ids, batch.targets);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.sum, want.sum, 1e-5 * std::fabs(want.sum));
  const Tensor grads = twins.gpu.grads_to_host();
  for (std::int64_t i = 0; i < grads.numel(); ++i) ASSERT_EQ(grads.data<float>()[i], 0.0f) << i;
}

TEST(DeviceGpt, OptimizerStateRoundTripsInTheCpuOptimizersLayout) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Twins twins(seed, 2, 16);
  optim::AdamWOptimizer optimizer(twins.cpu.parameters(), optim::AdamWConfig{});
  for (int step = 0; step < 2; ++step) {
    twins.forward_backward(random_batch(2, 16, tiny_gpt2().vocab_size, seed, 20 + static_cast<std::uint64_t>(step)));
    optimizer.step(1e-3f);
  }
  twins.gpu.load_values(twins.cpu.parameters().flat_values());
  twins.gpu.load_optimizer_state(optimizer.m(), optimizer.v(), optimizer.steps_taken());
  EXPECT_EQ(twins.gpu.steps_taken(), 2);
  Tensor m = Tensor::zeros(optimizer.m().shape()), v = Tensor::zeros(optimizer.v().shape());
  twins.gpu.optimizer_state_to_host(m, v);
  for (std::int64_t i = 0; i < m.numel(); ++i) {
    ASSERT_EQ(m.data<float>()[i], optimizer.m().data<float>()[i]) << i;
    ASSERT_EQ(v.data<float>()[i], optimizer.v().data<float>()[i]) << i;
  }
  // The next step continues the CPU run: same update on both sides.
  twins.forward_backward(random_batch(2, 16, tiny_gpt2().vocab_size, seed, 30));
  optimizer.step(1e-3f);
  twins.gpu.step(1e-3f, optim::AdamWConfig{});
  const Tensor values = twins.gpu.values_to_host();
  for (const nn::Parameter& p : twins.cpu.parameters().all()) {
    const Tensor want = p.value.contiguous();
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR(values.data<float>()[p.offset + i], want.data<float>()[i], 2e-5) << p.name << " " << i;
    }
  }
  expect_error_mentions([&] { twins.gpu.load_optimizer_state(Tensor::zeros({3}), v, 1); },
                        {"m must be a contiguous host f32", "(packed moments)"});
}

TEST(DeviceGpt, BadTokenIsReportedWithItsPosition) {
  MYRIAD_REQUIRE_GPU();
  const nn::TransformerConfig config = tiny_gpt2();
  cuda::DeviceContext context(0);
  cuda::DeviceGpt gpu(context, config, 1, 8);
  Batch batch = random_batch(1, 8, config.vocab_size, 5, 2);
  batch.ids.data<std::int32_t>()[6] = 200;  // == vocab_size: outside
  expect_error_mentions([&] { gpu.forward_backward(batch.ids, batch.targets, batch.loss_scale); },
                        {"flat position 6", "outside the vocabulary [0, 200)"});
}

TEST(DeviceGpt, ScopeErrorsNameTheSetting) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  nn::TransformerConfig odd_heads = nn::TransformerConfig::gpt2(200, 2, 4, 128, 64);  // head dim 32
  expect_error_mentions([&] { cuda::DeviceGpt(context, odd_heads, 1, 8); }, {"head dim 32"});
  expect_error_mentions([&] { cuda::DeviceGpt(context, tiny_gpt2(), 1, 65); }, {"seq must be in [1, context_length 64]"});
  expect_error_mentions([&] { cuda::DeviceGpt(context, tiny_gpt2(), 1, 8, {.operands = DType::i32}); },
                        {"GEMM operands i32", "f32, bf16 or f16"});
  expect_error_mentions([&] { cuda::DeviceGpt(context, tiny_gpt2(), 1, 8, {.tf32 = true, .operands = DType::bf16}); },
                        {"tf32 applies to f32 operands"});
}

}  // namespace
}  // namespace myriad
