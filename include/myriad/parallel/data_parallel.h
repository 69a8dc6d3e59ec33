// Folder parallel/ (layer myriad_parallel, between optim and train) — how one model is spread over
// ranks, applied from outside the model: data parallelism (this header) as one ParameterUnits
// strategy per ZeRO stage (parameter_units.h: replicated_parameters.h, sharded_optimizer_state.h,
// sharded_gradients.h, sharded_parameters.h; zero_layout.h, bucket_schedule.h) and one
// GradientExchange per exchange (gradient_exchange.h: exact_reduction.h, compressed_gradients.h,
// onebit_adam_exchange.h, local_sgd_exchange.h over local_sgd.h), the tensor-, sequence-,
// context-, expert- and vocabulary-parallel regions the model's injected interfaces call
// (tensor_parallel_region(s).h, context_parallel_group.h, expert_parallel_group.h,
// vocab_parallel.h), and the pipeline schedules as data with the executor that walks them
// (pipeline_schedule.h, pipeline_executor.h). It uses the communicators of the distributed layer,
// which knows no model.
//
// DataParallel — one model replica over the dp group: the ParameterUnits of parallel.zero_stage
// (attached to the model as its UnitHooks: buckets, shards, ZeRO-3 gathers, the sharded AdamW)
// and the GradientExchange of the run (exact, int8 / top-k, 1-bit Adam, local SGD), each made
// once by its factory. It owns the two and forwards the Engine's calls; its only logic is the
// rule that joins them: a backward reduces its buckets when the stage reduces every micro-batch
// (2, 3) or it is the step's last, and the exchange sums exactly this step.
// snapshot_full and load_full convert between the stage's layout and the flat full layout
// (layout-independent checkpoints); they are collective over the dp group.
#pragma once

#include <memory>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/parallel/data_parallel_options.h"
#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/local_sgd.h"
#include "myriad/parallel/parameter_units.h"
#include "myriad/parallel/sharded_state.h"
#include "myriad/parallel/zero_layout.h"

namespace myriad::parallel {

class DataParallel final {
 public:
  DataParallel(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
               const optim::AdamWConfig& adam);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  void zero_grads() { units_->zero_grads(); }
  void begin_micro_batch(bool last_of_step);  // before each forward_backward of the step
  // Pipelined: before each backward of a chunk, whether it is that chunk's last in the step.
  void begin_pipelined_backward(bool final_for_chunk);
  // Whether the micro-batch (chunk backward) announced last starts reductions in its backward.
  bool reduces_in_backward() const { return units_->reducing(); }
  void finish_backward() { units_->finish_backward(); }    // after the last one: waits for the reductions
  void reduce_gradients() { units_->reduce_gradients(); }  // pipelined: every bucket not launched yet, then waits
  // After the step's last backward: reduce_gradients() (pipelined) or finish_backward(), the
  // exchange's own step (compressed gradients), then the tp_partial gradients summed over tp (on
  // whatever this rank holds of them).
  void finish_step();
  // Pipelined: buckets whose reduction started during the last step's schedule (the overlap).
  int buckets_overlapped() const { return units_->buckets_overlapped(); }
  // `unscale`: 1 / loss scale (fp16), applied to the gradients inside the update.
  optim::OptimizerStepStats optimizer_step(float lr, float unscale = 1.0f) {
    return exchange_->optimizer_step(lr, unscale);
  }

  // Writes the full state into `out`: allocated (zeroed) on first use and reused afterwards, so a
  // later snapshot is a parallel copy into memory whose pages are already resident. Collective
  // when sharded (stage >= 1); at stage 0 every rank holds the full state and may skip it.
  void snapshot_full(FullState& out) { units_->snapshot_full(out); }
  // Copies the owned part into `out` (buffers allocated on first use, reused after). Not
  // collective: at ZeRO >= 1 every dp rank owns a distinct shard; at ZeRO 0 every rank owns
  // everything (and one of them suffices to write it).
  void snapshot_owned(OwnedState& out);
  void load_full(const Tensor& values, const Tensor& m, const Tensor& v);
  // Stage 3: gather every unit and keep all parameters bound (generation); release_all undoes it.
  void gather_all() { units_->gather_all(); }
  void release_all() { units_->release_all(); }

  // Compute copies written by the optimizer's update (ParameterUnits::write_compute_copies), except
  // under local SGD (its averaging writes the values after the update).
  void write_compute_copies(DType format, const Tensor& rounded, const Tensor& narrow) {
    if (exchange_->local_sgd() == nullptr) units_->write_compute_copies(format, rounded, narrow);
  }
  int zero_stage() const { return units_->stage(); }
  // Local SGD: the delayed outer step, then parameters and moments averaged over the replicas;
  // nothing otherwise (the replicas are identical already). Collective over dp.
  void consolidate_replicas() { exchange_->consolidate_replicas(); }
  LocalSgd* local_sgd() { return exchange_->local_sgd(); }
  // Whether this step's gradients are all-reduced exactly (not compressed, not 1-bit Adam's
  // compressed phase, not local SGD).
  bool exchanges_exactly() const { return exchange_->reduces_exactly(); }
  const ParameterUnits& units() const { return *units_; }
  const GradientExchange& exchange() const { return *exchange_; }
  const ZeroLayout& layout() const { return units_->layout(); }
  // The optimizer's segments: this rank's owned flat ranges cut at parameter boundaries, in the
  // order its packed moments hold them.
  const std::vector<ZeroSegment>& segments() const { return units_->segments(); }
  optim::AdamWOptimizer& optimizer() { return units_->optimizer(); }
  ShardedMemory memory() const { return units_->memory(); }
  // The bytes of the tensors held now, read from the tensors themselves: the store's flat buffers
  // while they exist, the ZeRO shard buffers (values f32 and 16-bit, gradients) and the moments.
  // buffer_peak_bytes as memory()'s. A dry run's breakdown (dry_run.h).
  ShardedMemory resident() const { return units_->resident(); }
  // The accounting of memory() from the ZeRO formulas alone (for the start-up report and tests).
  static ShardedMemory formula(std::int64_t psi, std::int64_t shard, int stage) {
    return zero_memory_formula(psi, shard, stage);
  }

 private:
  std::unique_ptr<ParameterUnits> units_;       // the model's hooks while this lives
  std::unique_ptr<GradientExchange> exchange_;  // references *units_
};

}  // namespace myriad::parallel
