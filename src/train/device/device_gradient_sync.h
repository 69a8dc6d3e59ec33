// DeviceGradientSync — the data-parallel side of the device trainer (device_trainer_cuda.cpp):
// sums a DeviceGpt's gradients over the dp group on NCCL and, under ZeRO 1, keeps this rank's
// gradient shard and gathers the updated values back. The bucket layout is the host
// DataParallel's (so the shard, and the optimizer state over it, are the CPU run's).
//
//   ZeRO 0: with `overlap` (no pipeline) each block's gradients are all-reduced as soon as the
//           last micro-batch's backward has finished them, the ranges outside the blocks in
//           finish(); a pipeline all-reduces everything in finish().
//   ZeRO 1: each bucket is reduce-scattered into its place in the shard as soon as all its
//           elements are final (with `overlap`), the rest in finish(); one dp rank copies.
// Invariant: between finish() and the next backward no reduction is in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_gpt.h"
#include "myriad/dist/communicator.h"
#include "myriad/dist/zero_layout.h"
#include "myriad/train/data_parallel.h"

namespace myriad::train {

class DeviceGradientSync {
 public:
  // `dp`: NCCL over the dp group, or null for one replica. Registers the block callback on
  // `model` when `overlap`.
  DeviceGradientSync(cuda::DeviceContext& context, cuda::DeviceGpt& model, const DataParallel& host,
                     std::unique_ptr<dist::Communicator> dp, bool overlap);

  int zero_stage() const { return zero_stage_; }
  // The gradients the optimizer reads after finish(): the full flat ones (ZeRO 0) or the shard.
  const float* optimizer_grads();
  std::int64_t optimizer_grad_elements() const;
  std::size_t shard_bytes() const { return shard_grads_.bytes(); }

  void reset();                        // a new step: no bucket launched
  void begin_micro_batch(bool last);   // `last`: its backward starts the reductions (overlap)
  void finish();                       // the remaining reductions, then waits for all
  void gather_values();                // ZeRO 1 after an update: every rank's chunks into the full values

 private:
  void block_ready(cuda::DeviceGpt::FlatRange range);
  void launch_bucket(std::size_t bucket);
  void wait_pending();

  cuda::DeviceContext& context_;
  cuda::DeviceGpt& model_;
  int zero_stage_;
  dist::ZeroLayout layout_;
  std::unique_ptr<dist::Communicator> dp_;
  bool overlap_;
  cuda::DeviceBuffer shard_grads_;              // ZeRO 1: this rank's reduced gradient shard
  bool reducing_ = false;                       // this backward starts the reductions
  std::vector<bool> launched_;                  // ZeRO 1, per bucket: reduce-scatter started
  std::vector<std::int64_t> pending_elements_;  // ZeRO 1, per bucket: elements not final yet
  std::vector<dist::WorkHandle> pending_;
};

}  // namespace myriad::train
