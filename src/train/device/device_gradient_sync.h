// DeviceGradientSync — the data-parallel side of the device trainer (device_trainer_cuda.cpp):
// sums a DeviceGpt's gradients over the dp group on NCCL and, under ZeRO 1 and 2, keeps this
// rank's gradient shard and gathers the updated values back. The buckets are the host
// DataParallel's (ZeroLayout), so the shard, and the optimizer state over it, are the CPU run's.
//
//   ZeRO 0: each bucket's gradients are all-reduced once its units' gradients are final in the
//           last micro-batch's backward (`overlap`); a pipeline all-reduces everything in finish().
//   ZeRO 1: each bucket is reduce-scattered into its place in the shard likewise (a pipeline:
//           every bucket in finish()); one dp rank copies.
//   ZeRO 2 and 3: the model keeps no flat gradients: this class is its UnitGradientStore. A unit (one
//           bucket each) gets a zeroed buffer when its backward first writes, and every
//           micro-batch it is reduce-scattered into the shard as soon as it is final and dropped
//           once the reduction is done (at most kMaxInFlight reductions in flight). The
//           micro-batches accumulate in the shard: from the second one on, the shard is added
//           into this rank's chunk of the unit's gradients before the reduce-scatter (after the
//           previous micro-batch's reduction into that piece has completed), so the sum lands
//           in the shard with no extra buffer.
// Invariant: between finish() and the next backward no reduction is in flight and (ZeRO >= 2) no
// unit buffer is held.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_gpt.h"
#include "myriad/dist/communicator.h"
#include "myriad/dist/zero_layout.h"
#include "myriad/train/data_parallel.h"

namespace myriad::train {

class DeviceGradientSync final : public cuda::UnitGradientStore {
 public:
  // `dp`: NCCL over the dp group, or null for one replica. `overlap`: reduce during the backward
  // (false under a pipeline: everything in finish(); ZeRO >= 2 needs it). Registers itself with
  // `model` (unit callbacks; at ZeRO >= 2 the unit gradient store, the model built without flat
  // gradients).
  DeviceGradientSync(cuda::DeviceContext& context, cuda::DeviceGpt& model, const DataParallel& host,
                     std::unique_ptr<dist::Communicator> dp, bool overlap);

  int zero_stage() const { return zero_stage_; }
  dist::Communicator* dp() const { return dp_.get(); }  // NCCL over the dp group (null: one replica)
  const dist::ZeroLayout& layout() const { return layout_; }
  // The gradients the optimizer reads after finish(): the full flat ones (ZeRO 0) or the shard.
  const float* optimizer_grads();
  std::int64_t optimizer_grad_elements() const;
  std::size_t shard_bytes() const { return shard_grads_.bytes(); }
  // ZeRO >= 2: the most bytes the unit gradient buffers held at once so far (0 otherwise).
  std::size_t unit_buffer_peak_bytes() const { return unit_bytes_peak_; }

  void reset();                        // a new step: no micro-batch seen, nothing launched
  void begin_micro_batch(bool last);   // `last`: the step's last micro-batch
  void finish();                       // the remaining reductions, then waits for all
  void gather_values();                // ZeRO 1/2 after an update: every rank's chunks into the full values
                                       // (ZeRO 3: nothing, the values stay sharded: DeviceShardedValues)

  float* unit_gradients(int unit) override;  // ZeRO >= 2 (cuda::UnitGradientStore)

 private:
  static constexpr std::size_t kMaxInFlight = 2;  // ZeRO >= 2: reductions (and their unit buffers) in flight
  struct Pending {
    dist::WorkHandle work;
    std::size_t bucket = 0;
    Tensor unit_grads;  // ZeRO >= 2: the reduced unit's buffer, dropped when the reduction is done
  };

  void unit_ready(int unit);
  void launch_bucket(std::size_t bucket);
  void launch_remaining();
  void clear_buckets();
  void retire_completed(std::size_t keep_in_flight);
  void retire_bucket(std::size_t bucket);
  Tensor shard_piece(const dist::ZeroBucket& bucket);

  cuda::DeviceContext& context_;
  cuda::DeviceGpt& model_;
  int zero_stage_;
  dist::ZeroLayout layout_;
  std::unique_ptr<dist::Communicator> dp_;
  bool overlap_;
  cuda::DeviceBuffer shard_grads_;        // ZeRO >= 1: this rank's reduced gradient shard
  bool reducing_ = false;                 // this backward reduces (the last micro-batch; ZeRO >= 2: every one)
  bool accumulate_ = false;               // ZeRO >= 2: the shard already holds earlier micro-batches' sums
  int micro_batches_ = 0;                 // begun since reset()
  std::vector<bool> launched_;            // per bucket, this micro-batch: reduction started
  std::vector<int> units_left_;           // per bucket, this micro-batch: units not final yet
  std::vector<Tensor> unit_grads_;        // ZeRO >= 2, per unit: its buffer from first write to launch
  std::size_t unit_bytes_ = 0, unit_bytes_peak_ = 0;  // ZeRO >= 2: unit buffers held (pending ones too)
  std::deque<Pending> pending_;
};

}  // namespace myriad::train
