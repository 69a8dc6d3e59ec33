// ParameterUnits — how one ZeRO stage holds a model replica's parameters, gradients and AdamW
// state over the dp group, attached to the model as its UnitHooks. One strategy per stage, made
// once by make_parameter_units from parallel.zero_stage (Ψ = flat parameter elements, N = dp size):
//   0  ReplicatedParameters   full values, gradients and moments; buckets all-reduced
//   1  ShardedOptimizerState  full values and gradients, moments of this rank's shard (8Ψ/N)
//   2  ShardedGradients       gradients only as the shard (+ a few units' buffers in flight)
//   3  ShardedParameters      values only as the shard too; units gathered while in use
// This base holds what every stage shares: the ZeroLayout (buckets in backward order and this
// rank's chunk of each), the AdamW optimizer over the owned segments, the BucketSchedule (when a
// bucket's reduction starts), the reductions in flight, the tp-partial sums, conversions to and
// from the full flat layout, and memory accounting. A stage supplies how a bucket is reduced,
// where the optimizer's values and gradients live, what a unit's use needs (acquire / release),
// the global gradient norm and what follows an applied update.
// Invariants: reductions complete in issue order (FIFO) and finish_backward / reduce_gradients
// wait for all of them; ring collectives give every rank bitwise identical reduced values, so
// replicas never drift; every element is owned by exactly one rank of its bucket's group (the dp
// group, or the expert-data group for expert buckets), and the optimizer's moments are packed in
// segment order. Gradient contract: parameter gradients accumulate (`+=`) until zero_grads().
// Placement: every buffer lives where the model's parameters do (ParameterStore::placement), and
// the dp communicator carries tensors of that kind; snapshots and loads are host tensors.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/distributed/compressed_reduce_scatter.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/parallel/bucket_schedule.h"
#include "myriad/parallel/data_parallel_options.h"
#include "myriad/parallel/sharded_state.h"
#include "myriad/parallel/zero_layout.h"

namespace myriad::parallel {

class ParameterUnits : public nn::UnitHooks {
 public:
  ~ParameterUnits() override;
  ParameterUnits(const ParameterUnits&) = delete;
  ParameterUnits& operator=(const ParameterUnits&) = delete;

  virtual int stage() const = 0;  // parallel.zero_stage
  // Whether every micro-batch's backward reduces its gradients (no full buffer accumulates them)
  // rather than only the step's last.
  virtual bool reduces_every_micro_batch() const { return false; }

  void zero_grads();
  // Not pipelined, before each micro-batch's backward: whether its buckets are reduced.
  void begin_micro_batch(bool reduce) { schedule_.begin_micro_batch(reduce); }
  // Pipelined, before each backward of a chunk: whether it is the chunk's last and reduces.
  void begin_pipelined_backward(bool reduce) { schedule_.begin_pipelined_backward(reduce); }
  virtual void finish_backward();  // after the last backward: waits for the reductions
  void reduce_gradients();         // pipelined: every bucket not launched yet, then waits for all
  void sum_tp_partial_grads();     // gradients of tp_partial parameters summed over tp
  bool pipelined() const { return schedule_.pipelined(); }
  bool reducing() const { return schedule_.reducing(); }  // the announced backward starts reductions
  int buckets_overlapped() const { return schedule_.overlapped(); }

  // The squared global gradient norm over the dp (and expert) groups, each element counted once;
  // not yet summed over the model-parallel groups. Default (sharded gradients): one float64
  // all-reduce of the shards' sums of squares.
  virtual double gradient_sum_squares() const;
  // `value` summed over the model-parallel groups (each part of the model counted once).
  double sum_over_model_parallel(double value) const;
  // AdamW over the owned segments with the given squared norm, then the stage's after-update
  // work (all-gathers of updated shards, the 16-bit shard) unless the step was skipped.
  optim::OptimizerStepStats apply_update(float lr, double sum_squares, float unscale);
  // apply_update with the exact global norm (gradient_sum_squares over model parallelism too).
  optim::OptimizerStepStats exact_step(float lr, float unscale);

  // Conversions to and from the full flat layout and the owned part (see DataParallel).
  void snapshot_full(FullState& out);
  void snapshot_owned(OwnedState& out);
  void load_full(const Tensor& values, const Tensor& m, const Tensor& v);
  // Compute copies (16-bit training): the flat f32 `rounded` and `format` `narrow` buffers of the
  // store's layout become the optimizer's copies of each segment (AdamWOptimizer::
  // set_compute_copies), written by every update. Only where the update writes every value of the
  // rank (stage 0); nothing otherwise, and the caller refreshes them after each update
  // (OptimizerStepStats::compute_copies_written says which happened).
  void write_compute_copies(DType format, const Tensor& rounded, const Tensor& narrow);
  // Sharded values (stage 3): every unit gathered and kept bound / undone. Nothing otherwise.
  virtual void gather_all() {}
  virtual void release_all() {}

  // Gradient compression at ZeRO 1-3 (parallel/compressed_gradients.h): every dense bucket's
  // reduce-scatter becomes a CompressedReduceScatter over dp with its own sender error buffer
  // (the bucket's size); expert buckets stay exact. Sharded stages only.
  void compress_dense_reduce_scatters(const CompressionSpec& spec);

  ShardedMemory memory() const;
  virtual ShardedMemory resident() const;

  const ZeroLayout& layout() const { return layout_; }
  const std::vector<ZeroSegment>& segments() const { return segments_; }
  optim::AdamWOptimizer& optimizer() { return *optimizer_; }
  nn::ParameterStore& store() { return store_; }
  const ops::Placement& placement() const { return placement_; }
  distributed::Communicator& dp() const { return dp_; }
  const DataParallelOptions& options() const { return options_; }

  void grads_ready(int unit) final;
  void acquire(int, nn::Pass) override {}
  void release(int, nn::Pass) override {}

 protected:
  // How the stage cuts the flat buffer: bucket size and whether buckets are sharded over the group.
  struct Sharding {
    std::int64_t bucket_elements = 0;
    bool sharded = false;
  };
  struct Pending {
    distributed::WorkHandle work;  // empty: the reduction is complete (ordered on the stream)
    int bucket = 0;
    Tensor unit_grads;  // a unit's gradient buffer being reduce-scattered (stages 2/3)
    Tensor reduced;     // this rank's reduced chunk, added into the gradient shard when done
  };

  ParameterUnits(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                 Sharding sharding);
  // The last step of a stage's constructor: the optimizer over owned_values / owned_grads of
  // every segment, then the hooks attached to the model.
  void attach(const optim::AdamWConfig& adam);

  // Where the optimizer reads and writes a segment's values and gradients. Defaults: the full
  // flat values, the gradient shard.
  virtual Tensor owned_values(const ZeroSegment& segment) const;
  virtual Tensor owned_grads(const ZeroSegment& segment) const;
  // Starts the reduction of a bucket whose gradients are final (pushes a Pending).
  virtual void launch_bucket(int bucket) = 0;
  virtual void after_update() {}
  // The full flat values into `full` (where the state lives; collective when values are sharded).
  virtual void full_values(Tensor& full);
  // Values from a host tensor in the full flat layout.
  virtual void load_values(const Tensor& host_values);

  void launch(int bucket);  // marks it launched, then launch_bucket
  // in (the bucket's gradients) reduce-scattered into out (this rank's chunk): the exact
  // collective of comm_of(bucket) (p.work), or the compressed one when set.
  void start_reduce_scatter(Pending& p, const Tensor& in, Tensor out);
  void retire_completed(std::size_t keep_in_flight);
  distributed::Communicator& comm_of(const ZeroBucket& bucket) const;  // dp, or the expert-data group
  void gather_from_shard(const Tensor& shard, Tensor& full);           // shard layout -> full flat layout
  void gather_updated_values();  // every bucket's updated owned chunk all-gathered into the full values
  void track(std::int64_t delta_bytes);

  nn::GptModel& model_;
  nn::ParameterStore& store_;
  ops::Placement placement_;  // where the model's state lives; every buffer here is placed there
  distributed::Communicator& dp_;
  distributed::Communicator& expert_dp_;  // dp_ unless ep > 1
  DataParallelOptions options_;
  ZeroLayout layout_;
  std::vector<ZeroSegment> segments_;
  std::unique_ptr<optim::AdamWOptimizer> optimizer_;
  Tensor shard_grads_;  // this rank's reduced gradients (stages 1-3)
  std::deque<Pending> pending_;

 private:
  void retire(Pending& pending);
  void moments_to_full(const Tensor& packed, Tensor& full);  // optimizer's packed segments -> full

  BucketSchedule schedule_;
  Tensor moment_shard_;  // scratch for moments_to_full when sharded
  std::vector<std::unique_ptr<distributed::CompressedReduceScatter>> compressed_;  // per bucket; dense only
  bool attached_ = false;
  std::int64_t buffer_bytes_ = 0, buffer_peak_ = 0;
};

// The strategy of options.zero_stage (0-3; another is refused), attached to the model's hooks.
std::unique_ptr<ParameterUnits> make_parameter_units(nn::GptModel& model, distributed::Communicator& dp,
                                                     const DataParallelOptions& options,
                                                     const optim::AdamWConfig& adam);

}  // namespace myriad::parallel
