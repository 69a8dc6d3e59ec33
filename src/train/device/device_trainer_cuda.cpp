// make_device_trainer with the CUDA backend: a DeviceContext on the local rank's GPU and a
// cuda::DeviceGpt (see train/device_trainer.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "myriad/core/local_device.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_gpt.h"
#if MYRIAD_HAVE_NCCL
#include "myriad/cuda/nccl_communicator.h"
#endif
#include "myriad/train/device_trainer.h"

namespace myriad::train {

namespace {

class CudaDeviceTrainer final : public DeviceTrainer {
 public:
  CudaDeviceTrainer(int device, const nn::TransformerConfig& model, std::int64_t batch, std::int64_t seq,
                    DType operands, dist::Communicator& dp)
      : context_(device),
        model_(context_, model, batch, seq, cuda::DeviceGptOptions{.operands = operands}),
        operands_(operands) {
    if (dp.size() > 1) {
#if MYRIAD_HAVE_NCCL
      dp_ = std::make_unique<cuda::NcclCommunicator>(dp, context_);
      model_.set_block_gradients_ready([this](std::int64_t, cuda::DeviceGpt::FlatRange range) {
        if (reducing_) pending_.push_back(dp_->all_reduce_async(model_.gradients().slice(0, range.begin, range.end)));
      });
#else
      MYRIAD_THROW("training.device cuda with parallel.dp " << dp.size() << ": this build has no NCCL");
#endif
    }
  }

  std::string describe() const override {
    cudaDeviceProp prop{};
    const bool named = cudaGetDeviceProperties(&prop, context_.device()) == cudaSuccess;
    std::ostringstream out;
    out << "cuda:" << context_.device() << " (" << (named ? prop.name : "unknown GPU") << "), "
        << dtype_name(operands_) << " GEMM operands, " << static_cast<double>(model_.activation_bytes()) / (1 << 30)
        << " GiB activations + " << 16.0 * static_cast<double>(model_.parameter_floats()) / (1 << 30)
        << " GiB parameters, gradients and AdamW moments";
    return out.str();
  }

  void upload(nn::ParameterStore& store, optim::AdamWOptimizer& optimizer) override {
    model_.load_values(store.flat_values());
    model_.load_optimizer_state(optimizer.m(), optimizer.v(), optimizer.steps_taken());
  }

  void download(nn::ParameterStore& store, optim::AdamWOptimizer& optimizer) override {
    store.flat_values().copy_from(model_.values_to_host());
    model_.optimizer_state_to_host(optimizer.m(), optimizer.v());
    optimizer.set_steps_taken(model_.steps_taken());
  }

  void zero_grads() override { model_.zero_grads(); }
  void begin_micro_batch(bool last) override { reducing_ = dp_ != nullptr && last; }
  nn::LossSum forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale) override {
    return model_.forward_backward(ids, targets, loss_scale);
  }
  nn::LossSum forward_loss(const Tensor& ids, const Tensor& targets) override {
    return model_.forward_loss(ids, targets);
  }
  void reduce_gradients() override {
    if (!dp_) return;
    // The flat ranges outside the blocks (embeddings, final norm, head), in order.
    Tensor all = model_.gradients();
    std::int64_t at = 0;
    for (const cuda::DeviceGpt::FlatRange& block : model_.block_ranges()) {
      if (block.begin > at) pending_.push_back(dp_->all_reduce_async(all.slice(0, at, block.begin)));
      at = std::max(at, block.end);
    }
    if (at < all.numel()) pending_.push_back(dp_->all_reduce_async(all.slice(0, at, all.numel())));
    for (dist::WorkHandle& work : pending_) work->wait();
    pending_.clear();
    reducing_ = false;
  }
  optim::OptimizerStepStats step(float lr, const optim::AdamWConfig& config, float unscale) override {
    return model_.step(lr, config, unscale);
  }

 private:
  cuda::DeviceContext context_;
  cuda::DeviceGpt model_;
  DType operands_;
  std::unique_ptr<dist::Communicator> dp_;  // NCCL over the dp group (dp > 1)
  bool reducing_ = false;                   // this backward starts the blocks' all-reduces
  std::vector<dist::WorkHandle> pending_;
};

}  // namespace

std::unique_ptr<DeviceTrainer> make_device_trainer(const nn::TransformerConfig& model, std::int64_t micro_batch,
                                                   std::int64_t seq_len, DType operands, dist::Communicator& dp) {
  int device = 0;
  try {
    device = select_local_device(local_rank_from_environment(), cuda::cuda_device_count_or_zero());
  } catch (const Error& e) {
    MYRIAD_THROW("training.device cuda: " << e.what());
  }
  return std::make_unique<CudaDeviceTrainer>(device, model, micro_batch, seq_len, operands, dp);
}

}  // namespace myriad::train
