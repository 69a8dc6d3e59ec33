// make_device_trainer with the CUDA backend: a DeviceContext on the local rank's GPU, a
// cuda::DeviceGpt for the passes (this rank's tensor-parallel shard and pipeline stage, with the
// tp and pp groups over NCCL), the dp reduction (DeviceGradientSync: ZeRO 0 / 1 / 2 / 3), the
// ZeRO-3 value shard (DeviceShardedValues) and a cuda::DeviceAdamW over the host DataParallel's
// optimizer segments (see train/device_trainer.h).
//
// The optimizer mirrors the host DataParallel exactly — the same segments in the same order — so
// the packed moments move between host and device as they are, and checkpoints written from the
// host side are the ones a CPU run writes (ZeRO 3: the host DataParallel's value shard, exchanged
// segment by segment through the host optimizer's value views). The squared gradient norm is
// summed over dp (ZeRO >= 1: distinct shards), tp (each replicated parameter counted on one tp
// rank) and pp, as DataParallel does on the host; a skipped step leaves everything as it was.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "myriad/core/local_device.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_adamw.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/cuda/device_gpt.h"
#include "myriad/cuda/kernels.h"
#include "myriad/dist/scalar_reduce.h"
#if MYRIAD_HAVE_NCCL
#include "myriad/cuda/nccl_communicator.h"
#endif
#include "myriad/train/device_trainer.h"
#include "device_gradient_sync.h"
#include "device_sharded_values.h"
#include "device_stage.h"

namespace myriad::train {

namespace {

// The host optimizer's segments with this model's parameter kinds; gradient offsets into the full
// gradients (ZeRO 0) or the shard (ZeRO >= 1), value offsets into the full values or (ZeRO 3) the
// value shard.
std::vector<cuda::DeviceAdamWSegment> optimizer_segments(const DataParallel& host, const nn::ParameterStore& layout) {
  std::vector<cuda::DeviceAdamWSegment> segments;
  for (const dist::ZeroSegment& s : host.segments()) {
    segments.push_back({.value_offset = host.zero_stage() == 3 ? s.shard_position : s.begin,
                        .grad_offset = host.zero_stage() == 0 ? s.begin : s.shard_position,
                        .numel = s.end - s.begin,
                        .kind = layout[s.param].kind,
                        .counted = layout[s.param].primary});
  }
  return segments;
}

// The group over NCCL for device tensors, or null for a group of one (or without NCCL: an error).
// `p2p_tags`: the send/recv tags it serves (one NCCL communicator each); `timeout`: seconds a wait
// may take before the communicator is aborted (0 = forever).
std::unique_ptr<dist::Communicator> device_group(dist::Communicator& host, cuda::DeviceContext& context,
                                                 double timeout, int p2p_tags = 2) {
  if (host.size() <= 1) return nullptr;
#if MYRIAD_HAVE_NCCL
  return std::make_unique<cuda::NcclCommunicator>(host, context,
                                                  cuda::NcclOptions{.p2p_tags = p2p_tags, .timeout_seconds = timeout});
#else
  (void)context;
  (void)timeout;
  (void)p2p_tags;
  MYRIAD_THROW("training.device cuda with a " << host.name() << " group of " << host.size()
                                              << " ranks: this build has no NCCL");
#endif
}

class CudaDeviceTrainer final : public DeviceTrainer {
 public:
  CudaDeviceTrainer(int device, const nn::TransformerConfig& model, const DeviceTrainerOptions& options,
                    dist::Communicator& dp, dist::Communicator& tp, dist::Communicator& pp, const DataParallel& host)
      : context_(device),
        tp_device_(device_group(tp, context_, options.collective_timeout)),
        model_(context_, model, options.micro_batch, options.seq_len,
               cuda::DeviceGptOptions{.operands = options.operands,
                                      .optimizer = false,
                                      .recompute = options.recompute,
                                      .flat_gradients = host.zero_stage() < 2,
                                      .flat_values = host.zero_stage() < 3,
                                      .tp = &tp,
                                      .tp_device = tp_device_.get(),
                                      .sequence_parallel = options.sequence_parallel,
                                      .chunks = options.chunks,
                                      .first_stage = options.first_stage,
                                      .last_stage = options.last_stage}),
        tp_host_(tp),
        pp_host_(pp),
        tied_embedding_(model.tie_embeddings && pp.size() > 1 && (options.first_stage || options.last_stage)),
        first_stage_(options.first_stage),
        operands_(options.operands),
        recompute_(options.recompute),
        dp_host_(dp),
        // A pipeline reduces after its whole schedule; otherwise during the last backward.
        sync_(context_, model_, host, device_group(dp, context_, options.collective_timeout), pp.size() == 1),
        optimizer_(std::make_unique<cuda::DeviceAdamW>(context_, optimizer_segments(host, model_.layout()),
                                                       sync_.optimizer_grad_elements())) {
    if (sync_.zero_stage() == 3) {
      sharded_values_ = std::make_unique<DeviceShardedValues>(context_, model_, sync_.layout(), sync_.dp(),
                                                              options.operands);
    }
    if (pp.size() > 1) {
      pp_device_ = device_group(pp, context_, options.collective_timeout, kTiedEmbeddingTag + 1);
      stage_ = std::make_unique<DeviceStage>(model_, options);
      pipeline_ = std::make_unique<PipelineExecutor>(*stage_, *pp_device_, options.schedule, options.micro_batches,
                                                     options.virtual_stages);
    }
    if (tied_embedding_) {
      const nn::Parameter& wte = model_.layout().find("wte");
      embedding_ = {wte.offset, wte.offset + shape_numel(wte.shape)};
      peer_embedding_grad_ = cuda::DeviceBuffer(static_cast<std::size_t>(embedding_.size()) * 4, device);
    }
  }

  std::string describe() const override {
    cudaDeviceProp prop{};
    const bool named = cudaGetDeviceProperties(&prop, context_.device()) == cudaSuccess;
    const MemoryReport m = memory();
    const auto gib = [](std::int64_t b) { return static_cast<double>(b) / static_cast<double>(1 << 30); };
    const int zero = sync_.zero_stage();
    std::ostringstream out;
    out << "cuda:" << context_.device() << " (" << (named ? prop.name : "unknown GPU") << "), "
        << dtype_name(operands_) << " GEMM operands, " << gib(m.activation_bytes + m.scratch_bytes)
        << " GiB activations and scratch (recompute " << nn::recompute_name(recompute_) << ") + "
        << gib(m.parameter_bytes) << " GiB parameters" << (zero == 3 ? " (ZeRO-3 shard, plus the units gathered)" : "")
        << " + " << gib(m.gradient_bytes) << " GiB gradients"
        << (zero >= 2 ? " (shard, plus the units being reduced)" : "") << " + " << gib(m.optimizer_bytes)
        << " GiB AdamW moments" << (zero >= 1 ? " (shard)" : "");
    return out.str();
  }

  MemoryReport memory() const override {
    const std::size_t value_shard = sharded_values_ ? sharded_values_->shard_bytes() : 0;
    const std::size_t gathered = sharded_values_ ? sharded_values_->peak_gathered_bytes() : 0;
    MemoryReport m;
    m.parameter_bytes = static_cast<std::int64_t>(model_.parameter_bytes() + value_shard);
    m.gradient_bytes = static_cast<std::int64_t>(model_.gradient_bytes() + sync_.shard_bytes());
    m.comm_buffer_bytes = static_cast<std::int64_t>(sync_.unit_buffer_peak_bytes() + gathered);
    m.optimizer_bytes = 8 * optimizer_->state_elements();
    m.activation_bytes = static_cast<std::int64_t>(model_.saved_activation_bytes());
    m.scratch_bytes = static_cast<std::int64_t>(model_.scratch_bytes() + context_.workspace_bytes() +
                                                peer_embedding_grad_.bytes());
    return m;
  }

  dist::CommStats comm_stats(dist::Axis axis) const override {
    const dist::Communicator* group = axis == dist::Axis::dp   ? sync_.dp()
                                      : axis == dist::Axis::tp ? tp_device_.get()
                                      : axis == dist::Axis::pp ? pp_device_.get()
                                                               : nullptr;
    return group ? group->stats() : dist::CommStats{};
  }

  void upload(nn::ParameterStore& store, optim::AdamWOptimizer& optimizer) override {
    if (sharded_values_) {
      exchange_value_shard(optimizer, cudaMemcpyHostToDevice);
    } else {
      model_.load_values(store.flat_values());
    }
    optimizer_->load_state(optimizer.m(), optimizer.v(), optimizer.steps_taken());
  }

  void download(nn::ParameterStore& store, optim::AdamWOptimizer& optimizer) override {
    if (sharded_values_) {
      exchange_value_shard(optimizer, cudaMemcpyDeviceToHost);
    } else {
      store.flat_values().copy_from(model_.values_to_host());
    }
    optimizer_->state_to_host(optimizer.m(), optimizer.v());
    optimizer.set_steps_taken(optimizer_->steps_taken());
  }

  void zero_grads() override {
    model_.zero_grads();
    sync_.reset();
  }

  void begin_micro_batch(bool last) override { sync_.begin_micro_batch(last); }

  nn::LossSum forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale) override {
    const nn::LossSum loss = model_.forward_backward(ids, targets, loss_scale);
    if (sharded_values_) sharded_values_->drop_prefetched();
    return loss;
  }
  nn::LossSum forward_loss(const Tensor& ids, const Tensor& targets) override {
    const nn::LossSum loss = pipeline_ ? pipeline_->forward_only(ids, targets) : model_.forward_loss(ids, targets);
    if (sharded_values_) sharded_values_->drop_prefetched();
    return loss;
  }

  PipelineStepResult run_pipeline(const std::vector<Tensor>& ids, const std::vector<Tensor>& targets,
                                  float loss_scale) override {
    MYRIAD_CHECK(pipeline_, "training.device cuda: run_pipeline without parallel.pp > 1");
    return pipeline_->run(ids, targets, loss_scale, recompute_);
  }

  void reduce_gradients() override {
    if (tied_embedding_) sync_tied_embedding();
    sync_.finish();
  }

  optim::OptimizerStepStats step(float lr, const optim::AdamWConfig& config, float unscale) override {
    float* values = sharded_values_ ? sharded_values_->shard() : model_.values().data<float>();
    const float* grads = sync_.optimizer_grads();
    double sum_squares = optimizer_->grad_sum_squares(grads);
    // ZeRO >= 1: each rank holds a distinct shard; ZeRO 0: the reduced gradients are identical.
    // Tensor parallelism: each rank's shards, replicas counted on one rank only (Parameter::primary).
    if (sync_.zero_stage() >= 1 && dp_host_.size() > 1) sum_squares = dist::sum_over_ranks(dp_host_, sum_squares);
    if (tp_host_.size() > 1) sum_squares = dist::sum_over_ranks(tp_host_, sum_squares);
    if (pp_host_.size() > 1) sum_squares = dist::sum_over_ranks(pp_host_, sum_squares);
    const optim::OptimizerStepStats stats = optimizer_->step(values, grads, lr, config, sum_squares, unscale);
    if (stats.skipped) return stats;
    if (sharded_values_) return stats;  // the next gathers read the updated shard
    sync_.gather_values();
    model_.values_changed();
    return stats;
  }

 private:
  // ZeRO 3: the host optimizer's value segments (views into the host DataParallel's value shard)
  // to or from the device shard, segment by segment (the device segments have the same order;
  // their value offsets are the shard positions). Returns once the copies are done.
  void exchange_value_shard(optim::AdamWOptimizer& host, cudaMemcpyKind direction) {
    const std::vector<optim::OptimizerSegment>& segments = host.segments();
    const std::vector<cuda::DeviceAdamWSegment>& device = optimizer_->segments();
    MYRIAD_CHECK(segments.size() == device.size(), "training.device cuda: the host optimizer has "
                                                       << segments.size() << " segments, the device's "
                                                       << device.size());
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const Tensor& value = segments[i].value;
      MYRIAD_CHECK(value.is_contiguous() && value.numel() == device[i].numel,
                   "training.device cuda: host optimizer segment " << i << " is " << value.describe() << ", the "
                                                                   << "device's has " << device[i].numel << " values");
      float* on_device = sharded_values_->shard() + device[i].value_offset;
      const bool up = direction == cudaMemcpyHostToDevice;
      MYRIAD_CUDA_CHECK(cudaMemcpyAsync(up ? static_cast<void*>(on_device) : value.raw_data(),
                                        up ? value.raw_data() : static_cast<const void*>(on_device), value.nbytes(),
                                        direction, context_.stream()));
    }
    context_.synchronize();
  }

  // The first and last pipeline stages each hold the tied embedding; each adds the other's
  // gradient (a + b == b + a exactly), so both apply the same update and stay identical.
  void sync_tied_embedding() {
    Tensor mine = model_.gradients().slice(0, embedding_.begin, embedding_.end);
    Tensor theirs = cuda::view_device_floats(context_, peer_embedding_grad_.as<float>(), {embedding_.size()});
    const int peer = first_stage_ ? pp_host_.size() - 1 : 0;
    dist::WorkHandle send = pp_device_->send_async(mine, peer, kTiedEmbeddingTag);
    pp_device_->recv(theirs, peer, kTiedEmbeddingTag);
    send->wait();
    cuda::add_f32(mine.data<float>(), theirs.data<float>(), mine.data<float>(), embedding_.size(), context_.stream());
  }

  static constexpr int kTiedEmbeddingTag = 2;  // the executor's activations and gradients use 0 and 1

  cuda::DeviceContext context_;
  std::unique_ptr<dist::Communicator> tp_device_;  // NCCL over the tp group (tp > 1)
  cuda::DeviceGpt model_;
  dist::Communicator& tp_host_;
  dist::Communicator& pp_host_;
  bool tied_embedding_;  // pp > 1, tied embeddings, and this rank holds a copy (first or last stage)
  bool first_stage_;
  dist::ChunkRange embedding_;            // tied_embedding_: the flat range of wte
  cuda::DeviceBuffer peer_embedding_grad_;
  std::unique_ptr<dist::Communicator> pp_device_;  // NCCL over the pp group (pp > 1)
  std::unique_ptr<DeviceStage> stage_;
  std::unique_ptr<PipelineExecutor> pipeline_;
  DType operands_;
  nn::Recompute recompute_;
  dist::Communicator& dp_host_;
  DeviceGradientSync sync_;  // the dp reduction (ZeRO 0 / 1 / 2 / 3) over NCCL
  std::unique_ptr<cuda::DeviceAdamW> optimizer_;
  std::unique_ptr<DeviceShardedValues> sharded_values_;  // ZeRO 3: the value shard, gathered per unit
};

}  // namespace

std::unique_ptr<DeviceTrainer> make_device_trainer(const nn::TransformerConfig& model,
                                                   const DeviceTrainerOptions& options, dist::Communicator& dp,
                                                   dist::Communicator& tp, dist::Communicator& pp,
                                                   const DataParallel& host) {
  int device = 0;
  try {
    device = select_local_device(local_rank_from_environment(), cuda::cuda_device_count_or_zero());
  } catch (const Error& e) {
    MYRIAD_THROW("training.device cuda: " << e.what());
  }
  // The process's GPU from now on: every launch and context lands there (not on device 0), guarded
  // or not (tested by the emulated layer, which checks each launch against the current device).
  cuda::select_device(device);
  return std::make_unique<CudaDeviceTrainer>(device, model, options, dp, tp, pp, host);
}

}  // namespace myriad::train
