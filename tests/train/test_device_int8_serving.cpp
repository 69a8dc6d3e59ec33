// Weight-only INT8 serving with training.device cuda (the one model on the CUDA backend): an INT8
// file (every matrix quantised per row — linear layers, the MoE experts per expert, the token
// embedding — the router and positions f32, as myriad/int8.py writes it) served by a device engine
// gives the logits and validation loss of the same file served by a CPU engine (1e-4), for an MoE
// model (int8 experts, int8 embedding rows, untied head) and a GPT-2 one (tied int8
// embedding-head); afterwards the device engine holds no f32 copy of its int8 weights (only the
// embedding's, which decode reads), no gradients and no moments, and its memory report says so.
// In myriad_tests it needs a GPU (skips otherwise); myriad_emulated_device_tests runs it everywhere.
#include <gtest/gtest.h>

#include <string>

#include "device_fixtures.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/ops/placement.h"
#include "myriad/train/checkpoint/safetensors.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {
namespace int8_serving {  // its own names: unity builds join this file with other device tests

using namespace fixtures;

RunConfig serving_config(const fs::path& dir, const std::string& corpus, bool moe, ComputeDevice device) {
  RunConfig c = tiny_config(dir, corpus);
  c.model.n_embd = 128;  // 2 heads of 64: a head dimension the flash kernels take
  c.model.n_head = 2;
  if (moe) {
    c.model.architecture = Architecture::moe;
    c.model.num_experts = 4;
    c.model.top_k = 2;
  }
  c.training.device = device;
  c.logging.dir = (dir / (device == ComputeDevice::cuda ? "cuda" : "cpu")).string();
  c.checkpoint.dir = (dir / (device == ComputeDevice::cuda ? "cuda" : "cpu") / "checkpoints").string();
  return c;
}

// The model's initial parameters as an INT8 export (per output channel).
std::string write_int8_file(Engine& engine, const fs::path& path) {
  SafetensorsFile file;
  file.metadata = {{"quantization", "int8-weight-only"}, {"group_size", "0"}};
  for (const nn::Parameter& p : engine.model().parameters().all()) {
    const Tensor value = ops::placement_of(p.value, "parameter").to_host(p.value).contiguous();
    const bool quantised = p.shape.size() >= 2 && p.name != "wpe" && p.name.find("router") == std::string::npos;
    if (!quantised) {
      file.tensors.emplace_back(p.name, value.clone());
      continue;
    }
    const std::int64_t K = p.shape.back(), rows = value.numel() / K;
    Tensor q = Tensor::empty(p.shape, DType::i8);
    Shape scales_shape = p.shape;
    scales_shape.back() = 1;
    Tensor scales = Tensor::empty(scales_shape);
    Tensor q_rows = q.view({rows, K}), scale_rows = scales.view({rows, 1});
    quantize_int8(Int8Args{}, value.view({rows, K}), q_rows, scale_rows);
    file.tensors.emplace_back(p.name, q);
    file.tensors.emplace_back(p.name + ".scales", scales);
  }
  write_safetensors(path.string(), file);
  return path.string();
}

Tensor host_copy(const Tensor& t) { return ops::placement_of(t, "tensor").to_host(t).clone(); }

void expect_close(const Tensor& got, const Tensor& want, double tolerance) {
  ASSERT_EQ(got.shape(), want.shape());
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    ASSERT_NEAR(g[i], w[i], tolerance * (1.0 + std::abs(w[i]))) << "logit " << i;
  }
}

TEST(DeviceInt8Serving, MatchesTheCpuEngineAndHoldsOnlyInt8Weights) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_int8_serving");
  const std::string corpus = write_corpus(dir);
  for (bool moe : {true, false}) {
    SCOPED_TRACE(moe ? "moe" : "gpt2");
    const fs::path run = dir / (moe ? "moe" : "gpt2");
    Engine source(serving_config(run / "source", corpus, moe, ComputeDevice::cpu), quiet_logger());
    const std::string path = write_int8_file(source, run / "model.int8.safetensors");
    Engine cpu(serving_config(run, corpus, moe, ComputeDevice::cpu), quiet_logger());
    Engine gpu(serving_config(run, corpus, moe, ComputeDevice::cuda), quiet_logger());
    cpu.load_int8(path);
    gpu.load_int8(path);
    Tensor ids = Tensor::empty({2, 32}, DType::i32);
    for (std::int64_t i = 0; i < ids.numel(); ++i)
      ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 37 % 320);
    expect_close(host_copy(gpu.forward_logits(ids)), host_copy(cpu.forward_logits(ids)), 1e-4);
    const double val_cpu = cpu.evaluate(), val_gpu = gpu.evaluate();
    EXPECT_NEAR(val_gpu, val_cpu, 1e-4 * val_cpu);

    std::int64_t int8_bytes = 0, f32_elements = 0;
    for (const nn::Parameter& p : gpu.model().parameters().all()) {
      EXPECT_FALSE(p.grad.defined()) << p.name;
      if (p.int8_values.defined()) {
        EXPECT_FALSE(p.int8_values.device().is_cpu()) << p.name;
        EXPECT_FALSE(p.value.defined()) << p.name;
        int8_bytes += static_cast<std::int64_t>(p.int8_values.nbytes() + p.int8_scales.nbytes());
      }
      if (p.value.defined()) f32_elements += (shape_numel(p.shape) + 15) / 16 * 16;
    }
    EXPECT_FALSE(gpu.model().parameters().flat_values().defined());
    const MemoryReport mem = gpu.memory_report();
    EXPECT_EQ(mem.parameter_bytes, 4 * f32_elements + int8_bytes);
    EXPECT_LT(mem.parameter_bytes, 4 * gpu.model().parameters().numel() / 2);
    EXPECT_EQ(mem.gradient_bytes, 0);
    EXPECT_EQ(mem.optimizer_bytes, 0);
  }
}

}  // namespace int8_serving
}  // namespace
}  // namespace myriad::train
