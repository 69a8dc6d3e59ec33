// PipelineStage — what a pipeline schedule (parallel/pipeline_executor.h) needs from one rank's part
// of the model: its chunks (virtual stages) and, per micro-batch buffer set ("slot"), the forward
// and backward of one chunk and the tensors exchanged with the neighbouring stages.
//
// forward_chunk(c) reads the ids (first global stage) or chunk_input(c), writes chunk_output(c)
// and, on the last global stage, records the per-token losses (read later, all at once, by
// take_loss_sum: nothing waits for a device inside a step) and returns the number of valid
// targets; backward_chunk(c) reads chunk_grad(c) =
// dL/d output (or starts from the loss on the last stage) and leaves dL/d input there. The
// exchanged tensors live where the stage computes (host tensors for nn::GptModel, device tensors
// for the GPU's stage), matching the communicator the executor is given.
#pragma once

#include "myriad/core/tensor.h"
#include "myriad/nn/transformer_config.h"

namespace myriad::nn {

struct LossSum {
  double sum = 0.0;         // sum of per-token losses over valid targets
  std::int64_t tokens = 0;  // number of valid targets
};

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;

  virtual int num_chunks() const = 0;
  // Buffers for `slots` micro-batches of (B, T) under `mode` (kept when unchanged).
  virtual void prepare(std::int64_t B, std::int64_t T, Recompute mode, int slots) = 0;
  virtual Recompute buffer_mode() const = 0;
  virtual Tensor chunk_input(int chunk, int slot) = 0;
  virtual Tensor chunk_output(int chunk, int slot) = 0;
  virtual Tensor chunk_grad(int chunk, int slot) = 0;
  // The valid targets of the micro-batch on the last global stage, else 0 (see above).
  virtual std::int64_t forward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets) = 0;
  // The sum of the losses forward_chunk recorded since the last clear_losses() / take_loss_sum()
  // (one device-to-host read; 0 off the last stage), which empties the record.
  virtual double take_loss_sum() = 0;
  virtual void clear_losses() = 0;
  virtual void backward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets, float loss_scale) = 0;
};

}  // namespace myriad::nn
