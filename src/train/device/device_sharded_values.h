// DeviceShardedValues — ZeRO 3's parameter values on the device (device_trainer_cuda.cpp): this
// rank keeps only its shard of the f32 masters (the host layout's ZeroLayout shard, which the
// device optimizer updates in place), and DeviceGpt, built without flat values, reads each unit
// from here: the unit is all-gathered over the dp group when first acquired, the next unit in
// the pass's direction is prefetched (its gather runs on NCCL's stream while this one computes),
// and the buffer is dropped when the last acquisition is released. With 16-bit GEMM operands the
// gathered f32 unit is also rounded into a 16-bit copy once its gather is done (the f32 values
// stay needed: norms, biases, embedding lookups read them); the gather itself moves f32.
//
// Invariants: a unit's buffer exists from its gather (or prefetch) until its release (or
// drop_prefetched()); units are one bucket each (ZeRO >= 2 layouts), so a unit's gather is the
// bucket's: input the rank's owned chunk in the shard, output the whole unit. Buffers come from
// the context's caching allocator on the compute stream; freeing one while kernels that read it
// are still queued is safe because every later user — a kernel on the same stream, or a gather on
// NCCL's stream, which waits for the compute stream's work at launch — is ordered after them.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/device_gpt.h"
#include "myriad/dist/communicator.h"
#include "myriad/dist/zero_layout.h"

namespace myriad::train {

class DeviceShardedValues final : public cuda::UnitValueStore {
 public:
  // `dp`: NCCL over the dp group (not owned), or null for one replica. Registers itself with
  // `model` (built without flat values).
  DeviceShardedValues(cuda::DeviceContext& context, cuda::DeviceGpt& model, const dist::ZeroLayout& layout,
                      dist::Communicator* dp, DType operands);

  // The f32 masters of this rank's shard (layout.shard_elements()), for the optimizer and the
  // host copies.
  float* shard() { return shard_.as<float>(); }
  std::size_t shard_bytes() const { return shard_.bytes(); }
  // The most bytes the gathered units held at once so far.
  std::size_t peak_gathered_bytes() const { return peak_bytes_; }
  // Waits for and drops units prefetched but never acquired (end of a step or evaluation).
  void drop_prefetched();

  void acquire(int unit, bool forward) override;
  void release(int unit) override;
  float* unit_values(int unit) override;
  const std::uint16_t* unit_values_h(int unit) override;

 private:
  void prefetch(int unit);
  void round(int unit);
  void drop(int unit);

  cuda::DeviceContext& context_;
  dist::ZeroLayout layout_;
  dist::Communicator* dp_;
  DType operands_;  // f32, or the 16-bit format of the units' copies
  cuda::DeviceBuffer shard_;
  std::vector<Tensor> gathered_;            // per unit: its values while gathered (or in flight)
  std::vector<Tensor> rounded_;             // per unit, 16-bit operands: the acquired values' copy
  std::vector<dist::WorkHandle> gathers_;   // per unit: the gather in flight (null once waited for)
  std::vector<int> refs_;                   // per unit: acquisitions not yet released
  std::size_t bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace myriad::train
