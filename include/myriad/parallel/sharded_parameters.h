// ShardedParameters — ZeRO stage 3: as ShardedGradients, and the values are sharded too. A unit's
// values are all-gathered when the model acquires it and freed when it releases it (acquires are
// counted; tied embeddings stay gathered from the lookup to the LM head), and the next unit in
// pass order is prefetched on the communication thread; finish_backward drops a prefetched unit
// the pass never acquired. Under bf16 / fp16 (DataParallelOptions::compute_format) the gathers
// move 16-bit values: a rounded copy of the shard is kept (refreshed after each update and load)
// and gathered, then widened to f32 for the model — the same values as gathering f32 and
// rounding, at half the bytes. The shard stays the f32 master. gather_all keeps every parameter
// bound (generation) until release_all.
#pragma once

#include <vector>

#include "myriad/parallel/sharded_gradients.h"

namespace myriad::parallel {

class ShardedParameters final : public ShardedGradients {
 public:
  ShardedParameters(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                    const optim::AdamWConfig& adam);

  int stage() const override { return 3; }
  void acquire(int unit, nn::Pass pass) override;
  void release(int unit, nn::Pass pass) override;
  void finish_backward() override;
  void gather_all() override;
  void release_all() override;
  ShardedMemory resident() const override;

 protected:
  Tensor owned_values(const ZeroSegment& segment) const override;
  void after_update() override { refresh_16_bit_shard(); }
  void full_values(Tensor& full) override;
  void load_values(const Tensor& host_values) override;

 private:
  bool gathers_16_bit() const { return options_.compute_format != DType::f32; }
  void refresh_16_bit_shard();  // shard_values_16_ <- shard_values_ rounded to compute_format
  void ensure_values(int unit);
  void prefetch_values(int unit);
  void free_values(int unit);  // drop a gathered unit and unbind its value views

  Tensor shard_values_;                 // this rank's values, the f32 master
  Tensor shard_values_16_;              // gathers_16_bit(): the shard in compute_format
  std::vector<Tensor> unit_values_;     // per unit: gathered values while in use or prefetched
  std::vector<Tensor> unit_values_16_;  // gathers_16_bit(): a unit's 16-bit values in flight
  std::vector<int> value_refs_;         // per unit: acquires not released yet
  std::vector<distributed::WorkHandle> value_gathers_;
  bool all_gathered_ = false;
};

}  // namespace myriad::parallel
