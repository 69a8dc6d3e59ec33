// DeviceStage — cuda::DeviceGpt as the pipeline executor's stage (nn/pipeline_stage.h), internal
// to the device trainer (device_trainer_cuda.cpp): its chunks, slots and the device tensors
// exchanged with the neighbouring stages. DeviceGpt's buffers are allocated for the trainer's
// micro-batch and sequence: prepare() checks the shape (fewer rows are allowed: evaluation pads
// them) and adds slots; the recompute mode is the trainer's.
#pragma once

#include <cstdint>

#include "myriad/core/error.h"
#include "myriad/cuda/device_gpt.h"
#include "myriad/nn/pipeline_stage.h"
#include "myriad/train/device_trainer.h"

namespace myriad::train {

class DeviceStage final : public nn::PipelineStage {
 public:
  DeviceStage(cuda::DeviceGpt& model, const DeviceTrainerOptions& options)
      : model_(model), mode_(options.recompute), batch_(options.micro_batch), seq_(options.seq_len) {}

  int num_chunks() const override { return model_.num_chunks(); }
  void prepare(std::int64_t B, std::int64_t T, nn::Recompute, int slots) override {
    MYRIAD_CHECK(B >= 1 && B <= batch_ && T == seq_, "device pipeline stage: micro-batch " << B << " x " << T
                                                                                           << " (buffers for up to "
                                                                                           << batch_ << " x " << seq_
                                                                                           << ")");
    model_.prepare_slots(slots);
  }
  nn::Recompute buffer_mode() const override { return mode_; }
  Tensor chunk_input(int chunk, int slot) override { return model_.chunk_input(chunk, slot); }
  Tensor chunk_output(int chunk, int slot) override { return model_.chunk_output(chunk, slot); }
  Tensor chunk_grad(int chunk, int slot) override { return model_.chunk_grad(chunk, slot); }
  nn::LossSum forward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets) override {
    return model_.forward_chunk(chunk, slot, ids, targets);
  }
  void backward_chunk(int chunk, int slot, const Tensor&, const Tensor&, float loss_scale) override {
    model_.backward_chunk(chunk, slot, loss_scale);
  }

 private:
  cuda::DeviceGpt& model_;
  nn::Recompute mode_;
  std::int64_t batch_, seq_;
};

}  // namespace myriad::train
