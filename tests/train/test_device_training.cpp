// training.device cuda through the Engine (the one model on the CUDA backend, train/device_runtime.h):
// the same run on the device
// and on the CPU engine gives the same losses, gradient norms and validation loss (1e-4
// relative), and a checkpoint written by the device run resumes in a CPU engine with the same
// parameters and AdamW state, bit for bit, continuing the same curve. In myriad_tests it needs a
// GPU (skips otherwise); myriad_emulated_device_tests runs it everywhere with the CUDA layer
// emulated by the CPU ops (tests/emulated_cuda). Without a GPU, device cuda is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <vector>

#include "device_fixtures.h"
#include "myriad/ops/placement.h"
#include "myriad/core/error.h"
#include "myriad/train/engine.h"
#if MYRIAD_EMULATED_CUDA
#include "emulated_streams.h"
#endif

namespace myriad::train {
namespace {

using namespace fixtures;

// The tiny device fixture with a checkpoint folder per device.
RunConfig device_config(const fs::path& dir, const std::string& corpus, ComputeDevice device) {
  RunConfig c = tiny_device_config(dir, corpus, device);
  c.checkpoint.dir = (dir / (device == ComputeDevice::cuda ? "checkpoints_cuda" : "checkpoints_cpu")).string();
  return c;
}

// A host copy of a tensor on the host or a backend's device.
Tensor host_copy(const Tensor& t) { return ops::placement_of(t, "tensor").to_host(t).clone(); }

bool same_bytes(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = host_copy(a_in), b = host_copy(b_in);
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(DeviceTraining, MatchesTheCpuEngineAndItsCheckpointResumesOnTheCpu) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training");
  const std::string corpus = write_corpus(dir);
  Engine cpu(device_config(dir, corpus, ComputeDevice::cpu), quiet_logger());
  Engine gpu(device_config(dir, corpus, ComputeDevice::cuda), quiet_logger());
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
  }
  const double val_cpu = cpu.evaluate(), val_gpu = gpu.evaluate();
  EXPECT_NEAR(val_gpu, val_cpu, 1e-4 * val_cpu);
  // The memory report is the device's: f32 masters and gradients of the flat layout, AdamW's two
  // moments of every parameter element, activations of one micro-batch.
  const MemoryReport mem = gpu.memory_report();
  const std::int64_t flat = gpu.model().parameters().numel();
  EXPECT_EQ(mem.parameter_bytes, 4 * flat);
  EXPECT_EQ(mem.gradient_bytes, 4 * flat);
  EXPECT_EQ(mem.optimizer_bytes, 8 * gpu.optimizer().m().numel());
  EXPECT_GT(mem.activation_bytes, 0);

  const std::string path = gpu.save();
  Engine resumed(device_config(dir, corpus, ComputeDevice::cpu), quiet_logger());
  resumed.load(path);
  EXPECT_EQ(resumed.step_count(), 4);
  EXPECT_TRUE(same_bytes(resumed.model().parameters().flat_values(), gpu.model().parameters().flat_values()));
  EXPECT_TRUE(same_bytes(resumed.optimizer().m(), gpu.optimizer().m()));
  EXPECT_TRUE(same_bytes(resumed.optimizer().v(), gpu.optimizer().v()));
  EXPECT_EQ(resumed.optimizer().steps_taken(), 4);
  // Generation decodes on the device model (its KV cache on the GPU, sampling on the host) and
  // writes what the CPU engine with the same weights writes.
  EXPECT_EQ(gpu.generate("the cat", 12, 0.8f, 20, 7), resumed.generate("the cat", 12, 0.8f, 20, 7));
  for (int step = 0; step < 2; ++step) {
    const StepMetrics want = resumed.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "resumed step " << step;
  }
}

TEST(DeviceTraining, LlamaStyleModelMatchesTheCpuEngine) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training_llama");
  const std::string corpus = write_corpus(dir);
  auto llama = [&](ComputeDevice device) {
    RunConfig c = device_config(dir, corpus, device);
    c.model.architecture = Architecture::llama;
    c.model.n_kv_head = 1;  // grouped-query attention: 2 query heads share one key/value head
    return c;
  };
  Engine cpu(llama(ComputeDevice::cpu), quiet_logger());
  Engine gpu(llama(ComputeDevice::cuda), quiet_logger());
  for (int step = 0; step < 3; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
  }
}

// training.recompute full on the device: the same curve as the CPU engine with the same setting.
TEST(DeviceTraining, FullRecomputeMatchesTheCpuEngine) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training_recompute");
  const std::string corpus = write_corpus(dir);
  auto recompute = [&](ComputeDevice device) {
    RunConfig c = device_config(dir, corpus, device);
    c.training.recompute = Recompute::full;
    return c;
  };
  Engine cpu(recompute(ComputeDevice::cpu), quiet_logger());
  Engine gpu(recompute(ComputeDevice::cuda), quiet_logger());
  for (int step = 0; step < 3; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
  }
}

// training.precision fp16 on the device: the run config with dynamic loss scaling from `scale`.
RunConfig fp16_config(const fs::path& dir, const std::string& corpus, ComputeDevice device, double scale) {
  RunConfig c = device_config(dir, corpus, device);
  c.training.precision = Precision::fp16;
  c.training.initial_loss_scale = scale;
  c.training.loss_scale_window = 1000;  // no regrowth within the test
  return c;
}

// From a scale of 2^32 the scaled gradients overflow f16, so the first steps are skipped — the
// scale halves each time, the weights stay — until the scale fits; then every step trains. The
// CPU fp16 engine settles within one halving of the device (they round different tensors to f16:
// the CPU its activations, the device its GEMM operands).
TEST(DeviceTraining, Fp16OverflowSkipsStepsAndHalvesTheScale) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training_fp16_overflow");
  const std::string corpus = write_corpus(dir);
  Engine cpu(fp16_config(dir, corpus, ComputeDevice::cpu, std::ldexp(1.0, 32)), quiet_logger());
  Engine gpu(fp16_config(dir, corpus, ComputeDevice::cuda, std::ldexp(1.0, 32)), quiet_logger());
  const Tensor start = host_copy(gpu.model().parameters().flat_values());
  std::vector<StepMetrics> steps;
  int skipped_cpu = 0;
  for (int step = 0; step < 14; ++step) {
    steps.push_back(gpu.step());
    if (step == 0) {
      ASSERT_TRUE(steps[0].skipped);
      EXPECT_TRUE(same_bytes(gpu.model().parameters().flat_values(), start)) << "a skipped step changed weights";
    }
    if (cpu.step().skipped && skipped_cpu == step) ++skipped_cpu;
  }
  int skipped = 0;
  while (skipped < static_cast<int>(steps.size()) && steps[static_cast<std::size_t>(skipped)].skipped) {
    EXPECT_EQ(steps[static_cast<std::size_t>(skipped)].loss_scale, std::ldexp(1.0, 32 - skipped)) << skipped;
    ++skipped;
  }
  std::cout << "fp16 from scale 2^32: device skipped " << skipped << " steps, the CPU engine " << skipped_cpu
            << std::endl;
  ASSERT_GT(skipped, 0);
  ASSERT_LT(skipped, 12) << "the scale never came down far enough";
  EXPECT_LE(std::abs(skipped - skipped_cpu), 1);
  for (std::size_t s = static_cast<std::size_t>(skipped); s < steps.size(); ++s) {
    EXPECT_FALSE(steps[s].skipped) << "step " << s + 1 << " overflowed after the scale had settled";
  }
  EXPECT_EQ(gpu.optimizer().steps_taken(), 14 - skipped);
  EXPECT_LT(steps.back().loss, steps[static_cast<std::size_t>(skipped)].loss) << "fp16 training must learn";
}

// At a scale that fits, the device's fp16 run follows the CPU fp16 engine (1e-2: f16 GEMM
// operands on the device, f16 activations on the CPU) with the scale unscaled in the update.
TEST(DeviceTraining, Fp16MatchesTheCpuEngineAtAFittingScale) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training_fp16");
  const std::string corpus = write_corpus(dir);
  Engine cpu(fp16_config(dir, corpus, ComputeDevice::cpu, 1024.0), quiet_logger());
  Engine gpu(fp16_config(dir, corpus, ComputeDevice::cuda, 1024.0), quiet_logger());
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    ASSERT_FALSE(want.skipped || got.skipped) << "step " << step;
    EXPECT_EQ(got.loss_scale, 1024.0);
    EXPECT_NEAR(got.loss, want.loss, 1e-2 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 5e-2 * want.grad_norm) << "step " << step;
  }
}

// training.precision bf16 with grouped-query heads of 64: every GEMM on 16-bit operands and the
// attention's products in 16 bits (cuDNN's fused attention where the build has it, else the
// tensor-core kernels, on 16-bit copies of q, k, v, out and gradients), the same rule as the CPU
// engine's (ops/attention.h). On a GPU the kernels also round the probabilities, so the curves
// agree to bf16 precision; emulated they are the CPU's math.
TEST(DeviceTraining, Bf16WithSixteenBitAttentionMatchesTheCpuEngine) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training_bf16");
  const std::string corpus = write_corpus(dir);
  auto bf16 = [&](ComputeDevice device) {
    RunConfig c = device_config(dir, corpus, device);
    c.model.architecture = Architecture::llama;
    c.model.n_kv_head = 1;
    c.training.precision = Precision::bf16;
    return c;
  };
  Engine cpu(bf16(ComputeDevice::cpu), quiet_logger());
  Engine gpu(bf16(ComputeDevice::cuda), quiet_logger());
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-2 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 5e-2 * want.grad_norm) << "step " << step;
  }
}

// training.precision fp8 on the device (the quantisation kernel, cuBLASLt's FP8 GEMMs, the amax
// reduction through device tensors) against the CPU engine's fp8, on a LLaMA block (SwiGLU: all
// five FP8 linear layers).
TEST(DeviceTraining, Fp8MatchesTheCpuEngine) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_training_fp8");
  const std::string corpus = write_corpus(dir);
  auto fp8 = [&](ComputeDevice device) {
    RunConfig c = device_config(dir, corpus, device);
    c.model.architecture = Architecture::llama;
    c.training.precision = Precision::fp8;
    return c;
  };
  Engine cpu(fp8(ComputeDevice::cpu), quiet_logger());
  Engine gpu(fp8(ComputeDevice::cuda), quiet_logger());
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-2 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 5e-2 * want.grad_norm) << "step " << step;
  }
  const Tensor want = cpu.model().fp8_scaling()->state(), got = gpu.model().fp8_scaling()->state();
  const std::int64_t slots = cpu.model().fp8_scaling()->linears() * nn::kFp8Roles;
  int equal = 0;
  for (std::int64_t s = 0; s < slots; ++s) equal += want.data<float>()[s] == got.data<float>()[s] ? 1 : 0;
  EXPECT_GE(equal, slots - 2) << "the delayed scales (powers of two) agree but for amaxes at a power's edge";
}

#if MYRIAD_EMULATED_CUDA
TEST(DeviceTraining, Fp8IsRefusedBelowComputeCapability89) {
  const fs::path dir = fresh_dir("device_training_fp8_sm86");
  RunConfig c = device_config(dir, write_corpus(dir), ComputeDevice::cuda);
  c.training.precision = Precision::fp8;
  emulated::set_compute_capability(86);
  try {
    Engine engine(c, quiet_logger());
    ADD_FAILURE() << "fp8 accepted on an sm_86 device";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("training.precision fp8"), std::string::npos) << what;
    EXPECT_NE(what.find("8.6"), std::string::npos) << what;
  }
  emulated::set_compute_capability(90);
}
#endif

TEST(DeviceTraining, WithoutAGpuTheErrorNamesTheKey) {
  if (gpu_visible()) GTEST_SKIP() << "a CUDA device is visible";
  const fs::path dir = fresh_dir("device_training_error");
  const std::string corpus = write_corpus(dir);
  try {
    Engine engine(device_config(dir, corpus, ComputeDevice::cuda), quiet_logger());
    FAIL() << "training.device cuda accepted without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.device cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace myriad::train
