// Folder parallel/ (layer myriad_parallel, between optim and train) — how one model is spread over
// ranks, applied from outside the model: data parallelism with ZeRO stages 0–3 and its gradient
// exchanges (this header, zero_layout.h, local_sgd.h), the tensor-, sequence-, context-, expert-
// and vocabulary-parallel regions the model's injected interfaces call (tensor_parallel_region(s).h,
// context_parallel_group.h, expert_parallel_group.h, vocab_parallel.h), and the pipeline
// schedules as data with the executor that walks them (pipeline_schedule.h, pipeline_executor.h).
// It uses the communicators of the distributed layer, which knows no model.
//
// DataParallel — gradient reduction and ZeRO sharding of one model replica over the dp group.
//
// Attaches to the model as its UnitHooks. Per stage (Ψ = flat parameter elements, N = dp size):
//   0  full values, full gradients; each bucket of gradients is all-reduced (ring) the moment its
//      last unit's gradients are final in the LAST micro-batch of the step (no communication on
//      earlier micro-batches); AdamW updates everything (redundantly, identically on every rank).
//   1  as 0, but buckets are reduce-scattered into this rank's shard of the gradients, AdamW
//      state covers only the shard (8Ψ/N bytes), and updated shards are all-gathered back.
//   2  gradients are never held in full: a unit's gradient buffer exists from its backward until
//      its reduce-scatter has been added into the shard (every micro-batch communicates — the
//      price of not keeping full gradients); values are full and all-gathered after the update.
//   3  as 2, and values are sharded too: a unit's values are all-gathered when the model
//      acquires it, freed when it releases it, and the next unit in pass order is prefetched.
//      Under bf16 / fp16 (compute_format) the gathers move 16-bit values: a rounded copy of the
//      shard is kept (refreshed after each update and load) and gathered, then widened to f32 for
//      the model — the same values as gathering f32 and rounding, at half the bytes.
// Global gradient norm (clipping): one float64 all-reduce of the shards' sums of squares (each
// element counted once); stage 0 computes it locally from the identical reduced gradients.
// Mixture of experts (ep > 1): expert units form their own buckets, reduced and sharded over the
// ranks that hold the same experts (DataParallelOptions::expert_data_parallel), not the dp group.
// Ring collectives give every rank bitwise identical reduced values, so replicas never drift.
// Gradient exchange (stage 0, host; DataParallelOptions::exchange): `compressed` replaces the
// bucket all-reduces by one distributed::CompressedSum of the whole gradient buffer in finish_step (int8
// or top-k codes with error feedback); `onebit_adam` reduces exactly for freeze_step optimizer
// steps, then skips the gradient reduction and sums the momentum compressed to signs inside the
// optimizer step (optim/onebit_adam.h). Both keep every replica bitwise identical (every rank
// decodes the same bytes). Their error-feedback buffers are not checkpointed: a resumed run
// starts them at zero. `local` (local SGD, parallel/local_sgd.h) never reduces gradients: each
// replica steps on its own, every replica skips a step when any replica's norm is not finite
// (so all stay at the same step count), and the outer step runs every local_steps steps;
// consolidate_replicas() makes the replicas identical (before a checkpoint).
// snapshot_full and load_full convert between this layout and the flat full layout
// (layout-independent checkpoints); they are collective over the dp group.
// Placement: every buffer (shards, unit buffers, gathered values) lives where the model's
// parameters do (ParameterStore::placement: the host or a backend's device), and the dp
// communicator must carry tensors of that kind (MPI for host tensors, NCCL for device ones; host
// scalars such as the gradient norm go over either). Snapshots and loads are host tensors.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/distributed/compressed_sum.h"
#include "myriad/parallel/zero_layout.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/parallel/local_sgd.h"

namespace myriad::parallel {

struct GradientExchange {
  enum class Kind { exact, compressed, onebit_adam, local };
  Kind kind = Kind::exact;
  distributed::CompressionSpec compression;  // compressed: int8 or topk (onebit_adam uses sign)
  std::int64_t freeze_step = 0;              // onebit_adam: exact optimizer steps first
  LocalSgdOptions local;                     // local: local SGD / DiLoCo (parallel/local_sgd.h)
};

struct DataParallelOptions {
  int zero_stage = 0;
  std::int64_t bucket_elements = 0;  // stages 0/1; 0 = one bucket after the whole backward
  // Groups holding the other parts of the model (tp, pp): the squared gradient norm is summed over
  // them too (each parameter counted once: Parameter::primary). Not owned.
  std::vector<distributed::Communicator*> model_parallel;
  // Pipeline parallel (stages 0/1 only): a unit's gradients are final after the last backward of
  // its chunk, which the caller announces with begin_pipelined_backward(true); its bucket is
  // reduced from then on, overlapping the schedule's cool-down. Buckets holding a unit of
  // `deferred_units` (the tied embedding, summed across the end stages after the schedule) and
  // any bucket not launched yet are reduced by reduce_gradients() in finish_step().
  bool pipelined = false;
  std::vector<int> deferred_units;
  // training.precision at stage 3: each gathered unit is rounded to this format (bf16 / f16) for
  // the model to read, while the shard stays the f32 master (stages 0-2: the Engine's compute copy).
  DType compute_format = DType::f32;
  // Mixture of experts with ep > 1: expert units (ParamUnit::expert) are reduced and sharded over
  // the ranks holding the same experts (`expert_data_parallel`), the stage-0 gradient norm of
  // expert parameters summed over `expert_parallel`. Not owned; null = ep 1.
  distributed::Communicator* expert_data_parallel = nullptr;
  distributed::Communicator* expert_parallel = nullptr;
  // The tp group: gradients of Parameter::tp_partial parameters (MoE layers under tp, each rank's
  // share of the sequences) are summed over it in finish_step(). Not owned; null = tp 1.
  distributed::Communicator* tensor_parallel = nullptr;
  GradientExchange exchange;
};

// Parameters and AdamW moments in the flat full layout (padding between parameters is 0).
struct FullState {
  Tensor values, m, v;
};

// The part of the state this rank owns (its ZeRO shard; everything at ZeRO 0), packed: segment
// after segment (flat ranges of whole or partial parameters), values and AdamW moments alike.
struct OwnedState {
  Tensor values, m, v;
  Tensor outer_momentum;                        // local SGD only (packed like values); undefined otherwise
  std::vector<parallel::ZeroSegment> segments;  // shard_position = where the segment starts in the packed buffers
};

struct ShardedMemory {
  std::int64_t parameter_bytes = 0;     // resident parameter values (full, or the shard at stage 3)
  std::int64_t gradient_bytes = 0;      // resident gradients (full and/or shard)
  std::int64_t optimizer_bytes = 0;     // AdamW m and v of the owned elements
  std::int64_t buffer_peak_bytes = 0;   // peak of transient gathered values / unit gradient buffers
  std::int64_t compute_copy_bytes = 0;  // ZeRO 3, bf16/fp16: the shard rounded to the compute format
};

class DataParallel final : public nn::UnitHooks {
 public:
  DataParallel(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
               const optim::AdamWConfig& adam);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  void zero_grads();
  void begin_micro_batch(bool last_of_step);  // before each forward_backward of the step
  // Pipelined: before each backward of a chunk, whether it is that chunk's last in the step.
  void begin_pipelined_backward(bool final_for_chunk);
  void finish_backward();   // after the last one: waits for the reductions
  void reduce_gradients();  // pipelined: every bucket not launched yet, then waits for all
  // After the step's last backward: reduce_gradients() (pipelined) or finish_backward(), then the
  // tp_partial gradients summed over tp (on whatever this rank holds of them).
  void finish_step();
  // Pipelined: buckets whose reduction started during the last step's schedule (the overlap).
  int buckets_overlapped() const { return buckets_overlapped_; }
  // `unscale`: 1 / loss scale (fp16), applied to the gradients inside the update.
  optim::OptimizerStepStats optimizer_step(float lr, float unscale = 1.0f);

  // Writes the full state into `out`: allocated (zeroed) on first use and reused afterwards, so a
  // later snapshot is a parallel copy into memory whose pages are already resident. Collective
  // when sharded (stage >= 1); at stage 0 every rank holds the full state and may skip it.
  void snapshot_full(FullState& out);
  // Copies the owned part into `out` (buffers allocated on first use, reused after). Not
  // collective: at ZeRO >= 1 every dp rank owns a distinct shard; at ZeRO 0 every rank owns
  // everything (and one of them suffices to write it).
  void snapshot_owned(OwnedState& out);
  void load_full(const Tensor& values, const Tensor& m, const Tensor& v);
  // Stage 3: gather every unit and keep all parameters bound (generation); release_all undoes it.
  void gather_all();
  void release_all();

  int zero_stage() const { return stage_; }
  // Local SGD: the delayed outer step, then parameters and moments averaged over the replicas;
  // nothing otherwise (the replicas are identical already). Collective over dp.
  void consolidate_replicas();
  LocalSgd* local_sgd() { return local_sgd_.get(); }
  // Whether this step's gradients are all-reduced exactly (not compressed, not 1-bit Adam's
  // compressed phase).
  bool exchanges_exactly() const;
  const parallel::ZeroLayout& layout() const { return layout_; }
  // The optimizer's segments: this rank's owned flat ranges cut at parameter boundaries, in the
  // order its packed moments hold them.
  const std::vector<parallel::ZeroSegment>& segments() const { return segments_; }
  optim::AdamWOptimizer& optimizer() { return *optimizer_; }
  ShardedMemory memory() const;
  // The bytes of the tensors held now, read from the tensors themselves: the store's flat buffers
  // while they exist, the ZeRO shard buffers (values f32 and 16-bit, gradients) and the moments.
  // buffer_peak_bytes as memory()'s. A dry run's breakdown (dry_run.h).
  ShardedMemory resident() const;
  // The accounting of memory() from the ZeRO formulas alone (for the start-up report and tests).
  static ShardedMemory formula(std::int64_t psi, std::int64_t shard, int stage);

  void acquire(int unit, nn::Pass pass) override;
  void release(int unit, nn::Pass pass) override;
  void grads_ready(int unit) override;

 private:
  struct Pending {
    distributed::WorkHandle work;
    int bucket = 0;
    Tensor unit_grads;  // stages 2/3: the unit's gradient buffer being reduce-scattered
    Tensor reduced;     // stages 2/3: this rank's reduced chunk, added into the shard when done
  };
  Tensor flat_view(const Tensor& buffer, std::int64_t begin, std::int64_t end) const;
  distributed::Communicator& comm_of(const parallel::ZeroBucket& bucket) const;  // dp, or the expert-data group
  void gather_from_shard(const Tensor& shard, Tensor& full);                     // shard layout -> full flat layout
  void moments_to_full(const Tensor& packed, Tensor& full);                      // optimizer's packed segments -> full
  void launch_bucket(int bucket);
  void retire(Pending& pending);
  void retire_completed(std::size_t keep_in_flight);
  void ensure_values(int unit);
  void prefetch_values(int unit);
  void free_values(int unit);  // stage 3: drop a gathered unit and unbind its value views
  bool gathers_16_bit() const { return stage_ == 3 && options_.compute_format != DType::f32; }
  void refresh_16_bit_shard();  // shard_values_16_ <- shard_values_ rounded to compute_format
  void track(std::int64_t delta_bytes);
  void sum_tp_partial_grads();
  void reset_units_left();  // every bucket waits for all its units again
  // `value` summed over the model-parallel groups (each part of the model counted once).
  double sum_over_model_parallel(double value) const;

  nn::GptModel& model_;
  nn::ParameterStore& store_;
  ops::Placement placement_;  // where the model's state lives; every buffer here is placed there
  distributed::Communicator& dp_;
  distributed::Communicator& expert_dp_;  // dp_ unless ep > 1
  int stage_;
  DataParallelOptions options_;
  parallel::ZeroLayout layout_;
  std::vector<parallel::ZeroSegment> segments_;
  std::unique_ptr<optim::AdamWOptimizer> optimizer_;
  std::unique_ptr<distributed::CompressedSum> compressed_;  // exchange compressed / onebit_adam
  std::unique_ptr<LocalSgd> local_sgd_;                     // exchange local
  Tensor shard_grads_, shard_values_;
  Tensor shard_values_16_;              // gathers_16_bit(): the shard in compute_format
  std::vector<Tensor> unit_values_16_;  // gathers_16_bit(): a unit's 16-bit values in flight
  Tensor moment_shard_;                 // scratch for moments_to_full when sharded
  bool communicate_ = true;
  std::vector<int> units_left_;  // per bucket, units whose gradients are not final yet
  std::vector<char> launched_;   // pipelined: per bucket, reduction started this step
  std::vector<char> deferred_;   // pipelined: per bucket, holds a deferred unit
  int buckets_overlapped_ = 0;
  std::deque<Pending> pending_;
  // Stages 2/3, per unit: gradient buffer while its backward runs; stage 3: gathered values,
  // their acquire count and an in-flight prefetch.
  std::vector<Tensor> unit_grads_, unit_values_;
  std::vector<int> value_refs_;
  std::vector<distributed::WorkHandle> value_gathers_;
  bool all_gathered_ = false;
  std::int64_t buffer_bytes_ = 0, buffer_peak_ = 0;
};

}  // namespace myriad::parallel
